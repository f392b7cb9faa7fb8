// Text form of the measured-GEMM table, and its nearest-shape lookup.
#include "codegen/lower/gemm_table.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace fp8c {
namespace {

constexpr std::string_view kHeader = "fp8c-gemm-table 1";

constexpr GemmForm kForms[] = {GemmForm::per_tensor, GemmForm::block_1x128_128x128,
                               GemmForm::block_1x128_1x128};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// A dim: a whole number from 1 to 2^31 (nothing larger is a GEMM dim fp8c runs).
bool parse_dim(const std::string& word, std::uint64_t& out) {
  if (word.empty() || word.size() > 10) return false;
  for (char c : word)
    if (c < '0' || c > '9') return false;
  out = std::stoull(word);
  return out >= 1 && out <= (1ull << 31);
}

// A time in milliseconds: finite and positive.
bool parse_ms(const std::string& word, double& out) {
  std::istringstream in(word);
  in >> out;
  return in && in.eof() && std::isfinite(out) && out > 0;
}

}  // namespace

std::string_view to_string(GemmForm form) {
  switch (form) {
    case GemmForm::per_tensor:
      return "per_tensor";
    case GemmForm::block_1x128_128x128:
      return "block_1x128_128x128";
    case GemmForm::block_1x128_1x128:
      return "block_1x128_1x128";
  }
  return "?";
}

const GemmTableEntry* GemmTable::nearest(GemmForm form, std::uint64_t m, std::uint64_t n,
                                         std::uint64_t k) const {
  const GemmTableEntry* best = nullptr;
  double best_distance = std::numeric_limits<double>::infinity();
  for (const GemmTableEntry& e : entries) {
    if (e.form != form) continue;
    double distance = 0;
    bool near = true;
    for (const auto& [want, have] : {std::pair{m, e.m}, std::pair{n, e.n}, std::pair{k, e.k}}) {
      const double d = std::fabs(std::log2(static_cast<double>(want) / static_cast<double>(have)));
      near = near && d <= 1.0;
      distance += d;
    }
    if (near && distance < best_distance) best = &e, best_distance = distance;
  }
  return best;
}

GemmTable parse_gemm_table(std::string_view text, const std::string& source) {
  GemmTable table;
  table.source = source;
  int line_number = 0;
  bool header = false;
  const auto fail = [&](const std::string& what) {
    throw std::invalid_argument(source + ":" + std::to_string(line_number) + ": " + what);
  };
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    ++line_number;
    if (const std::size_t hash = line.find('#'); hash != std::string_view::npos)
      line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    if (!header) {
      if (line != kHeader)
        fail("not a GEMM table: the first line must be \"" + std::string(kHeader) + "\"");
      header = true;
      continue;
    }
    if (line.substr(0, 4) == "gpu " || line == "gpu") {
      if (!table.gpu.empty()) fail("a second gpu line");
      table.gpu = std::string(trim(line.substr(3)));
      if (table.gpu.empty()) fail("the gpu line names no GPU");
      continue;
    }
    std::istringstream in{std::string(line)};
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    if (words.size() != 6)
      fail("expected: form M N K generated_ms cublaslt_ms; got " + std::to_string(words.size()) +
           " fields");
    GemmTableEntry e;
    bool known = false;
    for (GemmForm f : kForms)
      if (words[0] == to_string(f)) e.form = f, known = true;
    if (!known)
      fail("unknown form \"" + words[0] +
           "\" (per_tensor, block_1x128_128x128 or block_1x128_1x128)");
    if (!parse_dim(words[1], e.m) || !parse_dim(words[2], e.n) || !parse_dim(words[3], e.k))
      fail("M, N and K must be whole numbers from 1 to 2^31");
    if (!parse_ms(words[4], e.generated_ms) || !parse_ms(words[5], e.cublaslt_ms))
      fail("the times must be positive, finite milliseconds");
    for (const GemmTableEntry& other : table.entries)
      if (other.form == e.form && other.m == e.m && other.n == e.n && other.k == e.k)
        fail("a second measurement of " + words[0] + " " + words[1] + "x" + words[2] + "x" +
             words[3]);
    table.entries.push_back(e);
  }
  if (!header) {
    line_number = 0;
    fail("empty: not a GEMM table");
  }
  return table;
}

std::string format_gemm_table(const GemmTable& table) {
  std::string out = std::string(kHeader) + "\n";
  if (!table.gpu.empty()) out += "gpu " + table.gpu + "\n";
  out += "# form M N K generated_ms cublaslt_ms\n";
  for (const GemmTableEntry& e : table.entries) {
    char times[64];
    std::snprintf(times, sizeof times, "%.6g %.6g", e.generated_ms, e.cublaslt_ms);
    out += std::string(to_string(e.form)) + " " + std::to_string(e.m) + " " + std::to_string(e.n) +
           " " + std::to_string(e.k) + " " + times + "\n";
  }
  return out;
}

}  // namespace fp8c
