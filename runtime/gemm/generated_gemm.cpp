#include "runtime/gemm/generated_gemm.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "codegen/kernels/device/fp8_gemm_params.h"
#include "runtime/device.hpp"
#include "runtime/kernel_launchers.hpp"
#include "runtime/quantize_launcher.hpp"

namespace fp8c::runtime {
namespace {

// cuda.h aligns CUtensorMap to 128 bytes; TMA needs 64, which the device
// code's copy keeps (the descriptor is copied, never pointed at, on the host).
static_assert(sizeof(fp8c_gemm::TmaDescriptor) == sizeof(CUtensorMap) &&
                  alignof(fp8c_gemm::TmaDescriptor) >= 64,
              "the device code's TMA descriptor must hold a CUtensorMap");

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

// Scale rows of an operand's scaling in the kernel's terms (fp8_gemm.hpp):
// MXFP8's 1x32 blocks are rows of their own too (the kernel's `mx`).
int scale_rows(Scaling s) {
  return s == Scaling::block_1x128 || s == Scaling::mx_1x32 ? 1
         : s == Scaling::block_128x128                      ? 128
                                                            : 0;
}

bool aligned(CUdeviceptr p, unsigned bytes) {
  return p % bytes == 0;
}

// 1x128 scales the kernel can copy 16 bytes (4 rows) at a time: a K block's
// rows consecutive (K-block-major, or one K block), every 4 rows 16-byte
// aligned. MXFP8 codes as the caller ordered them (the kernel reads both
// orders).
bool scales_k_major(const GemmOperand& o) {
  if (o.scaling == Scaling::mx_1x32) return o.scale_order == BlockScaleOrder::k_block_major;
  if (o.scaling != Scaling::block_1x128) return false;
  const bool consecutive = o.scale_order == BlockScaleOrder::k_block_major || o.k <= 128;
  return consecutive && o.rows % 4 == 0 && aligned(o.scale_inv, 16);
}

std::string operand_problem(const GemmOperand& o, const char* which) {
  const std::string name(which);
  if (!is_fp8(o.type))
    return name + " is " + std::string(to_string(o.type)) + "; the generated GEMM takes FP8 only";
  if (o.k_outer) return name + " is stored K-outermost; FP8 wgmma reads K-innermost operands";
  if (o.data == 0) return name + " has no data";
  if (o.k % 16 != 0 || o.ld % 16 != 0 || !aligned(o.data, 16))
    return name + ": K, the leading dimension and the address must be multiples of 16 bytes (TMA)";
  if (o.ld < o.k) return name + ": leading dimension below K";
  if (o.rows <= 0 || o.rows > 0x7FFFFFFF || o.k <= 0 || o.k > 0x7FFFFFFF)
    return name + ": rows or K out of range (1 to 2^31 - 1)";
  if (o.scaling == Scaling::none) return name + " has no scale";
  if (o.scale_inv == 0) return name + " has no scale_inv";
  return {};
}

std::string args_problem(const GemmArgs& g) {
  if (std::string p = operand_problem(g.a, "A"); !p.empty()) return p;
  if (std::string p = operand_problem(g.b, "B"); !p.empty()) return p;
  if (g.a.k != g.b.k) return "A and B disagree on K";
  if ((g.a.scaling == Scaling::per_tensor) != (g.b.scaling == Scaling::per_tensor))
    return "one operand per-tensor and one block-scaled";
  if ((g.a.scaling == Scaling::mx_1x32) != (g.b.scaling == Scaling::mx_1x32))
    return "one operand MXFP8 and the other not";
  if (g.a.scaling == Scaling::mx_1x32 && g.a.scale_order != g.b.scale_order)
    return "MXFP8 codes in two orders (one operand row-major, one K-block-major)";
  for (const GemmOperand* o : {&g.a, &g.b}) {
    if (o->scaling != Scaling::mx_1x32 || o->scale_stride == 0) continue;
    if (o->scale_order == BlockScaleOrder::row_major && o->scale_stride < ceil_div(o->k, 32))
      return "an MXFP8 scale row shorter than ceil(K / 32) codes";
    if (o->scale_order == BlockScaleOrder::k_block_major && o->scale_stride < o->rows)
      return "a K-block-major MXFP8 code row shorter than the operand's rows";
  }
  if (g.d == 0) return "no D";
  // Elements are written two at a time: pairs must be aligned.
  const auto pairs_fit = [&](CUdeviceptr at, std::int64_t ld, ElemType t) {
    return ld >= g.b.rows && ld % 2 == 0 &&
           aligned(at, static_cast<unsigned>(2 * element_bytes(t)));
  };
  if (!pairs_fit(g.d, g.ldd, g.d_type))
    return "D: the leading dimension must be even and at least N, and D aligned to two elements";
  if (is_fp8(g.d_type) && g.d_scale == 0) return "an FP8 D needs d_scale";
  if (g.bias && g.bias % element_bytes(g.bias_type) != 0) return "the bias is misaligned";
  if (g.aux && !pairs_fit(g.aux, g.ld_aux, g.aux_type))
    return "aux: the leading dimension must be even and at least N, and aux aligned to two "
           "elements";
  if (g.d_amax % 4 != 0) return "d_amax is misaligned";
  // dact without aux and a non-FP8 D^T: fp8_gemm_problem() refuses the form.
  if (g.dbias) {
    if (!is_high_precision(g.dbias_type))
      return "dbias must be bf16, fp16 or fp32, not " + std::string(to_string(g.dbias_type));
    if (g.dbias % element_bytes(g.dbias_type) != 0) return "dbias is misaligned";
    if (g.dbias_workspace == 0 || g.dbias_workspace % 4 != 0)
      return "dbias needs a dbias_workspace (dbias_workspace_bytes(M, N)), 4-byte aligned";
  }
  if (g.d_t && g.ld_dt < g.a.rows) return "D^T: the leading dimension must be at least M";
  if (g.dact != Activation::none && g.aux) {
    // The kernel reads the saved pre-activation through the read-only path
    // (ld.global.nc), which is defined only for memory no one writes while
    // the kernel runs: dz written over z in place would not be.
    const auto span = [](CUdeviceptr at, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                         std::size_t bytes) {
      return std::pair<CUdeviceptr, CUdeviceptr>{
          at, at + static_cast<CUdeviceptr>(((rows - 1) * ld + cols) *
                                            static_cast<std::int64_t>(bytes))};
    };
    const std::int64_t m = g.a.rows, n = g.b.rows;
    const auto aux = span(g.aux, m, n, g.ld_aux, element_bytes(g.aux_type));
    const auto overlaps = [&](std::pair<CUdeviceptr, CUdeviceptr> o) {
      return o.first < aux.second && aux.first < o.second;
    };
    const std::string rule =
        "dact reads aux (the saved pre-activation) as read-only: it must not overlap ";
    if (overlaps(span(g.d, m, n, g.ldd, element_bytes(g.d_type)))) return rule + "D";
    if (g.d_t && overlaps(span(g.d_t, n, m, g.ld_dt, 1))) return rule + "D^T";
    if (g.dbias && overlaps({g.dbias_workspace, g.dbias_workspace + dbias_workspace_bytes(m, n)}))
      return rule + "the dbias workspace";
  }
  return {};
}

class Runner final : public GeneratedGemmRunner {
 public:
  Runner(const Jit& jit, bool clusters) : jit_(jit) {
    CUdevice device;
    FP8C_CU(driver().cuCtxGetDevice(&device));
    FP8C_CU(driver().cuDeviceGetAttribute(&sms_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device));
    const char* env = std::getenv("FP8C_GEMM_CLUSTERS");
    clusters_ = clusters || (env && std::string(env) == "1");
    if (const char* n = std::getenv("FP8C_GEMM_BLOCK_N")) block_n_ = std::atoi(n);
    if (const char* m = std::getenv("FP8C_GEMM_BLOCK_M")) block_m_ = std::atoi(m);
  }

