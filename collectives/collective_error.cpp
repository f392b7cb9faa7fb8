#include "collectives/collective_error.hpp"

#include <utility>

namespace fp8c::collectives {

std::string_view failure_kind_name(FailureKind kind) {
  switch (kind) {
    case FailureKind::kInvalidArgument:
      return "invalid argument";
    case FailureKind::kMismatch:
      return "mismatch";
    case FailureKind::kTimeout:
      return "timeout";
    case FailureKind::kPeerFailed:
      return "peer failed";
    case FailureKind::kTransport:
      return "transport error";
    case FailureKind::kPoisoned:
      return "poisoned";
  }
  return "unknown";
}

namespace {

std::string compose(FailureKind kind, const std::string& operation, int rank, int size,
                    const std::string& detail) {
  std::string text = "fp8c collectives: " + operation + " failed on rank " + std::to_string(rank) +
                     " of " + std::to_string(size) + " (";
  text += failure_kind_name(kind);
  text += "): " + detail;
  return text;
}

}  // namespace

CollectiveError::CollectiveError(FailureKind kind, std::string operation, int rank, int size,
                                 std::string detail)
    : std::runtime_error(compose(kind, operation, rank, size, detail)),
      kind_(kind),
      operation_(std::move(operation)),
      rank_(rank),
      size_(size),
      detail_(std::move(detail)) {}

}  // namespace fp8c::collectives
