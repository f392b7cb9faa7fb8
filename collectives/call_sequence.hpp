// Numbers the collectives of one communicator: the sequence every rank must
// agree on (collective_call.hpp), counted the same way by every backend, the
// host ones and the device ones alike.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/collective_call.hpp"

namespace fp8c::collectives {

class CallSequence {
 public:
  // What this call asks for, numbered after the calls before it (the first
  // is #0).
  CollectiveCall next(CollectiveKind kind, std::size_t count, ElemType dtype, ReduceOp op,
                      int root);

 private:
  std::uint64_t next_ = 0;
};

}  // namespace fp8c::collectives
