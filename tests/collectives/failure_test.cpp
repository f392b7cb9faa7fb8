// Failures must be errors on every waiting rank, never hangs: a missing
// rank, disagreeing calls, refused arguments, a rank that dies, and a
// poisoned communicator.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>
#include <vector>

#include "collectives/communicator.hpp"
#include "collectives/gloo_communicator.hpp"
#include "collectives/in_process_group.hpp"
#include "collectives/run_ranks.hpp"
#include "test_support.hpp"

namespace fp8c::collectives::testing {
namespace {

using ::testing::HasSubstr;

constexpr auto kShortTimeout = std::chrono::milliseconds(1000);

// A rank released because a peer failed: kPeerFailed if it was already
// waiting, kPoisoned if it reached the collective after the failure.
void expect_released_by_peer(const CollectiveError& error) {
  EXPECT_TRUE(error.kind() == FailureKind::kPeerFailed || error.kind() == FailureKind::kPoisoned)
      << error.what();
}

class FailureTest : public ::testing::TestWithParam<Backend> {
 protected:
  std::vector<std::exception_ptr> run(int size, std::chrono::milliseconds timeout,
                                      const RankFunction& fn) {
    return run_group(GetParam(), size, timeout, fn);
  }
  bool gloo() const { return GetParam() == Backend::kGloo; }
};

TEST_P(FailureTest, MissingRankTimesOutWithClearErrorOnEveryWaitingRank) {
  constexpr int kSize = 4;
  constexpr int kMissing = 3;
  std::vector<double> elapsed(kSize, 0.0);
  const auto failures = run(kSize, kShortTimeout, [&](Communicator& comm) {
    if (comm.rank() == kMissing) return;  // never joins the collective
    std::vector<float> send(8, 1.0f), recv(8 * kSize);
    const auto start = Clock::now();
    try {
      comm.all_gather(send.data(), recv.data(), send.size(), ElemType::fp32);
    } catch (...) {
      elapsed[static_cast<std::size_t>(comm.rank())] = seconds_since(start);
      throw;
    }
  });
  EXPECT_EQ(failures[kMissing], nullptr);
  for (int rank = 0; rank < kSize; ++rank) {
    if (rank == kMissing) continue;
    const auto error = collective_error_of(failures[static_cast<std::size_t>(rank)]);
    ASSERT_TRUE(error.has_value()) << "rank " << rank << " did not fail";
    EXPECT_EQ(error->rank(), rank);
    EXPECT_THAT(error->what(), HasSubstr("all_gather #0"));
    EXPECT_THAT(error->what(), HasSubstr("on rank " + std::to_string(rank) + " of 4"));
    if (gloo()) {
      // gloo's ring: the first rank to time out closes its sockets, so its
      // neighbours may learn of the failure as a closed connection.
      EXPECT_TRUE(error->kind() == FailureKind::kTimeout ||
                  error->kind() == FailureKind::kPeerFailed)
          << error->what();
    } else {
      EXPECT_EQ(error->kind(), FailureKind::kTimeout) << error->what();
      EXPECT_THAT(
          error->what(),
          HasSubstr("timed out after 1000 ms waiting for rank(s) 3 to arrive at all_gather #0"));
    }
    EXPECT_LT(elapsed[static_cast<std::size_t>(rank)], 1.0 + 1.5) << error->what();
  }
}

TEST_P(FailureTest, MismatchedCountFailsOnEveryRankWithoutWaitingForTimeout) {
  const auto start = Clock::now();
  const auto failures = run(4, std::chrono::seconds(10), [&](Communicator& comm) {
    const std::size_t count = comm.rank() == 2 ? 8 : 4;
    std::vector<float> data(8, 1.0f);
    comm.all_reduce(data.data(), data.data(), count, ElemType::fp32, ReduceOp::kSum);
  });
  EXPECT_LT(seconds_since(start), 5.0);
  for (int rank = 0; rank < 4; ++rank) {
    const auto error = collective_error_of(failures[static_cast<std::size_t>(rank)]);
    ASSERT_TRUE(error.has_value()) << "rank " << rank;
    EXPECT_EQ(error->kind(), FailureKind::kMismatch) << error->what();
    EXPECT_THAT(error->what(), HasSubstr("rank 2 called all_reduce #0 (count=8, dtype=fp32"));
    EXPECT_THAT(error->what(), HasSubstr("but rank 0 called all_reduce #0 (count=4"));
  }
}

TEST_P(FailureTest, MismatchedOpFails) {
  const auto failures = run(2, std::chrono::seconds(10), [&](Communicator& comm) {
    float amax = 1.0f;
    comm.all_reduce(&amax, &amax, 1, ElemType::fp32,
                    comm.rank() == 0 ? ReduceOp::kMax : ReduceOp::kSum);
  });
  for (const auto& failure : failures) {
    const auto error = collective_error_of(failure);
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->kind(), FailureKind::kMismatch);
    EXPECT_THAT(error->what(), HasSubstr("op=sum"));
    EXPECT_THAT(error->what(), HasSubstr("op=max"));
  }
}

TEST_P(FailureTest, MismatchedCollectiveAndDtypeFail) {
  const auto failures = run(4, std::chrono::seconds(10), [&](Communicator& comm) {
    std::vector<float> data(16, 1.0f), out(16);
    if (comm.rank() == 1) {
      comm.reduce_scatter(data.data(), out.data(), 4, ElemType::fp32, ReduceOp::kSum);
    } else if (comm.rank() == 3) {
      comm.all_gather(data.data(), out.data(), 4, ElemType::i32);
    } else {
      comm.all_gather(data.data(), out.data(), 4, ElemType::fp32);
    }
  });
  for (const auto& failure : failures) {
    const auto error = collective_error_of(failure);
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->kind(), FailureKind::kMismatch);
    EXPECT_THAT(error->detail(), HasSubstr("rank 1 called reduce_scatter #0 (recv_count=4"));
  }
}

