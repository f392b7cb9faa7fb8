// On a machine without a GPU (CI) the driver is missing and must say so
// clearly; on the GPU machine it must load and find the device.
#include "runtime/cuda_driver.hpp"

#include <gtest/gtest.h>

#include "runtime/dynamic_library.hpp"

namespace fp8c::runtime {
namespace {

TEST(Driver, AvailabilityIsExplained) {
  std::string reason;
  if (driver_available(&reason)) {
    EXPECT_TRUE(reason.empty());
    EXPECT_GE(driver().driver_version, 12000);
  } else {
    EXPECT_FALSE(reason.empty());
    EXPECT_THROW(driver(), Unavailable);
    try {
      driver();
    } catch (const Unavailable& e) {
      EXPECT_EQ(std::string(e.what()), reason) << "the same reason every time";
    }
  }
}

TEST(Driver, MissingLibraryNamesEveryCandidate) {
  try {
    DynamicLibrary::open("a test library", {"libfp8c-does-not-exist.so.1", "libnor-this.so"});
    FAIL();
  } catch (const Unavailable& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("a test library is not available"), std::string::npos) << what;
    EXPECT_NE(what.find("libfp8c-does-not-exist.so.1"), std::string::npos) << what;
    EXPECT_NE(what.find("libnor-this.so"), std::string::npos) << what;
  }
}

TEST(Driver, GpuFound) {
  std::string reason;
  if (!driver_available(&reason)) GTEST_SKIP() << "no GPU here: " << reason;
  const DriverApi& api = driver();
  CUdevice device = 0;
  FP8C_CU(api.cuDeviceGet(&device, 0));
  char name[128] = {};
  FP8C_CU(api.cuDeviceGetName(name, sizeof name, device));
  int major = 0;
  FP8C_CU(api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device));
  EXPECT_GE(major, 7) << name;
}

}  // namespace
}  // namespace fp8c::runtime
