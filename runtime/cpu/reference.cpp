#include "runtime/cpu/reference.hpp"

#include "runtime/cpu/activation.hpp"

namespace fp8c::cpu {

ReferenceResult reference_layer_step(const Layer& layer, std::uint64_t tokens, const LayerData& d) {
  const std::size_t T = tokens, I = layer.in, O = layer.out;
  ReferenceResult r;
  std::vector<double> z(T * O, 0.0), dz(T * O);
  // z[t][o] = sum_i x[t][i] w[o][i] + b[o]
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t o = 0; o < O; ++o) {
      double s = d.b.empty() ? 0.0 : d.b[o];
      const float* xr = d.x.data() + t * I;
      const float* wr = d.w.data() + o * I;
      for (std::size_t i = 0; i < I; ++i) s += double(xr[i]) * double(wr[i]);
      z[t * O + o] = s;
    }
  r.y.resize(T * O);
  for (std::size_t i = 0; i < T * O; ++i) {
    r.y[i] = activate(layer.activation, z[i]);
    dz[i] = double(d.dy[i]) * activation_grad(layer.activation, z[i]);
  }
  r.dx.assign(T * I, 0.0);
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t o = 0; o < O; ++o) {
      const double g = dz[t * O + o];
      double* dxr = r.dx.data() + t * I;
      const float* wr = d.w.data() + o * I;
      for (std::size_t i = 0; i < I; ++i) dxr[i] += g * double(wr[i]);
    }
  r.dw.assign(O * I, 0.0);
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t o = 0; o < O; ++o) {
      const double g = dz[t * O + o];
      double* dwr = r.dw.data() + o * I;
      const float* xr = d.x.data() + t * I;
      for (std::size_t i = 0; i < I; ++i) dwr[i] += g * double(xr[i]);
    }
  if (layer.bias) {
    r.db.assign(O, 0.0);
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t o = 0; o < O; ++o) r.db[o] += dz[t * O + o];
  }
  return r;
}

}  // namespace fp8c::cpu