TEST_P(FailureTest, PoisonedCommunicatorRefusesLaterCallsImmediately) {
  const auto failures = run(2, std::chrono::seconds(10), [&](Communicator& comm) {
    float value = 1.0f;
    try {
      comm.all_reduce(&value, &value, comm.rank() == 0 ? 1 : 0, ElemType::fp32, ReduceOp::kSum);
      ADD_FAILURE() << "mismatch not detected";
    } catch (const CollectiveError& error) {
      EXPECT_EQ(error.kind(), FailureKind::kMismatch);
    }
    EXPECT_TRUE(comm.poisoned());
    EXPECT_THAT(comm.poison_reason(), HasSubstr("mismatch"));
    const auto start = Clock::now();
    try {
      comm.barrier();
      ADD_FAILURE() << "a poisoned communicator ran a barrier";
    } catch (const CollectiveError& error) {
      EXPECT_EQ(error.kind(), FailureKind::kPoisoned);
      EXPECT_THAT(error.what(), HasSubstr("barrier #1"));
      EXPECT_THAT(error.what(), HasSubstr("poisoned by an earlier error"));
      EXPECT_THAT(error.what(), HasSubstr("all_reduce #0"));
    }
    EXPECT_LT(seconds_since(start), 0.5);
  });
  expect_no_failures(failures);
}

TEST_P(FailureTest, Fp8ReductionsAreRefused) {
  const auto failures = run(2, std::chrono::seconds(10), [&](Communicator& comm) {
    std::vector<std::uint8_t> data(4, 0x38);
    comm.all_reduce(data.data(), data.data(), data.size(), ElemType::e4m3, ReduceOp::kMax);
  });
  for (const auto& failure : failures) {
    const auto error = collective_error_of(failure);
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->kind(), FailureKind::kInvalidArgument);
    EXPECT_THAT(error->what(), HasSubstr("reduction on e4m3 is refused"));
  }
  const auto scatter = run(1, std::chrono::seconds(10), [&](Communicator& comm) {
    std::uint8_t in = 0, out = 0;
    comm.reduce_scatter(&in, &out, 1, ElemType::e5m2, ReduceOp::kSum);
  });
  const auto error = collective_error_of(scatter[0]);
  ASSERT_TRUE(error.has_value());
  EXPECT_THAT(error->what(), HasSubstr("reduction on e5m2 is refused"));
}

TEST_P(FailureTest, RankThatRefusesReleasesItsPeersPromptly) {
  const auto start = Clock::now();
  const auto failures = run(4, std::chrono::seconds(20), [&](Communicator& comm) {
    std::vector<float> data(4, 1.0f);
    const ElemType dtype = comm.rank() == 0 ? ElemType::e4m3 : ElemType::fp32;
    comm.all_reduce(data.data(), data.data(), 4, dtype, ReduceOp::kSum);
  });
  EXPECT_LT(seconds_since(start), 10.0) << "peers waited for the timeout";
  const auto refused = collective_error_of(failures[0]);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->kind(), FailureKind::kInvalidArgument);
  for (std::size_t rank = 1; rank < failures.size(); ++rank) {
    const auto error = collective_error_of(failures[rank]);
    ASSERT_TRUE(error.has_value()) << "rank " << rank;
    expect_released_by_peer(*error);
    if (!gloo()) {
      EXPECT_THAT(error->what(), HasSubstr("rank 0 failed"));
    }
  }
}

