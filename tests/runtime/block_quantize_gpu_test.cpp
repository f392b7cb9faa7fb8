// Every block quantize variant on the GPU against the CPU reference, bit for
// bit in data and scales, on fresh random inputs (NaN, Inf, subnormals, large
// values) and ragged shapes, outputs poisoned first, built by each kernel
// backend (NVRTC and LLVM); the two builds byte for byte against each other.
// Skipped without a GPU (or, for LLVM, without the LLVM module).

#include <gtest/gtest.h>

#include "gpu_fixture.hpp"

#include <bit>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

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

// Both backends build the block quantize kernels (kernel IR): each case runs
// on each, against the same reference on the same inputs.
const auto kBackends = ::testing::Values(KernelBackend::nvrtc, KernelBackend::llvm);

std::string backend_name(KernelBackend b) {
  return b == KernelBackend::llvm ? "llvm" : "nvrtc";
}

// A kernel's four outputs (rowwise data and scales, columnwise data and
// scales; empty where the kernel has no such usage), from poisoned buffers.
// With `misalign`, every pointer is moved off its allocation's alignment
// (the inputs by one element, the outputs by one byte): the kernel must
// then take its element-wise path even for whole tiles. `pre` is dact's
// saved pre-activation (empty without dact).
std::vector<std::vector<std::uint8_t>> run_kernel(const BlockQuantizeLauncher& launcher,
                                                  const std::vector<unsigned char>& x,
                                                  const std::vector<unsigned char>& pre, int rows,
                                                  int cols, bool misalign) {
  const BlockQuantizeKernel& k = launcher.kernel();
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  const std::size_t in_offset = misalign ? element_bytes(k.input) : 0;
  const std::size_t out_offset = misalign ? 1 : 0;
  DeviceBuffer d_x(x.size() + 16), d_pre(pre.size() + 16), d_row(n + 16),
      d_row_scales(block_scale_bytes(k, rows, cols, false)), d_col(n + 16),
      d_col_scales(block_scale_bytes(k, rows, cols, true));
  d_x.upload(x.data(), x.size(), in_offset);
  if (!pre.empty()) d_pre.upload(pre.data(), pre.size(), in_offset);
  for (auto* b : {&d_row, &d_row_scales, &d_col, &d_col_scales}) b->fill(0xCD);
  BlockQuantizeArgs a;
  a.x = d_x.get() + in_offset;
  a.pre_activation = pre.empty() ? 0 : d_pre.get() + in_offset;
  a.rowwise = d_row.get() + out_offset;
  a.rowwise_scales = d_row_scales.get();
  a.columnwise = d_col.get() + out_offset;
  a.columnwise_scales = d_col_scales.get();
  a.rows = rows;
  a.cols = cols;
  launcher.launch(a, nullptr);
  gpu().device->synchronize();
  const auto download = [](const DeviceBuffer& b, std::size_t bytes, std::size_t offset) {
    std::vector<std::uint8_t> host(bytes);
    if (bytes) b.download(host.data(), bytes, offset);
    return host;
  };
  return {
      k.rowwise ? download(d_row, n, out_offset) : std::vector<std::uint8_t>{},
      k.rowwise ? download(d_row_scales, d_row_scales.bytes(), 0) : std::vector<std::uint8_t>{},
      k.columnwise ? download(d_col, n, out_offset) : std::vector<std::uint8_t>{},
      k.columnwise ? download(d_col_scales, d_col_scales.bytes(), 0) : std::vector<std::uint8_t>{}};
}

const char* const kOutputNames[] = {"rowwise", "rowwise scales", "columnwise", "columnwise scales"};

