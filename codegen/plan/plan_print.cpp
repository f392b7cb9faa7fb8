// Text and JSON forms of a Plan. Both list the same facts: tensors with
// their quantity, form, logical shape, physical order, sharding and
// segments; steps with their named operands; the layer's inputs and outputs,
// its delayed-scaling state; bytes communicated and buffer bytes per rank.
#include "codegen/plan/plan_print.hpp"
#include "codegen/plan/overloaded.hpp"

#include <sstream>

namespace fp8c {
namespace {

// A step's operands by name, in a fixed order, and its flags.
struct StepView {
  std::vector<std::pair<const char*, int>> operands;  // name, tensor id
  std::vector<std::pair<const char*, std::string>> attributes;
  int dim = -1;  // collectives and permute: the logical dim
};

const char* yes(bool b) {
  return b ? "true" : "false";
}

void epilogue_view(StepView& v, const OutputEpilogue& e) {
  v.operands.push_back({"bias", e.bias});
  v.operands.push_back({"out_scale", e.out_scale});
  v.operands.push_back({"pre_activation", e.pre_activation});
  v.operands.push_back({"out_amax", e.out_amax});
  v.operands.push_back({"out_columnwise", e.out_columnwise});
  v.operands.push_back({"dact_input", e.dact_input});
  v.operands.push_back({"dbias", e.dbias});
  if (e.activation != Activation::none)
    v.attributes.push_back({"activation", std::string(to_string(e.activation))});
  if (e.dact != Activation::none) v.attributes.push_back({"dact", std::string(to_string(e.dact))});
}

StepView view(const Step& step) {
  StepView v;
  std::visit(
      Overloaded{
          [&](const AmaxStep& s) {
            v.operands = {{"src", s.src}, {"pre_activation", s.pre_activation}, {"amax", s.amax}};
            if (s.dact != Activation::none)
              v.attributes.push_back({"dact", std::string(to_string(s.dact))});
          },
          [&](const AmaxAllReduceStep& s) {
            v.operands = {{"in", s.in}, {"out", s.out}};
          },
          [&](const QuantizeStep& s) {
            v.operands = {{"src", s.src},
                          {"pre_activation", s.pre_activation},
                          {"scale", s.scale},
                          {"amax_in", s.amax_in},
                          {"rowwise", s.rowwise},
                          {"columnwise", s.columnwise},
                          {"rowwise_scales", s.rowwise_scales},
                          {"columnwise_scales", s.columnwise_scales},
                          {"scale_out", s.scale_out},
                          {"amax", s.amax},
                          {"dbias", s.dbias}};
            if (s.dact != Activation::none)
              v.attributes.push_back({"dact", std::string(to_string(s.dact))});
            if (s.pow2_scale) v.attributes.push_back({"pow2_scale", "true"});
            if (s.stats) v.attributes.push_back({"stats", "true"});
          },
          [&](const TransposeStep& s) {
            v.operands = {{"in", s.in}, {"out", s.out}};
          },
          [&](const AllGatherStep& s) {
            v.operands = {{"in", s.in},
                          {"out", s.out},
                          {"scales_in", s.scales_in},
                          {"scales_out", s.scales_out}};
            v.dim = s.dim;
          },
          [&](const PermuteStep& s) {
            v.operands = {{"in", s.in},
                          {"out", s.out},
                          {"scales_in", s.scales_in},
                          {"scales_out", s.scales_out}};
            v.dim = s.dim;
          },
          [&](const ReduceScatterStep& s) {
            v.operands = {{"in", s.in}, {"out", s.out}};
            v.dim = s.dim;
          },
          [&](const AllReduceStep& s) {
            v.operands = {{"in", s.in}, {"out", s.out}};
          },
          [&](const GemmStep& s) {
            v.attributes.push_back({"role", std::string(to_string(s.role))});
            v.operands = {{"a", s.a}, {"b", s.b}, {"out", s.out}};
            epilogue_view(v, s.epilogue);
            if (s.high_precision) v.attributes.push_back({"high_precision", "true"});
            if (s.segmented_k) v.attributes.push_back({"segmented_k", "true"});
            if (s.accumulate) v.attributes.push_back({"accumulate", "true"});
          },
          [&](const EpilogueStep& s) {
            v.operands = {{"in", s.in}, {"out", s.out}};
            epilogue_view(v, s.epilogue);
          },
          [&](const GradEpilogueStep& s) {
            v.operands = {{"dy", s.dy},
                          {"pre_activation", s.pre_activation},
                          {"out", s.out},
                          {"dbias", s.dbias}};
            if (s.dact != Activation::none)
              v.attributes.push_back({"dact", std::string(to_string(s.dact))});
          },
          [&](const ScaleUpdateStep& s) {
            for (const auto& e : s.entries) {
              v.operands.push_back({"amax", e.amax});
              v.operands.push_back({"next_scale", e.next_scale});
            }
          },
      },
      step.op);
  return v;
}

std::string dim_text(const Dim& d) {
  std::string s = d.name + " " + std::to_string(d.local);
  if (d.sharded()) {
    s += '/';
    s += std::to_string(d.global);
  }
  return s;
}

std::uint64_t buffer_bytes(const LayerPlan& l) {
  std::uint64_t total = 0;
  for (const auto& t : l.tensors) total += t.bytes();
  return total;
}

std::uint64_t communicated(const std::vector<Step>& steps) {
  std::uint64_t total = 0;
  for (const auto& s : steps) total += s.bytes_per_rank();
  return total;
}

void print_pass(std::ostringstream& out, const LayerPlan& l, const char* name,
                const std::vector<Step>& steps) {
  if (steps.empty()) return;
  out << "  " << name << ":\n";
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    const StepView v = view(s);
    out << "    " << i << ". " << to_string(s.kind());
    std::string flags;
    for (const auto& [key, value] : v.attributes)
      flags += (flags.empty() ? "" : " ") + (value == "true" ? std::string(key) : value);
    if (!flags.empty()) out << " [" << flags << "]";
    if (v.dim >= 0 && !v.operands.empty())
      out << " along '" << l.tensor(v.operands[0].second).dims[static_cast<std::size_t>(v.dim)].name
          << "'";
    if (s.is_collective()) out << ", " << s.bytes_per_rank() << " bytes/rank";
    out << "\n";
    for (const auto& [key, id] : v.operands)
      if (id != kNoTensor)
        out << "         " << key << " " << describe_tensor(l.tensor(id)) << "\n";
  }
}

std::string json_string(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      r += ' ';
      continue;
    }
    r += c;
  }
  return r + "\"";
}

