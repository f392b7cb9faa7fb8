// fp8c::Session: the host API over the GPU executor (runtime/gpu). One rank
// (the spec planned with tensor_parallel = 1, a one-rank group for the
// collectives a plan may still name), or one rank of a launched job over
// NCCL (runtime/comm).
#include "fp8c/session.hpp"

#include <fstream>
#include <map>
#include <sstream>

#include "codegen/planner.hpp"
#include "runtime/comm/local_device_group.hpp"
#include "runtime/comm/nccl_bootstrap.hpp"
#include "runtime/comm/nccl_communicator.hpp"
#include "runtime/cubin_cache.hpp"
#include "runtime/device.hpp"
#include "runtime/gemm/gemm.hpp"
#include "runtime/gpu/kernel_set.hpp"
#include "runtime/gpu/layer_state.hpp"
#include "runtime/gpu/rank_executor.hpp"
#include "runtime/gpu/state_file.hpp"
#include "runtime/jit.hpp"

namespace fp8c {
namespace {

using runtime::DeviceLayerState;
using runtime::GpuRankExecutor;

ElemType elem(DType d) {
  return d == DType::bf16 ? ElemType::bf16 : d == DType::fp16 ? ElemType::fp16 : ElemType::fp32;
}

std::string describe(const TensorRef& t) {
  return std::string(to_string(elem(t.dtype))) + " [" + std::to_string(t.rows) + ", " +
         std::to_string(t.cols) + "]";
}

}  // namespace

TensorRef from_dlpack(const DLTensor& t) {
  if (t.device.device_type != kDLCUDA)
    throw SessionError("from_dlpack: the tensor is not in CUDA device memory");
  if (t.ndim < 1 || t.ndim > 2)
    throw SessionError("from_dlpack: a tensor of " + std::to_string(t.ndim) +
                       " dims (fp8c takes 1 or 2)");
  TensorRef r;
  r.rows = t.shape[0];
  r.cols = t.ndim == 2 ? t.shape[1] : 1;
  if (t.strides) {
    const bool contiguous =
        t.ndim == 1 ? t.strides[0] == 1 : (t.strides[1] == 1 && t.strides[0] == t.shape[1]);
    if (!contiguous) throw SessionError("from_dlpack: the tensor is not contiguous (row-major)");
  }
  if (t.dtype.lanes != 1) throw SessionError("from_dlpack: vector element types are not supported");
  if (t.dtype.code == kDLBfloat && t.dtype.bits == 16)
    r.dtype = DType::bf16;
  else if (t.dtype.code == kDLFloat && t.dtype.bits == 16)
    r.dtype = DType::fp16;
  else if (t.dtype.code == kDLFloat && t.dtype.bits == 32)
    r.dtype = DType::fp32;
  else
    throw SessionError("from_dlpack: element type code " + std::to_string(t.dtype.code) + " with " +
                       std::to_string(t.dtype.bits) + " bits (fp8c takes bf16, fp16, fp32)");
  r.data = static_cast<char*>(t.data) + t.byte_offset;
  return r;
}

struct Session::Impl {
  Spec spec;
  runtime::NcclBootstrap boot;
  Plan plan;
  runtime::Device device;
  runtime::Jit jit;
  std::unique_ptr<runtime::KernelSet> kernels;
  std::vector<KernelReport> reports;
  std::unique_ptr<runtime::LocalDeviceGroup> group;
  std::unique_ptr<runtime::DeviceCommunicator> comm;
  std::unique_ptr<runtime::GemmRunner> gemm;
  runtime::Stream stream;
  runtime::Stream comm_stream;  // collectives, where a layout asks for overlap
  struct LayerRun {
    const Layer* layer = nullptr;
    const LayerPlan* plan = nullptr;
    std::unique_ptr<DeviceLayerState> state;
    std::unique_ptr<GpuRankExecutor> exec;
    bool forward_done = false;
  };
  std::map<std::string, LayerRun> layers;

