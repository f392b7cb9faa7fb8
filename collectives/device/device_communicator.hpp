// Collectives over device memory, ordered on CUDA streams, with NCCL's
// semantics (collectives/communicator.hpp states the contract: same calls in
// the same order on every rank, rank-major concatenation for all_gather,
// block i to rank i for reduce_scatter, rank r to rank r + 1 for
// ring_shift, in-place forms, FP8 moved but never reduced, every failure a
// collectives::CollectiveError that poisons the communicator).
//
// Backends:
// - NCCL (nccl_communicator.cpp): one process per GPU, libnccl loaded with
//   dlopen, bootstrapped from a torchrun-style environment; a watchdog
//   aborts the communicator when an enqueued collective does not finish
//   within timeout().
// - Single-GPU multi-rank (local_device_group.cpp): every rank's buffers on
//   one GPU, one host thread per rank, collectives done as device copies and
//   rank-order reductions (collectives/reduce.hpp's order and arithmetic),
//   so plans for 2, 4 and 8 ranks run and are checked on one GPU.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "collectives/collective_error.hpp"
#include "collectives/dtype.hpp"
#include "runtime/cuda_driver.hpp"

namespace fp8c::runtime {

using collectives::CollectiveError;
using collectives::ReduceOp;

class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;
  DeviceCommunicator(const DeviceCommunicator&) = delete;
  DeviceCommunicator& operator=(const DeviceCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  virtual std::string_view backend_name() const = 0;

  // Each call is enqueued on `stream` after the work already there; the
  // buffers must stay valid until the stream passes it. Work on other
  // streams is not ordered before it, as with NCCL: a send buffer written on
  // another stream, or by a cuMemcpyHtoD from pageable memory (which returns
  // before its DMA has landed; see copy_to_device in runtime/device.hpp),
  // must be waited for first. Counts are elements of `dtype`, as in NCCL.
  // Backends may block the calling thread (the single-GPU group does,
  // bounded by timeout()); NCCL does not.
  virtual void all_gather(CUdeviceptr send, CUdeviceptr recv, std::size_t send_count,
                          ElemType dtype, CUstream stream) = 0;
  virtual void reduce_scatter(CUdeviceptr send, CUdeviceptr recv, std::size_t recv_count,
                              ElemType dtype, ReduceOp op, CUstream stream) = 0;
  virtual void all_reduce(CUdeviceptr send, CUdeviceptr recv, std::size_t count, ElemType dtype,
                          ReduceOp op, CUstream stream) = 0;
  virtual void broadcast(CUdeviceptr send, CUdeviceptr recv, std::size_t count, ElemType dtype,
                         int root, CUstream stream) = 0;
  // Rank r's `count` elements of send land in the recv of rank
  // (r + 1) % size(); its recv receives rank (r + size() - 1) % size()'s
  // (collectives::Communicator::ring_shift: any dtype, FP8 moved as bytes,
  // send and recv disjoint, one rank copies send into recv). Ordered on
  // `stream` like the calls above: it reads send and writes recv after the
  // work already enqueued there, and recv is complete for later work on
  // that stream (NCCL: a grouped ncclSend/ncclRecv on `stream`; the
  // single-GPU group returns with it done).
  virtual void ring_shift(CUdeviceptr send, CUdeviceptr recv, std::size_t count, ElemType dtype,
                          CUstream stream) = 0;

  // Waits until everything enqueued on `stream` (collectives included) has
  // finished. Throws CollectiveError (kTimeout) when a collective does not
  // finish within timeout(): the communicator is aborted and poisoned, never
  // left hanging. Use this instead of a bare stream synchronize.
  virtual void synchronize(CUstream stream) = 0;

  // Whether these calls may be captured into a CUDA graph (stream capture):
  // each only enqueues device work on `stream`, never synchronizes it or
  // blocks on other ranks. No backend promises that yet: the single-GPU
  // group meets its peers on the host, and NCCL's watchdog polls an event
  // recorded after each call, which inside a capture marks nothing. (A plan
  // of one rank has no collectives, so its passes are captured whole.)
  virtual bool capturable() const { return false; }

  // Poisons this communicator and releases its peers (ncclCommAbort for
  // NCCL). Idempotent; never throws.
  virtual void abort(const std::string& reason) noexcept = 0;
  virtual bool poisoned() const = 0;

 protected:
  DeviceCommunicator(int rank, int size, std::chrono::milliseconds timeout)
      : rank_(rank), size_(size), timeout_(timeout) {}

 private:
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
};

}  // namespace fp8c::runtime
