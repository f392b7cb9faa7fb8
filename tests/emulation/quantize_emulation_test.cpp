// The per-tensor quantize kernels, their kernel IR printed for the host
// (codegen/backends/cuda) and run on the CPU (cuda_host.hpp), against the CPU
// reference: casts, transposes, amax and the current-scaling scale and
// inverse bit for bit, dbias partials (summed in tile order, as the reduce
// kernel does) within 1e-5 of the column's magnitude. Shapes on both sides of
// the fast path's boundaries, NaN/Inf inputs, threads in several orders, the
// 16-byte column stores. The conversion instructions themselves are the GPU
// tests' to check.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../runtime/block_quantize_input.hpp"
#include "codegen/numerics/scale.hpp"
#include "cuda_host.hpp"
#include "emulation_variants.hpp"
#include "guarded_buffer.hpp"
#include "runtime/quantize_launcher.hpp"
#include "runtime/reference/quantize_reference.hpp"

namespace fp8c::emulation {

#include "quantize_emulated.inc"

namespace {

using runtime::QuantizeResult;
using runtime::reference_element;
using runtime::reference_quantize;

constexpr unsigned char kPoison = 0xCD;

struct Case {
  int rows, cols;
  bool specials;  // NaN and Inf among the values
  Order order;
  std::size_t misalign = 0;  // bytes added to the output pointers
  bool any_bits = false;     // every element a random bit pattern (NaN payloads, signs)
};

void run_case(const QuantizeKernel& k, const EmulatedQuantizeKernel& kernel, const Case& c,
              std::uint32_t seed) {
  SCOPED_TRACE(k.name() + " " + std::to_string(c.rows) + "x" + std::to_string(c.cols) +
               (c.specials ? " with NaN/Inf" : "") + ", threads " + order_name(c.order));
  std::mt19937 rng(seed);
  const std::size_t rows = static_cast<std::size_t>(c.rows),
                    cols = static_cast<std::size_t>(c.cols);
  auto x = testing::random_block_quantize_input(k.input, rows, cols, c.specials, rng);
  if (c.any_bits)
    for (auto& byte : x) byte = static_cast<unsigned char>(rng());
  const auto pre = testing::random_block_quantize_input(k.input, rows, cols, false, rng);
  const float scale = std::uniform_real_distribution<float>(0.5f, 300.0f)(rng);
  const float amax_in = std::bit_cast<float>(
      reference_quantize(k, x.data(), pre.data(), 1.0f, 0.0f, c.rows, c.cols).amax_bits);
  const QuantizeResult want =
      reference_quantize(k, x.data(), pre.data(), scale, amax_in, c.rows, c.cols);

  const std::size_t n = rows * cols;
  Buffer row(n, c.misalign, kPoison), col(n, c.misalign, kPoison);
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(col.data()) % 16, c.misalign % 16);
  const int row_tiles = runtime::QuantizeLauncher::tiles(c.rows);
  std::vector<float> partial(static_cast<std::size_t>(row_tiles) * cols, NAN);
  float scale_out[8] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
  unsigned amax = 0;
  const unsigned amax_in_bits = std::bit_cast<unsigned>(amax_in);
  QuantizeCall a;
  a.x = x.data();
  a.pre = pre.data();
  a.scale = &scale;
  a.amax_in = &amax_in_bits;
  a.rowwise = row.data();
  a.columnwise = col.data();
  a.amax_out = &amax;
  a.dbias_partial = partial.data();
  a.scale_out = scale_out;
  a.rows = c.rows;
  a.cols = c.cols;
  // The launcher's own grid.
  const runtime::LaunchShape shape = runtime::quantize_launch_shape(c.rows, c.cols);
  const Dim3 grid{shape.grid[0], shape.grid[1], shape.grid[2]};
  const long long wide_before = host_wide_stores;
  run_grid(
      grid, static_cast<int>(shape.block[0]), c.order, seed, [&] { kernel.run(a); },
      kernel.poison_shared);
  // The 16-byte path runs exactly where it may: whole tiles, rows % 16 == 0,
  // an aligned output.
  const bool wide = k.wide_column_stores && k.columnwise && c.rows >= 128 && c.cols >= 128 &&
                    c.rows % 16 == 0 && c.cols % 8 == 0 && c.misalign % 16 == 0;
  EXPECT_EQ(host_wide_stores > wide_before, wide) << "16-byte columnwise stores";

