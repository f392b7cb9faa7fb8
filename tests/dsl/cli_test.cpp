// The `fp8c` command line: help for the command and each subcommand, exit
// statuses (0 success, 1 invalid input, 2 usage error), options, files that
// cannot be read.

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "tests/dsl/support.hpp"

namespace fp8c::test {
namespace {

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The commands `fp8c --help` lists: lines "  NAME   summary".
std::vector<std::string> listed_commands(const std::string& help) {
  std::vector<std::string> names;
  const std::regex line(R"(^  ([a-z][a-z0-9_-]*) {2,}\S.*$)");
  for (const auto& l : split_lines(help)) {
    std::smatch m;
    if (std::regex_match(l, m, line)) names.push_back(m[1]);
  }
  return names;
}

std::string good_file() {
  static const std::string path = [] {
    const std::string p = scratch_dir("cli_good") + "/good.fp8";
    write_file(p, "layer fc1 = linear { in = 64 out = 64 recipe = current }\n");
    return p;
  }();
  return path;
}

std::string bad_file() {
  static const std::string path = [] {
    const std::string p = scratch_dir("cli_bad") + "/bad.fp8";
    write_file(p, "layer fc1 = linear { in = 64 }\n");
    return p;
  }();
  return path;
}

std::string warning_file() {
  static const std::string path = [] {
    const std::string p = scratch_dir("cli_warning") + "/warning.fp8";
    write_file(p, "layer fc1 = linear { in = 64 out = 64 recipe = mxfp8 }\n");
    return p;
  }();
  return path;
}

TEST(Help, TopLevelHelpListsEveryCommand) {
  for (const char* flag : {"--help", "-h", "help"}) {
    const CommandResult run = run_fp8c({flag});
    EXPECT_EQ(run.status, 0) << flag;
    EXPECT_EQ(run.err, "") << flag;
    EXPECT_EQ(run.out.rfind("usage: fp8c COMMAND", 0), 0u) << run.out;
    const auto commands = listed_commands(run.out);
    for (const char* name : {"check", "fmt", "explain"})
      EXPECT_NE(std::find(commands.begin(), commands.end(), name), commands.end())
          << name << " missing from\n"
          << run.out;
    EXPECT_TRUE(contains(run.out, "--version")) << run.out;
    EXPECT_TRUE(contains(run.out, "--help")) << run.out;
    EXPECT_TRUE(contains(run.out, "Exit status")) << run.out;
  }
}

// Every command the help lists (including ones added later) has its own help.
TEST(Help, EveryListedCommandHasHelp) {
  const auto commands = listed_commands(run_fp8c({"--help"}).out);
  ASSERT_GE(commands.size(), 3u);
  for (const auto& name : commands) {
    for (const char* flag : {"--help", "-h"}) {
      const CommandResult run = run_fp8c({name, flag});
      EXPECT_EQ(run.status, 0) << name << " " << flag << "\n" << run.err;
      EXPECT_EQ(run.out.rfind("usage: fp8c " + name, 0), 0u) << run.out;
      EXPECT_TRUE(contains(run.out, "Exit status")) << run.out;
    }
  }
}

TEST(Help, EachLanguageCommandDescribesEveryOption) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> options = {
      {"check", {"--arch", "--werror"}},
      {"fmt", {"--write", "-w", "--check"}},
      {"explain", {"--arch", "--werror"}},
  };
  for (const auto& [command, flags] : options) {
    const CommandResult run = run_fp8c({command, "--help"});
    ASSERT_EQ(run.status, 0);
    const auto lines = split_lines(run.out);
    for (const auto& flag : flags) {
      // A long option is in the usage; every option has a line that explains it.
      if (flag.rfind("--", 0) == 0) {
        EXPECT_TRUE(contains(lines.at(0), flag) ||
                    contains(run.out, "fp8c " + command + " " + flag))
            << command << ": " << flag << " not in the usage\n"
            << run.out;
      }
      const bool described = std::any_of(lines.begin(), lines.end(), [&](const std::string& l) {
        return std::regex_search(l, std::regex("^  (-w, )?" + flag + "\\b"));
      });
      EXPECT_TRUE(described) << command << ": " << flag << " not described\n" << run.out;
    }
  }
}

TEST(Help, Version) {
  const CommandResult run = run_fp8c({"--version"});
  EXPECT_EQ(run.status, 0);
  EXPECT_TRUE(std::regex_match(run.out, std::regex(R"(fp8c [0-9]+\.[0-9]+\.[0-9]+\n)"))) << run.out;
}

TEST(Usage, MistakesOnTheCommandLineExitTwo) {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"frobnicate"},
      {"check"},
      {"check", "--bogus", good_file()},
      {"check", "--arch", "sm_99", good_file()},
      {"check", "--arch=sm_99", good_file()},
      {"check", good_file(), "--arch"},
      {"fmt"},
      {"fmt", "--bogus", good_file()},
      {"fmt", good_file(), good_file()},
      {"explain"},
      {"explain", good_file(), good_file()},
      {"explain", "--bogus", good_file()},
  };
  for (const auto& args : cases) {
    const CommandResult run = run_fp8c(args);
    std::string shown = "fp8c";
    for (const auto& a : args) shown += " " + a;
    EXPECT_EQ(run.status, 2) << shown << "\n" << run.err;
    EXPECT_FALSE(run.err.empty()) << shown;
    EXPECT_EQ(run.out, "") << shown;
  }
}

