// Every dequantize kernel variant on the GPU against the CPU reference, bit
// for bit (outputs and amax; NaN is canonical on both sides), on random
// codes (all 256 of them in every run), scales with the special values (NaN,
// Inf, 0, subnormal, negative, huge; E8M0 0x00, 0xFE, 0xFF), and layouts the
// plans produce: contiguous, gathered along the inner dim (rank segments,
// permuted or not, segment lengths that are not multiples of 4 or of a
// block), shapes from 1x1 up, outputs poisoned first; plus misaligned
// pointers for the element-wise paths. Each on both kernel backends (NVRTC
// and LLVM build the same kernel IR), and the two builds' outputs compared
// byte for byte on the same inputs. Skipped, visibly, without a GPU (or,
// for LLVM, without the LLVM module).

#include <gtest/gtest.h>

#include "dequantize_inputs.hpp"
#include "gpu_fixture.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "epilogue_variants.hpp"
#include "runtime/dequantize_launcher.hpp"
#include "runtime/reference/dequantize_reference.hpp"

namespace fp8c {
void PrintTo(const DequantizeKernel& k, std::ostream* os) {
  *os << k.name();
}
}  // namespace fp8c

namespace fp8c::runtime {
namespace {

constexpr unsigned char kPoison = 0xCD;

using testing::gpu;
using testing::random_codes;
using testing::random_scale;
using testing::random_scales;

DeviceBuffer upload(const std::vector<std::uint8_t>& host, std::size_t offset) {
  DeviceBuffer b(host.size() + offset + 16);
  b.upload(host.data(), host.size(), offset);
  return b;
}

// Both backends build the dequantizes (kernel IR).
const auto kBackends = ::testing::Values(KernelBackend::nvrtc, KernelBackend::llvm);

std::string backend_name(KernelBackend b) {
  return b == KernelBackend::llvm ? "llvm" : "nvrtc";
}

// A case's inputs: random codes and scales from `seed`.
struct Inputs {
  std::vector<std::uint8_t> data, scales;
  float tensor_scale = 0;
};

Inputs random_inputs(const DequantizeKernel& k, const DequantizeLayout& layout,
                     std::uint32_t seed) {
  std::mt19937 rng(seed);
  Inputs in;
  in.data = random_codes(static_cast<std::size_t>(layout.outer * layout.inner), rng);
  in.scales = random_scales(k, dequantize_scale_count(k, layout), rng);
  in.tensor_scale = random_scale(rng);
  return in;
}

// The kernel's output bytes and amax bits. data_shift / out_shift: bytes
// past an aligned address, to exercise the element-wise loads and stores.
DequantizeResult run_kernel(const DequantizeLauncher& launcher, const DequantizeLayout& layout,
                            const Inputs& in, std::size_t data_shift, std::size_t out_shift) {
  testing::Gpu& g = gpu();
  const DequantizeKernel& k = launcher.kernel();
  const auto n = static_cast<std::size_t>(layout.outer * layout.inner);
  const auto& data = in.data;
  const auto& scales = in.scales;
  const float tensor_scale = in.tensor_scale;
  const std::size_t width = element_bytes(k.output);
  DeviceBuffer d_data = upload(data, data_shift), d_scales = upload(scales, 0), d_tensor_scale(4),
               d_out(n * width + out_shift + 16), d_amax(4);
  d_tensor_scale.upload(&tensor_scale, 4);
  d_out.fill(kPoison);
  d_amax.fill(0);
  DequantizeArgs a;
  a.data = d_data.get() + data_shift;
  a.tensor_scale = d_tensor_scale.get();
  a.block_scales = d_scales.get();
  a.out = d_out.get() + out_shift;
  a.amax = d_amax.get();
  a.outer = static_cast<int>(layout.outer);
  a.inner = static_cast<int>(layout.inner);
  a.segments = layout.segments;
  a.segmented = layout.segmented;
  launcher.launch(a, nullptr);
  g.device->synchronize();

  DequantizeResult got;
  got.out.resize(n * width);
  d_out.download(got.out.data(), got.out.size(), out_shift);
  if (k.amax) d_amax.download(&got.amax_bits, 4);
  return got;
}

void run_case(const DequantizeLauncher& launcher, const DequantizeLayout& layout,
              std::uint32_t seed, std::size_t data_shift = 0, std::size_t out_shift = 0) {
  const DequantizeKernel& k = launcher.kernel();
  SCOPED_TRACE(k.name() + " " + std::to_string(layout.outer) + "x" + std::to_string(layout.inner) +
               " segments " + std::to_string(layout.segments) +
               (layout.segmented ? " segmented" : "") + " shifts " + std::to_string(data_shift) +
               "/" + std::to_string(out_shift) + " seed " + std::to_string(seed) + " " +
               launcher.compiled().compiler);
  const Inputs in = random_inputs(k, layout, seed);
  const DequantizeResult want =
      reference_dequantize(k, in.data.data(), in.scales.data(), in.tensor_scale, layout);
  const DequantizeResult result = run_kernel(launcher, layout, in, data_shift, out_shift);
  const std::vector<std::uint8_t>& got = result.out;
  const std::size_t n = got.size() / element_bytes(k.output);
  const std::size_t width = element_bytes(k.output);
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::memcmp(&got[i * width], &want.out[i * width], width) == 0) continue;
    if (++mismatches > 5) continue;
    std::uint32_t g_bits = 0, w_bits = 0;
    std::memcpy(&g_bits, &got[i * width], width);
    std::memcpy(&w_bits, &want.out[i * width], width);
    ADD_FAILURE() << "out[" << i << "] = 0x" << std::hex << g_bits << ", want 0x" << w_bits;
  }
  EXPECT_EQ(mismatches, 0u);
  if (k.amax) {
    EXPECT_EQ(result.amax_bits, want.amax_bits)
        << std::bit_cast<float>(result.amax_bits) << " vs " << std::bit_cast<float>(want.amax_bits);
  }
}