  std::string_view name() const override { return "generated"; }

  bool supports(const GemmArgs& g, std::string* why) const override {
    std::string problem;
    if (jit_.arch() != "sm_90a")
      problem = "the generated GEMM is built for sm_90a (Hopper); this GPU is " + jit_.arch();
    else
      problem = generated_gemm_problem(g, clusters_, sms_, block_n_, block_m_);
    if (why) *why = problem;
    return problem.empty();
  }

  Fp8GemmChoice choice(const GemmArgs& g) const override {
    return generated_gemm_choice(g, clusters_, sms_, block_n_, block_m_);
  }

  const CompiledKernel& compiled(const Fp8GemmKernel& kernel) override {
    return loaded(kernel).compiled();
  }

  void run(const GemmArgs& g, CUstream stream) override {
    std::string why;
    if (!supports(g, &why)) throw std::invalid_argument("generated GEMM: " + why);
    const Fp8GemmChoice c = choice(g);
    const LoadedKernel& kernel = loaded(c.kernel);

    fp8c_gemm::Fp8GemmParams p{};
    encode(&p.a, g.a, c.kernel.block_m);
    encode(&p.b, g.b, c.kernel.block_n / c.kernel.cluster_m);  // each CTA loads its share
    p.d = g.d;
    p.ldd = g.ldd;
    p.bias = g.bias;
    p.aux = g.aux;
    p.ld_aux = g.ld_aux;
    p.d_scale = g.d_scale;
    p.d_amax = g.d_amax;
    p.dbias_partial = g.dbias ? g.dbias_workspace : 0;
    p.d_t = g.d_t;
    p.ld_dt = g.ld_dt;
    p.a_scale = g.a.scale_inv;
    p.b_scale = g.b.scale_inv;
    set_scale_strides(g.a, &p.a_scale_row_stride, &p.a_scale_kblock_stride);
    set_scale_strides(g.b, &p.b_scale_row_stride, &p.b_scale_kblock_stride);
    p.m = static_cast<int>(g.a.rows);
    p.n = static_cast<int>(g.b.rows);
    p.k = static_cast<int>(g.a.k);
    p.tile_group = c.tile_group;

    // The kernel raises the amax with atomicMax from zero; cuBLASLt's
    // contract (and GemmArgs') is that d_amax is written, not raised.
    if (g.d_amax) FP8C_CU(driver().cuMemsetD8Async(g.d_amax, 0, 4, stream));
    launch_gemm(c, kernel, p, stream);
    // dbias: the partial rows (one per 16 rows of D) added in order.
    if (g.dbias)
      dbias_reduce(g.dbias_type)
          .launch(g.dbias, g.dbias_workspace, static_cast<int>(ceil_div(g.a.rows, 16)),
                  static_cast<int>(g.b.rows), stream);
  }

