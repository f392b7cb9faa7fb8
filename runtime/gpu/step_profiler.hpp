// Times each step of a pass with a pair of CUDA events around it on the
// executor's stream (for `fp8c bench`): what each kernel, GEMM and
// collective costs inside a whole step, not alone.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "codegen/plan/plan.hpp"
#include "runtime/device.hpp"

namespace fp8c::runtime {

struct StepTiming {
  std::string label;  // "fc1 forward 2 gemm fprop"
  StepKind kind = StepKind::gemm;
  float milliseconds = 0;
};

class StepProfiler {
 public:
  // Starts a new round of measurements (events are reused).
  void reset() { used_ = 0; }
  void begin(const std::string& label, StepKind kind, CUstream stream);
  void end(CUstream stream);
  // The round's timings; every event must have completed (synchronize first).
  std::vector<StepTiming> timings() const;

 private:
  struct Mark {
    std::string label;
    StepKind kind;
    std::unique_ptr<Event> start, stop;
  };
  std::vector<Mark> marks_;
  std::size_t used_ = 0;
};

}  // namespace fp8c::runtime
