// What must hold between layers and against the target: `input =`
// references and cycles, shapes and dtypes along a chain (forward and
// backward), FP8 outputs handed to FP8 consumers (fp8_output_consumer() says
// when the hand-over happens; a consumer that takes FP8 input has no
// high-precision input), tensor-parallel splits that divide the sizes and
// chain (column feeds row, row feeds column), and recipes the target can run.

#include <algorithm>
#include <functional>

#include "dsl/checker.hpp"

namespace fp8c::dsl {
namespace {

// Hopper's FP8 tensor cores (and cuBLASLt's FP8 kernels) need the K and N
// extents of every FP8 GEMM to be multiples of 16 bytes of FP8 data.
constexpr std::uint64_t kFp8Alignment = 16;
// MXFP8 scales blocks of 32 elements along K (fprop's K is `in`, dgrad's is
// `out`), so both per-rank extents must hold whole blocks.
constexpr std::uint64_t kMxfp8Block = 32;

std::string str(std::uint64_t v) {
  return std::to_string(v);
}
std::string str(ElemType v) {
  return std::string(to_string(v));
}

}  // namespace

void Checker::check_graph(Spec& spec) {
  std::map<std::string, Layer*> by_name;
  for (auto& layer : spec.layers) by_name[layer.name] = &layer;

  // References first: an unknown or self reference stops the chain checks.
  bool references_ok = true;
  for (auto& layer : spec.layers) {
    if (layer.input.empty()) continue;
    const LayerSite& site = layer_sites_.at(layer.name);
    const SourceRange where = site.value_or_name("input");
    if (!by_name.count(layer.input)) {
      std::vector<std::string_view> names;
      for (const auto& [name, l] : by_name) names.push_back(name);
      diagnostics_.error(where,
                         "unknown layer " + quoted(layer.input) + did_you_mean(layer.input, names));
      references_ok = false;
    }
  }
  if (!references_ok) return;

  // Each layer has at most one input, so a cycle is found by walking back
  // from every layer; it is reported once, at its first layer in file order.
  std::set<std::string> in_reported_cycle;
  for (auto& layer : spec.layers) {
    std::vector<std::string> path{layer.name};
    std::string next = layer.input;
    while (!next.empty() && next != layer.name && path.size() <= spec.layers.size()) {
      path.push_back(next);
      next = by_name.at(next)->input;
    }
    if (next != layer.name || in_reported_cycle.count(layer.name)) continue;
    std::string chain = layer.name;
    for (std::size_t i = path.size(); i-- > 0;) chain += " -> " + path[i];
    for (const auto& name : path) in_reported_cycle.insert(name);
    diagnostics_.error(layer_sites_.at(layer.name).value_or_name("input"),
                       "layers feed each other in a cycle: " + chain);
    references_ok = false;
  }
  if (!references_ok) return;

  // Chains in dependency order, so that a consumer whose `in` comes from its
  // producer is filled in before it feeds another layer.
  std::set<std::string> done;
  const std::function<void(Layer&)> visit = [&](Layer& layer) {
    if (!done.insert(layer.name).second) return;
    if (!layer.input.empty()) {
      Layer& producer = *by_name.at(layer.input);
      visit(producer);
      check_chain(spec, layer, producer);
    }
  };
  for (auto& layer : spec.layers) visit(layer);

  for (const auto& layer : spec.layers) {
    check_sizes(layer);
    check_layout(layer);
    check_fp8_output(spec, layer);
    check_against_target(layer);
  }
}

void Checker::check_chain(const Spec& spec, Layer& consumer, const Layer& producer) {
  const LayerSite& site = layer_sites_.at(consumer.name);
  const LayerSite& producer_site = layer_sites_.at(producer.name);

  if (!site.entries.count("in")) {
    consumer.in = producer.out;
  } else if (consumer.in != producer.out) {
    diagnostics_.error(site.value_or_name("in"),
                       "in = " + str(consumer.in) + " does not match the output of '" +
                           producer.name + "', which has out = " + str(producer.out));
    diagnostics_.note(producer_site.value_or_name("out"), "'" + producer.name + "' sets out here");
  }

  if (producer.output_fp8 && !consumer.recipe.is_fp8()) {
    diagnostics_.error(producer_site.value_or_name("output"),
                       "'" + producer.name + "' hands FP8 output to '" + consumer.name +
                           "', whose recipe is none: it has no FP8 input to take it");
    diagnostics_.note(site.value_or_name("recipe"),
                      "'" + consumer.name + "' runs in high precision");
  }
  check_dtypes(spec, consumer, producer);
  if (fp8_output_consumer(spec, producer) == &consumer) check_fp8_input(consumer, producer);

  // Parallel layouts chain only where no collective would be needed between
  // the two layers beyond what each layer's own plan does.
  const Layout& a = producer.layout;
  const Layout& b = consumer.layout;
  if (a.tensor_parallel == 1 && b.tensor_parallel == 1) return;
  const SourceRange layout_where = site.value_or_name("layout");
  if (a.tensor_parallel != b.tensor_parallel) {
    diagnostics_.error(layout_where,
                       "'" + consumer.name + "' has tensor_parallel = " + str(b.tensor_parallel) +
                           " but its input '" + producer.name + "' has " + str(a.tensor_parallel) +
                           ": chained layers share one tensor-parallel group");
    return;
  }
  if (producer.mode == consumer.mode) {
    const bool column = producer.mode == ParallelMode::column;
    diagnostics_.error(
        layout_where,
        "'" + consumer.name + "' is " + std::string(to_string(consumer.mode)) +
            "-parallel and so is its input '" + producer.name + "': " +
            (column ? "a column-parallel layer's output is split over features, which only a "
                      "row-parallel layer takes; make it `row`"
                    : "a row-parallel layer's output is whole (or split over tokens), which only "
                      "a column-parallel layer takes; make it `column`"));
    return;
  }
  if (producer.mode == ParallelMode::row && a.sequence_parallel != b.sequence_parallel) {
    diagnostics_.error(layout_where,
                       std::string("'") + producer.name + "' (row) " +
                           (a.sequence_parallel ? "reduce-scatters its output over tokens"
                                                : "all-reduces its output") +
                           " but '" + consumer.name + "' (column) expects " +
                           (b.sequence_parallel ? "input split over tokens" : "its whole input") +
                           ": set sequence_parallel the same in both layouts");
  }
}

// Forward, the consumer reads the producer's output: in FP8 when the hand-over
// is honoured, else in producer.output_dtype. Backward, the consumer's dX (in
// its dtype) is the producer's dY (in the producer's dtype): so the two dtypes
// are always the same, whatever the output.
void Checker::check_dtypes(const Spec& spec, const Layer& consumer, const Layer& producer) {
  const LayerSite& site = layer_sites_.at(consumer.name);
  const LayerSite& producer_site = layer_sites_.at(producer.name);
  if (producer.dtype != consumer.dtype) {
    diagnostics_.error(site.value_or_name("dtype"),
                       "'" + consumer.name + "' has dtype " + str(consumer.dtype) +
                           " but its input '" + producer.name + "' has dtype " +
                           str(producer.dtype) +
                           ": chained layers share one dtype, since the input gradient of '" +
                           consumer.name + "' is the output gradient of '" + producer.name + "'");
    diagnostics_.note(producer_site.value_or_name("dtype"),
                      producer_site.entries.count("dtype")
                          ? "'" + producer.name + "' sets dtype here"
                          : "'" + producer.name + "' has the default dtype " + str(producer.dtype));
    return;
  }
  if (fp8_output_consumer(spec, producer) == &consumer) return;  // it reads FP8
  if (producer.output_dtype != consumer.dtype) {
    diagnostics_.error(site.value_or_name("dtype"),
                       "'" + consumer.name + "' takes " + str(consumer.dtype) + " but its input '" +
                           producer.name + "' produces " + str(producer.output_dtype));
    diagnostics_.note(producer_site.value_or_name("output"),
                      "'" + producer.name + "' sets output here");
  }
}

// A consumer that takes its input in FP8 (the producer's output = fp8 is
// honoured) never sees its input in high precision: nothing can keep it for
// backward, and no GEMM that reads it (fprop's X, wgrad's X) can fall back.
void Checker::check_fp8_input(const Layer& consumer, const Layer& producer) {
  const LayerSite& site = layer_sites_.at(consumer.name);
  const LayerSite& producer_site = layer_sites_.at(producer.name);
  const std::string why = "which it does not have: '" + consumer.name +
                          "' takes its input in FP8 from '" + producer.name + "'";
  const auto note_producer = [&] {
    diagnostics_.note(producer_site.value_or_name("output"),
                      "'" + producer.name + "' writes its output in FP8 with the input scale of '" +
                          consumer.name + "'");
  };
  if (consumer.save_input == SaveInput::original) {
    diagnostics_.error(site.value_or_name("save_input"),
                       "save_input = original keeps the high-precision input of '" + consumer.name +
                           "', " + why + "; use save_input = fp8");
    note_producer();
  }
  std::vector<std::string> reading_x;
  for (const GemmKind gemm : consumer.debug.fallback)
    if (gemm != GemmKind::dgrad) reading_x.push_back(std::string(to_string(gemm)));
  if (!reading_x.empty()) {
    std::string gemms = reading_x[0];
    for (std::size_t i = 1; i < reading_x.size(); ++i) gemms += " and " + reading_x[i];
    diagnostics_.error(site.value_or_name("debug"),
                       "debug fallback of " + gemms + " needs the high-precision input of '" +
                           consumer.name + "', " + why + "; only dgrad may fall back");
    note_producer();
  }
}

void Checker::check_sizes(const Layer& layer) {
  const LayerSite& site = layer_sites_.at(layer.name);
  const std::uint32_t tp = layer.layout.tensor_parallel;
  const bool column = layer.mode == ParallelMode::column;
  const std::string split_key = column ? "out" : "in";
  const std::uint64_t split = column ? layer.out : layer.in;
  if (split % tp != 0) {
    diagnostics_.error(site.value_or_name(split_key),
                       split_key + " = " + str(split) +
                           " is not divisible by tensor_parallel = " + str(tp) + ", over which a " +
                           std::string(to_string(layer.mode)) + "-parallel layer splits it");
    diagnostics_.note(site.value_or_name("layout"), "the layout is set here");
    return;
  }
  if (!layer.recipe.is_fp8()) return;
  const bool mx = layer.recipe.kind == RecipeKind::mxfp8;
  const std::uint64_t multiple = mx ? kMxfp8Block : kFp8Alignment;
  const std::pair<const char*, std::uint64_t> per_rank[] = {{"in", layer.in_per_rank()},
                                                            {"out", layer.out_per_rank()}};
  for (const auto& [key, size] : per_rank) {
    if (size % multiple == 0) continue;
    const std::uint64_t whole = key == std::string("in") ? layer.in : layer.out;
    std::string message = std::string(key) + " = " + str(whole);
    if (size != whole) message += " (" + str(size) + " per rank)";
    message += " is not a multiple of " + str(multiple) +
               (mx ? ", which MXFP8 GEMMs need (their scale blocks are 32 long along K); pad it, "
                     "or use another recipe"
                   : ", which FP8 GEMMs need; pad it, or use recipe none");
    diagnostics_.error(site.value_or_name(key), message);
  }
}

void Checker::check_layout(const Layer& layer) {
  const LayerSite& site = layer_sites_.at(layer.name);
  const Layout& layout = layer.layout;
  if (layer.save_input == SaveInput::fp8 && !layer.recipe.is_fp8())
    diagnostics_.error(
        site.value_or_name("save_input"),
        "save_input = fp8 needs an FP8 recipe; '" + layer.name + "' runs in high precision");
  if (layer.output_fp8 && !layer.recipe.is_fp8())
    diagnostics_.error(site.value_or_name("output"),
                       "output = fp8 needs an FP8 recipe; '" + layer.name + "' has recipe none");
  if (layout.tensor_parallel == 1 && layout.sequence_parallel)
    diagnostics_.warning(site.value_or_name("layout"),
                         "sequence_parallel = true has no effect with tensor_parallel = 1");
  else if (layout.overlap != Overlap::none && !layout.sequence_parallel)
    diagnostics_.warning(site.value_or_name("layout"),
                         "overlap = " + std::string(to_string(layout.overlap)) +
                             " has no effect without sequence_parallel: there is no gather or "
                             "reduce-scatter to overlap");
  if (!layer.debug.fallback.empty() && !layer.recipe.is_fp8())
    diagnostics_.warning(site.value_or_name("debug"),
                         "debug fallback has no effect: '" + layer.name +
                             "' already runs every GEMM in high precision");
}

// `output = fp8` that fp8_output_consumer() does not honour is written in the
// layer's dtype: say so, and why. (Into a consumer with recipe none, and on a
// layer with recipe none, it is an error, reported by check_chain and
// check_layout.)
void Checker::check_fp8_output(const Spec& spec, const Layer& producer) {
  for (const auto& layer : spec.layers)
    if (layer.input == producer.name && !layer.recipe.is_fp8()) return;
  const std::string reason = fp8_output_not_honoured(spec, producer);
  if (reason.empty()) return;
  diagnostics_.warning(layer_sites_.at(producer.name).value_or_name("output"),
                       "output = fp8 is not honoured, so '" + producer.name +
                           "' writes its output in " + str(producer.output_dtype) + ": " + reason);
}

void Checker::check_against_target(const Layer& layer) {
  const LayerSite& site = layer_sites_.at(layer.name);
  const SourceRange where = site.value_or_name("recipe");
  const auto note_target = [&] {
    if (target_written_ && !options_.target)
      diagnostics_.note(target_where_, "the target is set here");
  };
  const std::string target = target_.str();
  const RecipeKind kind = layer.recipe.kind;
  if (kind != RecipeKind::none && target_.sm < 89) {
    diagnostics_.error(where, "recipe " + std::string(to_string(kind)) +
                                  " needs FP8 tensor cores (sm_89 or newer); the target is " +
                                  target);
    note_target();
  } else if (kind == RecipeKind::blockwise && target_.sm < 90) {
    diagnostics_.error(where, "blockwise scaling needs sm_90 or newer; the target is " + target);
    note_target();
  } else if (kind == RecipeKind::mxfp8 && target_.sm < 100) {
    diagnostics_.warning(where, "mxfp8 has no tensor-core support before sm_100: on " + target +
                                    " its GEMMs dequantize the MX blocks and run in bf16");
  }
  if (layer.gemm == GemmBackend::generated && !(target_.sm == 90 && target_.arch_specific)) {
    diagnostics_.error(site.value_or_name("gemm"),
                       "gemm = generated emits wgmma, which needs sm_90a; the target is " + target);
    note_target();
  }
}

}  // namespace fp8c::dsl
