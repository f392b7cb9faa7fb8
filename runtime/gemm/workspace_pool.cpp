#include "runtime/gemm/workspace_pool.hpp"

#include <algorithm>
#include <stdexcept>

namespace fp8c::runtime {

WorkspacePool::WorkspacePool(std::size_t bytes, std::size_t count) : bytes_(bytes), count_(count) {
  if (count == 0) throw std::invalid_argument("WorkspacePool needs at least one buffer");
  slots_.reserve(count);  // slots never move: acquire() hands out references
}

WorkspacePool::~WorkspacePool() {
  for (Slot& slot : slots_)
    if (slot.last_use) driver().cuEventDestroy(slot.last_use);
}

WorkspacePool::Slot& WorkspacePool::slot_for(CUstream stream) {
  // Waiting on its own last use is free for a stream that still exists, and
  // keeps a new stream that happens to get a destroyed one's handle behind
  // that stream's unfinished work.
  for (Slot& slot : slots_)
    if (slot.owner == stream) {
      FP8C_CU(driver().cuStreamWaitEvent(stream, slot.last_use, 0));
      return slot;
    }
  if (slots_.size() < count_) {
    Slot slot;
    slot.buffer = DeviceBuffer(bytes_);
    slot.owner = stream;
    FP8C_CU(driver().cuEventCreate(&slot.last_use, CU_EVENT_DISABLE_TIMING));
    slots_.push_back(std::move(slot));
    return slots_.back();
  }
  // Take over the buffer used longest ago, once its last use has finished.
  Slot& oldest = *std::min_element(slots_.begin(), slots_.end(),
                                   [](const Slot& x, const Slot& y) { return x.tick < y.tick; });
  FP8C_CU(driver().cuStreamWaitEvent(stream, oldest.last_use, 0));
  oldest.owner = stream;
  return oldest;
}

const DeviceBuffer& WorkspacePool::acquire(CUstream stream) {
  Slot& slot = slot_for(stream);
  slot.tick = ++tick_;
  return slot.buffer;
}

void WorkspacePool::used(CUstream stream) {
  for (Slot& slot : slots_)
    if (slot.owner == stream) FP8C_CU(driver().cuEventRecord(slot.last_use, stream));
}

}  // namespace fp8c::runtime
