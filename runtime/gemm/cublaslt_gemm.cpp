// GemmRunner on cuBLASLt. Each distinct GEMM form (shape, types, epilogue,
// pointer alignment) gets its descriptors and its heuristic's algorithm once;
// later calls only rebind the pointers and enqueue. The mapping onto
// cuBLASLt's column-major operands is in cublaslt_requirements.hpp.
#include <compare>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/dynamic_library.hpp"
#include "runtime/gemm/cublaslt_library.hpp"
#include "runtime/gemm/cublaslt_requirements.hpp"
#include "runtime/gemm/gemm.hpp"
#include "runtime/gemm/gemm_table_file.hpp"
#include "runtime/gemm/workspace_pool.hpp"

namespace fp8c::runtime {
namespace {

// What TransformerEngine gives cuBLASLt on Hopper; enough for every
// algorithm its heuristic offers at training shapes.
constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;
// Streams that may run GEMMs at once before one waits for another's workspace.
constexpr std::size_t kWorkspaces = 4;
// Forms are few (a handful per layer); a runaway caller only costs a re-query.
constexpr std::size_t kMaxPlans = 1024;

cudaDataType_t cuda_type(ElemType t) {
  switch (t) {
    case ElemType::bf16:
      return CUDA_R_16BF;
    case ElemType::fp16:
      return CUDA_R_16F;
    case ElemType::fp32:
      return CUDA_R_32F;
    case ElemType::e4m3:
      return CUDA_R_8F_E4M3;
    case ElemType::e5m2:
      return CUDA_R_8F_E5M2;
    case ElemType::e8m0:
    case ElemType::fp64:
    case ElemType::i32:
    case ElemType::u8:
      break;
  }
  throw std::invalid_argument("cuBLASLt GEMM: no CUDA data type for " + std::string(to_string(t)));
}

std::int32_t scale_mode(Scaling s) {
  return s == Scaling::block_1x128 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                   : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
}

void* pointer(CUdeviceptr p) {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
}

// The largest power of two up to 256 dividing the address: the alignment an
// algorithm may rely on (a null pointer constrains nothing).
std::uint32_t alignment_of(CUdeviceptr p) {
  std::uint32_t a = 256;
  while (p % a != 0) a /= 2;
  return a;
}

// Everything descriptors, layouts and the chosen algorithm depend on. The
// pointers are bound per call; only their alignment shapes the algorithm.
struct PlanKey {
  std::int64_t m, n, k, lda, ldb, ldd, ld_aux;
  ElemType a_type, b_type, d_type, bias_type, aux_type;
  Scaling a_scaling, b_scaling;
  Activation activation;
  bool accumulate, has_bias, has_aux, has_amax, fast_accumulate, a_k_outer, b_k_outer;
  std::uint32_t align_a, align_b, align_d, align_bias, align_aux;
  auto operator<=>(const PlanKey&) const = default;
};

PlanKey plan_key(const GemmArgs& g) {
  return PlanKey{g.a.rows,
                 g.b.rows,
                 g.a.k,
                 g.a.ld,
                 g.b.ld,
                 g.ldd,
                 g.aux ? g.ld_aux : 0,
                 g.a.type,
                 g.b.type,
                 g.d_type,
                 g.bias ? g.bias_type : ElemType::bf16,
                 g.aux ? g.aux_type : ElemType::bf16,
                 g.a.scaling,
                 g.b.scaling,
                 g.activation,
                 g.accumulate,
                 g.bias != 0,
                 g.aux != 0,
                 g.d_amax != 0,
                 g.fast_accumulate,
                 g.a.k_outer,
                 g.b.k_outer,
                 alignment_of(g.a.data),
                 alignment_of(g.b.data),
                 alignment_of(g.d),
                 alignment_of(g.bias),
                 alignment_of(g.aux)};
}

cublasLtEpilogue_t epilogue_of(const GemmArgs& g) {
  if (g.activation == Activation::gelu) {
    if (g.aux) return g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    return g.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  }
  return g.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// One GEMM form: its cuBLASLt descriptors and the heuristic's algorithm.
// Construction throws std::runtime_error naming the call cuBLASLt refused.
class Plan {
 public:
  Plan(const CublasLtApi& api, cublasLtHandle_t handle, const GemmArgs& g) : api_(api) {
    try {
      build(handle, g);
    } catch (...) {
      release();
      throw;
    }
  }
  ~Plan() { release(); }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  // Sets this call's pointers; everything else is fixed by the form.
  void bind(const GemmArgs& g) {
    if (is_fp8(g.a.type)) {
      // cuBLASLt's A is fp8c's b and the other way round.
      set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, pointer(g.b.scale_inv), "A_SCALE_POINTER");
      set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, pointer(g.a.scale_inv), "B_SCALE_POINTER");
    }
    if (is_fp8(g.d_type))
      set(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, pointer(g.d_scale), "D_SCALE_POINTER");
    if (g.d_amax) set(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, pointer(g.d_amax), "AMAX_D_POINTER");
    if (g.bias) set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, pointer(g.bias), "BIAS_POINTER");
    if (g.aux)
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, pointer(g.aux), "EPILOGUE_AUX_POINTER");
  }

  void enqueue(cublasLtHandle_t handle, const GemmArgs& g, const DeviceBuffer& workspace,
               CUstream stream) const {
    const float alpha = 1.0f;
    const float beta = g.accumulate ? 1.0f : 0.0f;
    // An FP8 D is never read (no accumulate), and C's type there is the
    // bias type, not D's: no C pointer.
    const void* c = is_fp8(g.d_type) ? nullptr : pointer(g.d);
    check_cublaslt(api_,
                   api_.cublasLtMatmul(handle, desc_, &alpha, pointer(g.b.data), a_,
                                       pointer(g.a.data), b_, &beta, c, c_, pointer(g.d), d_,
                                       &algo_, pointer(workspace.get()), workspace.bytes(), stream),
                   "cublasLtMatmul");
  }

 private:
  template <typename T>
  void set(cublasLtMatmulDescAttributes_t attribute, const T& value, const char* what) {
    const std::string call = std::string("cublasLtMatmulDescSetAttribute(") + what + ")";
    check_cublaslt(api_,
                   api_.cublasLtMatmulDescSetAttribute(desc_, attribute, &value, sizeof value),
                   call.c_str());
  }

  cublasLtMatrixLayout_t layout(ElemType type, std::int64_t rows, std::int64_t cols,
                                std::int64_t ld) {
    cublasLtMatrixLayout_t l = nullptr;
    check_cublaslt(
        api_,
        api_.cublasLtMatrixLayoutCreate(&l, cuda_type(type), static_cast<std::uint64_t>(rows),
                                        static_cast<std::uint64_t>(cols), ld),
        "cublasLtMatrixLayoutCreate");
    return l;
  }

  void build(cublasLtHandle_t handle, const GemmArgs& g) {
    check_cublaslt(api_, api_.cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                   "cublasLtMatmulDescCreate");
    // K-innermost operands are read transposed (A) or as they are (B); a
    // high-precision operand stored K-outer the other way round.
    set(CUBLASLT_MATMUL_DESC_TRANSA,
        static_cast<std::int32_t>(g.b.k_outer ? CUBLAS_OP_N : CUBLAS_OP_T), "TRANSA");
    set(CUBLASLT_MATMUL_DESC_TRANSB,
        static_cast<std::int32_t>(g.a.k_outer ? CUBLAS_OP_T : CUBLAS_OP_N), "TRANSB");
    const bool fp8 = is_fp8(g.a.type);
    if (fp8)
      set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<std::int8_t>(g.fast_accumulate),
          "FAST_ACCUM");
    if (g.a.scaling == Scaling::block_1x128 || g.a.scaling == Scaling::block_128x128) {
      set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, scale_mode(g.b.scaling), "A_SCALE_MODE");
      set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, scale_mode(g.a.scaling), "B_SCALE_MODE");
    }
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<std::uint32_t>(epilogue_of(g)), "EPILOGUE");
    // FP8 kernels take the bias and aux types explicitly (they need not be
    // D's); for high-precision ones both are D's type.
    if (g.bias && fp8)
      set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<std::int32_t>(cuda_type(g.bias_type)),
          "BIAS_DATA_TYPE");
    if (g.aux) {
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<std::int64_t>(g.ld_aux),
          "EPILOGUE_AUX_LD");
      if (fp8)
        set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
            static_cast<std::int32_t>(cuda_type(g.aux_type)), "EPILOGUE_AUX_DATA_TYPE");
    }
    // The heuristic reads bias and aux pointers for their alignment.
    bind(g);

    const std::int64_t m = g.a.rows, n = g.b.rows, k = g.a.k;
    a_ = g.b.k_outer ? layout(g.b.type, n, k, g.b.ld) : layout(g.b.type, k, n, g.b.ld);
    b_ = g.a.k_outer ? layout(g.a.type, m, k, g.a.ld) : layout(g.a.type, k, m, g.a.ld);
    d_ = layout(g.d_type, n, m, g.ldd);
    // cuBLASLt wants an FP8 D's C in the bias type (bf16 without a bias).
    const ElemType c_type = is_fp8(g.d_type) ? (g.bias ? g.bias_type : ElemType::bf16) : g.d_type;
    c_ = layout(c_type, n, m, g.ldd);

    choose_algorithm(handle, g);
  }

  void choose_algorithm(cublasLtHandle_t handle, const GemmArgs& g) {
    struct Preference {
      const CublasLtApi& api;
      cublasLtMatmulPreference_t p = nullptr;
      ~Preference() {
        if (p) api.cublasLtMatmulPreferenceDestroy(p);
      }
    } pref{api_};
    check_cublaslt(api_, api_.cublasLtMatmulPreferenceCreate(&pref.p),
                   "cublasLtMatmulPreferenceCreate");
    const auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attribute, const auto& value,
                            const char* what) {
      const std::string call = std::string("cublasLtMatmulPreferenceSetAttribute(") + what + ")";
      check_cublaslt(
          api_, api_.cublasLtMatmulPreferenceSetAttribute(pref.p, attribute, &value, sizeof value),
          call.c_str());
    };
    prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<std::uint64_t>(kWorkspaceBytes),
           "MAX_WORKSPACE_BYTES");
    // Without these the heuristic assumes 256-byte aligned matrices; a
    // segmented-K call on sub-pointers would then get an algorithm that
    // faults on them.
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(g.b.data),
           "MIN_ALIGNMENT_A_BYTES");
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(g.a.data),
           "MIN_ALIGNMENT_B_BYTES");
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(g.d), "MIN_ALIGNMENT_C_BYTES");
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(g.d), "MIN_ALIGNMENT_D_BYTES");

    cublasLtMatmulHeuristicResult_t result = {};
    int found = 0;
    check_cublaslt(api_,
                   api_.cublasLtMatmulAlgoGetHeuristic(handle, desc_, a_, b_, c_, d_, pref.p, 1,
                                                       &result, &found),
                   "cublasLtMatmulAlgoGetHeuristic");
    if (found == 0)
      throw std::runtime_error("cublasLtMatmulAlgoGetHeuristic found no algorithm for this GEMM");
    algo_ = result.algo;
  }

  // Destroy calls cannot usefully fail, and a destructor must not throw.
  void release() {
    for (cublasLtMatrixLayout_t* l : {&a_, &b_, &c_, &d_})
      if (*l) api_.cublasLtMatrixLayoutDestroy(std::exchange(*l, nullptr));
    if (desc_) api_.cublasLtMatmulDescDestroy(std::exchange(desc_, nullptr));
  }

  const CublasLtApi& api_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  // cuBLASLt's A (fp8c's b), B (fp8c's a), C and D.
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr, d_ = nullptr;
  cublasLtMatmulAlgo_t algo_ = {};
};