  Impl(const std::string& path, const SessionOptions& o)
      : spec(load_spec(path)),
        boot(o.launched ? runtime::nccl_bootstrap_from_process()
                        : runtime::single_rank_bootstrap()),
        plan(plan_for(spec, o, boot.world_size)),
        device(o.launched ? boot.local_rank : o.device),
        jit(device.arch(),
            runtime::CubinCache(o.cache_dir.empty() ? runtime::CubinCache::default_directory()
                                                    : o.cache_dir)) {
    device.make_current();
    std::vector<GeneratedKernel> all;
    std::vector<ElemType> dbias;
    for (const auto& lp : plan.layers) {
      const Layer& layer = *spec.find_layer(lp.layer);
      auto k = runtime::layer_kernels(layer, lp);
      for (auto& g : k.kernels)
        if (std::find(all.begin(), all.end(), g) == all.end()) all.push_back(g);
      for (auto t : k.dbias_outputs)
        if (std::find(dbias.begin(), dbias.end(), t) == dbias.end()) dbias.push_back(t);
    }
    kernels = std::make_unique<runtime::KernelSet>(jit, all, dbias, o.compile_threads);
    for (const auto& c : kernels->compiled())
      reports.push_back(
          {c.name, c.milliseconds, c.cache == runtime::CacheOutcome::hit, c.registers});
    if (o.launched) {
      comm = runtime::make_nccl_communicator(boot, boot.local_rank, o.collective_timeout);
    } else {
      group = std::make_unique<runtime::LocalDeviceGroup>(1, o.collective_timeout, jit);
      comm = group->communicator(0);
    }
    gemm = runtime::make_cublaslt_runner();
    for (const auto& lp : plan.layers) {
      LayerRun run;
      run.layer = spec.find_layer(lp.layer);
      run.plan = &lp;
      run.state = std::make_unique<DeviceLayerState>(*run.layer, lp);
      run.exec = std::make_unique<GpuRankExecutor>(
          *run.layer, lp,
          runtime::RankResources{*kernels, *comm, *gemm, stream.get(), comm_stream.get()},
          *run.state);
      layers.emplace(lp.layer, std::move(run));
    }
  }

  static Plan plan_for(const Spec& spec, const SessionOptions& o, int ranks) {
    PlanOptions p;
    p.ranks = static_cast<std::uint32_t>(ranks);
    p.tokens = o.tokens;
    return plan_spec(spec, p);
  }

  LayerRun& layer(const std::string& name) {
    auto it = layers.find(name);
    if (it == layers.end()) throw SessionError("fp8c: the spec has no layer '" + name + "'");
    return it->second;
  }

