#include "runtime/cpu/tensor_store.hpp"

#include <cstring>
#include <stdexcept>

#include "codegen/numerics/half.hpp"

namespace fp8c::cpu {

float round_to(ElemType type, float value) {
  switch (type) {
    case ElemType::bf16:
      return numerics::bf16_to_float(numerics::float_to_bf16(value));
    case ElemType::fp16:
      return numerics::fp16_to_float(numerics::float_to_fp16(value));
    default:
      return value;
  }
}

TensorStore::TensorStore(const LayerPlan& plan) : plan_(plan) {
  data_.resize(plan.tensors.size());
  written_.assign(plan.tensors.size(), false);
  for (const auto& t : plan.tensors)
    data_[static_cast<std::size_t>(t.id)].assign(t.elements() * element_bytes(t.type), 0);
}

std::span<std::uint8_t> TensorStore::bytes(int id) {
  return data_.at(static_cast<std::size_t>(id));
}
std::span<const std::uint8_t> TensorStore::bytes(int id) const {
  return data_.at(static_cast<std::size_t>(id));
}

std::vector<float> TensorStore::read_hp(int id) const {
  const Tensor& t = tensor(id);
  const auto& d = data_.at(static_cast<std::size_t>(id));
  const std::size_t n = t.elements();
  std::vector<float> out(n);
  if (t.usage != Usage::rowwise || t.segmented)
    throw std::logic_error("cpu executor: high-precision tensor " + t.name + " is not rowwise");
  switch (t.type) {
    case ElemType::bf16:
    case ElemType::fp16: {
      std::vector<std::uint16_t> raw(n);
      std::memcpy(raw.data(), d.data(), n * 2);
      for (std::size_t i = 0; i < n; ++i)
        out[i] = t.type == ElemType::bf16 ? numerics::bf16_to_float(raw[i])
                                          : numerics::fp16_to_float(raw[i]);
      break;
    }
    case ElemType::fp32:
      std::memcpy(out.data(), d.data(), n * 4);
      break;
    default:
      throw std::logic_error("cpu executor: " + t.name + " is not a high-precision tensor");
  }
  return out;
}

void TensorStore::write_hp(int id, std::span<const float> values) {
  const Tensor& t = tensor(id);
  auto& d = data_.at(static_cast<std::size_t>(id));
  const std::size_t n = t.elements();
  if (values.size() != n)
    throw std::logic_error("cpu executor: " + t.name + " expects " + std::to_string(n) +
                           " values, got " + std::to_string(values.size()));
  switch (t.type) {
    case ElemType::bf16:
    case ElemType::fp16:
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t bits = t.type == ElemType::bf16 ? numerics::float_to_bf16(values[i])
                                                            : numerics::float_to_fp16(values[i]);
        std::memcpy(d.data() + 2 * i, &bits, 2);
      }
      break;
    case ElemType::fp32:
      std::memcpy(d.data(), values.data(), n * 4);
      break;
    default:
      throw std::logic_error("cpu executor: " + t.name + " is not a high-precision tensor");
  }
  mark_written(id);
}

float TensorStore::scalar(int id) const {
  float v = 0.0f;
  std::memcpy(&v, data_.at(static_cast<std::size_t>(id)).data(), 4);
  return v;
}

void TensorStore::set_scalar(int id, float value) {
  std::memcpy(data_.at(static_cast<std::size_t>(id)).data(), &value, 4);
  mark_written(id);
}

}  // namespace fp8c::cpu
