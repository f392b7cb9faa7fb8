// ring_shift on both CPU backends (in-process threads, gloo over loopback)
// at 1, 2, 3, 4 and 8 ranks: each rank's recv is the previous rank's send
// bit for bit and nothing outside recv is written; count 0, repeated shifts
// around the whole ring, and the failures every collective has (mismatched
// calls, refused overlap, a missing rank).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "collectives/communicator.hpp"
#include "collectives/run_ranks.hpp"
#include "rank_data.hpp"
#include "test_support.hpp"

namespace fp8c::collectives::testing {
namespace {

using ::testing::HasSubstr;

constexpr std::size_t kGuardBytes = 64;
constexpr std::byte kGuard{0xA5};

int previous_rank(int rank, int size) {
  return (rank + size - 1) % size;
}

std::vector<GroupParam> ring_groups() {
  std::vector<GroupParam> groups;
  for (Backend backend : {Backend::kInProcess, Backend::kGloo}) {
    for (int size : {1, 2, 3, 4, 8}) groups.push_back({backend, size});
  }
  return groups;
}

class RingShiftTest : public ::testing::TestWithParam<GroupParam> {
 protected:
  int world() const { return GetParam().size; }

  void run(const RankFunction& fn) {
    expect_no_failures(run_group(GetParam().backend, world(), std::chrono::seconds(30), fn));
  }
};

struct ShiftCase {
  ElemType dtype;
  std::size_t count;
};

std::vector<ShiftCase> shift_cases() {
  std::vector<ShiftCase> cases;
  for (ElemType dtype :
       {ElemType::e4m3, ElemType::e5m2, ElemType::u8, ElemType::e8m0, ElemType::bf16,
        ElemType::fp16, ElemType::fp32, ElemType::i32, ElemType::fp64}) {
    for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{100003}}) {
      cases.push_back({dtype, count});
    }
  }
  return cases;
}

TEST_P(RingShiftTest, RecvHoldsThePreviousRanksSendBitForBitAndNothingElse) {
  const std::vector<ShiftCase> cases = shift_cases();
  // inputs[k][r]: rank r's send for case k (random bits, so every NaN and
  // FP8 pattern can appear: nothing may be converted).
  std::vector<std::vector<Bytes>> inputs(cases.size());
  for (std::size_t k = 0; k < cases.size(); ++k) {
    for (int r = 0; r < world(); ++r) {
      inputs[k].push_back(rank_input(ElemType::u8, r, world(),
                                     cases[k].count * element_bytes(cases[k].dtype), false,
                                     static_cast<std::uint32_t>(k)));
    }
  }
  run([&](Communicator& comm) {
    const int rank = comm.rank();
    for (std::size_t k = 0; k < cases.size(); ++k) {
      const ShiftCase& c = cases[k];
      const Bytes& mine = inputs[k][static_cast<std::size_t>(rank)];
      const std::size_t bytes = mine.size();
      // send and recv inside guard bytes that must survive the call.
      Bytes send(kGuardBytes + bytes + kGuardBytes, kGuard);
      std::copy(mine.begin(), mine.end(), send.begin() + kGuardBytes);
      const Bytes send_before = send;
      Bytes recv(kGuardBytes + bytes + kGuardBytes, kGuard);
      comm.ring_shift(send.data() + kGuardBytes, recv.data() + kGuardBytes, c.count, c.dtype);

      const std::string what = std::string(to_string(c.dtype)) +
                               " count=" + std::to_string(c.count) + " rank " +
                               std::to_string(rank) + " of " + std::to_string(comm.size());
      const Bytes& expected = inputs[k][static_cast<std::size_t>(previous_rank(rank, comm.size()))];
      EXPECT_TRUE(std::equal(expected.begin(), expected.end(), recv.begin() + kGuardBytes)) << what;
      EXPECT_EQ(Bytes(recv.begin(), recv.begin() + kGuardBytes), Bytes(kGuardBytes, kGuard))
          << "wrote below recv: " << what;
      EXPECT_EQ(Bytes(recv.end() - kGuardBytes, recv.end()), Bytes(kGuardBytes, kGuard))
          << "wrote past recv: " << what;
      EXPECT_EQ(send, send_before) << "send changed: " << what;
    }
  });
}

