// The measured-GEMM table `gemm = auto` consults: its text form, its
// nearest-shape lookup, and where the runtime finds it (CPU only).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>

#include "codegen/lower/gemm_table.hpp"
#include "runtime/gemm/gemm_table_file.hpp"

namespace fp8c {
namespace {

// The error text parse_gemm_table gives for `text` ("" where it parses).
std::string parse_error(const std::string& text) {
  try {
    parse_gemm_table(text, "t.txt");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(GemmTable, ReadsWhatItWrites) {
  GemmTable t;
  t.gpu = "NVIDIA H200";
  t.entries = {{GemmForm::per_tensor, 8192, 8192, 8192, 0.912, 0.752},
               {GemmForm::block_1x128_128x128, 4096, 7168, 16384, 0.75, 0.84},
               {GemmForm::block_1x128_1x128, 1, 2, 16, 1e-3, 2.5e-3}};
  const GemmTable back = parse_gemm_table(format_gemm_table(t), "x");
  EXPECT_EQ(back.source, "x");
  EXPECT_EQ(back.gpu, "NVIDIA H200");
  ASSERT_EQ(back.entries.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back.entries[i].form, t.entries[i].form);
    EXPECT_EQ(back.entries[i].m, t.entries[i].m);
    EXPECT_EQ(back.entries[i].n, t.entries[i].n);
    EXPECT_EQ(back.entries[i].k, t.entries[i].k);
    EXPECT_DOUBLE_EQ(back.entries[i].generated_ms, t.entries[i].generated_ms);
    EXPECT_DOUBLE_EQ(back.entries[i].cublaslt_ms, t.entries[i].cublaslt_ms);
  }
}

TEST(GemmTable, CommentsBlankLinesAndNoGpuLineAreFine) {
  const GemmTable t = parse_gemm_table(
      "# written by hand\n\nfp8c-gemm-table 1   # v1\r\n  per_tensor 64 128 256 1.5 1.25 # x\n",
      "t.txt");
  EXPECT_EQ(t.gpu, "");
  ASSERT_EQ(t.entries.size(), 1u);
  EXPECT_EQ(t.entries[0].k, 256u);
  EXPECT_DOUBLE_EQ(t.entries[0].cublaslt_ms, 1.25);
}

TEST(GemmTable, MalformedTablesNameTheLineAndTheProblem) {
  const std::string head = "fp8c-gemm-table 1\n";
  EXPECT_EQ(parse_error(""), "t.txt:0: empty: not a GEMM table");
  EXPECT_EQ(parse_error("per_tensor 1 1 16 1 1\n"),
            "t.txt:1: not a GEMM table: the first line must be \"fp8c-gemm-table 1\"");
  EXPECT_EQ(parse_error("fp8c-gemm-table 2\n"),
            "t.txt:1: not a GEMM table: the first line must be \"fp8c-gemm-table 1\"");
  EXPECT_EQ(parse_error(head + "per_tensor 1 1 16 1\n"),
            "t.txt:2: expected: form M N K generated_ms cublaslt_ms; got 5 fields");
  EXPECT_EQ(parse_error(head + "\nmx 1 1 16 1 1\n"),
            "t.txt:3: unknown form \"mx\" (per_tensor, block_1x128_128x128 or block_1x128_1x128)");
  for (const char* dims : {"0 1 16", "1 -1 16", "1 1 1.5", "1 1 4294967296", "1 x 16"})
    EXPECT_EQ(parse_error(head + "per_tensor " + dims + " 1 1\n"),
              "t.txt:2: M, N and K must be whole numbers from 1 to 2^31")
        << dims;
  for (const char* times : {"0 1", "1 -2", "nan 1", "1 inf", "1 1ms", "1e999 1"})
    EXPECT_EQ(parse_error(head + "per_tensor 1 1 16 " + times + "\n"),
              "t.txt:2: the times must be positive, finite milliseconds")
        << times;
  EXPECT_EQ(parse_error(head + "per_tensor 1 1 16 1 2\nper_tensor 1 1 16 2 1\n"),
            "t.txt:3: a second measurement of per_tensor 1x1x16");
  EXPECT_EQ(parse_error(head + "gpu A\ngpu B\n"), "t.txt:3: a second gpu line");
  EXPECT_EQ(parse_error(head + "gpu\n"), "t.txt:2: the gpu line names no GPU");
}

TEST(GemmTable, NearestIsOfTheSameFormAndWithinTwiceEveryDim) {
  GemmTable t;
  t.entries = {{GemmForm::per_tensor, 1024, 1024, 1024, 1, 2},
               {GemmForm::per_tensor, 8192, 8192, 8192, 2, 1},
               {GemmForm::block_1x128_128x128, 4096, 4096, 4096, 1, 2}};
  EXPECT_EQ(t.nearest(GemmForm::per_tensor, 1024, 1024, 1024), &t.entries[0]);
  EXPECT_EQ(t.nearest(GemmForm::per_tensor, 2048, 2048, 2048), &t.entries[0]);  // 3 against 6
  EXPECT_EQ(t.nearest(GemmForm::per_tensor, 4096, 8192, 8192), &t.entries[1]);
  EXPECT_EQ(t.nearest(GemmForm::per_tensor, 4096, 4096, 4096), &t.entries[1]);  // both 6: first
  EXPECT_EQ(t.nearest(GemmForm::per_tensor, 8192, 8192, 16384), &t.entries[1]);
  EXPECT_EQ(t.nearest(GemmForm::per_tensor, 8192, 8192, 16385), nullptr);  // K past 2x
  EXPECT_EQ(t.nearest(GemmForm::per_tensor, 511, 1024, 1024), nullptr);    // M below half
  EXPECT_EQ(t.nearest(GemmForm::block_1x128_128x128, 8192, 8192, 8192), &t.entries[2]);
  EXPECT_EQ(t.nearest(GemmForm::block_1x128_1x128, 4096, 4096, 4096), nullptr);
}

// The runtime's side: FP8C_GEMM_TABLE, else gemm_table.txt in the cubin cache
// directory; a table of another GPU is left out with a note; one that cannot
// be parsed is an error naming the file and line, and nothing is set.
class GemmTableFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("fp8c-gemm-table-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    keep("FP8C_GEMM_TABLE", table_);
    keep("FP8C_CACHE_DIR", cache_);
    ::unsetenv("FP8C_GEMM_TABLE");
    ::setenv("FP8C_CACHE_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    restore("FP8C_GEMM_TABLE", table_);
    restore("FP8C_CACHE_DIR", cache_);
    std::filesystem::remove_all(dir_);
  }
  std::string write(const std::string& name, const std::string& text) {
    const auto path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::filesystem::path dir_;

 private:
  static void keep(const char* name, std::optional<std::string>& into) {
    if (const char* v = std::getenv(name)) into = v;
  }
  static void restore(const char* name, const std::optional<std::string>& from) {
    if (from)
      ::setenv(name, from->c_str(), 1);
    else
      ::unsetenv(name);
  }
  std::optional<std::string> table_, cache_;
};

TEST_F(GemmTableFile, FoundInTheCacheDirectoryOrWhereTheVariableSays) {
  EXPECT_EQ(runtime::gemm_table_path(), "");
  LowerOptions none;
  runtime::attach_gemm_table(none, "GPU");
  EXPECT_EQ(none.gemm_table, nullptr);

  const std::string cached =
      write("gemm_table.txt", "fp8c-gemm-table 1\ngpu GPU\nper_tensor 1 1 16 1 2\n");
  EXPECT_EQ(runtime::gemm_table_path(), cached);
  LowerOptions o;
  runtime::attach_gemm_table(o, "GPU");
  ASSERT_NE(o.gemm_table, nullptr);
  EXPECT_EQ(o.gemm_table->source, cached);
  EXPECT_EQ(o.gemm_table->entries.size(), 1u);

  const std::string chosen = write("mine.txt", "fp8c-gemm-table 1\n");
  ::setenv("FP8C_GEMM_TABLE", chosen.c_str(), 1);
  EXPECT_EQ(runtime::gemm_table_path(), chosen);
  ::setenv("FP8C_GEMM_TABLE", "none", 1);
  EXPECT_EQ(runtime::gemm_table_path(), "");
}

TEST_F(GemmTableFile, AnotherGpusTableIsNotUsedAndSaysSo) {
  const std::string path =
      write("gemm_table.txt", "fp8c-gemm-table 1\ngpu NVIDIA H100 80GB HBM3\n");
  LowerOptions o;
  runtime::attach_gemm_table(o, "NVIDIA H200");
  EXPECT_EQ(o.gemm_table, nullptr);
  EXPECT_EQ(o.gemm_table_note, "gemm = auto: the GEMM table " + path +
                                   " was measured on NVIDIA H100 80GB HBM3, not this NVIDIA "
                                   "H200; not used");
}

TEST_F(GemmTableFile, ACorruptOrMissingTableIsAnErrorNamingIt) {
  const std::string path = write("gemm_table.txt", "fp8c-gemm-table 1\nper_tensor 1 1 16 1\n");
  LowerOptions o;
  try {
    runtime::attach_gemm_table(o, "GPU");
    FAIL() << "a corrupt table was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              path + ":2: expected: form M N K generated_ms cublaslt_ms; got 5 fields");
  }
  EXPECT_EQ(o.gemm_table, nullptr);
  EXPECT_EQ(o.gemm_table_note, "");

  const std::string missing = (dir_ / "absent.txt").string();
  ::setenv("FP8C_GEMM_TABLE", missing.c_str(), 1);
  try {
    runtime::attach_gemm_table(o, "GPU");
    FAIL() << "a missing table was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read the GEMM table " + missing);
  }
}

}  // namespace
}  // namespace fp8c