std::string ids(const std::vector<int>& v) {
  std::string r = "[";
  for (std::size_t k = 0; k < v.size(); ++k) r += (k ? ", " : "") + std::to_string(v[k]);
  return r + "]";
}

std::string json_steps(const std::vector<Step>& steps) {
  std::ostringstream o;
  o << "[";
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    const StepView v = view(s);
    o << (i ? "," : "") << "\n        {\"kind\": " << json_string(std::string(to_string(s.kind())));
    if (const auto* u = s.as<ScaleUpdateStep>()) {
      o << ", \"entries\": [";
      for (std::size_t e = 0; e < u->entries.size(); ++e)
        o << (e ? ", " : "") << "{\"state\": " << u->entries[e].state
          << ", \"amax\": " << u->entries[e].amax
          << ", \"next_scale\": " << u->entries[e].next_scale << "}";
      o << "]";
    } else {
      for (const auto& [key, id] : v.operands) o << ", \"" << key << "\": " << id;
    }
    for (const auto& [key, value] : v.attributes)
      o << ", \"" << key << "\": " << (value == "true" ? value : json_string(value));
    if (v.dim >= 0) o << ", \"dim\": " << v.dim;
    if (s.is_collective()) o << ", \"bytes_per_rank\": " << s.bytes_per_rank();
    o << ", \"inputs\": " << ids(s.inputs()) << ", \"outputs\": " << ids(s.outputs()) << "}";
  }
  o << (steps.empty() ? "]" : "\n      ]");
  return o.str();
}

// The layer's io fields, by name (kNoTensor ones left out).
std::vector<std::pair<const char*, int>> io_fields(const LayerIo& io) {
  const std::vector<std::pair<const char*, int>> all = {{"x", io.x},
                                                        {"x_fp8", io.x_fp8},
                                                        {"x_amax", io.x_amax},
                                                        {"w", io.w},
                                                        {"b", io.b},
                                                        {"dy", io.dy},
                                                        {"y", io.y},
                                                        {"y_fp8", io.y_fp8},
                                                        {"y_scale", io.y_scale},
                                                        {"y_amax", io.y_amax},
                                                        {"z", io.z},
                                                        {"dx", io.dx},
                                                        {"dw", io.dw},
                                                        {"db", io.db},
                                                        {"x_fp8_col", io.x_fp8_col},
                                                        {"y_fp8_col", io.y_fp8_col},
                                                        {"dy_fp8_col", io.dy_fp8_col},
                                                        {"dy_amax", io.dy_amax},
                                                        {"dy_db", io.dy_db},
                                                        {"dx_scale", io.dx_scale},
                                                        {"dx_amax", io.dx_amax},
                                                        {"dx_fp8_col", io.dx_fp8_col},
                                                        {"dx_dact_input", io.dx_dact_input},
                                                        {"dx_db", io.dx_db}};
  std::vector<std::pair<const char*, int>> set;
  for (const auto& f : all)
    if (f.second != kNoTensor) set.push_back(f);
  return set;
}

}  // namespace

