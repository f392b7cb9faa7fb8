// The step runtime through fp8c::Session on a GPU.
// CUDA Graphs (SessionOptions::graphs): steps run on the same tensors are
// captured once and replayed, and every replayed step gives the same bits
// as the same step launched one by one (outputs, gradients, the FP8
// hand-over of a chain and the delayed state), over delayed, current and
// blockwise recipes and both GEMM backends; a NaN found in a replayed step
// is reported and leaves the state as it was; a tensor at a new address
// re-captures.
// The FP8 weight cache (weight_cache, LayerInputs::w_version): micro-batches
// of one weight version cast it once and give the bits of casting it every
// time while its scale stands; a kept cast keeps the scale it was cast with
// when the state's moves; a weight changed under an unchanged version is
// caught by check_weight_cache (and, without it, the kept cast is what runs).
// Skipped, visibly, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "../runtime/gpu_fixture.hpp"
#include "codegen/numerics/half.hpp"
#include "fp8c/session.hpp"
#include "runtime/cpu/executor.hpp"
#include "runtime/device.hpp"

namespace fp8c {
namespace {

namespace fs = std::filesystem;
constexpr std::int64_t T = 128;

std::string write_spec(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("fp8c_graph_" + name + ".fp8");
  std::ofstream(p) << text;
  return p.string();
}

// A chain in FP8 (delayed, nan = error), a current-scaling layer, a
// blockwise layer, and a layer on the generated GEMM.
const char* kLayers = R"(
recipe d = delayed { history = 4  nan = error }
recipe c = current { forward = e4m3  backward = e5m2 }
recipe b = blockwise { forward = e4m3  backward = e4m3 }
layer fc1 = linear { in = 256  out = 512  bias = true  activation = gelu  output = fp8  recipe = d }
layer fc2 = linear { input = fc1  out = 256  bias = true  recipe = d }
layer cur = linear { in = 256  out = 384  bias = true  activation = silu  recipe = c }
layer blk = linear { in = 256  out = 384  recipe = b  save_input = original }
layer gen = linear { in = 256  out = 256  bias = true  recipe = d  gemm = generated }
)";

runtime::DeviceBuffer buffer_of(std::int64_t rows, std::int64_t cols, DType t) {
  return runtime::DeviceBuffer(static_cast<std::size_t>(rows * cols) * element_bytes(t));
}

// One layer's tensors, at fixed addresses for the whole test.
struct LayerTensors {
  std::int64_t in = 0, out = 0;
  bool bias = false;
  runtime::DeviceBuffer x, w, b, dy, y, dx, dw, db;
  LayerTensors(const Layer& l, DType y_type)
      : in(static_cast<std::int64_t>(l.in)),
        out(static_cast<std::int64_t>(l.out)),
        bias(l.bias),
        x(buffer_of(T, in, DType::bf16)),
        w(buffer_of(out, in, DType::bf16)),
        b(buffer_of(out, 1, DType::bf16)),
        dy(buffer_of(T, out, DType::bf16)),
        y(buffer_of(T, out, y_type)),
        dx(buffer_of(T, in, DType::bf16)),
        dw(buffer_of(out, in, DType::fp32)),
        db(buffer_of(out, 1, DType::bf16)) {}
  static void put(runtime::DeviceBuffer& to, const std::vector<float>& v) {
    std::vector<std::uint16_t> bits(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) bits[i] = numerics::float_to_bf16(v[i]);
    to.upload(bits.data(), bits.size() * 2);
  }
  void upload(const cpu::LayerData& d) {
    put(x, d.x);
    put(w, d.w);
    if (bias) put(b, d.b);
    put(dy, d.dy);
  }
  static TensorRef ref(const runtime::DeviceBuffer& buf, DType t, std::int64_t r, std::int64_t c) {
    return {reinterpret_cast<void*>(buf.get()), t, r, c};
  }
  LayerInputs inputs() const {
    return {ref(x, DType::bf16, T, in), ref(w, DType::bf16, out, in),
            bias ? ref(b, DType::bf16, out, 1) : TensorRef{}};
  }
  LayerGrads grads() const {
    return {ref(dx, DType::bf16, T, in), ref(dw, DType::fp32, out, in),
            bias ? ref(db, DType::bf16, out, 1) : TensorRef{}};
  }
  std::vector<unsigned char> bytes(const runtime::DeviceBuffer& buf) const {
    std::vector<unsigned char> v(buf.bytes());
    buf.download(v.data(), v.size());
    return v;
  }
};

// A session and its tensors, one step at a time.
struct SessionRun {
  Session session;
  std::map<std::string, std::unique_ptr<LayerTensors>> t;
  SessionRun(const std::string& spec, bool graphs) : SessionRun(spec, options(graphs)) {}
  SessionRun(const std::string& spec, const SessionOptions& o) : session(spec, o) {
    for (const Layer& l : session.spec().layers)
      t[l.name] = std::make_unique<LayerTensors>(l, session.dtype(l.name, "y"));
  }
  static SessionOptions options(bool graphs) {
    SessionOptions o;
    o.tokens = T;
    o.graphs = graphs;
    return o;
  }
  void upload(std::uint64_t seed) {
    for (const Layer& l : session.spec().layers)
      t.at(l.name)->upload(cpu::random_layer_data(l, T, seed * 101 + l.in + l.out));
  }
  // Enqueues one step of every layer (the chain in order: fc2's dx is fc1's dy).
  void step() {
    LayerTensors &a = *t.at("fc1"), &b = *t.at("fc2");
    session.forward("fc1", a.inputs(), LayerTensors::ref(a.y, DType::e4m3, T, a.out));
    LayerInputs bi = b.inputs();
    bi.x = LayerTensors::ref(a.y, DType::e4m3, T, a.out);
    session.forward("fc2", bi, LayerTensors::ref(b.y, DType::bf16, T, b.out));
    // fc2's dx: fc1's FP8 dz where fc2's dgrad hands it over (one rank).
    const DType g = session.dtype("fc2", "dx");
    LayerGrads bg = b.grads();
    bg.dx = LayerTensors::ref(b.dx, g, T, a.out);
    session.backward("fc2", LayerTensors::ref(b.dy, DType::bf16, T, b.out), bg);
    session.backward("fc1", LayerTensors::ref(b.dx, g, T, a.out), a.grads());
    for (const char* name : {"cur", "blk", "gen"}) {
      LayerTensors& l = *t.at(name);
      session.forward(name, l.inputs(), LayerTensors::ref(l.y, DType::bf16, T, l.out));
      session.backward(name, LayerTensors::ref(l.dy, DType::bf16, T, l.out), l.grads());
    }
  }
  std::string state(const std::string& tag) {
    const std::string file = (fs::temp_directory_path() / ("fp8c_graph_state_" + tag)).string();
    session.save_state(file);
    std::ifstream f(file);
    return std::string((std::istreambuf_iterator<char>(f)), {});
  }
};

TEST(SessionGraphs, ReplayedStepsMatchStepsLaunchedOneByOne) {
  REQUIRE_GPU();
  const std::string spec = write_spec("match", kLayers);
  SessionRun graphs(spec, true), eager(spec, false);
  constexpr int kSteps = 5;
  for (int i = 0; i < kSteps; ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    graphs.upload(i);
    eager.upload(i);
    graphs.step();
    eager.step();
    graphs.session.synchronize();
    eager.session.synchronize();
    for (auto& [name, g] : graphs.t) {
      SCOPED_TRACE("layer " + name);
      const LayerTensors& e = *eager.t.at(name);
      EXPECT_TRUE(g->bytes(g->y) == e.bytes(e.y)) << "y";
      EXPECT_TRUE(g->bytes(g->dx) == e.bytes(e.dx)) << "dx";
      EXPECT_TRUE(g->bytes(g->dw) == e.bytes(e.dw)) << "dw";
      if (g->bias) {
        EXPECT_TRUE(g->bytes(g->db) == e.bytes(e.db)) << "db";
      }
    }
  }
  EXPECT_EQ(graphs.state("graphs"), eager.state("eager"));
  // Backward: eager, captured, then replayed. Forward is keyed on every
  // tensor's address too, and the first forward ran before the first
  // backward had bound the gradients: eager twice, captured at step 3.
  for (const GraphReport& r : graphs.session.graph_report()) {
    SCOPED_TRACE("layer " + r.layer);
    EXPECT_EQ(r.forward_not_captured, "");
    EXPECT_EQ(r.backward_not_captured, "");
    EXPECT_EQ(r.eager, 3);
    EXPECT_EQ(r.captured, 2);
    EXPECT_EQ(r.replayed, 2 * kSteps - 5);
  }
  for (const GraphReport& r : eager.session.graph_report()) {
    EXPECT_EQ(r.captured + r.replayed, 0);
    EXPECT_EQ(r.forward_not_captured, "graphs are off");
  }
}

TEST(SessionGraphs, ANanInAReplayedStepIsReportedAndLeavesTheState) {
  REQUIRE_GPU();
  SessionRun run(write_spec("nan", kLayers), true);
  for (int i = 0; i < 3; ++i) {
    run.upload(i);
    run.step();
  }
  run.session.synchronize();
  const std::string before = run.state("nan_before");
  run.upload(7);
  std::vector<float> bad = cpu::random_layer_data(run.session.spec().layers[0], T, 7).x;
  bad[5] = NAN;
  LayerTensors::put(run.t.at("fc1")->x, bad);
  run.step();
  // Each layer's verdict is reported once: fc1's names its input (fc2,
  // whose input is fc1's output, may report one of its own).
  std::string reported;
  for (int i = 0; i < 4; ++i) {
    try {
      run.session.synchronize();
      break;
    } catch (const SessionError& e) {
      reported += std::string(e.what()) + "\n";
    }
  }
  EXPECT_NE(reported.find("NaN in fc1.x"), std::string::npos) << reported;
  EXPECT_NO_THROW(run.session.synchronize());
  // fc1's update wrote nothing; the layers without a NaN stepped.
  const std::string after = run.state("nan_after");
  const auto section = [](const std::string& s, const std::string& layer) {
    const auto at = s.find("layer " + layer);
    return at == std::string::npos ? std::string() : s.substr(at, s.find("layer ", at + 1) - at);
  };
  EXPECT_FALSE(section(before, "fc1").empty());
  EXPECT_EQ(section(before, "fc1"), section(after, "fc1"));
  EXPECT_FALSE(section(before, "gen").empty());
  EXPECT_NE(section(before, "gen"), section(after, "gen"));
  run.upload(8);
  run.step();
  EXPECT_NO_THROW(run.session.synchronize());
  for (const GraphReport& r : run.session.graph_report()) EXPECT_GT(r.replayed, 0) << r.layer;
}

TEST(SessionGraphs, ATensorAtANewAddressIsCapturedAgain) {
  REQUIRE_GPU();
  SessionRun run(write_spec("moved", R"(
recipe d = delayed { history = 4 }
layer l = linear { in = 256  out = 256  bias = true  recipe = d }
)"),
                 true);
  LayerTensors& l = *run.t.at("l");
  runtime::DeviceBuffer other = buffer_of(T, l.out, DType::bf16);
  const auto forward = [&](const runtime::DeviceBuffer& y) {
    run.session.forward("l", l.inputs(), LayerTensors::ref(y, DType::bf16, T, l.out));
    run.session.backward("l", LayerTensors::ref(l.dy, DType::bf16, T, l.out), l.grads());
  };
  run.upload(1);
  for (int i = 0; i < 3; ++i) forward(l.y);  // eager, captured, replayed
  run.session.synchronize();
  const std::vector<unsigned char> first = l.bytes(l.y);
  for (int i = 0; i < 2; ++i) forward(other);  // forward: eager, captured
  run.session.synchronize();
  EXPECT_TRUE(l.bytes(other) == first) << "the same inputs at a new output address";
  // Both passes are keyed on every tensor's address. Steps 1-3: forward
  // eager twice (the gradients were bound by the first backward) and
  // captured; backward eager, captured, replayed. Steps 4-5 (y moved): each
  // pass eager, then captured.
  const GraphReport r = run.session.graph_report().at(0);
  EXPECT_EQ(r.eager, 5);
  EXPECT_EQ(r.captured, 4);
  EXPECT_EQ(r.replayed, 1);
}

// Independent layers of each recipe, for the weight cache.
const char* kCachedLayers = R"(
recipe d = delayed { history = 4 }
recipe c = current { forward = e4m3  backward = e5m2 }
recipe b = blockwise { forward = e4m3  backward = e4m3 }
layer del = linear { in = 256  out = 384  bias = true  activation = gelu  recipe = d }
layer cur = linear { in = 256  out = 384  bias = true  recipe = c }
layer blk = linear { in = 256  out = 384  recipe = b  save_input = original }
)";

