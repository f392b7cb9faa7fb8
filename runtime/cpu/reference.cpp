#include "runtime/cpu/reference.hpp"

#include <algorithm>

#include "runtime/cpu/activation.hpp"
#include "runtime/cpu/parallel_for.hpp"

namespace fp8c::cpu {
namespace {

// Rows per thread so that each thread gets at least about 4M multiply-adds
// (a row costing `row_work`): small layers run on the calling thread.
std::size_t rows_per_chunk(std::size_t row_work) {
  return std::max<std::size_t>(1, (std::size_t{1} << 22) / std::max<std::size_t>(1, row_work));
}

// z = x w^T + b, y = act(z); x: [T][I] (float64), w: [O][I].
void forward(const Layer& layer, std::size_t T, const std::vector<double>& x,
             const std::vector<float>& w, const std::vector<float>& b, std::vector<double>& z,
             std::vector<double>& y) {
  const std::size_t I = layer.in, O = layer.out;
  z.assign(T * O, 0.0);
  y.resize(T * O);
  // Threads take disjoint output columns; each element is one ordered sum.
  parallel_for(O, rows_per_chunk(T * I), [&](std::size_t o0, std::size_t o1) {
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t o = o0; o < o1; ++o) {
        double s = b.empty() ? 0.0 : b[o];
        const double* xr = x.data() + t * I;
        const float* wr = w.data() + o * I;
        for (std::size_t i = 0; i < I; ++i) s += xr[i] * double(wr[i]);
        z[t * O + o] = s;
        y[t * O + o] = activate(layer.activation, s);
      }
  });
}

// dz = dy * act'(z); dx = dz w; dw = dz^T x; db = sum_t dz.
void backward(const Layer& layer, std::size_t T, const std::vector<double>& x,
              const std::vector<float>& w, const std::vector<double>& z,
              const std::vector<double>& dy, ReferenceResult& r) {
  const std::size_t I = layer.in, O = layer.out;
  std::vector<double> dz(T * O);
  for (std::size_t i = 0; i < T * O; ++i) dz[i] = dy[i] * activation_grad(layer.activation, z[i]);
  r.dx.assign(T * I, 0.0);
  r.dw.assign(O * I, 0.0);
  // dx by rows of tokens, dw by rows of outputs: each element is summed by
  // one thread, over o (dx) or t (dw) in increasing order.
  parallel_for(T, rows_per_chunk(O * I), [&](std::size_t t0, std::size_t t1) {
    for (std::size_t t = t0; t < t1; ++t)
      for (std::size_t o = 0; o < O; ++o) {
        const double g = dz[t * O + o];
        double* dxr = r.dx.data() + t * I;
        const float* wr = w.data() + o * I;
        for (std::size_t i = 0; i < I; ++i) dxr[i] += g * double(wr[i]);
      }
  });
  parallel_for(O, rows_per_chunk(T * I), [&](std::size_t o0, std::size_t o1) {
    for (std::size_t o = o0; o < o1; ++o)
      for (std::size_t t = 0; t < T; ++t) {
        const double g = dz[t * O + o];
        double* dwr = r.dw.data() + o * I;
        const double* xr = x.data() + t * I;
        for (std::size_t i = 0; i < I; ++i) dwr[i] += g * xr[i];
      }
  });
  r.db.clear();
  if (layer.bias) {
    r.db.assign(O, 0.0);
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t o = 0; o < O; ++o) r.db[o] += dz[t * O + o];
  }
}

std::vector<double> widen(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

}  // namespace

ReferenceResult reference_layer_step(const Layer& layer, std::uint64_t tokens, const LayerData& d,
                                     const std::vector<float>* z) {
  ReferenceResult r;
  const std::vector<double> x = widen(d.x);
  forward(layer, tokens, x, d.w, d.b, r.z, r.y);
  backward(layer, tokens, x, d.w, z ? widen(*z) : r.z, widen(d.dy), r);
  return r;
}

}  // namespace fp8c::cpu
