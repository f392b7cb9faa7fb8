// The CUDA C++ printer for EpilogueKernel.
//
// One block of 256 threads owns 512 columns of 32 rows (forward) or 128
// rows (backward, one dbias partial per tile). Thread t takes a slot of
// eight columns (t % 64) in a quarter of the tile's rows (t / 64), so each
// thread loads its eight bias values once, and each column's dbias is its
// own thread's running sum per quarter: the order of the additions is fixed
// by the tile, not by scheduling, and the CPU reference repeats it.
//   - Vector mode (cols % 8 == 0 and every pointer aligned; the same for all
//     blocks): the slot is eight adjacent columns, loaded as 16-byte vectors
//     (two with fp32) and stored as 16-byte (FP8: 8-byte) vectors, with
//     eight rows' loads in flight per thread (four with fp32).
//   - Scalar mode (any other shape or alignment): the slot's columns are 64
//     apart, so adjacent threads still touch adjacent columns.

#include <sstream>
#include <stdexcept>

#include "codegen/kernels/cuda_activation.hpp"
#include "codegen/kernels/cuda_prelude.hpp"
#include "codegen/kernels/cuda_store.hpp"
#include "codegen/kernels/epilogue.hpp"

namespace fp8c {
namespace {

void validate(const EpilogueKernel& k) {
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument("epilogue kernel " + k.name() + ": " + why);
  };
  if (!is_high_precision(k.input)) fail("input must be bf16, fp16 or fp32");
  if (k.backward) {
    if (k.bias || k.store_pre || k.amax) fail("bias, store_pre and amax are forward options");
    // fp32: dz staged for a block quantize that fuses no dact, kept unrounded
    // so its FP8 codes are those of the fused CPU reference.
    if (k.output != k.input && k.output != ElemType::fp32)
      fail("backward stores v in the input type or fp32");
    if (k.activation == Activation::none && !k.dbias) fail("backward without dact or dbias");
  } else {
    if (k.dbias) fail("dbias is a backward option");
    if (!is_high_precision(k.output) && !k.fp8_output())
      fail("output must be bf16, fp16, fp32, e4m3 or e5m2");
  }
}

}  // namespace

std::string EpilogueKernel::name() const {
  // Appends one piece at a time: GCC 12 warns (-Wrestrict, falsely) on
  // "literal" + std::string temporaries here.
  std::string n = backward ? "epilogue_bwd_" : "epilogue_";
  n += to_string(input);
  if (backward) {
    if (activation != Activation::none) (n += "_d") += to_string(activation);
    if (dbias) n += "_dbias";
    if (output != input) (n += "_to_") += to_string(output);
    return n;
  }
  if (bias) n += "_bias";
  if (activation != Activation::none) (n += "_") += to_string(activation);
  if (store_pre) n += "_z";
  (n += "_to_") += to_string(output);
  if (amax) n += "_amax";
  return n;
}

KernelSource emit_cuda(const EpilogueKernel& k) {
  validate(k);
  const bool fp8 = k.fp8_output();
  const bool wide = k.input == ElemType::fp32;
  std::ostringstream s;
  s << cuda_prelude() << cuda_store_functions();
  s << (k.backward ? cuda_activation_grad_function(k.activation)
                   : cuda_activation_function(k.activation));
  s << "typedef " << cuda_storage_type(k.input) << " in_t;\n"
    << "typedef " << (fp8 ? "u8" : cuda_storage_type(k.output)) << " out_t;\n"
    << "#define BACKWARD " << cuda_bool(k.backward) << "\n"
    << "#define BIAS " << cuda_bool(k.bias) << "\n"
    << "#define STORE_PRE " << cuda_bool(k.store_pre) << "\n"
    << "#define AMAX " << cuda_bool(k.amax) << "\n"
    << "#define DBIAS " << cuda_bool(k.dbias) << "\n"
    << "#define DACT " << cuda_bool(k.backward && k.activation != Activation::none) << "\n"
    << "#define FP8_OUT " << cuda_bool(fp8) << "\n"
    << "#define PACK " << (fp8 ? cuda_pack_function(k.output) : "unused") << "\n"
    << "#define WIDE " << cuda_bool(wide) << "\n"
    << "#define ROWS_PER_THREAD " << epilogue_tile_rows(k) / 4 << "\n"
    << "#define CHUNK " << (wide ? 4 : 8) << "\n";
  s << cuda_row_loads() << R"(

// Eight values to eight consecutive elements (16-byte aligned).
__device__ __forceinline__ void store8(float* p, const float v[8]) {
  float4* q = reinterpret_cast<float4*>(p);
  q[0] = make_float4(canonical(v[0]), canonical(v[1]), canonical(v[2]), canonical(v[3]));
  q[1] = make_float4(canonical(v[4]), canonical(v[5]), canonical(v[6]), canonical(v[7]));
}
template <typename T>
__device__ __forceinline__ void store8(T* p, const float v[8]) {
  *reinterpret_cast<uint4*>(p) = make_uint4(pack2(v[0], v[1], T()), pack2(v[2], v[3], T()),
                                            pack2(v[4], v[5], T()), pack2(v[6], v[7], T()));
}

// A product the compiler may not fuse into a following add: dbias sums the
// rounded product, as the reference does.
__device__ __forceinline__ float mul_rn(float a, float b) {
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

__device__ __forceinline__ bool aligned(const void* p, unsigned bytes) {
  return (reinterpret_cast<unsigned long long>(p) & (bytes - 1)) == 0;
}

#if !BACKWARD
// Forward, per slot: z = x + bias, y = act(z) (canonical NaN), amax of y.
// Slots past the last column hold x = bias = 0, so y = act(0) = 0 and the
// amax is unaffected.
__device__ __forceinline__ void forward8(float a[8], const float b[8], float y[8], u32& amax_bits) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#if BIAS
    a[j] += b[j];
#endif
    y[j] = canonical(act(a[j]));
    amax_bits = max(amax_bits, abs_bits(y[j]));
  }
}
#else

