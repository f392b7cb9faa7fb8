#include "runtime/gemm/workspace_pool.hpp"

#include <algorithm>
#include <stdexcept>

namespace fp8c::runtime {

WorkspacePool::WorkspacePool(std::size_t bytes, std::size_t count) : bytes_(bytes), count_(count) {
  if (count == 0) throw std::invalid_argument("WorkspacePool needs at least one buffer");
  // Slots never move (acquire() hands out references): room for `count`
  // unpinned buffers and as many pinned ones again.
  slots_.reserve(2 * count);
}

WorkspacePool::~WorkspacePool() {
  for (Slot& slot : slots_)
    if (slot.last_use) driver().cuEventDestroy(slot.last_use);
}

namespace {

bool capturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  FP8C_CU(driver().cuStreamIsCapturing(stream, &status));
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

}  // namespace

WorkspacePool::Slot& WorkspacePool::slot_for(CUstream stream) {
  if (capturing(stream)) {
    for (Slot& slot : slots_)
      if (slot.owner == stream) {
        slot.pinned = true;
        return slot;
      }
    throw std::runtime_error(
        "workspace pool: a GEMM captured on a stream that has no workspace of its own (run the "
        "work once on that stream before capturing it)");
  }
  // Waiting on its own last use is free for a stream that still exists, and
  // keeps a new stream that happens to get a destroyed one's handle behind
  // that stream's unfinished work. (A pinned buffer's uses since it was
  // pinned are graph launches, ordered on the stream itself.)
  for (Slot& slot : slots_)
    if (slot.owner == stream) {
      FP8C_CU(driver().cuStreamWaitEvent(stream, slot.last_use, 0));
      return slot;
    }
  const auto unpinned =
      std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.pinned; });
  if (static_cast<std::size_t>(unpinned) < count_) {
    if (slots_.size() == slots_.capacity())
      throw std::runtime_error("workspace pool: more pinned workspaces than it can hold");
    Slot slot;
    slot.buffer = DeviceBuffer(bytes_);
    slot.owner = stream;
    FP8C_CU(driver().cuEventCreate(&slot.last_use, CU_EVENT_DISABLE_TIMING));
    slots_.push_back(std::move(slot));
    return slots_.back();
  }
  // Take over the unpinned buffer used longest ago, once its last use has
  // finished.
  Slot* oldest = nullptr;
  for (Slot& slot : slots_)
    if (!slot.pinned && (!oldest || slot.tick < oldest->tick)) oldest = &slot;
  FP8C_CU(driver().cuStreamWaitEvent(stream, oldest->last_use, 0));
  oldest->owner = stream;
  return *oldest;
}

const DeviceBuffer& WorkspacePool::acquire(CUstream stream) {
  Slot& slot = slot_for(stream);
  slot.tick = ++tick_;
  return slot.buffer;
}

void WorkspacePool::used(CUstream stream) {
  if (capturing(stream)) return;  // the graph's launches are ordered on the stream
  for (Slot& slot : slots_)
    if (slot.owner == stream) FP8C_CU(driver().cuEventRecord(slot.last_use, stream));
}

}  // namespace fp8c::runtime
