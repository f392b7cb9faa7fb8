#include "dsl/suggest.hpp"

#include <algorithm>
#include <cctype>

namespace fp8c::dsl {
namespace {

// Damerau-Levenshtein (optimal string alignment): a swapped pair of letters,
// the most common typo, counts as one edit. Case is ignored.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  const auto lower = [](char c) { return std::tolower(static_cast<unsigned char>(c)); };
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string closest_match(std::string_view word, const std::vector<std::string_view>& candidates) {
  // Words longer than any key are junk, not typos; don't pay O(n*m) for them.
  if (word.size() > 64) return {};
  const std::size_t allowed = word.size() <= 4 ? 1 : 2;
  std::string best;
  std::size_t best_distance = allowed + 1;
  for (auto candidate : candidates) {
    const std::size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = std::string(candidate);
    }
  }
  return best_distance <= allowed ? best : std::string();
}

std::string did_you_mean(std::string_view word, const std::vector<std::string_view>& candidates) {
  const std::string match = closest_match(word, candidates);
  return match.empty() ? std::string() : ", did you mean '" + match + "'?";
}

}  // namespace fp8c::dsl
