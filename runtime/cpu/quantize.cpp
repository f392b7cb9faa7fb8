#include "runtime/cpu/quantize.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "codegen/numerics/amax.hpp"
#include "codegen/numerics/e8m0.hpp"
#include "codegen/numerics/mx_scale.hpp"
#include "codegen/numerics/scale.hpp"

namespace fp8c::cpu {
namespace {

struct BlockShape {
  std::size_t outer = 1;
  std::size_t inner = 1;
};

BlockShape block_shape(Scaling s) {
  switch (s) {
    case Scaling::block_1x128:
      return {1, 128};
    case Scaling::block_128x128:
      return {128, 128};
    case Scaling::mx_1x32:
      return {1, 32};
    default:
      return {};
  }
}

// Physical extents and the mapping from logical (i0, i1) to a byte offset,
// including rank segments of a gathered tensor.
struct Layout {
  std::size_t outer = 0, inner = 0;
  bool rowwise = true;
  bool segmented_inner = false;
  std::size_t segment = 0;  // inner extent of one rank segment

  Layout(const Tensor& t, std::uint32_t ranks) {
    rowwise = t.usage == Usage::rowwise;
    outer = t.dims[static_cast<std::size_t>(t.outer_dim())].local;
    inner = t.dims[static_cast<std::size_t>(t.inner_dim())].local;
    if (t.segmented) {
      if (*t.segmented != t.inner_dim())
        throw std::logic_error("cpu executor: " + t.name + " is segmented along its outer dim");
      segmented_inner = true;
      segment = inner / ranks;
    }
  }
  std::size_t index(std::size_t o, std::size_t n) const {
    if (!segmented_inner) return o * inner + n;
    return (n / segment) * outer * segment + o * segment + n % segment;
  }
};

// Which block (physical block row, block column) an element belongs to.
// Data gathered along its inner dim holds each rank's blocks of its own
// segment: segment / block (rounded up) blocks per rank, whether or not the
// segments are still apart (segmented) or already permuted together.
struct BlockMap {
  BlockShape shape;
  Layout scales;
  std::size_t data_segment = 0;  // 0: blocks run over the whole inner dim
  std::size_t blocks_per_segment = 0;

