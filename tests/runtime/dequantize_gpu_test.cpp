// Every dequantize kernel variant on the GPU against the CPU reference, bit
// for bit (outputs and amax; NaN is canonical on both sides), on random
// codes (all 256 of them in every run), scales with the special values (NaN,
// Inf, 0, subnormal, negative, huge; E8M0 0x00, 0xFE, 0xFF), and layouts the
// plans produce: contiguous, gathered along the inner dim (rank segments,
// permuted or not, segment lengths that are not multiples of 4 or of a
// block), shapes from 1x1 up, outputs poisoned first; plus misaligned
// pointers for the element-wise paths. Skipped, visibly, without a GPU.

#include <gtest/gtest.h>

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

std::vector<std::uint8_t> random_codes(std::size_t n, std::mt19937& rng) {
  std::vector<std::uint8_t> bytes(std::max<std::size_t>(n, 1));
  for (std::size_t i = 0; i < n; ++i)
    bytes[i] = i < 256 ? static_cast<std::uint8_t>(i) : static_cast<std::uint8_t>(rng());
  std::shuffle(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n), rng);
  return bytes;
}

float random_scale(std::mt19937& rng) {
  const float specials[] = {std::bit_cast<float>(0x7FC00000u), INFINITY, -INFINITY, 0.0f,
                            std::bit_cast<float>(0x00000003u), -2.5f,    3e38f,     1e-38f};
  if (rng() % 16 == 0) return specials[rng() % 8];
  return std::ldexp(std::uniform_real_distribution<float>(1.0f, 2.0f)(rng),
                    static_cast<int>(rng() % 60) - 30);
}

// The block scale tensor's raw bytes: fp32 scale_invs, or E8M0 codes with
// 0x00, 0x7F, 0xFE and 0xFF among them.
std::vector<std::uint8_t> random_scales(const DequantizeKernel& k, std::int64_t count,
                                        std::mt19937& rng) {
  if (k.scaling == Scaling::mx_1x32) {
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(std::max<std::int64_t>(count, 1)));
    const std::uint8_t specials[] = {0x00, 0x7F, 0xFE, 0xFF};
    for (std::size_t i = 0; i < codes.size(); ++i)
      codes[i] =
          i < 4 ? specials[i] : static_cast<std::uint8_t>(127 + static_cast<int>(rng() % 41) - 20);
    std::shuffle(codes.begin(), codes.end(), rng);
    return codes;
  }
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(std::max<std::int64_t>(count, 1)) * 4);
  for (std::int64_t i = 0; i < count; ++i) {
    const float v = random_scale(rng);
    std::memcpy(&bytes[static_cast<std::size_t>(i) * 4], &v, 4);
  }
  return bytes;
}

DeviceBuffer upload(const std::vector<std::uint8_t>& host, std::size_t offset) {
  DeviceBuffer b(host.size() + offset + 16);
  b.upload(host.data(), host.size(), offset);
  return b;
}

// data_shift / out_shift: bytes past an aligned address, to exercise the
// element-wise loads and stores.
void run_case(const DequantizeKernel& k, const DequantizeLayout& layout, std::uint32_t seed,
              std::size_t data_shift = 0, std::size_t out_shift = 0) {
  SCOPED_TRACE(k.name() + " " + std::to_string(layout.outer) + "x" + std::to_string(layout.inner) +
               " segments " + std::to_string(layout.segments) +
               (layout.segmented ? " segmented" : "") + " shifts " + std::to_string(data_shift) +
               "/" + std::to_string(out_shift) + " seed " + std::to_string(seed));
  testing::Gpu& g = gpu();
  std::mt19937 rng(seed);
  const auto n = static_cast<std::size_t>(layout.outer * layout.inner);
  const auto data = random_codes(n, rng);
  const auto scales = random_scales(k, dequantize_scale_count(k, layout), rng);
  const float tensor_scale = random_scale(rng);
  const DequantizeResult want =
      reference_dequantize(k, data.data(), scales.data(), tensor_scale, layout);

  const DequantizeLauncher launcher(*g.jit, k);
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

  std::vector<std::uint8_t> got(n * width);
  d_out.download(got.data(), got.size(), out_shift);
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
    std::uint32_t bits = 0;
    d_amax.download(&bits, 4);
    EXPECT_EQ(bits, want.amax_bits)
        << std::bit_cast<float>(bits) << " vs " << std::bit_cast<float>(want.amax_bits);
  }
}

std::vector<DequantizeLayout> layouts() {
  return {
      {1, 1, 1, false},      {17, 33, 1, false},   {64, 128, 1, false},  {300, 520, 1, false},
      {129, 1000, 1, false}, {200, 1000, 2, true}, {33, 1000, 8, true},  {100, 1024, 4, false},
      {256, 2048, 8, true},  {77, 250, 2, true},   {65, 4004, 4, false}, {130, 96, 2, true},
  };
}

class DequantizeGpu : public ::testing::TestWithParam<DequantizeKernel> {};

TEST_P(DequantizeGpu, MatchesTheCpuReferenceBitForBit) {
  REQUIRE_GPU();
  std::uint32_t seed = 1;
  for (const auto& layout : layouts()) run_case(GetParam(), layout, seed++);
}

TEST_P(DequantizeGpu, ElementWisePathsOnMisalignedPointers) {
  REQUIRE_GPU();
  run_case(GetParam(), {300, 520, 1, false}, 41, 1, element_bytes(GetParam().output));
  run_case(GetParam(), {200, 1000, 2, true}, 42, 3, 0);
}

TEST_P(DequantizeGpu, LargeShapes) {
  REQUIRE_GPU();
  if (GetParam().output != ElemType::bf16) GTEST_SKIP() << "one output type suffices here";
  run_case(GetParam(), {4095, 8191, 1, false}, 99);
  run_case(GetParam(), {4096, 8192, 2, true}, 100);
}

INSTANTIATE_TEST_SUITE_P(AllVariants, DequantizeGpu,
                         ::testing::ValuesIn(testing::dequantize_variants()),
                         [](const auto& info) { return info.param.name(); });

}  // namespace
}  // namespace fp8c::runtime
