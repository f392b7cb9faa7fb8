// fp8c's host API: load a .fp8 spec once at start-up (checked, planned, its
// kernels JIT-compiled), then run its layers forward and backward on device
// memory, step after step. Each layer owns its FP8 state (amax histories and
// scales), which saves to and restores from a file.
//
//   fp8c::SessionOptions o;
//   o.tokens = 8192;
//   fp8c::Session s("examples/gpt_mlp.fp8", o);
//   s.forward("fc1", {x, w, b}, y);
//   ...
//   s.backward("fc1", dy, {dx, dw, db});   // ends fc1's step: scale update
//
// Shapes are this rank's shards, as `fp8c plan FILE --tokens M` prints them.
// Errors are exceptions: fp8c::SpecError (file:line:col messages) for the
// spec, SessionError for bad arguments, a spec fp8c cannot plan or run, or a
// failed step (a kernel, GEMM or collective error, a NaN under `nan =
// error`), and the runtime's Unavailable when libcuda, libnvrtc, libcublasLt
// or libnccl is missing. A step that fails before its scale update (a NaN
// under `nan = error`, on any rank) leaves the layer's state as it was.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <dlpack/dlpack.h>

#include "fp8c/dsl.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {

// A row-major 2-D (or 1-D, for bias) tensor in device memory.
struct TensorRef {
  void* data = nullptr;
  // bf16, fp16 or fp32; e4m3 or e5m2 (or u8, as raw bytes) for an FP8
  // chain's hand-over (else SessionError where it is used)
  DType dtype = DType::bf16;
  std::int64_t rows = 0;
  std::int64_t cols = 1;
};

// A DLPack tensor (PyTorch, CuPy, JAX) as a TensorRef, without a copy: a
// contiguous CUDA tensor of 1 or 2 dims in bf16, fp16 or fp32, or uint8 (an
// FP8 tensor viewed as bytes: DLPack 0.6 has no FP8 codes). Throws
// SessionError naming what does not fit.
TensorRef from_dlpack(const DLTensor& tensor);

class SessionError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Device memory owned by fp8c, for programs that have no framework of their
// own to allocate with (the examples, the benchmarks). Allocated on the
// device whose context is current: create a Session first. bf16, fp16,
// fp32, or e4m3/e5m2 (upload rounds to nearest even, saturating to the
// format's largest finite value; download reads the codes back as floats).
class DeviceTensor {
 public:
  DeviceTensor(DType dtype, std::int64_t rows, std::int64_t cols = 1);
  ~DeviceTensor();
  DeviceTensor(DeviceTensor&&) noexcept;
  DeviceTensor& operator=(DeviceTensor&&) noexcept;
  const TensorRef& ref() const { return ref_; }
  operator const TensorRef&() const { return ref_; }
  // Values rounded to nearest even into the tensor's dtype, and back.
  void upload(const std::vector<float>& values);
  std::vector<float> download() const;

 private:
  TensorRef ref_;
};

