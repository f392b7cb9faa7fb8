// The planner fuzzer: random valid specs (tests/plan_fuzz/spec_gen.hpp),
// checked with check_source, planned with plan_spec at every rank count in
// {1, 2, 3, 4, 6, 8} with a random token count, and verified by the CPU oracle
// (in-process collectives) wherever they plan. For a time budget, seed after
// seed; then a summary of the failures grouped by kind, each with its
// smallest case (and, with --shrink, a minimised spec).
//
// What must hold (tests/specs_test/oracle_case.hpp decides each case):
// plan_spec returns, or throws PlanError naming the offending dim (never
// crashes, never throws anything else, never says "internal error"); it
// refuses a split that does not divide; where it plans, verify_spec passes.
//
// Each case runs in a forked child, so a crash or a hang is a failure of that
// case and the fuzzing goes on; the seed and the case are printed before it
// runs. Every failure is written to the output folder as a .fp8 file whose
// header says how to replay it.
//
// Usage: plan_fuzz [--seconds S] [--seed N] [--base-seed N] [--ranks 1,2,...]
//                  [--tokens T] [--steps K] [--no-fork] [--shrink]
//                  [--shrink-seconds S] [--out DIR] [--print-spec]
//                  [--lenient P] [--case-timeout S] [--generator-only N]
// Environment (overrides the options): FP8C_PLAN_FUZZ_SECONDS,
// FP8C_PLAN_FUZZ_SEED (replay one seed), FP8C_PLAN_FUZZ_BASE_SEED,
// FP8C_PLAN_FUZZ_RANKS, FP8C_PLAN_FUZZ_TOKENS, FP8C_PLAN_FUZZ_STEPS,
// FP8C_PLAN_FUZZ_FORK=0, FP8C_PLAN_FUZZ_SHRINK=1, FP8C_PLAN_FUZZ_OUT,
// FP8C_PLAN_FUZZ_LENIENT=P (with probability P a seed's spec bends one rule:
// it checks today with a warning, or breaks a rule the checker is about to
// enforce; off by default, such specs are grouped apart).
// Without --seed the base seed comes from the clock; seed i of the run is
// base + i. A replay of a seed needs the same --lenient.
// Exit status: 0 no failure, 1 a failure, 2 usage error.

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "fp8c/dsl.hpp"
#include "tests/plan_fuzz/spec_gen.hpp"
#include "tests/specs_test/oracle_case.hpp"

namespace fp8c::planfuzz {
namespace {

using spectest::CaseOptions;
using spectest::CaseResult;
using Clock = std::chrono::steady_clock;

struct Config {
  double seconds = 60;
  std::optional<std::uint64_t> seed;
  std::optional<std::uint64_t> base_seed;
  std::vector<std::uint32_t> ranks = {1, 2, 3, 4, 6, 8};
  std::optional<std::uint64_t> tokens;
  std::optional<std::uint32_t> steps;
  bool fork = true;
  bool shrink = false;
  double shrink_seconds = 120;
  double case_timeout = 120;
  std::string out = "plan_fuzz_failures";
  bool print_spec = false;
  double lenient = 0;  // probability of a twist (spec_gen.hpp's apply_twist) per seed
  std::optional<std::uint64_t> generator_only;
};

struct CaseParams {
  std::uint32_t ranks = 1;
  std::uint64_t tokens = 64;
  std::uint32_t steps = 1;
};

struct Failure {
  std::uint64_t seed = 0;
  GenSpec gen;
  std::string text;
  CaseParams params;
  CaseResult result;
};

struct Group {
  std::string category;
  std::size_t count = 0;
  std::vector<std::uint64_t> seeds;
  Failure smallest;
  double smallest_cost = 0;
};

struct Stats {
  std::size_t seeds = 0, cases = 0, passed = 0, refused = 0, failed = 0;
  std::map<std::string, std::size_t> rejected;  // documented rule -> specs rejected by it
  std::map<std::string, std::size_t> warnings;
  std::map<std::string, std::size_t> refusals;  // normalized PlanError -> cases
  std::map<std::string, Group> groups;          // key -> group
};

// ---- options -----------------------------------------------------------

std::vector<std::uint32_t> parse_ranks(const std::string& s) {
  std::vector<std::uint32_t> r;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) r.push_back(static_cast<std::uint32_t>(std::stoul(item)));
  if (r.empty()) throw std::invalid_argument("no ranks in '" + s + "'");
  return r;
}

Config parse_config(int argc, char** argv) {
  Config c;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) throw std::invalid_argument(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seconds")
      c.seconds = std::stod(value(i));
    else if (a == "--seed")
      c.seed = std::stoull(value(i));
    else if (a == "--base-seed")
      c.base_seed = std::stoull(value(i));
    else if (a == "--ranks")
      c.ranks = parse_ranks(value(i));
    else if (a == "--tokens")
      c.tokens = std::stoull(value(i));
    else if (a == "--steps")
      c.steps = static_cast<std::uint32_t>(std::stoul(value(i)));
    else if (a == "--no-fork")
      c.fork = false;
    else if (a == "--shrink")
      c.shrink = true;
    else if (a == "--shrink-seconds")
      c.shrink_seconds = std::stod(value(i));
    else if (a == "--case-timeout")
      c.case_timeout = std::stod(value(i));
    else if (a == "--out")
      c.out = value(i);
    else if (a == "--print-spec")
      c.print_spec = true;
    else if (a == "--lenient")
      c.lenient = std::stod(value(i));
    else if (a == "--generator-only")
      c.generator_only = std::stoull(value(i));
    else
      throw std::invalid_argument("unknown option " + a);
  }
  auto env = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (!v || !*v) return std::nullopt;
    return std::string(v);
  };
  if (auto v = env("FP8C_PLAN_FUZZ_SECONDS")) c.seconds = std::stod(*v);
  if (auto v = env("FP8C_PLAN_FUZZ_SEED")) c.seed = std::stoull(*v);
  if (auto v = env("FP8C_PLAN_FUZZ_BASE_SEED")) c.base_seed = std::stoull(*v);
  if (auto v = env("FP8C_PLAN_FUZZ_RANKS")) c.ranks = parse_ranks(*v);
  if (auto v = env("FP8C_PLAN_FUZZ_TOKENS")) c.tokens = std::stoull(*v);
  if (auto v = env("FP8C_PLAN_FUZZ_STEPS")) c.steps = static_cast<std::uint32_t>(std::stoul(*v));
  if (auto v = env("FP8C_PLAN_FUZZ_FORK")) c.fork = *v != "0";
  if (auto v = env("FP8C_PLAN_FUZZ_SHRINK")) c.shrink = *v != "0";
  if (auto v = env("FP8C_PLAN_FUZZ_OUT")) c.out = *v;
  if (auto v = env("FP8C_PLAN_FUZZ_LENIENT")) c.lenient = std::stod(*v);
  return c;
}

