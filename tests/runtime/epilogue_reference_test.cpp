// The epilogue and dequantize CPU references against runtime/cpu's executor,
// which defines what the plan's epilogue and dequantize steps compute: the
// executor runs small plans that contain those steps, and the references,
// given the captured inputs of each step, must produce the captured outputs.
// Bit for bit, except where the reference follows the kernel's own order
// (dbias sums over more than one 32-row quarter: within the summation
// bound) or canonical NaN (fp32 NaN compares as NaN). No GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <span>

#include "codegen/lower/lowered.hpp"
#include "codegen/numerics/amax.hpp"
#include "codegen/numerics/half.hpp"
#include "codegen/plan/planner.hpp"
#include "fp8c/dsl.hpp"
#include "runtime/cpu/executor.hpp"
#include "runtime/cpu/quantize.hpp"
#include "runtime/cpu/tensor_store.hpp"
#include "runtime/reference/activation_bound.hpp"
#include "runtime/reference/dequantize_reference.hpp"
#include "runtime/reference/element.hpp"
#include "runtime/reference/element_store.hpp"
#include "runtime/reference/epilogue_reference.hpp"

namespace fp8c::runtime {
namespace {

Spec spec_from(const std::string& text) {
  auto r = check_source(SourceFile("inline.fp8", text));
  if (!r.spec) throw std::runtime_error("bad inline spec:\n" + text);
  return *r.spec;
}

// The kernel the lowering launches for step `s` in `role`.
template <typename Kernel>
Kernel kernel_for(const LayerPlan& plan, const Layer& layer, const Step& s, LaunchRole role) {
  LayerPlan one = plan;
  one.forward = {s};
  one.backward.clear();
  one.update.clear();
  const LoweredLayer lowered = lower_layer(layer, one);
  for (const auto& action : lowered.forward.at(0).actions)
    if (const auto* k = std::get_if<KernelLaunch>(&action); k && k->role == role)
      return std::get<Kernel>(k->kernel.description);
  throw std::runtime_error("the step has no such launch");
}

// Index of the first differing byte, or -1 (instead of printing both buffers).
std::int64_t first_difference(const std::vector<std::uint8_t>& a,
                              const std::vector<std::uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  const auto m = std::mismatch(a.begin(), a.end(), b.begin());
  return m.first == a.end() ? -1 : m.first - a.begin();
}

struct EpilogueCase {
  std::string text;  // a spec whose layer `l` has an epilogue step
  std::uint32_t ranks;
  std::uint64_t tokens;
};

// Runs layer l's plan on the CPU executor, capturing every epilogue step's
// inputs and outputs, and checks the reference reproduces them.
void check_epilogue_steps(const EpilogueCase& c) {
  SCOPED_TRACE(c.text + " ranks " + std::to_string(c.ranks));
  const Spec spec = spec_from(c.text);
  const Plan plan = plan_spec(spec, {c.ranks, c.tokens});
  const LayerPlan& lp = *plan.find("l");
  const Layer& layer = *spec.find_layer("l");
  std::vector<const Step*> steps;
  cpu::ExecutorOptions options;
  options.backend = collectives::Backend::kInProcess;
  for (const auto* pass : {&lp.forward, &lp.backward})
    for (const Step& s : *pass)
      if (s.kind() == StepKind::epilogue || s.kind() == StepKind::grad_epilogue) {
        steps.push_back(&s);
        for (int id : s.inputs()) options.capture.push_back(lp.tensor(id).name);
        for (int id : s.outputs()) options.capture.push_back(lp.tensor(id).name);
      }
  ASSERT_FALSE(steps.empty()) << "no epilogue step";
  const auto results =
      cpu::run_layer(layer, lp, {cpu::random_layer_data(layer, c.tokens, 7)}, options);
  for (const auto& rank : results) {
    const auto& captured = rank.at(0).captured;
    const auto bytes = [&](int id) -> const std::vector<std::uint8_t>& {
      return captured.at(lp.tensor(id).name).bytes;
    };
    for (const Step* s : steps) {
      const EpilogueKernel k = kernel_for<EpilogueKernel>(lp, layer, *s, LaunchRole::epilogue);
      SCOPED_TRACE(k.name());
      const void *bias = nullptr, *pre = nullptr;
      float scale = 1.0f;
      int in = kNoTensor, out = kNoTensor, pre_out = kNoTensor, amax = kNoTensor, dbias = kNoTensor;
      if (const auto* e = s->as<EpilogueStep>()) {
        in = e->in;
        out = e->out;
        if (e->epilogue.bias != kNoTensor) bias = bytes(e->epilogue.bias).data();
        if (e->epilogue.out_scale != kNoTensor)
          std::memcpy(&scale, bytes(e->epilogue.out_scale).data(), 4);
        pre_out = e->epilogue.pre_activation;
        amax = e->epilogue.out_amax;
      } else {
        const auto& g = *s->as<GradEpilogueStep>();
        in = g.dy;
        out = g.out;
        if (g.pre_activation != kNoTensor) pre = bytes(g.pre_activation).data();
        dbias = g.dbias;
      }
      const Tensor& input = lp.tensor(in);
      const std::int64_t rows = input.dims[0].local, cols = input.dims[1].local;
      const EpilogueResult want =
          reference_epilogue(k, bytes(in).data(), bias, pre, scale, rows, cols);
      EXPECT_EQ(first_difference(bytes(out), want.out), -1) << lp.tensor(out).name;
      if (pre_out != kNoTensor) {
        EXPECT_EQ(first_difference(bytes(pre_out), want.pre_out), -1);
      }
      if (amax != kNoTensor) {
        std::uint32_t bits;
        std::memcpy(&bits, bytes(amax).data(), 4);
        EXPECT_EQ(bits, want.amax_bits);
      }
      if (dbias != kNoTensor) {
        // The executor sums each column top to bottom, the kernel (and
        // reference) by 32-row quarters and 128-row tiles: equal when one
        // quarter holds every row, else within the summation bound.
        const auto& got = bytes(dbias);
        ASSERT_EQ(got.size(), static_cast<std::size_t>(cols) * element_bytes(k.input));
        for (std::int64_t col = 0; col < cols; ++col) {
          double magnitude = 0;
          for (std::int64_t r = 0; r < rows; ++r)
            magnitude += std::fabs(
                reference_epilogue_value(k, bytes(in).data(), nullptr, pre, r * cols + col, cols));
          const double bound = rows <= 32 ? 0.0 : 2.0 * rows * 0x1p-24 * magnitude;
          const float g = load_element(k.input, got.data(), col);
          const float w = cpu::round_to(k.input, want.dbias[static_cast<std::size_t>(col)]);
          if (bound == 0.0)
            EXPECT_EQ(std::bit_cast<std::uint32_t>(g), std::bit_cast<std::uint32_t>(w))
                << "db[" << col << "]";
          else
            EXPECT_TRUE(close_after_rounding(g, w, bound, k.input))
                << "db[" << col << "] = " << g << ", want " << w;
        }
      }
    }
  }
}

TEST(EpilogueReference, MatchesTheCpuExecutorsEpilogueSteps) {
  const std::vector<EpilogueCase> cases = {
      // Row layers: bias, activations (z saved), output types, FP8 for a
      // delayed consumer with its amax.
      {R"(layer l = linear { in = 256  out = 96  bias = true  recipe = delayed {}
           layout = { tensor_parallel = 2 } row })",
       2, 48},
      {R"(layer l = linear { in = 256  out = 96  bias = true  activation = gelu  dtype = fp16
           output = fp32  recipe = current {}  layout = { tensor_parallel = 2 } row })",
       2, 48},
      {R"(layer l = linear { in = 256  out = 64  activation = relu  recipe = blockwise {}
           layout = { tensor_parallel = 2  sequence_parallel = true } row })",
       2, 256},
      {R"(layout tp = { tensor_parallel = 2 }
          layer l = linear { in = 256  out = 96  bias = true  activation = silu  output = fp8
            recipe = delayed {}  layout = tp row }
          layer m = linear { input = l  out = 64  recipe = delayed {}  layout = tp column })",
       2, 48},
      // Backward: dact + dbias in high precision (recipe none), dbias alone,
      // dact alone for a fallback GEMM; one quarter and several tiles.
      {R"(layer l = linear { in = 64  out = 96  bias = true  activation = relu  dtype = fp16
           recipe = none })",
       1, 30},
      {R"(layer l = linear { in = 64  out = 96  bias = true  activation = gelu  dtype = fp32
           recipe = none })",
       1, 300},
      {R"(layer l = linear { in = 64  out = 96  bias = true  recipe = none })", 1, 300},
      {R"(layer l = linear { in = 64  out = 96  activation = silu  recipe = delayed {}
           debug = { fallback = dgrad } })",
       1, 48},
  };
  for (const auto& c : cases) check_epilogue_steps(c);
}

