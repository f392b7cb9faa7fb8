// GPU benchmark of the generated quantize kernels (a benchmark, not a test).
// Follows the device METHOD: bytes counted first, output checked against the
// CPU reference before timing, warm-up, median of many runs timed with CUDA
// events, three input buffers rotated so no run reads from L2.
//
//   build/bench/quantize_bench [--rows R] [--cols C] [--iters N] [--json FILE] [--only CASE]
//                              [--backend nvrtc|llvm]
//
// Cases (bf16 input, the shapes by default 16384 x 8192):
//   delayed_cast_transpose_amax     rowwise + columnwise E4M3 + amax
//   dbias                           ... + column sums (E5M2 gradient)
//   dgelu_dbias                     ... + dGELU from the saved pre-activation
//   current_cast_transpose          amax pass, then cast with the scale from it
//   blockwise_1x128_row_col, blockwise_128x128_row_col, mxfp8_1x32_row_col
//                                   block-scaled E4M3, rowwise + columnwise
//   fp8_transpose, fp8_permute_8_ranks  byte movers on rows x cols bytes
//   dequantize_e4m3_to_bf16(_t)     FP8 codes (the inputs' first rows x cols bytes) to bf16,
//                                   rowwise or transposed (columnwise data), per-tensor scale
//   epilogue_bias_gelu_store_pre    y = GELU(x + bias) and z = x + bias, bf16 (forward)
//   epilogue_dgelu_dbias            v = dy * GELU'(z) and the dbias partials (backward)
// --backend llvm builds every kernel kind built as kernel IR through the LLVM
// backend instead of NVRTC (the JSON says which); bench/gpu.sh runs both and
// bench/merge_backend_results.py sets them side by side.
// Effective bandwidth counts 2 bytes read and 2 written per element (the
// issue's convention); `actual_bytes` also counts the pre-activation read and
// current scaling's second read.

#include <algorithm>
#include <bit>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <vector>

#include "codegen/backends/llvm/llvm_backend.hpp"
#include "codegen/numerics/half.hpp"
#include "runtime/block_quantize_launcher.hpp"
#include "runtime/dequantize_launcher.hpp"
#include "runtime/epilogue_launcher.hpp"
#include "runtime/kernel_launchers.hpp"
#include "runtime/quantize_launcher.hpp"
#include "runtime/reference/activation_bound.hpp"
#include "runtime/reference/block_quantize_reference.hpp"
#include "runtime/reference/dequantize_reference.hpp"
#include "runtime/reference/epilogue_reference.hpp"
#include "runtime/reference/fp8_compare.hpp"
#include "runtime/reference/permute_reference.hpp"
#include "runtime/reference/quantize_reference.hpp"
#include "runtime/reference/transpose_reference.hpp"

using namespace fp8c;
using namespace fp8c::runtime;

