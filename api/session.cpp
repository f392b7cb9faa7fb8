// fp8c::Session: the host API over the GPU executor (runtime/gpu). One rank
// (the spec planned with tensor_parallel = 1, a one-rank group for the
// collectives a plan may still name), or one rank of a launched job over
// NCCL (collectives/device).
#include "fp8c/session.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "api/session_plan.hpp"
#include "codegen/plan/planner.hpp"
#include "collectives/device/local_device_group.hpp"
#include "collectives/device/nccl_bootstrap.hpp"
#include "collectives/device/nccl_communicator.hpp"
#include "runtime/cubin_cache.hpp"
#include "runtime/device.hpp"
#include "runtime/gemm/gemm.hpp"
#include "runtime/gemm/generated_gemm.hpp"
#include "runtime/gpu/kernel_set.hpp"
#include "runtime/gpu/layer_state.hpp"
#include "runtime/gpu/rank_executor.hpp"
#include "runtime/gpu/state_file.hpp"
#include "runtime/jit.hpp"
#include "runtime/sha256.hpp"

namespace fp8c {
namespace {

using runtime::DeviceLayerState;
using runtime::GpuRankExecutor;

std::string describe(const TensorRef& t) {
  return std::string(to_string(t.dtype)) + " [" + std::to_string(t.rows) + ", " +
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
    r.dtype = ElemType::bf16;
  else if (t.dtype.code == kDLFloat && t.dtype.bits == 16)
    r.dtype = ElemType::fp16;
  else if (t.dtype.code == kDLFloat && t.dtype.bits == 32)
    r.dtype = ElemType::fp32;
  else if (t.dtype.code == kDLUInt && t.dtype.bits == 8)
    r.dtype = ElemType::u8;
  else
    throw SessionError("from_dlpack: element type code " + std::to_string(t.dtype.code) + " with " +
                       std::to_string(t.dtype.bits) +
                       " bits (fp8c takes bf16, fp16, fp32, and uint8 for FP8 bytes)");
  r.data = static_cast<char*>(t.data) + t.byte_offset;
  return r;
}

namespace {

// What this GPU and its cuBLASLt let the lowering use (the device's context
// made current to ask).
LowerOptions lower_options_on(const runtime::Device& device) {
  device.make_current();
  return runtime::cublaslt_lower_options();
}

}  // namespace

struct Session::Impl {
  Spec spec;
  runtime::NcclBootstrap boot;
  runtime::Device device;
  SessionPlan planned;  // the plan and its lowering for this GPU
  const Plan& plan;
  const LoweredPlan& lowered;
  runtime::Jit jit;
  std::unique_ptr<runtime::KernelSet> kernels;
  std::vector<KernelReport> reports;
  std::unique_ptr<runtime::LocalDeviceGroup> group;
  std::unique_ptr<runtime::DeviceCommunicator> comm;
  std::unique_ptr<runtime::GemmRunner> gemm;
  std::unique_ptr<runtime::GeneratedGemmRunner> generated_gemm;  // GEMMs lowered onto it
  // Blocking: work on the legacy default stream (a framework's stream 0)
  // before a call is finished before the session's work starts, and after.
  runtime::Stream stream{true};
  runtime::Stream comm_stream;  // collectives, where a layout asks for overlap
  runtime::Stream side_stream;  // work beside the GEMMs (codegen/lower/schedule.hpp)
  struct LayerRun {
    const Layer* layer = nullptr;
    const LayerPlan* plan = nullptr;
    std::unique_ptr<DeviceLayerState> state;
    std::unique_ptr<GpuRankExecutor> exec;
    bool forward_done = false;
    // The end of forward, for a backward enqueued on another stream.
    std::unique_ptr<runtime::Event> forward_end;
    CUstream forward_stream = nullptr;
    // The end of the last update, for a producer's forward on another
    // stream (it reads the scale that update wrote, and writes the amax
    // that update read).
    std::unique_ptr<runtime::Event> update_end;
    CUstream update_stream = nullptr;
    // A chain in FP8 (`output = fp8` into a delayed-scaling consumer): the
    // producer's epilogue quantizes with the consumer's input scale, read
    // from the consumer's state, and writes its output amax into the
    // consumer's amax slot; the caller hands the FP8 buffer over.
    LayerRun* fp8_consumer = nullptr;
    LayerRun* fp8_producer = nullptr;
    CUdeviceptr fp8_output = 0;  // the y of the last forward, when it is FP8
    // Backward of such a chain, where the consumer's dgrad hands the
    // producer FP8 dz (LayerIo::dx_fp8_col): the consumer's dx of this step
    // (0 once the producer's backward took it).
    bool hands_dz = false;
    CUdeviceptr fp8_dx = 0;
    // The FP8 weight cache: the version and address the kept FP8 weight
    // was cast from (version 0: nothing kept), and under
    // check_weight_cache the digest of the bytes cast.
    bool weight_cache = false;
    std::uint64_t cast_version = 0;
    CUdeviceptr cast_from = 0;
    runtime::Digest cast_digest{};
  };
  std::map<std::string, LayerRun> layers;
  bool check_weight_cache = false;