// The name of the current context's GPU (current_sm() has checked for one).
std::string current_gpu_name() {
  const DriverApi& cu = driver();
  CUdevice device = 0;
  FP8C_CU(cu.cuCtxGetDevice(&device));
  char name[256] = {};
  FP8C_CU(cu.cuDeviceGetName(name, sizeof name, device));
  return name;
}

// The compute capability of the current context's GPU (90 for H100/H200).
int current_sm() {
  std::string reason;
  if (!driver_available(&reason))
    throw Unavailable("the cuBLASLt GEMM runner needs a GPU: " + reason);
  const DriverApi& cu = driver();
  CUdevice device = 0;
  if (cu.cuCtxGetDevice(&device) != CUDA_SUCCESS)
    throw Unavailable(
        "the cuBLASLt GEMM runner needs a current CUDA context (create a runtime::Device "
        "first)");
  int major = 0, minor = 0;
  FP8C_CU(cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device));
  FP8C_CU(cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device));
  return major * 10 + minor;
}

class CublasLtRunner final : public GemmRunner {
 public:
  explicit CublasLtRunner(CublasLtApi api) : api_(std::move(api)), sm_(current_sm()) {
    check_cublaslt(api_, api_.cublasLtCreate(&handle_), "cublasLtCreate");
  }

