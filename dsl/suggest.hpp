// "did you mean" for unknown keys, values and names.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fp8c::dsl {

// The closest candidate to `word` by edit distance, if it is close enough to
// be a plausible typo (at most 1 edit for short words, 2 for longer ones);
// empty otherwise.
std::string closest_match(std::string_view word, const std::vector<std::string_view>& candidates);

// ", did you mean 'x'?" or "".
std::string did_you_mean(std::string_view word, const std::vector<std::string_view>& candidates);

}  // namespace fp8c::dsl