  Impl(const std::string& path, const SessionOptions& o)
      : spec(load_spec(path)),
        boot(o.launched ? runtime::nccl_bootstrap_from_process()
                        : runtime::single_rank_bootstrap()),
        device(o.launched ? boot.local_rank : o.device),
        planned(plan_session(spec, o, boot.world_size, lower_options_on(device))),
        plan(planned.plan),
        lowered(planned.lowered),
        jit(device.arch(),
            runtime::CubinCache(o.cache_dir.empty() ? runtime::CubinCache::default_directory()
                                                    : o.cache_dir),
            spec.backend) {
    device.make_current();
    check_weight_cache = o.check_weight_cache;
    // What runs is what the lowering says, and what it lists is what is
    // compiled (`fp8c compile` lists the same kernels).
    if (!lowered.unsupported.empty()) {
      std::string m = "gpu executor: the spec cannot run on the GPU yet:";
      for (const auto& u : lowered.unsupported) m += "\n  " + u;
      throw runtime::ExecutorError(m);
    }
    kernels = std::make_unique<runtime::KernelSet>(jit, lowered.kernel_list(), o.compile_threads);
    for (const auto& c : kernels->compiled())
      reports.push_back(
          {c.name, c.milliseconds, c.cache == runtime::CacheOutcome::hit, c.registers, c.compiler});
    if (o.launched) {
      comm = runtime::make_nccl_communicator(boot, boot.local_rank, o.collective_timeout);
    } else {
      group = std::make_unique<runtime::LocalDeviceGroup>(1, o.collective_timeout, jit);
      comm = group->communicator(0);
    }
    gemm = runtime::make_cublaslt_runner();
    generated_gemm = runtime::make_generated_gemm_runner(jit);
    for (const auto& lp : plan.layers) {
      LayerRun run;
      run.layer = spec.find_layer(lp.layer);
      run.plan = &lp;
      run.state = std::make_unique<DeviceLayerState>(*run.layer, lp);
      run.exec = std::make_unique<GpuRankExecutor>(
          *run.layer, lp, *lowered.find(lp.layer),
          runtime::RankResources{*kernels, *comm, *gemm, stream.get(), comm_stream.get(),
                                 generated_gemm.get(), side_stream.get()},
          *run.state);
      run.exec->set_graphs(o.graphs);
      run.weight_cache = o.weight_cache || run.layer->weight_cache;
      if (run.weight_cache) run.exec->enable_weight_cache();
      layers.emplace(lp.layer, std::move(run));
    }
    for (auto& [name, run] : layers)
      if (run.plan->io.y_fp8 != kNoTensor) connect_fp8_chain(run);
    // The generated GEMM's configurations, compiled now rather than in the
    // first step, and reported with the other kernels.
    for (auto& [name, run] : layers) run.exec->prepare_gemms();
    for (const auto& c : generated_gemm->loaded_kernels())
      reports.push_back(
          {c.name, c.milliseconds, c.cache == runtime::CacheOutcome::hit, c.registers, c.compiler});
  }

