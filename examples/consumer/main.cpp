// An fp8c user outside the source tree: loads a .fp8 spec, plans it and
// prints a summary of the plan, opens a Session on it (or says why there is
// no GPU), then says whether the gloo backend (the module next to
// libfp8c.so) is usable.
//   fp8c_consumer SPEC [--ranks N] [--tokens M]
#include <cstdint>
#include <exception>
#include <iostream>
#include <string>

#include "codegen/plan/planner.hpp"
#include "collectives/gloo_communicator.hpp"
#include "fp8c/dsl.hpp"
#include "fp8c/session.hpp"
#include "runtime/dynamic_library.hpp"

namespace {

void print_layer(const fp8c::LayerPlan& layer) {
  std::size_t collectives = 0;
  std::uint64_t bytes = 0;
  for (const auto* pass : {&layer.forward, &layer.backward, &layer.update}) {
    for (const fp8c::Step& step : *pass) {
      if (!step.is_collective()) continue;
      ++collectives;
      bytes += step.bytes_per_rank();
    }
  }
  std::cout << layer.layer << ": " << layer.ranks << " ranks, " << layer.tensors.size()
            << " tensors, steps " << layer.forward.size() << " forward / " << layer.backward.size()
            << " backward / " << layer.update.size() << " update, " << collectives
            << " collectives receiving " << bytes << " bytes per rank\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: fp8c_consumer SPEC [--ranks N] [--tokens M]\n";
    return 2;
  }
  fp8c::PlanOptions options;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string option = argv[i];
    if (option == "--ranks") {
      options.ranks = static_cast<std::uint32_t>(std::stoul(argv[i + 1]));
    } else if (option == "--tokens") {
      options.tokens = std::stoull(argv[i + 1]);
    } else {
      std::cerr << "fp8c_consumer: unknown option " << option << "\n";
      return 2;
    }
  }
  try {
    const fp8c::Spec spec = fp8c::load_spec(argv[1]);
    const fp8c::Plan plan = fp8c::plan_spec(spec, options);
    std::cout << argv[1] << ": " << spec.layers.size() << " layers, planned for " << plan.tokens
              << " tokens\n";
    for (const auto& layer : plan.layers) print_layer(layer);
  } catch (const std::exception& error) {
    // load_spec's message is the checker's diagnostics, one per line.
    std::cerr << error.what();
    return 1;
  }
  // The host API: on a GPU machine a Session compiles and loads every kernel;
  // without a driver it says what is missing.
  try {
    fp8c::SessionOptions session_options;
    session_options.tokens = options.tokens;
    fp8c::Session session(argv[1], session_options);
    std::cout << "session: " << session.kernels().size() << " kernels loaded\n";
  } catch (const fp8c::runtime::Unavailable& error) {
    std::cout << "session: no GPU here: " << error.what() << "\n";
  } catch (const std::exception& error) {
    std::cerr << "session: " << error.what() << "\n";
    return 1;
  }
  const std::string why = fp8c::collectives::gloo_unavailable_reason();
  if (why.empty()) {
    std::cout << "gloo backend: available (" << fp8c::collectives::gloo_module_path() << ")\n";
  } else {
    std::cout << "gloo backend: unavailable\n" << why << "\n";
  }
  return 0;
}
