#include "codegen/kernels/generated_kernel.hpp"

namespace fp8c {

std::string GeneratedKernel::name() const {
  return std::visit([](const auto& k) { return k.name(); }, description);
}

KernelSource emit_cuda(const GeneratedKernel& kernel) {
  return std::visit([](const auto& k) { return emit_cuda(k); }, kernel.description);
}

}  // namespace fp8c
