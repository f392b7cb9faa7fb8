#include "runtime/kernel_batch.hpp"

#include <algorithm>
#include <numeric>
#include <regex>

namespace fp8c::runtime {

std::string batch_source(const std::vector<const KernelSource*>& kernels) {
  static const std::regex define(R"(^[ \t]*#[ \t]*define[ \t]+([A-Za-z_][A-Za-z0-9_]*))",
                                 std::regex::multiline);
  std::string out;
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const std::string& source = kernels[i]->source;
    out += "namespace fp8c_batch_" + std::to_string(i) + " {\n#line 1 \"" + kernels[i]->name +
           ".cu\"\n" + source + "\n}\n";
    for (auto it = std::sregex_iterator(source.begin(), source.end(), define);
         it != std::sregex_iterator(); ++it)
      out += "#undef " + (*it)[1].str() + "\n";
  }
  return out;
}

std::vector<std::vector<std::size_t>> balance_batches(const std::vector<double>& costs,
                                                      std::size_t bins) {
  bins = std::min(bins, costs.size());
  if (bins == 0) return {};
  std::vector<std::size_t> order(costs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return costs[a] > costs[b]; });
  std::vector<std::vector<std::size_t>> groups(bins);
  std::vector<double> load(bins, 0.0);
  for (std::size_t i : order) {
    const auto lightest =
        static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    groups[lightest].push_back(i);
    load[lightest] += costs[i];
  }
  for (auto& g : groups) std::sort(g.begin(), g.end());
  return groups;
}

}  // namespace fp8c::runtime