// ---- cases -------------------------------------------------------------

bool has_delayed(const GenSpec& g) {
  for (const auto& l : g.layers)
    if (l.kind == RecipeKind::delayed) return true;
  return false;
}

// Tokens and steps of one (seed, ranks) case: a function of both only, so a
// replay of one seed at one rank count gets the same case.
CaseParams case_params(const GenSpec& g, std::uint64_t seed, std::uint32_t ranks,
                       const Config& config) {
  Rng rng(seed * 0x2545F4914F6CDD1Dull + ranks * 7919ull + 17);
  CaseParams p;
  p.ranks = ranks;
  const std::uint64_t r = rng.below(100);
  if (r < 55) {
    const std::uint64_t unit = 16ull * ranks;
    p.tokens = unit * (1 + rng.below(std::max<std::uint64_t>(1, 256 / unit)));
  } else if (r < 75) {
    p.tokens = 16 * (1 + rng.below(16));
  } else {
    p.tokens = 1 + rng.below(256);
  }
  p.steps = has_delayed(g) ? (rng.chance(0.7) ? 2 : 1) : (rng.chance(0.2) ? 2 : 1);
  if (config.tokens) p.tokens = *config.tokens;
  if (config.steps) p.steps = *config.steps;
  return p;
}

double case_cost(const Failure& f) {
  double weights = 0;
  for (std::size_t i = 0; i < f.gen.layers.size(); ++i)
    weights += double(layer_in(f.gen, i)) * double(f.gen.layers[i].out);
  return double(f.gen.layers.size()) * 1e12 + weights * double(f.params.tokens) + f.params.ranks +
         f.text.size() * 1e-3;
}

void write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

constexpr const char* kResultMarker =
    "\x1e"
    "RESULT\n";

