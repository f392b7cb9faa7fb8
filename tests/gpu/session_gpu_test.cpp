// fp8c::Session on a GPU: a whole layer forward and backward on device
// memory against the CPU reference; the state's save/restore round trip; a
// failed step (NaN under `nan = error`) leaves the state as it was; bad
// arguments are errors that name the problem. Skipped, visibly, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "../runtime/gpu_fixture.hpp"
#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/half.hpp"
#include "codegen/plan/planner.hpp"
#include "fp8c/session.hpp"
#include "runtime/cpu/executor.hpp"
#include "runtime/device.hpp"
#include "runtime/gpu/state_file.hpp"

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

// Two layers chained in FP8: fc1 (output = fp8) writes e4m3 with fc2's
// delayed input scale, fc2 reads those bytes as its input.
const char* kFp8Chain = R"(
recipe r = delayed { history = 4 }
layer fc1 = linear { in = 256  out = 512  bias = true  activation = gelu  output = fp8  recipe = r }
layer fc2 = linear { input = fc1  out = 256  bias = true  recipe = r }
)";

double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < want.size() && i < got.size(); ++i) {
    diff += std::pow(double(got[i]) - want[i], 2);
    norm += std::pow(double(want[i]), 2);
  }
  return got.size() == want.size() && norm > 0 ? std::sqrt(diff / norm) : 1e9;
}

std::vector<float> download_floats(const runtime::DeviceBuffer& b, std::size_t n, DType t) {
  std::vector<float> v(n);
  if (t == DType::fp32) {
    b.download(v.data(), n * 4);
    return v;
  }
  std::vector<std::uint16_t> bits(n);
  b.download(bits.data(), n * 2);
  for (std::size_t i = 0; i < n; ++i) v[i] = numerics::bf16_to_float(bits[i]);
  return v;
}

// FP8 codes on the device, decoded with the scale they were written with.
std::vector<float> download_fp8(const runtime::DeviceBuffer& b, std::size_t n, DType t,
                                float scale) {
  std::vector<std::uint8_t> codes(n);
  b.download(codes.data(), n);
  std::vector<float> v(n);
  for (std::size_t k = 0; k < n; ++k) v[k] = numerics::fp8_to_float(codes[k], t) / scale;
  return v;
}

// A delayed amax history as the GPU kept it against the CPU chain's: within
// 1e-2 of each entry, the newest one set.
void expect_history_near(const cpu::DelayedScale& got, const cpu::DelayedScale& want) {
  ASSERT_EQ(got.history.size(), want.history.size());
  for (std::size_t k = 0; k < want.history.size(); ++k)
    EXPECT_NEAR(got.history[k], want.history[k], 1e-2 * std::fabs(want.history[k])) << k;
  EXPECT_GT(want.history[0], 0.0f);
}

