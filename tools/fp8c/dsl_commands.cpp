// fp8c check | fmt | explain: the language's commands.

#include <filesystem>
#include <fstream>
#include <iostream>

#include "fp8c/dsl.hpp"
#include "tools/fp8c/commands.hpp"

namespace fp8c::tools {
namespace {

// Options shared by the commands that check a spec.
struct SpecOptions {
  CheckOptions check;
  bool werror = false;
};

// Consumes `--arch A` / `--arch=A` / `--werror`; returns an error message for
// a bad option, empty when all is well.
std::string take_spec_option(const Args& args, std::size_t& i, SpecOptions& options) {
  const std::string& a = args[i];
  std::string value;
  if (a == "--werror") {
    options.werror = true;
    return {};
  }
  if (a == "--arch") {
    if (i + 1 >= args.size()) return "--arch needs a value such as sm_90a";
    value = args[++i];
  } else if (a.rfind("--arch=", 0) == 0) {
    value = a.substr(7);
  } else {
    return "unknown option '" + a + "'";
  }
  auto target = parse_target(value);
  if (!target) return "unknown architecture '" + value + "' (for example sm_89, sm_90a, sm_100a)";
  options.check.target = target;
  return {};
}

// Reads and checks one file, printing its diagnostics to stderr. Returns the
// Spec when the file is valid.
std::optional<Spec> check_file(const std::string& path, const SpecOptions& options) {
  const SourceFile file = read_source_file(path);
  CheckResult result = check_source(file, options.check);
  std::cerr << result.diagnostics.render(file);
  if (options.werror && result.spec) {
    for (const auto& d : result.diagnostics.all())
      if (d.severity == Severity::warning) return std::nullopt;
  }
  return std::move(result.spec);
}

int run_check(const Args& args) {
  SpecOptions options;
  std::vector<std::string> files;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].size() > 1 && args[i][0] == '-') {
      if (auto error = take_spec_option(args, i, options); !error.empty())
        return usage_error("check", error);
    } else {
      files.push_back(args[i]);
    }
  }
  if (files.empty()) return usage_error("check", "no files given");
  int status = 0;
  for (const auto& path : files) {
    try {
      if (!check_file(path, options)) status = 1;
    } catch (const std::exception& e) {
      std::cerr << e.what() << "\n";
      status = 1;
    }
  }
  return status;
}

// Writes `text` to `path` through a temporary file and a rename, so a reader
// never sees half a file and a failure leaves the original as it was.
void write_atomically(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".fp8c-fmt.tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw std::runtime_error(temporary + ": write failed");
  }
  std::filesystem::rename(temporary, path);
}

int run_fmt(const Args& args) {
  bool write = false;
  bool check_only = false;
  std::vector<std::string> files;
  for (const auto& a : args) {
    if (a == "-w" || a == "--write") {
      write = true;
    } else if (a == "--check") {
      check_only = true;
    } else if (a.size() > 1 && a[0] == '-') {
      return usage_error("fmt", "unknown option '" + a + "'");
    } else {
      files.push_back(a);
    }
  }
  if (files.empty()) return usage_error("fmt", "no file given");
  if (files.size() > 1 && !write && !check_only)
    return usage_error("fmt", "several files need --write or --check");
  int status = 0;
  for (const auto& path : files) {
    const SourceFile file = read_source_file(path);
    Diagnostics diagnostics;
    const auto formatted = format_source(file, diagnostics);
    std::cerr << diagnostics.render(file);
    if (!formatted) {
      status = 1;
      continue;
    }
    if (check_only) {
      if (*formatted != file.text()) {
        std::cerr << path << ": not formatted (run `fp8c fmt -w " << path << "`)\n";
        status = 1;
      }
    } else if (write) {
      if (*formatted != file.text()) write_atomically(path, *formatted);
    } else {
      std::cout << *formatted;
    }
  }
  return status;
}

int run_explain(const Args& args) {
  SpecOptions options;
  std::vector<std::string> files;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].size() > 1 && args[i][0] == '-') {
      if (auto error = take_spec_option(args, i, options); !error.empty())
        return usage_error("explain", error);
    } else {
      files.push_back(args[i]);
    }
  }
  if (files.size() != 1) return usage_error("explain", "expected one file");
  const auto spec = check_file(files[0], options);
  if (!spec) return 1;
  std::cout << explain_spec(*spec);
  return 0;
}

}  // namespace

const std::vector<Command>& dsl_commands() {
  static const std::vector<Command> commands = {
      {"check", "check .fp8 files; print every error with its position",
       "usage: fp8c check [--arch ARCH] [--werror] FILE...\n"
       "\n"
       "Parses and checks each FILE. Errors and warnings are printed as\n"
       "`file:line:col: error: message`, then the source line and a caret.\n"
       "\n"
       "  --arch ARCH   check against this GPU (sm_89, sm_90a, sm_100a, ...) instead of\n"
       "                the file's `target =` (default sm_90a)\n"
       "  --werror      treat warnings as errors\n"
       "\n"
       "Exit status: 0 every file is valid, 1 some file is not (or cannot be read),\n"
       "2 usage error.\n",
       run_check},
      {"fmt", "print a .fp8 file in canonical form",
       "usage: fp8c fmt FILE\n"
       "       fp8c fmt --write FILE...\n"
       "       fp8c fmt --check FILE...\n"
       "\n"
       "Formats FILE canonically: one entry a line, two-space indents, '=' aligned\n"
       "in runs, short flat blocks on one line; comments kept. Formatting is\n"
       "idempotent and never changes what a file means.\n"
       "\n"
       "  -w, --write   rewrite the files in place (atomically) instead of printing\n"
       "  --check       print nothing; exit 1 if a file is not formatted\n"
       "\n"
       "Exit status: 0 success, 1 a file does not parse (or --check found one\n"
       "unformatted), 2 usage error.\n",
       run_fmt},
      {"explain", "print the resolved spec with every default written out",
       "usage: fp8c explain [--arch ARCH] [--werror] FILE\n"
       "\n"
       "Checks FILE and prints the resolved spec as .fp8 text: every recipe,\n"
       "layout and debug setting with its defaults, every layer with all of its\n"
       "keys (sizes taken from `input =` written out) and its per-rank weight\n"
       "shape. The output is itself a spec that checks to the same result.\n"
       "\n"
       "  --arch ARCH   check against this GPU instead of the file's `target =`\n"
       "  --werror      treat warnings as errors (print nothing, exit 1)\n"
       "\n"
       "Exit status: 0 success, 1 FILE is invalid, 2 usage error.\n",
       run_explain},
  };
  return commands;
}

}  // namespace fp8c::tools
