// Reading the measured-GEMM table for `gemm = auto` (gemm_table_file.hpp).
#include "runtime/gemm/gemm_table_file.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "runtime/cubin_cache.hpp"

namespace fp8c::runtime {

std::shared_ptr<const GemmTable> read_gemm_table(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read the GEMM table " + path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw std::runtime_error("cannot read the GEMM table " + path);
  return std::make_shared<const GemmTable>(parse_gemm_table(text.str(), path));
}

std::string gemm_table_path() {
  if (const char* env = std::getenv("FP8C_GEMM_TABLE")) {
    const std::string path = env;
    return path == "none" ? "" : path;
  }
  const std::filesystem::path file =
      std::filesystem::path(CubinCache::default_directory()) / "gemm_table.txt";
  std::error_code ec;
  return std::filesystem::is_regular_file(file, ec) ? file.string() : "";
}

void attach_gemm_table(LowerOptions& o, const std::string& gpu) {
  const std::string path = gemm_table_path();
  if (path.empty()) return;
  std::shared_ptr<const GemmTable> table = read_gemm_table(path);
  if (!table->gpu.empty() && table->gpu != gpu) {
    o.gemm_table_note = "gemm = auto: the GEMM table " + path + " was measured on " + table->gpu +
                        ", not this " + gpu + "; not used";
    return;
  }
  o.gemm_table = std::move(table);
}

}  // namespace fp8c::runtime
