// Parse + check time of a generated spec with many layers (default 1000):
// the start-up cost a user pays before any kernel is generated. A benchmark,
// not a test: it prints the median and, with --json FILE, records it.
//
//   build/bench/parse_check_bench [--layers N] [--runs R] [--json FILE]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "fp8c/dsl.hpp"

namespace {

// Pairs of layers as in a transformer MLP (column then row), chained through
// `input =`, cycling through every recipe kind and both named and inline
// settings, so that every part of the checker is exercised.
std::string generate_spec(int layers) {
  std::string s =
      "target = sm_90a\n"
      "recipe hybrid = delayed { forward = e4m3  backward = e5m2  history = 1024 }\n"
      "recipe cur = current { scale = pow2 }\n"
      "layout tp8 = { tensor_parallel = 8  sequence_parallel = true  overlap = ring }\n"
      "debug probe = { stats = true  fallback = wgrad }\n";
  const char* recipes[] = {"hybrid", "cur", "blockwise { scale = pow2 }", "delayed { margin = 1 }",
                           "current"};
  for (int i = 0; i < layers; ++i) {
    const bool column = i % 2 == 0;
    s += "\nlayer l" + std::to_string(i) + " = linear {\n";
    if (column) {
      s += "  in = 4096\n  out = 16384\n  activation = gelu\n  output = fp8\n";
      if (i > 0) s += "  input = l" + std::to_string(i - 1) + "\n";
    } else {
      s += "  out = 4096\n  bias = true\n  input = l" + std::to_string(i - 1) + "\n";
    }
    s += "  recipe = " + std::string(recipes[(i / 2) % 5]) + "\n";
    s += "  layout = tp8 " + std::string(column ? "column" : "row") + "\n";
    if (i % 10 == 0) s += "  debug = probe\n";
    s += "}\n";
  }
  return s;
}

std::string git_commit() {
  std::string commit = "unknown";
  if (FILE* p = popen("git rev-parse --short HEAD 2>/dev/null", "r")) {
    char buffer[64] = {};
    if (fgets(buffer, sizeof buffer, p)) commit = std::string(buffer, strcspn(buffer, "\n"));
    pclose(p);
  }
  return commit;
}

}  // namespace

int main(int argc, char** argv) {
  int layers = 1000;
  int runs = 21;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--layers" && i + 1 < argc) layers = std::atoi(argv[++i]);
    else if (a == "--runs" && i + 1 < argc) runs = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc) json = argv[++i];
    else {
      std::cerr << "usage: parse_check_bench [--layers N] [--runs R] [--json FILE]\n";
      return 2;
    }
  }
  const fp8c::SourceFile file("generated.fp8", generate_spec(layers));
  std::vector<double> ms;
  for (int r = 0; r < runs + 2; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const fp8c::CheckResult result = fp8c::check_source(file);
    const auto t1 = std::chrono::steady_clock::now();
    if (!result.spec || result.spec->layers.size() != static_cast<std::size_t>(layers)) {
      std::cerr << result.diagnostics.render(file);
      return 1;
    }
    if (r >= 2) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  std::cout << "parse + check, " << layers << " layers, " << file.text().size()
            << " bytes: median " << median << " ms, min " << ms.front() << " ms, max "
            << ms.back() << " ms over " << runs << " runs (goal: under 50 ms)\n";
  if (!json.empty()) {
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
    std::ofstream out(json);
    out << "{\n  \"benchmark\": \"parse_check\",\n  \"commit\": \"" << git_commit()
        << "\",\n  \"machine\": \"CPU (2 cores), no GPU\",\n  \"date\": \"" << date
        << "\",\n  \"cases\": [\n    {\"layers\": " << layers << ", \"bytes\": " << file.text().size()
        << ", \"median_ms\": " << median << ", \"min_ms\": " << ms.front()
        << ", \"max_ms\": " << ms.back() << ", \"runs\": " << runs
        << ", \"goal_ms\": 50, \"meets_goal\": " << (median < 50 ? "true" : "false") << "}\n  ]\n}\n";
  }
  return 0;
}
