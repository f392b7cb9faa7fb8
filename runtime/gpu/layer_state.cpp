#include "runtime/gpu/layer_state.hpp"

#include <algorithm>
#include <stdexcept>

namespace fp8c::runtime {

DeviceLayerState::DeviceLayerState(const Layer& layer, const LayerPlan& plan) : layer_(layer.name) {
  if (layer.recipe.kind == RecipeKind::delayed) {
    for (const auto& s : plan.update)
      if (const auto* u = s.as<ScaleUpdateStep>())
        for (const auto& e : u->entries)
          keys_.push_back(plan.delayed.at(static_cast<std::size_t>(e.state)).key());
    history_length_ = std::max<std::uint32_t>(1, layer.recipe.history);
  }
  const std::size_t n = keys_.size();
  const auto align16 = [](std::size_t v) { return (v + 15) / 16 * 16; };
  amax_offset_ = n * history_length_ * 4;
  scale_offset_ = align16(amax_offset_ + n * 4);
  scale_inv_offset_ = scale_offset_ + n * 16;
  buffer_ = DeviceBuffer(std::max<std::size_t>(16, scale_inv_offset_ + n * 16));
  upload({});
}

int DeviceLayerState::index(const std::string& key) const {
  auto it = std::find(keys_.begin(), keys_.end(), key);
  return it == keys_.end() ? -1 : static_cast<int>(it - keys_.begin());
}

void DeviceLayerState::upload(const cpu::LayerState& state) {
  for (const auto& [key, value] : state.delayed) {
    if (index(key) < 0)
      throw std::invalid_argument("layer '" + layer_ + "': the state has a tensor '" + key +
                                  "' this layer has no delayed scale for");
    if (!value.history.empty() && value.history.size() != history_length_)
      throw std::invalid_argument("layer '" + layer_ + "': the state's amax history of '" + key +
                                  "' has " + std::to_string(value.history.size()) +
                                  " entries, the recipe's history is " +
                                  std::to_string(history_length_));
  }
  const std::size_t n = keys_.size();
  std::vector<float> host(scale_inv_offset_ / 4 + n * kScaleStride, 0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    float scale = 1.0f;
    if (auto it = state.delayed.find(keys_[i]); it != state.delayed.end()) {
      scale = it->second.scale;
      std::copy(it->second.history.begin(), it->second.history.end(),
                host.begin() + static_cast<std::ptrdiff_t>(i * history_length_));
    }
    host[scale_offset_ / 4 + i * kScaleStride] = scale;
    host[scale_inv_offset_ / 4 + i * kScaleStride] = 1.0f / scale;
  }
  if (!host.empty()) buffer_.upload(host.data(), host.size() * 4);
}

cpu::LayerState DeviceLayerState::download() const {
  cpu::LayerState state;
  const std::size_t n = keys_.size();
  if (n == 0) return state;
  std::vector<float> host(scale_inv_offset_ / 4 + n * kScaleStride);
  buffer_.download(host.data(), host.size() * 4);
  for (std::size_t i = 0; i < n; ++i) {
    cpu::DelayedScale d;
    d.scale = host[scale_offset_ / 4 + i * kScaleStride];
    const auto first = host.begin() + static_cast<std::ptrdiff_t>(i * history_length_);
    d.history.assign(first, first + history_length_);
    state.delayed[keys_[i]] = std::move(d);
  }
  return state;
}

}  // namespace fp8c::runtime
