// The NCCL communicator on one GPU, world size 1 (no network, no second
// process): every collective, FP8 types included, moves exactly the input
// (ring_shift: NCCL send/recv to itself, guard bytes around recv intact);
// synchronize returns on healthy work; a refused call and abort() poison it.
// Skipped, visibly, without a GPU or without libnccl.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpu_fixture.hpp"

#include <algorithm>
#include <numeric>
#include <random>

#include "collectives/device/nccl_communicator.hpp"
#include "collectives/device/nccl_library.hpp"
#include "runtime/dynamic_library.hpp"

namespace fp8c::runtime {
namespace {

using collectives::CollectiveError;
using collectives::FailureKind;
using testing::gpu;
using ::testing::HasSubstr;
using Bytes = std::vector<std::uint8_t>;

constexpr auto kTimeout = std::chrono::milliseconds(30'000);

#define REQUIRE_NCCL()                         \
  do {                                         \
    try {                                      \
      nccl();                                  \
    } catch (const Unavailable& e) {           \
      GTEST_SKIP() << "no NCCL: " << e.what(); \
    }                                          \
  } while (0)

std::unique_ptr<DeviceCommunicator> single_rank() {
  gpu().device->make_current();
  return make_nccl_communicator(single_rank_bootstrap(), gpu().device->ordinal(), kTimeout);
}

// Finite values only: NCCL's arithmetic on NaN is its own business.
Bytes finite_input(std::size_t bytes, unsigned seed) {
  Bytes b(bytes);
  std::mt19937 rng(seed);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng() & 0x3F);  // small exponents, no NaN/Inf
  return b;
}

Bytes download(CUdeviceptr at, std::size_t bytes) {
  Bytes out(bytes);
  if (bytes) FP8C_CU(driver().cuMemcpyDtoH(out.data(), at, bytes));
  return out;
}

TEST(NcclGpu, SingleRankCollectivesMoveTheInputExactly) {
  REQUIRE_GPU();
  REQUIRE_NCCL();
  const auto comm = single_rank();
  EXPECT_EQ(comm->backend_name(), "nccl");
  EXPECT_EQ(comm->size(), 1);
  const Stream stream;
  struct Case {
    ElemType dtype;
    std::size_t count;
  };
  const Case all[] = {{ElemType::fp32, 1537}, {ElemType::bf16, 4096}, {ElemType::fp16, 33},
                      {ElemType::e4m3, 4099}, {ElemType::e5m2, 17},   {ElemType::i32, 100}};
  unsigned seed = 1;
  for (const Case& c : all) {
    const std::size_t bytes = c.count * element_bytes(c.dtype);
    const Bytes in = finite_input(bytes, seed++);
    DeviceBuffer send(bytes), recv(bytes);
    send.upload(in.data(), bytes);
    const auto name = std::string(to_string(c.dtype));

    recv.fill(0xCD, stream.get());
    comm->all_gather(send.get(), recv.get(), c.count, c.dtype, stream.get());
    comm->synchronize(stream.get());
    EXPECT_EQ(download(recv.get(), bytes), in) << "all_gather " << name;

    recv.fill(0xCD, stream.get());
    comm->broadcast(send.get(), recv.get(), c.count, c.dtype, 0, stream.get());
    comm->synchronize(stream.get());
    EXPECT_EQ(download(recv.get(), bytes), in) << "broadcast " << name;

    recv.fill(0xCD, stream.get());
    comm->ring_shift(send.get(), recv.get(), c.count, c.dtype, stream.get());
    comm->synchronize(stream.get());
    EXPECT_EQ(download(recv.get(), bytes), in) << "ring_shift " << name;

    if (!collectives::is_reducible(c.dtype)) continue;
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      recv.fill(0xCD, stream.get());
      comm->all_reduce(send.get(), recv.get(), c.count, c.dtype, op, stream.get());
      comm->synchronize(stream.get());
      EXPECT_EQ(download(recv.get(), bytes), in) << "all_reduce " << name;
      recv.fill(0xCD, stream.get());
      comm->reduce_scatter(send.get(), recv.get(), c.count, c.dtype, op, stream.get());
      comm->synchronize(stream.get());
      EXPECT_EQ(download(recv.get(), bytes), in) << "reduce_scatter " << name;
    }
  }
  // In place: one buffer.
  const Bytes in = finite_input(4096, 99);
  DeviceBuffer buffer(4096);
  buffer.upload(in.data(), in.size());
  comm->all_reduce(buffer.get(), buffer.get(), 1024, ElemType::fp32, ReduceOp::kSum, stream.get());
  comm->all_gather(buffer.get(), buffer.get(), 4096, ElemType::e4m3, stream.get());
  comm->synchronize(stream.get());
  EXPECT_EQ(download(buffer.get(), in.size()), in);
  EXPECT_FALSE(comm->poisoned());
}

// One rank: send/recv to itself. Odd sizes above 1 MiB, guard bytes around
// recv, count 0 with null buffers, then overlap refused and poisoning.
TEST(NcclGpu, SingleRankRingShiftCopiesExactlyAndRefusesOverlap) {
  REQUIRE_GPU();
  REQUIRE_NCCL();
  const auto comm = single_rank();
  const Stream stream;
  constexpr std::size_t kGuard = 256;
  struct Case {
    ElemType dtype;
    std::size_t count;
  };
  const Case all[] = {{ElemType::e4m3, 1'100'003},
                      {ElemType::u8, 7},
                      {ElemType::e5m2, 1},
                      {ElemType::fp32, 300'007},
                      {ElemType::bf16, 1537}};
  unsigned seed = 100;
  for (const Case& c : all) {
    const std::size_t bytes = c.count * element_bytes(c.dtype);
    const Bytes in = finite_input(bytes, seed++);
    DeviceBuffer send(bytes), recv(bytes + 2 * kGuard);
    send.upload(in.data(), bytes);
    recv.fill(0xCD, stream.get());
    comm->ring_shift(send.get(), recv.get() + kGuard, c.count, c.dtype, stream.get());
    comm->synchronize(stream.get());
    Bytes expected(bytes + 2 * kGuard, 0xCD);
    std::copy(in.begin(), in.end(), expected.begin() + kGuard);
    EXPECT_EQ(download(recv.get(), expected.size()), expected)
        << to_string(c.dtype) << " count=" << c.count;
  }
  comm->ring_shift(0, 0, 0, ElemType::e4m3, stream.get());
  comm->synchronize(stream.get());
  EXPECT_FALSE(comm->poisoned());

  DeviceBuffer buffer(256);
  try {
    comm->ring_shift(buffer.get(), buffer.get() + 4, 16, ElemType::fp32, stream.get());
    FAIL() << "overlapping ring_shift accepted";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(e.kind(), FailureKind::kInvalidArgument) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("send and recv overlap; ring_shift has no in-place form"));
  }
  EXPECT_TRUE(comm->poisoned());
}

TEST(NcclGpu, SynchronizeReturnsOnHealthyWorkManyCollectivesDeep) {
  REQUIRE_GPU();
  REQUIRE_NCCL();
  const auto comm = single_rank();
  const Stream stream;
  DeviceBuffer buffer(1 << 20);
  buffer.fill(0, stream.get());
  for (int i = 0; i < 200; ++i) {
    comm->all_reduce(buffer.get(), buffer.get(), (1 << 20) / 4, ElemType::fp32, ReduceOp::kMax,
                     stream.get());
  }
  const auto start = std::chrono::steady_clock::now();
  comm->synchronize(stream.get());
  EXPECT_LT(std::chrono::steady_clock::now() - start, kTimeout);
  EXPECT_FALSE(comm->poisoned());
}

TEST(NcclGpu, AbortPoisonsEveryLaterCall) {
  REQUIRE_GPU();
  REQUIRE_NCCL();
  const auto comm = single_rank();
  const Stream stream;
  DeviceBuffer buffer(256);
  comm->abort("test");
  comm->abort("again");  // idempotent
  EXPECT_TRUE(comm->poisoned());
  try {
    comm->all_reduce(buffer.get(), buffer.get(), 64, ElemType::fp32, ReduceOp::kSum, stream.get());
    FAIL() << "an aborted communicator ran a collective";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(e.kind(), FailureKind::kPoisoned);
    EXPECT_THAT(e.what(), HasSubstr("aborted: test"));
  }
  try {
    comm->synchronize(stream.get());
    FAIL() << "an aborted communicator synchronized";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(e.kind(), FailureKind::kPoisoned);
  }
}

TEST(NcclGpu, Fp8ReductionIsRefusedAndPoisons) {
  REQUIRE_GPU();
  REQUIRE_NCCL();
  const auto comm = single_rank();
  const Stream stream;
  DeviceBuffer buffer(256);
  try {
    comm->all_reduce(buffer.get(), buffer.get(), 64, ElemType::e4m3, ReduceOp::kMax, stream.get());
    FAIL() << "reduced FP8";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(e.kind(), FailureKind::kInvalidArgument);
  }
  EXPECT_TRUE(comm->poisoned());
  try {
    comm->all_gather(buffer.get(), buffer.get(), 64, ElemType::u8, stream.get());
    FAIL() << "a poisoned communicator ran a collective";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(e.kind(), FailureKind::kPoisoned);
  }
}

TEST(NcclGpu, ReportsTheLibraryVersionAndFp8Support) {
  REQUIRE_GPU();
  REQUIRE_NCCL();
  gpu().device->make_current();
  const NcclCommunicator comm(single_rank_bootstrap(), gpu().device->ordinal(), kTimeout);
  EXPECT_GE(comm.nccl_version(), kMinimumNcclVersion);
  std::printf("NCCL %s, FP8 types %s\n", nccl_version_text(comm.nccl_version()).c_str(),
              nccl_has_fp8(comm.nccl_version()) ? "native" : "moved as uint8");
}

}  // namespace
}  // namespace fp8c::runtime
