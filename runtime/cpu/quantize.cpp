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

// The blocks along one physical dim of `extent` elements: blocks of
// `block`, restarting at each of `segments` equal parts (a gathered tensor
// holds each rank's own blocks; a one-rank plan on an N-rank block grid
// restarts them where N shards would), so segments * ceil(part / block).
struct Partition {
  std::size_t extent = 0, block = 1, segments = 1;
  std::size_t part() const { return extent / segments; }
  std::size_t per_segment() const { return (part() + block - 1) / block; }
  std::size_t count() const { return segments * per_segment(); }
  std::size_t index(std::size_t n) const {
    return (n / part()) * per_segment() + (n % part()) / block;
  }
  std::size_t begin(std::size_t j) const {
    return (j / per_segment()) * part() + (j % per_segment()) * block;
  }
  std::size_t end(std::size_t j) const {
    return std::min(begin(j) + block, (j / per_segment() + 1) * part());
  }
};

// Which block (physical block row, block column) an element belongs to, and
// where its scale is stored.
struct BlockMap {
  Partition outer, inner;
  Layout scales;

  BlockMap(const TensorStore& store, const Tensor& data, const Tensor& scale)
      : scales(scale, store.plan().ranks) {
    const BlockShape shape = block_shape(data.scaling);
    const Layout L(data, store.plan().ranks);
    outer = {L.outer, shape.outer, data.block_segments[static_cast<std::size_t>(data.outer_dim())]};
    inner = {L.inner, shape.inner, data.block_segments[static_cast<std::size_t>(data.inner_dim())]};
    if (outer.count() != scales.outer || inner.count() != scales.inner)
      throw std::logic_error("cpu executor: " + scale.name +
                             " does not hold one scale per block of " + data.name);
  }
  std::size_t index(std::size_t o, std::size_t n) const {
    return scales.index(outer.index(o), inner.index(n));
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

QuantizeStats quantize_to(TensorStore& store, int id, std::span<const float> logical, float scale,
                          bool pow2) {
  const Tensor& t = store.tensor(id);
  const ElemType fmt = require_fp8(t.type, "cpu executor: " + t.name);
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
  const BlockMap blocks(store, t, st);
  auto sbytes = store.bytes(st.id);
  for (std::size_t bo = 0; bo < blocks.outer.count(); ++bo) {
    for (std::size_t bn = 0; bn < blocks.inner.count(); ++bn) {
      const std::size_t o0 = blocks.outer.begin(bo), o1 = blocks.outer.end(bo);
      const std::size_t n0 = blocks.inner.begin(bn), n1 = blocks.inner.end(bn);
      float amax = 0.0f;
      for (std::size_t o = o0; o < o1; ++o)
        for (std::size_t n = n0; n < n1; ++n)
          amax = numerics::amax_combine(amax, numerics::magnitude(logical_at(o, n)));
      float s = 1.0f;
      const std::size_t si = blocks.scales.index(bo, bn);
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
      for (std::size_t o = o0; o < o1; ++o)
        for (std::size_t n = n0; n < n1; ++n) put(o, n, logical_at(o, n), s);
    }
  }
  store.mark_written(id);
  store.mark_written(st.id);
  return stats;
}

std::vector<float> decode(const TensorStore& store, int id, bool apply_tensor_scale) {
  const Tensor& t = store.tensor(id);
  const ElemType fmt = require_fp8(t.type, "cpu executor: " + t.name);
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

void transpose_bytes(std::span<const std::uint8_t> in, std::size_t rows, std::size_t cols,
                     std::span<std::uint8_t> out) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
}

void transpose_fp8(TensorStore& store, int from, int to) {
  const Tensor& f = store.tensor(from);
  transpose_bytes(store.bytes(from), f.dims[0].local, f.dims[1].local, store.bytes(to));
  store.mark_written(to);
}

}  // namespace fp8c::cpu
