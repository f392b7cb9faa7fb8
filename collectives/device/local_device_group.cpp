#include "collectives/device/local_device_group.hpp"

#include <stdexcept>
#include <string>
#include <utility>

#include "collectives/call_check.hpp"
#include "collectives/call_sequence.hpp"
#include "collectives/device/comm_health.hpp"
#include "collectives/device/rank_kernels.hpp"
#include "collectives/in_process_rendezvous.hpp"
#include "runtime/dynamic_library.hpp"

namespace fp8c::runtime {

using collectives::CollectiveCall;
using collectives::CollectiveKind;
using collectives::FailureKind;
using collectives::InProcessRendezvous;

// What the ranks of one group share. A rank writes its slot only before it
// arrives at a collective; rank 0 reads every slot between arrive and
// depart. The rendezvous' mutex orders the two (see in_process_rendezvous.hpp).
namespace {

CUcontext current_context() {
  CUcontext context = nullptr;
  FP8C_CU(driver().cuCtxGetCurrent(&context));
  if (context == nullptr) {
    throw Unavailable(
        "LocalDeviceGroup: no CUDA context is current on this thread; make the device current "
        "(Device::make_current) first");
  }
  return context;
}

}  // namespace

struct LocalGroupState {
  LocalGroupState(int size, const Jit& jit)
      : context(current_context()),
        rendezvous(size),
        kernels(jit),
        slots(static_cast<std::size_t>(size)) {}

  struct Slot {
    CUdeviceptr send = 0;
    CUdeviceptr recv = 0;
  };

  CUcontext context;  // the one every rank's thread uses
  InProcessRendezvous rendezvous;
  RankKernels kernels;
  Stream stream;  // rank 0 moves everyone's data here, inside a collective only
  std::vector<Slot> slots;
};

namespace {

class LocalDeviceCommunicator final : public DeviceCommunicator {
 public:
  LocalDeviceCommunicator(int rank, int size, std::chrono::milliseconds timeout,
                          std::shared_ptr<LocalGroupState> state)
      : DeviceCommunicator(rank, size, timeout), state_(std::move(state)), health_(rank, size) {}

  std::string_view backend_name() const override { return "single-gpu"; }

  void all_gather(CUdeviceptr send, CUdeviceptr recv, std::size_t send_count, ElemType dtype,
                  CUstream stream) override {
    const CollectiveCall call =
        sequence_.next(CollectiveKind::kAllGather, send_count, dtype, ReduceOp::kSum, 0);
    run(call, send, recv, stream, [&] {
      RankPointerTable sources, destinations;
      for (int r = 0; r < size(); ++r) {
        sources.p[r] = slot(r).send;
        destinations.p[r] = slot(r).recv;
      }
      const std::uint64_t bytes = block_bytes(call);
      state_->kernels.copy(sources, size(), destinations, size(), bytes, bytes, group_stream());
    });
  }

  void reduce_scatter(CUdeviceptr send, CUdeviceptr recv, std::size_t recv_count, ElemType dtype,
                      ReduceOp op, CUstream stream) override {
    const CollectiveCall call =
        sequence_.next(CollectiveKind::kReduceScatter, recv_count, dtype, op, 0);
    run(call, send, recv, stream, [&] {
      // Output r reduces block r of every rank's send: input stride = count.
      RankPointerTable inputs, outputs;
      for (int r = 0; r < size(); ++r) {
        inputs.p[r] = slot(r).send;
        outputs.p[r] = slot(r).recv;
      }
      state_->kernels.reduce(dtype, op, inputs, size(), call.count, outputs, size(), call.count,
                             group_stream());
    });
  }

  void all_reduce(CUdeviceptr send, CUdeviceptr recv, std::size_t count, ElemType dtype,
                  ReduceOp op, CUstream stream) override {
    const CollectiveCall call = sequence_.next(CollectiveKind::kAllReduce, count, dtype, op, 0);
    run(call, send, recv, stream, [&] {
      // Reduce once into rank 0's recv, then copy it to the other ranks'
      // recv: by then the reduction has read every send, so in-place ranks
      // (recv == send) are safe to overwrite.
      RankPointerTable inputs, outputs, copies;
      for (int r = 0; r < size(); ++r) {
        inputs.p[r] = slot(r).send;
        copies.p[r] = slot(r).recv;
      }
      outputs.p[0] = slot(0).recv;
      state_->kernels.reduce(dtype, op, inputs, size(), 0, outputs, 1, call.count, group_stream());
      state_->kernels.copy(outputs, 1, copies, size(), block_bytes(call), 0, group_stream());
    });
  }

  void broadcast(CUdeviceptr send, CUdeviceptr recv, std::size_t count, ElemType dtype, int root,
                 CUstream stream) override {
    const CollectiveCall call =
        sequence_.next(CollectiveKind::kBroadcast, count, dtype, ReduceOp::kSum, root);
    run(call, send, recv, stream, [&] {
      RankPointerTable sources, destinations;
      sources.p[0] = slot(root).send;
      for (int r = 0; r < size(); ++r) destinations.p[r] = slot(r).recv;
      state_->kernels.copy(sources, 1, destinations, size(), block_bytes(call), 0, group_stream());
    });
  }