std::vector<DequantizeLayout> layouts() {
  return {
      {1, 1, 1, false},      {17, 33, 1, false},   {64, 128, 1, false},  {300, 520, 1, false},
      {129, 1000, 1, false}, {200, 1000, 2, true}, {33, 1000, 8, true},  {100, 1024, 4, false},
      {256, 2048, 8, true},  {77, 250, 2, true},   {65, 4004, 4, false}, {130, 96, 2, true},
  };
}

class DequantizeGpu : public ::testing::TestWithParam<std::tuple<DequantizeKernel, KernelBackend>> {
};

TEST_P(DequantizeGpu, MatchesTheCpuReferenceBitForBit) {
  const auto [k, backend] = GetParam();
  REQUIRE_GPU_AND_BACKEND(backend);
  const DequantizeLauncher launcher(gpu().jit_for(backend), k);
  std::uint32_t seed = 1;
  for (const auto& layout : layouts()) run_case(launcher, layout, seed++);
}

TEST_P(DequantizeGpu, ElementWisePathsOnMisalignedPointers) {
  const auto [k, backend] = GetParam();
  REQUIRE_GPU_AND_BACKEND(backend);
  const DequantizeLauncher launcher(gpu().jit_for(backend), k);
  run_case(launcher, {300, 520, 1, false}, 41, 1, element_bytes(k.output));
  run_case(launcher, {200, 1000, 2, true}, 42, 3, 0);
  // Pairs of transposed elements but not vectors of four (4 of 8 bytes, fp32 8 of 16).
  run_case(launcher, {300, 520, 1, false}, 43, 0, 2 * element_bytes(k.output));
}

// Large shapes: NVRTC on every bf16 variant; LLVM on four representative ones
// (each scaling once, both orientations, amax once).
bool large_on(const DequantizeKernel& k, KernelBackend backend) {
  if (k.output != ElemType::bf16) return false;
  if (backend == KernelBackend::nvrtc) return true;
  if (k.format != ElemType::e4m3) return false;
  switch (k.scaling) {
    case Scaling::per_tensor:
      return !k.transpose && !k.amax;
    case Scaling::block_1x128:
      return k.transpose && !k.amax;
    case Scaling::block_128x128:
      return !k.transpose && k.amax;
    default:
      return k.transpose && !k.amax;
  }
}

TEST_P(DequantizeGpu, LargeShapes) {
  const auto [k, backend] = GetParam();
  REQUIRE_GPU_AND_BACKEND(backend);
  if (!large_on(k, backend)) GTEST_SKIP() << "a representative few variants suffice here";
  const DequantizeLauncher launcher(gpu().jit_for(backend), k);
  run_case(launcher, {4095, 8191, 1, false}, 99);
  run_case(launcher, {4096, 8192, 2, true}, 100);
}

INSTANTIATE_TEST_SUITE_P(AllVariants, DequantizeGpu,
                         ::testing::Combine(::testing::ValuesIn(testing::dequantize_variants()),
                                            kBackends),
                         [](const auto& info) {
                           return std::get<0>(info.param).name() + "_" +
                                  backend_name(std::get<1>(info.param));
                         });

// The LLVM and NVRTC builds of each variant agree with each other, byte for
// byte and in amax, on the same inputs (not only each with the reference):
// the word path with vector stores, and the element path from misaligned
// pointers.
class DequantizeBackends : public ::testing::TestWithParam<DequantizeKernel> {};

TEST_P(DequantizeBackends, LlvmBuildEqualsNvrtcBuild) {
  REQUIRE_GPU_AND_BACKEND(KernelBackend::llvm);
  const DequantizeKernel& k = GetParam();
  const DequantizeLauncher nvrtc(gpu().jit_for(KernelBackend::nvrtc), k);
  const DequantizeLauncher llvm(gpu().jit_for(KernelBackend::llvm), k);
  EXPECT_EQ(llvm.compiled().compiler.rfind("llvm ", 0), 0u) << llvm.compiled().compiler;
  EXPECT_EQ(nvrtc.compiled().compiler.rfind("nvrtc ", 0), 0u) << nvrtc.compiled().compiler;
  const std::size_t width = element_bytes(k.output);
  for (const auto& [layout, shift] :
       {std::pair<DequantizeLayout, std::size_t>{{1000, 3000, 1, false}, 0},
        {{777, 1000, 4, true}, 1}}) {
    const Inputs in = random_inputs(k, layout, 7);
    const DequantizeResult a = run_kernel(llvm, layout, in, shift, shift * width);
    const DequantizeResult b = run_kernel(nvrtc, layout, in, shift, shift * width);
    EXPECT_TRUE(a.out == b.out) << layout.outer << "x" << layout.inner;
    EXPECT_EQ(a.amax_bits, b.amax_bits) << layout.outer << "x" << layout.inner;
  }
}

INSTANTIATE_TEST_SUITE_P(AllVariants, DequantizeBackends,
                         ::testing::ValuesIn(testing::dequantize_variants()),
                         [](const auto& info) { return info.param.name(); });

}  // namespace
}  // namespace fp8c::runtime
