// fp8c::Session on a GPU: a whole layer forward and backward on device
// memory against the CPU reference; the state's save/restore round trip; a
// failed step (NaN under `nan = error`) leaves the state as it was; bad
// arguments are errors that name the problem. Skipped, visibly, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "../runtime/gpu_fixture.hpp"
#include "codegen/numerics/half.hpp"
#include "codegen/plan/planner.hpp"
#include "fp8c/session.hpp"
#include "runtime/cpu/executor.hpp"
#include "runtime/device.hpp"

namespace fp8c {
namespace {

SessionOptions options_for(std::uint64_t tokens) {
  SessionOptions o;
  o.tokens = tokens;
  return o;
}

namespace fs = std::filesystem;

std::string write_spec(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("fp8c_session_" + name + ".fp8");
  std::ofstream(p) << text;
  return p.string();
}

const char* kDelayedLayer = R"(
recipe r = delayed { history = 4  nan = error }
layer l = linear { in = 256  out = 512  bias = true  activation = gelu  recipe = r }
)";

// Device buffers holding bf16 copies of host floats.
struct Bf16Buffer {
  runtime::DeviceBuffer buffer;
  TensorRef ref;
  Bf16Buffer(const std::vector<float>& v, std::int64_t rows, std::int64_t cols)
      : buffer(v.size() * 2) {
    std::vector<std::uint16_t> bits(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) bits[i] = numerics::float_to_bf16(v[i]);
    buffer.upload(bits.data(), bits.size() * 2);
    ref = {reinterpret_cast<void*>(buffer.get()), DType::bf16, rows, cols};
  }
};

struct Outputs {
  runtime::DeviceBuffer y, dx, dw, db;
  TensorRef ry, rdx, rdw, rdb;
  Outputs(std::int64_t tokens, std::int64_t in, std::int64_t out)
      : y(tokens * out * 2), dx(tokens * in * 2), dw(out * in * 4), db(out * 2) {
    ry = {reinterpret_cast<void*>(y.get()), DType::bf16, tokens, out};
    rdx = {reinterpret_cast<void*>(dx.get()), DType::bf16, tokens, in};
    rdw = {reinterpret_cast<void*>(dw.get()), DType::fp32, out, in};
    rdb = {reinterpret_cast<void*>(db.get()), DType::bf16, out, 1};
  }
};

// One step's inputs on the device; they must outlive the step's work.
struct StepInputs {
  StepInputs(const Layer& l, const cpu::LayerData& d, std::int64_t tokens)
      : x(d.x, tokens, l.in), w(d.w, l.out, l.in), b(d.b, l.out, 1), dy(d.dy, tokens, l.out) {}
  Bf16Buffer x, w, b, dy;
};

// Enqueues layer l's step (nothing waits for the GPU).
void enqueue_step(Session& s, const StepInputs& in, Outputs& o) {
  s.forward("l", {in.x.ref, in.w.ref, in.b.ref}, o.ry);
  s.backward("l", in.dy.ref, {o.rdx, o.rdw, o.rdb});
}

void run_step(Session& s, const cpu::LayerData& d, Outputs& o, std::int64_t tokens) {
  const StepInputs in(s.spec().layers[0], d, tokens);
  enqueue_step(s, in, o);
  s.synchronize();
}

TEST(Session, ForwardBackwardMatchTheCpuReference) {
  REQUIRE_GPU();
  Session s(write_spec("match", kDelayedLayer), options_for(128));
  const Layer& l = s.spec().layers[0];
  Outputs o(128, l.in, l.out);
  std::vector<cpu::LayerData> data;
  for (int i = 0; i < 2; ++i) data.push_back(cpu::random_layer_data(l, 128, 7 + i));
  for (const auto& d : data) run_step(s, d, o, 128);
  PlanOptions po;
  po.tokens = 128;
  const Plan plan = plan_spec(s.spec(), po);
  cpu::ExecutorOptions eo;
  eo.backend = collectives::Backend::kInProcess;
  const auto ref = cpu::run_layer(l, plan.layers[0], data, eo);
  std::vector<float> dw(static_cast<std::size_t>(l.out * l.in));
  o.dw.download(dw.data(), dw.size() * 4);
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < dw.size(); ++i) {
    diff += std::pow(double(dw[i]) - ref[0][1].dw[i], 2);
    norm += std::pow(double(ref[0][1].dw[i]), 2);
  }
  EXPECT_LT(std::sqrt(diff / norm), 2e-2);
}

TEST(Session, StateRoundTripsThroughAFile) {
  REQUIRE_GPU();
  const std::string spec = write_spec("roundtrip", kDelayedLayer);
  Session a(spec, options_for(128));
  const Layer& l = a.spec().layers[0];
  Outputs o(128, l.in, l.out);
  run_step(a, cpu::random_layer_data(l, 128, 3), o, 128);
  const std::string file = (fs::temp_directory_path() / "fp8c_session_state.txt").string();
  a.save_state(file);
  Session b(spec, options_for(128));
  b.load_state(file);
  const std::string again = file + ".2";
  b.save_state(again);
  std::ifstream f1(file), f2(again);
  const std::string t1((std::istreambuf_iterator<char>(f1)), {});
  const std::string t2((std::istreambuf_iterator<char>(f2)), {});
  EXPECT_EQ(t1, t2);
  EXPECT_NE(t1.find("tensor x scale"), std::string::npos);
  // A corrupt file is refused and changes nothing.
  std::string bad = t1;
  bad[bad.find("scale") + 8] ^= 1;
  std::ofstream(file) << bad;
  EXPECT_THROW(b.load_state(file), SessionError);
  b.save_state(again);
  std::ifstream f3(again);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(f3)), {}), t2);
}