  // Points the producer's FP8 output scale and amax at its consumer's
  // input scale and amax (what the CPU chain copies: cpu::run_chain).
  void connect_fp8_chain(LayerRun& producer) {
    LayerRun* consumer = nullptr;
    for (auto& [name, run] : layers)
      if (run.plan->io.x_fp8 != kNoTensor && run.layer->input == producer.layer->name)
        consumer = &run;
    const LayerIo& out = producer.plan->io;
    if (!consumer || out.y_scale == kNoTensor || out.y_amax == kNoTensor)
      throw runtime::ExecutorError("gpu executor: layer '" + producer.layer->name +
                                   "' writes FP8 output for a consumer the plan does not have");
    const LayerIo& in = consumer->plan->io;
    const int input_scale = consumer->plan->tensor(in.x_fp8).scale;
    producer.exec->bind_scale(out.y_scale, consumer->exec->scale_pair(input_scale));
    producer.exec->bind(out.y_amax, consumer->exec->address(in.x_amax));
    // The columnwise copy the producer's GEMM writes beside y: straight
    // into the consumer's input, which only its wgrad reads.
    if ((out.y_fp8_col == kNoTensor) != (in.x_fp8_col == kNoTensor))
      throw runtime::ExecutorError(
          "gpu executor: layers '" + producer.layer->name + "' and '" + consumer->layer->name +
          "' disagree on who makes the columnwise copy of the FP8 hand-over");
    if (out.y_fp8_col != kNoTensor)
      producer.exec->bind(out.y_fp8_col, consumer->exec->address(in.x_fp8_col));
    // Backward: the consumer's dgrad epilogue writes the producer's dz with
    // the producer's scale, into its amax, columnwise copy and dbias, from
    // its z (what the CPU chain hands over: RankExecutor::hand_dx_to).
    if ((in.dx_fp8_col == kNoTensor) != (out.dy_fp8_col == kNoTensor) ||
        (in.dx_db == kNoTensor) != (out.dy_db == kNoTensor) ||
        (in.dx_dact_input != kNoTensor && out.z == kNoTensor))
      throw runtime::ExecutorError("gpu executor: layers '" + producer.layer->name + "' and '" +
                                   consumer->layer->name +
                                   "' disagree on who makes the FP8 gradient");
    if (in.dx_fp8_col != kNoTensor) {
      // Each bound pair has the same extents and type on both sides.
      const auto check = [&](int from, int to) {
        const Tensor& a = consumer->plan->tensor(from);
        const Tensor& b = producer.plan->tensor(to);
        if (a.type != b.type || a.dims[0].local != b.dims[0].local ||
            a.dims[1].local != b.dims[1].local)
          throw runtime::ExecutorError("gpu executor: " + a.name + " does not fit " + b.name +
                                       " (extents or type differ)");
      };
      check(in.dx, out.dy);
      check(in.dx_fp8_col, out.dy_fp8_col);
      if (in.dx_dact_input != kNoTensor) check(in.dx_dact_input, out.z);
      if (in.dx_db != kNoTensor) check(in.dx_db, out.dy_db);
      const int dz_scale = producer.plan->tensor(out.dy).scale;
      consumer->exec->bind_scale(in.dx_scale, producer.exec->scale_pair(dz_scale));
      consumer->exec->bind(in.dx_amax, producer.exec->address(out.dy_amax));
      consumer->exec->bind(in.dx_fp8_col, producer.exec->address(out.dy_fp8_col));
      if (in.dx_dact_input != kNoTensor)
        consumer->exec->bind(in.dx_dact_input, producer.exec->address(out.z));
      if (in.dx_db != kNoTensor) consumer->exec->bind(in.dx_db, producer.exec->address(out.dy_db));
      consumer->hands_dz = true;
    }
    producer.fp8_consumer = consumer;
    consumer->fp8_producer = &producer;
  }

  // The plan tensor behind a caller's key ("x", "w", "y", "dw", ...): x and
  // y are the FP8 hand-over of a chain where the plan has one.
  int io_tensor(const LayerRun& run, const std::string& layer, const std::string& key) const {
    const LayerIo& io = run.plan->io;
    const std::pair<const char*, int> names[] = {{"x", io.x != kNoTensor ? io.x : io.x_fp8},
                                                 {"w", io.w},
                                                 {"b", io.b},
                                                 {"y", io.y != kNoTensor ? io.y : io.y_fp8},
                                                 {"dy", io.dy},
                                                 {"dx", io.dx},
                                                 {"dw", io.dw},
                                                 {"db", io.db}};
    for (const auto& [name, id] : names)
      if (key == name && id != kNoTensor) return id;
    throw SessionError("fp8c: layer '" + layer + "' has no tensor '" + key + "'");
  }

  LayerRun& layer(const std::string& name) {
    auto it = layers.find(name);
    if (it == layers.end()) throw SessionError("fp8c: the spec has no layer '" + name + "'");
    return it->second;
  }