// Runs one case in a forked child (or here, with fork off): a crash, an
// abort or a hang becomes a failure of the stage it happened in.
CaseResult run_isolated(const Spec& spec, const CaseParams& p, std::uint64_t seed,
                        const Config& config) {
  CaseOptions o;
  o.ranks = p.ranks;
  o.tokens = p.tokens;
  o.steps = p.steps;
  o.seed = seed;
  o.timeout = std::chrono::milliseconds(static_cast<long>(config.case_timeout * 1000 / 2));
  if (!config.fork) return spectest::run_case(spec, o);

  std::fflush(stdout);
  std::fflush(stderr);
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    const int fd = fds[1];
    o.stage = [fd](const char* stage) { write_all(fd, std::string("S ") + stage + "\n"); };
    const CaseResult r = spectest::run_case(spec, o);
    std::string checks;
    for (const auto& c : r.failed_checks) checks += (checks.empty() ? "" : "\x1f") + c;
    write_all(fd, std::string(kResultMarker) + std::to_string(static_cast<int>(r.outcome)) + "\n" +
                      one_line(r.category) + "\n" + one_line(r.key) + "\n" + one_line(checks) +
                      "\n" + r.detail);
    ::close(fd);
    std::fflush(stdout);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string buffer;
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<long>(config.case_timeout * 1000));
  bool timed_out = false;
  char chunk[65536];
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd pfd{fds[0], POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t n = ::read(fds[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buffer.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);

  std::string stage = "check";
  const std::size_t marker = buffer.find(kResultMarker);
  {
    std::istringstream lines(buffer.substr(0, marker));
    std::string line;
    while (std::getline(lines, line))
      if (line.rfind("S ", 0) == 0) stage = line.substr(2);
  }
  CaseResult r;
  if (marker != std::string::npos && !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    std::istringstream in(buffer.substr(marker + std::strlen(kResultMarker)));
    std::string outcome, checks;
    std::getline(in, outcome);
    std::getline(in, r.category);
    std::getline(in, r.key);
    std::getline(in, checks);
    r.outcome = static_cast<CaseResult::Outcome>(std::stoi(outcome));
    std::stringstream cs(checks);
    std::string c;
    while (std::getline(cs, c, '\x1f'))
      if (!c.empty()) r.failed_checks.push_back(c);
    std::ostringstream rest;
    rest << in.rdbuf();
    r.detail = rest.str();
    return r;
  }
  r.outcome = CaseResult::Outcome::failed;
  if (timed_out) {
    r.category = stage + ": timed out";
    r.detail = "no result after " + std::to_string(config.case_timeout) + " s (killed)";
  } else if (WIFSIGNALED(status)) {
    r.category = stage + ": crashed (" + std::string(::strsignal(WTERMSIG(status))) + ")";
    r.detail = "the case's process died of signal " + std::to_string(WTERMSIG(status)) +
               " during " + stage;
  } else {
    r.category = stage + ": exited with status " + std::to_string(WEXITSTATUS(status));
    r.detail = "the case's process exited without a result during " + stage;
  }
  r.key = r.category;
  return r;
}

// ---- generation --------------------------------------------------------

// Errors the checker reports for rules the generator is meant to obey: a spec
// rejected by one of them is regenerated (and counted); any other error is a
// generator bug.
bool documented_rule(const std::string& message) {
  if (message.find("unknown") != std::string::npos || message.find("expected") == 0 ||
      message.find("expected ") != std::string::npos)
    return false;
  static const char* const kRules[] = {"is not divisible by tensor_parallel",
                                       "is not a multiple of",
                                       "hands FP8 output",
                                       "needs an FP8 recipe",
                                       "chained layers share",
                                       "-parallel and so is its input",
                                       "set sequence_parallel the same",
                                       "does not match the output of",
                                       "' takes ",
                                       "needs FP8 tensor cores",
                                       "blockwise scaling needs",
                                       "gemm = generated emits wgmma",
                                       "save_input",
                                       "fallback",
                                       "FP8 input",
                                       "in FP8",
                                       "output = fp8"};
  for (const char* rule : kRules)
    if (message.find(rule) != std::string::npos) return true;
  return false;
}

struct Generated {
  GenSpec gen;
  std::string text;
  std::optional<Spec> spec;
  std::string generator_bug;  // set when the generator broke a rule or wrote bad text
};

Generated generate_checked(std::uint64_t seed, Stats& stats, double lenient) {
  Rng rng(seed);
  Generated out;
  for (int attempt = 0; attempt < 20; ++attempt) {
    out.gen = generate(rng, seed);
    if (lenient > 0 && rng.chance(lenient)) apply_twist(rng, out.gen);
    out.text = render(out.gen);
    const auto problems = rule_problems(out.gen);
    if (out.gen.twist.empty() && !problems.empty()) {
      out.generator_bug = "the generator broke its own rules:";
      for (const auto& p : problems) out.generator_bug += "\n  " + p;
      return out;
    }
    const SourceFile file("fuzz.fp8", out.text);
    fp8c::CheckResult checked = check_source(file);
    bool documented = true;
    for (const auto& d : checked.diagnostics.all()) {
      if (d.severity == Severity::warning)
        ++stats.warnings[(out.gen.twist.empty() ? "" : "(lenient) ") +
                         spectest::normalize(d.message)];
      if (d.severity != Severity::error) continue;
      if (documented_rule(d.message))
        ++stats.rejected[spectest::normalize(d.message)];
      else
        documented = false;
    }
    if (checked.spec) {
      out.spec = std::move(checked.spec);
      return out;
    }
    if (!documented) {
      out.generator_bug =
          "check_source rejected the generated spec:\n" + checked.diagnostics.render(file);
      return out;
    }
  }
  out.generator_bug = "20 generated specs in a row broke a documented rule";
  return out;
}

// ---- reporting ---------------------------------------------------------

std::string replay_line(std::uint64_t seed, const CaseParams& p, const Config& config) {
  std::ostringstream lenient;
  if (config.lenient > 0) lenient << "FP8C_PLAN_FUZZ_LENIENT=" << config.lenient << " ";
  return "FP8C_PLAN_FUZZ_SEED=" + std::to_string(seed) +
         " FP8C_PLAN_FUZZ_RANKS=" + std::to_string(p.ranks) + " " + lenient.str() + "plan_fuzz";
}

std::string case_line(const CaseParams& p) {
  return "ranks " + std::to_string(p.ranks) + ", tokens " + std::to_string(p.tokens) + ", steps " +
         std::to_string(p.steps);
}

std::string write_case_file(const Config& config, const std::string& name, const Failure& f,
                            const std::string& what) {
  std::filesystem::create_directories(config.out);
  const std::string path = (std::filesystem::path(config.out) / name).string();
  std::ofstream file(path);
  file << "# " << what << "\n# " << case_line(f.params) << " (seed " << f.seed << ")\n# "
       << one_line(f.result.key) << "\n# fp8c verify " << name << " --backend in-process --ranks "
       << f.params.ranks << " --tokens " << f.params.tokens << " --steps " << f.params.steps
       << " --seed " << f.seed << "\n"
       << f.text;
  return path;
}

void print_failure(const Failure& f, const std::string& path, const Config& config) {
  std::cout << "---- FAILURE: " << f.result.category << "\n"
            << "seed " << f.seed << ", " << case_line(f.params) << "\n"
            << "key: " << f.result.key << "\n"
            << "replay: " << replay_line(f.seed, f.params, config) << "\n"
            << "written to " << path << "\n"
            << "--- spec ---\n"
            << f.text << "--- result ---\n"
            << f.result.detail
            << (f.result.detail.empty() || f.result.detail.back() == '\n' ? "" : "\n") << "----\n";
}

// ---- shrinking ---------------------------------------------------------

// The stage a failure happened in ("plan", "verify"), from its category.
std::string failure_stage(const CaseResult& r) {
  return r.category.substr(0, r.category.find(':'));
}

bool same_failure(const CaseResult& now, const CaseResult& was) {
  if (now.outcome != CaseResult::Outcome::failed) return false;
  // A planner that reads a tensor id it never made (undefined behaviour)
  // crashes, throws bad_alloc or trips check_plan from run to run: any
  // failure of the plan stage is the same failure.
  if (failure_stage(was) == "plan" && failure_stage(now) == "plan") return true;
  if (now.category != was.category) return false;
  if (now.key == was.key) return true;
  if (now.failed_checks.empty() || was.failed_checks.empty()) return false;
  for (const auto& c : now.failed_checks)
    if (std::find(was.failed_checks.begin(), was.failed_checks.end(), c) == was.failed_checks.end())
      return false;
  return true;
}

// Drops named declarations no layer uses, renumbering the references.
void prune_named(GenSpec& g) {
  auto prune = [&](auto& named, auto ref_of) {
    std::vector<int> map(named.size(), -1);
    std::decay_t<decltype(named)> kept;
    for (std::size_t i = 0; i < named.size(); ++i) {
      bool used = false;
      for (auto& l : g.layers) used = used || ref_of(l) == static_cast<int>(i);
      if (used) map[i] = static_cast<int>(kept.size()), kept.push_back(named[i]);
    }
    for (auto& l : g.layers)
      if (ref_of(l) >= 0) ref_of(l) = map[static_cast<std::size_t>(ref_of(l))];
    named = kept;
  };
  prune(g.recipes, [](GenLayer& l) -> int& { return l.recipe_ref; });
  prune(g.layouts, [](GenLayer& l) -> int& { return l.layout_ref; });
  prune(g.debugs, [](GenLayer& l) -> int& { return l.debug_ref; });
}

void remove_layer(GenSpec& g, std::size_t i) {
  const int gone = static_cast<int>(i);
  const int producer = g.layers[i].input;
  for (auto& l : g.layers) {
    if (l.input == gone) l.input = -1, l.write_in = true, l.in = g.layers[i].out;
  }
  g.layers.erase(g.layers.begin() + static_cast<std::ptrdiff_t>(i));
  for (auto& l : g.layers)
    if (l.input > gone) --l.input;
  if (producer >= 0) {
    GenLayer& p = g.layers[static_cast<std::size_t>(producer > gone ? producer - 1 : producer)];
    if (p.output == "fp8") p.output.clear();
  }
  prune_named(g);
}

void cut_link(GenSpec& g, std::size_t i) {
  GenLayer& l = g.layers[i];
  if (l.input < 0) return;
  GenLayer& p = g.layers[static_cast<std::size_t>(l.input)];
  l.in = p.out;
  l.write_in = true;
  l.input = -1;
  if (p.output == "fp8") p.output.clear();
}

// Layers connected to i through input links.
std::vector<std::size_t> component(const GenSpec& g, std::size_t i) {
  std::vector<std::size_t> out{i};
  for (bool grew = true; grew;) {
    grew = false;
    for (std::size_t j = 0; j < g.layers.size(); ++j) {
      if (std::find(out.begin(), out.end(), j) != out.end()) continue;
      for (std::size_t k : out) {
        const bool linked =
            g.layers[j].input == static_cast<int>(k) || g.layers[k].input == static_cast<int>(j);
        if (linked) {
          out.push_back(j);
          grew = true;
          break;
        }
      }
    }
  }
  return out;
}

struct Candidate {
  GenSpec gen;
  CaseParams params;
};

std::vector<Candidate> reductions(const Failure& f) {
  std::vector<Candidate> c;
  const GenSpec& g = f.gen;
  auto add = [&](GenSpec n, CaseParams p) {
    prune_named(n);
    c.push_back({std::move(n), p});
  };
  auto edit = [&](auto fn) {
    GenSpec n = g;
    fn(n);
    add(std::move(n), f.params);
  };
  for (std::size_t i = 0; i < g.layers.size() && g.layers.size() > 1; ++i)
    edit([&](GenSpec& n) { remove_layer(n, i); });
  for (std::size_t i = 0; i < g.layers.size(); ++i)
    if (g.layers[i].input >= 0) edit([&](GenSpec& n) { cut_link(n, i); });
  for (std::uint32_t r : {1u, 2u, 3u, 4u, 6u})
    if (r < f.params.ranks) {
      CaseParams p = f.params;
      p.ranks = r;
      add(g, p);
    }
  {
    // Not below 16: a tolerance shown on a handful of elements proves little.
    std::set<std::uint64_t> tokens = {16, 32, 16ull * f.params.ranks, 32ull * f.params.ranks,
                                      f.params.tokens / 2 / 16 * 16};
    for (std::uint64_t t : tokens)
      if (t >= 16 && t < f.params.tokens) {
        CaseParams p = f.params;
        p.tokens = t;
        add(g, p);
      }
  }
  if (f.params.steps > 1) {
    CaseParams p = f.params;
    p.steps = 1;
    add(g, p);
  }
  if (!g.target.empty()) edit([](GenSpec& n) { n.target.clear(); });
  if (g.target != "sm_100a") edit([](GenSpec& n) { n.target = "sm_100a"; });
  for (std::size_t i = 0; i < g.layers.size(); ++i) {
    const GenLayer& l = g.layers[i];
    auto layer_edit = [&](auto fn) { edit([&](GenSpec& n) { fn(n.layers[i], n); }); };
    if (l.kind != RecipeKind::none)
      layer_edit([](GenLayer& x, GenSpec&) {
        x.kind = RecipeKind::none;
        x.recipe = {};
        x.recipe_ref = -1;
        if (x.save_input == "fp8") x.save_input.clear();
        if (x.output == "fp8") x.output.clear();
        x.debug.fallback.reset();
        x.debug_ref = -1;
        if (x.debug.empty()) x.debug_form = 0;
      });
    if (l.kind != RecipeKind::current && l.kind != RecipeKind::none)
      layer_edit([](GenLayer& x, GenSpec&) {
        x.kind = RecipeKind::current;
        x.recipe = {};
        x.recipe_ref = -1;
      });
    if (l.bias) layer_edit([](GenLayer& x, GenSpec&) { x.bias.reset(); });
    if (l.activation) layer_edit([](GenLayer& x, GenSpec&) { x.activation.reset(); });
    if (l.debug_form != 0)
      layer_edit([](GenLayer& x, GenSpec&) { x.debug_form = 0, x.debug_ref = -1; });
    if (l.debug.stats && l.debug_form == 2 && l.debug.fallback)
      layer_edit([](GenLayer& x, GenSpec&) { x.debug.stats.reset(), x.debug_ref = -1; });
    if (!l.save_input.empty()) layer_edit([](GenLayer& x, GenSpec&) { x.save_input.clear(); });
    if (!l.output.empty()) layer_edit([](GenLayer& x, GenSpec&) { x.output.clear(); });
    if (!l.gemm.empty()) layer_edit([](GenLayer& x, GenSpec&) { x.gemm.clear(); });
    if (l.one_line) layer_edit([](GenLayer& x, GenSpec&) { x.one_line = false; });
    if (l.recipe_ref >= 0) layer_edit([](GenLayer& x, GenSpec&) { x.recipe_ref = -1; });
    if (l.layout_ref >= 0) layer_edit([](GenLayer& x, GenSpec&) { x.layout_ref = -1; });
    if (l.debug_ref >= 0) layer_edit([](GenLayer& x, GenSpec&) { x.debug_ref = -1; });
    if (l.input >= 0 && !l.write_in) layer_edit([](GenLayer& x, GenSpec&) { x.write_in = true; });
    if (l.layout.overlap)
      layer_edit([](GenLayer& x, GenSpec&) { x.layout.overlap.reset(), x.layout_ref = -1; });
    if (l.layout.sp && !*l.layout.sp)
      layer_edit([](GenLayer& x, GenSpec&) { x.layout.sp.reset(), x.layout_ref = -1; });
    // Recipe settings one at a time.
    const RecipeSettings& r = l.recipe;
    auto recipe_edit = [&](auto fn) {
      layer_edit([&](GenLayer& x, GenSpec&) {
        fn(x.recipe);
        x.recipe_ref = -1;
      });
    };
    if (r.forward) recipe_edit([](RecipeSettings& s) { s.forward.reset(); });
    if (r.backward) recipe_edit([](RecipeSettings& s) { s.backward.reset(); });
    if (r.history) recipe_edit([](RecipeSettings& s) { s.history.reset(); });
    if (r.margin) recipe_edit([](RecipeSettings& s) { s.margin.reset(); });
    if (r.amax) recipe_edit([](RecipeSettings& s) { s.amax.reset(); });
    if (r.scale) recipe_edit([](RecipeSettings& s) { s.scale.reset(); });
    if (r.nan) recipe_edit([](RecipeSettings& s) { s.nan.reset(); });
    // The whole component: dtype, sequence parallelism, one rank.
    const auto comp = component(g, i);
    if (l.dtype)
      edit([&](GenSpec& n) {
        for (std::size_t j : comp) {
          n.layers[j].dtype.reset();
          if (n.layers[j].output != "fp8") n.layers[j].output.clear();
        }
      });
    if (layer_sp(g, l))
      edit([&](GenSpec& n) {
        for (std::size_t j : comp) {
          n.layers[j].layout.sp.reset();
          n.layers[j].layout.overlap.reset();
          n.layers[j].layout_ref = -1;
        }
      });
    for (std::uint32_t tp : {1u, 2u})
      if (layer_tp(g, l) > tp)
        edit([&](GenSpec& n) {
          for (std::size_t j : comp) {
            GenLayer& x = n.layers[j];
            x.layout = {};
            x.layout.tp = tp;
            if (tp > 1) x.layout.sp = layer_sp(g, g.layers[j]);
            x.layout_ref = -1;
            x.layout_written = true;
            x.mode = layer_mode(g.layers[j]);
          }
        });
    // Sizes.
    for (std::uint64_t v : {32, 64, 96, 128, 192, 256, 384}) {
      if (l.input < 0 && v < l.in) edit([&](GenSpec& n) { n.layers[i].in = v; });
      if (v < l.out) edit([&](GenSpec& n) { n.layers[i].out = v; });
    }
    if (l.input < 0 && l.in % 64 == 0) edit([&](GenSpec& n) { n.layers[i].in /= 2; });
    if (l.out % 64 == 0) edit([&](GenSpec& n) { n.layers[i].out /= 2; });
  }
  return c;
}

// What shrinking minimises, in order: layers, weights, tokens, ranks, steps,
// then the text (settings written). Every kept reduction makes it smaller.
std::tuple<std::size_t, double, std::uint64_t, std::uint32_t, std::uint32_t, std::size_t>
shrink_score(const GenSpec& g, const CaseParams& p, const std::string& text) {
  double weights = 0;
  for (std::size_t i = 0; i < g.layers.size(); ++i)
    weights += double(layer_in(g, i)) * double(g.layers[i].out);
  return {g.layers.size(), weights, p.tokens, p.ranks, p.steps, text.size()};
}

Failure shrink(Failure f, const Config& config, double seconds) {
  // A lenient spec keeps breaking the rules it broke, and no other.
  const auto broken = rule_problems(f.gen);
  const std::set<std::string> allowed(broken.begin(), broken.end());
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  f.gen.canonical = true;  // same meaning, plain file and key order
  f.text = render(f.gen);
  std::size_t tries = 0, accepted = 0;
  for (bool improved = true; improved && Clock::now() < deadline;) {
    improved = false;
    const auto score = shrink_score(f.gen, f.params, f.text);
    for (const Candidate& cand : reductions(f)) {
      if (Clock::now() >= deadline) break;
      bool within = true;
      for (const auto& p : rule_problems(cand.gen)) within = within && allowed.count(p) > 0;
      if (!within) continue;
      const std::string text = render(cand.gen);
      if (!(shrink_score(cand.gen, cand.params, text) < score)) continue;
      const SourceFile file("shrink.fp8", text);
      fp8c::CheckResult checked = check_source(file);
      if (!checked.spec) continue;
      ++tries;
      const CaseResult r = run_isolated(*checked.spec, cand.params, f.seed, config);
      if (!same_failure(r, f.result)) continue;
      f.gen = cand.gen;
      f.params = cand.params;
      f.text = text;
      f.result = r;
      ++accepted;
      improved = true;
      break;
    }
  }
  std::cout << "shrink: " << tries << " tries, " << accepted << " reductions kept"
            << (Clock::now() >= deadline ? " (out of time)" : "") << "\n";
  return f;
}

// ---- main loop ---------------------------------------------------------

int generator_only(const Config& config) {
  Stats stats;
  std::size_t bugs = 0;
  const std::uint64_t base = config.base_seed.value_or(1);
  for (std::uint64_t i = 0; i < *config.generator_only; ++i) {
    const std::uint64_t seed = base + i;
    const Generated a = generate_checked(seed, stats, config.lenient);
    const Generated b = generate_checked(seed, stats, config.lenient);
    if (a.text != b.text) {
      std::cout << "seed " << seed << ": the same seed gave two different specs\n";
      ++bugs;
    }
    if (!a.generator_bug.empty()) {
      std::cout << "seed " << seed << ": " << a.generator_bug << "\n" << a.text << "\n";
      ++bugs;
    }
  }
  for (const auto& [m, n] : stats.rejected) std::cout << "rejected " << n << "x: " << m << "\n";
  for (const auto& [m, n] : stats.warnings) std::cout << "warning " << n << "x: " << m << "\n";
  std::cout << *config.generator_only << " seeds generated, " << bugs << " generator bugs\n";
  return bugs == 0 && stats.warnings.empty() ? 0 : 1;
}

int run(const Config& config) {
  const auto start = Clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  const bool replay = config.seed.has_value();
  const std::uint64_t base = config.base_seed.value_or(
      static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count() /
                                 1000) %
      1000000000000ull);
  std::cout << "plan_fuzz: "
            << (replay ? "replaying seed " + std::to_string(*config.seed)
                       : "base seed " + std::to_string(base) + ", " +
                             std::to_string(static_cast<long>(config.seconds)) + " s")
            << ", ranks";
  for (auto r : config.ranks) std::cout << " " << r;
  std::cout << (config.fork ? ", one process per case" : ", in this process") << "\n"
            << "replay one seed with FP8C_PLAN_FUZZ_SEED=<seed> (FP8C_PLAN_FUZZ_FORK=0 to run it "
               "in the fuzzer's own process)\n"
            << std::flush;

  Stats stats;
  std::vector<std::string> generator_bugs;
  for (std::uint64_t i = 0;; ++i) {
    if (replay ? i > 0 : elapsed() >= config.seconds) break;
    const std::uint64_t seed = replay ? *config.seed : base + i;
    std::cout << "[" << i << "] seed " << seed << std::flush;
    ++stats.seeds;
    const Generated gen = generate_checked(seed, stats, config.lenient);
    if (!gen.generator_bug.empty()) {
      std::cout << "\n---- GENERATOR BUG, seed " << seed << ": " << gen.generator_bug << "\n"
                << gen.text << "----\n";
      generator_bugs.push_back(std::to_string(seed));
      continue;
    }
    std::cout << ": " << describe(gen.gen) << "\n";
    if (replay || config.print_spec || !config.fork) std::cout << gen.text << std::flush;
    std::string line = "   ";
    for (std::uint32_t ranks : config.ranks) {
      const CaseParams p = case_params(gen.gen, seed, ranks, config);
      if (!config.fork)
        std::cout << "  running seed " << seed << ", " << case_line(p) << "\n" << std::flush;
      const auto t0 = Clock::now();
      const CaseResult r = run_isolated(*gen.spec, p, seed, config);
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      ++stats.cases;
      char timing[32];
      std::snprintf(timing, sizeof timing, " %.2fs", dt);
      line += " R" + std::to_string(ranks) + "/T" + std::to_string(p.tokens) + " ";
      switch (r.outcome) {
        case CaseResult::Outcome::passed:
          ++stats.passed;
          line += std::string("pass") + timing;
          if (replay) std::cout << r.detail;
          break;
        case CaseResult::Outcome::refused:
          ++stats.refused;
          ++stats.refusals[spectest::normalize(r.detail)];
          line += "refused";
          if (replay) std::cout << "refused: " << r.detail << "\n";
          break;
        case CaseResult::Outcome::failed: {
          ++stats.failed;
          line += "FAIL";
          Failure f{seed, gen.gen, gen.text, p, r};
          Group& group =
              stats.groups[(gen.gen.twist.empty() ? "" : "{lenient: " + gen.gen.twist + "} ") +
                           r.key];
          const bool first_of_group = group.count == 0;
          if (first_of_group) group.category = r.category;
          ++group.count;
          if (group.seeds.size() < 8 &&
              std::find(group.seeds.begin(), group.seeds.end(), seed) == group.seeds.end())
            group.seeds.push_back(seed);
          const double cost = case_cost(f);
          if (first_of_group || cost < group.smallest_cost)
            group.smallest = f, group.smallest_cost = cost;
          const std::string name = "seed-" + std::to_string(seed) + "-r" + std::to_string(ranks) +
                                   "-t" + std::to_string(p.tokens) + ".fp8";
          const std::string path = write_case_file(config, name, f, r.category);
          if (group.count <= 2 || replay)
            print_failure(f, path, config);
          else
            std::cout << "   FAIL (" << r.category << ", seen " << group.count
                      << " times; written to " << path << ")\n";
          break;
        }
      }
    }
    std::cout << line << "\n" << std::flush;
  }

  // Summary.
  std::cout << "\n==== plan_fuzz summary: " << stats.seeds << " seeds, " << stats.cases
            << " cases in " << static_cast<int>(elapsed()) << " s: " << stats.passed << " passed, "
            << stats.refused << " refused as allowed, " << stats.failed << " failed\n";
  std::size_t rejected = 0;
  for (const auto& [m, n] : stats.rejected) rejected += n;
  std::cout << "specs rejected by a documented rule and regenerated: " << rejected << "\n";
  for (const auto& [m, n] : stats.rejected) std::cout << "  " << n << " x " << m << "\n";
  if (!stats.warnings.empty()) std::cout << "warnings on generated specs:\n";
  for (const auto& [m, n] : stats.warnings) std::cout << "  " << n << " x " << m << "\n";
  if (!stats.refusals.empty()) std::cout << "refusals (PlanError naming the dim):\n";
  for (const auto& [m, n] : stats.refusals) std::cout << "  " << n << " x " << m << "\n";
  if (!generator_bugs.empty()) {
    std::cout << "GENERATOR BUGS at seeds:";
    for (const auto& s : generator_bugs) std::cout << " " << s;
    std::cout << "\n";
  }
  std::cout << "failure groups: " << stats.groups.size() << "\n";
  std::size_t index = 0;
  double shrink_left = config.shrink_seconds;
  for (auto& [key, group] : stats.groups) {
    ++index;
    std::cout << "\n[" << index << "] " << group.category << " (" << group.count << " cases)\n"
              << "    key: " << key << "\n    seeds:";
    for (auto s : group.seeds) std::cout << " " << s;
    const Failure& f = group.smallest;
    std::cout << "\n    smallest: seed " << f.seed << ", " << case_line(f.params) << ": "
              << describe(f.gen) << "\n";
    if (config.shrink && shrink_left > 0) {
      const auto t0 = Clock::now();
      const double budget = shrink_left / double(stats.groups.size() - index + 1);
      const Failure m = shrink(f, config, budget);
      shrink_left -= std::chrono::duration<double>(Clock::now() - t0).count();
      const std::string path = write_case_file(config, "min-" + std::to_string(index) + ".fp8", m,
                                               "minimised: " + group.category);
      std::cout << "    minimised (" << path << "): " << case_line(m.params) << "\n"
                << m.text << "    result:\n"
                << m.result.detail << "\n";
    }
  }
  const bool ok = stats.failed == 0 && generator_bugs.empty();
  std::cout << "\nplan_fuzz: " << (ok ? "PASSED" : "FAILED") << "\n";
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace fp8c::planfuzz

int main(int argc, char** argv) {
  fp8c::planfuzz::Config config;
  try {
    config = fp8c::planfuzz::parse_config(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "plan_fuzz: " << e.what() << "\n";
    return 2;
  }
  if (config.generator_only) return fp8c::planfuzz::generator_only(config);
  return fp8c::planfuzz::run(config);
}
