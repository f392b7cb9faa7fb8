// CPU reference of ScaleUpdateKernel, through codegen/numerics: the history
// rolled with the newest amax into slot 0, then delayed_scaling_update and
// scale_inverse on it.
#pragma once

#include <vector>

#include "codegen/kernels/scale_update.hpp"

namespace fp8c::runtime {

struct ScaleUpdateState {
  std::vector<float> history;    // [tensors][history_length]
  std::vector<float> scale;      // [tensors]
  std::vector<float> scale_inv;  // [tensors]
};

// `state.history` and `state.scale` are the previous step's; `amax` this
// step's reduced amaxes. Returns the state after the update.
ScaleUpdateState reference_scale_update(const ScaleUpdateKernel& kernel, ScaleUpdateState state,
                                        const std::vector<float>& amax);

}  // namespace fp8c::runtime