// size() shifts bring every block back to its owner; interleaved with other
// collectives, so ring_shift shares their numbering.
TEST_P(RingShiftTest, SizeShiftsBringEveryBlockBackAndInterleaveWithOtherCollectives) {
  constexpr std::size_t kCount = 129;
  run([&](Communicator& comm) {
    const int rank = comm.rank(), size = comm.size();
    const Bytes mine = rank_input(ElemType::e4m3, rank, size, kCount, false, 77);
    Bytes a = mine, b(kCount);
    for (int step = 0; step < size; ++step) {
      comm.ring_shift(a.data(), b.data(), kCount, ElemType::e4m3);
      const Bytes expected =
          rank_input(ElemType::e4m3, (rank + size * 2 - step - 1) % size, size, kCount, false, 77);
      ASSERT_EQ(b, expected) << "step " << step << " rank " << rank;
      std::swap(a, b);
      float amax = static_cast<float>(rank + step);
      comm.all_reduce(&amax, &amax, 1, ElemType::fp32, ReduceOp::kMax);
      ASSERT_EQ(amax, static_cast<float>(size - 1 + step));
    }
    EXPECT_EQ(a, mine) << "rank " << rank;
    comm.barrier();
  });
}

TEST_P(RingShiftTest, ZeroCountNeedsNoBuffers) {
  run([&](Communicator& comm) {
    comm.ring_shift(nullptr, nullptr, 0, ElemType::e4m3);
    comm.ring_shift(nullptr, nullptr, 0, ElemType::fp64);
    // Still in step: a real shift after the empty ones.
    const std::int32_t mine = comm.rank() * 10 + 1;
    std::int32_t got = -1;
    comm.ring_shift(&mine, &got, 1, ElemType::i32);
    EXPECT_EQ(got, previous_rank(comm.rank(), comm.size()) * 10 + 1);
    EXPECT_FALSE(comm.poisoned());
  });
}

