// fp8c: check, format, explain, plan, emit, compile, verify and bench
// .fp8 layer specs.

#include <iostream>

#include "fp8c/dsl.hpp"
#include "tools/fp8c/commands.hpp"

namespace fp8c::tools {
namespace {

std::vector<Command> all_commands() {
  std::vector<Command> all = dsl_commands();
  const auto& plan = plan_commands();
  all.insert(all.end(), plan.begin(), plan.end());
  const auto& kernels = kernel_commands();
  all.insert(all.end(), kernels.begin(), kernels.end());
  const auto& verify = verify_commands();
  all.insert(all.end(), verify.begin(), verify.end());
  const auto& bench = bench_commands();
  all.insert(all.end(), bench.begin(), bench.end());
  return all;
}

void print_help(std::ostream& out) {
  out << "usage: fp8c COMMAND [ARGS...]\n"
         "\n"
         "fp8c compiles .fp8 layer specs (linear layers, their FP8 recipe and their\n"
         "tensor/sequence-parallel layout) into FP8 kernels. Commands:\n\n";
  for (const auto& c : all_commands()) {
    out << "  " << c.name << std::string(10 - std::min<std::size_t>(9, c.name.size()), ' ')
        << c.summary << "\n";
  }
  out << "\n`fp8c COMMAND --help` describes a command; `fp8c --version` prints the version.\n"
         "Exit status: 0 success, 1 invalid input or failed check, 2 usage error.\n";
}

}  // namespace

int usage_error(std::string_view command, std::string_view message) {
  std::cerr << "fp8c " << command << ": " << message << "\n"
            << "run `fp8c " << command << " --help` for usage\n";
  return 2;
}

bool parse_count(const std::string& text, std::uint64_t& value, bool allow_zero) {
  if (text.empty() || text.size() > 12) return false;
  value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return allow_zero || value > 0;
}

bool parse_gemm_backend(const std::string& text, GemmBackend& value) {
  // The language's words for the backends (to_string), not a second copy.
  for (GemmBackend b : {GemmBackend::automatic, GemmBackend::cublaslt, GemmBackend::generated})
    if (text == to_string(b)) {
      value = b;
      return true;
    }
  return false;
}

void set_gemm_backend(Spec& spec, GemmBackend backend) {
  for (Layer& layer : spec.layers) layer.gemm = backend;
}

std::optional<Spec> load_spec_reporting(const std::string& path) {
  try {
    return load_spec(path);
  } catch (const std::exception& e) {
    std::cerr << e.what();
    return std::nullopt;
  }
}

bool wants_help(const Args& args) {
  for (const auto& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}

}  // namespace fp8c::tools

int main(int argc, char** argv) {
  using namespace fp8c::tools;
  std::ios::sync_with_stdio(false);
  if (argc < 2) {
    print_help(std::cerr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_help(std::cout);
    return 0;
  }
  if (name == "--version") {
    std::cout << "fp8c 0.1.0\n";
    return 0;
  }
  for (const auto& command : all_commands()) {
    if (command.name != name) continue;
    const Args args(argv + 2, argv + argc);
    if (wants_help(args)) {
      std::cout << command.help;
      return 0;
    }
    try {
      return command.run(args);
    } catch (const std::exception& e) {
      std::cerr << "fp8c " << name << ": " << e.what() << "\n";
      return 1;
    }
  }
  std::cerr << "fp8c: unknown command '" << name << "'\n";
  print_help(std::cerr);
  return 2;
}