// save_state right after backward (no synchronize) saves the updated state:
// the session waits for its own work first.
TEST(Session, SaveRightAfterBackwardSeesTheUpdate) {
  REQUIRE_GPU();
  Session s(write_spec("nosync", kDelayedLayer), options_for(128));
  const Layer& l = s.spec().layers[0];
  Outputs o(128, l.in, l.out);
  const cpu::LayerData d = cpu::random_layer_data(l, 128, 9);
  Bf16Buffer x(d.x, 128, l.in), w(d.w, l.out, l.in), b(d.b, l.out, 1), dy(d.dy, 128, l.out);
  s.forward("l", {x.ref, w.ref, b.ref}, o.ry);
  s.backward("l", dy.ref, {o.rdx, o.rdw, o.rdb});
  const std::string first = (fs::temp_directory_path() / "fp8c_session_nosync_1.txt").string();
  const std::string second = (fs::temp_directory_path() / "fp8c_session_nosync_2.txt").string();
  s.save_state(first);
  s.synchronize();
  s.save_state(second);
  std::ifstream a(first), c(second);
  const std::string ta((std::istreambuf_iterator<char>(a)), {});
  EXPECT_EQ(ta, std::string((std::istreambuf_iterator<char>(c)), {}));
  EXPECT_EQ(ta.find("history 4 0p+0 0p+0 0p+0 0p+0"), std::string::npos) << "no update saved";
}

TEST(Session, ANanStepUnderNanErrorLeavesTheStateAsItWas) {
  REQUIRE_GPU();
  Session s(write_spec("nan", kDelayedLayer), options_for(128));
  const Layer& l = s.spec().layers[0];
  Outputs o(128, l.in, l.out);
  run_step(s, cpu::random_layer_data(l, 128, 5), o, 128);
  const std::string before = (fs::temp_directory_path() / "fp8c_session_before.txt").string();
  const std::string after = (fs::temp_directory_path() / "fp8c_session_after.txt").string();
  s.save_state(before);
  cpu::LayerData poisoned = cpu::random_layer_data(l, 128, 6);
  poisoned.x[17] = NAN;
  // The verdict is the GPU's: the step enqueues without waiting, and
  // synchronize() reports it, once.
  const StepInputs bad(l, poisoned, 128);
  enqueue_step(s, bad, o);
  try {
    s.synchronize();
    ADD_FAILURE() << "a NaN input passed under nan = error";
  } catch (const SessionError& e) {
    EXPECT_NE(std::string(e.what()).find("NaN in l.x"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(s.synchronize()) << "reported once";
  s.save_state(after);
  std::ifstream a(before), b(after);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(a)), {}),
            std::string((std::istreambuf_iterator<char>(b)), {}));
  // And the next good step runs.
  EXPECT_NO_THROW(run_step(s, cpu::random_layer_data(l, 128, 8), o, 128));
  EXPECT_NO_THROW(s.synchronize());
}

TEST(Session, ANanVerdictSurfacesAtTheLayersNextForward) {
  REQUIRE_GPU();
  Session s(write_spec("nan_next", kDelayedLayer), options_for(128));
  const Layer& l = s.spec().layers[0];
  Outputs o(128, l.in, l.out);
  cpu::LayerData poisoned = cpu::random_layer_data(l, 128, 6);
  poisoned.dy[3] = NAN;
  const StepInputs bad(l, poisoned, 128);
  enqueue_step(s, bad, o);
  // No synchronize: the next forward waits for the verdict and reports it.
  const StepInputs good(l, cpu::random_layer_data(l, 128, 7), 128);
  try {
    enqueue_step(s, good, o);
    ADD_FAILURE() << "the NaN step's verdict was not reported by the next call on the layer";
  } catch (const SessionError& e) {
    EXPECT_NE(std::string(e.what()).find("NaN in l.dy"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(run_step(s, cpu::random_layer_data(l, 128, 8), o, 128));
  EXPECT_NO_THROW(s.synchronize());
}

TEST(Session, BadArgumentsNameTheProblem) {
  REQUIRE_GPU();
  Session s(write_spec("bad", kDelayedLayer), options_for(128));
  Outputs o(128, 256, 512);
  TensorRef wrong = o.ry;
  wrong.rows = 64;
  try {
    s.forward("l", {wrong, wrong, wrong}, o.ry);
    ADD_FAILURE();
  } catch (const SessionError& e) {
    EXPECT_NE(
        std::string(e.what()).find("input x is bf16 [64, 512], the plan needs bf16 [128, 256]"),
        std::string::npos)
        << e.what();
  }
  EXPECT_THROW(s.forward("nope", {o.ry, o.ry, o.ry}, o.ry), SessionError);
  EXPECT_THROW(s.backward("l", o.ry, {o.rdx, o.rdw, o.rdb}), SessionError);  // no forward
}

}  // namespace
}  // namespace fp8c
