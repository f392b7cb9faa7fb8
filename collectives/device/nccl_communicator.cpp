#include "collectives/device/nccl_communicator.hpp"

#include <cstring>
#include <stdexcept>
#include <thread>

#include "collectives/call_check.hpp"
#include "collectives/device/nccl_library.hpp"
#include "collectives/device/nccl_watchdog.hpp"
#include "collectives/device/unique_id_exchange.hpp"

namespace fp8c::runtime {

using collectives::CollectiveCall;
using collectives::CollectiveError;
using collectives::CollectiveKind;
using collectives::FailureKind;
using Clock = std::chrono::steady_clock;

namespace {

static_assert(sizeof(ncclUniqueId) == kUniqueIdBytes);

const void* address(CUdeviceptr pointer) {
  return reinterpret_cast<const void*>(static_cast<std::uintptr_t>(pointer));
}
void* mutable_address(CUdeviceptr pointer) {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(pointer));
}

// Polls `state` (a communicator's ncclCommGetAsyncError) until its last
// call is no longer in progress or `deadline` passes; *timed_out tells the
// two apart.
template <typename State>
ncclResult_t wait_while_in_progress(State state, Clock::time_point deadline, bool* timed_out) {
  *timed_out = false;
  for (auto pause = std::chrono::microseconds(10);;
       pause = std::min(2 * pause, std::chrono::microseconds(1000))) {
    const ncclResult_t now = state();
    if (now != ncclInProgress) return now;
    if (Clock::now() >= deadline) {
      *timed_out = true;
      return ncclInProgress;
    }
    std::this_thread::sleep_for(pause);
  }
}

ncclResult_t async_state(const NcclApi& api, ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  const ncclResult_t polled = api.ncclCommGetAsyncError(comm, &state);
  return polled == ncclSuccess ? state : polled;
}

// ncclRemoteError means a peer failed; everything else is this rank's side.
FailureKind failure_kind(ncclResult_t result) {
  return result == ncclRemoteError ? FailureKind::kPeerFailed : FailureKind::kTransport;
}

int checked_rank(const NcclBootstrap& b, std::chrono::milliseconds timeout) {
  if (b.world_size < 1 || b.rank < 0 || b.rank >= b.world_size) {
    throw std::invalid_argument("NcclCommunicator: rank " + std::to_string(b.rank) +
                                " is out of range for a world of " + std::to_string(b.world_size));
  }
  if (timeout.count() <= 0)
    throw std::invalid_argument("NcclCommunicator: timeout must be positive");
  return b.rank;
}

}  // namespace

NcclCommunicator::NcclCommunicator(const NcclBootstrap& bootstrap, int device_ordinal,
                                   std::chrono::milliseconds timeout)
    : DeviceCommunicator(checked_rank(bootstrap, timeout), bootstrap.world_size, timeout),
      api_(nccl()),
      device_(device_ordinal),
      health_(bootstrap.rank, bootstrap.world_size) {
  join(bootstrap);
  try {
    CollectiveWatchdog::Hooks hooks;
    hooks.poll_error = [this] { return poll_async_error(); };
    hooks.on_failure = [this](const CollectiveError& error) { fail(error, /*reported=*/false); };
    CUcontext context = nullptr;
    FP8C_CU(driver().cuCtxGetCurrent(&context));
    watchdog_ =
        std::make_unique<CollectiveWatchdog>(context, rank(), size(), timeout, std::move(hooks));
  } catch (...) {
    api_.ncclCommAbort(comm_);  // the destructor does not run for a failed constructor
    throw;
  }
}

void NcclCommunicator::join(const NcclBootstrap& bootstrap) {
  const UniqueIdBytes id_bytes = exchange_unique_id(
      bootstrap,
      [&] {
        ncclUniqueId id;
        const ncclResult_t made = api_.ncclGetUniqueId(&id);
        if (made != ncclSuccess) {
          throw CollectiveError(FailureKind::kTransport, "ncclGetUniqueId", rank(), size(),
                                nccl_error_text(api_, made, nullptr));
        }
        UniqueIdBytes bytes;
        std::memcpy(bytes.data(), &id, bytes.size());
        return bytes;
      },
      timeout());
  ncclUniqueId id;
  std::memcpy(&id, id_bytes.data(), sizeof id);

  // Non-blocking, so that nothing below can hang. Built from this header's
  // initializer; NCCL copies min(config.size, its own sizeof) and defaults
  // what a config's version predates, so any library from 2.14 on reads it.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const auto deadline = Clock::now() + timeout();
  ncclComm_t comm = nullptr;
  ncclResult_t result = api_.ncclCommInitRankConfig(&comm, size(), id, rank(), &config);
  bool timed_out = false;
  if ((result == ncclSuccess || result == ncclInProgress) && comm != nullptr) {
    result = wait_while_in_progress([&] { return async_state(api_, comm); }, deadline, &timed_out);
  }
  if (result == ncclSuccess && comm != nullptr) {
    comm_ = comm;
    return;
  }
  std::string detail = timed_out
                           ? "the group did not form within " + std::to_string(timeout().count()) +
                                 " ms; are all " + std::to_string(size()) + " ranks running?"
                           : nccl_error_text(api_, result, comm);
  if (comm != nullptr) api_.ncclCommAbort(comm);
  throw CollectiveError(timed_out ? FailureKind::kTimeout : failure_kind(result),
                        "ncclCommInitRankConfig", rank(), size(),
                        detail + " (NCCL " + nccl_version_text(api_.version) + ", GPU " +
                            std::to_string(device_.ordinal()) + ")");
}