// Backward, per slot: v = dy * act'(z) (or dy), added to the quarter's sums.
__device__ __forceinline__ void backward8(float a[8], const float p[8], float sums[8]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#if DACT
    a[j] = mul_rn(a[j], dact(p[j]));
#endif
    sums[j] += a[j];
  }
}
#endif

extern "C" __global__ void __launch_bounds__(256)
)" << k.name()
    << R"((const in_t* __restrict__ x, const in_t* __restrict__ bias, const in_t* __restrict__ pre,
     const float* __restrict__ scale_in, void* __restrict__ out_raw, in_t* __restrict__ pre_out,
     u32* __restrict__ amax_out, float* __restrict__ dbias_partial, int rows, int cols) {
  out_t* __restrict__ out = reinterpret_cast<out_t*>(out_raw);
#if DBIAS
  __shared__ float colsum[4][512];  // [quarter][column of the tile]
#endif
#if AMAX
  __shared__ u32 reduce32[32];
#endif
  const int t = threadIdx.x, g = t & 63, q = t >> 6;
  const int r0 = blockIdx.x * (4 * ROWS_PER_THREAD), c0 = blockIdx.y * 512;
  const int rbeg = r0 + q * ROWS_PER_THREAD, rend = min(rbeg + ROWS_PER_THREAD, rows);
#if FP8_OUT
  const float scale = *scale_in;
#endif
#if BACKWARD
  float sums[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  float p[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};  // z; unused without dact
#else
  u32 amax_bits = 0;
  float b[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};  // 0 without bias
#endif
  const bool vec = (cols & 7) == 0 && aligned(x, 16) && (!BIAS || aligned(bias, 16)) &&
                   (!DACT || aligned(pre, 16)) && aligned(out, FP8_OUT ? 8 : 16) &&
                   (!STORE_PRE || aligned(pre_out, 16));
  if (vec) {
    const int c = c0 + 8 * g;
    if (c < cols) {
#if BIAS
      decode(load_raw(bias, c), b);
#endif
      for (int rb = rbeg; rb < rend; rb += CHUNK) {
        // All of the chunk's loads are issued before any is used.
        raw8 rx[CHUNK];
#if DACT
        raw8 rp[CHUNK];
#endif
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) {
          if (rb + i < rend) {
            rx[i] = load_raw(x, (long long)(rb + i) * cols + c);
#if DACT
            rp[i] = load_raw(pre, (long long)(rb + i) * cols + c);
#endif
          }
        }
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) {
          if (rb + i < rend) {
            const long long offset = (long long)(rb + i) * cols + c;
            float a[8];
            decode(rx[i], a);
#if BACKWARD
#if DACT
            decode(rp[i], p);
#endif
            backward8(a, p, sums);
            store8(out + offset, a);
#else
            float y[8];
            forward8(a, b, y, amax_bits);
#if STORE_PRE
            store8(pre_out + offset, a);
#endif
#if FP8_OUT
            uint2 packed;
            packed.x = u32(PACK(y[0] * scale, y[1] * scale)) | (u32(PACK(y[2] * scale, y[3] * scale)) << 16);
            packed.y = u32(PACK(y[4] * scale, y[5] * scale)) | (u32(PACK(y[6] * scale, y[7] * scale)) << 16);
            *reinterpret_cast<uint2*>(out + offset) = packed;
#else
            store8(out + offset, y);
#endif
#endif
          }
        }
      }
    }
  } else {
#if BIAS
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int c = c0 + g + 64 * j;
      b[j] = c < cols ? to_float(bias[c]) : 0.0f;
    }
#endif
    for (int r = rbeg; r < rend; ++r) {
      const long long row = (long long)r * cols;
      float a[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int c = c0 + g + 64 * j;
        a[j] = c < cols ? to_float(x[row + c]) : 0.0f;
#if DACT
        p[j] = c < cols ? to_float(pre[row + c]) : 0.0f;
#endif
      }
#if BACKWARD
      backward8(a, p, sums);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int c = c0 + g + 64 * j;
        if (c < cols) store_element(out + row + c, a[j]);
      }
#else
      float y[8];
      forward8(a, b, y, amax_bits);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int c = c0 + g + 64 * j;
        if (c >= cols) continue;
#if STORE_PRE
        store_element(pre_out + row + c, a[j]);
#endif
#if FP8_OUT
        out[row + c] = u8(PACK(y[j] * scale, 0.0f) & 0xFF);
#else
        store_element(out + row + c, y[j]);
#endif
      }
#endif
    }
  }
#if DBIAS
  // Quarter sums to shared memory, then each column's four in quarter order.
#pragma unroll
  for (int j = 0; j < 8; ++j) colsum[q][vec ? 8 * g + j : g + 64 * j] = sums[j];
  __syncthreads();
  for (int cc = t; cc < 512; cc += 256) {
    if (c0 + cc >= cols) continue;
    float total = colsum[0][cc];
    total += colsum[1][cc];
    total += colsum[2][cc];
    total += colsum[3][cc];
    dbias_partial[(long long)blockIdx.x * cols + c0 + cc] = total;
  }
#endif
#if AMAX
  amax_bits = block_max_u32(amax_bits, reduce32);
  if (t == 0 && amax_bits != 0) atomicMax(amax_out, amax_bits);
#endif
}
)";
  return {k.name(), k.name(), s.str(), {}};
}

}  // namespace fp8c
