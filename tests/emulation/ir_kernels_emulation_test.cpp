// The kernels built as kernel IR (transposes, permutes), printed for the
// host by the CUDA printer (the same printer NVRTC's source comes from),
// run on the CPU (cuda_host.hpp) against the CPU reference byte for byte:
// the transposes' vector fast path and edge path, batches of word
// matrices, the permutes' every unit width, pointers misaligned where the
// kernels allow it, threads in several orders, shared memory poisoned
// before each block and guards around each output.

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../runtime/other_kernel_variants.hpp"
#include "codegen/kernels/permute.hpp"
#include "codegen/kernels/transpose.hpp"
#include "cuda_host.hpp"
#include "emulation_variants.hpp"
#include "guarded_buffer.hpp"
#include "runtime/reference/permute_reference.hpp"
#include "runtime/reference/scale_update_reference.hpp"
#include "runtime/reference/transpose_reference.hpp"

namespace fp8c::emulation {

#include "ir_kernels_emulated.inc"

namespace {

struct Case {
  int element_bytes, rows, cols, batch;
  Order order;
  std::size_t misalign = 0;
};

std::string describe(const Case& c) {
  return std::to_string(c.element_bytes) + "-byte " + std::to_string(c.rows) + "x" +
         std::to_string(c.cols) + " batch " + std::to_string(c.batch) + ", threads " +
         order_name(c.order) + (c.misalign ? ", misaligned by " + std::to_string(c.misalign) : "");
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << describe(c);
}

const EmulatedTranspose& kernel_for(int element_bytes) {
  for (const auto& k : kEmulatedTransposes)
    if (k.element_bytes == element_bytes) return k;
  throw std::invalid_argument("no emulated transpose of " + std::to_string(element_bytes));
}

class TransposeEmulation : public ::testing::TestWithParam<Case> {};

TEST_P(TransposeEmulation, MatchesReferenceBitForBit) {
  const Case c = GetParam();
  SCOPED_TRACE(describe(c));
  const std::size_t one = static_cast<std::size_t>(c.rows) * c.cols * c.element_bytes;
  const std::size_t n = one * static_cast<std::size_t>(c.batch);
  std::mt19937 rng(static_cast<unsigned>(c.rows * 977 + c.cols * 31 + c.batch));
  std::uniform_int_distribution<int> byte(0, 255);
  Buffer in(n, c.misalign, 0), out(n, c.misalign, 0xCD);
  for (std::size_t i = 0; i < n; ++i) in.data()[i] = static_cast<unsigned char>(byte(rng));
  std::vector<std::uint8_t> want;
  for (int b = 0; b < c.batch; ++b) {
    const auto part =
        runtime::reference_transpose(in.data() + b * one, c.rows, c.cols, c.element_bytes);
    want.insert(want.end(), part.begin(), part.end());
  }
  const int tile = transpose_tile(c.element_bytes);
  const Dim3 grid{static_cast<unsigned>((c.cols + tile - 1) / tile),
                  static_cast<unsigned>((c.rows + tile - 1) / tile),
                  static_cast<unsigned>(c.batch)};
  const EmulatedTranspose& kernel = kernel_for(c.element_bytes);
  run_grid(
      grid, kTransposeThreads, c.order, 17,
      [&] { kernel.run(in.data(), out.data(), c.rows, c.cols); }, kernel.poison_shared);
  check_bytes(out.contents(), want, "transposed");
  EXPECT_TRUE(out.guards_intact()) << "a write outside the output";
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (Order order : {Order::forward, Order::backward, Order::shuffled}) {
    // Bytes: whole 128x128 tiles (the vector path), partial tiles, shapes
    // not multiples of 16 (the edge path, also from misaligned addresses).
    all.push_back({1, 128, 256, 1, order});
    all.push_back({1, 144, 272, 1, order});
    all.push_back({1, 256, 16, 1, order});
    all.push_back({1, 17, 33, 1, order, 3});
    all.push_back({1, 1, 1, 1, order, 1});
    all.push_back({1, 130, 131, 1, order, 5});
    // Words: one matrix and batches, edges on both sides.
    all.push_back({4, 33, 31, 1, order});
    all.push_back({4, 100, 3, 3, order, 4});
    all.push_back({4, 64, 40, 2, order});
  }
  return all;
}

std::string test_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on
  // "literal" + std::string temporaries here.
  std::string n = "u";
  ((n += std::to_string(8 * c.element_bytes)) += "_") += std::to_string(c.rows);
  ((n += "x") += std::to_string(c.cols)) += "_b";
  ((n += std::to_string(c.batch)) += "_") += order_name(c.order);
  if (c.misalign) (n += "_off") += std::to_string(c.misalign);
  return n;
}

INSTANTIATE_TEST_SUITE_P(Cases, TransposeEmulation, ::testing::ValuesIn(cases()), test_name);

struct PermuteCase {
  int element_bytes, ranks, outer;
  long long inner_local;
  Order order;
};

void PrintTo(const PermuteCase& c, std::ostream* os) {
  *os << c.element_bytes << "-byte ranks " << c.ranks << " outer " << c.outer << " inner "
      << c.inner_local << ", threads " << order_name(c.order);
}

class PermuteEmulation : public ::testing::TestWithParam<PermuteCase> {};

// Each unit width (16, 8, 4, 2, 1 bytes, chosen by the segment's byte
// length) and more units than one round of threads moves.
TEST_P(PermuteEmulation, MatchesReferenceBitForBit) {
  const PermuteCase c = GetParam();
  const std::size_t n =
      static_cast<std::size_t>(c.ranks) * c.outer * c.inner_local * c.element_bytes;
  std::mt19937 rng(static_cast<unsigned>(c.ranks * 7 + c.outer * 131 + c.inner_local));
  std::uniform_int_distribution<int> byte(0, 255);
  Buffer in(n, 0, 0), out(n, 0, 0xCD);
  for (std::size_t i = 0; i < n; ++i) in.data()[i] = static_cast<unsigned char>(byte(rng));
  const auto want =
      runtime::reference_permute(in.data(), c.element_bytes, c.ranks, c.outer, c.inner_local);
  const EmulatedPermute* kernel = nullptr;
  for (const auto& k : kEmulatedPermutes)
    if (k.element_bytes == c.element_bytes) kernel = &k;
  ASSERT_NE(kernel, nullptr);
  run_grid({static_cast<unsigned>(c.outer), 1, 1}, kPermuteThreads, c.order, 5,
           [&] { kernel->run(in.data(), out.data(), c.ranks, c.outer, c.inner_local); });
  check_bytes(out.contents(), want, "permuted");
  EXPECT_TRUE(out.guards_intact()) << "a write outside the output";
}

std::vector<PermuteCase> permute_cases() {
  std::vector<PermuteCase> all;
  for (Order order : {Order::forward, Order::shuffled})
    for (int e : {1, 2, 4})
      for (auto [ranks, outer, inner] : {std::tuple<int, int, long long>{1, 1, 1},
                                         {2, 3, 16},
                                         {4, 2, 8},
                                         {3, 2, 4},
                                         {2, 2, 3},
                                         {8, 2, 1000},
                                         {4, 1, 4097}})
        all.push_back({e, ranks, outer, inner, order});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Cases, PermuteEmulation, ::testing::ValuesIn(permute_cases()));

// Each scale update over steps whose amaxes are the special values (NaN,
// +-Inf, +-0, negative, subnormal, overflowing quotients) and random ones,
// on histories that hold them too, against codegen/numerics bit for bit;
// the guarded variant also with a NaN verdict (nothing may change).
class ScaleUpdateEmulation : public ::testing::TestWithParam<std::size_t> {};

TEST_P(ScaleUpdateEmulation, MatchesNumericsBitForBit) {
  const ScaleUpdateKernel k = emulated_scale_update_variants()[GetParam()];
  const EmulatedScaleUpdate& kernel = kEmulatedScaleUpdates[GetParam()];
  ASSERT_EQ(k.name(), kernel.name);
  SCOPED_TRACE(k.name());
  const std::vector<float> specials = testing::special_amaxes();
  const std::size_t n = k.formats.size(), len = k.history_length;
  const std::size_t stride = static_cast<std::size_t>(k.scale_stride);
  std::mt19937 rng(static_cast<unsigned>(len * 7 + n));
  std::lognormal_distribution<float> magnitude(0.0f, 8.0f);
  runtime::ScaleUpdateState state;
  for (std::size_t i = 0; i < n * len; ++i)
    state.history.push_back(rng() % 100 < 5 ? specials[rng() % specials.size()] : magnitude(rng));
  for (std::size_t t = 0; t < n; ++t) state.scale.push_back(0.5f + static_cast<float>(t));
  std::vector<float> history = state.history, scale(n * stride, -7.0f), inv(n * stride, -7.0f);
  for (std::size_t t = 0; t < n; ++t) scale[t * stride] = state.scale[t];
  std::vector<float> guard(static_cast<std::size_t>(std::max(k.guard, 1)), 1.0f);
  for (int step = 0; step < static_cast<int>(specials.size()) + 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<float> amax(n);
    for (std::size_t t = 0; t < n; ++t)
      amax[t] = step < static_cast<int>(specials.size())
                    ? specials[(static_cast<std::size_t>(step) + 3 * t) % specials.size()]
                    : magnitude(rng);
    // The guarded kernel sees a NaN verdict every third step.
    const bool vetoed = k.guard > 0 && step % 3 == 2;
    guard.back() = vetoed ? std::bit_cast<float>(0xFFC00001u) : 2.0f;
    const std::vector<float> history_before = history, scale_before = scale, inv_before = inv;
    run_grid(
        {static_cast<unsigned>(n), 1, 1}, kScaleUpdateThreads, Order::shuffled,
        static_cast<std::uint32_t>(step),
        [&] {
          kernel.run(history.data(), amax.data(), scale.data(), scale.data(), inv.data(),
                     guard.data());
        },
        kernel.poison_shared);
    if (vetoed) {
      EXPECT_EQ(std::memcmp(history.data(), history_before.data(), history.size() * 4), 0);
      EXPECT_EQ(std::memcmp(scale.data(), scale_before.data(), scale.size() * 4), 0);
      EXPECT_EQ(std::memcmp(inv.data(), inv_before.data(), inv.size() * 4), 0);
      continue;
    }
    state = runtime::reference_scale_update(k, state, amax);
    EXPECT_EQ(std::memcmp(history.data(), state.history.data(), history.size() * 4), 0)
        << "history differs after the roll";
    for (std::size_t t = 0; t < n; ++t) {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(scale[t * stride]),
                std::bit_cast<std::uint32_t>(state.scale[t]))
          << "tensor " << t << " amax " << amax[t];
      EXPECT_EQ(std::bit_cast<std::uint32_t>(inv[t * stride]),
                std::bit_cast<std::uint32_t>(state.scale_inv[t]))
          << "tensor " << t << " scale_inv";
      for (std::size_t s = 1; s < stride; ++s)
        EXPECT_EQ(scale[t * stride + s], -7.0f) << "a write between strided scales";
    }
    if (::testing::Test::HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, ScaleUpdateEmulation,
                         ::testing::Range<std::size_t>(0, emulated_scale_update_variants().size()),
                         [](const auto& info) {
                           return emulated_scale_update_variants()[info.param].name();
                         });

}  // namespace
}  // namespace fp8c::emulation