void run_case(const BlockQuantizeLauncher& launcher, int rows, int cols, bool specials,
              std::uint32_t seed, bool misalign = false) {
  const BlockQuantizeKernel& k = launcher.kernel();
  SCOPED_TRACE(k.name() + " " + std::to_string(rows) + "x" + std::to_string(cols) +
               (specials ? " with NaN/Inf" : "") + (misalign ? ", misaligned pointers" : ""));
  std::mt19937 rng(seed);
  const auto x = testing::random_block_quantize_input(
      k.input, static_cast<std::size_t>(rows), static_cast<std::size_t>(cols), specials, rng);
  const BlockQuantizeResult want = reference_block_quantize(k, x.data(), rows, cols);
  const auto got = run_kernel(launcher, x, {}, rows, cols, misalign);
  const std::vector<std::uint8_t>* expected[] = {&want.rowwise, &want.rowwise_scales,
                                                 &want.columnwise, &want.columnwise_scales};
  for (std::size_t o = 0; o < got.size(); ++o) {
    if (got[o].empty()) continue;
    ASSERT_EQ(got[o].size(), expected[o]->size()) << kOutputNames[o];
    std::size_t bad = 0;
    for (std::size_t i = 0; i < got[o].size(); ++i)
      if (got[o][i] != (*expected[o])[i] && ++bad <= 5)
        ADD_FAILURE() << kOutputNames[o] << " byte " << i << ": 0x" << std::hex << int(got[o][i])
                      << ", want 0x" << int((*expected[o])[i]);
    EXPECT_EQ(bad, 0u) << kOutputNames[o];
  }
}

class BlockQuantizeGpu
    : public ::testing::TestWithParam<std::tuple<BlockQuantizeKernel, KernelBackend>> {};

TEST_P(BlockQuantizeGpu, MatchesTheCpuReference) {
  const auto [k, backend] = GetParam();
  REQUIRE_GPU_AND_BACKEND(backend);
  const BlockQuantizeLauncher launcher(gpu().jit_for(backend), k);
  std::uint32_t seed = 7;
  // Whole tiles (128x128, 256x384, most of 1000x2048) take the wide fast
  // path; edge tiles with cols % 8 == 0 the bounds-checked wide one (300x520,
  // 132x264); rows % 4 != 0 makes the columnwise stores element-wise
  // (129x264, 130x136); cols % 8 != 0 makes everything element-wise.
  const std::pair<int, int> shapes[] = {{1, 1},     {17, 33},     {128, 128}, {256, 384},
                                        {300, 520}, {1000, 2048}, {132, 264}, {129, 264},
                                        {130, 136}, {4, 8}};
  for (auto [rows, cols] : shapes) {
    run_case(launcher, rows, cols, false, seed++);
    run_case(launcher, rows, cols, true, seed++);
  }
}

TEST_P(BlockQuantizeGpu, MisalignedPointers) {
  const auto [k, backend] = GetParam();
  REQUIRE_GPU_AND_BACKEND(backend);
  const BlockQuantizeLauncher launcher(gpu().jit_for(backend), k);
  run_case(launcher, 256, 384, true, 99, true);
  run_case(launcher, 132, 264, true, 100, true);
}

// The large shapes for the bf16 row+column variants under NVRTC, and under
// LLVM for the E4M3 ones of each block shape only (the LLVM build must equal
// the NVRTC build anyway: LlvmBuildEqualsNvrtcBuild).
TEST_P(BlockQuantizeGpu, LargeUnalignedShape) {
  const auto [k, backend] = GetParam();
  REQUIRE_GPU_AND_BACKEND(backend);
  if (k.input != ElemType::bf16 || !k.columnwise || !k.rowwise)
    GTEST_SKIP() << "the large shape runs for the bf16 row+column variants only";
  if (backend == KernelBackend::llvm && (k.format != ElemType::e4m3 || k.k_block_major))
    GTEST_SKIP() << "the large shape runs under LLVM for one variant of each block shape";
  const BlockQuantizeLauncher launcher(gpu().jit_for(backend), k);
  run_case(launcher, 4095, 8191, true, 1234);
  run_case(launcher, 4100, 8200, true, 1235);  // whole tiles and wide edge tiles
}

INSTANTIATE_TEST_SUITE_P(AllVariants, BlockQuantizeGpu,
                         ::testing::Combine(::testing::ValuesIn(testing::block_quantize_variants()),
                                            kBackends),
                         [](const auto& info) {
                           return std::get<0>(info.param).name() + "_" +
                                  backend_name(std::get<1>(info.param));
                         });