struct SessionOptions {
  std::uint64_t tokens = 8192;   // tokens per step over the whole group (M)
  int device = 0;                // CUDA device ordinal
  std::string cache_dir;         // kernel cache; empty: FP8C_CACHE_DIR or ~/.cache/fp8c
  unsigned compile_threads = 0;  // 0: one per core
  std::chrono::milliseconds collective_timeout{60'000};
  // This process is one rank of a job started by a launcher (torchrun-style
  // RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, or mpirun's):
  // the spec is planned for WORLD_SIZE ranks, runs on GPU LOCAL_RANK (not
  // `device`), and its collectives go over NCCL. Otherwise: one rank.
  bool launched = false;
  // CUDA Graphs: each layer's forward, and its backward with the update,
  // enqueued as one graph launch once a step has run twice on the same
  // tensors (the first run eager, the second captured, replays after; a
  // tensor at another address re-captures). Off: every launch one by one.
  // Passes whose collectives cannot be captured (several ranks in one
  // process; NCCL, for now) stay eager either way: graph_report() says so.
  bool graphs = true;
  // The FP8 weight cache for every layer (as `weight_cache = true` in each):
  // a forward whose LayerInputs::w_version is the one the layer's kept FP8
  // weight was cast from, at the same address, skips the weight's casts.
  bool weight_cache = false;
  // Debug: on every skip, check that the weight's bytes are the ones cast
  // (a SHA-256 kept at the cast, compared after waiting for the stream): a
  // weight changed under an unchanged version is a SessionError before the
  // step runs. Slow (the weight is copied to the host); for finding the bug.
  bool check_weight_cache = false;
};

struct LayerInputs {
  TensorRef x, w, bias;  // bias.data null when the layer has none
  // The weight's version, for the FP8 weight cache (`weight_cache = true`,
  // SessionOptions::weight_cache): bump it whenever w changes (after each
  // optimizer step); micro-batches of one step pass the same version and
  // the weight is cast once. 0: unversioned, cast at every forward.
  std::uint64_t w_version = 0;
};
struct LayerGrads {
  TensorRef dx, dw, dbias;  // dw is fp32; dbias.data null when the layer has none
};

// How a layer's passes have been enqueued so far (SessionOptions::graphs).
struct GraphReport {
  std::string layer;
  int eager = 0, captured = 0, replayed = 0;  // passes, forward and backward together
  std::string forward_not_captured;           // why forward is not a graph ("" where it is)
  std::string backward_not_captured;          // ... backward with the update
};

struct KernelReport {
  std::string name;
  double compile_ms = 0;
  bool cache_hit = false;
  int registers = 0;
  std::string compiler;  // e.g. "nvrtc 13.0", "llvm 19.1.7 + nvJitLink 13.0"
};

class Session {
 public:
  // One rank (every layer planned with tensor_parallel = 1), or, with
  // `launched`, this process's rank of a multi-process job over NCCL.
  Session(const std::string& spec_path, const SessionOptions& options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const Spec& spec() const;
  int rank() const;
  int ranks() const;
  std::vector<std::string> layers() const;
  const std::vector<KernelReport>& kernels() const;
  std::vector<GraphReport> graph_report() const;
  // Shape and element type of this rank's tensor `key` ("x", "w", "y",
  // "dw", ...) in `layer`.
  std::vector<std::int64_t> shape(const std::string& layer, const std::string& key) const;
  DType dtype(const std::string& layer, const std::string& key) const;

  // Enqueue on `stream` (a CUstream; null: the session's own stream, which
  // is ordered with the legacy default stream 0). forward keeps what
  // backward needs; the caller's x (when the layer saves its original
  // input) and w (read again by a high-precision dgrad: recipe none or a
  // debug fallback) must stay valid and unchanged until backward. A
  // backward on another stream than its forward waits for the forward.
  // Tensors must be device memory of the session's GPU, 16-byte aligned.
  //
  // FP8 chains: where a layer has `output = fp8` and its one consumer uses
  // delayed scaling, the producer's y is FP8 (dtype(producer, "y"): e4m3 or
  // e5m2, or u8 for raw bytes), quantized by the producer's GEMM epilogue
  // with the consumer's current input scale; the consumer's forward takes
  // that same buffer as its x, in the same step, after the producer's
  // forward (the output amax goes to the consumer's history with it). The
  // buffer is free again once the consumer's forward is enqueued. Under
  // current scaling the plan writes y in high precision instead (the
  // producer cannot know a scale computed from the consumer's input): `fp8c
  // plan` notes it. Backward, where the plan has the consumer's dgrad hand
  // the producer FP8 dz (docs/language.md, FP8 hand-over: a delayed
  // producer, one rank or a row-parallel consumer), the consumer's dx is
  // that dz (dtype(consumer, "dx"): the producer's backward format), and the
  // producer's backward, after the consumer's in the same step, takes that
  // same buffer as its dy (its amax, columnwise copy and bias gradient come
  // with it; the session orders the two on the callers' streams).
  void forward(const std::string& layer, const LayerInputs& in, const TensorRef& y,
               void* stream = nullptr);
  // Backward and the end of the layer's step: enqueues the scale update and,
  // under `nan = error`, the step's NaN verdict, taken on the GPU and agreed
  // over the group there: nothing waits for the GPU. On a NaN the update
  // writes nothing (the state stays as it was) and the error (naming the
  // tensor) is thrown once, by synchronize() or by the layer's next forward
  // (which waits for that verdict), on every rank at the same call.
  void backward(const std::string& layer, const TensorRef& dy, const LayerGrads& out,
                void* stream = nullptr);
  // Waits for everything enqueued; throws a NaN verdict not yet reported.
  void synchronize();

  // Every layer's FP8 state, after the work already enqueued. load_state
  // checks the whole file (format, checksum, layer and tensor names, history
  // lengths, values) before changing any layer; a bad file changes nothing.
  // Layers and tensors the file does not name go back to their initial
  // state (scale 1, empty history). save_state refuses a state it could not
  // load back (a non-finite scale after a NaN under `nan = propagate`).
  void save_state(const std::string& path) const;
  void load_state(const std::string& path);

 private:
  struct Impl;
  // The Impl, with planning and executor errors turned into SessionError.
  static std::unique_ptr<Impl> open(const std::string& path, const SessionOptions& options);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8c