  // Binds `t` to plan tensor `id` after checking dtype and shape. An FP8
  // tensor (a chain's hand-over) may come as its format or as raw bytes (u8).
  void bind(LayerRun& run, int id, const TensorRef& t, const char* what) {
    if (id == kNoTensor) throw SessionError("fp8c: layer '" + run.layer->name + "' has no " + what);
    const Tensor* p = &run.plan->tensor(id);
    const std::int64_t rows = static_cast<std::int64_t>(p->dims[0].local);
    const std::int64_t cols = static_cast<std::int64_t>(p->dims[1].local);
    if (!t.data)
      throw SessionError("fp8c: layer '" + run.layer->name + "': " + what + " is a null pointer");
    const bool fp8 = is_fp8(p->type);
    if (!fp8 && !is_high_precision(t.dtype))
      throw SessionError("fp8c: layer '" + run.layer->name + "': " + what + " is " + describe(t) +
                         "; tensors are bf16, fp16 or fp32");
    const bool type_ok = t.dtype == p->type || (fp8 && t.dtype == ElemType::u8);
    if (!type_ok || t.rows * t.cols != rows * cols || (t.cols != cols && !(cols == 1 || rows == 1)))
      throw SessionError("fp8c: layer '" + run.layer->name + "': " + what + " is " + describe(t) +
                         ", the plan needs " + std::string(to_string(p->type)) + " [" +
                         std::to_string(rows) + ", " + std::to_string(cols) + "]");
    // The kernels load 16 bytes at a time from aligned tensors; a pointer
    // on another device would fault the whole context.
    const auto address = reinterpret_cast<CUdeviceptr>(t.data);
    if (address % 16 != 0)
      throw SessionError("fp8c: layer '" + run.layer->name + "': " + what +
                         " is not 16-byte aligned (" + std::to_string(address % 16) +
                         " bytes past a boundary)");
    int ordinal = -1;
    if (runtime::driver().cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                                address) != CUDA_SUCCESS ||
        ordinal != device.ordinal())
      throw SessionError("fp8c: layer '" + run.layer->name + "': " + what +
                         " is not device memory of GPU " + std::to_string(device.ordinal()));
    run.exec->bind(id, address);
  }

  // The SHA-256 of a weight's bytes as they are once `stream` is done.
  runtime::Digest weight_digest(const LayerRun& run, CUstream stream) {
    const Tensor& w = run.plan->tensor(run.plan->io.w);
    std::vector<unsigned char> bytes(w.bytes());
    FP8C_CU(runtime::driver().cuStreamSynchronize(stream));
    FP8C_CU(runtime::driver().cuMemcpyDtoH(bytes.data(), run.exec->address(run.plan->io.w),
                                           bytes.size()));
    return runtime::Sha256().update(bytes.data(), bytes.size()).finish();
  }

  // Runs `body`, turning the executor's errors into SessionError.
  template <typename Body>
  void step(const std::string& layer, Body&& body) {
    try {
      body();
    } catch (const runtime::ExecutorError& e) {
      throw SessionError(e.what());
    } catch (const collectives::CollectiveError& e) {
      throw SessionError("fp8c: layer '" + layer + "': " + e.what());
    }
  }