  ~CublasLtRunner() override {
    plans_.clear();
    if (handle_) api_.cublasLtDestroy(handle_);
  }

  std::string_view name() const override { return "cublaslt"; }

  bool supports(const GemmArgs& args, std::string* why) const override {
    std::string reason;
    if (auto problem = cublaslt_form_problem(args, api_.version, sm_)) {
      reason = *problem;
    } else {
      std::lock_guard lock(mutex_);
      reason = entry_for(args).error;
    }
    if (why) *why = reason;
    return reason.empty();
  }

  void run(const GemmArgs& args, CUstream stream) override {
    if (auto problem = cublaslt_form_problem(args, api_.version, sm_))
      throw std::invalid_argument("cuBLASLt GEMM: " + *problem);
    std::lock_guard lock(mutex_);
    Entry& entry = entry_for(args);
    if (!entry.plan) throw std::invalid_argument(entry.error);
    entry.plan->bind(args);
    entry.plan->enqueue(handle_, args, workspaces_.acquire(stream), stream);
    workspaces_.used(stream);
  }

 private:
  // A form's plan, or why cuBLASLt would not make one (kept so that
  // supports() does not ask the heuristic again).
  struct Entry {
    std::unique_ptr<Plan> plan;
    std::string error;
  };

  // Callers hold mutex_.
  Entry& entry_for(const GemmArgs& args) const {
    const PlanKey key = plan_key(args);
    if (auto found = plans_.find(key); found != plans_.end()) return found->second;
    if (plans_.size() >= kMaxPlans) plans_.clear();
    Entry entry;
    try {
      entry.plan = std::make_unique<Plan>(api_, handle_, args);
    } catch (const std::exception& e) {
      entry.error = std::string("cuBLASLt (") + api_.soname + ") refuses this GEMM: " + e.what();
    }
    return plans_.emplace(key, std::move(entry)).first->second;
  }