NcclCommunicator::~NcclCommunicator() {
  try {
    device_.make_current();  // for the watchdog's events and NCCL's teardown
  } catch (...) {
    // The context is gone; the teardown below does what it still can.
  }
  watchdog_.reset();  // no more polls or aborts from its thread
  if (comm_ == nullptr) return;
  // Finalize flushes this rank's pending work; if that does not finish
  // (a peer is gone), abort instead of blocking in ncclCommDestroy.
  ncclResult_t result = api_.ncclCommFinalize(comm_);
  bool timed_out = false;
  if (result == ncclSuccess || result == ncclInProgress) {
    result = wait_while_in_progress([&] { return async_state(api_, comm_); },
                                    Clock::now() + timeout(), &timed_out);
  }
  if (result == ncclSuccess) {
    api_.ncclCommDestroy(comm_);
  } else {
    api_.ncclCommAbort(comm_);
  }
  comm_ = nullptr;
}

int NcclCommunicator::nccl_version() const {
  return api_.version;
}

std::optional<CollectiveError> NcclCommunicator::poll_async_error() {
  const std::lock_guard lock(comm_mutex_);
  if (comm_ == nullptr) return std::nullopt;
  ncclResult_t state = ncclSuccess;
  const ncclResult_t polled = api_.ncclCommGetAsyncError(comm_, &state);
  if (polled != ncclSuccess) state = polled;
  if (state == ncclSuccess || state == ncclInProgress) return std::nullopt;
  return CollectiveError(
      failure_kind(state), "NCCL communicator", rank(), size(),
      "asynchronous " + nccl_error_text(api_, state, comm_) + "; the communicator was aborted");
}

void NcclCommunicator::fail(const CollectiveError& error, bool reported) noexcept {
  if (!health_.poison(error, reported)) return;
  const std::lock_guard lock(comm_mutex_);
  if (comm_ == nullptr) return;
  api_.ncclCommAbort(comm_);
  comm_ = nullptr;
}

void NcclCommunicator::abort(const std::string& reason) noexcept {
  try {
    fail(CollectiveError(FailureKind::kPoisoned, "abort", rank(), size(),
                         "communicator aborted: " + reason),
         /*reported=*/true);
  } catch (...) {
    fail(CollectiveError(FailureKind::kPoisoned, "abort", rank(), size(), ""), true);
  }
}

template <typename NcclCall>
void NcclCommunicator::enqueue(const CollectiveCall& call, CUdeviceptr send, CUdeviceptr recv,
                               CUstream stream, NcclCall nccl_call) {
  const std::string operation = collectives::describe(call);
  health_.throw_if_poisoned(operation);
  try {
    collectives::check_call_arguments(call, rank(), size(), send, recv);
    device_.make_current();
    const CUevent started = watchdog_->begin(stream);
    // comm_ is read under the lock only: the watchdog may abort it at any
    // point between two of these calls.
    bool aborted = false;
    const auto under_lock = [&](auto body) {
      const std::lock_guard lock(comm_mutex_);
      if (comm_ == nullptr) {
        aborted = true;
        return ncclInternalError;
      }
      return body(comm_);
    };
    ncclResult_t result = under_lock(nccl_call);
    bool timed_out = false;
    if (result == ncclInProgress) {
      result = wait_while_in_progress(
          [&] { return under_lock([&](ncclComm_t comm) { return async_state(api_, comm); }); },
          Clock::now() + timeout(), &timed_out);
    }
    if (aborted) {
      watchdog_->cancel(started);
      health_.throw_if_poisoned(operation);
    }
    if (result != ncclSuccess) {
      watchdog_->cancel(started);
      std::string detail =
          "NCCL did not finish enqueueing within " + std::to_string(timeout().count()) + " ms";
      if (!timed_out) {
        under_lock([&](ncclComm_t comm) {
          detail = nccl_error_text(api_, result, comm);
          return ncclSuccess;
        });
      }
      throw CollectiveError(timed_out ? FailureKind::kTimeout : failure_kind(result), operation,
                            rank(), size(), detail);
    }
    watchdog_->end(started, stream, operation);
  } catch (const CollectiveError& error) {
    fail(error, /*reported=*/true);
    throw;
  } catch (const std::exception& error) {
    const CollectiveError wrapped(FailureKind::kTransport, operation, rank(), size(),
                                  std::string("unexpected error: ") + error.what());
    fail(wrapped, true);
    throw wrapped;
  }
}

