// The dequantize kernels (kernel IR, printed for the host by the CUDA
// printer NVRTC's source comes from) run on the CPU (cuda_host.hpp) against
// runtime/reference/dequantize_reference bit for bit: every format, scaling,
// output type and orientation, amax on and off; codes covering all 256
// values, scales with the special values (NaN, Inf, 0, subnormal, negative;
// E8M0 0x00, 0xFE, 0xFF); whole and partial tiles, odd inner extents (loads
// and stores element by element), rank segments permuted or not (segment
// lengths that are not multiples of 4 or of a block), misaligned data and
// output pointers; threads in each of the three orders, shared memory
// poisoned before each block, guards around the output.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../runtime/dequantize_inputs.hpp"
#include "codegen/kernels/dequantize.hpp"
#include "cuda_host.hpp"
#include "emulation_variants.hpp"
#include "guarded_buffer.hpp"
#include "runtime/reference/dequantize_reference.hpp"

namespace fp8c::emulation {

#include "dequantize_emulated.inc"

namespace {

using testing::random_codes;
using testing::random_scale;
using testing::random_scales;

struct Case {
  runtime::DequantizeLayout layout;
  std::size_t data_shift = 0;  // bytes past a 16-byte boundary
  int out_shift = 0;           // in output elements
};

std::string describe(const Case& c) {
  const auto& L = c.layout;
  return std::to_string(L.outer) + "x" + std::to_string(L.inner) + " segments " +
         std::to_string(L.segments) + (L.segmented ? " segmented" : "") + " shifts " +
         std::to_string(c.data_shift) + "/" + std::to_string(c.out_shift);
}

// Whole tiles, partial tiles in both directions, two 128-row blocks, odd
// inner extents, segments of word and of odd lengths, permuted or not, and
// misaligned pointers (data: element loads; output: element stores, or pairs
// but not vectors).
std::vector<Case> cases() {
  return {
      {{64, 128, 1, false}},        {{130, 300, 1, false}},       {{17, 33, 1, false}},
      {{1, 1, 1, false}},           {{65, 1000, 2, false}},       {{40, 1024, 4, true}},
      {{33, 250, 2, true}},         {{70, 520, 4, false}},        {{150, 256, 2, true}},
      {{130, 300, 1, false}, 1, 1}, {{130, 300, 1, false}, 0, 2}, {{64, 256, 2, true}, 3, 1},
  };
}

// Each of the 256 codes at least once, the rest random.
void run_case(const DequantizeKernel& k, const EmulatedDequantize& kernel, const Case& c,
              Order order, std::uint32_t seed) {
  SCOPED_TRACE(describe(c) + ", threads " + order_name(order));
  const auto& L = c.layout;
  std::mt19937 rng(seed);
  const auto n = static_cast<std::size_t>(L.outer * L.inner);
  const auto codes = random_codes(n, rng);
  const auto scales = random_scales(k, runtime::dequantize_scale_count(k, L), rng);
  const float tensor_scale = random_scale(rng);
  const runtime::DequantizeResult want =
      runtime::reference_dequantize(k, codes.data(), scales.data(), tensor_scale, L);

  const std::size_t width = element_bytes(k.output);
  Buffer data(n, c.data_shift, 0), out(n * width, c.out_shift * width, 0xCD);
  std::copy_n(codes.begin(), n, data.data());  // codes holds a byte more when n is 0
  unsigned amax = 0;
  DequantizeCall call{data.data(),
                      &tensor_scale,
                      scales.data(),
                      out.data(),
                      &amax,
                      static_cast<int>(L.outer),
                      static_cast<int>(L.inner),
                      L.segments,
                      L.segmented ? 1 : 0};
  const Dim3 grid{
      static_cast<unsigned>((L.outer + kDequantizeTileOuter - 1) / kDequantizeTileOuter),
      static_cast<unsigned>((L.inner + kDequantizeTileInner - 1) / kDequantizeTileInner), 1};
  run_grid(
      grid, kDequantizeThreads, order, seed, [&] { kernel.run(call); }, kernel.poison_shared);
  check_bytes(out.contents(), want.out, "dequantized");
  EXPECT_TRUE(out.guards_intact()) << "a write outside the output";
  EXPECT_EQ(amax, k.amax ? want.amax_bits : 0u)
      << std::bit_cast<float>(amax) << " vs " << std::bit_cast<float>(want.amax_bits);
}

class DequantizeEmulation : public ::testing::TestWithParam<std::size_t> {};

TEST_P(DequantizeEmulation, MatchesTheCpuReferenceBitForBit) {
  const DequantizeKernel k = emulated_dequantize_variants()[GetParam()];
  const EmulatedDequantize& kernel = kEmulatedDequantizes[GetParam()];
  ASSERT_EQ(k.name(), kernel.name);
  std::uint32_t seed = 1;
  for (Order order : {Order::forward, Order::backward, Order::shuffled})
    for (const Case& c : cases()) {
      run_case(k, kernel, c, order, seed++);
      if (::testing::Test::HasFailure()) return;
    }
}

INSTANTIATE_TEST_SUITE_P(Variants, DequantizeEmulation,
                         ::testing::Range<std::size_t>(0, emulated_dequantize_variants().size()),
                         [](const auto& info) {
                           return emulated_dequantize_variants()[info.param].name();
                         });

}  // namespace
}  // namespace fp8c::emulation
