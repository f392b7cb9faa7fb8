// The kernel variants the CPU emulation runs. Block quantize: every input
// type, format, block shape and usage set, pow2 or not for the blockwise
// ones, K-block-major scales, and dReLU on each block shape. Per-tensor
// quantize: every input type, format and usage set with
// delayed or current scaling, dbias with and without drelu, and the block
// order, launch-bounds and wide-column-store knobs; not dGELU/dSiLU, whose tanh.approx and
// __expf have no bit-exact host twin.
#pragma once

#include <vector>

#include "codegen/kernels/block_quantize.hpp"
#include "codegen/kernels/dequantize.hpp"
#include "codegen/kernels/quantize.hpp"
#include "codegen/kernels/scale_update.hpp"
#include "tests/runtime/epilogue_variants.hpp"

namespace fp8c::emulation {

inline std::vector<BlockQuantizeKernel> emulated_block_quantize_variants() {
  std::vector<BlockQuantizeKernel> all;
  for (ElemType input : {ElemType::bf16, ElemType::fp16, ElemType::fp32})
    for (ElemType format : {ElemType::e4m3, ElemType::e5m2})
      for (Scaling scaling : {Scaling::block_1x128, Scaling::block_128x128, Scaling::mx_1x32})
        for (int usage = 1; usage <= 3; ++usage)
          for (bool pow2 : {false, true}) {
            if (pow2 && scaling == Scaling::mx_1x32) continue;
            BlockQuantizeKernel k;
            k.input = input;
            k.format = format;
            k.scaling = scaling;
            k.rowwise = usage & 1;
            k.columnwise = usage & 2;
            k.pow2 = pow2;
            all.push_back(k);
          }
  // 1x128 scales in cuBLASLt's K-block-major order.
  for (ElemType input : {ElemType::bf16, ElemType::fp32})
    for (int usage = 1; usage <= 3; ++usage) {
      BlockQuantizeKernel k;
      k.input = input;
      k.rowwise = usage & 1;
      k.columnwise = usage & 2;
      k.k_block_major = true;
      all.push_back(k);
    }
  // dz = dy * relu'(z) (exact on the host; GELU's and SiLU's act' use
  // tanh.approx, ex2.approx and div.approx, which have no bit-exact twin).
  for (ElemType input : {ElemType::bf16, ElemType::fp16})
    for (Scaling scaling : {Scaling::block_1x128, Scaling::block_128x128, Scaling::mx_1x32}) {
      BlockQuantizeKernel k;
      k.input = input;
      k.format = input == ElemType::bf16 ? ElemType::e4m3 : ElemType::e5m2;
      k.scaling = scaling;
      k.rowwise = k.columnwise = true;
      k.pow2 = scaling == Scaling::block_1x128 && input == ElemType::bf16;
      k.dact = Activation::relu;
      all.push_back(k);
    }
  return all;
}

inline std::vector<QuantizeKernel> emulated_quantize_variants() {
  std::vector<QuantizeKernel> all;
  for (ElemType input : {ElemType::bf16, ElemType::fp16, ElemType::fp32})
    for (ElemType format : {ElemType::e4m3, ElemType::e5m2})
      for (int usage = 1; usage <= 3; ++usage)
        for (int scaling = 0; scaling < 3; ++scaling) {  // delayed, current, current pow2
          QuantizeKernel k;
          k.input = input;
          k.format = format;
          k.rowwise = usage & 1;
          k.columnwise = usage & 2;
          k.amax = scaling == 0;
          k.scale_from_amax = scaling > 0;
          k.pow2_scale = scaling == 2;
          all.push_back(k);
        }
  for (Activation act : {Activation::none, Activation::relu})
    for (ElemType input : {ElemType::bf16, ElemType::fp32}) {
      QuantizeKernel k;
      k.input = input;
      k.format = ElemType::e5m2;
      k.columnwise = true;
      k.amax = true;
      k.dbias = true;
      k.dact = act;
      all.push_back(k);
    }
  for (ElemType input : {ElemType::bf16, ElemType::fp16, ElemType::fp32}) {
    QuantizeKernel wide;
    wide.input = input;
    wide.rowwise = input != ElemType::fp16;
    wide.columnwise = true;
    wide.amax = input != ElemType::fp32;
    wide.scale_from_amax = input == ElemType::fp32;
    wide.dbias = input == ElemType::bf16;
    wide.wide_column_stores = true;
    all.push_back(wide);
  }
  return all;
}

// Scale updates (built as kernel IR): both rules, histories of one, one
// chunk and several chunks of 256, margins of both signs, a stride and the
// NaN guard.
inline std::vector<ScaleUpdateKernel> emulated_scale_update_variants() {
  const std::vector<ElemType> mixed = {ElemType::e4m3, ElemType::e5m2, ElemType::e4m3};
  std::vector<ScaleUpdateKernel> all = {{mixed, 16, 0, AmaxAlgo::max},
                                        {mixed, 1, -2, AmaxAlgo::max},
                                        {mixed, 300, 3, AmaxAlgo::most_recent},
                                        {{ElemType::e5m2}, 513, 0, AmaxAlgo::max},
                                        {{ElemType::e4m3}, 1024, -100, AmaxAlgo::max}};
  ScaleUpdateKernel guarded{mixed, 64, 1, AmaxAlgo::max};
  guarded.scale_stride = 4;
  guarded.guard = 3;
  all.push_back(guarded);
  return all;
}

// Epilogue kernels (built as kernel IR): every variant the GPU tests run.
inline std::vector<EpilogueKernel> emulated_epilogue_variants() {
  return testing::epilogue_variants();
}

// Dequantizes (built as kernel IR): every format, scaling, output type and
// orientation, each with amax on or off (one format per amax setting and
// output type, so every scaling and orientation has amax both ways).
inline std::vector<DequantizeKernel> emulated_dequantize_variants() {
  std::vector<DequantizeKernel> all;
  for (ElemType format : {ElemType::e4m3, ElemType::e5m2})
    for (Scaling scaling :
         {Scaling::per_tensor, Scaling::block_1x128, Scaling::block_128x128, Scaling::mx_1x32})
      for (ElemType output : {ElemType::bf16, ElemType::fp16, ElemType::fp32})
        for (bool transpose : {false, true}) {
          const bool amax = (format == ElemType::e4m3) == (output != ElemType::fp16);
          all.push_back({format, scaling, output, transpose, amax});
        }
  return all;
}

}  // namespace fp8c::emulation
