// A thread that watches collectives enqueued on CUDA streams and reports the
// first that runs too long, or an error its backend reports asynchronously.
// NCCL has no collective timeout: a peer that never joins leaves the NCCL
// kernel, and every synchronize behind it, waiting forever. PyTorch's
// ProcessGroupNCCL watchdog works the same way.
//
// Each collective is bracketed by two events on its stream. Its clock starts
// when the watchdog sees the first event complete (the stream has reached
// the collective, so slow work before it does not count) and it fails when
// the second is not complete `timeout` later. The watchdog checks every
// timeout/20 (1 ms to 100 ms), so a hang is reported within about 1.05 x
// timeout of the collective starting.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/collective_error.hpp"
#include "runtime/cuda_driver.hpp"

namespace fp8c::runtime {

class CollectiveWatchdog {
 public:
  struct Hooks {
    // Polled on every check: an asynchronous failure (NCCL's
    // ncclCommGetAsyncError), or nothing.
    std::function<std::optional<collectives::CollectiveError>()> poll_error;
    // Called once, on the watchdog thread, with the first failure; the
    // watchdog stops tracking afterwards. Must not throw.
    std::function<void(const collectives::CollectiveError&)> on_failure;
  };

  // `context` is made current on the watchdog thread (event queries).
  CollectiveWatchdog(CUcontext context, int rank, int size, std::chrono::milliseconds timeout,
                     Hooks hooks);
  // Stops and joins the thread; destroys the events (pending ones too:
  // the driver releases them when their work completes).
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Records the event before a collective on `stream`.
  CUevent begin(CUstream stream);
  // Records the event after it and starts watching; `operation` names it in
  // the timeout error.
  void end(CUevent started, CUstream stream, std::string operation);
  // The collective was never enqueued: returns the event.
  void cancel(CUevent started);

  // Collectives not yet seen complete.
  std::size_t pending() const;

 private:
  struct Tracked {
    CUevent started;
    CUevent finished;
    std::string operation;
    std::optional<std::chrono::steady_clock::time_point> started_at;
  };

  void run();
  // One pass over the tracked collectives; the failure, if any. Requires
  // mutex_ held.
  std::optional<collectives::CollectiveError> check_locked();
  CUevent take_event_locked();
  void recycle_locked(CUevent event);

  const CUcontext context_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds interval_;
  const Hooks hooks_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool failed_ = false;
  std::list<Tracked> tracked_;
  std::vector<CUevent> free_events_;
  std::vector<CUevent> all_events_;
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace fp8c::runtime