  void prepare(const GemmArgs& g) override {
    std::string why;
    if (!supports(g, &why)) throw std::invalid_argument("generated GEMM: " + why);
    loaded(choice(g).kernel);
    if (g.dbias) dbias_reduce(g.dbias_type);
  }

  std::vector<CompiledKernel> loaded_kernels() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<CompiledKernel> out;
    for (const auto& [name, kernel] : kernels_) out.push_back(kernel->compiled());
    for (const auto& [type, reducer] : reducers_) out.push_back(reducer->compiled());
    return out;
  }

  int launch_ctas(const GemmArgs& g) override {
    const Fp8GemmChoice c = choice(g);
    return ctas(c, loaded(c.kernel).function());
  }

 private:
  void launch_gemm(const Fp8GemmChoice& c, const LoadedKernel& kernel, fp8c_gemm::Fp8GemmParams& p,
                   CUstream stream) {
    void* args[] = {&p};
    if (c.kernel.cluster_m == 1) {
      LaunchShape shape;
      shape.grid[0] = static_cast<unsigned>(c.ctas);
      shape.block[0] = static_cast<unsigned>(c.kernel.threads());
      shape.shared_bytes = static_cast<unsigned>(c.kernel.shared_bytes());
      launch(kernel.function(), shape, stream, args);
      return;
    }
    // A persistent grid of clusters must fit on the GPU at once: clusters
    // are placed within a GPC, so fewer than SMs / 2 may fit.
    CUlaunchAttribute cluster{};
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster.value.clusterDim.x = static_cast<unsigned>(c.kernel.cluster_m);
    cluster.value.clusterDim.y = cluster.value.clusterDim.z = 1;
    CUlaunchConfig config{};
    config.blockDimX = static_cast<unsigned>(c.kernel.threads());
    config.blockDimY = config.blockDimZ = 1;
    config.gridDimY = config.gridDimZ = 1;
    config.sharedMemBytes = static_cast<unsigned>(c.kernel.shared_bytes());
    config.hStream = stream;
    config.attrs = &cluster;
    config.numAttrs = 1;
    config.gridDimX = static_cast<unsigned>(ctas(c, kernel.function()));
    FP8C_CU(driver().cuLaunchKernelEx(&config, kernel.function(), args, nullptr));
  }