TEST_P(FailureTest, ThrowingRankFunctionAbortsAndReleasesPeers) {
  const auto start = Clock::now();
  const auto failures = run(3, std::chrono::seconds(20), [&](Communicator& comm) {
    if (comm.rank() == 1) throw std::runtime_error("boom in the layer");
    std::vector<float> send(2, 1.0f), recv(6);
    comm.all_gather(send.data(), recv.data(), 2, ElemType::fp32);
  });
  EXPECT_LT(seconds_since(start), 10.0) << "peers waited for the timeout";
  ASSERT_NE(failures[1], nullptr);
  EXPECT_THROW(std::rethrow_exception(failures[1]), std::runtime_error);
  for (std::size_t rank : {0u, 2u}) {
    const auto error = collective_error_of(failures[rank]);
    ASSERT_TRUE(error.has_value()) << "rank " << rank;
    expect_released_by_peer(*error);
    if (!gloo()) {
      EXPECT_THAT(error->what(), HasSubstr("boom in the layer"));
    }
  }
}

TEST_P(FailureTest, InvalidArgumentsAreRefusedAndPoison) {
  const auto failures = run(2, std::chrono::seconds(10), [&](Communicator& comm) {
    std::vector<float> buffer(16, 0.0f);
    // Overlapping but not NCCL's in-place position.
    EXPECT_THROW(
        {
          try {
            comm.all_gather(buffer.data() + 1, buffer.data(), 4, ElemType::fp32);
          } catch (const CollectiveError& error) {
            EXPECT_EQ(error.kind(), FailureKind::kInvalidArgument);
            EXPECT_THAT(error.what(), HasSubstr("send == recv + rank * send_count"));
            throw;
          }
        },
        CollectiveError);
    EXPECT_TRUE(comm.poisoned());
  });
  for (const auto& failure : failures) EXPECT_EQ(failure, nullptr);

  const auto root = run(1, std::chrono::seconds(10), [&](Communicator& comm) {
    float value = 0.0f;
    comm.broadcast(&value, &value, 1, ElemType::fp32, 1);
  });
  const auto error = collective_error_of(root[0]);
  ASSERT_TRUE(error.has_value());
  EXPECT_THAT(error->what(), HasSubstr("root 1 is not a rank of this group of 1"));

  const auto null = run(1, std::chrono::seconds(10), [&](Communicator& comm) {
    comm.all_reduce(nullptr, nullptr, 3, ElemType::fp32, ReduceOp::kSum);
  });
  const auto null_error = collective_error_of(null[0]);
  ASSERT_TRUE(null_error.has_value());
  EXPECT_THAT(null_error->what(), HasSubstr("send is null"));
}

INSTANTIATE_TEST_SUITE_P(Backends, FailureTest,
                         ::testing::Values(Backend::kInProcess, Backend::kGloo),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return info.param == Backend::kGloo ? std::string("Gloo")
                                                               : std::string("InProcess");
                         });

TEST(InProcessGroupTest, EachRankIsHandedOutOnce) {
  InProcessGroup group(2);
  auto first = group.communicator(0);
  EXPECT_THROW(group.communicator(0), std::invalid_argument);
  EXPECT_THROW(group.communicator(2), std::invalid_argument);
  EXPECT_THROW(InProcessGroup(0), std::invalid_argument);
}

TEST(InProcessGroupTest, RankArrivingAfterTimeoutIsRefusedAsPoisoned) {
  InProcessGroup group(2, std::chrono::milliseconds(200));
  auto early = group.communicator(0);
  auto late = group.communicator(1);
  EXPECT_THROW(early->barrier(), CollectiveError);
  try {
    late->barrier();
    ADD_FAILURE() << "late rank passed a failed barrier";
  } catch (const CollectiveError& error) {
    EXPECT_EQ(error.kind(), FailureKind::kPoisoned);
    EXPECT_THAT(error.what(), HasSubstr("the group was poisoned by an earlier error"));
    EXPECT_THAT(error.what(), HasSubstr("waiting for rank(s) 1 to arrive at barrier #0"));
  }
}

TEST(GlooConnectTest, MissingRankMakesConnectTimeOut) {
  auto store = GlooRendezvousStore::in_memory();
  GlooOptions options;
  options.timeout = kShortTimeout;
  std::vector<std::exception_ptr> failures(2);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        connect_gloo(rank, 3, store, options);  // rank 2 never connects
      } catch (...) {
        failures[static_cast<std::size_t>(rank)] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_LT(seconds_since(start), 1.0 + 1.5);
  for (const auto& failure : failures) {
    const auto error = collective_error_of(failure);
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->operation(), "connect");
    EXPECT_EQ(error->kind(), FailureKind::kTimeout) << error->what();
  }
}

// gloo is a module (gloo_communicator.hpp). The tests link it, so it is the
// copy already in the process, found without a search; the tool's search and
// its absence are tested through `fp8c verify` (tests/cpu).
TEST(GlooModuleTest, IsTheModuleLinkedIntoThisProgram) {
  EXPECT_TRUE(gloo_available()) << gloo_unavailable_reason();
  EXPECT_EQ(gloo_unavailable_reason(), "");
  EXPECT_THAT(gloo_module_path(), ::testing::EndsWith("/libfp8c_gloo.so"));
}

}  // namespace
}  // namespace fp8c::collectives::testing