  // Everything enqueued by any layer has finished (collectives through the
  // communicator, so a hung one fails within its timeout).
  void finish_all() {
    device.make_current();
    comm->synchronize(comm_stream.get());
    comm->synchronize(stream.get());
    // Callers' streams too (they may have been destroyed since: a context
    // synchronize does not name them). A hung collective there ends when
    // the watchdog aborts it.
    device.synchronize();
    if (comm->poisoned())
      throw SessionError("fp8c: a collective failed; the session's communicator is unusable");
  }
};

std::unique_ptr<Session::Impl> Session::open(const std::string& path, const SessionOptions& o) {
  try {
    return std::make_unique<Session::Impl>(path, o);
  } catch (const PlanError& e) {
    throw SessionError("fp8c: " + path + ": " + e.what());
  } catch (const runtime::ExecutorError& e) {
    throw SessionError("fp8c: " + path + ": " + e.what());
  }
}

Session::Session(const std::string& spec_path, const SessionOptions& options)
    : impl_(open(spec_path, options)) {}
Session::~Session() {
  // Buffers and modules are freed below: nothing of ours may still run.
  try {
    impl_->finish_all();
  } catch (...) {
  }
}

const Spec& Session::spec() const {
  return impl_->spec;
}
int Session::rank() const {
  return impl_->comm->rank();
}
int Session::ranks() const {
  return impl_->comm->size();
}

std::vector<std::string> Session::layers() const {
  std::vector<std::string> names;
  for (const auto& lp : impl_->plan.layers) names.push_back(lp.layer);
  return names;
}

const std::vector<KernelReport>& Session::kernels() const {
  return impl_->reports;
}

std::vector<GraphReport> Session::graph_report() const {
  std::vector<GraphReport> out;
  for (const auto& lp : impl_->plan.layers) {
    const GpuRankExecutor& e = *impl_->layers.at(lp.layer).exec;
    const auto counts = e.graph_counts();
    out.push_back({lp.layer, counts.eager, counts.captured, counts.replayed,
                   e.graph_disabled("forward"), e.graph_disabled("backward")});
  }
  return out;
}

std::vector<std::int64_t> Session::shape(const std::string& layer, const std::string& key) const {
  auto& run = impl_->layer(layer);
  const Tensor& t = run.plan->tensor(impl_->io_tensor(run, layer, key));
  return {static_cast<std::int64_t>(t.dims[0].local), static_cast<std::int64_t>(t.dims[1].local)};
}

DType Session::dtype(const std::string& layer, const std::string& key) const {
  auto& run = impl_->layer(layer);
  return run.plan->tensor(impl_->io_tensor(run, layer, key)).type;
}

void Session::forward(const std::string& name, const LayerInputs& in, const TensorRef& y,
                      void* stream) {
  auto& run = impl_->layer(name);
  impl_->device.make_current();
  const LayerIo& io = run.plan->io;
  const CUstream s = stream ? static_cast<CUstream>(stream) : impl_->stream.get();
  if (Impl::LayerRun* producer = run.fp8_producer) {
    // The input is the producer's FP8 output of this step, as written.
    const std::string from = producer->layer->name;
    if (!producer->forward_done)
      throw SessionError("fp8c: layer '" + name + "' takes its input in FP8 from '" + from +
                         "': run '" + from + "' forward first, in the same step");
    if (reinterpret_cast<CUdeviceptr>(in.x.data) != producer->fp8_output)
      throw SessionError("fp8c: layer '" + name + "': input x must be the FP8 output y that '" +
                         from + "' forward wrote in this step (its scale and amax come with it)");
    impl_->bind(run, io.x_fp8, in.x, "input x");
    if (s != producer->forward_stream)
      FP8C_CU(runtime::driver().cuStreamWaitEvent(s, producer->forward_end->get(), 0));
  } else {
    impl_->bind(run, io.x, in.x, "input x");
  }
  impl_->bind(run, io.w, in.w, "weight w");
  if (run.layer->bias) impl_->bind(run, io.b, in.bias, "bias");
  if (Impl::LayerRun* consumer = run.fp8_consumer) {
    impl_->bind(run, io.y_fp8, y, "output y");
    // The epilogue reads the consumer's scale, which its last update wrote,
    // and writes the amax that update read.
    if (consumer->update_end && s != consumer->update_stream)
      FP8C_CU(runtime::driver().cuStreamWaitEvent(s, consumer->update_end->get(), 0));
  } else {
    impl_->bind(run, io.y, y, "output y");
  }
  run.exec->set_stream(s);
  // The FP8 weight cache: the kept cast serves a weight of the same version
  // at the same address.
  const auto w_at = reinterpret_cast<CUdeviceptr>(in.w.data);
  const bool kept = run.weight_cache && in.w_version != 0 && in.w_version == run.cast_version &&
                    w_at == run.cast_from;
  if (kept && impl_->check_weight_cache && impl_->weight_digest(run, s) != run.cast_digest)
    throw SessionError("fp8c: layer '" + name + "': weight w changed but its version (" +
                       std::to_string(in.w_version) +
                       ") did not; bump LayerInputs::w_version whenever the weight changes");
  if (run.weight_cache) run.exec->set_weight_cached(kept);
  if (run.weight_cache && !kept) run.cast_version = 0;  // until this cast is enqueued
  impl_->step(name, [&] { run.exec->forward(); });
  if (run.weight_cache && !kept && in.w_version != 0) {
    run.cast_version = in.w_version;
    run.cast_from = w_at;
    if (impl_->check_weight_cache) run.cast_digest = impl_->weight_digest(run, s);
  }
  if (!run.forward_end) run.forward_end = std::make_unique<runtime::Event>();
  run.forward_end->record(s);
  run.forward_stream = s;
  run.forward_done = true;
  run.fp8_output = run.fp8_consumer ? reinterpret_cast<CUdeviceptr>(y.data) : 0;
  // A dz its consumer handed over before this forward belongs to an earlier
  // step: this step's backward takes only the one written after it.
  if (run.fp8_consumer && run.fp8_consumer->hands_dz) run.fp8_consumer->fp8_dx = 0;
}

void Session::backward(const std::string& name, const TensorRef& dy, const LayerGrads& out,
                       void* stream) {
  auto& run = impl_->layer(name);
  if (!run.forward_done)
    throw SessionError("fp8c: backward of layer '" + name + "' without its forward");
  impl_->device.make_current();
  const LayerIo& io = run.plan->io;
  const CUstream s = stream ? static_cast<CUstream>(stream) : impl_->stream.get();
  Impl::LayerRun* consumer = run.fp8_consumer;
  if (consumer && consumer->hands_dz) {
    // dy is the FP8 dz the consumer's backward wrote in this step.
    const std::string from = consumer->layer->name;
    if (consumer->fp8_dx == 0)
      throw SessionError("fp8c: layer '" + name + "' takes its gradient in FP8 from '" + from +
                         "': run '" + from + "' backward first, in the same step");
    if (reinterpret_cast<CUdeviceptr>(dy.data) != consumer->fp8_dx)
      throw SessionError("fp8c: layer '" + name +
                         "': output gradient dy must be the FP8 input gradient dx that '" + from +
                         "' backward wrote in this step (its amax and bias gradient come with it)");
  }
  impl_->bind(run, io.dy, dy, "output gradient dy");
  impl_->bind(run, io.dx, out.dx, "input gradient dx");
  impl_->bind(run, io.dw, out.dw, "weight gradient dw");
  if (run.layer->bias) impl_->bind(run, io.db, out.dbias, "bias gradient");
  if (consumer && consumer->hands_dz && s != consumer->update_stream)
    FP8C_CU(runtime::driver().cuStreamWaitEvent(s, consumer->update_end->get(), 0));
  if (run.hands_dz && run.fp8_producer && run.fp8_producer->update_end &&
      s != run.fp8_producer->update_stream)
    // The dgrad epilogue reads the producer's gradient scale, which its last
    // update wrote, and writes the amax that update read.
    FP8C_CU(runtime::driver().cuStreamWaitEvent(s, run.fp8_producer->update_end->get(), 0));
  // Backward reads what forward saved (z, the FP8 copies): on another
  // stream it waits for forward's end.
  if (s != run.forward_stream)
    FP8C_CU(runtime::driver().cuStreamWaitEvent(s, run.forward_end->get(), 0));
  run.exec->set_stream(s);
  run.forward_done = false;
  impl_->step(name, [&] { run.exec->backward_and_update(); });
  if (consumer && consumer->hands_dz) consumer->fp8_dx = 0;  // taken
  if (!run.update_end) run.update_end = std::make_unique<runtime::Event>();
  run.update_end->record(s);
  run.update_stream = s;
  if (run.hands_dz) run.fp8_dx = reinterpret_cast<CUdeviceptr>(out.dx.data);
}

void Session::synchronize() {
  impl_->step("(all)", [&] {
    impl_->finish_all();
    // Each layer's NaN verdict (nan = error), now known.
    for (auto& [name, run] : impl_->layers) run.exec->check_nan_verdict();
  });
}

void Session::save_state(const std::string& path) const {
  // The scale updates still in flight land first.
  impl_->step("(all)", [&] { impl_->finish_all(); });
  runtime::LayerStates states;
  for (auto& [name, run] : impl_->layers) states[name] = run.state->download();
  std::string text;
  try {
    text = runtime::format_state_file(states);
  } catch (const std::exception& e) {
    throw SessionError(std::string("fp8c: cannot save the state: ") + e.what());
  }
  // Atomic and durable: written under a name of this process's own, flushed
  // to disk, then renamed over `path`; a reader sees the old file or the new.
  const std::string temporary =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rank());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw SessionError("fp8c: cannot create " + temporary + ": " + std::strerror(errno));
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n <= 0) break;
    written += static_cast<std::size_t>(n);
  }
  const bool ok = written == text.size() && ::fsync(fd) == 0;
  const bool closed = ::close(fd) == 0;
  if (!ok || !closed || std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(temporary.c_str());
    throw SessionError("fp8c: cannot write the state to " + path + ": " + why);
  }
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
  // No scale update may land after the loaded values.
  impl_->step("(all)", [&] { impl_->finish_all(); });
  for (auto& [name, run] : impl_->layers) {
    auto it = states.find(name);
    run.state->upload(it == states.end() ? cpu::LayerState{} : it->second);
  }
}

}  // namespace fp8c
