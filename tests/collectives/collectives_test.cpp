// What every collective computes, for both CPU backends and 1, 2, 4 and 8
// ranks, compared bit for bit with serial references.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <numeric>
#include <vector>

#include "collectives/communicator.hpp"
#include "collectives/run_ranks.hpp"
#include "collectives/segments.hpp"
#include "rank_data.hpp"
#include "test_support.hpp"

namespace fp8c::collectives::testing {
namespace {

class CollectivesTest : public ::testing::TestWithParam<GroupParam> {
 protected:
  int world() const { return GetParam().size; }

  void run(const RankFunction& fn) {
    expect_no_failures(run_group(GetParam().backend, world(), std::chrono::seconds(20), fn));
  }

  // Every rank's input for `dtype`, as all ranks would compute it.
  std::vector<Bytes> all_inputs(ElemType dtype, std::size_t count, bool specials) const {
    std::vector<Bytes> inputs;
    for (int rank = 0; rank < world(); ++rank) {
      inputs.push_back(rank_input(dtype, rank, world(), count, specials));
    }
    return inputs;
  }
};

TEST_P(CollectivesTest, AllGatherConcatenatesRankBlocksInRankOrder) {
  constexpr std::size_t kCount = 37;
  const std::vector<ElemType> dtypes = {ElemType::fp32, ElemType::bf16, ElemType::e4m3,
                                        ElemType::e5m2, ElemType::i32,  ElemType::fp64};
  std::vector<std::vector<Bytes>> inputs;
  std::vector<Bytes> expected;
  for (ElemType dtype : dtypes) {
    inputs.push_back(all_inputs(dtype, kCount, false));
    expected.emplace_back();
    for (const Bytes& input : inputs.back()) {
      expected.back().insert(expected.back().end(), input.begin(), input.end());
    }
  }
  run([&](Communicator& comm) {
    for (std::size_t d = 0; d < dtypes.size(); ++d) {
      Bytes recv(expected[d].size());
      comm.all_gather(inputs[d][comm.rank()].data(), recv.data(), kCount, dtypes[d]);
      EXPECT_EQ(recv, expected[d]) << to_string(dtypes[d]) << " on rank " << comm.rank();
    }
  });
}

// The upstream bug this project exists to prevent: all-gather concatenates
// along the outermost dim, so gathering the LAST dim of a [rows, cols]
// tensor needs segments_to_dim after the collective.
TEST_P(CollectivesTest, AllGatherAlongLastDimEqualsUnshardedTensorAfterPermute) {
  constexpr std::size_t kRows = 5;
  constexpr std::size_t kLocalCols = 3;
  const std::size_t cols = kLocalCols * static_cast<std::size_t>(world());
  std::vector<float> full(kRows * cols);
  std::iota(full.begin(), full.end(), 0.0f);

  run([&](Communicator& comm) {
    // This rank's shard: columns [rank * local, (rank + 1) * local), contiguous [rows][local].
    std::vector<float> shard(kRows * kLocalCols);
    for (std::size_t r = 0; r < kRows; ++r) {
      for (std::size_t c = 0; c < kLocalCols; ++c) {
        shard[r * kLocalCols + c] =
            full[r * cols + static_cast<std::size_t>(comm.rank()) * kLocalCols + c];
      }
    }
    std::vector<float> segments(full.size());
    comm.all_gather(shard.data(), segments.data(), shard.size(), ElemType::fp32);

    const std::array<std::size_t, 2> shard_shape = {kRows, kLocalCols};
    const SegmentedShape shape =
        segmented_shape(shard_shape, 1, static_cast<std::size_t>(comm.size()));
    std::vector<float> gathered(full.size());
    segments_to_dim(segments.data(), gathered.data(), shape, sizeof(float));
    EXPECT_EQ(gathered, full) << "rank " << comm.rank();
    if (comm.size() > 1) {
      EXPECT_NE(segments, full) << "without the permute the result must differ (the bug)";
    }
  });
}

TEST_P(CollectivesTest, AllGatherAlongMiddleDimOfThreeDimTensor) {
  constexpr std::size_t kA = 2, kLocalB = 3, kC = 4;
  const std::size_t b = kLocalB * static_cast<std::size_t>(world());
  std::vector<std::int32_t> full(kA * b * kC);
  std::iota(full.begin(), full.end(), 0);
  run([&](Communicator& comm) {
    std::vector<std::int32_t> shard;
    for (std::size_t a = 0; a < kA; ++a) {
      for (std::size_t lb = 0; lb < kLocalB; ++lb) {
        for (std::size_t c = 0; c < kC; ++c) {
          const std::size_t global_b = static_cast<std::size_t>(comm.rank()) * kLocalB + lb;
          shard.push_back(full[(a * b + global_b) * kC + c]);
        }
      }
    }
    std::vector<std::int32_t> segments(full.size()), gathered(full.size());
    comm.all_gather(shard.data(), segments.data(), shard.size(), ElemType::i32);
    const std::array<std::size_t, 3> shard_shape = {kA, kLocalB, kC};
    segments_to_dim(segments.data(), gathered.data(),
                    segmented_shape(shard_shape, 1, static_cast<std::size_t>(comm.size())),
                    sizeof(std::int32_t));
    EXPECT_EQ(gathered, full);
  });
}

// One case per (op, dtype); max cases carry NaN, signed zeros and ties.
struct ReductionCase {
  ReduceOp op;
  ElemType dtype;
};

std::vector<ReductionCase> reduction_cases() {
  std::vector<ReductionCase> cases;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    for (ElemType dtype : reducible_dtypes()) cases.push_back({op, dtype});
  }
  return cases;
}

TEST_P(CollectivesTest, AllReduceMatchesSerialReferenceBitwise) {
  constexpr std::size_t kCount = 101;
  const std::vector<ReductionCase> cases = reduction_cases();
  std::vector<std::vector<Bytes>> inputs;
  std::vector<Bytes> expected;
  for (const ReductionCase& c : cases) {
    inputs.push_back(all_inputs(c.dtype, kCount, c.op == ReduceOp::kMax));
    expected.push_back(expected_reduction(c.dtype, c.op, inputs.back(), 0, kCount));
  }
  run([&](Communicator& comm) {
    for (std::size_t i = 0; i < cases.size(); ++i) {
      Bytes recv(expected[i].size());
      comm.all_reduce(inputs[i][comm.rank()].data(), recv.data(), kCount, cases[i].dtype,
                      cases[i].op);
      EXPECT_EQ(recv, expected[i]) << reduce_op_name(cases[i].op) << " "
                                   << to_string(cases[i].dtype) << " rank " << comm.rank();
    }
  });
}

TEST_P(CollectivesTest, ReduceScatterGivesRankItsReducedBlockBitwise) {
  constexpr std::size_t kRecvCount = 23;
  const std::size_t send_count = kRecvCount * static_cast<std::size_t>(world());
  const std::vector<ReductionCase> cases = reduction_cases();
  std::vector<std::vector<Bytes>> inputs;
  for (const ReductionCase& c : cases) {
    inputs.push_back(all_inputs(c.dtype, send_count, c.op == ReduceOp::kMax));
  }
  run([&](Communicator& comm) {
    const auto rank = static_cast<std::size_t>(comm.rank());
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const Bytes expected =
          expected_reduction(cases[i].dtype, cases[i].op, inputs[i], rank * kRecvCount, kRecvCount);
      Bytes recv(expected.size());
      comm.reduce_scatter(inputs[i][rank].data(), recv.data(), kRecvCount, cases[i].dtype,
                          cases[i].op);
      EXPECT_EQ(recv, expected) << reduce_op_name(cases[i].op) << " " << to_string(cases[i].dtype)
                                << " rank " << rank;
    }
  });
}

