// N ranks on ONE GPU, one host thread per rank: the single-GPU multi-rank
// backend of DeviceCommunicator. Plans for 2, 4 or 8 ranks run on one GPU
// and are checked against the CPU collectives bit for bit: the data
// semantics are NCCL's, the reductions are collectives/reduce.hpp's rank
// order and arithmetic (rank_reduce kernels), and, like the CPU in-process
// group, every collective checks that all ranks made the same call.
//
//   LocalDeviceGroup group(4, std::chrono::seconds(30), jit);  // context current
//   // on rank r's thread, after device.make_current():
//   std::unique_ptr<DeviceCommunicator> comm = group.communicator(r);
//   comm->all_reduce(x, x, n, ElemType::fp32, ReduceOp::kMax, stream);
//
// Stream and synchronisation scheme (correctness first; performance is
// secondary in this mode). A collective on rank r:
//   1. synchronises r's stream: r's send buffer is complete and no earlier
//      work of r's stream can still touch its buffers (work on other
//      streams is the caller's to order, see device_communicator.hpp);
//   2. publishes its send/recv pointers and waits until every rank has
//      arrived with the same call (collectives::InProcessRendezvous: a
//      missing rank is kTimeout on the waiting ranks, a disagreement
//      kMismatch on every rank, either poisons the group);
//   3. rank 0 alone moves the data for everyone on the group's own stream:
//      one batched-copy launch (all_gather, broadcast), one reduce launch
//      (reduce_scatter), one reduce plus one batched copy (all_reduce:
//      reduced into rank 0's recv, then copied to the others), or one
//      cuMemcpyDtoDAsync per rank (ring_shift: rank r - 1's send into rank
//      r's recv), then synchronises that stream;
//   4. every rank waits until rank 0 is done, then returns.
// So when a call returns, this rank's recv holds the result and no peer
// reads its send any more: the caller may enqueue anything on its stream.
// In-place forms are safe because each output element is read from every
// input before it is written, and copies onto themselves are skipped
// (ring_shift has no in-place form: its send and recv are disjoint).
// The call blocks its thread for the whole collective, bounded by
// timeout() per phase; synchronize() is then a plain stream synchronise.
#pragma once

#include <chrono>
#include <memory>

#include "collectives/device/device_communicator.hpp"
#include "collectives/rank_claims.hpp"
#include "runtime/jit.hpp"

namespace fp8c::runtime {

struct LocalGroupState;

class LocalDeviceGroup {
 public:
  // Compiles the group's kernels through `jit` and loads them, and creates
  // the group's stream, in the context current on the calling thread: every
  // rank's thread must make that same context current (Device::make_current)
  // before using its communicator. 1 <= size <= 64.
  LocalDeviceGroup(int size, std::chrono::milliseconds timeout, const Jit& jit);
  ~LocalDeviceGroup();
  LocalDeviceGroup(const LocalDeviceGroup&) = delete;
  LocalDeviceGroup& operator=(const LocalDeviceGroup&) = delete;

  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // The communicator of `rank`, handed out once per rank (throws
  // std::invalid_argument otherwise). Communicators share the group's
  // state and may outlive this object.
  std::unique_ptr<DeviceCommunicator> communicator(int rank);

 private:
  int size_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<LocalGroupState> state_;
  collectives::RankClaims claims_;
};

}  // namespace fp8c::runtime
