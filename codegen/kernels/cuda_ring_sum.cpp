// The CUDA C++ printer for RingSumKernel: the rank reductions' element
// helpers (cuda_rank_arith.hpp) and one grid-stride loop. Memory-bound and
// small next to the GEMM chunk it follows; one element per thread per round.

#include <stdexcept>

#include "codegen/kernels/cuda_prelude.hpp"
#include "codegen/kernels/cuda_rank_arith.hpp"
#include "codegen/kernels/ring_sum.hpp"

namespace fp8c {
namespace {

ElemType checked(ElemType e) {
  if (e != ElemType::fp32 && e != ElemType::bf16 && e != ElemType::fp16)
    throw std::invalid_argument("ring_sum: partials must be fp32, bf16 or fp16, not " +
                                std::string(to_string(e)));
  return e;
}

}  // namespace

std::string RingSumKernel::name() const {
  return "ring_sum_" + std::string(to_string(checked(element)));
}

KernelSource emit_cuda(const RingSumKernel& k) {
  std::string s = cuda_prelude();
  s += rank_element_helpers(checked(k.element));
  s += "\nextern \"C\" __global__ void __launch_bounds__(" + std::to_string(kRingSumThreads) +
       ")\n" + k.name();
  s += R"((const float* sum_in, const elem_t* partial, void* out, u64 count, int last) {
  const u64 step = u64(gridDim.x) * blockDim.x;
  for (u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
    const float p = widen(partial[i]);
    const float total = sum_in ? add(sum_in[i], p) : p;
    if (last)
      reinterpret_cast<elem_t*>(out)[i] = narrow(total);
    else
      reinterpret_cast<float*>(out)[i] = total;
  }
}
)";
  return {k.name(), k.name(), std::move(s), {}};
}

}  // namespace fp8c
