// Every quantize kernel variant on the GPU against the CPU reference, on
// fresh random inputs (NaN, Inf, subnormals, values past the FP8 range) and
// shapes that are not tile multiples, with outputs poisoned before each run.
// Casts, transposes, scales and amax must match bit for bit; dbias and the
// activation-gradient variants within the tolerances stated below.
// Skipped, visibly, where there is no GPU.

#include <gtest/gtest.h>

#include "gpu_fixture.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>

#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/half.hpp"
#include "codegen/numerics/scale.hpp"
#include "kernel_variants.hpp"
#include "runtime/quantize_launcher.hpp"
#include "runtime/reference/element.hpp"
#include "runtime/reference/fp8_compare.hpp"
#include "runtime/reference/quantize_reference.hpp"

namespace fp8c {
// Test names and failure messages show a variant by its kernel name.
void PrintTo(const QuantizeKernel& k, std::ostream* os) {
  *os << k.name();
}
}  // namespace fp8c

namespace fp8c::runtime {
namespace {

constexpr unsigned char kPoison = 0xCD;

using testing::gpu;

enum class Data { finite, any_bits };

// Raw element bits of `type`: finite data spans normal values, subnormals of
// the input type, zeros of both signs and values far past the FP8 range;
// any_bits is every pattern, NaN and Inf included.
std::vector<unsigned char> random_input(ElemType type, std::size_t n, Data data,
                                        std::mt19937& rng) {
  const std::size_t width = element_bytes(type);
  std::vector<unsigned char> bytes(n * width);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::uniform_int_distribution<int> pick(0, 99);
  for (std::size_t i = 0; i < n; ++i) {
    float v = normal(rng);
    const int p = pick(rng);
    if (p < 5)
      v *= 1e5f;  // saturates after scaling
    else if (p < 10)
      v *= 1e-6f;  // FP8 subnormals and underflow
    else if (p < 12)
      v = p == 10 ? 0.0f : -0.0f;
    std::uint32_t raw32 = std::bit_cast<std::uint32_t>(v);
    std::uint16_t raw16 =
        type == ElemType::bf16 ? numerics::float_to_bf16(v) : numerics::float_to_fp16(v);
    if (p == 12 && type != ElemType::fp32)
      raw16 = static_cast<std::uint16_t>(bits(rng) & 0x03FF);  // input subnormal
    if (data == Data::any_bits) {
      raw32 = bits(rng);
      raw16 = static_cast<std::uint16_t>(bits(rng));
    }
    if (width == 4)
      std::memcpy(&bytes[i * 4], &raw32, 4);
    else
      std::memcpy(&bytes[i * 2], &raw16, 2);
  }
  return bytes;
}

struct Shape {
  int rows, cols;
};

// The outputs of one run, as the device wrote them (for comparing builds).
struct Outputs {
  std::vector<std::uint8_t> rowwise, columnwise;
  std::uint32_t amax_bits = 0;
  std::vector<float> dbias;
};

Outputs run_case(const QuantizeKernel& k, KernelBackend backend, Shape shape, Data data,
                 std::uint32_t seed) {
  SCOPED_TRACE(k.name() + " (" + (backend == KernelBackend::llvm ? "llvm" : "nvrtc") + ") " +
               std::to_string(shape.rows) + "x" + std::to_string(shape.cols) +
               (data == Data::finite ? " finite" : " any-bits") + " seed " + std::to_string(seed));
  testing::Gpu& g = gpu();
  const runtime::Jit& jit = g.jit_for(backend);
  std::mt19937 rng(seed);
  const std::size_t n = static_cast<std::size_t>(shape.rows) * shape.cols;
  const auto x = random_input(k.input, n, data, rng);
  const auto pre = random_input(k.input, n, Data::finite, rng);
  const float scale = std::uniform_real_distribution<float>(0.5f, 300.0f)(rng);

  // Current scaling takes an already reduced amax: use the reference's.
  const QuantizeResult amax_only =
      reference_quantize(k, x.data(), pre.data(), 1.0f, 0.0f, shape.rows, shape.cols);
  const float amax_in = std::bit_cast<float>(amax_only.amax_bits);
  const QuantizeResult want =
      reference_quantize(k, x.data(), pre.data(), scale, amax_in, shape.rows, shape.cols);

  const QuantizeLauncher launcher(jit, k);
  const int tiles = QuantizeLauncher::tiles(shape.rows);
  DeviceBuffer d_x(x.size()), d_pre(pre.size()), d_scale(4), d_amax_in(4), d_row(n), d_col(n),
      d_amax(4), d_partial(static_cast<std::size_t>(tiles) * shape.cols * 4), d_scale_out(32),
      d_dbias(static_cast<std::size_t>(shape.cols) * 4);
  d_x.upload(x.data(), x.size());
  d_pre.upload(pre.data(), pre.size());
  d_scale.upload(&scale, 4);
  d_amax_in.upload(&amax_in, 4);
  for (auto* b : {&d_row, &d_col, &d_partial, &d_scale_out, &d_dbias}) b->fill(kPoison);
  d_amax.fill(0);
  QuantizeArgs a;
  a.x = d_x.get();
  a.pre_activation = d_pre.get();
  a.scale = d_scale.get();
  a.amax_in = d_amax_in.get();
  a.rowwise = d_row.get();
  a.columnwise = d_col.get();
  a.amax_out = d_amax.get();
  a.dbias_partial = d_partial.get();
  a.scale_out = d_scale_out.get();
  a.rows = shape.rows;
  a.cols = shape.cols;
  launcher.launch(a, nullptr);
  if (k.dbias)
    DbiasReduceLauncher(jit).launch(d_dbias.get(), d_partial.get(), tiles, shape.cols, nullptr);
  g.device->synchronize();

  const bool exact = k.dact == Activation::none;
  Outputs out;
  std::vector<std::uint8_t> got(n);
  const auto compare = [&](const std::vector<std::uint8_t>& expected, const char* what) {
    const bool transposed = std::string(what) == "columnwise";
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < n; ++i) {
      // The row-major index of the element behind output i.
      const std::size_t element = transposed ? (i % shape.rows) * shape.cols + i / shape.rows : i;
      const bool ok = exact ? got[i] == expected[i]
                            : fp8_close_for_dact(got[i], expected[i],
                                                 load_element(k.input, x.data(),
                                                              static_cast<std::int64_t>(element)),
                                                 want.scale, k.format);
      if (!ok && ++mismatches <= 5)
        ADD_FAILURE() << what << "[" << i << "] = 0x" << std::hex << int(got[i]) << ", want 0x"
                      << int(expected[i]) << std::dec << " (value "
                      << reference_element(k, x.data(), pre.data(),
                                           static_cast<std::int64_t>(element))
                      << ")";
    }
    EXPECT_EQ(mismatches, 0u) << what;
  };
  if (k.rowwise) {
    d_row.download(got.data(), n);
    compare(want.rowwise, "rowwise");
    out.rowwise = got;
  }
  if (k.columnwise) {
    d_col.download(got.data(), n);
    compare(want.columnwise, "columnwise");
    out.columnwise = got;
  }
  if (k.amax) {
    std::uint32_t& amax_bits = out.amax_bits;
    d_amax.download(&amax_bits, 4);
    if (exact) {
      EXPECT_EQ(amax_bits, want.amax_bits)
          << std::bit_cast<float>(amax_bits) << " vs " << std::bit_cast<float>(want.amax_bits);
    } else {
      // dGELU uses tanh.approx (relative error < 2^-10.9), dSiLU __expf.
      EXPECT_NEAR(std::bit_cast<float>(amax_bits), std::bit_cast<float>(want.amax_bits),
                  2e-3f * std::bit_cast<float>(want.amax_bits));
    }
  }
  if (k.scale_from_amax) {
    float used[5] = {0, 0, 0, 0, 0};
    d_scale_out.download(used, 20);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(used[0]), std::bit_cast<std::uint32_t>(want.scale));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(used[4]),
              std::bit_cast<std::uint32_t>(numerics::scale_inverse(want.scale)));
  }
  if (k.dbias) {
    // Sums in another order (and, with dact, of values within 2e-3): within
    // 1e-5 (2e-3 with dact) of the column's sum of magnitudes.
    std::vector<float>& dbias = out.dbias;
    dbias.resize(static_cast<std::size_t>(shape.cols));
    d_dbias.download(dbias.data(), dbias.size() * 4);
    for (int c = 0; c < shape.cols; ++c) {
      double magnitude = 0;
      for (int r = 0; r < shape.rows; ++r)
        magnitude += std::fabs(reference_element(k, x.data(), pre.data(),
                                                 static_cast<std::int64_t>(r) * shape.cols + c));
      const double tolerance = exact ? 1e-5 : 2e-3;
      if (!(std::fabs(double(dbias[c]) - want.dbias[c]) <= tolerance * magnitude + 1e-30)) {
        ADD_FAILURE() << "dbias[" << c << "] = " << dbias[c] << ", want " << want.dbias[c]
                      << " within " << tolerance * magnitude + 1e-30;
        break;  // one column says it; the rest would repeat it
      }
    }
  }
  return out;
}

