// Every epilogue kernel variant on the GPU against the CPU reference, on
// fresh random inputs (NaN, Inf, subnormals, values past the FP8 range) and
// shapes that are not tile multiples, with outputs poisoned before each run,
// in vector mode and (misaligned pointers) scalar mode.
//   Bit for bit: the bias add, z, casts, FP8, amax, and everything of the
//   none and relu variants, dbias included (the kernel's summation order is
//   the reference's; a NaN sum compares as NaN, its payload is the CPU's).
//   Within activation_bound.hpp's bounds: y of GELU / SiLU (tanh.approx,
//   __expf), v = dy * act'(z) and its dbias (the per-element bounds summed,
//   plus 2 n 2^-24 sum |v| for the roundings of n additions), amax (the
//   largest per-element bound).
// Skipped, visibly, where there is no GPU.

#include <gtest/gtest.h>

#include "gpu_fixture.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/half.hpp"
#include "epilogue_variants.hpp"
#include "runtime/cpu/activation.hpp"
#include "runtime/epilogue_launcher.hpp"
#include "runtime/quantize_launcher.hpp"
#include "runtime/reference/activation_bound.hpp"
#include "runtime/reference/element.hpp"
#include "runtime/reference/epilogue_reference.hpp"

namespace fp8c {
void PrintTo(const EpilogueKernel& k, std::ostream* os) {
  *os << k.name();
}
}  // namespace fp8c

