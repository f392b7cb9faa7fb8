#include "runtime/gpu/pass_graph.hpp"

#include <algorithm>
#include <exception>

namespace fp8c::runtime {

namespace {

std::string error_name(CUresult r) {
  const char* name = nullptr;
  driver().cuGetErrorName(r, &name);
  return name ? name : "error " + std::to_string(static_cast<int>(r));
}

}  // namespace

PassGraph::~PassGraph() {
  for (const Entry& e : entries_)
    if (e.exec) driver().cuGraphExecDestroy(e.exec);
}

PassGraph::Outcome PassGraph::run(CUstream stream, const std::vector<std::uint64_t>& key,
                                  const std::function<void()>& enqueue) {
  const bool legacy = stream == nullptr || stream == CU_STREAM_LEGACY;
  // A stream the caller is capturing already (their own graph of the whole
  // step): the pass is enqueued into their capture as it is; a capture of
  // ours inside it would be refused and end theirs.
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (!legacy) FP8C_CU(driver().cuStreamIsCapturing(stream, &status));
  if (!disabled_.empty() || legacy || status != CU_STREAM_CAPTURE_STATUS_NONE) {
    enqueue();
    return Outcome::eager;
  }
  ++tick_;
  auto it =
      std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
  if (it == entries_.end()) {
    // A new key: run eagerly, remembered (in the least recently used
    // entry's place once there are enough).
    if (entries_.size() >= kMaxEntries) {
      it = std::min_element(entries_.begin(), entries_.end(),
                            [](const Entry& a, const Entry& b) { return a.used < b.used; });
      if (it->exec) driver().cuGraphExecDestroy(it->exec);
      *it = Entry{};
    } else {
      it = entries_.emplace(entries_.end());
    }
    it->key = key;
    it->used = tick_;
    enqueue();
    return Outcome::eager;
  }
  it->used = tick_;
  if (it->exec) {
    FP8C_CU(driver().cuGraphLaunch(it->exec, stream));
    return Outcome::replayed;
  }
  return capture(stream, *it, enqueue);
}

PassGraph::Outcome PassGraph::capture(CUstream stream, Entry& entry,
                                      const std::function<void()>& enqueue) {
  const DriverApi& cu = driver();
  // Thread-local: another thread's unrelated calls (a rank thread's
  // synchronize) do not invalidate this capture, and this thread's own
  // unsafe calls fail instead of being recorded.
  FP8C_CU(cu.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  std::string failure;
  try {
    enqueue();
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  CUgraph graph = nullptr;
  const CUresult ended = cu.cuStreamEndCapture(stream, &graph);
  if (failure.empty() && ended != CUDA_SUCCESS)
    failure = "cuStreamEndCapture: " + error_name(ended);
  if (failure.empty()) {
    std::size_t count = 0;
    if (cu.cuGraphGetNodes(graph, nullptr, &count) == CUDA_SUCCESS) nodes_ = count;
    const CUresult made = cu.cuGraphInstantiateWithFlags(&entry.exec, graph, 0);
    if (made != CUDA_SUCCESS) {
      entry.exec = nullptr;
      failure = "cuGraphInstantiate: " + error_name(made);
    }
  }
  if (graph) cu.cuGraphDestroy(graph);
  if (!failure.empty()) {
    // Nothing of the capture ran: run the pass as it is, and stay eager
    // (a pass that cannot be captured once will not be the next time).
    disabled_ = failure;
    enqueue();
    return Outcome::eager;
  }
  FP8C_CU(cu.cuGraphLaunch(entry.exec, stream));
  return Outcome::captured;
}

}  // namespace fp8c::runtime