  CublasLtApi api_;
  cublasLtHandle_t handle_ = nullptr;
  int sm_ = 0;
  mutable std::mutex mutex_;
  mutable std::map<PlanKey, Entry> plans_;
  // GEMMs on two streams may run at once; one workspace between them would
  // let one overwrite the other's partial sums.
  WorkspacePool workspaces_{kWorkspaceBytes, kWorkspaces};
};

}  // namespace

std::unique_ptr<GemmRunner> make_cublaslt_runner() {
  return std::make_unique<CublasLtRunner>(cublaslt());
}

std::unique_ptr<GemmRunner> make_cublaslt_runner(const std::vector<std::string>& sonames) {
  return std::make_unique<CublasLtRunner>(load_cublaslt(sonames));
}

LowerOptions cublaslt_lower_options() {
  const int sm = current_sm();
  const CublasLtApi& api = cublaslt();
  LowerOptions o;
  if (sm != 90) {
    o.generated_gemm = false;
    o.no_generated_gemm =
        "the generated GEMM is built for sm_90a (Hopper); this GPU is sm_" + std::to_string(sm);
  }
  if (const char* env = std::getenv("FP8C_BLOCK_SCALED_GEMM"); env && std::string(env) == "0") {
    o.block_scaled_gemm = false;
    o.no_block_scaled_gemm = "FP8C_BLOCK_SCALED_GEMM=0";
  } else if (api.version < kCublasLtBlockScalingVersion) {
    o.block_scaled_gemm = false;
    o.no_block_scaled_gemm = api.soname + " reports version " + std::to_string(api.version) +
                             "; its block-scaled GEMM needs 12.9 or newer";
  } else if (sm != 90) {
    o.block_scaled_gemm = false;
    o.no_block_scaled_gemm =
        "cuBLASLt's 1x128 / 128x128 block-scaled GEMM is a Hopper (sm_90) feature; this GPU is "
        "sm_" +
        std::to_string(sm);
  }
  // The side stream (codegen/lower/schedule.hpp), off to measure what it gives.
  if (const char* env = std::getenv("FP8C_SIDE_STREAM"); env && std::string(env) == "0")
    o.side_stream = false;
  // The measured times `gemm = auto` picks a backend by, where there are any.
  if (o.generated_gemm) attach_gemm_table(o, current_gpu_name());
  return o;
}

}  // namespace fp8c::runtime
