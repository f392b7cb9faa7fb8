// The block quantize variants the CPU emulation runs: every input type,
// format, block shape and usage set, pow2 or not for the blockwise ones.
#pragma once

#include <vector>

#include "codegen/kernels/block_quantize.hpp"

namespace fp8c::emulation {

inline std::vector<BlockQuantizeKernel> emulated_block_quantize_variants() {
  std::vector<BlockQuantizeKernel> all;
  for (ElemType input : {ElemType::bf16, ElemType::fp16, ElemType::fp32})
    for (Fp8Format format : {Fp8Format::e4m3, Fp8Format::e5m2})
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
  return all;
}

}  // namespace fp8c::emulation
