// Names and sizes of Plan values, and the generic view of typed steps.
#include "codegen/plan/plan.hpp"
#include "codegen/plan/overloaded.hpp"

#include <type_traits>

namespace fp8c {
namespace {

void push(std::vector<int>& v, int id) {
  if (id != kNoTensor) v.push_back(id);
}

}  // namespace

bool is_gradient(Quantity q) {
  return q == Quantity::dy || q == Quantity::dz || q == Quantity::dx || q == Quantity::dw ||
         q == Quantity::db;
}

std::uint64_t Tensor::bytes() const {
  return elements() * element_bytes(type);
}

// Pointers to a step's operand fields, inputs or outputs, in a fixed order
// per kind; unset operands (kNoTensor) are included.
std::vector<int*> Step::refs(bool inputs) {
  std::vector<int*> in, out;
  std::visit(
      Overloaded{
          [&](AmaxStep& s) {
            in = {&s.src, &s.pre_activation};
            out = {&s.amax};
          },
          [&](AmaxAllReduceStep& s) {
            in = {&s.in};
            out = {&s.out};
          },
          [&](QuantizeStep& s) {
            in = {&s.src, &s.pre_activation, &s.scale, &s.amax_in};
            out = {&s.rowwise,   &s.columnwise, &s.rowwise_scales, &s.columnwise_scales,
                   &s.scale_out, &s.amax,       &s.dbias};
          },
          [&](TransposeStep& s) {
            in = {&s.in};
            out = {&s.out};
          },
          [&](AllGatherStep& s) {
            in = {&s.in, &s.scales_in};
            out = {&s.out, &s.scales_out};
          },
          [&](PermuteStep& s) {
            in = {&s.in, &s.scales_in};
            out = {&s.out, &s.scales_out};
          },
          [&](ReduceScatterStep& s) {
            in = {&s.in};
            out = {&s.out};
          },
          [&](AllReduceStep& s) {
            in = {&s.in};
            out = {&s.out};
          },
          [&](GemmStep& s) {
            in = {&s.a, &s.b, &s.epilogue.bias, &s.epilogue.out_scale, &s.epilogue.dact_input};
            out = {&s.out, &s.epilogue.pre_activation, &s.epilogue.out_amax,
                   &s.epilogue.out_columnwise, &s.epilogue.dbias};
          },
          [&](EpilogueStep& s) {
            in = {&s.in, &s.epilogue.bias, &s.epilogue.out_scale, &s.epilogue.dact_input};
            out = {&s.out, &s.epilogue.pre_activation, &s.epilogue.out_amax,
                   &s.epilogue.out_columnwise, &s.epilogue.dbias};
          },
          [&](GradEpilogueStep& s) {
            in = {&s.dy, &s.pre_activation};
            out = {&s.out, &s.dbias};
          },
          [&](ScaleUpdateStep& s) {
            for (auto& e : s.entries) {
              in.push_back(&e.amax);
              out.push_back(&e.next_scale);
            }
          },
      },
      op);
  return inputs ? in : out;
}

std::vector<int> Step::inputs() const {
  std::vector<int> v;
  for (int* id : const_cast<Step*>(this)->refs(true)) push(v, *id);
  return v;
}

std::vector<int> Step::outputs() const {
  std::vector<int> v;
  for (int* id : const_cast<Step*>(this)->refs(false)) push(v, *id);
  return v;
}

void Step::replace_input(int from, int to) {
  for (int* id : refs(true))
    if (*id == from) *id = to;
}

std::uint64_t Step::bytes_per_rank() const {
  return std::visit(
      [](const auto& s) -> std::uint64_t {
        if constexpr (requires { s.bytes_per_rank; })
          return s.bytes_per_rank;
        else
          return 0;
      },
      op);
}

bool is_collective(StepKind k) {
  return k == StepKind::amax_all_reduce || k == StepKind::all_gather ||
         k == StepKind::reduce_scatter || k == StepKind::all_reduce;
}

bool Step::is_collective() const {
  return fp8c::is_collective(kind());
}

std::string DelayedTensor::key() const {
  return std::string(to_string(quantity));
}

const Tensor* LayerPlan::find(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const Step* LayerPlan::producer(int id) const {
  for (const auto* pass : {&forward, &backward, &update})
    for (const auto& s : *pass)
      for (int o : s.outputs())
        if (o == id) return &s;
  return nullptr;
}

int LayerPlan::delayed_index_of_scale(int id) const {
  for (std::size_t i = 0; i < delayed.size(); ++i)
    if (delayed[i].scale == id || delayed[i].next_scale == id) return static_cast<int>(i);
  return -1;
}

const LayerPlan* Plan::find(std::string_view layer) const {
  for (const auto& l : layers)
    if (l.layer == layer) return &l;
  return nullptr;
}

std::uint64_t all_gather_bytes(std::uint64_t total, std::uint32_t ranks) {
  return total / ranks * (ranks - 1);
}

std::uint64_t all_reduce_bytes(std::uint64_t total, std::uint32_t ranks) {
  return 2 * all_gather_bytes(total, ranks);
}

std::string_view to_string(Usage u) {
  return u == Usage::rowwise ? "rowwise" : "columnwise";
}

std::uint64_t inner_block(Scaling s) {
  return s == Scaling::mx_1x32 ? 32 : s == Scaling::none || s == Scaling::per_tensor ? 1 : 128;
}

std::uint64_t outer_block(Scaling s) {
  return s == Scaling::block_128x128 ? 128 : 1;
}

std::string_view to_string(Scaling s) {
  switch (s) {
    case Scaling::none:
      return "none";
    case Scaling::per_tensor:
      return "per_tensor";
    case Scaling::block_1x128:
      return "1x128";
    case Scaling::block_128x128:
      return "128x128";
    case Scaling::mx_1x32:
      return "mx_1x32";
  }
  return "?";
}

std::string_view to_string(StepKind k) {
  switch (k) {
    case StepKind::amax:
      return "amax";
    case StepKind::amax_all_reduce:
      return "amax_all_reduce";
    case StepKind::quantize:
      return "quantize";
    case StepKind::transpose:
      return "transpose";
    case StepKind::all_gather:
      return "all_gather";
    case StepKind::permute:
      return "permute";
    case StepKind::reduce_scatter:
      return "reduce_scatter";
    case StepKind::all_reduce:
      return "all_reduce";
    case StepKind::gemm:
      return "gemm";
    case StepKind::epilogue:
      return "epilogue";
    case StepKind::grad_epilogue:
      return "grad_epilogue";
    case StepKind::scale_update:
      return "scale_update";
  }
  return "?";
}

std::string_view to_string(GemmRole r) {
  switch (r) {
    case GemmRole::fprop:
      return "fprop";
    case GemmRole::dgrad:
      return "dgrad";
    case GemmRole::wgrad:
      return "wgrad";
  }
  return "?";
}

std::string_view to_string(Quantity q) {
  switch (q) {
    case Quantity::x:
      return "x";
    case Quantity::w:
      return "w";
    case Quantity::b:
      return "b";
    case Quantity::dy:
      return "dy";
    case Quantity::dz:
      return "dz";
    case Quantity::y:
      return "y";
    case Quantity::z:
      return "z";
    case Quantity::dx:
      return "dx";
    case Quantity::dw:
      return "dw";
    case Quantity::db:
      return "db";
  }
  return "?";
}

std::string_view to_string(Form f) {
  switch (f) {
    case Form::value:
      return "value";
    case Form::partial:
      return "partial";
    case Form::fp8:
      return "fp8";
    case Form::block_scales:
      return "block_scales";
    case Form::scale:
      return "scale";
    case Form::amax:
      return "amax";
    case Form::amax_reduced:
      return "amax_reduced";
    case Form::next_scale:
      return "next_scale";
  }
  return "?";
}

}  // namespace fp8c