  // The dbias reduction for `type`, compiled the first time it is asked for.
  const DbiasReduceLauncher& dbias_reduce(ElemType type) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& slot = reducers_[static_cast<int>(type)];
    // 8 slices: a row of partials per 16 rows of D is 8 times the rows the
    // quantize kernels leave, so 8 threads share each column.
    if (!slot) slot = std::make_unique<DbiasReduceLauncher>(jit_, type, 8);
    return *slot;
  }

  const LoadedKernel& loaded(const Fp8GemmKernel& kernel) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& slot = kernels_[kernel.name()];
    if (!slot) {
      auto made = std::make_unique<LoadedKernel>(jit_, emit_cuda(kernel));
      FP8C_CU(driver().cuFuncSetAttribute(made->function(),
                                          CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          static_cast<int>(kernel.shared_bytes())));
      slot = std::move(made);
    }
    return *slot;
  }

  // The persistent grid: the choice's CTAs, or as many clusters as fit on
  // the GPU at once (asked once per kernel) when that is fewer.
  int ctas(const Fp8GemmChoice& c, CUfunction function) {
    if (c.kernel.cluster_m == 1) return c.ctas;
    std::lock_guard<std::mutex> lock(mutex_);
    int& resident = resident_[c.kernel.name()];
    if (resident == 0) {
      CUlaunchAttribute cluster{};
      cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      cluster.value.clusterDim.x = static_cast<unsigned>(c.kernel.cluster_m);
      cluster.value.clusterDim.y = cluster.value.clusterDim.z = 1;
      CUlaunchConfig config{};
      config.gridDimX = static_cast<unsigned>(sms_ / c.kernel.cluster_m * c.kernel.cluster_m);
      config.gridDimY = config.gridDimZ = 1;
      config.blockDimX = static_cast<unsigned>(c.kernel.threads());
      config.blockDimY = config.blockDimZ = 1;
      config.sharedMemBytes = static_cast<unsigned>(c.kernel.shared_bytes());
      config.attrs = &cluster;
      config.numAttrs = 1;
      FP8C_CU(driver().cuOccupancyMaxActiveClusters(&resident, function, &config));
      if (resident < 1)
        throw std::runtime_error("generated GEMM " + c.kernel.name() +
                                 ": no cluster of it fits on this GPU");
    }
    return std::min(c.ctas, resident * c.kernel.cluster_m);
  }

  // A [rows][ld] byte matrix, read in boxes of 128 bytes of K x `box_rows`
  // rows into the 128-byte swizzle wgmma reads; zeros outside it.
  static void encode(fp8c_gemm::TmaDescriptor* out, const GemmOperand& o, int box_rows) {
    CUtensorMap map;
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(o.k), static_cast<cuuint64_t>(o.rows)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(o.ld)};
    const cuuint32_t box[2] = {128, static_cast<cuuint32_t>(box_rows)};
    const cuuint32_t element_strides[2] = {1, 1};
    FP8C_CU(driver().cuTensorMapEncodeTiled(
        &map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, reinterpret_cast<void*>(o.data), dims, strides, box,
        element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    std::memcpy(out, &map, sizeof map);
  }

  static void set_scale_strides(const GemmOperand& o, long long* row, long long* kblock) {
    const std::int64_t nb = ceil_div(o.k, 128);
    switch (o.scaling) {
      case Scaling::block_1x128:
        if (o.scale_order == BlockScaleOrder::k_block_major) {
          *row = 1;
          *kblock = o.rows;
        } else {
          *row = nb;
          *kblock = 1;
        }
        return;
      case Scaling::block_128x128:
        *row = o.scale_stride ? o.scale_stride : nb;
        *kblock = 1;
        return;
      case Scaling::mx_1x32:  // E8M0 code bytes (fp8_gemm_params.h)
        if (o.scale_order == BlockScaleOrder::k_block_major) {  // [ceil(k / 32)][scale_stride]
          *row = 1;
          *kblock = o.scale_stride ? o.scale_stride : o.rows;
        } else {  // [rows][ceil(k / 32)], or rows scale_stride apart
          *row = o.scale_stride ? o.scale_stride : ceil_div(o.k, 32);
          *kblock = 4;
        }
        return;
      default:
        *row = *kblock = 0;
    }
  }

  const Jit& jit_;
  int sms_ = 0;
  bool clusters_ = false;
  int block_n_ = 0;  // FP8C_GEMM_BLOCK_N: a tile width for tuning sweeps (0: the heuristic's)
  int block_m_ = 0;  // FP8C_GEMM_BLOCK_M: the same for the tile height
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<LoadedKernel>> kernels_;
  std::map<std::string, int> resident_;
  std::map<int, std::unique_ptr<DbiasReduceLauncher>> reducers_;  // by ElemType
};

}  // namespace

