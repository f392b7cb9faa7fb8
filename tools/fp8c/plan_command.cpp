// fp8c plan: the steps, tensors and collectives fp8c would run for a spec.

#include <iostream>

#include "codegen/lower/lowered.hpp"
#include "codegen/plan/plan_print.hpp"
#include "codegen/plan/planner.hpp"
#include "fp8c/dsl.hpp"
#include "runtime/gemm/gemm_table_file.hpp"
#include "tools/fp8c/commands.hpp"

namespace fp8c::tools {
namespace {

constexpr std::string_view kPlanHelp =
    "usage: fp8c plan FILE [--layer L] [--ranks N] [--tokens M] [--json | --lowered]\n"
    "                      [--gemm auto|cublaslt|generated] [--gemm-table FILE]\n"
    "\n"
    "Plans every layer of FILE (or only layer L) for one training step of M\n"
    "tokens (default 8192) on N tensor-parallel ranks (default: each layer's\n"
    "tensor_parallel) and prints, per layer and pass (forward, backward,\n"
    "update), every step with its tensors: name, dtype, logical shape\n"
    "(local/global where sharded), physical order (rowwise or columnwise),\n"
    "scaling, rank segments of a gather; collectives with the bytes each rank\n"
    "receives; per-rank buffer bytes. The plan is checked before it is printed.\n"
    "\n"
    "  --layer L    only layer L\n"
    "  --ranks N    tensor-parallel size for every layer (must divide the split dim,\n"
    "               and the tokens when sequence parallel)\n"
    "  --tokens M   total tokens of the step (default 8192)\n"
    "  --json       JSON instead of text (schema: docs/plan-json.md)\n"
    "  --lowered    what runs for each step on the GPU: kernel launches (and the\n"
    "               role of each), GEMM calls (backend, operands, epilogue),\n"
    "               collectives and their stream, staging buffers, fallbacks, and\n"
    "               the kernels a Session compiles (docs/plan-json.md)\n"
    "  --gemm G     with --lowered: every layer's FP8 GEMMs on G (auto, cublaslt, or\n"
    "               generated: fp8c's own, sm_90a) instead of what its `gemm =` says\n"
    "  --gemm-table FILE  with --lowered: `gemm = auto` picks by the measured times\n"
    "               in FILE (`gemm_bench --table FILE` writes one; docs/gemm.md), as\n"
    "               the runtime does with $FP8C_GEMM_TABLE\n"
    "\n"
    "Exit status: 0 success, 1 invalid spec or planning error, 2 usage error.\n";

int run_plan(const Args& args) {
  std::string file, layer;
  PlanOptions options;
  bool json = false, lowered = false;
  std::optional<GemmBackend> gemm;
  std::string gemm_table;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* option, std::string& out) {
      if (i + 1 >= args.size()) return false;
      out = args[++i];
      (void)option;
      return true;
    };
    std::string v;
    if (a == "--json") {
      json = true;
    } else if (a == "--lowered") {
      lowered = true;
    } else if (a == "--layer") {
      if (!value("--layer", layer)) return usage_error("plan", "--layer needs a layer name");
    } else if (a == "--gemm") {
      GemmBackend b;
      if (!value("--gemm", v) || !parse_gemm_backend(v, b))
        return usage_error("plan", "--gemm must be auto, cublaslt or generated");
      gemm = b;
    } else if (a == "--gemm-table") {
      if (!value("--gemm-table", gemm_table) || gemm_table.empty())
        return usage_error("plan", "--gemm-table needs a file");
    } else if (a == "--ranks" || a == "--tokens") {
      std::uint64_t n = 0;
      if (!value(a.c_str(), v) || !parse_count(v, n))
        return usage_error("plan", a + " needs a positive integer");
      if (a == "--ranks") {
        if (n > 65536) return usage_error("plan", "--ranks is too large");
        options.ranks = static_cast<std::uint32_t>(n);
      } else {
        options.tokens = n;
      }
    } else if (a.size() > 1 && a[0] == '-') {
      return usage_error("plan", "unknown option '" + a + "'");
    } else if (file.empty()) {
      file = a;
    } else {
      return usage_error("plan", "more than one file given");
    }
  }
  if (file.empty()) return usage_error("plan", "no file given");
  if (json && lowered) return usage_error("plan", "--json and --lowered do not go together");
  if (gemm && !lowered) return usage_error("plan", "--gemm needs --lowered");
  if (!gemm_table.empty() && !lowered) return usage_error("plan", "--gemm-table needs --lowered");
  std::optional<Spec> loaded = load_spec_reporting(file);
  if (!loaded) return 1;
  if (gemm) set_gemm_backend(*loaded, *gemm);
  const Spec& spec = *loaded;
  if (!layer.empty()) {
    const Layer* only = spec.find_layer(layer);
    if (!only) {
      std::cerr << "fp8c plan: " << file << " has no layer '" << layer << "'\n";
      return 1;
    }
    // Keep the producer/consumer context so FP8 chaining is planned the same.
  }
  Plan plan;
  try {
    plan = plan_spec(spec, options);
  } catch (const PlanError& e) {
    std::cerr << "fp8c plan: " << file << ": " << e.what() << "\n";
    return 1;
  }
  if (!layer.empty()) std::erase_if(plan.layers, [&](const auto& l) { return l.layer != layer; });
  if (lowered) {
    LowerOptions lower_options = lower_options_for(spec.target);
    if (!gemm_table.empty()) {
      try {
        lower_options.gemm_table = runtime::read_gemm_table(gemm_table);
      } catch (const std::exception& e) {
        std::cerr << "fp8c plan: " << e.what() << "\n";
        return 1;
      }
    }
    std::cout << print_lowered(plan, lower_plan(spec, plan, lower_options));
  } else {
    std::cout << (json ? plan_to_json(plan) : print_plan(plan));
  }
  return 0;
}

}  // namespace

const std::vector<Command>& plan_commands() {
  static const std::vector<Command> commands = {
      {"plan", "print the forward/backward/update steps of each layer", kPlanHelp, run_plan},
  };
  return commands;
}

}  // namespace fp8c::tools
