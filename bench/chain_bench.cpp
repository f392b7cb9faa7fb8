// GPU benchmark of a two-layer MLP step through fp8c::Session (a benchmark,
// not a test): fc1 (hidden -> ffn, bias, GELU) into fc2 (ffn -> hidden,
// bias), forward and backward of both, scale updates included. What it
// measures is the hand-over between the layers:
//
//   delayed_fp8   output = fp8: fc1's GEMM epilogue writes e4m3 with fc2's
//                 delayed input scale; fc2 reads those bytes (no quantize of
//                 its input in forward, half the bytes written and read);
//   delayed_bf16  fc1 writes bf16, fc2 quantizes it;
//   current_bf16  current scaling asks for output = fp8 too, but the plan
//                 writes bf16 (fc2's scale comes from its input's own amax,
//                 not known before fc1's GEMM runs: `fp8c check` says so),
//                 and fc2 quantizes it after an amax pass.
//
//   build/bench/chain_bench [--tokens M] [--hidden H] [--ffn F] [--iters N]
//                           [--gemm auto|cublaslt|generated] [--json FILE] [--commit SHA]
//
// --gemm sets both layers' `gemm =` (default: the spec's default, auto).
// Under delayed_fp8 fc1's GEMM also writes fc2's columnwise input: D^T on
// the generated GEMM, a transpose after cuBLASLt's.
//
// Per case: the median step time over N steps (after 3 warm-up steps), two
// sets of inputs used in turn so that no step finds the last one's in L2.
// Correctness of the same path against the CPU chain is
// tests/gpu/session_gpu_test.cpp's (Session.Fp8ChainMatchesTheCpuChain).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fp8c/session.hpp"
#include "runtime/device.hpp"

using namespace fp8c;