// One micro-batch of every layer of `run` with weight version `version`.
void micro_batch(SessionRun& run, std::uint64_t version) {
  for (const Layer& l : run.session.spec().layers) {
    LayerTensors& t = *run.t.at(l.name);
    LayerInputs in = t.inputs();
    in.w_version = version;
    run.session.forward(l.name, in, LayerTensors::ref(t.y, DType::bf16, T, t.out));
    run.session.backward(l.name, LayerTensors::ref(t.dy, DType::bf16, T, t.out), t.grads());
  }
}

// Fresh x and dy for every layer (the weights stay).
void new_activations(SessionRun& run, std::uint64_t seed) {
  for (const Layer& l : run.session.spec().layers) {
    const cpu::LayerData d = cpu::random_layer_data(l, T, seed * 31 + l.out);
    LayerTensors::put(run.t.at(l.name)->x, d.x);
    LayerTensors::put(run.t.at(l.name)->dy, d.dy);
  }
}

void scale_weights(SessionRun& run, float by, std::uint64_t seed) {
  for (const Layer& l : run.session.spec().layers) {
    std::vector<float> w = cpu::random_layer_data(l, T, seed).w;
    for (float& v : w) v *= by;
    LayerTensors::put(run.t.at(l.name)->w, w);
  }
}