// Three steps of the chain through the host API against cpu::run_chain: the
// FP8 bytes handed over (decoded with the reference's scale of that step),
// both layers' outputs and gradients, and fc2's input history, which holds
// fc1's output amaxes. The middle step runs each layer on a caller stream of
// its own and is not waited for: the session orders the hand-over (fc2's
// forward after fc1's) and the next step's fc1 forward after fc2's update.
// fc1's GEMM also writes fc2's columnwise input (x.fp8.col, which fc2's
// wgrad reads): as D^T beside D on the generated GEMM, by a transpose after
// cuBLASLt's; fc2's dw checks those bytes. Backward the other way: fc2's
// dgrad hands fc1 FP8 dz (fc1's dgelu, dbias, amax and columnwise copy in
// its epilogue on the generated GEMM, by the quantize kernel after
// cuBLASLt's), which fc1's backward takes as its dy: the dz bytes (decoded
// with fc1's gradient scale of the step), fc1's dx, dw and db (from those
// bytes and that dbias), and fc1's dz history check it. The session orders
// fc1's backward after fc2's on the callers' streams.
void expect_fp8_chain_matches_cpu_chain(const std::string& name, const std::string& text) {
  const std::int64_t T = 128;
  Session s(write_spec(name, text), options_for(T));
  const Layer& l1 = s.spec().layers[0];
  const Layer& l2 = s.spec().layers[1];
  ASSERT_EQ(s.dtype("fc1", "y"), DType::e4m3);
  ASSERT_EQ(s.dtype("fc2", "x"), DType::e4m3);
  ASSERT_EQ(s.shape("fc2", "x"), (std::vector<std::int64_t>{T, 512}));
  runtime::DeviceBuffer h(static_cast<std::size_t>(T * 512));
  const TensorRef rh{reinterpret_cast<void*>(h.get()), DType::e4m3, T, 512};
  ASSERT_EQ(s.dtype("fc2", "dx"), DType::e5m2);  // fc1's dz, in fc1's backward format
  ASSERT_EQ(s.dtype("fc1", "dy"), DType::e5m2);
  runtime::DeviceBuffer g(static_cast<std::size_t>(T * 512));
  const TensorRef rg{reinterpret_cast<void*>(g.get()), DType::e5m2, T, 512};
  Outputs o1(T, l1.in, l1.out), o2(T, 512, l2.out);
  runtime::Stream stream_a, stream_b;
  std::vector<cpu::ChainData> data;
  for (int i = 0; i < 3; ++i)
    data.push_back({cpu::random_layer_data(l1, T, 30 + i), cpu::random_layer_data(l2, T, 40 + i)});
  PlanOptions po;
  po.tokens = T;
  const Plan plan = plan_spec(s.spec(), po);
  cpu::ExecutorOptions eo;
  eo.backend = collectives::Backend::kInProcess;
  const auto ref = cpu::run_chain(l1, plan.layers[0], l2, plan.layers[1], data, eo);
  float scale = 1.0f;     // fc2's input scale in the step (the reference's)
  float dz_scale = 1.0f;  // fc1's gradient scale in the step
  std::vector<std::unique_ptr<StepInputs>> inputs;
  for (std::size_t i = 0; i < data.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    // Kept until the end: the step not waited for still reads them.
    inputs.push_back(std::make_unique<StepInputs>(l1, data[i].first, T));
    inputs.push_back(std::make_unique<StepInputs>(l2, data[i].second, T));
    const StepInputs &a = *inputs[inputs.size() - 2], &b = *inputs.back();
    const bool streams = i == 1;
    void* s1 = streams ? stream_a.get() : nullptr;
    void* s2 = streams ? stream_b.get() : nullptr;
    s.forward("fc1", {a.x.ref, a.w.ref, a.b.ref}, rh, s1);
    s.forward("fc2", {rh, b.w.ref, b.b.ref}, o2.ry, s2);
    s.backward("fc2", b.dy.ref, {rg, o2.rdw, o2.rdb}, s2);
    s.backward("fc1", rg, {o1.rdx, o1.rdw, o1.rdb}, s1);
    const cpu::ChainStepResult& r = ref[0][i];
    if (streams) {
      scale = r.second.state.delayed.at("x").scale;
      dz_scale = r.first.state.delayed.at("dz").scale;
      continue;
    }
    s.synchronize();
    EXPECT_LT(relative_l2(download_fp8(h, T * 512, DType::e4m3, scale), r.first.y), 3e-2);
    EXPECT_LT(relative_l2(download_floats(o2.y, T * l2.out, DType::bf16), r.second.y), 3e-2);
    EXPECT_LT(relative_l2(download_fp8(g, T * 512, DType::e5m2, dz_scale), r.second.dx), 3e-2);
    EXPECT_LT(relative_l2(download_floats(o2.dw, l2.out * 512, DType::fp32), r.second.dw), 3e-2);
    EXPECT_LT(relative_l2(download_floats(o1.dx, T * l1.in, DType::bf16), r.first.dx), 3e-2);
    EXPECT_LT(relative_l2(download_floats(o1.dw, l1.out * l1.in, DType::fp32), r.first.dw), 3e-2);
    EXPECT_LT(relative_l2(download_floats(o1.db, l1.out, DType::bf16), r.first.db), 3e-2);
    const std::string file = (fs::temp_directory_path() / "fp8c_session_chain.txt").string();
    s.save_state(file);
    std::ifstream f(file);
    const auto states =
        runtime::parse_state_file(std::string((std::istreambuf_iterator<char>(f)), {}), file);
    const cpu::DelayedScale& got = states.at("fc2").delayed.at("x");
    const cpu::DelayedScale& want = r.second.state.delayed.at("x");
    expect_history_near(got, want);
    EXPECT_NEAR(got.scale, want.scale, 1e-2 * want.scale);
    scale = want.scale;
    // fc1's dz amaxes: what fc2's dgrad epilogue wrote into fc1's state.
    const cpu::DelayedScale& want_dz = r.first.state.delayed.at("dz");
    expect_history_near(states.at("fc1").delayed.at("dz"), want_dz);
    dz_scale = want_dz.scale;
  }
}

TEST(Session, Fp8ChainMatchesTheCpuChain) {
  REQUIRE_GPU();
  expect_fp8_chain_matches_cpu_chain("chain", kFp8Chain);
}

