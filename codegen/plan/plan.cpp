// Names and sizes of Plan values.
#include "codegen/plan/plan.hpp"

namespace fp8c {

std::size_t element_bytes(ElemType t) {
  switch (t) {
    case ElemType::fp32:
      return 4;
    case ElemType::bf16:
    case ElemType::fp16:
      return 2;
    default:
      return 1;
  }
}

std::uint64_t Tensor::bytes() const {
  return elements() * element_bytes(type);
}

const Tensor* LayerPlan::find(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const LayerPlan* Plan::find(std::string_view layer) const {
  for (const auto& l : layers)
    if (l.layer == layer) return &l;
  return nullptr;
}

bool is_collective(StepKind k) {
  return k == StepKind::amax_all_reduce || k == StepKind::all_gather ||
         k == StepKind::reduce_scatter || k == StepKind::all_reduce;
}

std::uint64_t all_gather_bytes(std::uint64_t total, std::uint32_t ranks) {
  return total / ranks * (ranks - 1);
}

std::uint64_t all_reduce_bytes(std::uint64_t total, std::uint32_t ranks) {
  return 2 * all_gather_bytes(total, ranks);
}

std::string_view to_string(ElemType t) {
  switch (t) {
    case ElemType::bf16:
      return "bf16";
    case ElemType::fp16:
      return "fp16";
    case ElemType::fp32:
      return "fp32";
    case ElemType::e4m3:
      return "e4m3";
    case ElemType::e5m2:
      return "e5m2";
    case ElemType::e8m0:
      return "e8m0";
  }
  return "?";
}

std::string_view to_string(Usage u) {
  return u == Usage::rowwise ? "rowwise" : "columnwise";
}

std::string_view to_string(Scaling s) {
  switch (s) {
    case Scaling::none:
      return "none";
    case Scaling::per_tensor:
      return "per_tensor";
    case Scaling::block_1x128:
      return "1x128";
    case Scaling::block_128x128:
      return "128x128";
    case Scaling::mx_1x32:
      return "mx_1x32";
  }
  return "?";
}

std::string_view to_string(StepKind k) {
  switch (k) {
    case StepKind::amax:
      return "amax";
    case StepKind::amax_all_reduce:
      return "amax_all_reduce";
    case StepKind::quantize:
      return "quantize";
    case StepKind::transpose:
      return "transpose";
    case StepKind::all_gather:
      return "all_gather";
    case StepKind::permute:
      return "permute";
    case StepKind::dequantize:
      return "dequantize";
    case StepKind::reduce_scatter:
      return "reduce_scatter";
    case StepKind::all_reduce:
      return "all_reduce";
    case StepKind::gemm:
      return "gemm";
    case StepKind::epilogue:
      return "epilogue";
    case StepKind::scale_update:
      return "scale_update";
  }
  return "?";
}

std::string_view to_string(GemmRole r) {
  switch (r) {
    case GemmRole::fprop:
      return "fprop";
    case GemmRole::dgrad:
      return "dgrad";
    case GemmRole::wgrad:
      return "wgrad";
  }
  return "?";
}

}  // namespace fp8c
