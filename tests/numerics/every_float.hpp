#pragma once
// Compares one of our conversions with a reference (CUDA's own, mostly) over
// a set of floats: by default every one of the 2^32 float bit patterns.
//
// Why exhaustive: 2^32 inputs per conversion is small enough. On 2 cores in a
// Release build the ten float conversions (four FP8 format x saturation
// pairs, bf16, fp16, four E8M0 rounding x saturation pairs) take about 30 s in
// all, nearly all of it in CUDA's scalar host code. Exhaustive beats choosing
// boundaries by hand: it cannot miss a case we did not think of.
// Unoptimised builds (no __OPTIMIZE__) would take many minutes, so there the
// default set is every upper half-word combined with the lower half-words of
// LowerHalfWords::boundaries_and_sample instead: all FP8, E8M0, bf16 and fp16
// rounding midpoints and their neighbours, plus a fixed random sample.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fp8c::numerics::testing {

// Our conversions are branch-free integer code that vectorises with AVX2's
// per-lane shifts; cloning the loop lets it do so while the binary still runs
// on any x86-64 (the clone is picked at load time).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FP8C_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define FP8C_VECTOR_CLONES
#endif

inline constexpr bool kOptimisedBuild =
#if defined(__OPTIMIZE__)
    true;
#else
    false;
#endif

// Which lower half-words to combine with each upper half-word.
enum class LowerHalfWords {
  every,  // all 65536: every float in the upper half-word range
  // Only those that put FP8 / E8M0 (0x0000), bf16 (0x8000) and fp16 (0x1000,
  // 0x3000, ...) rounding midpoints and their +-1 neighbours in play, plus
  // fixed pseudo-random ones: 64 in all.
  boundaries_and_sample,
};

inline std::vector<std::uint16_t> lower_half_words(LowerHalfWords which) {
  std::vector<std::uint16_t> words;
  if (which == LowerHalfWords::every) {
    for (std::uint32_t w = 0; w <= 0xFFFF; ++w) words.push_back(static_cast<std::uint16_t>(w));
    return words;
  }
  words = {0x0000, 0x0001, 0x0002, 0xFFFF, 0xFFFE, 0x7FFF, 0x8000, 0x8001, 0x0FFF,
           0x1000, 0x1001, 0x2FFF, 0x3000, 0x3001, 0xEFFF, 0xF000, 0xF001};
  std::mt19937 random(20240601);
  while (words.size() < 64) words.push_back(static_cast<std::uint16_t>(random()));
  return words;
}

// The floats a comparison visits: upper half-words first_upper..last_upper
// (0..0x7FFF is every non-negative float), each with `lower` half-words.
struct FloatSet {
  std::uint32_t first_upper = 0;
  std::uint32_t last_upper = 0xFFFF;
  LowerHalfWords lower =
      kOptimisedBuild ? LowerHalfWords::every : LowerHalfWords::boundaries_and_sample;

  std::uint64_t size() const {
    return (last_upper - first_upper + 1ull) * lower_half_words(lower).size();
  }
};

struct Mismatch {
  std::uint32_t input_bits;
  std::uint32_t ours;
  std::uint32_t reference;
};

struct Comparison {
  std::uint64_t checked = 0;
  std::uint64_t mismatches = 0;
  std::vector<Mismatch> first_mismatches;

  std::string describe() const {
    std::ostringstream text;
    text << mismatches << " of " << checked
         << " inputs differ; first ones (input: ours vs reference):";
    for (const Mismatch& m : first_mismatches) {
      text << "\n  0x" << std::hex << m.input_bits << ": 0x" << m.ours << " vs 0x" << m.reference;
    }
    return text.str();
  }
};

template <typename Result, typename Convert>
FP8C_VECTOR_CLONES void convert_half_words(std::uint32_t upper, const std::uint16_t* lower,
                                           std::size_t count, Result* out, Convert convert) {
  for (std::size_t i = 0; i < count; ++i) out[i] = convert((upper << 16) | lower[i]);
}

// `ours` and `reference` map float bits (std::uint32_t) to the same Result.
// The default set is every float in optimised builds.
template <typename Result, typename Ours, typename Reference>
Comparison compare_on_floats(Ours ours, Reference reference, FloatSet floats = {}) {
  const std::vector<std::uint16_t> lower = lower_half_words(floats.lower);
  constexpr std::size_t kReported = 8;
  Comparison total;
  std::mutex total_mutex;
  std::atomic<std::uint32_t> next_upper{floats.first_upper};

  auto work = [&] {
    std::vector<Result> ours_out(lower.size());
    std::vector<Result> reference_out(lower.size());
    Comparison local;
    for (std::uint32_t upper; (upper = next_upper.fetch_add(1)) <= floats.last_upper;) {
      convert_half_words(upper, lower.data(), lower.size(), ours_out.data(), ours);
      for (std::size_t i = 0; i < lower.size(); ++i)
        reference_out[i] = reference((upper << 16) | lower[i]);
      local.checked += lower.size();
      if (std::memcmp(ours_out.data(), reference_out.data(), lower.size() * sizeof(Result)) == 0) {
        continue;
      }
      for (std::size_t i = 0; i < lower.size(); ++i) {
        if (ours_out[i] == reference_out[i]) continue;
        ++local.mismatches;
        if (local.first_mismatches.size() < kReported) {
          local.first_mismatches.push_back(
              {(upper << 16) | lower[i], ours_out[i], reference_out[i]});
        }
      }
    }
    const std::lock_guard lock(total_mutex);
    total.checked += local.checked;
    total.mismatches += local.mismatches;
    for (const Mismatch& m : local.first_mismatches) {
      if (total.first_mismatches.size() < kReported) total.first_mismatches.push_back(m);
    }
  };

  const unsigned thread_count = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < thread_count; ++t) threads.emplace_back(work);
  for (std::thread& thread : threads) thread.join();
  return total;
}

}  // namespace fp8c::numerics::testing
