// The CUDA C++ printer for PermuteKernel.
//
// Block o writes output row o: `ranks` segments of inner_local elements, each
// a contiguous copy from in[r][o]. Every segment is moved in the widest unit
// (16, 8, 4, 2 bytes, or the element) that divides its byte length, so the
// segment starts of both buffers stay aligned to the unit; rows whose
// segments are multiples of 16 bytes move as 16-byte vectors, like a device
// copy. Unit indices are split into (rank, offset) with one 32-bit division.

#include <stdexcept>

#include "codegen/kernels/cuda_prelude.hpp"
#include "codegen/kernels/permute.hpp"

namespace fp8c {

KernelSource emit_cuda(const PermuteKernel& k) {
  if (k.element_bytes != 1 && k.element_bytes != 2 && k.element_bytes != 4)
    throw std::invalid_argument("permute: element size must be 1, 2 or 4 bytes");
  std::string s = cuda_prelude();
  s += "#define ELEMENT_BYTES " + std::to_string(k.element_bytes) + "\n";
  s += R"(
struct u8x1 { u8 v; };
struct u8x2 { u16 v; };
struct u8x4 { u32 v; };
struct u8x8 { uint2 v; };
struct u8x16 { uint4 v; };

template <typename Unit>
__device__ __forceinline__ void copy_row(const u8* __restrict__ in, u8* __restrict__ out, int ranks,
                                         int outer, long long segment_bytes, int o) {
  const unsigned units = unsigned(segment_bytes / sizeof(Unit));
  const unsigned total = units * unsigned(ranks);
  Unit* dst = reinterpret_cast<Unit*>(out + (long long)o * ranks * segment_bytes);
  // Four units per thread per round, all loads issued before any store, so
  // each thread keeps up to 64 bytes in flight.
  for (unsigned base = threadIdx.x; base < total; base += 4 * blockDim.x) {
    Unit v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned u = base + j * blockDim.x;
      if (u < total) {
        const unsigned r = u / units, i = u - r * units;
        v[j] = reinterpret_cast<const Unit*>(in + ((long long)r * outer + o) * segment_bytes)[i];
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned u = base + j * blockDim.x;
      if (u < total) dst[u] = v[j];
    }
  }
}

extern "C" __global__ void __launch_bounds__(256)
)";
  s += k.name();
  s += R"((const u8* __restrict__ in, u8* __restrict__ out, int ranks, int outer,
     long long inner_local) {
  const int o = blockIdx.x;
  const long long segment_bytes = inner_local * ELEMENT_BYTES;
  if ((segment_bytes & 15) == 0)
    copy_row<u8x16>(in, out, ranks, outer, segment_bytes, o);
  else if ((segment_bytes & 7) == 0)
    copy_row<u8x8>(in, out, ranks, outer, segment_bytes, o);
  else if ((segment_bytes & 3) == 0)
    copy_row<u8x4>(in, out, ranks, outer, segment_bytes, o);
  else if ((segment_bytes & 1) == 0)
    copy_row<u8x2>(in, out, ranks, outer, segment_bytes, o);
  else
    copy_row<u8x1>(in, out, ranks, outer, segment_bytes, o);
}
)";
  return {k.name(), k.name(), std::move(s), {}};
}

}  // namespace fp8c
