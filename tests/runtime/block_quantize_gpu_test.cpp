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

}  // namespace
}  // namespace fp8c::runtime
