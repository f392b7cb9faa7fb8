// Every block quantize variant on the GPU against the CPU reference, bit for
// bit in data and scales, on fresh random inputs (NaN, Inf, subnormals, large
// values) and ragged shapes, outputs poisoned first. Skipped without a GPU.

#include <gtest/gtest.h>

#include "gpu_fixture.hpp"

#include <bit>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>

#include "block_quantize_input.hpp"
#include "kernel_variants.hpp"
#include "runtime/block_quantize_launcher.hpp"
#include "runtime/epilogue_launcher.hpp"
#include "runtime/reference/block_quantize_reference.hpp"

namespace fp8c {
void PrintTo(const BlockQuantizeKernel& k, std::ostream* os) {
  *os << k.name();
}
}  // namespace fp8c

namespace fp8c::runtime {
namespace {

using testing::gpu;

// With `misalign`, every pointer is moved off its allocation's alignment
// (the input by one element, the outputs by one byte): the kernel must then
// take its element-wise path even for whole tiles.
void run_case(const BlockQuantizeKernel& k, int rows, int cols, bool specials, std::uint32_t seed,
              bool misalign = false) {
  SCOPED_TRACE(k.name() + " " + std::to_string(rows) + "x" + std::to_string(cols) +
               (specials ? " with NaN/Inf" : "") + (misalign ? ", misaligned pointers" : ""));
  testing::Gpu& g = gpu();
  std::mt19937 rng(seed);
  const auto x = testing::random_block_quantize_input(
      k.input, static_cast<std::size_t>(rows), static_cast<std::size_t>(cols), specials, rng);
  const BlockQuantizeResult want = reference_block_quantize(k, x.data(), rows, cols);
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  const std::size_t row_scale_bytes = block_scale_bytes(k, rows, cols, false);
  const std::size_t col_scale_bytes = block_scale_bytes(k, rows, cols, true);
  const std::size_t x_offset = misalign ? element_bytes(k.input) : 0;
  const std::size_t out_offset = misalign ? 1 : 0;
  DeviceBuffer d_x(x.size() + 16), d_row(n + 16), d_row_scales(row_scale_bytes), d_col(n + 16),
      d_col_scales(col_scale_bytes);
  d_x.upload(x.data(), x.size(), x_offset);
  for (auto* b : {&d_row, &d_row_scales, &d_col, &d_col_scales}) b->fill(0xCD);
  const BlockQuantizeLauncher launcher(*g.jit, k);
  BlockQuantizeArgs a;
  a.x = d_x.get() + x_offset;
  a.rowwise = d_row.get() + out_offset;
  a.rowwise_scales = d_row_scales.get();
  a.columnwise = d_col.get() + out_offset;
  a.columnwise_scales = d_col_scales.get();
  a.rows = rows;
  a.cols = cols;
  launcher.launch(a, nullptr);
  g.device->synchronize();
  const auto check = [](const DeviceBuffer& buffer, std::size_t offset,
                        const std::vector<std::uint8_t>& expected, const char* what) {
    std::vector<std::uint8_t> got(expected.size());
    buffer.download(got.data(), got.size(), offset);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      if (got[i] != expected[i] && ++bad <= 5)
        ADD_FAILURE() << what << " byte " << i << ": 0x" << std::hex << int(got[i]) << ", want 0x"
                      << int(expected[i]);
    EXPECT_EQ(bad, 0u) << what;
  };
  if (k.rowwise) {
    check(d_row, out_offset, want.rowwise, "rowwise");
    check(d_row_scales, 0, want.rowwise_scales, "rowwise scales");
  }
  if (k.columnwise) {
    check(d_col, out_offset, want.columnwise, "columnwise");
    check(d_col_scales, 0, want.columnwise_scales, "columnwise scales");
  }
}

class BlockQuantizeGpu : public ::testing::TestWithParam<BlockQuantizeKernel> {};

TEST_P(BlockQuantizeGpu, MatchesTheCpuReference) {
  REQUIRE_GPU();
  std::uint32_t seed = 7;
  // Whole tiles (128x128, 256x384, most of 1000x2048) take the wide fast
  // path; edge tiles with cols % 8 == 0 the bounds-checked wide one (300x520,
  // 132x264); rows % 4 != 0 makes the columnwise stores element-wise
  // (129x264, 130x136); cols % 8 != 0 makes everything element-wise.
  const std::pair<int, int> shapes[] = {{1, 1},     {17, 33},     {128, 128}, {256, 384},
                                        {300, 520}, {1000, 2048}, {132, 264}, {129, 264},
                                        {130, 136}, {4, 8}};
  for (auto [rows, cols] : shapes) {
    run_case(GetParam(), rows, cols, false, seed++);
    run_case(GetParam(), rows, cols, true, seed++);
  }
}

TEST_P(BlockQuantizeGpu, MisalignedPointers) {
  REQUIRE_GPU();
  run_case(GetParam(), 256, 384, true, 99, true);
  run_case(GetParam(), 132, 264, true, 100, true);
}

TEST_P(BlockQuantizeGpu, LargeUnalignedShape) {
  REQUIRE_GPU();
  if (GetParam().input != ElemType::bf16 || !GetParam().columnwise || !GetParam().rowwise)
    GTEST_SKIP() << "the large shape runs for the bf16 row+column variants only";
  run_case(GetParam(), 4095, 8191, true, 1234);
  run_case(GetParam(), 4100, 8200, true, 1235);  // whole tiles and wide edge tiles
}

INSTANTIATE_TEST_SUITE_P(AllVariants, BlockQuantizeGpu,
                         ::testing::ValuesIn(testing::block_quantize_variants()),
                         [](const auto& info) { return info.param.name(); });

// A kernel that fuses dact against the path it replaces: the backward
// epilogue writing dz = dy * act'(z) in fp32, quantized by the fp32-input
// kernel. Same bits in every output, on whole, edge and element-wise tiles,
// with NaN/Inf among the inputs, and on misaligned pointers.
class BlockQuantizeDactGpu : public ::testing::TestWithParam<BlockQuantizeKernel> {};

TEST_P(BlockQuantizeDactGpu, EqualsTheEpilogueThenTheFp32Kernel) {
  REQUIRE_GPU();
  const BlockQuantizeKernel& fused = GetParam();
  BlockQuantizeKernel plain = fused;
  plain.input = ElemType::fp32;
  plain.dact = Activation::none;
  EpilogueKernel e;
  e.input = fused.input;
  e.output = ElemType::fp32;
  e.backward = true;
  e.activation = fused.dact;
  testing::Gpu& g = gpu();
  const BlockQuantizeLauncher fused_launcher(*g.jit, fused), plain_launcher(*g.jit, plain);
  const EpilogueLauncher epilogue(*g.jit, e);
  std::uint32_t seed = 17;
  const std::pair<int, int> shapes[] = {{256, 384}, {300, 520}, {129, 264}, {17, 33}, {1000, 2048}};
  for (auto [rows, cols] : shapes)
    for (bool misalign : {false, true}) {
      SCOPED_TRACE(fused.name() + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                   (misalign ? ", misaligned" : ""));
      std::mt19937 rng(seed++);
      const auto dy = testing::random_block_quantize_input(
          fused.input, static_cast<std::size_t>(rows), static_cast<std::size_t>(cols), true, rng);
      const auto z = testing::random_block_quantize_input(
          fused.input, static_cast<std::size_t>(rows), static_cast<std::size_t>(cols), true, rng);
      const std::size_t n = static_cast<std::size_t>(rows) * cols;
      const std::size_t in_offset = misalign ? element_bytes(fused.input) : 0;
      DeviceBuffer d_dy(dy.size() + 16), d_z(z.size() + 16), d_dz(n * 4);
      d_dy.upload(dy.data(), dy.size(), in_offset);
      d_z.upload(z.data(), z.size(), in_offset);
      const auto outputs = [&](const BlockQuantizeLauncher& l, CUdeviceptr x, CUdeviceptr pre) {
        DeviceBuffer row(n), col(n), row_scales(block_scale_bytes(fused, rows, cols, false)),
            col_scales(block_scale_bytes(fused, rows, cols, true));
        for (auto* b : {&row, &col, &row_scales, &col_scales}) b->fill(0xCD);
        BlockQuantizeArgs a;
        a.x = x;
        a.pre_activation = pre;
        a.rowwise = row.get();
        a.rowwise_scales = row_scales.get();
        a.columnwise = col.get();
        a.columnwise_scales = col_scales.get();
        a.rows = rows;
        a.cols = cols;
        l.launch(a, nullptr);
        g.device->synchronize();
        std::vector<std::vector<std::uint8_t>> got;
        for (const DeviceBuffer* b : {&row, &row_scales, &col, &col_scales}) {
          got.emplace_back(b->bytes());
          b->download(got.back().data(), got.back().size());
        }
        return got;
      };
      EpilogueArgs ea;
      ea.x = d_dy.get() + in_offset;
      ea.pre_activation = d_z.get() + in_offset;
      ea.out = d_dz.get();
      ea.rows = rows;
      ea.cols = cols;
      epilogue.launch(ea, nullptr);
      g.device->synchronize();
      const auto want = outputs(plain_launcher, d_dz.get(), 0);
      const auto got = outputs(fused_launcher, d_dy.get() + in_offset, d_z.get() + in_offset);
      const char* names[] = {"rowwise", "rowwise scales", "columnwise", "columnwise scales"};
      for (std::size_t i = 0; i < got.size(); ++i) {
        std::size_t bad = 0, first = 0;
        for (std::size_t j = 0; j < got[i].size(); ++j)
          if (got[i][j] != want[i][j] && bad++ == 0) first = j;
        EXPECT_EQ(bad, 0u) << names[i] << ": first difference at byte " << first;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Variants, BlockQuantizeDactGpu,
                         ::testing::ValuesIn(testing::block_quantize_dact_variants()),
                         [](const auto& info) { return info.param.name(); });

}  // namespace
}  // namespace fp8c::runtime