namespace fp8c::runtime {
namespace {

constexpr unsigned char kPoison = 0xCD;

using testing::gpu;

enum class Data { finite, any_bits };

// Raw element bits of `type`: finite data spans normal values, input-type
// subnormals, zeros of both signs and values far past the FP8 range;
// any_bits is every pattern, NaN and Inf included.
std::vector<unsigned char> random_input(ElemType type, std::size_t n, Data data,
                                        std::mt19937& rng) {
  const std::size_t width = element_bytes(type);
  std::vector<unsigned char> bytes(std::max<std::size_t>(n, 1) * width);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::uniform_int_distribution<int> pick(0, 99);
  for (std::size_t i = 0; i < n; ++i) {
    float v = normal(rng);
    const int p = pick(rng);
    if (p < 5)
      v *= 1e4f;
    else if (p < 10)
      v *= 1e-6f;
    else if (p < 12)
      v = p == 10 ? 0.0f : -0.0f;
    std::uint32_t raw32 = std::bit_cast<std::uint32_t>(v);
    std::uint16_t raw16 =
        type == ElemType::bf16 ? numerics::float_to_bf16(v) : numerics::float_to_fp16(v);
    if (p == 12) {
      raw16 = static_cast<std::uint16_t>(bits(rng) & 0x83FF);  // subnormal of the input type
      raw32 = bits(rng) & 0x807FFFFFu;
    }
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

// A device copy of `host` starting `offset` bytes into the allocation.
DeviceBuffer upload(const std::vector<unsigned char>& host, std::size_t offset) {
  DeviceBuffer b(host.size() + offset + 16);
  b.upload(host.data(), host.size(), offset);
  return b;
}

double stored_value(ElemType type, const std::uint8_t* data, std::int64_t i) {
  if (is_fp8(type)) return numerics::fp8_to_float(data[i], type);
  return load_element(type, data, i);
}

bool same_float(float a, float b) {
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b) ||
         (std::isnan(a) && std::isnan(b));
}

// `misaligned`: every pointer one element past an aligned address, so the
// kernel takes its scalar path on any shape.
void run_case(const EpilogueKernel& k, Shape shape, Data data, std::uint32_t seed,
              bool misaligned = false) {
  SCOPED_TRACE(k.name() + " " + std::to_string(shape.rows) + "x" + std::to_string(shape.cols) +
               (data == Data::finite ? " finite" : " any-bits") +
               (misaligned ? " misaligned" : "") + " seed " + std::to_string(seed));
  testing::Gpu& g = gpu();
  std::mt19937 rng(seed);
  const std::int64_t rows = shape.rows, cols = shape.cols;
  const auto n = static_cast<std::size_t>(rows * cols);
  const auto x = random_input(k.input, n, data, rng);
  const auto bias = random_input(k.input, static_cast<std::size_t>(cols), Data::finite, rng);
  const auto pre = random_input(k.input, n, Data::finite, rng);
  const float scale = std::uniform_real_distribution<float>(0.5f, 300.0f)(rng);
  const EpilogueResult want =
      reference_epilogue(k, x.data(), bias.data(), pre.data(), scale, rows, cols);

  const EpilogueLauncher launcher(*g.jit, k);
  const ElemType out_type = k.backward ? k.input : k.output;
  const std::size_t in_width = element_bytes(k.input), out_width = element_bytes(out_type);
  const std::size_t shift_in = misaligned ? in_width : 0, shift_out = misaligned ? out_width : 0;
  const int tiles = EpilogueLauncher::dbias_tiles(shape.rows);
  DeviceBuffer d_x = upload(x, shift_in), d_bias = upload(bias, shift_in),
               d_pre = upload(pre, shift_in), d_scale(4), d_out(n * out_width + shift_out + 16),
               d_pre_out(n * in_width + shift_in + 16), d_amax(4),
               d_partial(static_cast<std::size_t>(tiles * cols) * 4 + 4),
               d_dbias(static_cast<std::size_t>(cols) * 4 + 4);
  d_scale.upload(&scale, 4);
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
  a.rows = shape.rows;
  a.cols = shape.cols;
  launcher.launch(a, nullptr);
  if (k.dbias)
    DbiasReduceLauncher(*g.jit).launch(d_dbias.get(), d_partial.get(), tiles, shape.cols, nullptr);
  g.device->synchronize();

  const bool exact = k.activation == Activation::none || k.activation == Activation::relu;
  // The bound on |GPU - reference| of the value stored at element i, before
  // its rounding to the output type (FP8: in scaled units).
  const auto bound = [&](std::int64_t i) {
    float z = 0.0f;
    const float v = reference_epilogue_value(k, x.data(), bias.data(), pre.data(), i, cols, &z);
    if (!k.backward)
      return activation_error_bound(k.activation, z) * (k.fp8_output() ? scale : 1.0);
    const double dy = load_element(k.input, x.data(), i);
    return std::fabs(dy) * activation_grad_error_bound(k.activation, z) + 0x1p-22 * std::fabs(v);
  };

  // dy = +-Inf times an act'(z) whose bound reaches zero (tanh.approx gives
  // exactly +-1 where tanhf is 1 - 2^-25): Inf * 0 = NaN on the GPU where
  // the reference has an infinity. Either is what the bound allows, for the
  // element and for its column's dbias.
  const auto inf_times_zero = [&](std::int64_t i) {
    if (!k.backward || exact) return false;
    float z = 0.0f;
    reference_epilogue_value(k, x.data(), bias.data(), pre.data(), i, cols, &z);
    const double dy = load_element(k.input, x.data(), i);
    const double grad = cpu::activation_grad(k.activation, static_cast<double>(z));
    return std::isinf(dy) && std::fabs(grad) <= activation_grad_error_bound(k.activation, z);
  };
  std::vector<std::uint8_t> got(n * out_width);
  d_out.download(got.data(), got.size(), shift_out);
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto e = static_cast<std::int64_t>(i);
    bool ok = exact ? std::memcmp(&got[i * out_width], &want.out[i * out_width], out_width) == 0
                    : close_after_rounding(stored_value(out_type, got.data(), e),
                                           stored_value(out_type, want.out.data(), e), bound(e),
                                           out_type);
    if (!ok) ok = inf_times_zero(e) && std::isnan(stored_value(out_type, got.data(), e));
    if (!ok && ++mismatches <= 5)
      ADD_FAILURE() << "out[" << i << "] (row " << i / cols << ", col " << i % cols
                    << ") = " << stored_value(out_type, got.data(), e) << ", want "
                    << stored_value(out_type, want.out.data(), e) << " (x "
                    << load_element(k.input, x.data(), e) << ")";
  }
  EXPECT_EQ(mismatches, 0u) << "out";
  if (k.store_pre) {
    std::vector<std::uint8_t> z(n * in_width);
    d_pre_out.download(z.data(), z.size(), shift_in);
    const auto m = std::mismatch(z.begin(), z.end(), want.pre_out.begin());
    EXPECT_TRUE(m.first == z.end()) << "z differs at byte " << (m.first - z.begin());
  }
  if (k.amax) {
    std::uint32_t bits = 0;
    d_amax.download(&bits, 4);
    const float got_amax = std::bit_cast<float>(bits),
                want_amax = std::bit_cast<float>(want.amax_bits);
    if (exact) {
      EXPECT_EQ(bits, want.amax_bits) << got_amax << " vs " << want_amax;
    } else {
      double largest = 0;
      for (std::size_t i = 0; i < n; ++i)
        largest = std::fmax(largest,
                            bound(static_cast<std::int64_t>(i)) / (k.fp8_output() ? scale : 1.0));
      EXPECT_TRUE(same_float(got_amax, want_amax) || std::fabs(got_amax - want_amax) <= largest)
          << got_amax << " vs " << want_amax << " (bound " << largest << ")";
    }
  }
  if (k.dbias) {
    std::vector<float> partial(static_cast<std::size_t>(tiles * cols)),
        dbias(static_cast<std::size_t>(cols));
    d_partial.download(partial.data(), partial.size() * 4);
    d_dbias.download(dbias.data(), dbias.size() * 4);
    if (exact) {
      for (std::size_t i = 0; i < partial.size(); ++i)
        ASSERT_TRUE(same_float(partial[i], want.dbias_partial[i]))
            << "dbias_partial[" << i << "] = " << partial[i] << ", want " << want.dbias_partial[i];
      for (std::size_t c = 0; c < dbias.size(); ++c)
        ASSERT_TRUE(same_float(dbias[c], want.dbias[c]))
            << "dbias[" << c << "] = " << dbias[c] << ", want " << want.dbias[c];
    } else {
      for (std::int64_t c = 0; c < cols; ++c) {
        double sum_bounds = 0, magnitude = 0;
        for (std::int64_t r = 0; r < rows; ++r) {
          sum_bounds += bound(r * cols + c);
          magnitude += std::fabs(
              reference_epilogue_value(k, x.data(), nullptr, pre.data(), r * cols + c, cols));
        }
        const double tolerance = sum_bounds + 2.0 * static_cast<double>(rows) * 0x1p-24 * magnitude;
        const float w = want.dbias[static_cast<std::size_t>(c)],
                    gv = dbias[static_cast<std::size_t>(c)];
        // A NaN sum is allowed only where the column holds an allowed Inf * 0
        // (looked for only then: it re-evaluates the reference per row).
        const auto nan_allowed = [&] {
          for (std::int64_t r = 0; r < rows; ++r)
            if (inf_times_zero(r * cols + c)) return true;
          return false;
        };
        ASSERT_TRUE(same_float(gv, w) || std::fabs(gv - w) <= tolerance ||
                    (std::isnan(gv) && nan_allowed()))
            << "dbias[" << c << "] = " << gv << ", want " << w << " (tolerance " << tolerance
            << ")";
      }
    }
  }
}

class EpilogueGpu : public ::testing::TestWithParam<EpilogueKernel> {};

TEST_P(EpilogueGpu, MatchesTheCpuReference) {
  REQUIRE_GPU();
  const EpilogueKernel k = GetParam();
  const Shape shapes[] = {{1, 1}, {17, 33}, {128, 512}, {300, 520}, {129, 1032}, {1000, 2048}};
  std::uint32_t seed = 1;
  for (const Shape& s : shapes) {
    run_case(k, s, Data::finite, seed++);
    run_case(k, s, Data::any_bits, seed++);
  }
}

TEST_P(EpilogueGpu, ScalarPathOnMisalignedPointers) {
  REQUIRE_GPU();
  const EpilogueKernel k = GetParam();
  run_case(k, {300, 520}, Data::finite, 77, true);
  run_case(k, {129, 1032}, Data::any_bits, 78, true);
}

TEST_P(EpilogueGpu, LargeShapes) {
  REQUIRE_GPU();
  const EpilogueKernel k = GetParam();
  if (k.input != ElemType::bf16) GTEST_SKIP() << "one input type suffices for the large shapes";
  run_case(k, {4095, 8191}, Data::finite, 99);
  run_case(k, {4096, 8192}, Data::finite, 100);
}

INSTANTIATE_TEST_SUITE_P(AllVariants, EpilogueGpu,
                         ::testing::ValuesIn(testing::epilogue_variants()),
                         [](const auto& info) { return info.param.name(); });

}  // namespace
}  // namespace fp8c::runtime
