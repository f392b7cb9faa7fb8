// Text and JSON forms of a Plan. Both list the same facts: tensors with
// logical shape, physical order, sharding and segments; steps with their
// tensors; bytes communicated and buffer bytes per rank.
#include "codegen/plan/plan_print.hpp"

#include <set>
#include <sstream>

namespace fp8c {
namespace {

std::string dim_text(const Dim& d) {
  std::string s = d.name + " " + std::to_string(d.local);
  if (d.sharded()) s += "/" + std::to_string(d.global);
  return s;
}

std::string step_flags(const Step& s) {
  std::string f;
  auto add = [&](bool on, const char* name) {
    if (on) f += std::string(f.empty() ? "" : " ") + name;
  };
  if (s.kind == StepKind::quantize) {
    add(s.rowwise, "rowwise");
    add(s.columnwise, "columnwise");
  }
  if (s.kind == StepKind::gemm) f += std::string(to_string(s.role));
  add(s.kind == StepKind::gemm && s.high_precision, "high-precision");
  add(s.fused_amax, "+amax");
  add(s.fused_dbias, "+dbias");
  add(s.fused_dact, "+dact");
  add(s.bias, "+bias");
  if (s.activation != Activation::none) f += " +" + std::string(to_string(s.activation));
  add(s.segmented_k, "segmented-K");
  add(s.stats, "+stats");
  return f;
}

std::uint64_t buffer_bytes(const LayerPlan& l) {
  std::uint64_t total = 0;
  for (const auto& t : l.tensors) total += t.bytes();
  return total;
}

std::uint64_t communicated(const std::vector<Step>& steps) {
  std::uint64_t total = 0;
  for (const auto& s : steps) total += s.bytes_per_rank;
  return total;
}

void print_pass(std::ostringstream& out, const LayerPlan& l, const char* name,
                const std::vector<Step>& steps) {
  if (steps.empty()) return;
  out << "  " << name << ":\n";
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    out << "    " << i << ". " << to_string(s.kind);
    if (auto f = step_flags(s); !f.empty()) out << " [" << f << "]";
    if (s.dim >= 0 && !s.outputs.empty())
      out << " along '" << l.tensor(s.outputs[0]).dims[static_cast<std::size_t>(s.dim)].name << "'";
    if (is_collective(s.kind)) out << ", " << s.bytes_per_rank << " bytes/rank";
    out << "\n";
    for (int id : s.inputs) out << "         in  " << describe_tensor(l.tensor(id)) << "\n";
    for (int id : s.outputs) out << "         out " << describe_tensor(l.tensor(id)) << "\n";
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

std::string json_steps(const std::vector<Step>& steps) {
  std::ostringstream o;
  o << "[";
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    o << (i ? "," : "") << "\n        {\"kind\": " << json_string(std::string(to_string(s.kind)));
    auto ids = [&](const std::vector<int>& v) {
      std::string r = "[";
      for (std::size_t k = 0; k < v.size(); ++k) r += (k ? ", " : "") + std::to_string(v[k]);
      return r + "]";
    };
    o << ", \"inputs\": " << ids(s.inputs) << ", \"outputs\": " << ids(s.outputs);
    if (s.dim >= 0) o << ", \"dim\": " << s.dim;
    if (is_collective(s.kind)) o << ", \"bytes_per_rank\": " << s.bytes_per_rank;
    if (s.kind == StepKind::quantize)
      o << ", \"rowwise\": " << (s.rowwise ? "true" : "false")
        << ", \"columnwise\": " << (s.columnwise ? "true" : "false");
    if (s.kind == StepKind::gemm) {
      o << ", \"role\": " << json_string(std::string(to_string(s.role)))
        << ", \"high_precision\": " << (s.high_precision ? "true" : "false")
        << ", \"bias\": " << (s.bias ? "true" : "false")
        << ", \"activation\": " << json_string(std::string(to_string(s.activation)))
        << ", \"segmented_k\": " << (s.segmented_k ? "true" : "false");
    }
    o << ", \"fused_amax\": " << (s.fused_amax ? "true" : "false")
      << ", \"fused_dbias\": " << (s.fused_dbias ? "true" : "false")
      << ", \"fused_dact\": " << (s.fused_dact ? "true" : "false")
      << ", \"stats\": " << (s.stats ? "true" : "false") << "}";
  }
  o << (steps.empty() ? "]" : "\n      ]");
  return o.str();
}

}  // namespace

std::string describe_tensor(const Tensor& t) {
  std::ostringstream o;
  o << t.name << " " << to_string(t.type) << " [" << dim_text(t.dims[0]) << ", "
    << dim_text(t.dims[1]) << "] " << to_string(t.usage);
  if (t.scaling != Scaling::none) o << " " << to_string(t.scaling);
  if (t.segmented) o << " segmented(" << t.dims[static_cast<std::size_t>(*t.segmented)].name << ")";
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
    out << "  communicated per rank: forward " << communicated(l.forward) << " B, backward "
        << communicated(l.backward) << " B, update " << communicated(l.update) << " B\n";
    out << "  buffers per rank: " << buffer_bytes(l) << " B in " << l.tensors.size()
        << " tensors\n";
  }
  return out.str();
}

std::string plan_to_json(const Plan& plan) {
  std::ostringstream o;
  o << "{\n  \"version\": 1,\n  \"tokens\": " << plan.tokens << ",\n  \"ranks\": " << plan.ranks
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
        << ", \"type\": " << json_string(std::string(to_string(t.type))) << ", \"dims\": [";
      for (std::size_t d = 0; d < 2; ++d)
        o << (d ? ", " : "") << "{\"name\": " << json_string(t.dims[d].name)
          << ", \"local\": " << t.dims[d].local << ", \"global\": " << t.dims[d].global << "}";
      o << "], \"usage\": " << json_string(std::string(to_string(t.usage)))
        << ", \"scaling\": " << json_string(std::string(to_string(t.scaling)))
        << ", \"scale\": " << t.scale
        << ", \"segmented\": " << (t.segmented ? std::to_string(*t.segmented) : std::string("null"))
        << ", \"external\": " << (t.external ? "true" : "false") << ", \"bytes\": " << t.bytes()
        << "}";
    }
    o << "\n      ],\n      \"forward\": " << json_steps(l.forward)
      << ",\n      \"backward\": " << json_steps(l.backward)
      << ",\n      \"update\": " << json_steps(l.update)
      << ",\n      \"buffer_bytes\": " << buffer_bytes(l) << "\n    }";
  }
  o << "\n  ]\n}\n";
  return o.str();
}

}  // namespace fp8c
