#include "collectives/device/nccl_watchdog.hpp"

#include <algorithm>
#include <utility>

namespace fp8c::runtime {

using collectives::CollectiveError;
using collectives::FailureKind;
using Clock = std::chrono::steady_clock;

namespace {

std::chrono::milliseconds check_interval(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 20, std::chrono::milliseconds(1), std::chrono::milliseconds(100));
}

std::string cuda_error_name(CUresult result) {
  const char* name = nullptr;
  driver().cuGetErrorName(result, &name);
  return name ? name : "CUDA error " + std::to_string(static_cast<int>(result));
}

}  // namespace

CollectiveWatchdog::CollectiveWatchdog(CUcontext context, int rank, int size,
                                       std::chrono::milliseconds timeout, Hooks hooks)
    : context_(context),
      rank_(rank),
      size_(size),
      timeout_(timeout),
      interval_(check_interval(timeout)),
      hooks_(std::move(hooks)),
      thread_([this] { run(); }) {}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  for (const CUevent event : all_events_) driver().cuEventDestroy(event);
}

CUevent CollectiveWatchdog::take_event_locked() {
  if (!free_events_.empty()) {
    const CUevent event = free_events_.back();
    free_events_.pop_back();
    return event;
  }
  CUevent event = nullptr;
  FP8C_CU(driver().cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  all_events_.push_back(event);
  return event;
}

void CollectiveWatchdog::recycle_locked(CUevent event) {
  free_events_.push_back(event);
}

CUevent CollectiveWatchdog::begin(CUstream stream) {
  CUevent event = nullptr;
  {
    const std::lock_guard lock(mutex_);
    event = take_event_locked();
  }
  const CUresult recorded = driver().cuEventRecord(event, stream);
  if (recorded != CUDA_SUCCESS) {
    cancel(event);
    check(recorded, "cuEventRecord (before a collective)");
  }
  return event;
}

void CollectiveWatchdog::end(CUevent started, CUstream stream, std::string operation) {
  CUevent finished = nullptr;
  {
    const std::lock_guard lock(mutex_);
    finished = take_event_locked();
  }
  const CUresult recorded = driver().cuEventRecord(finished, stream);
  const std::lock_guard lock(mutex_);
  if (recorded != CUDA_SUCCESS) {
    recycle_locked(started);
    recycle_locked(finished);
    check(recorded, "cuEventRecord (after a collective)");
  }
  tracked_.push_back({started, finished, std::move(operation), std::nullopt});
}

void CollectiveWatchdog::cancel(CUevent started) {
  const std::lock_guard lock(mutex_);
  recycle_locked(started);
}

std::size_t CollectiveWatchdog::pending() const {
  const std::lock_guard lock(mutex_);
  return tracked_.size();
}

std::optional<CollectiveError> CollectiveWatchdog::check_locked() {
  const auto now = Clock::now();
  const auto failure = [&](FailureKind kind, const Tracked& t, const std::string& detail) {
    return CollectiveError(kind, t.operation, rank_, size_, detail);
  };
  for (auto it = tracked_.begin(); it != tracked_.end();) {
    if (!it->started_at) {
      const CUresult started = driver().cuEventQuery(it->started);
      if (started == CUDA_SUCCESS) {
        it->started_at = now;
      } else if (started != CUDA_ERROR_NOT_READY) {
        return failure(FailureKind::kTransport, *it,
                       "the stream failed before the collective: " + cuda_error_name(started));
      }
    }
    if (it->started_at) {
      const CUresult finished = driver().cuEventQuery(it->finished);
      if (finished == CUDA_SUCCESS) {
        recycle_locked(it->started);
        recycle_locked(it->finished);
        it = tracked_.erase(it);
        continue;
      }
      if (finished != CUDA_ERROR_NOT_READY) {
        return failure(FailureKind::kTransport, *it,
                       "the collective failed on the GPU: " + cuda_error_name(finished));
      }
      if (now - *it->started_at > timeout_) {
        return failure(FailureKind::kTimeout, *it,
                       "did not finish within " + std::to_string(timeout_.count()) +
                           " ms of reaching the GPU: a peer failed, hangs, or skipped this "
                           "collective; the communicator was aborted");
      }
    }
    ++it;
  }
  return std::nullopt;
}

void CollectiveWatchdog::run() {
  driver().cuCtxSetCurrent(context_);  // a failure shows up as failed queries
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, interval_, [this] { return stopping_; });
    if (stopping_ || failed_) continue;
    std::optional<CollectiveError> failure = check_locked();
    if (!failure && hooks_.poll_error) {
      lock.unlock();  // the hook takes the communicator's lock
      failure = hooks_.poll_error();
      lock.lock();
    }
    if (!failure) continue;
    failed_ = true;
    for (const Tracked& t : tracked_) {
      recycle_locked(t.started);
      recycle_locked(t.finished);
    }
    tracked_.clear();
    lock.unlock();
    hooks_.on_failure(*failure);
    lock.lock();
  }
}

}  // namespace fp8c::runtime