TEST(Session, Fp8ChainOnTheGeneratedGemmMatchesTheCpuChain) {
  REQUIRE_GPU();
  // Both layers' FP8 GEMMs on the generated GEMM.
  std::string text = kFp8Chain;
  const std::string from = "recipe = r }", to = "recipe = r  gemm = generated }";
  for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  ASSERT_NE(text.find("fc2 = linear { input = fc1  out = 256  bias = true  " + to),
            std::string::npos);
  expect_fp8_chain_matches_cpu_chain("chain_generated", text);
}

// The generated GEMM's configurations are compiled when the session starts
// (and listed with its kernels), not in the first step.
TEST(Session, GeneratedGemmConfigurationsAreCompiledAtStartUp) {
  REQUIRE_GPU();
  Session s(write_spec("generated", R"(
recipe r = delayed { history = 4 }
layer l = linear { in = 256  out = 512  bias = true  recipe = r  gemm = generated }
)"),
            options_for(128));
  int configurations = 0;
  for (const KernelReport& k : s.kernels()) configurations += k.name.rfind("fp8_gemm_", 0) == 0;
  EXPECT_GE(configurations, 1);
  const Layer& l = s.spec().layers[0];
  Outputs o(128, l.in, l.out);
  run_step(s, cpu::random_layer_data(l, 128, 3), o, 128);
}

// Misuse of the hand-over is an error naming it, before anything runs.
TEST(Session, Fp8ChainMisuseNamesTheProblem) {
  REQUIRE_GPU();
  const std::int64_t T = 128;
  Session s(write_spec("chain_misuse", kFp8Chain), options_for(T));
  const Layer& l1 = s.spec().layers[0];
  const Layer& l2 = s.spec().layers[1];
  runtime::DeviceBuffer h(static_cast<std::size_t>(T * 512)),
      other(static_cast<std::size_t>(T * 512));
  const TensorRef rh{reinterpret_cast<void*>(h.get()), DType::e4m3, T, 512};
  const TensorRef bytes{reinterpret_cast<void*>(h.get()), DType::u8, T, 512};
  const TensorRef wrong{reinterpret_cast<void*>(other.get()), DType::e4m3, T, 512};
  Outputs o2(T, 512, l2.out);
  const StepInputs a(l1, cpu::random_layer_data(l1, T, 1), T),
      b(l2, cpu::random_layer_data(l2, T, 2), T);
  const auto message = [](auto&& call) {
    try {
      call();
    } catch (const SessionError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message([&] {
              s.forward("fc2", {rh, b.w.ref, b.b.ref}, o2.ry);
            }).find("run 'fc1' forward first"),
            std::string::npos);
  Bf16Buffer hp(std::vector<float>(T * 512), T, 512);
  EXPECT_NE(message([&] {
              s.forward("fc1", {a.x.ref, a.w.ref, a.b.ref}, hp.ref);
            }).find("the plan needs e4m3 [128, 512]"),
            std::string::npos);
  s.forward("fc1", {a.x.ref, a.w.ref, a.b.ref}, bytes);  // raw bytes are accepted
  EXPECT_NE(message([&] {
              s.forward("fc2", {wrong, b.w.ref, b.b.ref}, o2.ry);
            }).find("must be the FP8 output y that 'fc1' forward wrote"),
            std::string::npos);
  EXPECT_NO_THROW(s.forward("fc2", {rh, b.w.ref, b.b.ref}, o2.ry));
  // Backward: fc1 takes the FP8 dz fc2's backward wrote, after it.
  Outputs o1(T, l1.in, l1.out);
  runtime::DeviceBuffer dz(static_cast<std::size_t>(T * 512)),
      other_dz(static_cast<std::size_t>(T * 512));
  const TensorRef rdz{reinterpret_cast<void*>(dz.get()), DType::e5m2, T, 512};
  const TensorRef wrong_dz{reinterpret_cast<void*>(other_dz.get()), DType::e5m2, T, 512};
  EXPECT_NE(message([&] {
              s.backward("fc1", rdz, {o1.rdx, o1.rdw, o1.rdb});
            }).find("run 'fc2' backward first"),
            std::string::npos);
  EXPECT_NE(message([&] {
              s.backward("fc2", b.dy.ref, {o2.rdx, o2.rdw, o2.rdb});
            }).find("input gradient dx is bf16 [128, 512], the plan needs e5m2 [128, 512]"),
            std::string::npos);
  EXPECT_NO_THROW(s.backward("fc2", b.dy.ref, {rdz, o2.rdw, o2.rdb}));
  EXPECT_NE(message([&] {
              s.backward("fc1", wrong_dz, {o1.rdx, o1.rdw, o1.rdb});
            }).find("must be the FP8 input gradient dx that 'fc2' backward wrote"),
            std::string::npos);
  EXPECT_NO_THROW(s.backward("fc1", rdz, {o1.rdx, o1.rdw, o1.rdb}));
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
