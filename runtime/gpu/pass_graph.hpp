// One pass of a layer (forward, or backward with its update) as a CUDA
// graph. A pass is a few dozen launches, copies and GEMM calls; enqueued one
// by one they cost the host several microseconds each, which small layers
// cannot hide behind their GEMMs. Replaying a graph enqueues them all in one
// call.
//
// The pass runs eagerly the first time with a given key (the device
// addresses it reads and writes: anything that changes what its launches
// take), so that lazy work (a workspace allocated, a module loaded) happens
// outside a capture; the second time it is captured from the stream and the
// graph is launched; after that the graph is replayed whenever the key comes
// again. A few keys are kept (a caller that alternates between input
// buffers, a benchmark rotating its inputs past L2, replays each), the least
// recently used one dropped for a new key beyond that.
//
// A capture that fails (a call the capture refused, a pass that threw) is
// thrown away: the pass runs eagerly instead, and this graph stays eager
// from then on, the reason kept in disabled(). An enqueue function must
// therefore be safe to run again after a failed capture: it may only
// enqueue work and set host state that the second run sets the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/cuda_driver.hpp"

namespace fp8c::runtime {

class PassGraph {
 public:
  enum class Outcome { eager, captured, replayed };

  PassGraph() = default;
  ~PassGraph();
  PassGraph(const PassGraph&) = delete;
  PassGraph& operator=(const PassGraph&) = delete;

  // Enqueues the pass on `stream`: runs `enqueue` (which enqueues on
  // `stream`, and on streams it forks from `stream` and joins back), or
  // launches the graph captured from it. `stream` must not be the legacy
  // default stream (CUDA cannot capture it): such a pass runs eagerly.
  Outcome run(CUstream stream, const std::vector<std::uint64_t>& key,
              const std::function<void()>& enqueue);

  // Nodes of the graph last captured (0: none yet).
  std::size_t nodes() const { return nodes_; }
  // Why this pass no longer captures ("": it does).
  const std::string& disabled() const { return disabled_; }

 private:
  struct Entry {
    std::vector<std::uint64_t> key;
    CUgraphExec exec = nullptr;  // captured with key (null: ran eagerly once)
    std::uint64_t used = 0;      // when it was last run
  };
  static constexpr std::size_t kMaxEntries = 8;
  Outcome capture(CUstream stream, Entry& entry, const std::function<void()>& enqueue);

  std::vector<Entry> entries_;
  std::uint64_t tick_ = 0;
  std::size_t nodes_ = 0;
  std::string disabled_;
};

}  // namespace fp8c::runtime
