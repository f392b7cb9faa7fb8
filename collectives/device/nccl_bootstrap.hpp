// Who this process is in an NCCL job and where rank 0 hands out the NCCL
// unique id. Read from a torchrun-style environment (collectives/launch_env)
// or, when RANK is not set, from mpirun's OMPI_COMM_WORLD_* variables (with
// MASTER_ADDR and MASTER_PORT still required).
//
// The id travels over a small TCP exchange (unique_id_exchange.hpp) on
// MASTER_ADDR:id_port, where id_port = MASTER_PORT + 1 by default: torchrun's
// own rendezvous store already listens on MASTER_PORT. FP8C_NCCL_ID_PORT
// overrides it.
#pragma once

#include <cstdint>
#include <string>

#include "collectives/launch_env.hpp"

namespace fp8c::runtime {

struct NcclBootstrap {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;  // host of rank 0
  std::uint16_t master_port = 0;
  std::uint16_t id_port = 0;  // where rank 0 serves the unique id
};

// Throws collectives::LaunchEnvError naming the variable and what was
// expected (as parse_launch_env does).
NcclBootstrap parse_nccl_bootstrap(const collectives::EnvLookup& lookup);

// From an already parsed launch environment; id_port = MASTER_PORT + 1
// (LaunchEnvError when that is past 65535).
NcclBootstrap nccl_bootstrap_from(const collectives::LaunchEnv& env);

// parse_nccl_bootstrap over this process's environment.
NcclBootstrap nccl_bootstrap_from_process();

// One rank, no network: the id never leaves the process.
NcclBootstrap single_rank_bootstrap();

}  // namespace fp8c::runtime