// Random FP8 codes (every one of the 256, NaNs included) and scales with the
// special values: NaN, +-Inf, 0, subnormal, negative, huge, tiny.
void fill_random(std::span<std::uint8_t> bytes, std::mt19937& rng) {
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = i < 256 ? static_cast<std::uint8_t>(i) : static_cast<std::uint8_t>(rng());
  std::shuffle(bytes.begin(), bytes.end(), rng);
}

float random_scale(std::mt19937& rng) {
  const float specials[] = {std::bit_cast<float>(0x7FC00000u), INFINITY, -INFINITY, 0.0f,
                            std::bit_cast<float>(0x00000003u), -2.5f,    3e38f,     1e-38f};
  if (rng() % 16 == 0) return specials[rng() % 8];
  return std::ldexp(std::uniform_real_distribution<float>(1.0f, 2.0f)(rng),
                    static_cast<int>(rng() % 40) - 20);
}

// Every block-scaled GEMM operand the lowering dequantizes in the plans
// below: the executor's decode() and store on random bytes, against the
// reference on the same bytes with the layout the GPU executor passes
// (segments, segmented).
TEST(DequantizeReference, MatchesTheCpuExecutorsDecodeOnEveryPlannedLayout) {
  const char* text = R"(
layout tp = { tensor_parallel = 2  sequence_parallel = true }
layer a = linear {
  in = 256  out = 512  bias = true  activation = gelu  recipe = blockwise {}
  layout = tp column  debug = { stats = true }
}
layer c = linear {
  in = 512  out = 256  bias = true  activation = relu  recipe = mxfp8 {}
  layout = tp row
}
layer d = linear {
  in = 256  out = 256  dtype = fp16  recipe = current {}  layout = tp row
  debug = { fallback = all }
}
layer e = linear {
  in = 256  out = 256  dtype = fp32  recipe = delayed {}  layout = tp column
  save_input = original  debug = { fallback = wgrad }
}
)";
  const Spec spec = spec_from(text);
  std::mt19937 rng(11);
  int checked = 0, segmented = 0, transposed = 0;
  for (std::uint32_t ranks : {1u, 2u, 4u}) {
    // 1056 tokens: rank segments of 528 and 264 (not multiples of 128).
    for (std::uint64_t tokens : {1056u, 1024u}) {
      const Plan plan = plan_spec(spec, {ranks, tokens});
      for (const LayerPlan& lp : plan.layers) {
        const Layer& layer = *spec.find_layer(lp.layer);
        // Without the block-scaled GEMM or the generated one (another GPU):
        // every block-scaled operand dequantized.
        LowerOptions options;
        options.block_scaled_gemm = false;
        options.generated_gemm = false;
        options.no_generated_gemm = "not sm_90a (test)";
        const LoweredLayer lowered = lower_layer(layer, lp, options);
        for (const auto& [pass, low] :
             {std::pair{&lp.forward, &lowered.forward}, std::pair{&lp.backward, &lowered.backward}})
          for (std::size_t si = 0; si < pass->size(); ++si)
            for (const auto& action : (*low)[si].actions) {
              const auto* launch = std::get_if<KernelLaunch>(&action);
              if (!launch || (launch->role != LaunchRole::dequantize_a &&
                              launch->role != LaunchRole::dequantize_b))
                continue;
              const GemmStep& gemm = *(*pass)[si].as<GemmStep>();
              const Tensor& q =
                  lp.tensor(launch->role == LaunchRole::dequantize_a ? gemm.a : gemm.b);
              const DequantizeKernel k = std::get<DequantizeKernel>(launch->kernel.description);
              SCOPED_TRACE(k.name() + " of " + q.name + " at " + std::to_string(ranks) + " ranks");
              cpu::TensorStore store(lp);
              fill_random(store.bytes(q.id), rng);
              float tensor_scale = 1.0f;
              if (q.scaling == Scaling::per_tensor) {
                tensor_scale = random_scale(rng);
                store.set_scalar(q.scale, tensor_scale);
              } else if (lp.tensor(q.scale).type == ElemType::e8m0) {
                fill_random(store.bytes(q.scale), rng);
              } else {
                auto sb = store.bytes(q.scale);
                for (std::size_t i = 0; i + 4 <= sb.size(); i += 4) {
                  const float v = random_scale(rng);
                  std::memcpy(sb.data() + i, &v, 4);
                }
              }
              // What the executor's decode() and a store in the output type make.
              const std::vector<float> decoded = cpu::decode(store, q.id, true);
              std::vector<std::uint8_t> got_bytes(decoded.size() * element_bytes(k.output));
              for (std::size_t i = 0; i < decoded.size(); ++i)
                store_element(k.output, got_bytes.data(), static_cast<std::int64_t>(i), decoded[i]);
              DequantizeLayout layout;
              layout.outer = q.dims[static_cast<std::size_t>(q.outer_dim())].local;
              layout.inner = q.dims[static_cast<std::size_t>(q.inner_dim())].local;
              layout.segments =
                  static_cast<int>(q.block_segments[static_cast<std::size_t>(q.inner_dim())]);
              layout.segmented = q.segmented.has_value();
              if (q.scaling != Scaling::per_tensor) {
                ASSERT_EQ(static_cast<std::size_t>(dequantize_scale_count(k, layout)) *
                              (k.scaling == Scaling::mx_1x32 ? 1 : 4),
                          store.bytes(q.scale).size());
              }
              const auto want = reference_dequantize(
                  k, store.bytes(q.id).data(),
                  q.scaling == Scaling::per_tensor ? nullptr : store.bytes(q.scale).data(),
                  tensor_scale, layout);
              const auto& got = got_bytes;
              ASSERT_EQ(got.size(), want.out.size());
              const std::size_t width = element_bytes(k.output);
              std::size_t mismatches = 0;
              for (std::size_t i = 0; i < got.size() / width; ++i) {
                const float g = load_element(k.output, got.data(), static_cast<std::int64_t>(i));
                const float w =
                    load_element(k.output, want.out.data(), static_cast<std::int64_t>(i));
                const bool same =
                    std::memcmp(got.data() + i * width, want.out.data() + i * width, width) == 0 ||
                    (std::isnan(g) && std::isnan(w));
                if (!same && ++mismatches <= 5)
                  ADD_FAILURE() << "element " << i << ": executor " << g << ", reference " << w;
              }
              EXPECT_EQ(mismatches, 0u);
              if (k.amax) {
                const float amax = numerics::amax(decoded);
                EXPECT_EQ(std::bit_cast<std::uint32_t>(amax), want.amax_bits);
              }
              ++checked;
              segmented += layout.segmented;
              transposed += k.transpose;
            }
      }
    }
  }
  EXPECT_GE(checked, 20);
  EXPECT_GT(segmented, 0);
  EXPECT_GT(transposed, 0);
}

}  // namespace
}  // namespace fp8c::runtime