  BlockMap(const TensorStore& store, const Tensor& data, const Tensor& scale)
      : shape(block_shape(data.scaling)), scales(scale, store.plan().ranks) {
    const std::uint32_t ranks = store.plan().ranks;
    if (store.gathered_inner(data.id) && ranks > 1) {
      data_segment = Layout(data, ranks).inner / ranks;
      blocks_per_segment = scales.inner / ranks;
    }
  }
  std::size_t index(std::size_t o, std::size_t n) const {
    const std::size_t bo = o / shape.outer;
    const std::size_t bn = data_segment == 0 ? n / shape.inner
                                             : (n / data_segment) * blocks_per_segment +
                                                   (n % data_segment) / shape.inner;
    return scales.index(bo, bn);
  }
};

float load_scale_inv(const TensorStore& store, const Tensor& scale, std::size_t i) {
  const auto b = store.bytes(scale.id);
  if (scale.type == ElemType::e8m0) return numerics::e8m0_to_float(b[i]);
  float v;
  std::memcpy(&v, b.data() + 4 * i, 4);
  return v;
}

}  // namespace

numerics::Fp8Format fp8_format(ElemType type) {
  return type == ElemType::e4m3 ? numerics::Fp8Format::e4m3 : numerics::Fp8Format::e5m2;
}

QuantizeStats quantize_to(TensorStore& store, int id, std::span<const float> logical, float scale,
                          bool pow2) {
  const Tensor& t = store.tensor(id);
  const auto fmt = fp8_format(t.type);
  const Layout L(t, store.plan().ranks);
  if (L.segmented_inner) throw std::logic_error("cpu executor: quantize into segmented " + t.name);
  const std::size_t cols = t.dims[1].local;
  auto logical_at = [&](std::size_t o, std::size_t n) {
    return L.rowwise ? logical[o * cols + n] : logical[n * cols + o];
  };
  QuantizeStats stats;
  stats.amax = numerics::amax(logical);
  auto data = store.bytes(id);
  const float fmax = numerics::fp8_max(fmt);
  auto put = [&](std::size_t o, std::size_t n, float v, float s) {
    const float scaled = v * s;
    const std::uint8_t q = numerics::float_to_fp8(scaled, fmt, numerics::Saturation::satfinite);
    if (v != 0.0f && (q & 0x7F) == 0) ++stats.underflows;
    if (numerics::magnitude(scaled) > fmax) ++stats.overflows;
    data[L.index(o, n)] = q;
  };
  if (t.scaling == Scaling::per_tensor) {
    for (std::size_t o = 0; o < L.outer; ++o)
      for (std::size_t n = 0; n < L.inner; ++n) put(o, n, logical_at(o, n), scale);
    store.mark_written(id);
    return stats;
  }
  const Tensor& st = store.tensor(t.scale);
  const BlockShape bs = block_shape(t.scaling);
  const Layout SL(st, store.plan().ranks);
  auto sbytes = store.bytes(st.id);
  for (std::size_t bo = 0; bo * bs.outer < L.outer; ++bo) {
    for (std::size_t bn = 0; bn * bs.inner < L.inner; ++bn) {
      const std::size_t o1 = std::min(L.outer, (bo + 1) * bs.outer);
      const std::size_t n1 = std::min(L.inner, (bn + 1) * bs.inner);
      float amax = 0.0f;
      for (std::size_t o = bo * bs.outer; o < o1; ++o)
        for (std::size_t n = bn * bs.inner; n < n1; ++n)
          amax = numerics::amax_combine(amax, numerics::magnitude(logical_at(o, n)));
      float s = 1.0f;
      const std::size_t si = SL.index(bo, bn);
      if (t.scaling == Scaling::mx_1x32) {
        // Round-up E8M0 rule: the block's amax never exceeds the element max
        // after scaling, so MX blocks do not clip.
        const std::uint8_t code =
            numerics::mx_block_scale(amax, fmt, numerics::MxScaleRule::round_up);
        sbytes[si] = code;
        s = numerics::e8m0_reciprocal(code);
      } else {
        s = numerics::blockwise_scale(amax, fmt, pow2);
        const float inv = numerics::scale_inverse(s);
        std::memcpy(sbytes.data() + 4 * si, &inv, 4);
      }
      for (std::size_t o = bo * bs.outer; o < o1; ++o)
        for (std::size_t n = bn * bs.inner; n < n1; ++n) put(o, n, logical_at(o, n), s);
    }
  }
  store.mark_written(id);
  store.mark_written(st.id);
  return stats;
}

std::vector<float> decode(const TensorStore& store, int id, bool apply_tensor_scale) {
  const Tensor& t = store.tensor(id);
  const auto fmt = fp8_format(t.type);
  const Layout L(t, store.plan().ranks);
  const std::size_t cols = t.dims[1].local;
  std::vector<float> out(t.elements());
  const auto data = store.bytes(id);
  auto at = [&](std::size_t o, std::size_t n) -> float& {
    return L.rowwise ? out[o * cols + n] : out[n * cols + o];
  };
  if (t.scaling == Scaling::per_tensor) {
    const float inv = apply_tensor_scale ? numerics::scale_inverse(store.scalar(t.scale)) : 1.0f;
    for (std::size_t o = 0; o < L.outer; ++o)
      for (std::size_t n = 0; n < L.inner; ++n) {
        const float v = numerics::fp8_to_float(data[L.index(o, n)], fmt);
        at(o, n) = apply_tensor_scale ? v * inv : v;
      }
    return out;
  }
  const Tensor& st = store.tensor(t.scale);
  const BlockMap blocks(store, t, st);
  for (std::size_t o = 0; o < L.outer; ++o)
    for (std::size_t n = 0; n < L.inner; ++n)
      at(o, n) = numerics::fp8_to_float(data[L.index(o, n)], fmt) *
                 load_scale_inv(store, st, blocks.index(o, n));
  return out;
}

void transpose_fp8(TensorStore& store, int from, int to) {
  const Tensor& f = store.tensor(from);
  const std::size_t rows = f.dims[0].local, cols = f.dims[1].local;
  const auto src = store.bytes(from);
  auto dst = store.bytes(to);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  store.mark_written(to);
}

}  // namespace fp8c::cpu
