// The `fp8c` command's subcommands. Each takes its arguments (after the
// subcommand's name) and returns the process exit status:
// 0 success, 1 the input is invalid (or a check failed), 2 usage error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp8c/spec.hpp"

namespace fp8c::tools {

using Args = std::vector<std::string>;

struct Command {
  std::string_view name;
  std::string_view summary;  // one line for `fp8c --help`
  std::string_view help;     // the whole text for `fp8c NAME --help`
  int (*run)(const Args& args);
};

const std::vector<Command>& dsl_commands();
const std::vector<Command>& plan_commands();
const std::vector<Command>& kernel_commands();
const std::vector<Command>& verify_commands();
const std::vector<Command>& bench_commands();

// Usage errors print `fp8c NAME: message` and a pointer to --help.
int usage_error(std::string_view command, std::string_view message);

bool wants_help(const Args& args);

// A decimal integer option value of at most 12 digits, positive unless
// `allow_zero`. False for anything else.
bool parse_count(const std::string& text, std::uint64_t& value, bool allow_zero = false);

// `--gemm cublaslt|generated`: the GEMM backend every layer runs on,
// instead of what each layer's `gemm =` says. False for another word.
bool parse_gemm_backend(const std::string& text, GemmBackend& value);
void set_gemm_backend(Spec& spec, GemmBackend backend);

// Reads and checks a spec, printing its diagnostics (or why it cannot be
// read) to stderr; nullopt when it is not valid.
std::optional<Spec> load_spec_reporting(const std::string& path);

}  // namespace fp8c::tools
