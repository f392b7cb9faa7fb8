// The buffers of one rank's LayerPlan: one byte buffer per tensor id, sized
// as the plan says, with typed access. High-precision tensors (bf16, fp16)
// hold their raw 16-bit values; every float written to them is rounded
// exactly as a GPU kernel's store would (round to nearest even).
// Per-tensor scale tensors (fp32 scalars, Form::scale) hold the scale
// multiplier a quantizer applies (x_fp8 = x * scale); a GEMM or dequantize
// multiplies by its reciprocal. Block scale tensors hold the per-block
// scale_inv (fp32) or E8M0 code.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codegen/plan/plan.hpp"

namespace fp8c::cpu {

class TensorStore {
 public:
  explicit TensorStore(const LayerPlan& plan);

  const LayerPlan& plan() const { return plan_; }
  const Tensor& tensor(int id) const { return plan_.tensor(id); }
  std::span<std::uint8_t> bytes(int id);
  std::span<const std::uint8_t> bytes(int id) const;
  bool written(int id) const { return written_.at(static_cast<std::size_t>(id)); }
  void mark_written(int id) { written_.at(static_cast<std::size_t>(id)) = true; }

  // A high-precision tensor's values in logical order [dims[0]][dims[1]].
  std::vector<float> read_hp(int id) const;
  // Rounds each value to the tensor's type and stores it in logical order.
  void write_hp(int id, std::span<const float> values);
  float scalar(int id) const;
  void set_scalar(int id, float value);

 private:
  const LayerPlan& plan_;
  std::vector<std::vector<std::uint8_t>> data_;
  std::vector<bool> written_;
};

// Rounds a float to what a tensor of `type` (bf16, fp16, fp32) stores.
float round_to(ElemType type, float value);

}  // namespace fp8c::cpu
