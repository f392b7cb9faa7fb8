// One rank of a multi-process gloo group, started by gloo_process_test the
// way torchrun starts ranks: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
// MASTER_PORT in the environment, plus FP8C_TEST_STORE_DIR for the file
// rendezvous and FP8C_TEST_TIMEOUT_MS. Runs a few collectives and checks
// them; FP8C_TEST_MODE picks what else it runs:
//   unset        all_gather, all_reduce, reduce_scatter, barrier;
//   ring_shift   ring_shift on several dtypes (FP8 included) and counts
//                (1, 7, 100003, 0), recv checked against the previous rank's
//                send bit for bit with guard bytes around it;
//   ring_shift_mismatch  rank 1 shifts one element more than the others:
//                success means this rank got kMismatch naming ring_shift;
//   ring_shift_overlap   every rank passes overlapping send and recv:
//                success means this rank got kInvalidArgument.
// Exit code: 0 success, 2 CollectiveError, 3 wrong result, 4 other.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/gloo_communicator.hpp"
#include "collectives/launch_env.hpp"

namespace {

using namespace fp8c::collectives;
using fp8c::ElemType;

// Deterministic bytes of `rank`'s send for shift number `shift`.
std::vector<std::uint8_t> shift_payload(int rank, int shift, std::size_t bytes) {
  std::vector<std::uint8_t> payload(bytes);
  std::uint32_t state = 2166136261u ^ static_cast<std::uint32_t>(rank * 7919 + shift * 104729);
  for (std::uint8_t& byte : payload) {
    state = state * 1664525u + 1013904223u;
    byte = static_cast<std::uint8_t>(state >> 24);
  }
  return payload;
}

// 0 when every shift moved the previous rank's bytes exactly and nothing else.
int check_ring_shifts(Communicator& comm) {
  constexpr std::size_t kGuard = 32;
  constexpr std::uint8_t kGuardByte = 0xA5;
  const int previous = (comm.rank() + comm.size() - 1) % comm.size();
  const ElemType dtypes[] = {ElemType::e4m3, ElemType::u8,   ElemType::e5m2,
                             ElemType::bf16, ElemType::fp32, ElemType::fp64};
  const std::size_t counts[] = {1, 7, 100003, 0};
  int shift = 0;
  for (const ElemType dtype : dtypes) {
    for (const std::size_t count : counts) {
      const std::size_t bytes = count * element_bytes(dtype);
      const std::vector<std::uint8_t> mine = shift_payload(comm.rank(), shift, bytes);
      std::vector<std::uint8_t> recv(kGuard + bytes + kGuard, kGuardByte);
      comm.ring_shift(count == 0 ? nullptr : mine.data(),
                      count == 0 ? nullptr : recv.data() + kGuard, count, dtype);
      const std::vector<std::uint8_t> expected = shift_payload(previous, shift, bytes);
      ++shift;
      if (!std::equal(expected.begin(), expected.end(), recv.begin() + kGuard)) {
        std::fprintf(stderr, "rank %d: ring_shift %s count=%zu: wrong data\n", comm.rank(),
                     std::string(to_string(dtype)).c_str(), count);
        return 3;
      }
      const auto guard = [&](std::size_t at) {
        return std::all_of(recv.begin() + static_cast<std::ptrdiff_t>(at),
                           recv.begin() + static_cast<std::ptrdiff_t>(at + kGuard),
                           [](std::uint8_t b) { return b == kGuardByte; });
      };
      if (!guard(0) || !guard(kGuard + bytes)) {
        std::fprintf(stderr, "rank %d: ring_shift wrote outside recv\n", comm.rank());
        return 3;
      }
    }
  }
  return 0;
}

// 0 when `call` throws CollectiveError of `kind` whose text names ring_shift.
template <typename Call>
int expect_failure(FailureKind kind, Call call) {
  try {
    call();
  } catch (const CollectiveError& error) {
    if (error.kind() == kind &&
        std::string_view(error.what()).find("ring_shift #0") != std::string_view::npos) {
      return 0;
    }
    std::fprintf(stderr, "unexpected error: %s\n", error.what());
    return 3;
  }
  std::fprintf(stderr, "ring_shift did not fail\n");
  return 3;
}

int run_rank() {
  const LaunchEnv env = launch_env_from_process();
  const char* store_dir = std::getenv("FP8C_TEST_STORE_DIR");
  const char* timeout_ms = std::getenv("FP8C_TEST_TIMEOUT_MS");
  if (store_dir == nullptr || timeout_ms == nullptr) {
    std::fprintf(stderr, "FP8C_TEST_STORE_DIR and FP8C_TEST_TIMEOUT_MS must be set\n");
    return 4;
  }
  GlooOptions options;
  options.timeout = std::chrono::milliseconds(std::stoi(timeout_ms));
  auto comm =
      connect_gloo(env.rank, env.world_size, GlooRendezvousStore::file_system(store_dir), options);

  const std::string mode = std::getenv("FP8C_TEST_MODE") ? std::getenv("FP8C_TEST_MODE") : "";
  if (mode == "ring_shift_mismatch") {
    std::vector<float> send(8, 1.0f), recv(8);
    return expect_failure(FailureKind::kMismatch, [&] {
      comm->ring_shift(send.data(), recv.data(), env.rank == 1 ? 8 : 7, ElemType::fp32);
    });
  }
  if (mode == "ring_shift_overlap") {
    std::vector<float> buffer(8, 1.0f);
    return expect_failure(FailureKind::kInvalidArgument, [&] {
      comm->ring_shift(buffer.data() + 1, buffer.data(), 4, ElemType::fp32);
    });
  }

  const auto n = static_cast<std::size_t>(env.world_size);
  std::vector<float> mine(3, static_cast<float>(env.rank) + 0.5f);
  std::vector<float> gathered(3 * n);
  comm->all_gather(mine.data(), gathered.data(), mine.size(), ElemType::fp32);
  for (std::size_t i = 0; i < gathered.size(); ++i) {
    if (gathered[i] != static_cast<float>(i / 3) + 0.5f) return 3;
  }
  float amax = static_cast<float>(env.rank * 10);
  comm->all_reduce(&amax, &amax, 1, ElemType::fp32, ReduceOp::kMax);
  if (amax != static_cast<float>((env.world_size - 1) * 10)) return 3;
  std::vector<std::int32_t> blocks(n * 2, env.rank + 1), block(2);
  comm->reduce_scatter(blocks.data(), block.data(), 2, ElemType::i32, ReduceOp::kSum);
  if (block[0] != env.world_size * (env.world_size + 1) / 2) return 3;
  if (mode == "ring_shift") {
    if (const int result = check_ring_shifts(*comm); result != 0) return result;
  }
  comm->barrier();  // nobody closes its sockets while a peer still reads
  return 0;
}

}  // namespace

int main() {
  try {
    return run_rank();
  } catch (const CollectiveError& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 4;
  }
}
