// The torchrun-style environment a multi-process job starts with: who am I,
// how many are we, and where is the rendezvous host. Parsed strictly, since a
// wrong rank or world size shows up much later as a hang or a mismatch.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace fp8c::collectives {

struct LaunchEnv {
  int rank = 0;                   // RANK: global rank, 0 <= rank < world_size
  int world_size = 1;             // WORLD_SIZE: ranks in the job, >= 1
  int local_rank = 0;             // LOCAL_RANK: rank on this host (picks the GPU), < world_size
  std::string master_addr;        // MASTER_ADDR: host of the rendezvous (rank 0)
  std::uint16_t master_port = 0;  // MASTER_PORT: 1..65535
};

class LaunchEnvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads a variable: nothing when it is not set.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

// Parses RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT. Every
// variable is required. Integers are plain decimal digits (no sign, no
// spaces). Throws LaunchEnvError naming the variable, its value and what was
// expected.
LaunchEnv parse_launch_env(const EnvLookup& lookup);

// parse_launch_env over this process's environment (getenv).
LaunchEnv launch_env_from_process();

}  // namespace fp8c::collectives
