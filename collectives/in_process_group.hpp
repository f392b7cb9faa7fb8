// N ranks as threads of one process, sharing memory: the always-available
// CPU backend (no sockets, no files). Stricter than NCCL on purpose: every
// collective checks that all ranks made the same call.
//
//   InProcessGroup group(4, std::chrono::seconds(2));
//   // in thread r:
//   std::unique_ptr<Communicator> comm = group.communicator(r);
//   comm->all_reduce(x, x, n, ElemType::fp32, ReduceOp::kMax);
#pragma once

#include <chrono>
#include <memory>

#include "collectives/communicator.hpp"
#include "collectives/rank_claims.hpp"

namespace fp8c::collectives {

class InProcessRendezvous;

class InProcessGroup {
 public:
  explicit InProcessGroup(int size, std::chrono::milliseconds timeout = kDefaultCollectiveTimeout);
  ~InProcessGroup();
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  int size() const { return size_; }

  // The communicator of `rank`. Each rank is handed out once (two handles on
  // one rank would corrupt the rendezvous); throws std::invalid_argument
  // otherwise. The communicators share the group's state and may outlive
  // this object.
  std::unique_ptr<Communicator> communicator(int rank);

 private:
  int size_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<InProcessRendezvous> rendezvous_;
  RankClaims claims_;
};

}  // namespace fp8c::collectives
