// A small host program on fp8c's public API: loads examples/gpt_mlp.fp8,
// runs its two layers (fc1 -> fc2) forward and backward on random data for a
// few steps, and prints what it did. On one GPU the spec's tensor_parallel
// is planned as 1.
//
//   gpt_mlp_step [SPEC] [--tokens M] [--steps N]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "fp8c/session.hpp"

namespace {

std::vector<float> random_values(std::size_t n, std::uint64_t seed, float range) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-range, range);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return v.empty() ? 0.0 : std::sqrt(s / double(v.size()));
}

fp8c::DeviceTensor tensor(fp8c::DType t, const std::vector<std::int64_t>& shape) {
  return fp8c::DeviceTensor(t, shape[0], shape[1]);
}

}  // namespace

int main(int argc, char** argv) {
  std::string spec = "examples/gpt_mlp.fp8";
  std::uint64_t tokens = 2048;
  int steps = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokens" && i + 1 < argc)
      tokens = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--steps" && i + 1 < argc)
      steps = std::atoi(argv[++i]);
    else if (a == "--help") {
      std::printf("usage: gpt_mlp_step [SPEC] [--tokens M] [--steps N]\n");
      return 0;
    } else
      spec = a;
  }
  try {
    const auto t0 = std::chrono::steady_clock::now();
    fp8c::SessionOptions options;
    options.tokens = tokens;
    fp8c::Session s(spec, options);
    const double start_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    int hits = 0;
    for (const auto& k : s.kernels()) hits += k.cache_hit;
    std::printf("loaded %s: %zu layers, %zu kernels (%d from the cache) in %.1f ms\n", spec.c_str(),
                s.layers().size(), s.kernels().size(), hits, start_ms);

    const auto names = s.layers();
    if (names.size() != 2) {
      std::fprintf(stderr, "gpt_mlp_step: expected a two-layer MLP spec\n");
      return 2;
    }
    const std::string fc1 = names[0], fc2 = names[1];
    using fp8c::DType;
    auto x = tensor(DType::bf16, s.shape(fc1, "x"));
    auto w1 = tensor(DType::bf16, s.shape(fc1, "w"));
    auto b1 = tensor(DType::bf16, s.shape(fc1, "b"));
    // fc1's output, fc2's input, and fc2's input gradient, fc1's output
    // gradient: FP8 where the spec chains them (output = fp8 into a delayed
    // fc2), so their types come from the session.
    auto h = tensor(s.dtype(fc1, "y"), s.shape(fc1, "y"));
    auto w2 = tensor(DType::bf16, s.shape(fc2, "w"));
    auto b2 = tensor(DType::bf16, s.shape(fc2, "b"));
    auto y = tensor(DType::bf16, s.shape(fc2, "y"));
    auto dy = tensor(DType::bf16, s.shape(fc2, "dy"));
    auto dh = tensor(s.dtype(fc2, "dx"), s.shape(fc2, "dx"));
    auto dx = tensor(DType::bf16, s.shape(fc1, "dx"));
    auto dw1 = tensor(DType::fp32, s.shape(fc1, "dw"));
    auto dw2 = tensor(DType::fp32, s.shape(fc2, "dw"));
    auto db1 = tensor(DType::bf16, s.shape(fc1, "b"));
    auto db2 = tensor(DType::bf16, s.shape(fc2, "b"));
    const auto size = [](const fp8c::DeviceTensor& t) {
      return static_cast<std::size_t>(t.ref().rows * t.ref().cols);
    };
    w1.upload(random_values(size(w1), 1, 0.02f));
    b1.upload(random_values(size(b1), 2, 0.02f));
    w2.upload(random_values(size(w2), 3, 0.02f));
    b2.upload(random_values(size(b2), 4, 0.02f));

    for (int step = 0; step < steps; ++step) {
      x.upload(random_values(size(x), 100 + step, 1.0f));
      dy.upload(random_values(size(dy), 200 + step, 1e-3f));
      const auto t = std::chrono::steady_clock::now();
      s.forward(fc1, {x, w1, b1}, h);
      s.forward(fc2, {h, w2, b2}, y);
      s.backward(fc2, dy, {dh, dw2, db2});
      s.backward(fc1, dh, {dx, dw1, db1});
      s.synchronize();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
      std::printf("step %d: %.2f ms  rms y %.4g  dx %.4g  dw1 %.4g  dw2 %.4g  db1 %.4g\n", step, ms,
                  rms(y.download()), rms(dx.download()), rms(dw1.download()), rms(dw2.download()),
                  rms(db1.download()));
    }
    const std::string state = "gpt_mlp_step.state";
    s.save_state(state);
    std::printf("FP8 state saved to %s\n", state.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_mlp_step: %s\n", e.what());
    return 1;
  }
}