TEST(Usage, AUsageErrorSaysWhatIsWrongAndWhereHelpIs) {
  const CommandResult run = run_fp8c({"check", "--arch", "sm_99", good_file()});
  EXPECT_EQ(run.err,
            "fp8c check: unknown architecture 'sm_99' (for example sm_89, sm_90a, sm_100a)\n"
            "run `fp8c check --help` for usage\n");
  const CommandResult unknown = run_fp8c({"frobnicate"});
  EXPECT_EQ(unknown.err.rfind("fp8c: unknown command 'frobnicate'\n", 0), 0u) << unknown.err;
}

TEST(Check, ValidFileExitsZeroSilently) {
  const CommandResult run = run_fp8c({"check", good_file()});
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.err, "");
  EXPECT_EQ(run.out, "");
}

TEST(Check, InvalidFileExitsOne) {
  const CommandResult run = run_fp8c({"check", bad_file()});
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.err, bad_file() +
                         ":1:7: error: layer 'fc1' needs `out = N`\n"
                         "  layer fc1 = linear { in = 64 }\n"
                         "        ^~~\n");
}

TEST(Check, MissingFileExitsOneNamingThePath) {
  const std::string missing = scratch_dir("cli_missing") + "/no_such_file.fp8";
  for (const char* command : {"check", "fmt", "explain"}) {
    const CommandResult run = run_fp8c({command, missing});
    EXPECT_EQ(run.status, 1) << command;
    EXPECT_TRUE(contains(run.err, missing)) << command << ": " << run.err;
    EXPECT_TRUE(contains(run.err, "No such file")) << command << ": " << run.err;
  }
}

TEST(Check, ADirectoryIsNotAFile) {
  const std::string dir = scratch_dir("cli_dir");
  const CommandResult run = run_fp8c({"check", dir});
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.err, dir + ": is a directory, not a .fp8 file\n");
}

TEST(Check, SeveralFilesAreAllChecked) {
  const CommandResult run = run_fp8c({"check", bad_file(), good_file(), bad_file()});
  EXPECT_EQ(run.status, 1);
  // The bad file's report twice, nothing for the good one.
  const auto lines = split_lines(run.err);
  ASSERT_EQ(lines.size(), 6u) << run.err;
  EXPECT_EQ(lines[0], lines[3]);
  EXPECT_EQ(run_fp8c({"check", good_file(), good_file()}).status, 0);
}

TEST(Check, ArchOptionInBothSpellings) {
  for (const std::vector<std::string>& arch :
       std::vector<std::vector<std::string>>{{"--arch", "sm_80"}, {"--arch=sm_80"}}) {
    std::vector<std::string> args{"check"};
    args.insert(args.end(), arch.begin(), arch.end());
    args.push_back(good_file());
    const CommandResult run = run_fp8c(args);
    EXPECT_EQ(run.status, 1) << run.err;
    EXPECT_TRUE(contains(run.err, "the target is sm_80")) << run.err;
  }
  EXPECT_EQ(run_fp8c({"check", "--arch", "sm_89", good_file()}).status, 0);
}

TEST(Check, WarningsPassUnlessWerror) {
  const CommandResult run = run_fp8c({"check", warning_file()});
  EXPECT_EQ(run.status, 0);
  EXPECT_TRUE(contains(run.err, ": warning: mxfp8 has no tensor-core support")) << run.err;
  EXPECT_EQ(run_fp8c({"check", "--werror", warning_file()}).status, 1);
  // On sm_100a there is nothing to warn about.
  const CommandResult native = run_fp8c({"check", "--werror", "--arch", "sm_100a", warning_file()});
  EXPECT_EQ(native.status, 0) << native.err;
  EXPECT_EQ(native.err, "");
}

TEST(Explain, PrintsTheResolvedSpec) {
  const CommandResult run = run_fp8c({"explain", good_file()});
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_TRUE(contains(run.out, "target = sm_90a\n")) << run.out;
  EXPECT_TRUE(contains(run.out, "  save_input = fp8\n")) << run.out;
  EXPECT_TRUE(contains(run.out, "  # weight per rank: 64 x 64\n")) << run.out;
  const CommandResult bad = run_fp8c({"explain", bad_file()});
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(bad.out, "");
  const CommandResult werror = run_fp8c({"explain", "--werror", warning_file()});
  EXPECT_EQ(werror.status, 1);
  EXPECT_EQ(werror.out, "");
  const CommandResult arch = run_fp8c({"explain", "--arch", "sm_100a", warning_file()});
  EXPECT_EQ(arch.status, 0) << arch.err;
  EXPECT_TRUE(contains(arch.out, "target = sm_100a\n")) << arch.out;
}

TEST(Fmt, PrintsToStdoutAndNeverTouchesTheFileWithoutWrite) {
  const std::string path = scratch_dir("cli_fmt") + "/messy.fp8";
  const std::string messy = "layer fc1=linear{in=64 out=64}\n";
  write_file(path, messy);
  const CommandResult run = run_fp8c({"fmt", path});
  EXPECT_EQ(run.status, 0);
  EXPECT_EQ(run.out, "layer fc1 = linear {\n  in  = 64\n  out = 64\n}\n");
  EXPECT_EQ(read_file(path), messy);
  const CommandResult check = run_fp8c({"fmt", "--check", path});
  EXPECT_EQ(check.status, 1);
  EXPECT_EQ(check.err, path + ": not formatted (run `fp8c fmt -w " + path + "`)\n");
  const CommandResult write = run_fp8c({"fmt", "-w", path});
  EXPECT_EQ(write.status, 0) << write.err;
  EXPECT_EQ(read_file(path), run.out);
  // No temporary file left behind.
  EXPECT_EQ(list_files(std::filesystem::path(path).parent_path().string(), ".tmp").size(), 0u);
}

}  // namespace
}  // namespace fp8c::test