const auto kBackends = ::testing::Values(KernelBackend::nvrtc, KernelBackend::llvm);

class QuantizeGpu : public ::testing::TestWithParam<std::tuple<QuantizeKernel, KernelBackend>> {};

TEST_P(QuantizeGpu, MatchesTheCpuReference) {
  const auto [k, backend] = GetParam();
  REQUIRE_GPU_AND_BACKEND(backend);
  const Shape shapes[] = {{1, 1}, {17, 33}, {128, 128}, {256, 384}, {300, 520}, {1000, 2048}};
  std::uint32_t seed = 1;
  for (const Shape& s : shapes) {
    run_case(k, backend, s, Data::finite, seed++);
    if (k.dact == Activation::none && !k.dbias) run_case(k, backend, s, Data::any_bits, seed++);
  }
}

TEST_P(QuantizeGpu, LargeUnalignedShape) {
  const auto [k, backend] = GetParam();
  REQUIRE_GPU_AND_BACKEND(backend);
  if (k.input != ElemType::bf16) GTEST_SKIP() << "one input type suffices for the large shape";
  // The LLVM build's fast and edge paths are those of every shape above; the
  // large shape, which only adds more tiles, once per kind of epilogue.
  if (backend == KernelBackend::llvm && !(k.rowwise && k.columnwise) && !k.dbias)
    GTEST_SKIP() << "the LLVM build takes the large shape with row + column or dbias variants";
  run_case(k, backend, {4095, 8191}, Data::finite, 99);
}

