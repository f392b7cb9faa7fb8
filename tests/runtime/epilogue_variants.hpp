// The epilogue and dequantize kernel variants the tests cover: every input
// type with every activation (forward and backward), every output type and
// FP8 format, with and without bias, z and amax, backward into fp32 staging;
// every FP8 format, scaling, output type and orientation of dequantize.
#pragma once

#include <vector>

#include "codegen/kernels/dequantize.hpp"
#include "codegen/kernels/epilogue.hpp"

namespace fp8c::testing {

inline std::vector<EpilogueKernel> epilogue_variants() {
  std::vector<EpilogueKernel> all;
  const ElemType hp[] = {ElemType::bf16, ElemType::fp16, ElemType::fp32};
  const Activation acts[] = {Activation::none, Activation::relu, Activation::gelu,
                             Activation::silu};
  // Forward: a row layer's bias + activation, z saved for dact.
  for (ElemType input : hp)
    for (Activation act : acts) {
      EpilogueKernel k;
      k.input = k.output = input;
      k.bias = true;
      k.activation = act;
      k.store_pre = act != Activation::none;
      all.push_back(k);
    }
  // Forward into FP8 for a chained consumer, with the output's amax.
  for (ElemType format : {ElemType::e4m3, ElemType::e5m2})
    for (Activation act : acts) {
      EpilogueKernel k;
      k.bias = true;
      k.activation = act;
      k.store_pre = act != Activation::none;
      k.output = format;
      k.amax = true;
      all.push_back(k);
    }
  // Other input / output pairs; after a GEMM that wrote z (no bias).
  const std::pair<ElemType, ElemType> casts[] = {{ElemType::bf16, ElemType::fp32},
                                                 {ElemType::fp32, ElemType::bf16},
                                                 {ElemType::fp16, ElemType::fp32},
                                                 {ElemType::fp32, ElemType::fp16}};
  for (auto [in, out] : casts) {
    EpilogueKernel k;
    k.input = in;
    k.output = out;
    k.bias = true;
    all.push_back(k);
  }
  for (Activation act : {Activation::relu, Activation::silu, Activation::gelu})
    for (ElemType out : {ElemType::bf16, ElemType::e4m3}) {
      EpilogueKernel k;
      k.activation = act;
      k.output = out;
      k.amax = true;
      all.push_back(k);
    }
  {
    EpilogueKernel k;  // fp16 / fp32 inputs into FP8
    k.input = ElemType::fp16;
    k.output = ElemType::e4m3;
    k.bias = true;
    k.activation = Activation::gelu;
    k.amax = true;
    all.push_back(k);
    k.input = ElemType::fp32;
    k.output = ElemType::e5m2;
    k.activation = Activation::silu;
    k.store_pre = true;
    all.push_back(k);
  }
  // Backward: dact and / or dbias.
  for (ElemType input : hp)
    for (Activation act : acts)
      for (bool dbias : {true, false}) {
        if (act == Activation::none && !dbias) continue;
        EpilogueKernel k;
        k.input = k.output = input;
        k.backward = true;
        k.activation = act;
        k.dbias = dbias;
        all.push_back(k);
      }
  // Backward into fp32: dz and dbias staged for a block quantizer that fuses
  // neither (lower.cpp's dact_to_staging).
  for (auto [input, act] :
       {std::pair{ElemType::bf16, Activation::none}, std::pair{ElemType::bf16, Activation::gelu},
        std::pair{ElemType::fp16, Activation::relu}, std::pair{ElemType::fp16, Activation::silu}}) {
    EpilogueKernel k;
    k.input = input;
    k.output = ElemType::fp32;
    k.backward = true;
    k.activation = act;
    k.dbias = true;
    all.push_back(k);
  }
  return all;
}

inline std::vector<DequantizeKernel> dequantize_variants() {
  std::vector<DequantizeKernel> all;
  for (ElemType format : {ElemType::e4m3, ElemType::e5m2})
    for (Scaling scaling :
         {Scaling::per_tensor, Scaling::block_1x128, Scaling::block_128x128, Scaling::mx_1x32})
      for (ElemType out : {ElemType::bf16, ElemType::fp16, ElemType::fp32})
        for (bool transpose : {false, true})
          all.push_back({format, scaling, out, transpose, false});
  for (Scaling scaling :
       {Scaling::per_tensor, Scaling::block_1x128, Scaling::block_128x128, Scaling::mx_1x32})
    for (bool transpose : {false, true})
      all.push_back({ElemType::e4m3, scaling, ElemType::bf16, transpose, true});
  return all;
}

}  // namespace fp8c::testing
