// The generated block quantize kernels, their kernel IR printed for the host
// (codegen/backends/cuda, for_host) and run on the CPU (cuda_host.hpp),
// against the CPU reference bit for bit in data and scales: every variant,
// shapes on both sides of each fast-path boundary, NaN/Inf inputs,
// misaligned pointers, threads scheduled in several orders. Checks the
// kernels' data movement, reductions and scale arithmetic without a GPU;
// the conversion instruction itself is the GPU tests' to check. The dReLU
// kernels against the reference of dz = dy * relu'(z), computed here in fp32
// and quantized as an fp32 input.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../runtime/block_quantize_input.hpp"
#include "cuda_host.hpp"
#include "emulation_variants.hpp"
#include "guarded_buffer.hpp"
#include "runtime/block_quantize_launcher.hpp"
#include "runtime/cpu/activation.hpp"
#include "runtime/reference/block_quantize_reference.hpp"
#include "runtime/reference/element.hpp"
#include "runtime/reference/element_store.hpp"

namespace fp8c::emulation {

#include "block_quantize_emulated.inc"

namespace {

using runtime::block_scale_bytes;
using runtime::BlockQuantizeResult;
using runtime::load_element;
using runtime::reference_block_quantize;

// The reference: of x, or with dact of dz = x * act'(z) rounded to fp32
// (one multiply, as the kernel rounds it), quantized as an fp32 input.
BlockQuantizeResult reference(const BlockQuantizeKernel& k, const std::vector<unsigned char>& x,
                              const std::vector<unsigned char>& z, int rows, int cols) {
  if (k.dact == Activation::none) return reference_block_quantize(k, x.data(), rows, cols);
  if (k.dact != Activation::relu) throw std::invalid_argument("no bit-exact host act' but relu's");
  std::vector<float> dz(static_cast<std::size_t>(rows) * cols);
  for (std::size_t i = 0; i < dz.size(); ++i) {
    const auto at = static_cast<std::int64_t>(i);
    dz[i] = load_element(k.input, x.data(), at) *
            cpu::activation_grad(k.dact, load_element(k.input, z.data(), at));
  }
  BlockQuantizeKernel fp32 = k;
  fp32.input = ElemType::fp32;
  fp32.dact = Activation::none;
  return reference_block_quantize(fp32, dz.data(), rows, cols);
}

struct Case {
  int rows, cols;
  bool specials;
  Order order;
  std::size_t misalign = 0;  // bytes added to every pointer
  // The first 128 rows scaled by 2^-120: blocks whose amax is below
  // fp8_max / FLT_MAX (the scale clamps to FLT_MAX) or subnormal (MX codes
  // from the subnormal branch). fp16 flushes most of them to zero.
  bool tiny = false;
};

void run_case(const BlockQuantizeKernel& k, const EmulatedKernel& kernel, const Case& c,
              std::uint32_t seed) {
  SCOPED_TRACE(k.name() + " " + std::to_string(c.rows) + "x" + std::to_string(c.cols) +
               (c.specials ? " with NaN/Inf" : "") + ", threads " + order_name(c.order) +
               (c.misalign ? ", pointers misaligned by " + std::to_string(c.misalign) : "") +
               (c.tiny ? ", tiny first rows" : ""));
  std::mt19937 rng(seed);
  const auto random_input = [&] {
    return testing::random_block_quantize_input(k.input, static_cast<std::size_t>(c.rows),
                                                static_cast<std::size_t>(c.cols), c.specials, rng);
  };
  auto x = random_input();
  if (c.tiny)
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(std::min(c.rows, 128)) * c.cols; ++i)
      runtime::store_element(k.input, x.data(), i,
                             std::ldexp(load_element(k.input, x.data(), i), -120));
  const auto z = k.dact != Activation::none ? random_input() : std::vector<unsigned char>{};
  const BlockQuantizeResult want = reference(k, x, z, c.rows, c.cols);
  const std::size_t n = static_cast<std::size_t>(c.rows) * c.cols;
  // The inputs' guards read as NaN in every input type: reading past an
  // input would change the scales.
  const auto input = [&](const std::vector<unsigned char>& bytes) {
    Buffer b(bytes.size(), c.misalign ? element_bytes(k.input) : 0, 0);
    std::copy(bytes.begin(), bytes.end(), b.data());
    std::fill(b.bytes.begin() + b.offset + bytes.size(), b.bytes.end(), 0xFF);
    return b;
  };
  Buffer in = input(x), pre = input(z);
  Buffer row(n, c.misalign, 0xCD), col(n, c.misalign, 0xCD),
      row_scales(block_scale_bytes(k, c.rows, c.cols, false), 0, 0xCD),
      col_scales(block_scale_bytes(k, c.rows, c.cols, true), 0, 0xCD);
  const runtime::LaunchShape shape = runtime::block_quantize_launch_shape(c.rows, c.cols);
  const Dim3 grid{shape.grid[0], shape.grid[1], shape.grid[2]};
  run_grid(
      grid, static_cast<int>(shape.block[0]), c.order, seed,
      [&] {
        kernel.run(in.data(), row.data(), row_scales.data(), col.data(), col_scales.data(), c.rows,
                   c.cols, pre.data());
      },
      kernel.poison_shared);
  if (k.rowwise) {
    check_bytes(row.contents(), want.rowwise, "rowwise");
    check_bytes(row_scales.contents(), want.rowwise_scales, "rowwise scales");
  } else {
    EXPECT_EQ(row.contents(), std::vector<unsigned char>(n, 0xCD)) << "rowwise written";
  }
  if (k.columnwise) {
    check_bytes(col.contents(), want.columnwise, "columnwise");
    check_bytes(col_scales.contents(), want.columnwise_scales, "columnwise scales");
  } else {
    EXPECT_EQ(col.contents(), std::vector<unsigned char>(n, 0xCD)) << "columnwise written";
  }
  for (const Buffer* b : {&row, &col, &row_scales, &col_scales})
    EXPECT_TRUE(b->guards_intact()) << "a write outside an output";
}

class BlockQuantizeEmulation : public ::testing::TestWithParam<std::size_t> {};

TEST_P(BlockQuantizeEmulation, MatchesTheCpuReference) {
  const auto variants = emulated_block_quantize_variants();
  const BlockQuantizeKernel& k = variants[GetParam()];
  const EmulatedKernel& kernel = kEmulatedKernels[GetParam()];
  ASSERT_EQ(k.name(), kernel.name);
  // Whole tiles; edge tiles with cols % 8 == 0 (wide accesses, bounds
  // checked) and rows % 4 != 0 (element-wise columnwise stores); shapes
  // below one tile; odd shapes (element-wise everything).
  const Case cases[] = {
      {128, 128, true, Order::forward},     {256, 384, false, Order::backward},
      {300, 520, true, Order::shuffled},    {129, 264, true, Order::forward},
      {130, 136, false, Order::backward},   {4, 8, true, Order::shuffled},
      {1, 1, true, Order::forward},         {17, 33, true, Order::backward},
      {161, 95, true, Order::shuffled},     {256, 256, true, Order::shuffled, 1},
      {132, 264, false, Order::forward, 2}, {256, 264, true, Order::backward, 0, true}};
  std::uint32_t seed = 1;
  for (const Case& c : cases) {
    run_case(k, kernel, c, seed++);
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(AllVariants, BlockQuantizeEmulation,
                         ::testing::Range<std::size_t>(0, std::size(kEmulatedKernels)),
                         [](const auto& info) { return kEmulatedKernels[info.param].name; });

}  // namespace
}  // namespace fp8c::emulation