std::string variant_name(
    const ::testing::TestParamInfo<std::tuple<QuantizeKernel, KernelBackend>>& info) {
  return std::get<0>(info.param).name() +
         (std::get<1>(info.param) == KernelBackend::llvm ? "_llvm" : "_nvrtc");
}

INSTANTIATE_TEST_SUITE_P(AllVariants, QuantizeGpu,
                         ::testing::Combine(::testing::ValuesIn(testing::quantize_variants()),
                                            kBackends),
                         variant_name);

// The LLVM and NVRTC builds of one description give the same bytes on the
// same input, the approximate activations (dGELU, dSiLU) included: the IR
// fixes every rounding, so both compilers compute the same thing.
class QuantizeBuildsAgreeGpu : public ::testing::TestWithParam<QuantizeKernel> {};

TEST_P(QuantizeBuildsAgreeGpu, LlvmAndNvrtcGiveTheSameBytes) {
  const QuantizeKernel k = GetParam();
  REQUIRE_GPU_AND_BACKEND(KernelBackend::llvm);
  // Every bit pattern where the reference comparison takes NaN (as
  // MatchesTheCpuReference does); finite data for dbias and dact, whose
  // bounds do not.
  const Data data = k.dbias || k.dact != Activation::none ? Data::finite : Data::any_bits;
  for (const Shape s : {Shape{300, 520}, Shape{1024, 1024}}) {
    const Outputs nvrtc = run_case(k, KernelBackend::nvrtc, s, data, 7);
    const Outputs llvm = run_case(k, KernelBackend::llvm, s, data, 7);
    EXPECT_TRUE(nvrtc.rowwise == llvm.rowwise) << s.rows << "x" << s.cols << " rowwise";
    EXPECT_TRUE(nvrtc.columnwise == llvm.columnwise) << s.rows << "x" << s.cols << " columnwise";
    EXPECT_EQ(nvrtc.amax_bits, llvm.amax_bits) << s.rows << "x" << s.cols;
    ASSERT_EQ(nvrtc.dbias.size(), llvm.dbias.size());
    for (std::size_t c = 0; c < nvrtc.dbias.size(); ++c)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(nvrtc.dbias[c]),
                std::bit_cast<std::uint32_t>(llvm.dbias[c]))
          << "dbias[" << c << "]";
  }
}

std::vector<QuantizeKernel> agreeing_variants() {
  std::vector<QuantizeKernel> all;
  for (const QuantizeKernel& k : testing::quantize_variants())
    if (k.input == ElemType::bf16 && k.columnwise && (k.format == ElemType::e5m2 || k.dbias))
      all.push_back(k);
  return all;
}

INSTANTIATE_TEST_SUITE_P(Variants, QuantizeBuildsAgreeGpu, ::testing::ValuesIn(agreeing_variants()),
                         [](const auto& info) { return info.param.name(); });

}  // namespace
}  // namespace fp8c::runtime
