// The kernel backend as a user meets it: `backend =` in a spec (and
// `fp8c explain`), `fp8c emit --ir` and `--backend llvm`, `fp8c compile
// --backend llvm`, and a clear error when the LLVM module cannot be found.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "codegen/backends/llvm/llvm_backend.hpp"
#include "fp8c/dsl.hpp"
#include "tests/dsl/support.hpp"
#include "tests/llvm_module.hpp"

namespace fp8c {
namespace {

using test::CommandResult;
using test::run_fp8c;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::optional<Spec> check(const std::string& text, const CheckOptions& options = {}) {
  const SourceFile file("test.fp8", text);
  return check_source(file, options).spec;
}

TEST(BackendSetting, DefaultsToNvrtcAndReadsLlvm) {
  const std::string layer = "layer fc1 = linear { in = 64 out = 64 }\n";
  const auto plain = check(layer);
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->backend, KernelBackend::nvrtc);
  const auto llvm = check("backend = llvm\n" + layer);
  ASSERT_TRUE(llvm);
  EXPECT_EQ(llvm->backend, KernelBackend::llvm);
  // The command line's --backend wins over the file's.
  const auto overridden = check("backend = llvm\n" + layer, {std::nullopt, KernelBackend::nvrtc});
  ASSERT_TRUE(overridden);
  EXPECT_EQ(overridden->backend, KernelBackend::nvrtc);
  // explain writes it out, and its text checks to the same spec.
  const std::string explained = explain_spec(*llvm);
  EXPECT_TRUE(contains(explained, "backend = llvm")) << explained;
  const auto again = check(explained);
  ASSERT_TRUE(again) << explained;
  EXPECT_EQ(again->backend, KernelBackend::llvm);
}

std::string example(const std::string& name) {
  return test::examples_dir() + "/" + name;
}

TEST(BackendCommands, EmitPrintsTheIrOfIrKernelsAndSaysWhichAreNot) {
  const CommandResult r = run_fp8c({"emit", example("gpt_mlp.fp8"), "--ir"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "kernel transpose_u8(in: global const u8* restrict")) << r.out;
  EXPECT_TRUE(contains(r.out, "not built as kernel IR yet")) << r.out;
  const CommandResult one =
      run_fp8c({"emit", example("blockwise_mlp.fp8"), "--ir", "--kernel", "transpose_u32"});
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_TRUE(contains(one.out, "kernel transpose_u32(")) << one.out;
  EXPECT_FALSE(contains(one.out, "not built as kernel IR yet")) << one.out;
}

TEST(BackendCommands, UsageErrorsNameTheOption) {
  const CommandResult r = run_fp8c({"emit", example("gpt_mlp.fp8"), "--backend", "ptx"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "--backend needs nvrtc or llvm")) << r.err;
  const CommandResult c = run_fp8c({"compile", example("gpt_mlp.fp8"), "--backend"});
  EXPECT_EQ(c.status, 2);
  EXPECT_TRUE(contains(c.err, "--backend needs nvrtc or llvm")) << c.err;
}

TEST(BackendCommands, EmitWithLlvmPrintsPtx) {
  if (!llvm_backend::available())
    GTEST_SKIP() << "no LLVM backend in this build: " << llvm_backend::unavailable_reason();
  const CommandResult r =
      run_fp8c({"emit", example("gpt_mlp.fp8"), "--backend", "llvm", "--kernel", "transpose_u8"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, ".target sm_90a")) << r.out;
  EXPECT_TRUE(contains(r.out, ".entry transpose_u8")) << r.out;
}

TEST(BackendCommands, CompileWithLlvmNamesEachKernelsCompiler) {
  if (!llvm_backend::available())
    GTEST_SKIP() << "no LLVM backend in this build: " << llvm_backend::unavailable_reason();
  const std::string cache = test::scratch_dir("llvm-compile-cache");
  // gpt_mlp plans IR kinds (transposes, quantizers, the epilogue) and one
  // still written as CUDA text (the ring reduction of its row-parallel layer).
  const CommandResult r = run_fp8c({"compile", example("gpt_mlp.fp8"), "--backend", "llvm",
                                    "--cache-dir", cache, "--threads", "2"},
                                   240);
  ASSERT_EQ(r.status, 0) << r.err;
  int llvm = 0, nvrtc = 0;
  for (const auto& line : test::split_lines(r.out)) {
    if (line.empty() || line.rfind("kernel ", 0) == 0 || contains(line, " kernels for ")) continue;
    const bool cuda_text = line.rfind("ring_sum", 0) == 0 || line.rfind("rank_", 0) == 0;
    EXPECT_TRUE(contains(line, cuda_text ? "nvrtc " : "llvm 19.")) << line;
    ++(cuda_text ? nvrtc : llvm);
  }
  EXPECT_GT(llvm, 0) << r.out;
  EXPECT_GT(nvrtc, 0) << r.out;
}

// The spec asks for llvm and the module is not where FP8C_LLVM_MODULE says:
// the error names the variable, the path and what to do.
TEST(BackendCommands, AMissingModuleIsAClearError) {
  const char* before = std::getenv("FP8C_LLVM_MODULE");
  const std::string saved = before ? before : "";
  setenv("FP8C_LLVM_MODULE", "/nonexistent/libfp8c_llvm.so", 1);
  const std::string cache = test::scratch_dir("llvm-missing-cache");
  const CommandResult r = run_fp8c(
      {"compile", example("blockwise_mlp.fp8"), "--backend", "llvm", "--cache-dir", cache});
  if (before)
    setenv("FP8C_LLVM_MODULE", saved.c_str(), 1);
  else
    unsetenv("FP8C_LLVM_MODULE");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(contains(r.err, "FP8C_LLVM_MODULE")) << r.err;
  EXPECT_TRUE(contains(r.err, "/nonexistent/libfp8c_llvm.so")) << r.err;
  EXPECT_TRUE(contains(r.err, "backend = nvrtc")) << r.err;
}

}  // namespace
}  // namespace fp8c
