// The parts of the NCCL backend that need no GPU: type mapping and version
// rules, loading libnccl (and failing clearly without it), the launch
// environment, and the TCP exchange of the unique id on loopback.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <thread>

#include "collectives/device/nccl_bootstrap.hpp"
#include "collectives/device/nccl_library.hpp"
#include "collectives/device/unique_id_exchange.hpp"
#include "runtime/dynamic_library.hpp"

namespace fp8c::runtime {
namespace {

using collectives::CollectiveError;
using collectives::FailureKind;
using collectives::LaunchEnvError;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

TEST(NcclTypes, EveryDTypeMapsToItsNcclType) {
  const int v = 22809;
  EXPECT_EQ(nccl_data_type(ElemType::fp32, v), ncclFloat32);
  EXPECT_EQ(nccl_data_type(ElemType::bf16, v), ncclBfloat16);
  EXPECT_EQ(nccl_data_type(ElemType::fp16, v), ncclFloat16);
  EXPECT_EQ(nccl_data_type(ElemType::u8, v), ncclUint8);
  EXPECT_EQ(nccl_data_type(ElemType::i32, v), ncclInt32);
  EXPECT_EQ(nccl_data_type(ElemType::fp64, v), ncclFloat64);
  EXPECT_EQ(nccl_data_type(ElemType::e4m3, v), ncclFloat8e4m3);
  EXPECT_EQ(nccl_data_type(ElemType::e5m2, v), ncclFloat8e5m2);
  EXPECT_EQ(nccl_reduce_op(collectives::ReduceOp::kSum), ncclSum);
  EXPECT_EQ(nccl_reduce_op(collectives::ReduceOp::kMax), ncclMax);
}

TEST(NcclTypes, Fp8TravelsAsUint8BeforeNccl2243) {
  EXPECT_FALSE(nccl_has_fp8(22402));
  EXPECT_TRUE(nccl_has_fp8(22403));
  EXPECT_EQ(nccl_data_type(ElemType::e4m3, 22402), ncclUint8);
  EXPECT_EQ(nccl_data_type(ElemType::e5m2, 21403), ncclUint8);
  EXPECT_EQ(nccl_data_type(ElemType::e4m3, 22403), ncclFloat8e4m3);
  EXPECT_EQ(nccl_data_type(ElemType::e5m2, 22403), ncclFloat8e5m2);
  // Nothing else changes with the version.
  EXPECT_EQ(nccl_data_type(ElemType::bf16, 21403), ncclBfloat16);
}

TEST(NcclTypes, VersionCodesReadAsMajorMinorPatch) {
  EXPECT_EQ(nccl_version_text(22809), "2.28.9");
  EXPECT_EQ(nccl_version_text(21403), "2.14.3");
  EXPECT_EQ(nccl_version_text(2708), "2.7.8");  // the scheme before 2.9
  EXPECT_EQ(kFirstNcclVersionWithFp8, NCCL_VERSION(2, 24, 3));
  EXPECT_EQ(kMinimumNcclVersion, NCCL_VERSION(2, 14, 3));
}

TEST(NcclLibrary, MissingLibraryIsUnavailableNamingLibnccl) {
  try {
    load_nccl({"libnccl-missing-for-fp8c-test.so.2"});
    FAIL() << "loaded a library that does not exist";
  } catch (const Unavailable& e) {
    EXPECT_THAT(e.what(), HasSubstr("libnccl"));
    EXPECT_THAT(e.what(), HasSubstr("libnccl-missing-for-fp8c-test.so.2"));
  }
}

TEST(NcclLibrary, EnvironmentVariableNamesTheLibrary) {
  ::setenv("FP8C_NCCL_LIBRARY", "/opt/custom/libnccl.so.2", 1);
  EXPECT_EQ(nccl_library_names(), std::vector<std::string>{"/opt/custom/libnccl.so.2"});
  ::unsetenv("FP8C_NCCL_LIBRARY");
  EXPECT_EQ(nccl_library_names(), std::vector<std::string>{"libnccl.so.2"});
}

// libnccl loads without a GPU (it links cudart statically) and makes unique
// ids; only communicators need the driver.
TEST(NcclLibrary, InstalledLibraryLoadsAndMakesUniqueIdsWithoutGpu) {
  NcclApi api;
  try {
    api = load_nccl(nccl_library_names());
  } catch (const Unavailable& e) {
    GTEST_SKIP() << "no NCCL here: " << e.what();
  }
  EXPECT_GE(api.version, kMinimumNcclVersion);
  // ring_shift's point-to-point entry points.
  EXPECT_NE(api.ncclSend, nullptr);
  EXPECT_NE(api.ncclRecv, nullptr);
  ncclUniqueId id;
  EXPECT_EQ(api.ncclGetUniqueId(&id), ncclSuccess);
  EXPECT_THAT(nccl_error_text(api, ncclRemoteError, nullptr), HasSubstr("NCCL error 6"));
}

// --- launch environment ---

collectives::EnvLookup env(std::map<std::string, std::string> values) {
  return [values](std::string_view name) -> std::optional<std::string> {
    const auto it = values.find(std::string(name));
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

std::map<std::string, std::string> torchrun(int rank, int world, int port = 29500) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"MASTER_ADDR", "node0"},
          {"MASTER_PORT", std::to_string(port)}};
}

TEST(NcclBootstrapEnv, TorchrunVariablesAndIdPortNextToMasterPort) {
  const NcclBootstrap b = parse_nccl_bootstrap(env(torchrun(3, 8)));
  EXPECT_EQ(b.rank, 3);
  EXPECT_EQ(b.world_size, 8);
  EXPECT_EQ(b.local_rank, 3);
  EXPECT_EQ(b.master_addr, "node0");
  EXPECT_EQ(b.master_port, 29500);
  EXPECT_EQ(b.id_port, 29501);
}

TEST(NcclBootstrapEnv, FromAParsedLaunchEnvironment) {
  collectives::LaunchEnv launch;
  launch.rank = 1;
  launch.world_size = 2;
  launch.local_rank = 1;
  launch.master_addr = "node0";
  launch.master_port = 6000;
  const NcclBootstrap b = nccl_bootstrap_from(launch);
  EXPECT_EQ(b.rank, 1);
  EXPECT_EQ(b.world_size, 2);
  EXPECT_EQ(b.id_port, 6001);
  launch.master_port = 65535;
  EXPECT_THROW(nccl_bootstrap_from(launch), LaunchEnvError);
}

TEST(NcclBootstrapEnv, IdPortCanBeSetExplicitly) {
  auto values = torchrun(0, 2);
  values["FP8C_NCCL_ID_PORT"] = "40000";
  EXPECT_EQ(parse_nccl_bootstrap(env(values)).id_port, 40000);
  for (const char* bad : {"", "0", "65536", "12a", "-1", " 80"}) {
    values["FP8C_NCCL_ID_PORT"] = bad;
    EXPECT_THROW(parse_nccl_bootstrap(env(values)), LaunchEnvError) << "'" << bad << "'";
  }
}

TEST(NcclBootstrapEnv, HighestMasterPortNeedsAnExplicitIdPort) {
  try {
    parse_nccl_bootstrap(env(torchrun(0, 2, 65535)));
    FAIL() << "accepted MASTER_PORT=65535 with no room for the id port";
  } catch (const LaunchEnvError& e) {
    EXPECT_THAT(e.what(), HasSubstr("FP8C_NCCL_ID_PORT"));
  }
}

TEST(NcclBootstrapEnv, MpirunVariablesStandInForTorchrunsRanks) {
  const NcclBootstrap b = parse_nccl_bootstrap(env({{"OMPI_COMM_WORLD_RANK", "5"},
                                                    {"OMPI_COMM_WORLD_SIZE", "6"},
                                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                    {"MASTER_ADDR", "10.0.0.1"},
                                                    {"MASTER_PORT", "1234"}}));
  EXPECT_EQ(b.rank, 5);
  EXPECT_EQ(b.world_size, 6);
  EXPECT_EQ(b.local_rank, 1);
  EXPECT_EQ(b.id_port, 1235);
}

TEST(NcclBootstrapEnv, ErrorsNameTheVariable) {
  auto values = torchrun(0, 2);
  values.erase("RANK");
  EXPECT_THAT([&] { parse_nccl_bootstrap(env(values)); },
              ::testing::ThrowsMessage<LaunchEnvError>(HasSubstr("RANK is not set")));
  values = torchrun(0, 2);
  values["RANK"] = "2";
  EXPECT_THAT([&] { parse_nccl_bootstrap(env(values)); },
              ::testing::ThrowsMessage<LaunchEnvError>(HasSubstr("RANK='2'")));
  // A bad mpirun value says where RANK came from.
  EXPECT_THAT(
      [&] {
        parse_nccl_bootstrap(env({{"OMPI_COMM_WORLD_RANK", "7"},
                                  {"OMPI_COMM_WORLD_SIZE", "2"},
                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                  {"MASTER_ADDR", "a"},
                                  {"MASTER_PORT", "1"}}));
      },
      ::testing::ThrowsMessage<LaunchEnvError>(HasSubstr("OMPI_COMM_WORLD_RANK")));
}

// --- unique id exchange on loopback ---

UniqueIdBytes test_id(char seed) {
  UniqueIdBytes id;
  for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(seed + 7 * i);
  return id;
}

// A port nothing listens on right now (the kernel picks a free one).
std::uint16_t free_port() {
  const UniqueIdServer probe(0, 2);
  return probe.port();
}

TEST(NcclIdExchange, EveryRankReceivesRankZerosId) {
  constexpr int kWorld = 4;
  const UniqueIdBytes id = test_id(3);
  UniqueIdServer server(0, kWorld);
  std::vector<UniqueIdBytes> received(kWorld);
  std::vector<std::thread> ranks;
  for (int r = 1; r < kWorld; ++r) {
    ranks.emplace_back(
        [&, r] { received[r] = fetch_unique_id("127.0.0.1", server.port(), r, kWorld, 10s); });
  }
  server.serve(id, 10s);
  for (auto& t : ranks) t.join();
  for (int r = 1; r < kWorld; ++r) EXPECT_EQ(received[r], id) << "rank " << r;
}

TEST(NcclIdExchange, RanksStartedBeforeRankZeroRetryUntilItListens) {
  constexpr int kWorld = 3;
  const std::uint16_t port = free_port();
  NcclBootstrap b;
  b.world_size = kWorld;
  b.master_addr = "localhost";  // resolves to ::1 or 127.0.0.1: both must work
  b.id_port = port;
  std::vector<UniqueIdBytes> received(kWorld);
  std::vector<std::thread> ranks;
  for (int r = 1; r < kWorld; ++r) {
    ranks.emplace_back([&, r, b]() mutable {
      b.rank = r;
      received[r] = exchange_unique_id(
          b, [] { return test_id(0); }, 10s);
    });
  }
  std::this_thread::sleep_for(300ms);  // the others are knocking on a closed port
  int made = 0;
  received[0] = exchange_unique_id(
      b, [&] { return ++made, test_id(9); }, 10s);
  for (auto& t : ranks) t.join();
  EXPECT_EQ(made, 1);
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(received[r], test_id(9)) << "rank " << r;
}

TEST(NcclIdExchange, OneRankNeedsNoNetwork) {
  NcclBootstrap b = single_rank_bootstrap();
  b.master_addr = "no-such-host.invalid";
  b.id_port = 1;
  EXPECT_EQ(exchange_unique_id(
                b, [] { return test_id(5); }, 100ms),
            test_id(5));
}

TEST(NcclIdExchange, NobodyListeningTimesOutNamingAddressAndPort) {
  const std::uint16_t port = free_port();
  const auto start = std::chrono::steady_clock::now();
  try {
    fetch_unique_id("127.0.0.1", port, 1, 2, 400ms);
    FAIL() << "fetched an id from nobody";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(e.kind(), FailureKind::kTimeout);
    EXPECT_THAT(e.what(), HasSubstr("127.0.0.1:" + std::to_string(port)));
    EXPECT_THAT(e.what(), HasSubstr("MASTER_PORT"));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(NcclIdExchange, RankZeroTimesOutNamingTheRanksThatNeverCame) {
  UniqueIdServer server(0, 3);
  std::thread rank1([&] { fetch_unique_id("127.0.0.1", server.port(), 1, 3, 10s); });
  try {
    server.serve(test_id(1), 600ms);
    FAIL() << "served a group with a missing rank";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(e.kind(), FailureKind::kTimeout);
    EXPECT_THAT(e.what(), HasSubstr("rank(s) 2 did not fetch"));
  }
  rank1.join();
}

TEST(NcclIdExchange, DifferentWorldSizesAreAMismatchOnBothSides) {
  UniqueIdServer server(0, 2);
  std::optional<CollectiveError> client_error;
  std::thread rank1([&] {
    try {
      fetch_unique_id("127.0.0.1", server.port(), 1, 4, 10s);
    } catch (const CollectiveError& e) {
      client_error = e;
    }
  });
  try {
    server.serve(test_id(1), 10s);
    FAIL() << "served a rank of another world size";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(e.kind(), FailureKind::kMismatch);
    EXPECT_THAT(e.what(), HasSubstr("WORLD_SIZE=4"));
  }
  rank1.join();
  ASSERT_TRUE(client_error.has_value());
  EXPECT_EQ(client_error->kind(), FailureKind::kMismatch);
  EXPECT_THAT(client_error->what(), HasSubstr("WORLD_SIZE differs"));
}

TEST(NcclIdExchange, BusyPortIsReportedByNumber) {
  const UniqueIdServer first(0, 2);
  try {
    const UniqueIdServer second(first.port(), 2);
    FAIL() << "two servers on one port";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(e.kind(), FailureKind::kTransport);
    EXPECT_THAT(e.what(), HasSubstr("port " + std::to_string(first.port())));
  }
}

}  // namespace
}  // namespace fp8c::runtime
