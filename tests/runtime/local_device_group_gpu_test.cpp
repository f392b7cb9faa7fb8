// The single-GPU multi-rank communicator against the CPU in-process group on
// the same data, bit for bit: every collective, out of place and in place,
// ring_shift included (with guard bytes around its recv), for 1, 2, 3, 4 and
// 8 ranks (one host thread each), with NaN, infinities, signed zeros and
// overflow in the reductions. Then the failures: a missing
// rank times out, disagreeing calls are a mismatch on every rank, a refused
// call and abort() poison the group. Skipped, visibly, without a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpu_fixture.hpp"

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "collectives/collective_call.hpp"
#include "collectives/device/local_device_group.hpp"
#include "collectives/in_process_group.hpp"
#include "collectives/narrow_float.hpp"
#include "collectives/rank_threads.hpp"

namespace fp8c::runtime {
namespace {

using collectives::CollectiveError;
using collectives::CollectiveKind;
using collectives::FailureKind;
using testing::gpu;
using namespace std::chrono_literals;
using Bytes = std::vector<std::uint8_t>;

constexpr auto kTimeout = std::chrono::milliseconds(30'000);

struct Case {
  CollectiveKind kind;
  ElemType dtype;
  ReduceOp op = ReduceOp::kSum;
  std::size_t count = 0;
  bool in_place = false;
  int root = 0;  // broadcast; -1: the last rank

  std::string name() const {
    return std::string(collectives::collective_name(kind)) + " " + std::string(to_string(dtype)) +
           " " + std::string(collectives::reduce_op_name(op)) + " count=" + std::to_string(count) +
           (in_place ? " in place" : "") + " root=" + std::to_string(root);
  }
  int root_of(int size) const { return root < 0 ? size - 1 : root; }
  std::size_t element() const { return element_bytes(dtype); }
  std::size_t input_bytes(int size) const {
    return (kind == CollectiveKind::kReduceScatter ? static_cast<std::size_t>(size) : 1) * count *
           element();
  }
  std::size_t output_bytes(int size) const {
    return (kind == CollectiveKind::kAllGather ? static_cast<std::size_t>(size) : 1) * count *
           element();
  }
  // Bytes of 0xCD before and after ring_shift's recv that must survive it
  // (the results compared include them).
  std::size_t guard() const { return kind == CollectiveKind::kRingShift ? 256 : 0; }
};

std::vector<Case> cases() {
  using K = CollectiveKind;
  std::vector<Case> all;
  for (const bool in_place : {false, true}) {
    all.push_back({K::kAllGather, ElemType::fp32, ReduceOp::kSum, 1537, in_place});
    all.push_back({K::kAllGather, ElemType::e4m3, ReduceOp::kSum, 4099, in_place});
    all.push_back({K::kReduceScatter, ElemType::bf16, ReduceOp::kSum, 1537, in_place});
    all.push_back({K::kAllReduce, ElemType::fp16, ReduceOp::kSum, 1000, in_place});
    all.push_back({K::kAllReduce, ElemType::fp32, ReduceOp::kMax, 333, in_place});
    all.push_back({K::kBroadcast, ElemType::fp32, ReduceOp::kSum, 1001, in_place, -1});
  }
  all.push_back({K::kAllGather, ElemType::e5m2, ReduceOp::kSum, 17});
  all.push_back({K::kAllGather, ElemType::bf16, ReduceOp::kSum, 1000});
  all.push_back({K::kAllGather, ElemType::u8, ReduceOp::kSum, 0});
  for (const ElemType dtype : {ElemType::fp32, ElemType::bf16, ElemType::fp16, ElemType::fp64,
                               ElemType::i32, ElemType::u8}) {
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      all.push_back({K::kReduceScatter, dtype, op, 777});
      all.push_back({K::kAllReduce, dtype, op, 2049});
    }
  }
  // More elements than one launch's threads: the kernels' grid-stride loops.
  all.push_back({K::kAllReduce, ElemType::fp32, ReduceOp::kSum, 300'001});
  all.push_back({K::kAllGather, ElemType::e4m3, ReduceOp::kSum, 1'100'003});
  all.push_back({K::kBroadcast, ElemType::e4m3, ReduceOp::kSum, 4097, false, 0});
  all.push_back({K::kAllReduce, ElemType::bf16, ReduceOp::kSum, 0});
  // ring_shift: any dtype, odd counts, two above 1 MiB.
  all.push_back({K::kRingShift, ElemType::e4m3, ReduceOp::kSum, 1'100'003});
  all.push_back({K::kRingShift, ElemType::fp32, ReduceOp::kSum, 300'007});
  all.push_back({K::kRingShift, ElemType::e5m2, ReduceOp::kSum, 4099});
  all.push_back({K::kRingShift, ElemType::bf16, ReduceOp::kSum, 1537});
  all.push_back({K::kRingShift, ElemType::u8, ReduceOp::kSum, 7});
  all.push_back({K::kRingShift, ElemType::fp64, ReduceOp::kSum, 1});
  all.push_back({K::kRingShift, ElemType::e4m3, ReduceOp::kSum, 0});
  return all;
}

bool is_nan_bits(ElemType dtype, const std::uint8_t* p) {
  switch (dtype) {
    case ElemType::fp32: {
      std::uint32_t b;
      std::memcpy(&b, p, 4);
      return (b & 0x7FFFFFFFu) > 0x7F800000u;
    }
    case ElemType::fp64: {
      std::uint64_t b;
      std::memcpy(&b, p, 8);
      return (b & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull;
    }
    case ElemType::bf16: {
      std::uint16_t b;
      std::memcpy(&b, p, 2);
      return (b & 0x7FFFu) > 0x7F80u;
    }
    case ElemType::fp16: {
      std::uint16_t b;
      std::memcpy(&b, p, 2);
      return (b & 0x7FFFu) > 0x7C00u;
    }
    default:
      return false;
  }
}

// `value` in dtype's bits (floating types only).
void store_value(ElemType dtype, std::uint8_t* p, float value) {
  if (dtype == ElemType::fp32) {
    std::memcpy(p, &value, 4);
  } else if (dtype == ElemType::fp64) {
    const double d = value;
    std::memcpy(p, &d, 8);
  } else if (dtype == ElemType::bf16) {
    const std::uint16_t b = collectives::float_to_bfloat16_rne(value);
    std::memcpy(p, &b, 2);
  } else if (dtype == ElemType::fp16) {
    const std::uint16_t b = collectives::float_to_float16_rne(value);
    std::memcpy(p, &b, 2);
  }
}

// Random bits (every NaN, infinity and subnormal pattern can appear), plus
// at fixed places: +Inf and -Inf meeting (the default NaN), values that
// overflow when summed, negative zeros, and a signalling-looking NaN. For
// sums at most one rank has a NaN at any element: where two NaNs meet, the
// CPU's own result depends on its compiler (see rank_reduce.hpp).
Bytes make_input(const Case& c, int case_index, int rank, int size) {
  Bytes bytes(c.input_bytes(size));
  std::mt19937 rng(static_cast<unsigned>(case_index * 1009 + rank * 7 + size));
  for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
  const std::size_t n = bytes.size() / c.element();
  const bool floating = c.dtype == ElemType::fp32 || c.dtype == ElemType::fp64 ||
                        c.dtype == ElemType::bf16 || c.dtype == ElemType::fp16;
  const bool reduced =
      c.kind == CollectiveKind::kReduceScatter || c.kind == CollectiveKind::kAllReduce;
  if (!floating || !reduced) return bytes;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint8_t* p = bytes.data() + i * c.element();
    const int nan_owner = i % 64 == 3 ? size - 1 : static_cast<int>(i % size);
    if (c.op == ReduceOp::kSum && is_nan_bits(c.dtype, p) && rank != nan_owner)
      store_value(c.dtype, p, static_cast<float>(i % 97) - 48.0f);
    switch (i % 64) {
      case 0:
        store_value(c.dtype, p, rank == 0 ? INFINITY : rank == 1 ? -INFINITY : 1.0f);
        break;
      case 1:
        store_value(c.dtype, p, c.dtype == ElemType::fp16 ? 60000.0f : 3.0e38f);
        break;
      case 2:
        store_value(c.dtype, p, -0.0f);
        break;
      case 3:
        if (rank == size - 1) std::memset(p, 0xFF, c.element());  // NaN, sign set
        break;
    }
  }
  return bytes;
}

// The CPU in-process group's outputs for every case, per rank.
std::vector<std::vector<Bytes>> cpu_outputs(const std::vector<Case>& all,
                                            const std::vector<std::vector<Bytes>>& inputs,
                                            int size) {
  std::vector<std::vector<Bytes>> out(all.size(), std::vector<Bytes>(size));
  const auto failures = collectives::run_ranks(
      size, collectives::in_process_ranks(size, kTimeout), [&](collectives::Communicator& comm) {
        const int r = comm.rank();
        for (std::size_t k = 0; k < all.size(); ++k) {
          const Case& c = all[k];
          const Bytes& in = inputs[k][r];
          Bytes& result = out[k][r];
          result.assign(c.output_bytes(size) + 2 * c.guard(), 0xCD);
          switch (c.kind) {
            case CollectiveKind::kAllGather:
              comm.all_gather(in.data(), result.data(), c.count, c.dtype);
              break;
            case CollectiveKind::kReduceScatter:
              comm.reduce_scatter(in.data(), result.data(), c.count, c.dtype, c.op);
              break;
            case CollectiveKind::kAllReduce:
              comm.all_reduce(in.data(), result.data(), c.count, c.dtype, c.op);
              break;
            case CollectiveKind::kBroadcast:
              comm.broadcast(in.data(), result.data(), c.count, c.dtype, c.root_of(size));
              break;
            case CollectiveKind::kRingShift:
              comm.ring_shift(in.data(), result.data() + c.guard(), c.count, c.dtype);
              break;
            case CollectiveKind::kBarrier:
              break;
          }
        }
      });
  collectives::rethrow_first_failure(failures);
  return out;
}

// Runs one rank's side of `c` on the GPU and returns its output.
Bytes run_on_gpu(DeviceCommunicator& comm, CUstream stream, const Case& c, const Bytes& in) {
  const int size = comm.size(), r = comm.rank();
  const std::size_t block = c.count * c.element();
  const std::size_t out_bytes = c.output_bytes(size) + 2 * c.guard();
  DeviceBuffer send(std::max<std::size_t>(in.size(), 1));
  DeviceBuffer recv(std::max<std::size_t>(out_bytes, 1));
  recv.fill(0xCD, stream);
  FP8C_CU(driver().cuStreamSynchronize(stream));
  CUdeviceptr send_at = send.get(), recv_at = recv.get() + c.guard(), result_at = recv.get();
  DeviceBuffer* upload_to = &send;
  std::size_t upload_offset = 0;
  if (c.in_place) {
    switch (c.kind) {
      case CollectiveKind::kAllGather:  // send = recv + rank * count
        upload_to = &recv;
        upload_offset = static_cast<std::size_t>(r) * block;
        send_at = recv.get() + upload_offset;
        break;
      case CollectiveKind::kReduceScatter:  // recv = send + rank * count
        recv_at = result_at = send.get() + static_cast<std::size_t>(r) * block;
        break;
      case CollectiveKind::kAllReduce:
      case CollectiveKind::kBroadcast:  // send == recv
        upload_to = &recv;
        send_at = recv.get();
        break;
      case CollectiveKind::kRingShift:  // no in-place form
      case CollectiveKind::kBarrier:
        break;
    }
  }
  upload_to->upload(in.data(), in.size(), upload_offset);
  switch (c.kind) {
    case CollectiveKind::kAllGather:
      comm.all_gather(send_at, recv_at, c.count, c.dtype, stream);
      break;
    case CollectiveKind::kReduceScatter:
      comm.reduce_scatter(send_at, recv_at, c.count, c.dtype, c.op, stream);
      break;
    case CollectiveKind::kAllReduce:
      comm.all_reduce(send_at, recv_at, c.count, c.dtype, c.op, stream);
      break;
    case CollectiveKind::kBroadcast:
      comm.broadcast(send_at, recv_at, c.count, c.dtype, c.root_of(size), stream);
      break;
    case CollectiveKind::kRingShift:
      comm.ring_shift(send_at, recv_at, c.count, c.dtype, stream);
      break;
    case CollectiveKind::kBarrier:
      break;
  }
  comm.synchronize(stream);
  Bytes out(out_bytes);
  if (out_bytes) FP8C_CU(driver().cuMemcpyDtoH(out.data(), result_at, out_bytes));
  return out;
}

using RankFn = std::function<void(DeviceCommunicator& comm, CUstream stream)>;

// Runs `fn` on every rank of `group`, one thread each with the GPU's context
// current; returns each rank's exception (nullptr where it returned).
std::vector<std::exception_ptr> run_ranks_on_gpu(LocalDeviceGroup& group, const RankFn& fn) {
  std::vector<std::exception_ptr> failures(group.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < group.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        gpu().device->make_current();
        const Stream stream;
        const std::unique_ptr<DeviceCommunicator> comm = group.communicator(r);
        fn(*comm, stream.get());
      } catch (...) {
        failures[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return failures;
}

std::string describe(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "unknown exception";
}

// The first differing element as "element i: expected 0x.., got 0x.. (n of
// m elements differ, the last at element j)", or "". NaNs compare by their
// bits: rank_reduce.hpp makes the payloads part of the contract. The count
// and the last index tell a run of unwritten data (a race) from a few wrong
// values.
std::string first_difference(const Bytes& expected, const Bytes& actual, std::size_t element) {
  if (expected.size() != actual.size()) return "sizes differ";
  std::size_t first = expected.size(), last = 0, differing = 0;
  for (std::size_t i = 0; i < expected.size(); i += element) {
    if (std::memcmp(&expected[i], &actual[i], element) == 0) continue;
    if (differing++ == 0) first = i;
    last = i;
  }
  if (differing == 0) return "";
  char text[192];
  std::uint64_t e = 0, a = 0;
  std::memcpy(&e, &expected[first], element);
  std::memcpy(&a, &actual[first], element);
  std::snprintf(text, sizeof text,
                "element %zu: expected 0x%llx, got 0x%llx (%zu of %zu elements differ, the last "
                "at element %zu)",
                first / element, static_cast<unsigned long long>(e),
                static_cast<unsigned long long>(a), differing, expected.size() / element,
                last / element);
  return text;
}

class LocalDeviceGroupGpu : public ::testing::TestWithParam<int> {};

TEST_P(LocalDeviceGroupGpu, EveryCollectiveMatchesCpuInProcessGroupBitForBit) {
  REQUIRE_GPU();
  const int size = GetParam();
  const std::vector<Case> all = cases();
  std::vector<std::vector<Bytes>> inputs(all.size());
  for (std::size_t k = 0; k < all.size(); ++k)
    for (int r = 0; r < size; ++r) inputs[k].push_back(make_input(all[k], int(k), r, size));
  const auto expected = cpu_outputs(all, inputs, size);

  gpu().device->make_current();
  LocalDeviceGroup group(size, kTimeout, *gpu().jit);
  std::vector<std::vector<Bytes>> actual(all.size(), std::vector<Bytes>(size));
  const auto failures = run_ranks_on_gpu(group, [&](DeviceCommunicator& comm, CUstream stream) {
    for (std::size_t k = 0; k < all.size(); ++k)
      actual[k][comm.rank()] = run_on_gpu(comm, stream, all[k], inputs[k][comm.rank()]);
  });
  for (int r = 0; r < size; ++r)
    ASSERT_EQ(failures[r], nullptr) << "rank " << r << ": " << describe(failures[r]);
  for (std::size_t k = 0; k < all.size(); ++k) {
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(first_difference(expected[k][r], actual[k][r], all[k].element()), "")
          << all[k].name() << ", rank " << r << " of " << size;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, LocalDeviceGroupGpu, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

CollectiveError collective_error(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const CollectiveError& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a CollectiveError: " << e.what();
  }
  return CollectiveError(FailureKind::kTransport, "?", 0, 0, "?");
}

// One float buffer per rank, enough for any collective below.
struct RankBuffers {
  explicit RankBuffers(int size) : send(64 * 4 * size), recv(64 * 4 * size) {}
  DeviceBuffer send, recv;
};

TEST(LocalDeviceGroupFailures, MissingRankTimesOutOnEveryWaitingRank) {
  REQUIRE_GPU();
  constexpr int kSize = 3;
  constexpr auto kShort = std::chrono::milliseconds(500);
  gpu().device->make_current();
  LocalDeviceGroup group(kSize, kShort, *gpu().jit);
  std::vector<double> seconds(kSize, 0);
  std::optional<CollectiveError> late;
  const auto failures = run_ranks_on_gpu(group, [&](DeviceCommunicator& comm, CUstream stream) {
    RankBuffers b(kSize);
    if (comm.rank() == kSize - 1) {
      // Skips the first collective; arrives at the next after the others gave up.
      std::this_thread::sleep_for(3 * kShort);
      try {
        comm.all_reduce(b.send.get(), b.recv.get(), 64, ElemType::fp32, ReduceOp::kSum, stream);
      } catch (const CollectiveError& e) {
        late = e;
      }
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      comm.all_reduce(b.send.get(), b.recv.get(), 64, ElemType::fp32, ReduceOp::kSum, stream);
    } catch (...) {
      seconds[comm.rank()] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      throw;
    }
  });
  for (int r = 0; r + 1 < kSize; ++r) {
    ASSERT_NE(failures[r], nullptr) << "rank " << r;
    const CollectiveError e = collective_error(failures[r]);
    // The first to notice times out; the other may be released by its poison.
    EXPECT_TRUE(e.kind() == FailureKind::kTimeout || e.kind() == FailureKind::kPeerFailed)
        << e.what();
    EXPECT_LT(seconds[r], 0.5 + 2.0) << "rank " << r;
    EXPECT_GE(seconds[r], 0.4) << "rank " << r;
  }
  EXPECT_THAT(
      collective_error(failures[0]).what() + std::string(collective_error(failures[1]).what()),
      ::testing::HasSubstr("rank(s) 2"));
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(late->kind(), FailureKind::kPoisoned) << late->what();
}

TEST(LocalDeviceGroupFailures, DisagreeingCallsAreAMismatchOnEveryRank) {
  REQUIRE_GPU();
  constexpr int kSize = 4;
  gpu().device->make_current();
  LocalDeviceGroup group(kSize, kTimeout, *gpu().jit);
  const auto failures = run_ranks_on_gpu(group, [&](DeviceCommunicator& comm, CUstream stream) {
    RankBuffers b(kSize);
    // A healthy collective first, then rank 2 disagrees on the dtype.
    comm.all_gather(b.send.get(), b.recv.get(), 16, ElemType::fp32, stream);
    const ElemType dtype = comm.rank() == 2 ? ElemType::bf16 : ElemType::fp32;
    comm.all_reduce(b.send.get(), b.recv.get(), 16, dtype, ReduceOp::kMax, stream);
  });
  for (int r = 0; r < kSize; ++r) {
    ASSERT_NE(failures[r], nullptr) << "rank " << r;
    const CollectiveError e = collective_error(failures[r]);
    EXPECT_EQ(e.kind(), FailureKind::kMismatch) << e.what();
    EXPECT_THAT(e.detail(), ::testing::HasSubstr("rank 2"));
  }
}

TEST(LocalDeviceGroupFailures, RingShiftCountsAndDtypesMustAgree) {
  REQUIRE_GPU();
  constexpr int kSize = 3;
  gpu().device->make_current();
  LocalDeviceGroup group(kSize, kTimeout, *gpu().jit);
  const auto failures = run_ranks_on_gpu(group, [&](DeviceCommunicator& comm, CUstream stream) {
    RankBuffers b(kSize);
    comm.ring_shift(b.send.get(), b.recv.get(), 16, ElemType::e4m3, stream);
    const std::size_t count = comm.rank() == 2 ? 17 : 16;
    comm.ring_shift(b.send.get(), b.recv.get(), count, ElemType::e4m3, stream);
  });
  for (int r = 0; r < kSize; ++r) {
    ASSERT_NE(failures[r], nullptr) << "rank " << r;
    const CollectiveError e = collective_error(failures[r]);
    EXPECT_EQ(e.kind(), FailureKind::kMismatch) << e.what();
    EXPECT_THAT(e.detail(), ::testing::HasSubstr("rank 2 called ring_shift #1 (count=17"));
  }

  LocalDeviceGroup dtypes(2, kTimeout, *gpu().jit);
  const auto dtype_failures =
      run_ranks_on_gpu(dtypes, [&](DeviceCommunicator& comm, CUstream stream) {
        RankBuffers b(2);
        const ElemType dtype = comm.rank() == 1 ? ElemType::u8 : ElemType::e4m3;
        comm.ring_shift(b.send.get(), b.recv.get(), 16, dtype, stream);
      });
  for (int r = 0; r < 2; ++r) {
    ASSERT_NE(dtype_failures[r], nullptr) << "rank " << r;
    EXPECT_EQ(collective_error(dtype_failures[r]).kind(), FailureKind::kMismatch);
  }
}

TEST(LocalDeviceGroupFailures, RingShiftRefusesOverlappingBuffers) {
  REQUIRE_GPU();
  gpu().device->make_current();
  LocalDeviceGroup group(2, kTimeout, *gpu().jit);
  const auto failures = run_ranks_on_gpu(group, [&](DeviceCommunicator& comm, CUstream stream) {
    RankBuffers b(2);
    comm.ring_shift(b.send.get(), b.send.get() + 4 * comm.rank(), 8, ElemType::fp32, stream);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_NE(failures[r], nullptr) << "rank " << r;
    const CollectiveError e = collective_error(failures[r]);
    EXPECT_EQ(e.kind(), FailureKind::kInvalidArgument) << e.what();
    EXPECT_THAT(e.detail(),
                ::testing::HasSubstr("send and recv overlap; ring_shift has no in-place form"));
  }
}

TEST(LocalDeviceGroupFailures, RootsMustAgreeToo) {
  REQUIRE_GPU();
  gpu().device->make_current();
  LocalDeviceGroup group(2, kTimeout, *gpu().jit);
  const auto failures = run_ranks_on_gpu(group, [&](DeviceCommunicator& comm, CUstream stream) {
    RankBuffers b(2);
    comm.broadcast(b.send.get(), b.recv.get(), 8, ElemType::fp32, comm.rank(), stream);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_NE(failures[r], nullptr);
    EXPECT_EQ(collective_error(failures[r]).kind(), FailureKind::kMismatch);
  }
}

TEST(LocalDeviceGroupFailures, RefusedCallReleasesPeersAndPoisons) {
  REQUIRE_GPU();
  constexpr int kSize = 3;
  gpu().device->make_current();
  LocalDeviceGroup group(kSize, kTimeout, *gpu().jit);
  const auto start = std::chrono::steady_clock::now();
  const auto failures = run_ranks_on_gpu(group, [&](DeviceCommunicator& comm, CUstream stream) {
    RankBuffers b(kSize);
    const ElemType dtype = comm.rank() == 0 ? ElemType::e4m3 : ElemType::fp32;
    try {
      comm.all_reduce(b.send.get(), b.recv.get(), 8, dtype, ReduceOp::kSum, stream);
    } catch (const CollectiveError&) {
      EXPECT_TRUE(comm.poisoned());
      throw;
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "peers waited for the timeout";
  EXPECT_EQ(collective_error(failures[0]).kind(), FailureKind::kInvalidArgument);
  for (int r = 1; r < kSize; ++r) {
    const FailureKind kind = collective_error(failures[r]).kind();
    EXPECT_TRUE(kind == FailureKind::kPeerFailed || kind == FailureKind::kPoisoned) << r;
  }
}

TEST(LocalDeviceGroupFailures, AbortPoisonsThisRankAndItsPeers) {
  REQUIRE_GPU();
  gpu().device->make_current();
  LocalDeviceGroup group(2, kTimeout, *gpu().jit);
  const auto failures = run_ranks_on_gpu(group, [&](DeviceCommunicator& comm, CUstream stream) {
    RankBuffers b(2);
    if (comm.rank() == 1) {
      comm.abort("test");
      comm.abort("again");  // idempotent
      EXPECT_TRUE(comm.poisoned());
    }
    comm.all_gather(b.send.get(), b.recv.get(), 8, ElemType::fp32, stream);
  });
  const CollectiveError aborted = collective_error(failures[1]);
  EXPECT_EQ(aborted.kind(), FailureKind::kPoisoned);
  EXPECT_THAT(aborted.what(), ::testing::HasSubstr("aborted: test"));
  const FailureKind peer = collective_error(failures[0]).kind();
  EXPECT_TRUE(peer == FailureKind::kPeerFailed || peer == FailureKind::kPoisoned);
}

TEST(LocalDeviceGroupFailures, EachRankIsHandedOutOnce) {
  REQUIRE_GPU();
  gpu().device->make_current();
  LocalDeviceGroup group(2, kTimeout, *gpu().jit);
  const auto first = group.communicator(0);
  EXPECT_EQ(first->backend_name(), "single-gpu");
  EXPECT_THROW(group.communicator(0), std::invalid_argument);
  EXPECT_THROW(group.communicator(2), std::invalid_argument);
  EXPECT_THROW(LocalDeviceGroup(65, kTimeout, *gpu().jit), std::invalid_argument);
}

}  // namespace
}  // namespace fp8c::runtime
