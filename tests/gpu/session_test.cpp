// What the host API does without a GPU, and the state file on its own: these
// always run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "fp8c/session.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/dynamic_library.hpp"
#include "runtime/gpu/rank_executor.hpp"
#include "runtime/gpu/state_file.hpp"

namespace fp8c::runtime {
namespace {

SessionOptions options_for(std::uint64_t tokens) {
  SessionOptions o;
  o.tokens = tokens;
  return o;
}

LayerStates sample() {
  LayerStates s;
  s["fc1"].delayed["x"] = {448.0f / 3.0f, {1.5f, 0.0f, -0.0f, 1e-30f}};
  s["fc1"].delayed["dz"] = {0.125f, {7.0f, 6.0f, 5.0f, 4.0f}};
  s["fc2"];
  return s;
}

TEST(StateFile, RoundTripsExactly) {
  const std::string text = format_state_file(sample());
  const LayerStates back = parse_state_file(text, "mem");
  EXPECT_EQ(back, sample());
  EXPECT_EQ(format_state_file(back), text);
}

TEST(StateFile, EveryCorruptionIsRefusedWithItsReason) {
  const std::string good = format_state_file(sample());
  const auto refused = [&](const std::string& text, const std::string& why) {
    try {
      parse_state_file(text, "state.txt");
      ADD_FAILURE() << "accepted: " << why;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("state.txt"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused("", "not an fp8c state file");
  refused(good.substr(0, good.size() / 2), "checksum");
  std::string flipped = good;
  flipped[good.find("0x1.2") + 3] ^= 1;
  refused(flipped, "checksum does not match");
  std::string version = good;
  version[11] = '2';
  refused(version, "the first line");
  refused("fp8c-state 1\nwhat\nchecksum 00\n", "checksum");
}

TEST(StateFile, ANegativeScaleIsRefusedEvenWithAGoodChecksum) {
  LayerStates s = sample();
  s["fc1"].delayed["x"].scale = -1.0f;
  EXPECT_THROW(parse_state_file(format_state_file(s), "f"), std::runtime_error);
}

TEST(Session, WithoutADriverTheErrorNamesLibcuda) {
  std::string reason;
  if (driver_available(&reason))
    GTEST_SKIP() << "a GPU is here: this checks the machine without one";
  const auto spec = std::filesystem::temp_directory_path() / "fp8c_session_nodriver.fp8";
  std::ofstream(spec) << "layer l = linear { in = 128  out = 128  recipe = current }\n";
  try {
    Session s(spec.string(), options_for(128));
    ADD_FAILURE() << "a session started without a driver";
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("libcuda"), std::string::npos) << e.what();
  }
}

TEST(Session, ASpecErrorCarriesFileLineAndColumn) {
  const auto spec = std::filesystem::temp_directory_path() / "fp8c_session_bad.fp8";
  std::ofstream(spec) << "layer l = linear { in = 128  out = -1 }\n";
  try {
    Session s(spec.string());
    ADD_FAILURE();
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("fp8c_session_bad.fp8:1:"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp8c::runtime