// Every variant (dact ones too, whose GELU/SiLU have no bit-exact CPU
// reference) built by LLVM and by NVRTC gives the same bytes in every
// output on the same inputs: whole and edge tiles, element-wise shapes,
// misaligned pointers.
class BlockQuantizeBackendsGpu : public ::testing::TestWithParam<BlockQuantizeKernel> {};

TEST_P(BlockQuantizeBackendsGpu, LlvmBuildEqualsNvrtcBuild) {
  REQUIRE_GPU_AND_BACKEND(KernelBackend::llvm);
  const BlockQuantizeKernel& k = GetParam();
  const BlockQuantizeLauncher nvrtc(gpu().jit_for(KernelBackend::nvrtc), k);
  const BlockQuantizeLauncher llvm(gpu().jit_for(KernelBackend::llvm), k);
  EXPECT_EQ(llvm.compiled().compiler.rfind("llvm ", 0), 0u) << llvm.compiled().compiler;
  EXPECT_EQ(nvrtc.compiled().compiler.rfind("nvrtc ", 0), 0u) << nvrtc.compiled().compiler;
  const bool dact = k.dact != Activation::none;
  std::uint32_t seed = 31;
  for (const auto& [rows, cols, misalign] :
       {std::tuple{1000, 2048, false}, std::tuple{300, 520, false}, std::tuple{17, 33, false},
        std::tuple{132, 264, true}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) +
                 (misalign ? ", misaligned" : ""));
    std::mt19937 rng(seed++);
    const auto input = [&] {
      return testing::random_block_quantize_input(k.input, static_cast<std::size_t>(rows),
                                                  static_cast<std::size_t>(cols), true, rng);
    };
    const auto x = input();
    const auto pre = dact ? input() : std::vector<unsigned char>{};
    const auto want = run_kernel(nvrtc, x, pre, rows, cols, misalign);
    const auto got = run_kernel(llvm, x, pre, rows, cols, misalign);
    for (std::size_t o = 0; o < got.size(); ++o) {
      std::size_t bad = 0, first = 0;
      for (std::size_t i = 0; i < got[o].size(); ++i)
        if (got[o][i] != want[o][i] && bad++ == 0) first = i;
      EXPECT_EQ(bad, 0u) << kOutputNames[o] << ": first difference at byte " << first;
    }
  }
}

std::vector<BlockQuantizeKernel> every_block_quantize_variant() {
  auto all = testing::block_quantize_variants();
  for (const auto& k : testing::block_quantize_dact_variants()) all.push_back(k);
  return all;
}

INSTANTIATE_TEST_SUITE_P(AllVariants, BlockQuantizeBackendsGpu,
                         ::testing::ValuesIn(every_block_quantize_variant()),
                         [](const auto& info) { return info.param.name(); });

// A kernel that fuses dact against the path it replaces: the backward
// epilogue writing dz = dy * act'(z) in fp32, quantized by the fp32-input
// kernel. Same bits in every output, on whole, edge and element-wise tiles,
// with NaN/Inf among the inputs, and on misaligned pointers.
class BlockQuantizeDactGpu
    : public ::testing::TestWithParam<std::tuple<BlockQuantizeKernel, KernelBackend>> {};

TEST_P(BlockQuantizeDactGpu, EqualsTheEpilogueThenTheFp32Kernel) {
  const auto [fused, backend] = GetParam();
  REQUIRE_GPU_AND_BACKEND(backend);
  BlockQuantizeKernel plain = fused;
  plain.input = ElemType::fp32;
  plain.dact = Activation::none;
  EpilogueKernel e;
  e.input = fused.input;
  e.output = ElemType::fp32;
  e.backward = true;
  e.activation = fused.dact;
  testing::Gpu& g = gpu();
  const runtime::Jit& jit = g.jit_for(backend);
  const BlockQuantizeLauncher fused_launcher(jit, fused), plain_launcher(jit, plain);
  const EpilogueLauncher epilogue(jit, e);
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

INSTANTIATE_TEST_SUITE_P(
    Variants, BlockQuantizeDactGpu,
    ::testing::Combine(::testing::ValuesIn(testing::block_quantize_dact_variants()), kBackends),
    [](const auto& info) {
      return std::get<0>(info.param).name() + "_" + backend_name(std::get<1>(info.param));
    });

}  // namespace
}  // namespace fp8c::runtime
