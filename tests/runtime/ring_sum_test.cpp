// The ring reduce-scatter's sum kernel (overlap = ring): every variant
// compiles for sm_90a without spills and adds with explicitly rounded adds
// only (CI); on the GPU it equals the host's sum (collectives/ring_sum.hpp)
// bit for bit on random bits, NaN, Inf, zeros of both signs and subnormals
// included, at a chain's first, middle and last step, with the output
// poisoned first. NaN results are compared by class where two NaNs meet
// (which payload x86 keeps then depends on how the compiler ordered the
// operands: rank_reduce.hpp).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "codegen/kernels/ring_sum.hpp"
#include "collectives/narrow_float.hpp"
#include "collectives/ring_sum.hpp"
#include "compile_check.hpp"
#include "gpu_fixture.hpp"
#include "runtime/kernel_launchers.hpp"

namespace fp8c::runtime {
namespace {

using testing::gpu;

const ElemType kTypes[] = {ElemType::fp32, ElemType::bf16, ElemType::fp16};

TEST(RingSumKernels, EveryVariantCompilesForSm90aWithExplicitlyRoundedAdds) {
  std::vector<KernelSource> sources;
  for (ElemType t : kTypes) {
    sources.push_back(emit_cuda(RingSumKernel{t}));
    EXPECT_NE(sources.back().source.find("__fadd_rn"), std::string::npos) << sources.back().name;
    EXPECT_EQ(sources.back().source.find("#include"), std::string::npos);
  }
  EXPECT_EQ(sources[1].name, "ring_sum_bf16");
  testing::expect_compiles_without_spills(sources, "fp8c-ring-sum-compile-test");
}

TEST(RingSumKernels, OnlyHighPrecisionPartialsAreSummed) {
  for (ElemType t : {ElemType::e4m3, ElemType::e5m2, ElemType::fp64, ElemType::u8}) {
    EXPECT_THROW(emit_cuda(RingSumKernel{t}), std::invalid_argument) << to_string(t);
    const std::uint8_t in[8] = {};
    float out[2];
    EXPECT_THROW(collectives::ring_sum_step(nullptr, in, t, out, 1), std::invalid_argument);
  }
}

// The host side on hand-picked values: widened exactly, added in fp32,
// rounded once (RNE) at the last step.
TEST(RingSum, HostSumsInFp32AndRoundsOnceAtTheEnd) {
  // bf16 1.0 (0x3F80) + 2^-9 twice: each alone rounds away in bf16, together
  // they are 2^-8, exactly half an ulp of 1.0: a tie, which RNE keeps at 1.0
  // only if rounded once from the exact fp32 sum 1 + 2^-8 (even mantissa).
  const std::uint16_t one = 0x3F80, tiny = 0x3B00;  // 1.0, 2^-9
  float sum = 0.0f;
  collectives::ring_sum_step(nullptr, &tiny, ElemType::bf16, &sum, 1);
  EXPECT_EQ(sum, 0x1p-9f);
  collectives::ring_sum_step(&sum, &tiny, ElemType::bf16, &sum, 1);
  EXPECT_EQ(sum, 0x1p-8f);
  std::uint16_t out = 0;
  collectives::ring_sum_last(&sum, &one, ElemType::bf16, &out, 1);
  EXPECT_EQ(out, 0x3F80);  // 1 + 2^-8 ties to even
  const float three_halves_ulp = 0x1p-8f + 0x1p-9f;
  collectives::ring_sum_last(&three_halves_ulp, &one, ElemType::bf16, &out, 1);
  EXPECT_EQ(out, 0x3F81);  // above the tie: up
}

std::uint32_t random_float_bits(std::mt19937& rng, std::size_t i) {
  static const std::uint32_t special[] = {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F812345u,
                                          0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu,
                                          0x7F7FFFFFu, 0x3F800000u};
  if (i % 97 < std::size(special)) return special[i % 97];
  std::uniform_real_distribution<float> v(-4.0f, 4.0f);
  return std::bit_cast<std::uint32_t>(v(rng));
}

bool same_or_both_nan(const std::uint8_t* a, const std::uint8_t* b, ElemType t) {
  if (std::memcmp(a, b, element_bytes(t)) == 0) return true;
  float x, y;
  if (t == ElemType::fp32) {
    std::memcpy(&x, a, 4);
    std::memcpy(&y, b, 4);
  } else {
    std::uint16_t p, q;
    std::memcpy(&p, a, 2);
    std::memcpy(&q, b, 2);
    x = t == ElemType::bf16 ? collectives::bfloat16_to_float(p) : collectives::float16_to_float(p);
    y = t == ElemType::bf16 ? collectives::bfloat16_to_float(q) : collectives::float16_to_float(q);
  }
  return std::isnan(x) && std::isnan(y);
}

class RingSumGpu : public ::testing::TestWithParam<ElemType> {};

TEST_P(RingSumGpu, EqualsTheHostSumBitForBit) {
  REQUIRE_GPU();
  const ElemType t = GetParam();
  const RingSumLauncher launcher(*gpu().jit, RingSumKernel{t});
  const std::size_t n = 100003, w = element_bytes(t);
  std::mt19937 rng(11);
  std::vector<std::uint8_t> partial(n * w);
  std::vector<float> sum_in(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t bits = random_float_bits(rng, i * 3 + 1);
    if (t == ElemType::fp32) {
      std::memcpy(&partial[i * 4], &bits, 4);
    } else {
      // Random 16-bit codes: every NaN, Inf, subnormal and zero of the type
      // among them.
      const auto code = static_cast<std::uint16_t>(rng());
      std::memcpy(&partial[i * 2], &code, 2);
    }
    sum_in[i] = std::bit_cast<float>(random_float_bits(rng, i));
  }
  DeviceBuffer d_partial(partial.size()), d_sum(n * 4), d_out(n * 4);
  Stream stream;
  d_partial.upload(partial.data(), partial.size());
  d_sum.upload(sum_in.data(), n * 4);
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(step == 0 ? "first" : step == 1 ? "middle" : "last");
    const bool first = step == 0, last = step == 2;
    const std::size_t out_bytes = last ? n * w : n * 4;
    d_out.fill(0xCD);
    launcher.launch(first ? 0 : d_sum.get(), d_partial.get(), d_out.get(), n, last, stream.get());
    stream.synchronize();
    std::vector<std::uint8_t> got(n * 4, 0), want(n * 4, 0);
    d_out.download(got.data(), n * 4);
    if (last) {
      collectives::ring_sum_last(sum_in.data(), partial.data(), t, want.data(), n);
    } else {
      collectives::ring_sum_step(first ? nullptr : sum_in.data(), partial.data(), t,
                                 reinterpret_cast<float*>(want.data()), n);
    }
    const std::size_t width = last ? w : 4;
    const ElemType out_type = last ? t : ElemType::fp32;
    int bad = 0;
    for (std::size_t i = 0; i < n && bad < 5; ++i)
      if (!same_or_both_nan(&got[i * width], &want[i * width], out_type)) {
        ++bad;
        ADD_FAILURE() << "element " << i;
      }
    // Nothing written past the output.
    for (std::size_t i = out_bytes; i < n * 4; ++i) ASSERT_EQ(got[i], 0xCD) << "byte " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, RingSumGpu, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<ElemType>& i) {
                           return std::string(to_string(i.param));
                         });

}  // namespace
}  // namespace fp8c::runtime
