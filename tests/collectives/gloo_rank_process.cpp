// One rank of a multi-process gloo group, started by gloo_process_test the
// way torchrun starts ranks: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
// MASTER_PORT in the environment, plus FP8C_TEST_STORE_DIR for the file
// rendezvous and FP8C_TEST_TIMEOUT_MS. Runs a few collectives and checks
// them. Exit code: 0 success, 2 CollectiveError, 3 wrong result, 4 other.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "collectives/gloo_communicator.hpp"
#include "collectives/launch_env.hpp"

namespace {

using namespace fp8c::collectives;
using fp8c::ElemType;

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
