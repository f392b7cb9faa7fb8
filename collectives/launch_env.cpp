#include "collectives/launch_env.hpp"

#include <charconv>
#include <cstdlib>
#include <limits>

namespace fp8c::collectives {
namespace {

constexpr std::string_view kExpected =
    "a torchrun-style environment sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and "
    "MASTER_PORT";

std::string require(const EnvLookup& lookup, std::string_view name) {
  std::optional<std::string> value = lookup(name);
  if (!value) {
    throw LaunchEnvError(std::string(name) + " is not set; " + std::string(kExpected));
  }
  return *value;
}

// Digits only: "+3", " 3", "3 " and "0x3" are refused rather than guessed at.
long long parse_decimal(std::string_view name, const std::string& text, long long min,
                        long long max, std::string_view range_note = {}) {
  const auto refuse = [&](std::string_view why) -> LaunchEnvError {
    return LaunchEnvError(std::string(name) + "='" + text + "' " + std::string(why));
  };
  if (text.empty()) throw refuse("is empty; expected a decimal integer");
  for (const char c : text) {
    if (c < '0' || c > '9') throw refuse("is not a non-negative decimal integer");
  }
  long long value = 0;
  const auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (status != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    throw refuse("is out of range; expected " + std::to_string(min) + ".." + std::to_string(max) +
                 std::string(range_note));
  }
  return value;
}

}  // namespace

LaunchEnv parse_launch_env(const EnvLookup& lookup) {
  constexpr long long kMaxInt = std::numeric_limits<int>::max();
  LaunchEnv env;
  env.world_size =
      static_cast<int>(parse_decimal("WORLD_SIZE", require(lookup, "WORLD_SIZE"), 1, kMaxInt));
  const long long last_rank = env.world_size - 1;
  const std::string note = " (WORLD_SIZE=" + std::to_string(env.world_size) + ")";
  env.rank = static_cast<int>(parse_decimal("RANK", require(lookup, "RANK"), 0, last_rank, note));
  env.local_rank = static_cast<int>(
      parse_decimal("LOCAL_RANK", require(lookup, "LOCAL_RANK"), 0, last_rank, note));
  env.master_addr = require(lookup, "MASTER_ADDR");
  if (env.master_addr.empty()) {
    throw LaunchEnvError("MASTER_ADDR is empty; expected the host name or address of rank 0");
  }
  env.master_port = static_cast<std::uint16_t>(
      parse_decimal("MASTER_PORT", require(lookup, "MASTER_PORT"), 1, 65535));
  return env;
}

LaunchEnv launch_env_from_process() {
  return parse_launch_env([](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

}  // namespace fp8c::collectives