// Summing 2^24 + 1 + 1 + ... in rank order keeps 2^24 (each +1 is a tie that
// rounds to even); any other order would reach 2^24 + (size - 1) rounded.
TEST_P(CollectivesTest, SumOrderIsRankOrder) {
  run([&](Communicator& comm) {
    const float mine = comm.rank() == 0 ? 16777216.0f : 1.0f;
    float total = 0.0f;
    comm.all_reduce(&mine, &total, 1, ElemType::fp32, ReduceOp::kSum);
    EXPECT_EQ(total, 16777216.0f);
  });
}

// bfloat16 sums are rounded once, after summing in float32: 1 + k * 2^-8
// lands on a representable value or a tie, while rounding after every add
// would stay at 1 (each 1 + 2^-8 is a tie that rounds to even).
TEST_P(CollectivesTest, BFloat16SumAccumulatesInFloat32AndRoundsOnceToNearestEven) {
  run([&](Communicator& comm) {
    const std::uint16_t mine = comm.rank() == 0 ? 0x3F80 /* 1.0 */ : 0x3B80 /* 2^-8 */;
    std::uint16_t total = 0;
    comm.all_reduce(&mine, &total, 1, ElemType::bf16, ReduceOp::kSum);
    const float exact = 1.0f + static_cast<float>(comm.size() - 1) * 0x1p-8f;
    EXPECT_EQ(total, reference_float_to_bf16(exact)) << "rank " << comm.rank();
    if (comm.size() >= 3) {
      EXPECT_NE(total, 0x3F80) << "rounded more than once";
    }
  });
}

