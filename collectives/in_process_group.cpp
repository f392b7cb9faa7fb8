#include "collectives/in_process_group.hpp"

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "collectives/in_process_rendezvous.hpp"
#include "collectives/reduce.hpp"

namespace fp8c::collectives {
namespace {

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(int rank, int size, std::chrono::milliseconds timeout,
                        std::shared_ptr<InProcessRendezvous> rendezvous)
      : Communicator(rank, size, timeout), rendezvous_(std::move(rendezvous)) {}

  std::string_view backend_name() const override { return "in-process"; }

 protected:
  void run_all_gather(const CollectiveCall& call, const void* send, void* recv) override {
    const std::size_t bytes = call.count * element_bytes(call.dtype);
    run_two_phases(call, send, bytes, [&] {
      for (int peer = 0; peer < size(); ++peer) {
        copy_bytes(static_cast<std::byte*>(recv) + static_cast<std::size_t>(peer) * bytes,
                   staged(peer), bytes);
      }
    });
  }

  void run_reduce_scatter(const CollectiveCall& call, const void* send, void* recv) override {
    const std::size_t block_bytes = call.count * element_bytes(call.dtype);
    const std::size_t my_block = static_cast<std::size_t>(rank()) * block_bytes;
    run_two_phases(call, send, block_bytes * static_cast<std::size_t>(size()), [&] {
      std::vector<const void*> inputs;
      for (int peer = 0; peer < size(); ++peer) inputs.push_back(staged(peer) + my_block);
      reduce_in_rank_order(inputs, recv, call.count, call.dtype, call.op);
    });
  }

  void run_all_reduce(const CollectiveCall& call, const void* send, void* recv) override {
    run_two_phases(call, send, call.count * element_bytes(call.dtype), [&] {
      std::vector<const void*> inputs;
      for (int peer = 0; peer < size(); ++peer) inputs.push_back(staged(peer));
      reduce_in_rank_order(inputs, recv, call.count, call.dtype, call.op);
    });
  }

  void run_broadcast(const CollectiveCall& call, const void* send, void* recv) override {
    const std::size_t bytes = call.count * element_bytes(call.dtype);
    // Only the root stages data; the others stage nothing.
    run_two_phases(call, rank() == call.root ? send : nullptr, rank() == call.root ? bytes : 0,
                   [&] { copy_bytes(recv, staged(call.root), bytes); });
  }

  // No staging copy: the previous rank's send is read in place, between
  // arrive (it has published the pointer and waits) and depart (it waits
  // until its successor has copied). send and recv are disjoint (checked),
  // so writing recv never touches what the next rank reads.
  void run_ring_shift(const CollectiveCall& call, const void* send, void* recv) override {
    const auto deadline = deadline_from_now();
    const int previous = ring_previous(rank(), size());
    rendezvous_->published(rank()) = send;
    rendezvous_->wait_for_all(rank(), call, InProcessRendezvous::Phase::kArrive, deadline,
                              timeout());
    copy_bytes(recv, rendezvous_->published(previous), call.count * element_bytes(call.dtype));
    rendezvous_->wait_for_all(rank(), call, InProcessRendezvous::Phase::kDepart, deadline,
                              timeout());
  }

  void run_barrier(const CollectiveCall& call) override {
    rendezvous_->wait_for_all(rank(), call, InProcessRendezvous::Phase::kArrive,
                              deadline_from_now(), timeout());
  }

  void release_peers(const std::string& reason) noexcept override {
    try {
      rendezvous_->poison(FailureKind::kPeerFailed,
                          "rank " + std::to_string(rank()) + " failed: " + reason);
    } catch (...) {
      // Allocation failure while composing the text: nothing better to do.
    }
  }

 private:
  template <typename ReadStaged>
  void run_two_phases(const CollectiveCall& call, const void* send, std::size_t send_bytes,
                      ReadStaged read_staged) {
    const auto deadline = deadline_from_now();
    std::vector<std::byte>& mine = rendezvous_->staging(rank());
    mine.resize(send_bytes);
    copy_bytes(mine.data(), static_cast<const std::byte*>(send), send_bytes);
    rendezvous_->wait_for_all(rank(), call, InProcessRendezvous::Phase::kArrive, deadline,
                              timeout());
    read_staged();
    rendezvous_->wait_for_all(rank(), call, InProcessRendezvous::Phase::kDepart, deadline,
                              timeout());
  }

  const std::byte* staged(int peer) const { return rendezvous_->staging(peer).data(); }

  static void copy_bytes(void* to, const void* from, std::size_t bytes) {
    if (bytes > 0) std::memcpy(to, from, bytes);
  }

  std::shared_ptr<InProcessRendezvous> rendezvous_;
};

}  // namespace

InProcessGroup::InProcessGroup(int size, std::chrono::milliseconds timeout)
    : size_(size), timeout_(timeout), claims_("InProcessGroup", size) {
  if (size < 1) throw std::invalid_argument("InProcessGroup: a group needs at least one rank");
  if (timeout.count() <= 0) throw std::invalid_argument("InProcessGroup: timeout must be positive");
  rendezvous_ = std::make_shared<InProcessRendezvous>(size);
}

InProcessGroup::~InProcessGroup() = default;

std::unique_ptr<Communicator> InProcessGroup::communicator(int rank) {
  claims_.claim(rank);
  return std::make_unique<InProcessCommunicator>(rank, size_, timeout_, rendezvous_);
}

}  // namespace fp8c::collectives