double relative_l2(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i + 1 < want.size(); i += 2) {
    std::uint16_t a = 0, b = 0;
    std::memcpy(&a, &got[i], 2);
    std::memcpy(&b, &want[i], 2);
    const double x = numerics::bf16_to_float(a), y = numerics::bf16_to_float(b);
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return norm > 0 ? std::sqrt(diff / norm) : 1e9;
}

TEST(SessionWeightCache, KeptCastsGiveTheBitsOfCastingEveryMicroBatch) {
  REQUIRE_GPU();
  const std::string spec = write_spec("cache", kCachedLayers);
  SessionOptions on = SessionRun::options(true);
  on.weight_cache = true;
  SessionRun cached(spec, on), every(spec, SessionRun::options(true));
  for (SessionRun* r : {&cached, &every}) {
    r->upload(1);
    micro_batch(*r, 0);  // unversioned: cast; the delayed scales settle
  }
  // Version 1: four micro-batches; version 2 (the weight at half scale, so
  // the delayed weight scale, a max over the history, stands): two more.
  for (int m = 0; m < 6; ++m) {
    SCOPED_TRACE("micro-batch " + std::to_string(m));
    const std::uint64_t version = m < 4 ? 1 : 2;
    for (SessionRun* r : {&cached, &every}) {
      if (m == 4) scale_weights(*r, 0.5f, 77);
      new_activations(*r, 100 + m);
      micro_batch(*r, version);
      r->session.synchronize();
    }
    for (auto& [name, c] : cached.t) {
      SCOPED_TRACE("layer " + name);
      const LayerTensors& e = *every.t.at(name);
      EXPECT_TRUE(c->bytes(c->y) == e.bytes(e.y)) << "y";
      EXPECT_TRUE(c->bytes(c->dx) == e.bytes(e.dx)) << "dx";
      EXPECT_TRUE(c->bytes(c->dw) == e.bytes(e.dw)) << "dw";
    }
  }
  EXPECT_EQ(cached.state("cache_on"), every.state("cache_off"));
}

