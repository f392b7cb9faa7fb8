// Every spec in tests/specs (listed when the test runs: a new file needs no
// CMake change) at every rank count R in {1, 2, 3, 4, 6, 8}: where R divides
// the split dims, the CPU oracle (N rank threads, in-process collectives) must
// pass it against the 1-rank run and float64; where it does not, plan_spec
// must refuse it with a PlanError naming the dim. Tokens are 16 * R * k (at
// least 64), so sequence parallelism always divides them; delayed recipes
// run two steps so that the scale update is checked too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "fp8c/dsl.hpp"
#include "tests/specs_test/oracle_case.hpp"
#include "tests/test_paths.hpp"

namespace fp8c::spectest {
namespace {

namespace fs = std::filesystem;

const std::vector<std::uint32_t> kRanks = {1, 2, 3, 4, 6, 8};

std::vector<std::string> spec_files() {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(::fp8c::testing::source_path("tests/specs")))
    if (entry.is_regular_file() && entry.path().extension() == ".fp8")
      files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct SpecCase {
  std::string path;
  std::uint32_t ranks;
};

void PrintTo(const SpecCase& c, std::ostream* os) {
  *os << fs::path(c.path).filename().string() << " at " << c.ranks << " ranks";
}

std::vector<SpecCase> spec_cases() {
  std::vector<SpecCase> cases;
  for (const auto& f : spec_files())
    for (std::uint32_t r : kRanks) cases.push_back({f, r});
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<SpecCase>& info) {
  std::string name = fs::path(info.param.path).stem().string();
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name + "_r" + std::to_string(info.param.ranks);
}

// Checks with no error and no warning (what `fp8c check --werror` accepts).
std::optional<Spec> check_clean(const std::string& path, std::string& problems) {
  const SourceFile file(path, read_text(path));
  CheckResult r = check_source(file);
  for (const auto& d : r.diagnostics.all())
    if (d.severity != Severity::note) problems += render_diagnostic(file, d);
  if (!problems.empty()) return std::nullopt;
  return std::move(r.spec);
}

TEST(Specs, AtLeast36EachWithAHeaderAndCheckingWithWerror) {
  const auto files = spec_files();
  EXPECT_GE(files.size(), 36u);
  for (const auto& path : files) {
    const std::string text = read_text(path);
    EXPECT_EQ(text.rfind("# Covers:", 0), 0u) << path << ": no `# Covers:` header comment";
    std::string problems;
    EXPECT_TRUE(check_clean(path, problems).has_value()) << problems;
  }
}

class SpecAtRanks : public ::testing::TestWithParam<SpecCase> {};

TEST_P(SpecAtRanks, PlansOrRefusesAndTheOraclePasses) {
  const SpecCase& c = GetParam();
  std::string problems;
  const std::optional<Spec> spec = check_clean(c.path, problems);
  ASSERT_TRUE(spec.has_value()) << problems;

  CaseOptions o;
  o.ranks = c.ranks;
  const std::uint64_t k = (64 + 16 * c.ranks - 1) / (16 * c.ranks);
  o.tokens = 16ull * c.ranks * k;
  o.steps = 1;
  for (const Layer& l : spec->layers)
    if (l.recipe.kind == RecipeKind::delayed) o.steps = 2;

  const PlanExpectation expect = expect_plan(*spec, c.ranks, o.tokens);
  const CaseResult r = run_case(*spec, o);
  const std::string where = fs::path(c.path).filename().string() + " at " +
                            std::to_string(c.ranks) + " ranks, " + std::to_string(o.tokens) +
                            " tokens, " + std::to_string(o.steps) + " steps";
  if (expect.must_refuse()) {
    EXPECT_EQ(r.outcome, CaseResult::Outcome::refused)
        << where << ": the planner must refuse this case";
  }
  switch (r.outcome) {
    case CaseResult::Outcome::passed:
      if (std::getenv("FP8C_PRINT_REPORT")) std::cout << where << "\n" << r.detail;
      break;
    case CaseResult::Outcome::refused:
      std::cout << where << ": refused (as allowed): " << r.detail << "\n";
      break;
    case CaseResult::Outcome::failed:
      ADD_FAILURE() << where << ": " << r.category << "\n" << r.key << "\n" << r.detail;
      break;
  }
}

INSTANTIATE_TEST_SUITE_P(All, SpecAtRanks, ::testing::ValuesIn(spec_cases()), case_name);

}  // namespace
}  // namespace fp8c::spectest
