#include "collectives/device/nccl_bootstrap.hpp"

#include <charconv>
#include <cstdlib>

namespace fp8c::runtime {

using collectives::EnvLookup;
using collectives::LaunchEnvError;

namespace {

// RANK, WORLD_SIZE and LOCAL_RANK from mpirun's names when RANK is unset
// and OMPI_COMM_WORLD_RANK is set; everything else passes through.
EnvLookup with_mpirun_names(const EnvLookup& lookup, bool& from_mpirun) {
  from_mpirun = !lookup("RANK") && lookup("OMPI_COMM_WORLD_RANK");
  if (!from_mpirun) return lookup;
  return [lookup](std::string_view name) -> std::optional<std::string> {
    if (name == "RANK") return lookup("OMPI_COMM_WORLD_RANK");
    if (name == "WORLD_SIZE") return lookup("OMPI_COMM_WORLD_SIZE");
    if (name == "LOCAL_RANK") return lookup("OMPI_COMM_WORLD_LOCAL_RANK");
    return lookup(name);
  };
}

std::uint16_t id_port(const EnvLookup& lookup, std::uint16_t master_port) {
  if (const std::optional<std::string> text = lookup("FP8C_NCCL_ID_PORT")) {
    unsigned value = 0;
    const auto [end, status] = std::from_chars(text->data(), text->data() + text->size(), value);
    const bool digits_only = text->find_first_not_of("0123456789") == std::string::npos;
    if (text->empty() || !digits_only || status != std::errc() ||
        end != text->data() + text->size() || value < 1 || value > 65535) {
      throw LaunchEnvError("FP8C_NCCL_ID_PORT='" + *text + "' is not a port; expected 1..65535");
    }
    return static_cast<std::uint16_t>(value);
  }
  if (master_port == 65535) {
    throw LaunchEnvError(
        "MASTER_PORT=65535 leaves no port for the NCCL unique id (served on MASTER_PORT + 1); "
        "pick a lower MASTER_PORT or set FP8C_NCCL_ID_PORT");
  }
  return static_cast<std::uint16_t>(master_port + 1);
}

NcclBootstrap from_env(const collectives::LaunchEnv& env) {
  NcclBootstrap bootstrap;
  bootstrap.rank = env.rank;
  bootstrap.world_size = env.world_size;
  bootstrap.local_rank = env.local_rank;
  bootstrap.master_addr = env.master_addr;
  bootstrap.master_port = env.master_port;
  return bootstrap;
}

}  // namespace

NcclBootstrap parse_nccl_bootstrap(const EnvLookup& lookup) {
  bool from_mpirun = false;
  const EnvLookup names = with_mpirun_names(lookup, from_mpirun);
  collectives::LaunchEnv env;
  try {
    env = collectives::parse_launch_env(names);
  } catch (const LaunchEnvError& error) {
    if (!from_mpirun) throw;
    throw LaunchEnvError(std::string(error.what()) +
                         " (RANK, WORLD_SIZE and LOCAL_RANK were read from mpirun's "
                         "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE and "
                         "OMPI_COMM_WORLD_LOCAL_RANK)");
  }
  NcclBootstrap bootstrap = from_env(env);
  bootstrap.id_port = id_port(lookup, env.master_port);
  return bootstrap;
}

NcclBootstrap nccl_bootstrap_from(const collectives::LaunchEnv& env) {
  NcclBootstrap bootstrap = from_env(env);
  bootstrap.id_port = id_port([](std::string_view) { return std::nullopt; }, env.master_port);
  return bootstrap;
}

NcclBootstrap nccl_bootstrap_from_process() {
  return parse_nccl_bootstrap([](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

NcclBootstrap single_rank_bootstrap() {
  NcclBootstrap bootstrap;
  bootstrap.master_addr = "127.0.0.1";
  return bootstrap;
}

}  // namespace fp8c::runtime
