#include "tests/specs_test/oracle_case.hpp"

#include <algorithm>
#include <cctype>
#include <exception>
#include <typeinfo>

#include "codegen/plan/planner.hpp"
#include "collectives/collective_error.hpp"
#include "collectives/run_ranks.hpp"
#include "runtime/cpu/executor.hpp"
#include "runtime/cpu/verify.hpp"

namespace fp8c::spectest {
namespace {

std::string str(std::uint64_t v) {
  return std::to_string(v);
}

bool is_word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// The first line of a message (exception texts can run over many lines).
std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

// A layer's traits that decide its tolerances: recipe, mode, sequence
// parallelism, activation, FP8 output, debug fallback.
std::string traits(const Layer& l, bool with_sp) {
  std::string t = std::string(to_string(l.recipe.kind)) + " " + std::string(to_string(l.mode));
  if (with_sp && l.layout.sequence_parallel) t += " sp";
  if (l.activation != Activation::none) t += " " + std::string(to_string(l.activation));
  if (l.output_fp8) t += " fp8-out";
  if (!l.debug.fallback.empty()) t += " fallback";
  return t;
}

// A check's name with the rank count replaced by N ("y: N ranks vs 1 rank")
// and a chain's layer names by (producer) / (consumer), after the traits of
// its layer or chain in brackets. With `coarse`, only the comparison is kept
// (N vs 1 rank, vs float64, replicas, delayed state), not the tensor.
std::string normalize_check(const cpu::CheckResult& c, const Spec& spec, bool coarse) {
  std::string check = c.check;
  const auto arrow = c.layer.find("->");
  std::string prefix;
  if (arrow != std::string::npos) {
    const std::string first = c.layer.substr(0, arrow);
    const std::string second = c.layer.substr(arrow + 2);
    for (const auto& [name, role] : {std::pair{first, "producer"}, std::pair{second, "consumer"}}) {
      const std::string paren = "(" + name + ")";
      if (auto at = check.find(paren); at != std::string::npos)
        check.replace(at, paren.size(), std::string("(") + role + ")");
    }
    prefix = "chain ";
    const Layer* a = spec.find_layer(first);
    const Layer* b = spec.find_layer(second);
    if (a && b) prefix += "[" + traits(*a, true) + " -> " + traits(*b, true) + "] ";
  } else if (const Layer* l = spec.find_layer(c.layer)) {
    prefix = "[" + traits(*l, true) + "] ";
  }
  if (coarse) {
    if (check.find("vs float64") != std::string::npos) return prefix + "vs float64";
    if (check.find("vs 1 rank") != std::string::npos)
      return prefix + (check.rfind("delayed", 0) == 0 ? "delayed state " : "") + "N vs 1 rank";
    return prefix + check;
  }
  std::string out;
  for (std::size_t i = 0; i < check.size();) {
    if (std::isdigit(static_cast<unsigned char>(check[i]))) {
      std::size_t j = i;
      while (j < check.size() && std::isdigit(static_cast<unsigned char>(check[j]))) ++j;
      const std::string number = check.substr(i, j - i);
      out += check.compare(j, 6, " ranks") == 0 ? "N" : number;
      i = j;
    } else {
      out += check[i++];
    }
  }
  return prefix + out;
}

CaseResult failure(std::string category, std::string key_detail, std::string detail) {
  CaseResult r;
  r.outcome = CaseResult::Outcome::failed;
  r.key = category + (key_detail.empty() ? "" : ": " + key_detail);
  r.category = std::move(category);
  r.detail = std::move(detail);
  return r;
}

std::string join(const std::set<std::string>& s, const std::string& sep) {
  std::string out;
  for (const auto& x : s) out += (out.empty() ? "" : sep) + x;
  return out;
}

}  // namespace

std::string outcome_name(CaseResult::Outcome outcome) {
  switch (outcome) {
    case CaseResult::Outcome::passed:
      return "passed";
    case CaseResult::Outcome::refused:
      return "refused";
    case CaseResult::Outcome::failed:
      return "FAILED";
  }
  return "?";
}

PlanExpectation expect_plan(const Spec& spec, std::uint32_t ranks, std::uint64_t tokens) {
  PlanExpectation e;
  const std::uint32_t r = ranks;
  for (const Layer& layer : spec.layers) {
    const bool column = layer.mode == ParallelMode::column;
    const std::string split_name = column ? "out" : "in";
    const std::uint64_t split = column ? layer.out : layer.in;
    const std::string where = "layer '" + layer.name + "': ";
    if (split % r != 0) {
      e.must_dims.insert(split_name);
      e.must_reasons.push_back(where + split_name + " = " + str(split) + " is not divisible by " +
                               str(r) + " ranks");
    }
    const bool sp = layer.layout.sequence_parallel && r > 1;
    if (sp && tokens % r != 0) {
      e.must_dims.insert("tokens");
      e.must_reasons.push_back(where + str(tokens) + " tokens are not divisible by " + str(r) +
                               " ranks (sequence parallel)");
    }
    if (!layer.recipe.is_fp8()) continue;
    const std::uint64_t align = layer.recipe.kind == RecipeKind::mxfp8 ? 32 : 16;
    if (split % r == 0) {
      const std::uint64_t in_rank = column ? layer.in : layer.in / r;
      const std::uint64_t out_rank = column ? layer.out / r : layer.out;
      for (const auto& [name, size] : {std::pair{"in", in_rank}, std::pair{"out", out_rank}}) {
        if (size % align == 0) continue;
        e.may_dims.insert(name);
        e.may_reasons.push_back(where + name + " per rank = " + str(size) +
                                " is not a multiple of " + str(align));
      }
    }
    // FP8 GEMMs take the tokens as an extent too (wgrad's K); under sequence
    // parallelism each rank holds tokens / R of them.
    const std::uint64_t t_align = align * (sp ? r : 1);
    if (tokens % t_align != 0) {
      e.may_dims.insert("tokens");
      e.may_reasons.push_back(where + str(tokens) + " tokens are not a multiple of " +
                              str(t_align));
    }
  }
  return e;
}

bool names_dim(const std::string& message, const std::string& dim) {
  // Each occurrence of `word` standing alone (not inside a longer name).
  const auto occurrences = [&](const std::string& word) {
    std::vector<std::size_t> found;
    for (std::size_t at = message.find(word); at != std::string::npos;
         at = message.find(word, at + 1)) {
      const std::size_t end = at + word.size();
      if ((at == 0 || !is_word_char(message[at - 1])) &&
          (end >= message.size() || !is_word_char(message[end])))
        found.push_back(at);
    }
    return found;
  };
  if (dim == "tokens") return !occurrences("tokens").empty() || !occurrences("token").empty();
  // "in" and "out" are English words too: require `in =`, 'in', `in` or "in".
  for (const std::size_t at : occurrences(dim)) {
    const std::size_t end = at + dim.size();
    if (message.compare(end, 2, " =") == 0 || message.compare(end, 1, "=") == 0) return true;
    const char before = at == 0 ? ' ' : message[at - 1];
    if ((before == '\'' || before == '`' || before == '"') && end < message.size() &&
        message[end] == before)
      return true;
  }
  return false;
}

bool chain_valid_at(const Layer& producer, const Layer& consumer, std::uint32_t ranks) {
  if (ranks == 1) return true;
  if (producer.mode == consumer.mode) return false;
  if (producer.mode == ParallelMode::row &&
      producer.layout.sequence_parallel != consumer.layout.sequence_parallel)
    return false;
  return true;
}

std::string normalize(const std::string& message) {
  std::string out;
  for (std::size_t i = 0; i < message.size();) {
    const char c = message[i];
    if (std::isdigit(static_cast<unsigned char>(c)) && (i == 0 || !is_word_char(message[i - 1]))) {
      while (i < message.size() && std::isdigit(static_cast<unsigned char>(message[i]))) ++i;
      out += 'N';
    } else if (c == '\'') {
      const std::size_t close = message.find('\'', i + 1);
      if (close == std::string::npos || close - i > 40) {
        out += message.substr(i);
        break;
      }
      out += "'L'";
      i = close + 1;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

CaseResult run_case(const Spec& spec, const CaseOptions& options) {
  const PlanExpectation expect = expect_plan(spec, options.ranks, options.tokens);
  const auto stage = [&](const char* s) {
    if (options.stage) options.stage(s);
  };

  // 1. The planner, at the case's ranks.
  stage("plan");
  PlanOptions plan_options;
  plan_options.ranks = options.ranks;
  plan_options.tokens = options.tokens;
  try {
    (void)plan_spec(spec, plan_options);
  } catch (const PlanError& e) {
    const std::string msg = e.what();
    if (msg.find("internal error") != std::string::npos) {
      // The first complaint of check_plan names the kind of mistake.
      const auto nl = msg.find('\n');
      const std::string first = nl == std::string::npos ? msg : first_line(msg.substr(nl + 3));
      return failure("plan: internal error", normalize(first), msg);
    }
    bool named_must = false, named_may = false;
    for (const auto& d : expect.must_dims) named_must = named_must || names_dim(msg, d);
    for (const auto& d : expect.may_dims) named_may = named_may || names_dim(msg, d);
    if (named_must || (!expect.must_refuse() && named_may)) {
      CaseResult r;
      r.outcome = CaseResult::Outcome::refused;
      r.detail = msg;
      return r;
    }
    if (expect.must_refuse())
      return failure("plan: refusal does not name the offending dim", normalize(msg),
                     msg + "\nexpected a refusal naming one of: " + join(expect.must_dims, ", "));
    if (!expect.may_dims.empty())
      return failure("plan: refusal does not name the offending dim", normalize(msg),
                     msg + "\nthe case may be refused over: " + join(expect.may_dims, ", "));
    return failure("plan: refused a case every rule allows", normalize(msg), msg);
  } catch (const std::exception& e) {
    return failure("plan: threw " + std::string(typeid(e).name()), normalize(first_line(e.what())),
                   e.what());
  } catch (...) {
    return failure("plan: threw a non-std exception", "", "");
  }
  if (expect.must_refuse()) {
    std::string why;
    for (const auto& r : expect.must_reasons) why += r + "\n";
    return failure("plan: planned a case it must refuse", join(expect.must_dims, ","),
                   "plan_spec returned a plan although\n" + why);
  }

  // 2. The oracle: N ranks vs 1 rank vs float64.
  stage("verify");
  cpu::VerifyOptions vo;
  vo.ranks = options.ranks;
  vo.tokens = options.tokens;
  vo.steps = options.steps;
  vo.seed = options.seed;
  vo.executor.backend = collectives::Backend::kInProcess;
  vo.executor.timeout = options.timeout;
  cpu::VerifyReport report;
  try {
    report = cpu::verify_spec(spec, vo);
  } catch (const PlanError& e) {
    // The N-rank plan was made above: this is the 1-rank plan (same tokens).
    const std::string msg = e.what();
    bool named = false;
    for (const auto& d : expect.may_dims) named = named || (d == "tokens" && names_dim(msg, d));
    if (named) {
      CaseResult r;
      r.outcome = CaseResult::Outcome::refused;
      r.detail = "1-rank plan: " + msg;
      return r;
    }
    return failure("verify: the 1-rank plan was refused", normalize(first_line(msg)), msg);
  } catch (const cpu::VerifyError& e) {
    return failure("verify: VerifyError", normalize(first_line(e.what())), e.what());
  } catch (const cpu::ExecutorError& e) {
    return failure("verify: ExecutorError", normalize(first_line(e.what())), e.what());
  } catch (const collectives::CollectiveError& e) {
    return failure("verify: CollectiveError", normalize(first_line(e.what())), e.what());
  } catch (const std::exception& e) {
    return failure("verify: threw " + std::string(typeid(e).name()),
                   normalize(first_line(e.what())), e.what());
  } catch (...) {
    return failure("verify: threw a non-std exception", "", "");
  }

  const std::string text = cpu::format_report(report);
  std::set<std::string> failed, failed_coarse;
  for (const auto& c : report.checks) {
    if (c.pass) continue;
    failed.insert(normalize_check(c, spec, false));
    failed_coarse.insert(normalize_check(c, spec, true));
  }
  // A note that a chain was not run is a failure where the chain is valid at
  // these ranks (the checker's rules guarantee its shards line up).
  std::set<std::string> bad_notes;
  for (const auto& note : report.notes) {
    if (note.rfind("chain ", 0) != 0 || note.find(" not run") == std::string::npos) continue;
    if (note.find("2^27 weights") != std::string::npos) continue;
    const std::string name = note.substr(6, note.find(' ', 6) - 6);
    const auto arrow = name.find("->");
    const Layer* a = arrow == std::string::npos ? nullptr : spec.find_layer(name.substr(0, arrow));
    const Layer* b = arrow == std::string::npos ? nullptr : spec.find_layer(name.substr(arrow + 2));
    if (a && b && !chain_valid_at(*a, *b, options.ranks)) continue;
    bad_notes.insert(normalize(note.substr(note.find(" not run"))));
  }
  if (!failed.empty()) {
    CaseResult r = failure("verify: checks failed", join(failed_coarse, "; "), text);
    r.failed_checks.assign(failed.begin(), failed.end());
    return r;
  }
  if (!bad_notes.empty())
    return failure("verify: a valid chain was not run", join(bad_notes, "; "), text);
  CaseResult r;
  r.outcome = CaseResult::Outcome::passed;
  r.detail = text;
  return r;
}

}  // namespace fp8c::spectest