std::string describe_tensor(const Tensor& t) {
  std::ostringstream o;
  o << t.name << " " << to_string(t.type) << " [" << dim_text(t.dims[0]) << ", "
    << dim_text(t.dims[1]) << "] " << to_string(t.usage);
  if (t.scaling != Scaling::none) o << " " << to_string(t.scaling);
  if (t.segmented) o << " segmented(" << t.dims[static_cast<std::size_t>(*t.segmented)].name << ")";
  for (std::size_t d = 0; d < 2; ++d)
    if (t.block_segments[d] > 1)
      o << " blocks-restart(" << t.dims[d].name << " x" << t.block_segments[d] << ")";
  if (t.external) o << " external";
  o << " " << t.bytes() << "B";
  return o.str();
}

std::string print_plan(const Plan& plan) {
  std::ostringstream out;
  out << "plan: " << plan.tokens << " tokens\n";
  for (const auto& l : plan.layers) {
    out << "\nlayer " << l.layer << " (" << l.ranks << " rank" << (l.ranks == 1 ? "" : "s")
        << ")\n";
    for (const auto& n : l.notes) out << "  note: " << n << "\n";
    print_pass(out, l, "forward", l.forward);
    print_pass(out, l, "backward", l.backward);
    print_pass(out, l, "update", l.update);
    std::string io;
    for (const auto& [key, id] : io_fields(l.io))
      io += std::string(io.empty() ? "" : ", ") + key + " = " + l.tensor(id).name;
    out << "  io: " << io << "\n";
    for (const auto& d : l.delayed)
      out << "  delayed state '" << d.key() << "' (" << to_string(d.format) << "): scale "
          << l.tensor(d.scale).name << ", amax "
          << (d.amax_reduced == kNoTensor ? std::string("-") : l.tensor(d.amax_reduced).name)
          << "\n";
    out << "  communicated per rank: forward " << communicated(l.forward) << " B, backward "
        << communicated(l.backward) << " B, update " << communicated(l.update) << " B\n";
    out << "  buffers per rank: " << buffer_bytes(l) << " B in " << l.tensors.size()
        << " tensors\n";
  }
  return out.str();
}

std::string plan_to_json(const Plan& plan) {
  std::ostringstream o;
  o << "{\n  \"version\": 2,\n  \"tokens\": " << plan.tokens << ",\n  \"ranks\": " << plan.ranks
    << ",\n  \"layers\": [";
  for (std::size_t li = 0; li < plan.layers.size(); ++li) {
    const LayerPlan& l = plan.layers[li];
    o << (li ? "," : "") << "\n    {\n      \"name\": " << json_string(l.layer)
      << ",\n      \"ranks\": " << l.ranks << ",\n      \"notes\": [";
    for (std::size_t i = 0; i < l.notes.size(); ++i)
      o << (i ? ", " : "") << json_string(l.notes[i]);
    o << "],\n      \"tensors\": [";
    for (std::size_t i = 0; i < l.tensors.size(); ++i) {
      const Tensor& t = l.tensors[i];
      o << (i ? "," : "") << "\n        {\"id\": " << t.id << ", \"name\": " << json_string(t.name)
        << ", \"quantity\": " << json_string(std::string(to_string(t.quantity)))
        << ", \"form\": " << json_string(std::string(to_string(t.form)))
        << ", \"type\": " << json_string(std::string(to_string(t.type))) << ", \"dims\": [";
      for (std::size_t d = 0; d < 2; ++d)
        o << (d ? ", " : "") << "{\"name\": " << json_string(t.dims[d].name)
          << ", \"local\": " << t.dims[d].local << ", \"global\": " << t.dims[d].global << "}";
      o << "], \"usage\": " << json_string(std::string(to_string(t.usage)))
        << ", \"scaling\": " << json_string(std::string(to_string(t.scaling)))
        << ", \"scale\": " << t.scale
        << ", \"segmented\": " << (t.segmented ? std::to_string(*t.segmented) : std::string("null"))
        << ", \"block_segments\": [" << t.block_segments[0] << ", " << t.block_segments[1] << "]"
        << ", \"external\": " << yes(t.external) << ", \"bytes\": " << t.bytes() << "}";
    }
    o << "\n      ],\n      \"io\": {";
    bool first = true;
    for (const auto& [key, id] : io_fields(l.io)) {
      o << (first ? "" : ", ") << "\"" << key << "\": " << id;
      first = false;
    }
    o << "},\n      \"delayed\": [";
    for (std::size_t i = 0; i < l.delayed.size(); ++i) {
      const DelayedTensor& d = l.delayed[i];
      o << (i ? ", " : "") << "{\"key\": " << json_string(d.key())
        << ", \"format\": " << json_string(std::string(to_string(d.format)))
        << ", \"scale\": " << d.scale << ", \"amax\": " << d.amax
        << ", \"amax_reduced\": " << d.amax_reduced << ", \"next_scale\": " << d.next_scale << "}";
    }
    o << "],\n      \"forward\": " << json_steps(l.forward)
      << ",\n      \"backward\": " << json_steps(l.backward)
      << ",\n      \"update\": " << json_steps(l.update)
      << ",\n      \"buffer_bytes\": " << buffer_bytes(l) << "\n    }";
  }
  o << "\n  ]\n}\n";
  return o.str();
}

}  // namespace fp8c
