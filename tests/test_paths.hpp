// Where a test finds the repository's data (examples/, tests/specs, ...) and
// the other programs of its build, decided when it runs, so that a build
// carried to another folder or machine (the GPU machine gets stripped copies
// from scripts/gpu_bundle.sh) still finds them:
//   1. FP8C_SOURCE_DIR / FP8C_BUILD_DIR from the environment, when set;
//   2. the folders the build was configured in, when they are here;
//   3. the nearest folder above the current directory, then above the test
//      binary, that holds what is looked for (for a built program: above the
//      test binary first, and only a file).
// A path none of these finds is returned as the configured one, so the
// error names where it was expected.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace fp8c::testing {

namespace paths_detail {

inline std::filesystem::path own_directory() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : self.parent_path();
}

// `relative` under `env`'s folder, the configured folder, or the nearest
// ancestor of the `starts`, in order. A built program must be a file: the
// source tree has folders of the same names (tools/fp8c).
inline std::filesystem::path find(const char* env, const std::filesystem::path& configured,
                                  const std::filesystem::path& relative,
                                  const std::vector<std::filesystem::path>& starts, bool file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto fits = [&](const fs::path& p) {
    return file ? fs::is_regular_file(p, ec) : fs::exists(p, ec);
  };
  if (const char* dir = std::getenv(env); dir && *dir) return fs::path(dir) / relative;
  if (fits(configured / relative)) return configured / relative;
  for (const fs::path& start : starts)
    for (fs::path d = start; !d.empty(); d = d.parent_path()) {
      if (fits(d / relative)) return d / relative;
      if (d == d.root_path()) break;
    }
  return configured / relative;
}

}  // namespace paths_detail

// A file or folder of the source tree, e.g. source_path("examples").
inline std::string source_path(const std::string& relative) {
  std::error_code ec;
  return paths_detail::find("FP8C_SOURCE_DIR", FP8C_CONFIGURED_SOURCE_DIR, relative,
                            {std::filesystem::current_path(ec), paths_detail::own_directory()},
                            false)
      .string();
}

inline std::string examples_dir() {
  return source_path("examples");
}

// A program or library of the build, given where the build put it (a
// $<TARGET_FILE:...> path), e.g. built_path(FP8C_TOOL_PATH).
inline std::string built_path(const std::string& configured) {
  const std::filesystem::path build = FP8C_CONFIGURED_BUILD_DIR;
  const std::filesystem::path relative =
      std::filesystem::path(configured).lexically_relative(build);
  if (relative.empty() || *relative.begin() == "..") return configured;
  // This binary's build tree first: a carried build sits inside a checkout.
  std::error_code ec;
  return paths_detail::find("FP8C_BUILD_DIR", build, relative,
                            {paths_detail::own_directory(), std::filesystem::current_path(ec)},
                            true)
      .string();
}

}  // namespace fp8c::testing