namespace {

struct Result {
  std::string name;
  double median_us = 0;
  double min_us = 0;
  double effective_tbps = 0;
  double actual_tbps = 0;
  bool verified = false;
};

std::vector<std::uint16_t> random_bf16(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::uint16_t> v(n);
  for (auto& e : v) e = numerics::float_to_bf16(normal(rng));
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rows = 16384, cols = 8192, iters = 100;
  std::string json, only;
  KernelBackend backend = KernelBackend::nvrtc;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rows" && i + 1 < argc)
      rows = std::atoi(argv[++i]);
    else if (a == "--cols" && i + 1 < argc)
      cols = std::atoi(argv[++i]);
    else if (a == "--iters" && i + 1 < argc)
      iters = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc)
      json = argv[++i];
    else if (a == "--only" && i + 1 < argc)
      only = argv[++i];
    else if (a == "--backend" && i + 1 < argc &&
             (std::string(argv[i + 1]) == "nvrtc" || std::string(argv[i + 1]) == "llvm"))
      backend = std::string(argv[++i]) == "llvm" ? KernelBackend::llvm : KernelBackend::nvrtc;
    else {
      std::cerr << "usage: quantize_bench [--rows R] [--cols C] [--iters N] [--json FILE] "
                   "[--only CASE] [--backend nvrtc|llvm]\n";
      return 2;
    }
  }
  try {
    Device device(0);
    if (backend == KernelBackend::llvm && !llvm_backend::available()) {
      std::cerr << "quantize_bench: no LLVM backend: " << llvm_backend::unavailable_reason()
                << "\n";
      return 1;
    }
    const auto cache_dir = std::filesystem::temp_directory_path() / "fp8c-bench-cache" /
                           (backend == KernelBackend::llvm ? "llvm" : "nvrtc");
    const Jit jit(device.arch(), CubinCache(cache_dir.string()), backend);
    const std::size_t n = static_cast<std::size_t>(rows) * cols;
    const int tiles = QuantizeLauncher::tiles(rows);

    constexpr int kBuffers = 3;  // 3 x 256 MiB of input: far past the 50 MB L2
    std::vector<DeviceBuffer> xs, pres;
    std::vector<std::vector<std::uint16_t>> host_x;
    for (int b = 0; b < kBuffers; ++b) {
      host_x.push_back(random_bf16(n, 11 + b));
      xs.emplace_back(n * 2);
      xs.back().upload(host_x.back().data(), n * 2);
      const auto pre = random_bf16(n, 101 + b);
      pres.emplace_back(n * 2);
      pres.back().upload(pre.data(), n * 2);
    }
    DeviceBuffer row(n), col(n), amax(4), partial(static_cast<std::size_t>(tiles) * cols * 4),
        dbias(static_cast<std::size_t>(cols) * 4), scale(4), amax_in(4), scale_out(4);
    const float scale_value = 2.0f;
    scale.upload(&scale_value, 4);
    const DbiasReduceLauncher dbias_reduce(jit);
    Stream stream;

    std::vector<Result> results;
    // Warm-up, then `iters` runs timed with events, each preceded (outside
    // the timed region) by `prepare`; inputs rotate over the buffers.
    const auto time_runs = [&](Result& r, const auto& prepare, const auto& run,
                               double actual_bytes_per_element) {
      for (int w = 0; w < 10; ++w) run(w % kBuffers);
      std::vector<double> us;
      Event start, stop;
      for (int i = 0; i < iters; ++i) {
        prepare(i);
        start.record(stream.get());
        run(i % kBuffers);
        stop.record(stream.get());
        stop.synchronize();
        us.push_back(1000.0 * stop.since(start));
      }
      r.median_us = median(us);
      r.min_us = *std::min_element(us.begin(), us.end());
      r.effective_tbps = 4.0 * n / (r.median_us * 1e-6) / 1e12;
      r.actual_tbps = actual_bytes_per_element * n / (r.median_us * 1e-6) / 1e12;
    };
    const auto time_case = [&](const std::string& name, const std::vector<QuantizeKernel>& kernels,
                               double actual_bytes_per_element) {
      if (!only.empty() && name != only) return;
      std::vector<std::unique_ptr<QuantizeLauncher>> launchers;
      for (const auto& k : kernels) launchers.push_back(std::make_unique<QuantizeLauncher>(jit, k));
      const auto run = [&](int b) {
        QuantizeArgs a;
        a.x = xs[b].get();
        a.pre_activation = pres[b].get();
        a.scale = scale.get();
        a.amax_in = amax_in.get();
        a.rowwise = row.get();
        a.columnwise = col.get();
        a.amax_out = amax.get();
        a.dbias_partial = partial.get();
        a.scale_out = scale_out.get();
        a.rows = rows;
        a.cols = cols;
        for (const auto& l : launchers) {
          if (l->kernel().amax && !l->kernel().rowwise && !l->kernel().columnwise)
            a.amax_out = amax_in.get();  // the amax pass feeds the cast
          l->launch(a, stream.get());
          a.amax_out = amax.get();
        }
        if (kernels.front().dbias)
          dbias_reduce.launch(dbias.get(), partial.get(), tiles, cols, stream.get());
      };
      // Check the first buffer's rowwise output against the CPU reference.
      amax.fill(0, stream.get());
      amax_in.fill(0, stream.get());
      run(0);
      stream.synchronize();
      Result r;
      r.name = name;
      {
        const QuantizeKernel& last = kernels.back();
        float amax_value = 0;
        amax_in.download(&amax_value, 4);
        const std::int64_t check_rows = std::min(rows, 256);
        std::vector<std::uint16_t> pre0(static_cast<std::size_t>(check_rows) * cols);
        pres[0].download(pre0.data(), pre0.size() * 2);
        const QuantizeResult want = reference_quantize(last, host_x[0].data(), pre0.data(),
                                                       scale_value, amax_value, check_rows, cols);
        std::vector<std::uint8_t> got(static_cast<std::size_t>(check_rows) * cols);
        row.download(got.data(), got.size());
        // Bit for bit, or within fp8_compare's bound for the dact kernels.
        r.verified = true;
        for (std::size_t i = 0; i < got.size(); ++i) {
          const float grad = numerics::bf16_to_float(host_x[0][i]);
          if (last.dact == Activation::none
                  ? got[i] != want.rowwise[i]
                  : !fp8_close_for_dact(got[i], want.rowwise[i], grad, want.scale, last.format))
            r.verified = false;
        }
        if (!r.verified) std::cerr << name << ": rowwise output differs from the CPU reference\n";
      }
      time_runs(
          r,
          [&](int i) {
            amax.fill(0, stream.get());
            amax_in.fill(0, stream.get());
            return i;
          },
          run, actual_bytes_per_element);
      results.push_back(r);
    };

    QuantizeKernel delayed;
    delayed.rowwise = delayed.columnwise = delayed.amax = true;
    time_case("delayed_cast_transpose_amax", {delayed}, 4);
    QuantizeKernel delayed_wide = delayed;
    delayed_wide.wide_column_stores = true;
    time_case("delayed_cast_transpose_amax_wide_column_stores", {delayed_wide}, 4);
    QuantizeKernel with_dbias = delayed;
    with_dbias.format = ElemType::e5m2;
    with_dbias.dbias = true;
    time_case("cast_transpose_dbias", {with_dbias}, 4);
    QuantizeKernel with_dgelu = with_dbias;
    with_dgelu.dact = Activation::gelu;
    time_case("cast_transpose_dgelu_dbias", {with_dgelu}, 6);
    QuantizeKernel amax_pass;
    amax_pass.rowwise = false;
    amax_pass.amax = true;
    QuantizeKernel current;
    current.rowwise = current.columnwise = true;
    current.scale_from_amax = true;
    time_case("current_amax_then_cast_transpose", {amax_pass, current}, 6);
    QuantizeKernel rowwise_only;
    rowwise_only.amax = true;
    time_case("delayed_cast_rowwise_amax", {rowwise_only}, 3);

    // Block-scaled quantization (rowwise + columnwise from high precision,
    // each with its own scales): verified against the CPU reference on the
    // first 256 rows, then timed like the cases above.
    const auto time_block_case = [&](const std::string& name, const BlockQuantizeKernel& k) {
      if (!only.empty() && name != only) return;
      const BlockQuantizeLauncher launcher(jit, k);
      DeviceBuffer row_scales(block_scale_bytes(k, rows, cols, false)),
          col_scales(block_scale_bytes(k, rows, cols, true));
      const auto run = [&](int b) {
        BlockQuantizeArgs a;
        a.x = xs[b].get();
        a.rowwise = row.get();
        a.rowwise_scales = row_scales.get();
        a.columnwise = col.get();
        a.columnwise_scales = col_scales.get();
        a.rows = rows;
        a.cols = cols;
        launcher.launch(a, stream.get());
      };
      Result r;
      r.name = name;
      {
        const int check_rows = std::min(rows, 256);
        DeviceBuffer small_row(static_cast<std::size_t>(check_rows) * cols),
            small_scales(block_scale_bytes(k, check_rows, cols, false)),
            small_col(static_cast<std::size_t>(check_rows) * cols),
            small_col_scales(block_scale_bytes(k, check_rows, cols, true));
        BlockQuantizeArgs a;
        a.x = xs[0].get();  // its first check_rows rows
        a.rowwise = small_row.get();
        a.rowwise_scales = small_scales.get();
        a.columnwise = small_col.get();
        a.columnwise_scales = small_col_scales.get();
        a.rows = check_rows;
        a.cols = cols;
        launcher.launch(a, stream.get());
        stream.synchronize();
        const BlockQuantizeResult want =
            reference_block_quantize(k, host_x[0].data(), check_rows, cols);
        std::vector<std::uint8_t> got(want.rowwise.size()), got_col(want.columnwise.size());
        small_row.download(got.data(), got.size());
        small_col.download(got_col.data(), got_col.size());
        r.verified = got == want.rowwise && got_col == want.columnwise;
        if (!r.verified) std::cerr << name << ": output differs from the CPU reference\n";
      }
      time_runs(
          r, [](int i) { return i; }, run, 4.0);  // scales add under 1%
      results.push_back(r);
    };
    BlockQuantizeKernel block_1x128;
    block_1x128.columnwise = true;
    time_block_case("blockwise_1x128_row_col", block_1x128);
    BlockQuantizeKernel block_128x128 = block_1x128;
    block_128x128.scaling = Scaling::block_128x128;
    time_block_case("blockwise_128x128_row_col", block_128x128);
    BlockQuantizeKernel mx = block_1x128;
    mx.scaling = Scaling::mx_1x32;
    time_block_case("mxfp8_1x32_row_col", mx);

    // The dequantize (the debug fallback GEMM's operands) and the standalone
    // epilogue (an activation a GEMM's epilogue could not take): checked on
    // their first 256 rows against the CPU reference (GELU within
    // activation_bound.hpp's bound), then timed like the casts above. Each
    // writes an output buffer of its own, reused across runs.
    const int check_rows = std::min(rows, 256);
    const std::size_t check_n = static_cast<std::size_t>(check_rows) * cols;
    for (bool transpose : {false, true}) {
      const std::string name = std::string("dequantize_e4m3_to_bf16") + (transpose ? "_t" : "");
      if (!only.empty() && name != only) continue;
      DequantizeKernel k;
      k.transpose = transpose;
      const DequantizeLauncher launcher(jit, k);
      DeviceBuffer out(n * 2);
      const auto run_rows = [&](int b, int outer, CUdeviceptr to) {
        DequantizeArgs a;
        a.data = xs[b].get();  // its bytes as FP8 codes
        a.tensor_scale = scale.get();
        a.out = to;
        a.outer = outer;
        a.inner = cols;
        launcher.launch(a, stream.get());
      };
      Result r;
      r.name = name;
      {
        DeviceBuffer small(check_n * 2);
        run_rows(0, check_rows, small.get());
        stream.synchronize();
        const auto* codes = reinterpret_cast<const std::uint8_t*>(host_x[0].data());
        const DequantizeResult want = reference_dequantize(
            k, codes, nullptr, scale_value, DequantizeLayout{check_rows, cols, 1, false});
        std::vector<std::uint8_t> got(want.out.size());
        small.download(got.data(), got.size());
        r.verified = got == want.out;
        if (!r.verified) std::cerr << name << ": output differs from the CPU reference\n";
      }
      time_runs(
          r, [](int i) { return i; }, [&](int b) { run_rows(b, rows, out.get()); }, 3.0);
      results.push_back(r);
    }
    const auto time_epilogue_case = [&](const std::string& name, const EpilogueKernel& k,
                                        double actual_bytes_per_element) {
      if (!only.empty() && name != only) return;
      const EpilogueLauncher launcher(jit, k);
      DeviceBuffer out(n * 2), pre_out(n * 2), bias(static_cast<std::size_t>(cols) * 2),
          partials(static_cast<std::size_t>(EpilogueLauncher::dbias_tiles(rows)) * cols * 4);
      std::vector<std::uint16_t> host_bias(host_x[1].begin(), host_x[1].begin() + cols);
      bias.upload(host_bias.data(), host_bias.size() * 2);
      const auto args = [&](int b, int r, CUdeviceptr y, CUdeviceptr z, CUdeviceptr p) {
        EpilogueArgs a;
        a.x = xs[b].get();
        a.bias = bias.get();
        a.pre_activation = pres[b].get();
        a.out = y;
        a.pre_activation_out = z;
        a.dbias_partial = p;
        a.rows = r;
        a.cols = cols;
        return a;
      };
      Result r;
      r.name = name;
      {
        DeviceBuffer y(check_n * 2), z(check_n * 2),
            p(static_cast<std::size_t>(EpilogueLauncher::dbias_tiles(check_rows)) * cols * 4);
        launcher.launch(args(0, check_rows, y.get(), z.get(), p.get()), stream.get());
        stream.synchronize();
        std::vector<std::uint16_t> pre0(check_n);
        pres[0].download(pre0.data(), pre0.size() * 2);
        std::vector<std::uint16_t> got(check_n);
        y.download(got.data(), got.size() * 2);
        r.verified = true;
        for (std::size_t i = 0; i < check_n && r.verified; ++i) {
          float z_value = 0;
          const float want =
              reference_epilogue_value(k, host_x[0].data(), host_bias.data(), pre0.data(),
                                       static_cast<std::int64_t>(i), cols, &z_value);
          const double dy = numerics::bf16_to_float(host_x[0][i]);
          const double bound = k.backward
                                   ? backward_value_error_bound(k.activation, dy, z_value, want)
                                   : activation_error_bound(k.activation, z_value);
          r.verified = close_after_rounding(numerics::bf16_to_float(got[i]),
                                            numerics::bf16_to_float(numerics::float_to_bf16(want)),
                                            bound, ElemType::bf16);
        }
        if (!r.verified) std::cerr << name << ": output differs from the CPU reference\n";
      }
      time_runs(
          r, [](int i) { return i; },
          [&](int b) {
            launcher.launch(args(b, rows, out.get(), pre_out.get(), partials.get()), stream.get());
          },
          actual_bytes_per_element);
      results.push_back(r);
    };
    EpilogueKernel forward;
    forward.bias = forward.store_pre = true;
    forward.activation = Activation::gelu;
    time_epilogue_case("epilogue_bias_gelu_store_pre", forward, 6.0);
    EpilogueKernel backward;
    backward.backward = backward.dbias = true;
    backward.activation = Activation::gelu;
    time_epilogue_case("epilogue_dgelu_dbias", backward, 6.0);

    // Byte movers on FP8-sized data (the first rows * cols bytes of each
    // input): 1 byte read and 1 written per element, so actual_TB/s is the
    // number to hold against a device copy; eff_TB/s keeps the bf16
    // convention above and means nothing here. Verified over the whole tensor.
    const auto time_bytes_case = [&](const std::string& name, const auto& run,
                                     const std::vector<std::uint8_t>& want) {
      if (!only.empty() && name != only) return;
      col.fill(0xCD, stream.get());
      run(0);
      stream.synchronize();
      Result r;
      r.name = name;
      std::vector<std::uint8_t> got(n);
      col.download(got.data(), n);
      r.verified = got == want;
      if (!r.verified) std::cerr << name << ": output differs from the CPU reference\n";
      time_runs(
          r, [](int i) { return i; }, run, 2.0);
      results.push_back(r);
    };
    const auto* first_bytes = reinterpret_cast<const std::uint8_t*>(host_x[0].data());
    if (only.empty() || only == "fp8_transpose") {
      const TransposeLauncher transpose(jit);
      time_bytes_case(
          "fp8_transpose",
          [&](int b) { transpose.launch(xs[b].get(), col.get(), rows, cols, stream.get()); },
          reference_transpose(first_bytes, rows, cols));
    }
    if ((only.empty() || only == "fp8_permute_8_ranks") && rows % 8 == 0) {
      // A columnwise [cols][rows] tensor gathered from 8 ranks along rows.
      const PermuteLauncher permute(jit, PermuteKernel{1});
      time_bytes_case(
          "fp8_permute_8_ranks",
          [&](int b) { permute.launch(xs[b].get(), col.get(), 8, cols, rows / 8, stream.get()); },
          reference_permute(first_bytes, 1, 8, cols, rows / 8));
    }

    std::cout << "device " << device.name() << " (" << device.arch() << "), " << rows << " x "
              << cols << " bf16, median of " << iters << " runs, kernel IR built by "
              << (backend == KernelBackend::llvm ? "LLVM" : "NVRTC") << "\n";
    std::cout
        << "case                                  median_us  eff_TB/s  actual_TB/s  verified\n";
    for (const auto& r : results) {
      std::printf("%-36s %10.1f %9.2f %12.2f  %s\n", r.name.c_str(), r.median_us, r.effective_tbps,
                  r.actual_tbps, r.verified ? "yes" : "NO");
    }
    if (!json.empty()) {
      std::ofstream out(json);
      out << "{\n  \"device\": \"" << device.name() << "\",\n  \"backend\": \""
          << (backend == KernelBackend::llvm ? "llvm" : "nvrtc") << "\",\n  \"rows\": " << rows
          << ",\n  \"cols\": " << cols << ",\n  \"iters\": " << iters << ",\n  \"cases\": [\n";
      for (std::size_t i = 0; i < results.size(); ++i) {
        const auto& r = results[i];
        out << "    {\"name\": \"" << r.name << "\", \"median_us\": " << r.median_us
            << ", \"min_us\": " << r.min_us << ", \"effective_TBps\": " << r.effective_tbps
            << ", \"actual_TBps\": " << r.actual_tbps
            << ", \"verified\": " << (r.verified ? "true" : "false") << "}"
            << (i + 1 < results.size() ? ",\n" : "\n");
      }
      out << "  ]\n}\n";
    }
    for (const auto& r : results)
      if (!r.verified) return 1;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "quantize_bench: " << e.what() << "\n";
    return 1;
  }
}