// The delayed weight scale moves (amax = most_recent, and a version whose
// weight has a quarter of the amax: the state's scale grows 4x): the kept
// cast dequantizes with the scale it was cast with, not the state's new
// one, so its outputs stay within FP8 rounding of a cast made every time
// (with the state's scale they would be 4x off).
TEST(SessionWeightCache, AKeptCastKeepsItsScaleWhenTheStatesMoves) {
  REQUIRE_GPU();
  const std::string spec = write_spec("cache_scale", R"(
recipe d = delayed { history = 4  amax = most_recent }
layer del = linear { in = 256  out = 384  bias = true  recipe = d }
)");
  SessionOptions on = SessionRun::options(true);
  on.weight_cache = true;
  SessionRun cached(spec, on), every(spec, SessionRun::options(true));
  for (SessionRun* r : {&cached, &every}) {
    r->upload(2);
    micro_batch(*r, 1);
    micro_batch(*r, 1);
    scale_weights(*r, 0.25f, 78);
    for (int m = 0; m < 3; ++m) {
      new_activations(*r, 200 + m);
      micro_batch(*r, 2);
    }
    r->session.synchronize();
  }
  const LayerTensors &c = *cached.t.at("del"), &e = *every.t.at("del");
  EXPECT_LT(relative_l2(c.bytes(c.y), e.bytes(e.y)), 6e-2);
  EXPECT_LT(relative_l2(c.bytes(c.dx), e.bytes(e.dx)), 6e-2);
  // The state moves as with a cast every time: the weight's amax the
  // skipped casts left in place is the one they would have made.
  EXPECT_EQ(cached.state("scale_on"), every.state("scale_off"));
}

