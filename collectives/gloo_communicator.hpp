// The gloo backend: real TCP collectives between ranks that are threads of
// one process or separate processes (loopback by default). gloo stays out of
// this header so that users of the communicator do not need its headers.
//
// Semantics are the same as the in-process backend, bit for bit:
// - all_gather and broadcast move bytes with gloo's allgather and broadcast;
// - ring_shift is real point to point: an unbound-buffer send to the next
//   rank and a receive from the previous one (no gather);
// - reductions do NOT use gloo's reduction algorithms, whose combining order
//   depends on the ring/tree position and chunking and which have no
//   bfloat16 type. reduce_scatter moves each rank's blocks with gloo's
//   alltoall, all_reduce gathers all contributions with gloo's allgather, and
//   both then reduce locally with reduce_in_rank_order (collectives/reduce.hpp).
//   That costs size() times the memory of the result and is meant for the
//   CPU reference executor, not for speed;
// - before every collective the ranks exchange a small descriptor of their
//   call (kind, sequence, count, dtype, op, root), so a mismatch fails on
//   every rank with the same message instead of hanging or misreading bytes.
//   The exchange also makes barrier() a real barrier.
// Every gloo operation gets the time left until the collective's deadline as
// its timeout, so a collective never takes much longer than timeout().
//
// gloo writes to sockets without MSG_NOSIGNAL: a peer that died would kill
// this process with SIGPIPE. connect_gloo therefore sets SIGPIPE to SIG_IGN
// when it is at its default (as Python, and so PyTorch, already does).
//
// The backend itself is a module, libfp8c_gloo.so, which is the only part of
// fp8c that needs libgloo.so.0 (the GPU machine has no gloo). It is loaded
// once per process, the first time a store or group is asked for, from the
// first place that has it, in common/module_loader.hpp's search order
// ($FP8C_GLOO_MODULE, a module already in the process such as the
// collectives tests', next to libfp8c.so or the program, the install
// libdir, the dynamic linker's search); collectives/gloo_module.hpp has the
// ABI.
// When none loads, everything that needs gloo throws GlooUnavailable naming
// the module, each place tried and why it failed (dlerror()); the rest of
// fp8c, the in-process backend included, works as before.
#pragma once

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

#include "collectives/communicator.hpp"
#include "collectives/rank_threads.hpp"

namespace fp8c::collectives {

// Where the ranks of a gloo group find each other's addresses.
class GlooRendezvousStore {
 public:
  // Both factories load the gloo module (throwing GlooUnavailable when it
  // cannot be loaded).
  // A map in this process's memory: ranks are threads sharing this object.
  static std::shared_ptr<GlooRendezvousStore> in_memory();
  // Files in `directory` (created if missing): ranks are processes that see
  // the same filesystem. Use a fresh directory, or a fresh GlooOptions::prefix,
  // for every group: keys from an earlier group would be read as this one's.
  static std::shared_ptr<GlooRendezvousStore> file_system(const std::string& directory);

  ~GlooRendezvousStore();
  GlooRendezvousStore(const GlooRendezvousStore&) = delete;
  GlooRendezvousStore& operator=(const GlooRendezvousStore&) = delete;

  struct Impl;  // the module's gloo::rendezvous::Store, and the module
  Impl& impl() { return *impl_; }

 private:
  explicit GlooRendezvousStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct GlooOptions {
  // Bounds connecting and every collective.
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;
  // Address this rank listens on; loopback keeps test groups off the network.
  std::string hostname = "127.0.0.1";
  // Namespace of this group's keys in the store, so that several groups can
  // share one store.
  std::string prefix = "fp8c";
};

// The gloo module cannot be loaded (or is from another build of fp8c).
class GlooUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Loads the gloo module if it is not loaded yet. Empty when the gloo backend
// can be used; otherwise the message GlooUnavailable carries. The outcome is
// decided once per process.
std::string gloo_unavailable_reason();
inline bool gloo_available() {
  return gloo_unavailable_reason().empty();
}
// The file the module was loaded from (loading it if needed); empty when it
// cannot be loaded.
std::string gloo_module_path();

// Joins the gloo group of `size` ranks as `rank`: blocks until every rank has
// connected to every other (a full TCP mesh). Throws CollectiveError
// (operation "connect") when a rank does not show up within options.timeout
// or a socket fails, GlooUnavailable when the module cannot be loaded.
//
// Before destroying a communicator whose peers may still be receiving from
// it, call barrier(): closing a socket with data in flight resets it.
std::unique_ptr<Communicator> connect_gloo(int rank, int size,
                                           std::shared_ptr<GlooRendezvousStore> store,
                                           const GlooOptions& options = {});

// A factory for `size` ranks that are threads of this process, meeting in a
// fresh in-memory store (for run_ranks). Creating the store loads the module,
// so GlooUnavailable comes from here, before any rank has started.
CommunicatorFactory gloo_thread_ranks(int size, const GlooOptions& options = {});

}  // namespace fp8c::collectives