TEST_P(CollectivesTest, ReduceScatterAlongLastDimAfterPrePermute) {
  constexpr std::size_t kRows = 4, kLocalCols = 2;
  const std::size_t cols = kLocalCols * static_cast<std::size_t>(world());
  run([&](Communicator& comm) {
    // Every rank holds a full [rows][cols] partial sum: value = row*100 + col + rank.
    std::vector<float> partial(kRows * cols);
    for (std::size_t r = 0; r < kRows; ++r) {
      for (std::size_t c = 0; c < cols; ++c) {
        partial[r * cols + c] = static_cast<float>(r * 100 + c) + static_cast<float>(comm.rank());
      }
    }
    const std::array<std::size_t, 2> shard_shape = {kRows, kLocalCols};
    std::vector<float> segments(partial.size());
    dim_to_segments(partial.data(), segments.data(),
                    segmented_shape(shard_shape, 1, static_cast<std::size_t>(comm.size())),
                    sizeof(float));
    std::vector<float> mine(kRows * kLocalCols);
    comm.reduce_scatter(segments.data(), mine.data(), mine.size(), ElemType::fp32, ReduceOp::kSum);
    const float rank_sum = static_cast<float>(comm.size() * (comm.size() - 1) / 2);
    for (std::size_t r = 0; r < kRows; ++r) {
      for (std::size_t c = 0; c < kLocalCols; ++c) {
        const std::size_t global_c = static_cast<std::size_t>(comm.rank()) * kLocalCols + c;
        const float expected =
            static_cast<float>(r * 100 + global_c) * static_cast<float>(comm.size()) + rank_sum;
        EXPECT_EQ(mine[r * kLocalCols + c], expected) << "row " << r << " col " << global_c;
      }
    }
  });
}

TEST_P(CollectivesTest, BroadcastCopiesRootBufferFromEveryRoot) {
  constexpr std::size_t kCount = 19;
  std::vector<Bytes> payloads;
  for (int root = 0; root < world(); ++root) {
    payloads.push_back(rank_input(ElemType::e4m3, root, world(), kCount, false, 5));
  }
  run([&](Communicator& comm) {
    for (int root = 0; root < comm.size(); ++root) {
      const Bytes& payload = payloads[static_cast<std::size_t>(root)];
      Bytes recv(kCount, std::byte{0xEE});
      const void* send = comm.rank() == root ? payload.data() : nullptr;
      comm.broadcast(send, recv.data(), kCount, ElemType::e4m3, root);
      EXPECT_EQ(recv, payload) << "root " << root << " rank " << comm.rank();
    }
  });
}

