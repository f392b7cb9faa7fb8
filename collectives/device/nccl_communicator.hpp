// DeviceCommunicator over NCCL: one process per GPU, libnccl loaded with
// dlopen (nccl_library.hpp), the unique id handed out by rank 0 over TCP
// (unique_id_exchange.hpp).
//
// Never hangs, never leaves a failure unreported:
// - the communicator is non-blocking (ncclConfig_t::blocking = 0), so
//   init, enqueue and finalize return at once and are polled against
//   timeout(); on a timeout the communicator is aborted;
// - a watchdog thread (nccl_watchdog.hpp) times every enqueued collective
//   from the moment its stream reaches it and polls ncclCommGetAsyncError;
//   on a hang or an error it calls ncclCommAbort and poisons the
//   communicator with the reason;
// - synchronize(stream) polls the stream (no blocking wait) and throws that
//   reason (kTimeout, kPeerFailed for ncclRemoteError, kTransport) instead
//   of waiting forever; later calls throw kPoisoned.
// Reductions are NCCL's (ring or tree order, NaN as NCCL computes it), not
// collectives/reduce.hpp's rank order: beyond 2 ranks sums need not equal
// the CPU collectives bit for bit. FP8 moves as ncclFloat8e4m3/e5m2 from
// NCCL 2.24.3 on, as ncclUint8 before; FP8 reductions are refused.
// ring_shift is ncclSend to the next rank and ncclRecv from the previous one
// in one ncclGroupStart/End (one rank: send to and receive from itself).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>

#include "collectives/call_sequence.hpp"
#include "collectives/device/comm_health.hpp"
#include "collectives/device/device_communicator.hpp"
#include "collectives/device/nccl_bootstrap.hpp"
#include "runtime/device.hpp"

struct ncclComm;  // nccl.h's opaque communicator; nccl.h stays out of this header

namespace fp8c::runtime {

struct NcclApi;
class CollectiveWatchdog;

class NcclCommunicator final : public DeviceCommunicator {
 public:
  // Loads NCCL (Unavailable without it), retains GPU `device_ordinal`'s
  // primary context, exchanges the unique id, and joins the group; every
  // step bounded by `timeout` (CollectiveError kTimeout naming the step).
  NcclCommunicator(const NcclBootstrap& bootstrap, int device_ordinal,
                   std::chrono::milliseconds timeout);
  // Finalizes and destroys the communicator when healthy (bounded by
  // timeout(); aborts it if that does not finish), aborts it otherwise.
  ~NcclCommunicator() override;

  std::string_view backend_name() const override { return "nccl"; }
  int nccl_version() const;
  const Device& device() const { return device_; }

  void all_gather(CUdeviceptr send, CUdeviceptr recv, std::size_t send_count, ElemType dtype,
                  CUstream stream) override;
  void reduce_scatter(CUdeviceptr send, CUdeviceptr recv, std::size_t recv_count, ElemType dtype,
                      ReduceOp op, CUstream stream) override;
  void all_reduce(CUdeviceptr send, CUdeviceptr recv, std::size_t count, ElemType dtype,
                  ReduceOp op, CUstream stream) override;
  void broadcast(CUdeviceptr send, CUdeviceptr recv, std::size_t count, ElemType dtype, int root,
                 CUstream stream) override;
  void ring_shift(CUdeviceptr send, CUdeviceptr recv, std::size_t count, ElemType dtype,
                  CUstream stream) override;
  void synchronize(CUstream stream) override;
  void abort(const std::string& reason) noexcept override;
  bool poisoned() const override { return health_.poisoned(); }

 private:
  void join(const NcclBootstrap& bootstrap);
  // Validates, enqueues `nccl_call(comm)` between the watchdog's events and
  // waits (bounded) while NCCL reports the enqueue in progress.
  template <typename NcclCall>
  void enqueue(const collectives::CollectiveCall& call, CUdeviceptr send, CUdeviceptr recv,
               CUstream stream, NcclCall nccl_call);
  // Poisons (the caller throws `error` itself when `reported`) and, the
  // first time, aborts NCCL, which releases the peers.
  void fail(const collectives::CollectiveError& error, bool reported) noexcept;
  std::optional<collectives::CollectiveError> poll_async_error();

  const NcclApi& api_;
  Device device_;
  CommHealth health_;
  collectives::CallSequence sequence_;
  std::mutex comm_mutex_;  // every NCCL call on comm_, and its abort
  ncclComm* comm_ = nullptr;
  std::unique_ptr<CollectiveWatchdog> watchdog_;
};

// The NcclCommunicator above, for `bootstrap` (nccl_bootstrap_from_process()
// in a launched job, single_rank_bootstrap() alone) on GPU `device_ordinal`
// (usually bootstrap.local_rank).
std::unique_ptr<DeviceCommunicator> make_nccl_communicator(const NcclBootstrap& bootstrap,
                                                           int device_ordinal,
                                                           std::chrono::milliseconds timeout);

}  // namespace fp8c::runtime