namespace {

struct Case {
  std::string name, recipe;
  bool fp8_output;
};

std::string mlp_spec(const Case& c, std::uint64_t hidden, std::uint64_t ffn,
                     const std::string& gemm) {
  const std::string backend = gemm.empty() ? "" : "  gemm = " + gemm;
  return "recipe r = " + c.recipe + (c.recipe == "delayed" ? " { history = 16 }" : " { }") +
         "\nlayer fc1 = linear { in = " + std::to_string(hidden) +
         "  out = " + std::to_string(ffn) + "  bias = true  activation = gelu" +
         (c.fp8_output ? "  output = fp8" : "") + "  recipe = r" + backend +
         " }\nlayer fc2 = linear { input = fc1  out = " + std::to_string(hidden) +
         "  bias = true  recipe = r" + backend + " }\n";
}

DeviceTensor random_tensor(DType t, std::int64_t rows, std::int64_t cols, float range,
                           unsigned seed) {
  DeviceTensor d(t, rows, cols);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-range, range);
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (float& x : v) x = u(rng);
  d.upload(v);
  return d;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t tokens = 8192, hidden = 4096, ffn = 16384;
  int iters = 20;
  std::string json_path, commit = "unknown", gemm;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool value = i + 1 < argc;
    if (a == "--tokens" && value)
      tokens = std::stoull(argv[++i]);
    else if (a == "--hidden" && value)
      hidden = std::stoull(argv[++i]);
    else if (a == "--ffn" && value)
      ffn = std::stoull(argv[++i]);
    else if (a == "--iters" && value)
      iters = std::max(1, std::atoi(argv[++i]));
    else if (a == "--json" && value)
      json_path = argv[++i];
    else if (a == "--commit" && value)
      commit = argv[++i];
    else if (a == "--gemm" && value &&
             (std::string(argv[i + 1]) == "auto" || std::string(argv[i + 1]) == "cublaslt" ||
              std::string(argv[i + 1]) == "generated"))
      gemm = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: chain_bench [--tokens M] [--hidden H] [--ffn F] [--iters N] "
                   "[--gemm auto|cublaslt|generated] [--json FILE] [--commit SHA]\n");
      return 2;
    }
  }
  try {
    const auto T = static_cast<std::int64_t>(tokens), H = static_cast<std::int64_t>(hidden),
               F = static_cast<std::int64_t>(ffn);
    // 3 GEMMs per layer, 2 layers, 2 * T * H * F each.
    const double flops = 6.0 * 2.0 * double(T) * double(H) * double(F);
    std::ostringstream cases;
    std::string device_name;
    double fp8_ms = 0, bf16_ms = 0;
    const std::vector<Case> all = {{"delayed_fp8", "delayed", true},
                                   {"delayed_bf16", "delayed", false},
                                   {"current_bf16", "current", true}};
    for (const Case& c : all) {
      const auto path = std::filesystem::temp_directory_path() / ("fp8c_chain_" + c.name + ".fp8");
      std::ofstream(path) << mlp_spec(c, hidden, ffn, gemm);
      SessionOptions o;
      o.tokens = tokens;
      Session s(path.string(), o);
      if (device_name.empty()) device_name = runtime::Device(o.device).name();
      const DType hand = s.dtype("fc1", "y");
      runtime::Stream stream;
      std::vector<DeviceTensor> x, dy;
      for (unsigned k = 0; k < 2; ++k) {
        x.push_back(random_tensor(DType::bf16, T, H, 1.0f, 11 + k));
        dy.push_back(random_tensor(DType::bf16, T, H, 1e-3f, 21 + k));
      }
      DeviceTensor w1 = random_tensor(DType::bf16, F, H, 0.02f, 1),
                   b1 = random_tensor(DType::bf16, F, 1, 0.02f, 2),
                   w2 = random_tensor(DType::bf16, H, F, 0.02f, 3),
                   b2 = random_tensor(DType::bf16, H, 1, 0.02f, 4);
      // fc2's dx: fc1's FP8 dz where fc2's dgrad hands it over.
      DeviceTensor h(hand, T, F), y(DType::bf16, T, H), dh(s.dtype("fc2", "dx"), T, F),
          dx(DType::bf16, T, H), dw1(DType::fp32, F, H), db1(DType::bf16, F, 1),
          dw2(DType::fp32, H, F), db2(DType::bf16, H, 1);
      const auto step = [&](int i) {
        const auto k = static_cast<std::size_t>(i % 2);
        s.forward("fc1", {x[k], w1, b1}, h, stream.get());
        s.forward("fc2", {h, w2, b2}, y, stream.get());
        s.backward("fc2", dy[k], {dh, dw2, db2}, stream.get());
        s.backward("fc1", dh, {dx, dw1, db1}, stream.get());
      };
      for (int i = 0; i < 3; ++i) step(i);
      s.synchronize();
      std::vector<double> ms;
      runtime::Event start, stop;
      for (int i = 0; i < iters; ++i) {
        start.record(stream.get());
        step(i);
        stop.record(stream.get());
        stop.synchronize();
        ms.push_back(stop.since(start));
      }
      s.synchronize();
      const double m = median(ms);
      if (c.name == "delayed_fp8") fp8_ms = m;
      if (c.name == "delayed_bf16") bf16_ms = m;
      std::printf("%-13s hand-over %-4s  step %.3f ms  %.0f TFLOP/s\n", c.name.c_str(),
                  std::string(to_string(hand)).c_str(), m, flops / (m * 1e-3) / 1e12);
      cases << (cases.tellp() > 0 ? ",\n" : "") << "  {\"name\": \"" << c.name
            << "\", \"recipe\": \"" << c.recipe << "\", \"hand_over\": \"" << to_string(hand)
            << "\", \"tokens\": " << T << ", \"hidden\": " << H << ", \"ffn\": " << F
            << ", \"step_ms\": " << m << ", \"tflops\": " << flops / (m * 1e-3) / 1e12 << "}";
    }
    std::printf("FP8 hand-over / bf16 hand-over (delayed): %.3f of the step time\n",
                fp8_ms / bf16_ms);
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
    std::ostringstream json;
    json << "{\"benchmark\": \"chain\", \"commit\": \"" << commit << "\", \"gpu\": \""
         << device_name << "\", \"date\": \"" << date << "\", \"iters\": " << iters
         << ", \"gemm\": \"" << (gemm.empty() ? "auto" : gemm) << "\", \"cases\": [\n"
         << cases.str() << "\n], \"fp8_over_bf16_step_time\": " << fp8_ms / bf16_ms << "}\n";
    if (!json_path.empty()) std::ofstream(json_path) << json.str();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chain_bench: %s\n", e.what());
    return 1;
  }
}