TEST_P(CollectivesTest, InPlaceVariantsAsNcclDefinesThem) {
  constexpr std::size_t kCount = 17;
  const std::size_t n = static_cast<std::size_t>(world());
  const std::vector<Bytes> gather_inputs = all_inputs(ElemType::fp32, kCount, false);
  const std::vector<Bytes> scatter_inputs = all_inputs(ElemType::bf16, kCount * n, false);
  const std::vector<Bytes> reduce_inputs = all_inputs(ElemType::fp16, kCount, false);
  const Bytes reduced =
      expected_reduction(ElemType::fp16, ReduceOp::kSum, reduce_inputs, 0, kCount);
  run([&](Communicator& comm) {
    const auto rank = static_cast<std::size_t>(comm.rank());
    // all_gather in place: send == recv + rank * send_count.
    Bytes gathered(kCount * sizeof(float) * n);
    std::memcpy(gathered.data() + rank * kCount * sizeof(float), gather_inputs[rank].data(),
                kCount * sizeof(float));
    comm.all_gather(gathered.data() + rank * kCount * sizeof(float), gathered.data(), kCount,
                    ElemType::fp32);
    Bytes expected_gather;
    for (const Bytes& input : gather_inputs) {
      expected_gather.insert(expected_gather.end(), input.begin(), input.end());
    }
    EXPECT_EQ(gathered, expected_gather) << "all_gather in place, rank " << rank;

    // reduce_scatter in place: recv == send + rank * recv_count.
    Bytes scatter = scatter_inputs[rank];
    std::byte* my_block = scatter.data() + rank * kCount * sizeof(std::uint16_t);
    comm.reduce_scatter(scatter.data(), my_block, kCount, ElemType::bf16, ReduceOp::kSum);
    const Bytes expected_block =
        expected_reduction(ElemType::bf16, ReduceOp::kSum, scatter_inputs, rank * kCount, kCount);
    EXPECT_EQ(Bytes(my_block, my_block + expected_block.size()), expected_block)
        << "reduce_scatter in place, rank " << rank;

    // all_reduce in place: send == recv.
    Bytes reduce = reduce_inputs[rank];
    comm.all_reduce(reduce.data(), reduce.data(), kCount, ElemType::fp16, ReduceOp::kSum);
    EXPECT_EQ(reduce, reduced) << "all_reduce in place, rank " << rank;

    // broadcast in place on the root: send == recv.
    std::vector<double> values(kCount, static_cast<double>(rank) + 0.25);
    comm.broadcast(values.data(), values.data(), kCount, ElemType::fp64, comm.size() - 1);
    EXPECT_EQ(values, std::vector<double>(kCount, static_cast<double>(comm.size() - 1) + 0.25));
  });
}

TEST_P(CollectivesTest, ZeroCountCollectivesAndBarrierComplete) {
  run([&](Communicator& comm) {
    comm.all_gather(nullptr, nullptr, 0, ElemType::fp32);
    comm.reduce_scatter(nullptr, nullptr, 0, ElemType::fp32, ReduceOp::kSum);
    comm.all_reduce(nullptr, nullptr, 0, ElemType::bf16, ReduceOp::kMax);
    comm.broadcast(nullptr, nullptr, 0, ElemType::u8, 0);
    comm.barrier();
    EXPECT_FALSE(comm.poisoned());
  });
}

// Many back-to-back collectives of different kinds and sizes: the rendezvous
// is reused for each, and a rank racing ahead must never see stale data.
TEST_P(CollectivesTest, LongMixedSequenceStaysConsistent) {
  run([&](Communicator& comm) {
    const auto n = static_cast<std::size_t>(comm.size());
    for (int step = 0; step < 40; ++step) {
      const std::size_t count = 1 + static_cast<std::size_t>(step % 7) * 13;
      std::vector<float> mine(count, static_cast<float>(comm.rank() + step));
      std::vector<float> gathered(count * n);
      comm.all_gather(mine.data(), gathered.data(), count, ElemType::fp32);
      for (std::size_t r = 0; r < n; ++r) {
        ASSERT_EQ(gathered[r * count], static_cast<float>(static_cast<int>(r) + step));
      }
      float amax = static_cast<float>(comm.rank() * step);
      comm.all_reduce(&amax, &amax, 1, ElemType::fp32, ReduceOp::kMax);
      ASSERT_EQ(amax, static_cast<float>((comm.size() - 1) * step));
      if (step % 5 == 0) comm.barrier();
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Groups, CollectivesTest, ::testing::ValuesIn(all_groups()),
                         group_param_name);

}  // namespace
}  // namespace fp8c::collectives::testing
