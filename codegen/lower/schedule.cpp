#include "codegen/lower/schedule.hpp"

#include <algorithm>

namespace fp8c {
namespace {

// The executor's scratch buffers a step uses, as pseudo-tensors (negative
// ids): the dbias tile partials (or a generated GEMM's dbias workspace), dz
// staged in fp32. Two steps that use the
// same one are ordered like a write after a write. (A GEMM's staging, its
// dequantized operands and re-laid block scales, is the GEMMs' alone, and
// they all run on the main stream, one after another.)
std::vector<int> scratch_of(const LoweredStep& l) {
  std::vector<int> v;
  for (const auto& a : l.actions) {
    if (const auto* k = std::get_if<KernelLaunch>(&a)) {
      if (k->role == LaunchRole::dbias_reduce) v.push_back(-1);
      if (k->role == LaunchRole::dact_to_staging) v.push_back(-2);
    }
    // The generated GEMM's dbias takes the partials' scratch as its workspace.
    if (const auto* c = std::get_if<GemmCall>(&a); c && c->dbias) v.push_back(-1);
  }
  return v;
}

}  // namespace

std::vector<int> schedule_pass(const std::vector<Step>& steps, std::vector<LoweredStep>& lowered,
                               bool side) {
  const std::size_t n = steps.size();
  // Hazards, in plan order.
  std::vector<std::vector<int>> reads(n), writes(n);
  for (std::size_t i = 0; i < n; ++i) {
    reads[i] = steps[i].inputs();
    writes[i] = steps[i].outputs();
    for (int scratch : scratch_of(lowered[i])) writes[i].push_back(scratch);
  }
  // A ring's GEMM step runs its collective: it reads and writes what the
  // collective does, and the collective step nothing. Both issue
  // collectives in the order below as the GEMM step.
  std::vector<bool> issues_collectives(n, false);
  for (std::size_t i = 0; i < n; ++i) issues_collectives[i] = steps[i].is_collective();
  for (std::size_t c = 0; c < n; ++c) {
    const int g = lowered[c].ring_gemm();
    if (g < 0) continue;
    const auto gi = static_cast<std::size_t>(g);
    reads[gi].insert(reads[gi].end(), reads[c].begin(), reads[c].end());
    writes[gi].insert(writes[gi].end(), writes[c].begin(), writes[c].end());
    reads[c].clear();
    writes[c].clear();
    issues_collectives[c] = false;
    issues_collectives[gi] = true;
  }
  const auto touches = [](const std::vector<int>& a, const std::vector<int>& b) {
    for (int x : a)
      if (std::find(b.begin(), b.end(), x) != b.end()) return true;
    return false;
  };
  for (std::size_t i = 0; i < n; ++i) {
    lowered[i].after.clear();
    for (std::size_t j = 0; j < i; ++j)
      if (touches(reads[i], writes[j]) || touches(writes[i], reads[j]) ||
          touches(writes[i], writes[j]))
        lowered[i].after.push_back(static_cast<int>(j));
  }
  // depends[i][j]: step i depends on step j, transitively (j < i).
  std::vector<std::vector<bool>> depends(n, std::vector<bool>(n, false));
  for (std::size_t i = 0; i < n; ++i)
    for (int j : lowered[i].after) {
      depends[i][static_cast<std::size_t>(j)] = true;
      for (std::size_t k = 0; k < n; ++k)
        if (depends[static_cast<std::size_t>(j)][k]) depends[i][k] = true;
    }
  const auto is_gemm = [&](std::size_t i) { return steps[i].kind() == StepKind::gemm; };
  std::vector<bool> eligible(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    lowered[i].on_side_stream = false;
    eligible[i] = side && !is_gemm(i) && !steps[i].is_collective();
  }
  // The first rule: a GEMM it is independent of.
  for (std::size_t i = 0; i < n; ++i) {
    if (!eligible[i]) continue;
    for (std::size_t g = 0; g < n; ++g)
      if (is_gemm(g) && g != i && !(g > i && depends[g][i]) && !(i > g && depends[i][g]))
        lowered[i].on_side_stream = true;
  }
  // The second rule: chains of preparation (steps that are no GEMM and
  // depend on none), connected through any of their hazards, collectives
  // included; the eligible steps of every chain but the pass's first feed a
  // GEMM from the side stream.
  std::vector<bool> before_gemms(n, false), feeds_gemm(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    if (is_gemm(i)) continue;
    bool after_gemm = false;
    for (std::size_t g = 0; g < n; ++g) {
      if (!is_gemm(g)) continue;
      after_gemm = after_gemm || (i > g && depends[i][g]);
      feeds_gemm[i] = feeds_gemm[i] || (g > i && depends[g][i]);
    }
    before_gemms[i] = !after_gemm;
  }
  std::vector<int> component(n, -1);
  int components = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!before_gemms[i] || component[i] >= 0) continue;
    std::vector<std::size_t> stack = {i};
    component[i] = components;
    while (!stack.empty()) {
      const std::size_t a = stack.back();
      stack.pop_back();
      for (std::size_t b = 0; b < n; ++b) {
        if (!before_gemms[b] || component[b] >= 0) continue;
        const auto& after_a = lowered[a].after;
        const auto& after_b = lowered[b].after;
        if (std::find(after_a.begin(), after_a.end(), static_cast<int>(b)) != after_a.end() ||
            std::find(after_b.begin(), after_b.end(), static_cast<int>(a)) != after_b.end()) {
          component[b] = components;
          stack.push_back(b);
        }
      }
    }
    ++components;
  }
  for (std::size_t i = 0; i < n; ++i)
    if (eligible[i] && feeds_gemm[i] && component[i] > 0) lowered[i].on_side_stream = true;

  // The issue order.
  std::vector<bool> waits_for_side(n, false);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (depends[i][j] && lowered[j].on_side_stream) waits_for_side[i] = true;
  std::vector<int> order;
  std::vector<bool> issued(n, false);
  while (order.size() < n) {
    int pick = -1, rank = 3;
    for (std::size_t i = 0; i < n; ++i) {
      if (issued[i]) continue;
      bool ready = true;
      for (int j : lowered[i].after) ready = ready && issued[static_cast<std::size_t>(j)];
      // Collectives in the plan's order (they all run on one stream).
      if (issues_collectives[i])
        for (std::size_t j = 0; j < i; ++j) ready = ready && (issued[j] || !issues_collectives[j]);
      if (!ready) continue;
      const int r = lowered[i].on_side_stream ? 0 : waits_for_side[i] ? 2 : 1;
      if (r < rank) {
        rank = r;
        pick = static_cast<int>(i);
      }
    }
    issued[static_cast<std::size_t>(pick)] = true;
    order.push_back(pick);
  }
  return order;
}

}  // namespace fp8c