TEST_P(RingShiftTest, OverlappingSendAndRecvAreRefusedOnEveryRank) {
  const auto failures =
      run_group(GetParam().backend, world(), std::chrono::seconds(10), [&](Communicator& comm) {
        std::vector<float> buffer(16, 1.0f);
        // Exactly in place is refused too: there is no in-place form.
        const float* sends[] = {buffer.data(), buffer.data() + 3};
        comm.ring_shift(sends[comm.rank() % 2], buffer.data(), 8, ElemType::fp32);
      });
  for (int rank = 0; rank < world(); ++rank) {
    const auto error = collective_error_of(failures[static_cast<std::size_t>(rank)]);
    ASSERT_TRUE(error.has_value()) << "rank " << rank << " accepted overlapping buffers";
    EXPECT_EQ(error->kind(), FailureKind::kInvalidArgument) << error->what();
    EXPECT_THAT(error->what(), HasSubstr("ring_shift #0 (count=8, dtype=fp32)"));
    EXPECT_THAT(error->detail(),
                HasSubstr("send and recv overlap; ring_shift has no in-place form"));
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, RingShiftTest, ::testing::ValuesIn(ring_groups()),
                         group_param_name);

// The failures every collective has, on both backends.
class RingShiftFailureTest : public ::testing::TestWithParam<Backend> {
 protected:
  std::vector<std::exception_ptr> run(int size, std::chrono::milliseconds timeout,
                                      const RankFunction& fn) {
    return run_group(GetParam(), size, timeout, fn);
  }

  // Every rank ended with kMismatch whose text contains `text`.
  static void expect_mismatch_everywhere(const std::vector<std::exception_ptr>& failures,
                                         const std::string& text) {
    for (std::size_t rank = 0; rank < failures.size(); ++rank) {
      const auto error = collective_error_of(failures[rank]);
      ASSERT_TRUE(error.has_value()) << "rank " << rank << " did not fail";
      EXPECT_EQ(error->kind(), FailureKind::kMismatch) << error->what();
      EXPECT_THAT(error->detail(), HasSubstr(text)) << "rank " << rank;
    }
  }
};

TEST_P(RingShiftFailureTest, MismatchedCountFailsOnEveryRank) {
  const auto start = Clock::now();
  const auto failures = run(3, std::chrono::seconds(10), [&](Communicator& comm) {
    std::vector<std::uint8_t> send(8, 1), recv(8);
    comm.ring_shift(send.data(), recv.data(), comm.rank() == 2 ? 8 : 7, ElemType::u8);
  });
  EXPECT_LT(seconds_since(start), 5.0) << "the mismatch waited for the timeout";
  expect_mismatch_everywhere(failures,
                             "rank 2 called ring_shift #0 (count=8, dtype=u8) but rank 0 called "
                             "ring_shift #0 (count=7, dtype=u8)");
}

TEST_P(RingShiftFailureTest, MismatchedDtypeFailsOnEveryRank) {
  const auto failures = run(4, std::chrono::seconds(10), [&](Communicator& comm) {
    std::vector<std::uint8_t> send(16, 1), recv(16);
    // A healthy shift first, then rank 1 disagrees on the dtype (same bytes).
    comm.ring_shift(send.data(), recv.data(), 16, ElemType::e4m3);
    const ElemType dtype = comm.rank() == 1 ? ElemType::e5m2 : ElemType::e4m3;
    comm.ring_shift(send.data(), recv.data(), 16, dtype);
  });
  expect_mismatch_everywhere(failures, "rank 1 called ring_shift #1 (count=16, dtype=e5m2)");
}

TEST_P(RingShiftFailureTest, RingShiftAgainstAnotherCollectiveIsAMismatch) {
  const auto failures = run(2, std::chrono::seconds(10), [&](Communicator& comm) {
    std::vector<float> send(4, 1.0f), recv(8);
    if (comm.rank() == 0) {
      comm.ring_shift(send.data(), recv.data(), 4, ElemType::fp32);
    } else {
      comm.all_gather(send.data(), recv.data(), 4, ElemType::fp32);
    }
  });
  expect_mismatch_everywhere(failures, "rank 1 called all_gather #0 (send_count=4");
}

TEST_P(RingShiftFailureTest, MissingRankTimesOutOnEveryWaitingRank) {
  constexpr int kSize = 3;
  const auto failures = run(kSize, std::chrono::milliseconds(1000), [&](Communicator& comm) {
    if (comm.rank() == 1) return;  // never joins
    std::vector<float> send(8, 1.0f), recv(8);
    comm.ring_shift(send.data(), recv.data(), 8, ElemType::fp32);
  });
  EXPECT_EQ(failures[1], nullptr);
  for (int rank : {0, 2}) {
    const auto error = collective_error_of(failures[static_cast<std::size_t>(rank)]);
    ASSERT_TRUE(error.has_value()) << "rank " << rank << " did not fail";
    EXPECT_THAT(error->what(), HasSubstr("ring_shift #0"));
    // gloo: the first rank to time out closes its sockets; its peer may
    // see that first.
    EXPECT_TRUE(error->kind() == FailureKind::kTimeout ||
                (GetParam() == Backend::kGloo && error->kind() == FailureKind::kPeerFailed))
        << error->what();
  }
}

TEST_P(RingShiftFailureTest, PoisonedCommunicatorRefusesRingShift) {
  const auto failures = run(2, std::chrono::seconds(10), [&](Communicator& comm) {
    float value = 1.0f, got = 0.0f;
    EXPECT_THROW(comm.ring_shift(&value, &got, comm.rank() == 0 ? 1 : 0, ElemType::fp32),
                 CollectiveError);
    try {
      comm.ring_shift(&value, &got, 1, ElemType::fp32);
      ADD_FAILURE() << "a poisoned communicator ran ring_shift";
    } catch (const CollectiveError& error) {
      EXPECT_EQ(error.kind(), FailureKind::kPoisoned);
      EXPECT_THAT(error.what(), HasSubstr("ring_shift #1"));
    }
  });
  expect_no_failures(failures);
}

INSTANTIATE_TEST_SUITE_P(Backends, RingShiftFailureTest,
                         ::testing::Values(Backend::kInProcess, Backend::kGloo),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return info.param == Backend::kGloo ? std::string("Gloo")
                                                               : std::string("InProcess");
                         });

}  // namespace
}  // namespace fp8c::collectives::testing
