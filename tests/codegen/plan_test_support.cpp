#include "tests/codegen/plan_test_support.hpp"

#include <algorithm>
#include <filesystem>

#include "fp8c/dsl.hpp"
#include "tests/test_paths.hpp"

namespace fp8c::testing {

Spec example(const std::string& file) {
  return load_spec(::fp8c::testing::examples_dir() + "/" + file);
}

std::vector<std::string> example_files() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(::fp8c::testing::examples_dir()))
    if (e.path().extension() == ".fp8") files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  return files;
}

Spec one_layer(RecipeKind recipe, ParallelMode mode, std::uint32_t tp, bool sequence_parallel,
               SaveInput save, Debug debug) {
  Spec spec;
  Layer l;
  l.name = "fc";
  l.in = 4096;
  l.out = 8192;
  l.bias = true;
  l.activation = Activation::gelu;
  l.recipe.kind = recipe;
  l.layout.tensor_parallel = tp;
  l.layout.sequence_parallel = sequence_parallel;
  l.mode = mode;
  l.save_input = save;
  l.debug = std::move(debug);
  spec.layers.push_back(l);
  return spec;
}

std::vector<const Step*> steps_of(const std::vector<Step>& pass, StepKind kind) {
  std::vector<const Step*> r;
  for (const auto& s : pass)
    if (s.kind() == kind) r.push_back(&s);
  return r;
}

std::vector<const Step*> all_steps_of(const LayerPlan& layer, StepKind kind) {
  auto r = steps_of(layer.forward, kind);
  for (const auto* pass : {&layer.backward, &layer.update})
    for (const auto* s : steps_of(*pass, kind)) r.push_back(s);
  return r;
}

std::vector<std::string> collective_signature(const LayerPlan& layer) {
  std::vector<std::string> r;
  for (const auto* pass : {&layer.forward, &layer.backward, &layer.update})
    for (const auto& s : *pass) {
      if (!s.is_collective()) continue;
      // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on
      // "literal" + std::string temporaries.
      std::string sig(to_string(s.kind()));
      sig += ':';
      for (int id : s.inputs()) (sig += ' ') += to_string(layer.tensor(id).type);
      sig += " ->";
      for (int id : s.outputs()) (sig += ' ') += to_string(layer.tensor(id).type);
      (sig += ' ') += std::to_string(s.bytes_per_rank());
      r.push_back(sig);
    }
  return r;
}

const GemmStep& gemm_of(const LayerPlan& l, GemmRole role) {
  for (const auto* pass : {&l.forward, &l.backward})
    for (const auto& s : *pass)
      if (const auto* g = s.as<GemmStep>(); g && g->role == role) return *g;
  throw std::runtime_error("no " + std::string(to_string(role)) + " GEMM");
}

const Step* producer_of(const LayerPlan& l, int id) {
  return l.producer(id);
}

std::vector<std::string> delayed_keys(const LayerPlan& l) {
  std::vector<std::string> keys;
  for (const auto& d : l.delayed) keys.push_back(d.key());
  return keys;
}

}  // namespace fp8c::testing
