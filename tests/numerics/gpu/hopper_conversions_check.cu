// Hopper's own conversion instructions against fp8c_numerics, run on a GPU:
// every one of the 2^32 floats through cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32,
// cvt.rn.bf16.f32 and cvt.rn.f16.f32; every 16-bit pattern through
// cvt.f32.f16 and cvt.f32.bf16; every FP8 code through cvt.rn.f16x2.{e4m3x2,
// e5m2x2}; and max.NaN.f32, the amax reduction, on special values. The CPU
// tests compare with CUDA's host code; this closes the loop to the silicon.
// Our headers are constexpr, so the very same functions run on the device.
//
// Not part of the CMake build (that has no CUDA language); on a GPU machine:
//   nvcc -std=c++20 -O3 -arch=sm_90a --expt-relaxed-constexpr -I. -Iinclude \
//     tests/numerics/gpu/hopper_conversions_check.cu -o /tmp/hopper_check && /tmp/hopper_check
// It prints one line per check and exits non-zero on any difference. On an
// H200 (driver 580.159.04, nvcc 13.0) every check reported 0 differences, in
// 0.4 s; the SASS holds F2FP.SATFINITE.E4M3.F32, F2FP.F16.E4M3.UNPACK_B,
// F2F.BF16.F32 and FMNMX.NAN, i.e. the real instructions.
// E8M0 is not here: Hopper has no E8M0 conversion instruction (sm_100+).

#include <cuda_runtime.h>

#include <bit>
#include <cstdint>
#include <cstdio>

#include "codegen/numerics/amax.hpp"
#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/half.hpp"

namespace {

using namespace fp8c::numerics;

constexpr int kReported = 4;

struct Report {
  unsigned long long checked;
  unsigned long long mismatches;
  unsigned input[kReported];
  unsigned ours[kReported];
  unsigned gpu[kReported];
};

__device__ void compare(Report* report, unsigned input, unsigned ours, unsigned gpu) {
  if (ours == gpu) return;
  const unsigned long long index = atomicAdd(&report->mismatches, 1ull);
  if (index < kReported) {
    report->input[index] = input;
    report->ours[index] = ours;
    report->gpu[index] = gpu;
  }
}

enum FloatCheck { kE4m3, kE5m2, kBf16, kFp16, kFloatChecks };

// Both lanes of the x2 instructions get the same float, so the check also
// shows the two lanes convert alike.
__global__ void check_every_float(Report* reports) {
  const unsigned long long stride = 1ull * gridDim.x * blockDim.x;
  unsigned long long local_checked = 0;
  for (unsigned long long i = 1ull * blockIdx.x * blockDim.x + threadIdx.x; i < (1ull << 32);
       i += stride) {
    const auto bits = static_cast<unsigned>(i);
    const float x = __uint_as_float(bits);
    unsigned short e4m3x2, e5m2x2, bf16, fp16;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(e4m3x2) : "f"(x), "f"(x));
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(e5m2x2) : "f"(x), "f"(x));
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bf16) : "f"(x));
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(fp16) : "f"(x));
    const unsigned e4m3 = float_to_fp8(x, ElemType::e4m3, Saturation::satfinite);
    const unsigned e5m2 = float_to_fp8(x, ElemType::e5m2, Saturation::satfinite);
    compare(&reports[kE4m3], bits, e4m3 * 0x101u, e4m3x2);
    compare(&reports[kE5m2], bits, e5m2 * 0x101u, e5m2x2);
    compare(&reports[kBf16], bits, float_to_bf16(x), bf16);
    compare(&reports[kFp16], bits, float_to_fp16(x), fp16);
    ++local_checked;
  }
  for (int c = 0; c < kFloatChecks; ++c) atomicAdd(&reports[c].checked, local_checked);
}

enum SmallCheck {
  kFp16ToFloat,
  kBf16ToFloat,
  kE4m3ToHalf,
  kE5m2ToHalf,
  kAmaxCombine,
  kSmallChecks
};

__device__ const unsigned kSpecials[] = {0x0000'0000u, 0x8000'0000u, 0x0000'0001u, 0x3F80'0000u,
                                         0xBF80'0000u, 0x7F7F'FFFFu, 0x7F80'0000u, 0xFF80'0000u,
                                         0x7FC0'0000u, 0xFFC0'0000u, 0x7F80'0001u, 0x7FC0'1234u,
                                         0xFFFF'FFFFu, 0x7FFF'FFFFu};
constexpr int kSpecialCount = 14;

