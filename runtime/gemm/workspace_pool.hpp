// Scratch memory for library calls that take a workspace (cuBLASLt), shared
// by the streams that call them without races and without growing with the
// number of streams: a buffer belongs to the stream that used it last, and
// another stream takes it over only after waiting, on the device, for that
// use to finish. At most `count` buffers exist; a stream with one of its own
// never waits.
//
// A GEMM captured into a CUDA graph keeps the buffer it was captured with
// for every replay: acquiring on a capturing stream pins that stream's own
// buffer to it for good (no other stream takes it over; pinned buffers do
// not count against `count`), and no event is recorded or waited on inside
// the capture. A capturing stream without a buffer of its own (it ran no
// GEMM before the capture) is refused: buffers are not allocated mid-capture.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/device.hpp"

namespace fp8c::runtime {

class WorkspacePool {
 public:
  WorkspacePool(std::size_t bytes, std::size_t count);
  ~WorkspacePool();
  WorkspacePool(const WorkspacePool&) = delete;
  WorkspacePool& operator=(const WorkspacePool&) = delete;

  // A buffer work enqueued next on `stream` may use; call used(stream) once
  // that work is enqueued. Not thread-safe: callers serialize. Throws
  // std::runtime_error for a capturing stream with no buffer of its own.
  const DeviceBuffer& acquire(CUstream stream);
  void used(CUstream stream);

  std::size_t buffers() const { return slots_.size(); }

 private:
  struct Slot {
    DeviceBuffer buffer;
    CUstream owner = nullptr;
    CUevent last_use = nullptr;  // recorded on owner after each use
    std::uint64_t tick = 0;      // when it was last acquired
    bool pinned = false;         // captured into a graph: the owner's for good
  };
  Slot& slot_for(CUstream stream);

  std::size_t bytes_;
  std::size_t count_;
  std::vector<Slot> slots_;
  std::uint64_t tick_ = 0;
};

}  // namespace fp8c::runtime
