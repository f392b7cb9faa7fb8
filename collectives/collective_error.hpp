// The one exception type every collective throws.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace fp8c::collectives {

enum class FailureKind {
  kInvalidArgument,  // refused before communicating (FP8 reduction, bad root, overlap, ...)
  kMismatch,         // ranks called different collectives, counts, dtypes, ops or roots
  kTimeout,          // a rank did not arrive (or finish) within the timeout
  kPeerFailed,       // another rank failed or aborted while this one waited
  kTransport,        // the transport (gloo/TCP) reported an error
  kPoisoned,         // refused at once: an earlier error (on this rank, or on any rank
                     // of an in-process group before this rank arrived) poisoned it
};

// "invalid argument", "mismatch", "timeout", ...
std::string_view failure_kind_name(FailureKind kind);

class CollectiveError : public std::runtime_error {
 public:
  // `operation` names the call, e.g. "all_reduce #3 (count=16, dtype=float32,
  // op=sum)" or "connect"; what() reads "fp8c collectives: <operation> failed
  // on rank <rank> of <size> (<kind>): <detail>".
  CollectiveError(FailureKind kind, std::string operation, int rank, int size, std::string detail);

  FailureKind kind() const { return kind_; }
  const std::string& operation() const { return operation_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& detail() const { return detail_; }

 private:
  FailureKind kind_;
  std::string operation_;
  int rank_;
  int size_;
  std::string detail_;
};

}  // namespace fp8c::collectives