  if (k.rowwise) {
    check_bytes(row.contents(), want.rowwise, "rowwise");
  } else {
    EXPECT_EQ(row.contents(), std::vector<unsigned char>(n, kPoison)) << "rowwise written";
  }
  if (k.columnwise) {
    check_bytes(col.contents(), want.columnwise, "columnwise");
  } else {
    EXPECT_EQ(col.contents(), std::vector<unsigned char>(n, kPoison)) << "columnwise written";
  }
  EXPECT_TRUE(row.guards_intact() && col.guards_intact()) << "a write outside an output";
  if (k.amax) {
    EXPECT_EQ(amax, want.amax_bits)
        << std::bit_cast<float>(amax) << " vs " << std::bit_cast<float>(want.amax_bits);
  }
  if (k.scale_from_amax) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(scale_out[0]), std::bit_cast<std::uint32_t>(want.scale));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(scale_out[4]),
              std::bit_cast<std::uint32_t>(numerics::scale_inverse(want.scale)));
  }
  if (k.dbias) {
    for (std::size_t cc = 0; cc < cols; ++cc) {
      float total = 0.0f;  // in tile order, as the reduce kernel adds them
      double magnitude = 0;
      for (std::size_t t = 0; t < static_cast<std::size_t>(row_tiles); ++t)
        total += partial[t * cols + cc];
      for (std::size_t r = 0; r < rows; ++r)
        magnitude += std::fabs(
            reference_element(k, x.data(), pre.data(), static_cast<std::int64_t>(r * cols + cc)));
      ASSERT_NEAR(total, want.dbias[cc], 1e-5 * magnitude + 1e-30) << "dbias[" << cc << "]";
    }
  }
}

class QuantizeEmulation : public ::testing::TestWithParam<std::size_t> {};

TEST_P(QuantizeEmulation, MatchesTheCpuReference) {
  const auto variants = emulated_quantize_variants();
  ASSERT_EQ(variants.size(), std::size(kEmulatedQuantizeKernels));
  const QuantizeKernel& k = variants[GetParam()];
  const EmulatedQuantizeKernel& kernel = kEmulatedQuantizeKernels[GetParam()];
  ASSERT_EQ(k.name(), kernel.name);
  // Whole tiles (the fast path); edge tiles; rows % 4 != 0 (columnwise
  // takes the element-wise path); cols % 8 != 0 (everything element-wise);
  // shapes below one tile; 5 row tiles (groups of 3 leave a shorter last
  // group; 64 exceeds them); rows % 16 == 0 with an edge tile (16-byte
  // columnwise stores in the whole tiles).
  // Sums of NaN/Inf are not comparable: dbias variants get finite data.
  const bool specials = !k.dbias;
  const Case cases[] = {
      {128, 128, specials, Order::forward},  {256, 384, false, Order::backward},
      {300, 520, specials, Order::shuffled}, {130, 136, specials, Order::forward},
      {129, 264, false, Order::backward},    {17, 33, specials, Order::shuffled},
      {1, 1, specials, Order::forward},      {520, 264, specials, Order::shuffled},
      {272, 264, specials, Order::backward}};
  std::uint32_t seed = 1;
  for (const Case& c : cases) {
    run_case(k, kernel, c, seed++);
    if (HasFatalFailure()) return;
  }
  // Whole 16-byte-capable tiles in every thread order.
  for (Order order : {Order::forward, Order::backward, Order::shuffled}) {
    run_case(k, kernel, {512, 256, specials, order}, seed++);
    if (HasFatalFailure()) return;
  }
  // Every bit pattern: NaN payloads and signs reach amax and the casts.
  if (!k.dbias) run_case(k, kernel, {256, 264, true, Order::shuffled, 0, true}, seed++);
  // A columnwise output 4 bytes past a 16-byte boundary: 4-byte stores, not
  // 16-byte ones (rowwise outputs must be 8-byte aligned: QuantizeLauncher).
  if (!k.rowwise) run_case(k, kernel, {256, 384, specials, Order::shuffled, 4}, seed++);
}

INSTANTIATE_TEST_SUITE_P(AllVariants, QuantizeEmulation,
                         ::testing::Range<std::size_t>(0, std::size(kEmulatedQuantizeKernels)),
                         [](const auto& info) {
                           return kEmulatedQuantizeKernels[info.param].name;
                         });

}  // namespace
}  // namespace fp8c::emulation