  void ring_shift(CUdeviceptr send, CUdeviceptr recv, std::size_t count, ElemType dtype,
                  CUstream stream) override {
    const CollectiveCall call =
        sequence_.next(CollectiveKind::kRingShift, count, dtype, ReduceOp::kSum, 0);
    run(call, send, recv, stream, [&] {
      // RankKernels::copy sends every source to every destination; a shift
      // pairs destination r with source r - 1 alone, so it is one
      // device-to-device copy per rank on the group stream instead.
      const std::uint64_t bytes = block_bytes(call);
      if (bytes == 0) return;
      for (int r = 0; r < size(); ++r) {
        FP8C_CU(driver().cuMemcpyDtoDAsync(
            slot(r).recv, slot(collectives::ring_previous(r, size())).send, bytes, group_stream()));
      }
    });
  }

  // Collectives are complete when they return; this only waits for the
  // caller's own work.
  void synchronize(CUstream stream) override {
    health_.throw_if_poisoned("synchronize");
    make_context_current();
    FP8C_CU(driver().cuStreamSynchronize(stream));
  }

  void abort(const std::string& reason) noexcept override {
    try {
      fail(collectives::CollectiveError(FailureKind::kPoisoned, "abort", rank(), size(),
                                        "communicator aborted: " + reason));
    } catch (...) {
      // Allocation failure composing the text: poison without it.
      state_->rendezvous.poison(FailureKind::kPeerFailed, "a rank aborted");
    }
  }

  bool poisoned() const override { return health_.poisoned(); }

 private:
  // Steps 1-4 of the scheme in local_device_group.hpp; `lead` is step 3.
  template <typename Lead>
  void run(const CollectiveCall& call, CUdeviceptr send, CUdeviceptr recv, CUstream stream,
           Lead lead) {
    const std::string operation = collectives::describe(call);
    health_.throw_if_poisoned(operation);
    try {
      collectives::check_call_arguments(call, rank(), size(), send, recv);
      collectives::check_element_alignment(call, rank(), size(), send, recv);
      make_context_current();
      FP8C_CU(driver().cuStreamSynchronize(stream));
      state_->slots[static_cast<std::size_t>(rank())] = {send, recv};
      state_->rendezvous.wait_for_all(rank(), call, InProcessRendezvous::Phase::kArrive,
                                      deadline_from_now(), timeout());
      if (rank() == 0) {
        lead();
        FP8C_CU(driver().cuStreamSynchronize(group_stream()));
      }
      state_->rendezvous.wait_for_all(rank(), call, InProcessRendezvous::Phase::kDepart,
                                      deadline_from_now(), timeout());
    } catch (const collectives::CollectiveError& error) {
      fail(error);
      throw;
    } catch (const std::exception& error) {
      const collectives::CollectiveError wrapped(FailureKind::kTransport, operation, rank(), size(),
                                                 std::string("device error: ") + error.what());
      fail(wrapped);
      throw wrapped;
    }
  }

  // Poisons this rank (the caller throws `error`) and releases its peers.
  void fail(const collectives::CollectiveError& error) noexcept {
    if (!health_.poison(error, /*reported=*/true)) return;
    try {
      state_->rendezvous.poison(FailureKind::kPeerFailed,
                                "rank " + std::to_string(rank()) + " failed: " + error.what());
    } catch (...) {
      state_->rendezvous.poison(FailureKind::kPeerFailed, "a rank failed");
    }
  }

  void make_context_current() const { FP8C_CU(driver().cuCtxSetCurrent(state_->context)); }

  std::chrono::steady_clock::time_point deadline_from_now() const {
    return std::chrono::steady_clock::now() + timeout();
  }

  const LocalGroupState::Slot& slot(int r) const {
    return state_->slots[static_cast<std::size_t>(r)];
  }
  CUstream group_stream() const { return state_->stream.get(); }
  static std::uint64_t block_bytes(const CollectiveCall& call) {
    return call.count * element_bytes(call.dtype);
  }

  std::shared_ptr<LocalGroupState> state_;
  CommHealth health_;
  collectives::CallSequence sequence_;
};

}  // namespace

LocalDeviceGroup::LocalDeviceGroup(int size, std::chrono::milliseconds timeout, const Jit& jit)
    : size_(size), timeout_(timeout), claims_("LocalDeviceGroup", size) {
  if (size < 1 || size > kRankMaxRanks) {
    throw std::invalid_argument("LocalDeviceGroup: size " + std::to_string(size) +
                                " is outside 1.." + std::to_string(kRankMaxRanks));
  }
  if (timeout.count() <= 0)
    throw std::invalid_argument("LocalDeviceGroup: timeout must be positive");
  state_ = std::make_shared<LocalGroupState>(size, jit);
}

LocalDeviceGroup::~LocalDeviceGroup() = default;

std::unique_ptr<DeviceCommunicator> LocalDeviceGroup::communicator(int rank) {
  claims_.claim(rank);
  return std::make_unique<LocalDeviceCommunicator>(rank, size_, timeout_, state_);
}

}  // namespace fp8c::runtime
