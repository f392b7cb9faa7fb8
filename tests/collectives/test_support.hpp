// Shared helpers for the collectives tests: group parameters, deterministic
// per-rank data, bit patterns for exact comparisons, error inspection.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "collectives/collective_error.hpp"
#include "collectives/run_ranks.hpp"

namespace fp8c::collectives {

// Readable parameter values in test listings and CTest names.
inline void PrintTo(Backend backend, std::ostream* out) {
  *out << backend_name(backend);
}

}  // namespace fp8c::collectives

namespace fp8c::collectives::testing {

struct GroupParam {
  Backend backend;
  int size;
};

inline void PrintTo(const GroupParam& param, std::ostream* out) {
  *out << backend_name(param.backend) << " x" << param.size;
}

inline std::string group_param_name(const ::testing::TestParamInfo<GroupParam>& info) {
  const std::string backend = info.param.backend == Backend::kGloo ? "Gloo" : "InProcess";
  return backend + "_" + std::to_string(info.param.size) + "ranks";
}

// Runs `fn` on `size` ranks of `backend`, each collective bounded by
// `timeout`: each rank's error, if any (run_ranks).
inline std::vector<std::exception_ptr> run_group(Backend backend, int size,
                                                 std::chrono::milliseconds timeout,
                                                 const RankFunction& fn) {
  RankGroupOptions options;
  options.backend = backend;
  options.timeout = timeout;
  return run_ranks(size, options, fn);
}

inline std::vector<GroupParam> all_groups() {
  std::vector<GroupParam> groups;
  for (Backend backend : {Backend::kInProcess, Backend::kGloo}) {
    for (int size : {1, 2, 4, 8}) groups.push_back({backend, size});
  }
  return groups;
}

// Deterministic values of mixed magnitude, so that summing in another order
// would change the bits.
inline std::vector<float> rank_floats(int rank, std::size_t count, std::uint32_t salt = 0) {
  std::mt19937 engine(1234u + 7919u * static_cast<std::uint32_t>(rank) + salt);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::vector<float> values(count);
  for (float& value : values) value = std::ldexp(mantissa(engine), exponent(engine));
  return values;
}

template <typename T>
std::vector<std::uint64_t> bits_of(const std::vector<T>& values) {
  std::vector<std::uint64_t> bits;
  bits.reserve(values.size());
  for (const T& value : values) {
    std::uint64_t pattern = 0;
    std::memcpy(&pattern, &value, sizeof(T));
    bits.push_back(pattern);
  }
  return bits;
}

// The CollectiveError a rank ended with, or nothing if it ended with none
// (any other exception type fails the test).
inline std::optional<CollectiveError> collective_error_of(const std::exception_ptr& failure) {
  if (!failure) return std::nullopt;
  try {
    std::rethrow_exception(failure);
  } catch (const CollectiveError& error) {
    return error;
  } catch (const std::exception& other) {
    ADD_FAILURE() << "expected CollectiveError, got: " << other.what();
  }
  return std::nullopt;
}

inline void expect_no_failures(const std::vector<std::exception_ptr>& failures) {
  for (std::size_t rank = 0; rank < failures.size(); ++rank) {
    if (!failures[rank]) continue;
    try {
      std::rethrow_exception(failures[rank]);
    } catch (const std::exception& error) {
      ADD_FAILURE() << "rank " << rank << " failed: " << error.what();
    }
  }
}

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace fp8c::collectives::testing
