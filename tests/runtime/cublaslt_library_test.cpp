// Loading cuBLASLt: a missing library is reported by name, a present one
// resolves every entry point (no GPU needed for that), and the runner says
// clearly when there is no GPU to run on.
#include "runtime/gemm/cublaslt_library.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

#include "runtime/cuda_driver.hpp"
#include "runtime/dynamic_library.hpp"
#include "runtime/gemm/gemm.hpp"

namespace fp8c::runtime {
namespace {

const std::vector<std::string> kMissing = {"libcublasLt.so.0-fp8c-test",
                                           "/nonexistent/libcublasLt.so"};

TEST(CublasLtLibrary, MissingLibraryIsUnavailableAndNamed) {
  try {
    load_cublaslt(kMissing);
    FAIL() << "loaded a library that does not exist";
  } catch (const Unavailable& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("libcublasLt"), std::string::npos) << what;
    EXPECT_NE(what.find("libcublasLt.so.0-fp8c-test"), std::string::npos) << what;
    EXPECT_NE(what.find("/nonexistent/libcublasLt.so"), std::string::npos) << what;
  }
}

TEST(CublasLtLibrary, RunnerWithoutTheLibraryIsUnavailable) {
  try {
    make_cublaslt_runner(kMissing);
    FAIL() << "made a runner without a library";
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("libcublasLt"), std::string::npos) << e.what();
  }
}

TEST(CublasLtLibrary, EnvironmentChoosesTheLibrary) {
  const char* saved = std::getenv("FP8C_CUBLASLT_LIBRARY");
  const std::string restore = saved ? saved : "";
  setenv("FP8C_CUBLASLT_LIBRARY", "/opt/wheel/libcublasLt.so.12", 1);
  EXPECT_EQ(default_cublaslt_sonames(), std::vector<std::string>{"/opt/wheel/libcublasLt.so.12"});
  unsetenv("FP8C_CUBLASLT_LIBRARY");
  EXPECT_EQ(default_cublaslt_sonames(),
            (std::vector<std::string>{"libcublasLt.so.13", "libcublasLt.so.12"}));
  if (saved) setenv("FP8C_CUBLASLT_LIBRARY", restore.c_str(), 1);
}

TEST(CublasLtLibrary, LoadsAndReportsItsVersionWithoutAGpu) {
  const CublasLtApi* api = nullptr;
  try {
    api = &cublaslt();
  } catch (const Unavailable& e) {
    GTEST_SKIP() << "no cuBLASLt here: " << e.what();
  }
  EXPECT_GE(api->version, 120000u) << api->soname;
  EXPECT_STREQ(api->cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED),
               "CUBLAS_STATUS_NOT_SUPPORTED");
  try {
    check_cublaslt(*api, CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtSomething");
    FAIL();
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cublasLtSomething failed: CUBLAS_STATUS_NOT_SUPPORTED"), std::string::npos)
        << what;
  }
}

TEST(CublasLtLibrary, RunnerWithoutAGpuIsUnavailable) {
  std::string reason;
  if (driver_available(&reason))
    GTEST_SKIP() << "a GPU is present (the GPU tests cover the runner)";
  try {
    cublaslt();
  } catch (const Unavailable& e) {
    GTEST_SKIP() << "no cuBLASLt here: " << e.what();
  }
  try {
    make_cublaslt_runner();
    FAIL() << "made a runner without a GPU";
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("needs a GPU"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp8c::runtime