Fp8GemmChoice generated_gemm_choice(const GemmArgs& g, bool clusters, int sms, int block_n,
                                    int block_m) {
  Fp8GemmShape shape;
  shape.m = g.a.rows;
  shape.n = g.b.rows;
  shape.k = g.a.k;
  shape.form.a = g.a.type;
  shape.form.b = g.b.type;
  shape.form.d = g.d_type;
  shape.form.a_scale_rows = scale_rows(g.a.scaling);
  shape.form.b_scale_rows = scale_rows(g.b.scaling);
  shape.form.a_scales_k_major = scales_k_major(g.a);
  shape.form.b_scales_k_major = scales_k_major(g.b);
  shape.form.mx = g.a.scaling == Scaling::mx_1x32;
  shape.form.fast_accumulate = g.a.scaling == Scaling::per_tensor && g.fast_accumulate;
  shape.form.bias = g.bias != 0;
  if (g.bias) shape.form.bias_type = g.bias_type;
  shape.form.activation = g.activation;
  shape.form.aux = g.aux != 0;
  if (g.aux) shape.form.aux_type = g.aux_type;
  shape.form.accumulate = g.accumulate;
  shape.form.amax = g.d_amax != 0;
  shape.form.dact = g.dact;
  shape.form.dbias = g.dbias != 0;
  shape.form.transposed = g.d_t != 0;
  shape.clusters = clusters;
  shape.block_n = block_n;
  shape.block_m = block_m;
  return choose_fp8_gemm(shape, sms);
}

std::string generated_gemm_problem(const GemmArgs& g, bool clusters, int sms, int block_n,
                                   int block_m) {
  if (std::string p = args_problem(g); !p.empty()) return p;
  return fp8_gemm_problem(generated_gemm_choice(g, clusters, sms, block_n, block_m).kernel);
}

std::unique_ptr<GeneratedGemmRunner> make_generated_gemm_runner(const Jit& jit, bool clusters) {
  return std::make_unique<Runner>(jit, clusters);
}

}  // namespace fp8c::runtime
