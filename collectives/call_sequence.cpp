#include "collectives/call_sequence.hpp"

namespace fp8c::collectives {

CollectiveCall CallSequence::next(CollectiveKind kind, std::size_t count, ElemType dtype,
                                  ReduceOp op, int root) {
  CollectiveCall call;
  call.kind = kind;
  call.count = count;
  call.dtype = dtype;
  call.op = op;
  call.root = root;
  call.sequence = next_++;
  return call;
}

}  // namespace fp8c::collectives
