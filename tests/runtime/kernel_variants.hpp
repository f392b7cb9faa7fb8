// The quantize kernel variants the tests cover: every input type, format and
// usage set, with amax or current scaling, plus the fused dbias/dact ones.
#pragma once

#include <vector>

#include "codegen/kernels/block_quantize.hpp"
#include "codegen/kernels/quantize.hpp"

namespace fp8c::testing {

inline std::vector<QuantizeKernel> quantize_variants() {
  std::vector<QuantizeKernel> all;
  for (ElemType input : {ElemType::bf16, ElemType::fp16, ElemType::fp32})
    for (ElemType format : {ElemType::e4m3, ElemType::e5m2})
      for (int usage = 1; usage <= 3; ++usage)
        for (bool current : {false, true}) {
          QuantizeKernel k;
          k.input = input;
          k.format = format;
          k.rowwise = usage & 1;
          k.columnwise = usage & 2;
          k.amax = !current;
          k.scale_from_amax = current;
          k.pow2_scale = current && input == ElemType::fp16;
          all.push_back(k);
        }
  for (Activation act : {Activation::none, Activation::relu, Activation::gelu, Activation::silu}) {
    QuantizeKernel k;
    k.format = ElemType::e5m2;
    k.columnwise = true;
    k.amax = true;
    k.dbias = true;
    k.dact = act;
    all.push_back(k);
  }
  // 16-byte columnwise stores, alone and with dbias.
  for (bool dbias : {false, true}) {
    QuantizeKernel k;
    k.format = dbias ? ElemType::e5m2 : ElemType::e4m3;
    k.columnwise = true;
    k.amax = true;
    k.dbias = dbias;
    k.wide_column_stores = true;
    all.push_back(k);
  }
  return all;
}

inline std::vector<BlockQuantizeKernel> block_quantize_variants() {
  std::vector<BlockQuantizeKernel> all;
  for (ElemType format : {ElemType::e4m3, ElemType::e5m2})
    for (Scaling scaling : {Scaling::block_1x128, Scaling::block_128x128, Scaling::mx_1x32})
      for (int usage = 1; usage <= 3; ++usage) {
        BlockQuantizeKernel k;
        k.format = format;
        k.scaling = scaling;
        k.rowwise = usage & 1;
        k.columnwise = usage & 2;
        all.push_back(k);
      }
  for (Scaling scaling : {Scaling::block_1x128, Scaling::block_128x128}) {
    BlockQuantizeKernel k;
    k.scaling = scaling;
    k.columnwise = true;
    k.pow2 = true;
    all.push_back(k);
  }
  for (ElemType input : {ElemType::fp16, ElemType::fp32})
    for (Scaling scaling : {Scaling::block_1x128, Scaling::mx_1x32}) {
      BlockQuantizeKernel k;
      k.input = input;
      k.scaling = scaling;
      k.columnwise = true;
      all.push_back(k);
    }
  {  // 1x128 scales in cuBLASLt's K-block-major order
    BlockQuantizeKernel k;
    k.rowwise = k.columnwise = true;
    k.k_block_major = true;
    all.push_back(k);
  }
  return all;
}

// Block quantize kernels compiled for their registers (NVRTC and LLVM, no
// spills, tests/runtime/kernel_compile_test.cpp, tests/ir): every input type,
// block shape and usage set; pow2, K-block-major and E5M2 row+column for each
// input; dact with each activation and block shape for bf16 and fp16.
inline std::vector<BlockQuantizeKernel> block_quantize_compile_variants() {
  std::vector<BlockQuantizeKernel> all;
  const auto add = [&](ElemType input, Scaling scaling, int usage) -> BlockQuantizeKernel& {
    BlockQuantizeKernel k;
    k.input = input;
    k.scaling = scaling;
    k.rowwise = usage & 1;
    k.columnwise = usage & 2;
    return all.emplace_back(k);
  };
  for (ElemType input : {ElemType::bf16, ElemType::fp16, ElemType::fp32})
    for (Scaling scaling : {Scaling::block_1x128, Scaling::block_128x128, Scaling::mx_1x32})
      for (int usage = 1; usage <= 3; ++usage) add(input, scaling, usage);
  for (ElemType input : {ElemType::bf16, ElemType::fp16, ElemType::fp32}) {
    add(input, Scaling::block_1x128, 3).pow2 = true;
    add(input, Scaling::block_128x128, 3).pow2 = true;
    add(input, Scaling::block_1x128, 3).k_block_major = true;
    add(input, Scaling::mx_1x32, 3).format = ElemType::e5m2;
  }
  for (Activation act : {Activation::relu, Activation::gelu, Activation::silu})
    for (Scaling scaling : {Scaling::block_1x128, Scaling::block_128x128, Scaling::mx_1x32})
      for (ElemType input : {ElemType::bf16, ElemType::fp16}) add(input, scaling, 3).dact = act;
  return all;
}

// Block quantize kernels that fuse dact: checked on the GPU against the
// backward epilogue's fp32 dz quantized by the fp32-input kernel
// (block_quantize_gpu_test.cpp), since the CPU reference's act' is not the
// GPU's fast one.
inline std::vector<BlockQuantizeKernel> block_quantize_dact_variants() {
  std::vector<BlockQuantizeKernel> all;
  for (Activation act : {Activation::relu, Activation::gelu, Activation::silu})
    for (Scaling scaling : {Scaling::block_1x128, Scaling::block_128x128, Scaling::mx_1x32}) {
      BlockQuantizeKernel k;
      k.scaling = scaling;
      k.rowwise = k.columnwise = true;
      k.pow2 = scaling == Scaling::block_1x128;
      k.dact = act;
      all.push_back(k);
    }
  BlockQuantizeKernel fp16;
  fp16.input = ElemType::fp16;
  fp16.format = ElemType::e5m2;
  fp16.dact = Activation::silu;
  all.push_back(fp16);
  return all;
}

}  // namespace fp8c::testing
