#include "runtime/reference/scale_update_reference.hpp"

#include <span>
#include <stdexcept>

#include "codegen/numerics/scale.hpp"
#include "runtime/reference/element.hpp"

namespace fp8c::runtime {

ScaleUpdateState reference_scale_update(const ScaleUpdateKernel& k, ScaleUpdateState state,
                                        const std::vector<float>& amax) {
  const std::size_t n = k.formats.size(), len = k.history_length;
  if (state.history.size() != n * len || state.scale.size() != n || amax.size() != n)
    throw std::invalid_argument("reference_scale_update: sizes do not match the kernel");
  state.scale_inv.assign(n, 0.0f);
  const auto rule = k.rule == AmaxAlgo::max ? numerics::AmaxHistoryRule::max
                                            : numerics::AmaxHistoryRule::most_recent;
  for (std::size_t t = 0; t < n; ++t) {
    float* h = state.history.data() + t * len;
    for (std::size_t i = len - 1; i > 0; --i) h[i] = h[i - 1];
    h[0] = amax[t];
    const ElemType format = require_fp8(k.formats[t], "reference_scale_update");
    state.scale[t] = numerics::delayed_scaling_update(std::span<const float>(h, len), rule, format,
                                                      k.margin, state.scale[t]);
    state.scale_inv[t] = numerics::scale_inverse(state.scale[t]);
  }
  return state;
}

}  // namespace fp8c::runtime
