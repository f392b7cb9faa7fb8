#include "runtime/gpu/step_profiler.hpp"

namespace fp8c::runtime {

void StepProfiler::begin(const std::string& label, StepKind kind, CUstream stream) {
  if (used_ == marks_.size())
    marks_.push_back({label, kind, std::make_unique<Event>(), std::make_unique<Event>()});
  Mark& m = marks_[used_];
  m.label = label;
  m.kind = kind;
  m.start->record(stream);
}

void StepProfiler::end(CUstream stream) {
  marks_[used_++].stop->record(stream);
}

std::vector<StepTiming> StepProfiler::timings() const {
  std::vector<StepTiming> out;
  for (std::size_t i = 0; i < used_; ++i)
    out.push_back({marks_[i].label, marks_[i].kind, marks_[i].stop->since(*marks_[i].start)});
  return out;
}

}  // namespace fp8c::runtime
