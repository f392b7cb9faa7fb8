// A layer's FP8 state on the device: for each delayed-scaling tensor (x, w,
// dz, ...) its amax history, the amax this step reduced, its scale and the
// scale's inverse, as the arrays the generated scale-update kernel works on
// ([tensors][history], [tensors], and scales at a stride of 4 floats). The order of tensors is that
// of the plan's scale_update step, so the kernel updates them all in one launch. Host copies are
// cpu::LayerState, the CPU executor's own type, so GPU and CPU states compare directly and one file
// format serves both.
#pragma once

#include <string>
#include <vector>

#include "codegen/plan/plan.hpp"
#include "fp8c/spec.hpp"
#include "runtime/cpu/executor.hpp"
#include "runtime/device.hpp"

namespace fp8c::runtime {

class DeviceLayerState {
 public:
  // Initial state (scale 1, zero history), as cpu::initial_state.
  DeviceLayerState(const Layer& layer, const LayerPlan& plan);

  const std::vector<std::string>& keys() const { return keys_; }
  int index(const std::string& key) const;  // -1 when `key` has no delayed state
  std::uint32_t history_length() const { return history_length_; }

  CUdeviceptr history() const { return buffer_.get(); }
  CUdeviceptr amax(int i = 0) const { return at(amax_offset_, i); }
  // Scales and their inverses are 16 bytes apart (kScaleStride floats):
  // cuBLASLt reads a scale only from a 16-byte aligned address.
  static constexpr int kScaleStride = 4;
  CUdeviceptr scale(int i = 0) const { return at(scale_offset_, i * kScaleStride); }
  CUdeviceptr scale_inv(int i = 0) const { return at(scale_inv_offset_, i * kScaleStride); }

  // Synchronous copies (the caller makes sure no step is in flight).
  // upload: keys missing from `state` get the initial state; keys in `state`
  // this layer does not have are an error (a state file for another spec).
  void upload(const cpu::LayerState& state);
  cpu::LayerState download() const;

 private:
  CUdeviceptr at(std::size_t offset, int i) const {
    return buffer_.get() + offset + static_cast<std::size_t>(i) * 4;
  }
  std::string layer_;
  std::vector<std::string> keys_;
  std::uint32_t history_length_ = 1;
  std::size_t amax_offset_ = 0, scale_offset_ = 0, scale_inv_offset_ = 0;
  DeviceBuffer buffer_;
};

}  // namespace fp8c::runtime