  // Binds `t` to plan tensor `key` after checking dtype and shape; the first
  // of `keys` that the plan has is the one.
  void bind(LayerRun& run, std::initializer_list<const char*> keys, const TensorRef& t,
            const char* what) {
    const Tensor* p = nullptr;
    std::string key;
    for (const char* k : keys)
      if ((p = run.plan->find(run.layer->name + "." + k))) {
        key = k;
        break;
      }
    if (!p) throw SessionError("fp8c: layer '" + run.layer->name + "' has no " + what);
    const std::int64_t rows = static_cast<std::int64_t>(p->dims[0].local);
    const std::int64_t cols = static_cast<std::int64_t>(p->dims[1].local);
    if (!t.data)
      throw SessionError("fp8c: layer '" + run.layer->name + "': " + what + " is a null pointer");
    if (elem(t.dtype) != p->type || t.rows * t.cols != rows * cols ||
        (t.cols != cols && !(cols == 1 || rows == 1)))
      throw SessionError("fp8c: layer '" + run.layer->name + "': " + what + " is " + describe(t) +
                         ", the plan needs " + std::string(to_string(p->type)) + " [" +
                         std::to_string(rows) + ", " + std::to_string(cols) + "]");
    run.exec->bind(key, reinterpret_cast<CUdeviceptr>(t.data));
  }
};

Session::Session(const std::string& spec_path, const SessionOptions& options)
    : impl_(std::make_unique<Impl>(spec_path, options)) {}
Session::~Session() = default;

const Spec& Session::spec() const {
  return impl_->spec;
}

std::vector<std::string> Session::layers() const {
  std::vector<std::string> names;
  for (const auto& lp : impl_->plan.layers) names.push_back(lp.layer);
  return names;
}

const std::vector<KernelReport>& Session::kernels() const {
  return impl_->reports;
}

std::vector<std::int64_t> Session::shape(const std::string& layer, const std::string& key) const {
  auto& run = impl_->layer(layer);
  const Tensor* t = run.plan->find(layer + "." + key);
  if (!t) throw SessionError("fp8c: layer '" + layer + "' has no tensor '" + key + "'");
  return {static_cast<std::int64_t>(t->dims[0].local), static_cast<std::int64_t>(t->dims[1].local)};
}

void Session::forward(const std::string& name, const LayerInputs& in, const TensorRef& y,
                      void* stream) {
  auto& run = impl_->layer(name);
  impl_->device.make_current();
  if (run.plan->find(name + ".x.fp8.row") && run.plan->find(name + ".x.fp8.row")->external)
    throw SessionError("fp8c: layer '" + name +
                       "' takes its producer's FP8 output directly; chaining FP8 outputs "
                       "through the host API is not supported yet (use output = bf16)");
  impl_->bind(run, {"x"}, in.x, "input x");
  impl_->bind(run, {"w"}, in.w, "weight w");
  if (run.layer->bias) impl_->bind(run, {"b"}, in.bias, "bias");
  impl_->bind(run, {"y"}, y, "output y");
  run.exec->set_stream(stream ? static_cast<CUstream>(stream) : impl_->stream.get());
  run.exec->forward();
  run.forward_done = true;
}

void Session::backward(const std::string& name, const TensorRef& dy, const LayerGrads& out,
                       void* stream) {
  auto& run = impl_->layer(name);
  if (!run.forward_done)
    throw SessionError("fp8c: backward of layer '" + name + "' without its forward");
  impl_->device.make_current();
  impl_->bind(run, {"dy"}, dy, "output gradient dy");
  impl_->bind(run, {"dx"}, out.dx, "input gradient dx");
  impl_->bind(run, {"dw"}, out.dw, "weight gradient dw");
  if (run.layer->bias) impl_->bind(run, {"db.reduced", "db"}, out.dbias, "bias gradient");
  run.exec->set_stream(stream ? static_cast<CUstream>(stream) : impl_->stream.get());
  run.exec->backward();
  run.forward_done = false;
  try {
    run.exec->update();
  } catch (const runtime::ExecutorError& e) {
    throw SessionError(e.what());
  }
}

void Session::synchronize() {
  impl_->device.make_current();
  impl_->device.synchronize();
}

void Session::save_state(const std::string& path) const {
  impl_->device.make_current();
  runtime::LayerStates states;
  for (auto& [name, run] : impl_->layers) states[name] = run.state->download();
  const std::string text = runtime::format_state_file(states);
  // Atomic: a reader never sees half a file.
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) throw SessionError("fp8c: cannot write " + temporary);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0)
    throw SessionError("fp8c: cannot move " + temporary + " to " + path);
}

void Session::load_state(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SessionError("fp8c: cannot read state file " + path);
  std::stringstream text;
  text << in.rdbuf();
  runtime::LayerStates states;
  try {
    states = runtime::parse_state_file(text.str(), path);
  } catch (const std::exception& e) {
    throw SessionError(e.what());
  }
  // Check every layer before changing any.
  for (const auto& [name, state] : states) {
    auto it = impl_->layers.find(name);
    if (it == impl_->layers.end())
      throw SessionError("fp8c: " + path + ": layer '" + name + "' is not in this spec");
    const DeviceLayerState& d = *it->second.state;
    for (const auto& [key, value] : state.delayed) {
      if (d.index(key) < 0)
        throw SessionError("fp8c: " + path + ": layer '" + name + "' has no delayed scale for '" +
                           key + "'");
      if (!value.history.empty() && value.history.size() != d.history_length())
        throw SessionError("fp8c: " + path + ": layer '" + name + "' tensor '" + key +
                           "': history of " + std::to_string(value.history.size()) +
                           ", the recipe's is " + std::to_string(d.history_length()));
    }
  }
  impl_->device.make_current();
  for (auto& [name, run] : impl_->layers) {
    auto it = states.find(name);
    run.state->upload(it == states.end() ? cpu::LayerState{} : it->second);
  }
}

}  // namespace fp8c