void NcclCommunicator::all_gather(CUdeviceptr send, CUdeviceptr recv, std::size_t send_count,
                                  ElemType dtype, CUstream stream) {
  const CollectiveCall call =
      sequence_.next(CollectiveKind::kAllGather, send_count, dtype, ReduceOp::kSum, 0);
  enqueue(call, send, recv, stream, [&](ncclComm_t comm) {
    return api_.ncclAllGather(address(send), mutable_address(recv), send_count,
                              nccl_data_type(dtype, api_.version), comm, stream);
  });
}

void NcclCommunicator::reduce_scatter(CUdeviceptr send, CUdeviceptr recv, std::size_t recv_count,
                                      ElemType dtype, ReduceOp op, CUstream stream) {
  const CollectiveCall call =
      sequence_.next(CollectiveKind::kReduceScatter, recv_count, dtype, op, 0);
  enqueue(call, send, recv, stream, [&](ncclComm_t comm) {
    return api_.ncclReduceScatter(address(send), mutable_address(recv), recv_count,
                                  nccl_data_type(dtype, api_.version), nccl_reduce_op(op), comm,
                                  stream);
  });
}

void NcclCommunicator::all_reduce(CUdeviceptr send, CUdeviceptr recv, std::size_t count,
                                  ElemType dtype, ReduceOp op, CUstream stream) {
  const CollectiveCall call = sequence_.next(CollectiveKind::kAllReduce, count, dtype, op, 0);
  enqueue(call, send, recv, stream, [&](ncclComm_t comm) {
    return api_.ncclAllReduce(address(send), mutable_address(recv), count,
                              nccl_data_type(dtype, api_.version), nccl_reduce_op(op), comm,
                              stream);
  });
}

void NcclCommunicator::broadcast(CUdeviceptr send, CUdeviceptr recv, std::size_t count,
                                 ElemType dtype, int root, CUstream stream) {
  const CollectiveCall call =
      sequence_.next(CollectiveKind::kBroadcast, count, dtype, ReduceOp::kSum, root);
  enqueue(call, send, recv, stream, [&](ncclComm_t comm) {
    return api_.ncclBroadcast(address(send), mutable_address(recv), count,
                              nccl_data_type(dtype, api_.version), root, comm, stream);
  });
}

// One rank sends to and receives from itself through NCCL rather than a
// cuMemcpyDtoDAsync: NCCL supports send/recv to self, and so a group of one
// runs the same entry points, watchdog and error handling as a larger one.
void NcclCommunicator::ring_shift(CUdeviceptr send, CUdeviceptr recv, std::size_t count,
                                  ElemType dtype, CUstream stream) {
  const CollectiveCall call =
      sequence_.next(CollectiveKind::kRingShift, count, dtype, ReduceOp::kSum, 0);
  const int next = collectives::ring_next(rank(), size());
  const int previous = collectives::ring_previous(rank(), size());
  enqueue(call, send, recv, stream, [&](ncclComm_t comm) {
    // Every rank has the same count, so all skip together; NCCL then never
    // sees the null buffers a count of 0 allows.
    if (count == 0) return ncclSuccess;
    const ncclDataType_t type = nccl_data_type(dtype, api_.version);
    ncclResult_t result = api_.ncclGroupStart();
    if (result != ncclSuccess) return result;
    // ncclGroupEnd runs even when an enqueue inside the group failed, so
    // that the group is closed; the first failure is the one reported.
    ncclResult_t queued = api_.ncclSend(address(send), count, type, next, comm, stream);
    if (queued == ncclSuccess || queued == ncclInProgress)
      queued = api_.ncclRecv(mutable_address(recv), count, type, previous, comm, stream);
    result = api_.ncclGroupEnd();
    return queued == ncclSuccess || queued == ncclInProgress ? result : queued;
  });
}

void NcclCommunicator::synchronize(CUstream stream) {
  const std::string operation = "synchronize";
  health_.throw_if_poisoned(operation);
  device_.make_current();
  // Polls instead of cuStreamSynchronize, which would wait forever behind a
  // hung collective: the watchdog's verdict shows up here as poison.
  for (auto pause = std::chrono::microseconds(0);;
       pause = std::min(pause + std::chrono::microseconds(20), std::chrono::microseconds(1000))) {
    const CUresult state = driver().cuStreamQuery(stream);
    if (state == CUDA_SUCCESS) break;
    if (state != CUDA_ERROR_NOT_READY) check(state, "cuStreamQuery");
    health_.throw_if_poisoned(operation);
    if (pause.count() == 0) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
    }
  }
  // After an abort the stream may drain with incomplete data: report it.
  health_.throw_if_poisoned(operation);
}

std::unique_ptr<DeviceCommunicator> make_nccl_communicator(const NcclBootstrap& bootstrap,
                                                           int device_ordinal,
                                                           std::chrono::milliseconds timeout) {
  return std::make_unique<NcclCommunicator>(bootstrap, device_ordinal, timeout);
}

}  // namespace fp8c::runtime
