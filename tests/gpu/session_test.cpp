// What the host API does without a GPU, and the state file on its own: these
// always run.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "fp8c/session.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/dynamic_library.hpp"
#include "runtime/gpu/rank_executor.hpp"
#include "runtime/gpu/state_file.hpp"
#include "runtime/sha256.hpp"

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

// from_dlpack reads a DLTensor's description only (no device access).
DLTensor dl_tensor(std::int64_t* shape, int ndim, DLDataType type,
                   std::int64_t* strides = nullptr) {
  DLTensor t{};
  t.data = reinterpret_cast<void*>(0x100000);
  t.device = {kDLCUDA, 0};
  t.ndim = ndim;
  t.dtype = type;
  t.shape = shape;
  t.strides = strides;
  t.byte_offset = 0;
  return t;
}

TEST(FromDlpack, TakesContiguousCudaTensorsOfTheLayerTypesAndFp8Bytes) {
  std::int64_t shape[2] = {128, 256};
  const std::pair<DLDataType, DType> types[] = {{{kDLBfloat, 16, 1}, DType::bf16},
                                                {{kDLFloat, 16, 1}, DType::fp16},
                                                {{kDLFloat, 32, 1}, DType::fp32},
                                                {{kDLUInt, 8, 1}, DType::u8}};
  for (const auto& [dl, want] : types) {
    DLTensor t = dl_tensor(shape, 2, dl);
    t.byte_offset = 512;
    const TensorRef r = from_dlpack(t);
    EXPECT_EQ(r.dtype, want);
    EXPECT_EQ(r.rows, 128);
    EXPECT_EQ(r.cols, 256);
    EXPECT_EQ(r.data, reinterpret_cast<void*>(0x100000 + 512));
  }
  std::int64_t strides[2] = {256, 1};  // explicit, and contiguous
  EXPECT_EQ(from_dlpack(dl_tensor(shape, 2, {kDLFloat, 32, 1}, strides)).cols, 256);
  std::int64_t length[1] = {512};  // a bias
  const TensorRef bias = from_dlpack(dl_tensor(length, 1, {kDLBfloat, 16, 1}));
  EXPECT_EQ(bias.rows, 512);
  EXPECT_EQ(bias.cols, 1);
}

TEST(FromDlpack, RefusesWhatDoesNotFitNamingIt) {
  const auto message = [](const DLTensor& t) {
    try {
      from_dlpack(t);
    } catch (const SessionError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  std::int64_t shape[3] = {4, 128, 256};
  DLTensor host = dl_tensor(shape, 2, {kDLFloat, 32, 1});
  host.device = {kDLCPU, 0};
  EXPECT_NE(message(host).find("not in CUDA device memory"), std::string::npos);
  EXPECT_NE(message(dl_tensor(shape, 3, {kDLFloat, 32, 1})).find("3 dims"), std::string::npos);
  std::int64_t transposed[2] = {1, 128};
  EXPECT_NE(message(dl_tensor(shape, 2, {kDLFloat, 32, 1}, transposed)).find("not contiguous"),
            std::string::npos);
  EXPECT_NE(message(dl_tensor(shape, 2, {kDLInt, 32, 1})).find("uint8 for FP8 bytes"),
            std::string::npos);
  EXPECT_NE(message(dl_tensor(shape, 2, {kDLFloat, 16, 2})).find("vector element types"),
            std::string::npos);
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
  flipped[good.find("scale ") + 8] ^= 1;
  refused(flipped, "checksum does not match");
  const std::string ten = "fp8c-state 10" + good.substr(std::string("fp8c-state 1").size());
  refused(ten, "the first line");
  std::string version = good;
  version[11] = '2';
  refused(version, "the first line");
  refused("fp8c-state 1\nwhat\nchecksum 00\n", "checksum");
}

// A body with a valid checksum, so only the value checks can refuse it.
std::string signed_file(const std::string& body) {
  return body + "checksum " + to_hex(sha256(body)) + "\n";
}

TEST(StateFile, ValuesThatCannotBeAStateAreRefusedEvenWithAGoodChecksum) {
  const auto refused = [](const std::string& body, const std::string& why) {
    try {
      parse_state_file(signed_file(body), "f");
      ADD_FAILURE() << "accepted:\n" << body;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused("fp8c-state 1\nlayer l\ntensor x scale -1p+0 history 0\n", "not a positive finite");
  refused("fp8c-state 1\nlayer l\ntensor x scale inf history 0\n", "not a positive finite");
  refused("fp8c-state 1\nlayer l\ntensor x scale 0x1p+0 history 0\n", "not a hexadecimal float");
  refused("fp8c-state 1\nlayer l\ntensor x scale 1p+0 history 1 -1p+0\n",
          "not finite and non-negative");
  refused("fp8c-state 1\nlayer l extra\n", "after the layer name");
  refused("fp8c-state 1\nlayer l\ntensor x scale 1p+0 history 2 1p+0\n", "short");
}

TEST(StateFile, TheWriterRefusesWhatTheReaderWouldToo) {
  LayerStates s = sample();
  s["fc1"].delayed["x"].scale = -1.0f;
  EXPECT_THROW(format_state_file(s), std::runtime_error);
  s = sample();
  s["fc1"].delayed["dz"].history[1] = NAN;
  EXPECT_THROW(format_state_file(s), std::runtime_error);
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