__global__ void check_small_sets(Report* reports) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= 0xFFFF) {
    const auto bits = static_cast<unsigned short>(i);
    float from_fp16, from_bf16;
    asm("cvt.f32.f16 %0, %1;" : "=f"(from_fp16) : "h"(bits));
    asm("cvt.f32.bf16 %0, %1;" : "=f"(from_bf16) : "h"(bits));
    compare(&reports[kFp16ToFloat], i, std::bit_cast<unsigned>(fp16_to_float(bits)),
            __float_as_uint(from_fp16));
    compare(&reports[kBf16ToFloat], i, std::bit_cast<unsigned>(bf16_to_float(bits)),
            __float_as_uint(from_bf16));
    atomicAdd(&reports[kFp16ToFloat].checked, 1ull);
    atomicAdd(&reports[kBf16ToFloat].checked, 1ull);
  }
  if (i <= 0xFF) {
    const auto pair = static_cast<unsigned short>(i * 0x101u);
    unsigned from_e4m3, from_e5m2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(from_e4m3) : "h"(pair));
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(from_e5m2) : "h"(pair));
    const auto code = static_cast<std::uint8_t>(i);
    compare(&reports[kE4m3ToHalf], i, fp8_to_half_bits(code, ElemType::e4m3) * 0x10001u, from_e4m3);
    compare(&reports[kE5m2ToHalf], i, fp8_to_half_bits(code, ElemType::e5m2) * 0x10001u, from_e5m2);
    atomicAdd(&reports[kE4m3ToHalf].checked, 1ull);
    atomicAdd(&reports[kE5m2ToHalf].checked, 1ull);
  }
  // The amax reduction as a kernel would write it: max.NaN.f32 of the running
  // amax (never negative, maybe NaN) and |x|.
  if (i < kSpecialCount * kSpecialCount) {
    const float running = magnitude(__uint_as_float(kSpecials[i / kSpecialCount]));
    const float x = __uint_as_float(kSpecials[i % kSpecialCount]);
    float gpu;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(gpu) : "f"(running), "f"(fabsf(x)));
    compare(&reports[kAmaxCombine], i, std::bit_cast<unsigned>(amax_combine(running, magnitude(x))),
            __float_as_uint(gpu));
    atomicAdd(&reports[kAmaxCombine].checked, 1ull);
  }
}

bool print(const char* name, const Report& report) {
  std::printf("%-44s %12llu checked, %llu differ", name, report.checked, report.mismatches);
  for (unsigned long long k = 0; k < report.mismatches && k < kReported; ++k) {
    std::printf("  [in 0x%x: ours 0x%x gpu 0x%x]", report.input[k], report.ours[k], report.gpu[k]);
  }
  std::printf("\n");
  return report.mismatches == 0 && report.checked > 0;
}

}  // namespace

int main() {
  Report* device_reports = nullptr;
  constexpr int kReports = int{kFloatChecks} + int{kSmallChecks};
  if (cudaMalloc(&device_reports, kReports * sizeof(Report)) != cudaSuccess) return 2;
  cudaMemset(device_reports, 0, kReports * sizeof(Report));
  check_every_float<<<132 * 16, 256>>>(device_reports);
  check_small_sets<<<256, 256>>>(device_reports + kFloatChecks);
  Report reports[kReports];
  cudaMemcpy(reports, device_reports, sizeof(reports), cudaMemcpyDeviceToHost);
  if (const cudaError_t error = cudaGetLastError(); error != cudaSuccess) {
    std::printf("CUDA error: %s\n", cudaGetErrorString(error));
    return 2;
  }
  bool ok = true;
  ok &= print("cvt.rn.satfinite.e4m3x2.f32 (every float)", reports[kE4m3]);
  ok &= print("cvt.rn.satfinite.e5m2x2.f32 (every float)", reports[kE5m2]);
  ok &= print("cvt.rn.bf16.f32 (every float)", reports[kBf16]);
  ok &= print("cvt.rn.f16.f32 (every float)", reports[kFp16]);
  const Report* small = reports + kFloatChecks;
  ok &= print("cvt.f32.f16 (every fp16)", small[kFp16ToFloat]);
  ok &= print("cvt.f32.bf16 (every bf16)", small[kBf16ToFloat]);
  ok &= print("cvt.rn.f16x2.e4m3x2 (every code)", small[kE4m3ToHalf]);
  ok &= print("cvt.rn.f16x2.e5m2x2 (every code)", small[kE5m2ToHalf]);
  ok &= print("max.NaN.f32 vs amax_combine (special pairs)", small[kAmaxCombine]);
  cudaFree(device_reports);
  return ok ? 0 : 1;
}
