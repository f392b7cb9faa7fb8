// Every epilogue kernel variant on the GPU against the CPU reference, built
// by each backend (NVRTC and LLVM, from the same kernel IR), on fresh random
// inputs (NaN, Inf, subnormals, values past the FP8 range) and shapes that
// are not tile multiples, with outputs poisoned before each run, in vector
// mode and (misaligned pointers) scalar mode; what is compared bit for bit
// and what within a bound: epilogue_check.hpp. The LLVM and NVRTC builds
// also agree byte for byte with each other on the same inputs.
// Skipped, visibly, where there is no GPU (or, for LLVM, no LLVM module).

#include <gtest/gtest.h>

#include "gpu_fixture.hpp"

#include <cstring>
#include <tuple>

#include "epilogue_check.hpp"
#include "epilogue_variants.hpp"
#include "runtime/epilogue_launcher.hpp"
#include "runtime/quantize_launcher.hpp"

namespace fp8c {
void PrintTo(const EpilogueKernel& k, std::ostream* os) {
  *os << k.name();
}
}  // namespace fp8c

namespace fp8c::runtime {
namespace {

constexpr unsigned char kPoison = 0xCD;

using testing::Data;
using testing::EpilogueInputs;
using testing::EpilogueOutputs;
using testing::gpu;

struct Shape {
  int rows, cols;
};

// A device copy of `host` starting `offset` bytes into the allocation.
DeviceBuffer upload(const std::vector<unsigned char>& host, std::size_t offset) {
  DeviceBuffer b(host.size() + offset + 16);
  b.upload(host.data(), host.size(), offset);
  return b;
}

// One launch (and, with dbias, the dbias reduce) on `in`; `misaligned`:
// every pointer one element past an aligned address, so the kernel takes
// its scalar path on any shape.
EpilogueOutputs run(const EpilogueLauncher& launcher, const EpilogueInputs& in,
                    bool misaligned = false) {
  testing::Gpu& g = gpu();
  const EpilogueKernel& k = launcher.kernel();
  const auto n = static_cast<std::size_t>(in.rows * in.cols);
  const std::size_t in_width = element_bytes(k.input), out_width = element_bytes(k.output);
  const std::size_t shift_in = misaligned ? in_width : 0, shift_out = misaligned ? out_width : 0;
  const int rows = static_cast<int>(in.rows), cols = static_cast<int>(in.cols);
  const int tiles = EpilogueLauncher::dbias_tiles(rows);
  DeviceBuffer d_x = upload(in.x, shift_in), d_bias = upload(in.bias, shift_in),
               d_pre = upload(in.pre, shift_in), d_scale(4), d_out(n * out_width + shift_out + 16),
               d_pre_out(n * in_width + shift_in + 16), d_amax(4),
               d_partial(static_cast<std::size_t>(tiles) * in.cols * 4 + 4),
               d_dbias(static_cast<std::size_t>(in.cols) * 4 + 4);
  d_scale.upload(&in.scale, 4);
  for (auto* b : {&d_out, &d_pre_out, &d_partial, &d_dbias}) b->fill(kPoison);
  d_amax.fill(0);
  EpilogueArgs a;
  a.x = d_x.get() + shift_in;
  a.bias = d_bias.get() + shift_in;
  a.pre_activation = d_pre.get() + shift_in;
  a.scale = d_scale.get();
  a.out = d_out.get() + shift_out;
  a.pre_activation_out = d_pre_out.get() + shift_in;
  a.amax = d_amax.get();
  a.dbias_partial = d_partial.get();
  a.rows = rows;
  a.cols = cols;
  launcher.launch(a, nullptr);
  if (k.dbias)
    DbiasReduceLauncher(*g.jit).launch(d_dbias.get(), d_partial.get(), tiles, cols, nullptr);
  g.device->synchronize();

  EpilogueOutputs got;
  got.out.resize(n * out_width);
  d_out.download(got.out.data(), got.out.size(), shift_out);
  if (k.store_pre) {
    got.pre_out.resize(n * in_width);
    d_pre_out.download(got.pre_out.data(), got.pre_out.size(), shift_in);
  }
  if (k.amax) d_amax.download(&got.amax_bits, 4);
  if (k.dbias) {
    got.dbias_partial.resize(static_cast<std::size_t>(tiles) * in.cols);
    got.dbias.resize(static_cast<std::size_t>(in.cols));
    d_partial.download(got.dbias_partial.data(), got.dbias_partial.size() * 4);
    d_dbias.download(got.dbias.data(), got.dbias.size() * 4);
  }
  return got;
}

void run_case(const EpilogueLauncher& launcher, Shape shape, Data data, std::uint32_t seed,
              bool misaligned = false) {
  const EpilogueKernel& k = launcher.kernel();
  SCOPED_TRACE(k.name() + " " + std::to_string(shape.rows) + "x" + std::to_string(shape.cols) +
               (data == Data::finite ? " finite" : " any-bits") +
               (misaligned ? " misaligned" : "") + " seed " + std::to_string(seed) + ", " +
               launcher.compiled().compiler);
  const EpilogueInputs in = testing::epilogue_inputs(k, shape.rows, shape.cols, data, seed);
  testing::expect_epilogue_matches_reference(k, in, run(launcher, in, misaligned));
}

std::string backend_name(KernelBackend b) {
  return b == KernelBackend::llvm ? "llvm" : "nvrtc";
}

class EpilogueGpu : public ::testing::TestWithParam<std::tuple<EpilogueKernel, KernelBackend>> {};

TEST_P(EpilogueGpu, MatchesTheCpuReference) {
  const auto [k, backend] = GetParam();
  REQUIRE_GPU_AND_BACKEND(backend);
  const EpilogueLauncher launcher(gpu().jit_for(backend), k);
  const Shape shapes[] = {{1, 1}, {17, 33}, {128, 512}, {300, 520}, {129, 1032}, {1000, 2048}};
  std::uint32_t seed = 1;
  for (const Shape& s : shapes) {
    run_case(launcher, s, Data::finite, seed++);
    run_case(launcher, s, Data::any_bits, seed++);
  }
}

TEST_P(EpilogueGpu, ScalarPathOnMisalignedPointers) {
  const auto [k, backend] = GetParam();
  REQUIRE_GPU_AND_BACKEND(backend);
  const EpilogueLauncher launcher(gpu().jit_for(backend), k);
  run_case(launcher, {300, 520}, Data::finite, 77, true);
  run_case(launcher, {129, 1032}, Data::any_bits, 78, true);
}

// One input type suffices for the large shapes; under LLVM only a few
// representative variants (GPU time is scarce): plain forward, the FP8
// output with amax, a backward dact with dbias.
TEST_P(EpilogueGpu, LargeShapes) {
  const auto [k, backend] = GetParam();
  REQUIRE_GPU_AND_BACKEND(backend);
  if (k.input != ElemType::bf16) GTEST_SKIP() << "one input type suffices for the large shapes";
  if (backend == KernelBackend::llvm) {
    const std::string name = k.name();
    if (name != "epilogue_bf16_bias_to_bf16" && name != "epilogue_bf16_bias_gelu_z_to_e4m3_amax" &&
        name != "epilogue_bwd_bf16_dsilu_dbias")
      GTEST_SKIP() << "large shapes under LLVM: three representative variants only";
  }
  const EpilogueLauncher launcher(gpu().jit_for(backend), k);
  run_case(launcher, {4095, 8191}, Data::finite, 99);
  run_case(launcher, {4096, 8192}, Data::finite, 100);
}

INSTANTIATE_TEST_SUITE_P(AllVariants, EpilogueGpu,
                         ::testing::Combine(::testing::ValuesIn(testing::epilogue_variants()),
                                            ::testing::Values(KernelBackend::nvrtc,
                                                              KernelBackend::llvm)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name() + "_" +
                                  backend_name(std::get<1>(info.param));
                         });

bool same_outputs(const EpilogueOutputs& a, const EpilogueOutputs& b) {
  return a.out == b.out && a.pre_out == b.pre_out && a.amax_bits == b.amax_bits &&
         a.dbias_partial.size() == b.dbias_partial.size() &&
         std::memcmp(a.dbias_partial.data(), b.dbias_partial.data(), a.dbias_partial.size() * 4) ==
             0;
}

// The LLVM and NVRTC builds of each variant write the same bytes on the
// same inputs (NaN payloads and the approximate GELU / SiLU included: both
// run the same instructions), in vector and scalar mode.
TEST(EpilogueGpuBackends, LlvmBuildEqualsNvrtcBuild) {
  REQUIRE_GPU_AND_BACKEND(KernelBackend::llvm);
  std::uint32_t seed = 500;
  for (const EpilogueKernel& k : testing::epilogue_variants()) {
    SCOPED_TRACE(k.name());
    const EpilogueLauncher nvrtc(gpu().jit_for(KernelBackend::nvrtc), k);
    const EpilogueLauncher llvm(gpu().jit_for(KernelBackend::llvm), k);
    ASSERT_EQ(llvm.compiled().compiler.rfind("llvm ", 0), 0u) << llvm.compiled().compiler;
    ASSERT_EQ(nvrtc.compiled().compiler.rfind("nvrtc ", 0), 0u) << nvrtc.compiled().compiler;
    for (bool misaligned : {false, true}) {
      const EpilogueInputs in = testing::epilogue_inputs(k, 300, 1032, Data::any_bits, seed++);
      EXPECT_TRUE(same_outputs(run(llvm, in, misaligned), run(nvrtc, in, misaligned)))
          << (misaligned ? "scalar mode" : "vector mode");
    }
  }
}

}  // namespace
}  // namespace fp8c::runtime