// A weight changed under an unchanged version: check_weight_cache names it
// before the step runs; without the check the kept cast is what runs (the
// outputs are those of the old weight).
TEST(SessionWeightCache, AWeightChangedUnderItsVersionIsCaughtByTheCheck) {
  REQUIRE_GPU();
  const std::string spec = write_spec("cache_misuse", R"(
recipe c = current { forward = e4m3  backward = e5m2 }
layer l = linear { in = 256  out = 384  bias = true  recipe = c  weight_cache = true }
)");
  SessionOptions checked_options = SessionRun::options(true);
  checked_options.check_weight_cache = true;
  SessionRun checked(spec, checked_options), unchecked(spec, SessionRun::options(true)),
      reference(spec, SessionRun::options(true));
  for (SessionRun* r : {&checked, &unchecked, &reference}) {
    r->upload(3);
    micro_batch(*r, 5);
    r->session.synchronize();
  }
  new_activations(reference, 300);
  micro_batch(reference, 5);  // the old weight, kept
  reference.session.synchronize();
  for (SessionRun* r : {&checked, &unchecked}) {
    scale_weights(*r, 1.0f, 79);
    new_activations(*r, 300);
  }
  try {
    micro_batch(checked, 5);
    ADD_FAILURE() << "a changed weight under an unchanged version passed the check";
  } catch (const SessionError& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'l': weight w changed but its version (5) did not"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(micro_batch(checked, 6));  // a new version casts again
  micro_batch(unchecked, 5);
  checked.session.synchronize();
  unchecked.session.synchronize();
  const LayerTensors &u = *unchecked.t.at("l"), &r = *reference.t.at("l");
  EXPECT_TRUE(u.bytes(u.y) == r.bytes(r.y)) << "the kept cast did not run";
}

}  // namespace
}  // namespace fp8c
