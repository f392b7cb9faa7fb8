// What valid files mean: every example checks, defaults are filled in,
// references resolve (named refinements, inline settings, `input =`), the
// target can be overridden, and the error report keeps its promises (did
// you mean, the error limit, the window around the caret).

#include <gtest/gtest.h>

#include "fp8c/dsl.hpp"
#include "tests/dsl/support.hpp"

namespace fp8c::test {
namespace {

// Checks `text`; the Spec, or a failure showing the diagnostics.
std::optional<Spec> check_ok(const std::string& text, const CheckOptions& options = {}) {
  const SourceFile file("test.fp8", text);
  CheckResult result = check_source(file, options);
  EXPECT_TRUE(result.spec) << result.diagnostics.render(file);
  EXPECT_FALSE(result.diagnostics.has_errors()) << result.diagnostics.render(file);
  return std::move(result.spec);
}

std::vector<std::string> check_errors(const std::string& text, const CheckOptions& options = {}) {
  const SourceFile file("test.fp8", text);
  const CheckResult result = check_source(file, options);
  EXPECT_FALSE(result.spec);
  return describe_all(file, result.diagnostics);
}

Recipe make_recipe(RecipeKind kind, std::string name = "") {
  Recipe r = default_recipe(kind);
  r.name = std::move(name);
  return r;
}

// The diagnostics of a file that checks (warnings allowed), as "LINE:COL: SEVERITY: MESSAGE".
std::vector<std::string> check_warnings(const std::string& text, const CheckOptions& options = {}) {
  const SourceFile file("test.fp8", text);
  const CheckResult result = check_source(file, options);
  EXPECT_TRUE(result.spec) << result.diagnostics.render(file);
  return describe_all(file, result.diagnostics);
}

// ------------------------------------------------------------------ examples

class ExampleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExampleTest, ChecksThroughTheLibraryAndTheCommand) {
  const SourceFile file(GetParam(), read_file(GetParam()));
  const CheckResult result = check_source(file);
  ASSERT_TRUE(result.spec) << result.diagnostics.render(file);
  EXPECT_FALSE(result.spec->layers.empty());
  const CommandResult run = run_fp8c({"check", GetParam()});
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.err.find(": error: "), std::string::npos) << run.err;
  EXPECT_EQ(run.out, "");
}

INSTANTIATE_TEST_SUITE_P(Examples, ExampleTest,
                         ::testing::ValuesIn(list_files(examples_dir(), ".fp8")),
                         [](const auto& info) {
                           std::string name = stem(info.param);
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

TEST(Examples, TheFolderHasTheMlpExample) {
  const auto files = list_files(examples_dir(), ".fp8");
  EXPECT_NE(std::find(files.begin(), files.end(), examples_dir() + "/gpt_mlp.fp8"), files.end());
}

// The design document's example, as the Spec it must check to.
TEST(Examples, GptMlpMeansWhatTheDesignSays) {
  const auto spec = check_ok(read_file(examples_dir() + "/gpt_mlp.fp8"));
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->target, (Target{90, true}));
  ASSERT_EQ(spec->recipes.size(), 1u);
  Recipe hybrid = make_recipe(RecipeKind::delayed, "hybrid");
  EXPECT_EQ(spec->recipes[0], hybrid);
  ASSERT_EQ(spec->layouts.size(), 1u);
  const Layout tp8{"tp8", 8, true, Overlap::ring};
  EXPECT_EQ(spec->layouts[0], tp8);
  ASSERT_EQ(spec->layers.size(), 2u);

  Layer fc1;
  fc1.name = "fc1";
  fc1.in = 8192;
  fc1.out = 28672;
  fc1.bias = true;
  fc1.activation = Activation::gelu;
  fc1.output_dtype = DType::bf16;  // fc2 scales its input itself (current): no FP8 hand-over
  fc1.recipe = hybrid;
  fc1.layout = tp8;
  fc1.mode = ParallelMode::column;
  fc1.save_input = SaveInput::fp8;
  EXPECT_EQ(spec->layers[0], fc1);
  EXPECT_EQ(fc1.out_per_rank(), 3584u);

  Layer fc2;
  fc2.name = "fc2";
  fc2.in = 28672;
  fc2.out = 8192;
  fc2.bias = true;
  fc2.input = "fc1";
  fc2.recipe = make_recipe(RecipeKind::current);
  fc2.layout = tp8;
  fc2.mode = ParallelMode::row;
  fc2.save_input = SaveInput::fp8;
  EXPECT_EQ(spec->layers[1], fc2);
  EXPECT_EQ(spec->find_layer("fc2"), &spec->layers[1]);
  EXPECT_EQ(spec->find_layer("fc3"), nullptr);
}

// ------------------------------------------------------------------ defaults

TEST(Defaults, ABareLayerGetsEveryDefault) {
  const auto spec = check_ok("layer fc1 = linear { in = 64 out = 128 }\n");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->target, (Target{90, true}));
  EXPECT_EQ(spec->target.str(), "sm_90a");
  EXPECT_TRUE(spec->recipes.empty());
  EXPECT_TRUE(spec->layouts.empty());
  EXPECT_TRUE(spec->debugs.empty());
  Layer expected;
  expected.name = "fc1";
  expected.in = 64;
  expected.out = 128;
  // Recipe none: the high-precision reference, which saves its input as it is.
  expected.save_input = SaveInput::original;
  ASSERT_EQ(spec->layers.size(), 1u);
  EXPECT_EQ(spec->layers[0], expected);
  EXPECT_FALSE(spec->layers[0].recipe.is_fp8());
  EXPECT_FALSE(spec->layers[0].debug.enabled());
  EXPECT_EQ(spec->layers[0].layout.tensor_parallel, 1u);
  EXPECT_EQ(spec->layers[0].gemm, GemmBackend::automatic);
}

TEST(Defaults, SaveInputFollowsTheRecipe) {
  const auto spec = check_ok(
      "layer a = linear { in = 64 out = 64 recipe = current }\n"
      "layer b = linear { in = 64 out = 64 recipe = none }\n"
      "layer c = linear { in = 64 out = 64 recipe = current save_input = original }\n");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->layers[0].save_input, SaveInput::fp8);
  EXPECT_EQ(spec->layers[1].save_input, SaveInput::original);
  EXPECT_EQ(spec->layers[2].save_input, SaveInput::original);
}

TEST(Defaults, OutputDtypeFollowsTheLayersDtype) {
  const auto spec = check_ok(
      "layer a = linear { in = 64 out = 64 dtype = fp16 }\n"
      "layer b = linear { in = 64 out = 64 dtype = fp32 output = bf16 }\n"
      "layer c = linear { in = 64 out = 64 recipe = current output = fp8 }\n");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->layers[0].output_dtype, DType::fp16);
  EXPECT_FALSE(spec->layers[0].output_fp8);
  EXPECT_EQ(spec->layers[1].dtype, DType::fp32);
  EXPECT_EQ(spec->layers[1].output_dtype, DType::bf16);
  EXPECT_TRUE(spec->layers[2].output_fp8);
  EXPECT_EQ(spec->layers[2].output_dtype, DType::bf16);
}

TEST(Defaults, OutputFp8FallsBackToTheLayersDtype) {
  // Not honoured (no consumer): written in the layer's dtype, not the default bf16.
  const auto spec = check_ok(
      "layer a = linear { in = 64 out = 64 dtype = fp16 recipe = delayed output = fp8 }\n"
      "layer b = linear { in = 64 out = 64 dtype = fp32 recipe = current output = fp8 }\n");
  ASSERT_TRUE(spec);
  EXPECT_TRUE(spec->layers[0].output_fp8);
  EXPECT_EQ(spec->layers[0].output_dtype, DType::fp16);
  EXPECT_EQ(spec->layers[1].output_dtype, DType::fp32);
}

TEST(Defaults, RecipeKindsStartFromTheirDefaults) {
  const auto spec = check_ok(
      "recipe d = delayed\nrecipe c = current\nrecipe b = blockwise\nrecipe m = mxfp8\n"
      "recipe n = none\n" +
      std::string("layer fc1 = linear { in = 64 out = 64 }\n"));
  ASSERT_TRUE(spec);
  ASSERT_EQ(spec->recipes.size(), 5u);
  EXPECT_EQ(spec->recipes[0], make_recipe(RecipeKind::delayed, "d"));
  EXPECT_EQ(spec->recipes[0].history, 1024u);
  EXPECT_EQ(spec->recipes[0].amax, AmaxAlgo::max);
  EXPECT_EQ(spec->recipes[0].margin, 0u);
  EXPECT_EQ(spec->recipes[0].forward, Fp8Format::e4m3);
  EXPECT_EQ(spec->recipes[0].backward, Fp8Format::e5m2);
  EXPECT_EQ(spec->recipes[1], make_recipe(RecipeKind::current, "c"));
  EXPECT_EQ(spec->recipes[2], make_recipe(RecipeKind::blockwise, "b"));
  EXPECT_EQ(spec->recipes[3], make_recipe(RecipeKind::mxfp8, "m"));
  EXPECT_EQ(spec->recipes[4], make_recipe(RecipeKind::none, "n"));
}

// TransformerEngine's defaults: HYBRID (E4M3 forward, E5M2 backward) for
// per-tensor scaling, E4M3 throughout for Float8BlockScaling (with
// power-of-two scales) and MXFP8BlockScaling.
TEST(Defaults, RecipeDefaultsAreTransformerEngines) {
  const auto spec = check_ok(
      "recipe d = delayed\nrecipe c = current\nrecipe b = blockwise\nrecipe m = mxfp8\n"
      "layer fc1 = linear { in = 64 out = 64 recipe = blockwise { nan = error } }\n");
  ASSERT_TRUE(spec);
  const std::vector<std::tuple<Fp8Format, Fp8Format, ScaleForm>> expected = {
      {Fp8Format::e4m3, Fp8Format::e5m2, ScaleForm::fp32},
      {Fp8Format::e4m3, Fp8Format::e5m2, ScaleForm::fp32},
      {Fp8Format::e4m3, Fp8Format::e4m3, ScaleForm::pow2},
      {Fp8Format::e4m3, Fp8Format::e4m3, ScaleForm::fp32}};  // mxfp8: E8M0, no scale key
  ASSERT_EQ(spec->recipes.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(spec->recipes[i].name);
    EXPECT_EQ(spec->recipes[i].forward, std::get<0>(expected[i]));
    EXPECT_EQ(spec->recipes[i].backward, std::get<1>(expected[i]));
    EXPECT_EQ(spec->recipes[i].scale, std::get<2>(expected[i]));
    EXPECT_EQ(spec->recipes[i], make_recipe(spec->recipes[i].kind, spec->recipes[i].name));
  }
  // An inline recipe starts from its kind's defaults too.
  EXPECT_EQ(spec->layers[0].recipe.backward, Fp8Format::e4m3);
  EXPECT_EQ(spec->layers[0].recipe.scale, ScaleForm::pow2);
  EXPECT_EQ(spec->layers[0].recipe.nan, NanPolicy::error);
}

TEST(Defaults, BlockRecipeDefaultsCanBeOverridden) {
  const auto spec = check_ok(
      "recipe b = blockwise { backward = e5m2 scale = fp32 }\n"
      "recipe m = mxfp8 { backward = e5m2 }\n"
      "recipe b2 = b { nan = error }\n"
      "layer fc1 = linear { in = 64 out = 64 recipe = b2 }\n");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->recipes[0].backward, Fp8Format::e5m2);
  EXPECT_EQ(spec->recipes[0].scale, ScaleForm::fp32);
  EXPECT_EQ(spec->recipes[1].backward, Fp8Format::e5m2);
  // A refinement starts from the recipe it refines, not from the kind.
  EXPECT_EQ(spec->recipes[2].backward, Fp8Format::e5m2);
  EXPECT_EQ(spec->recipes[2].scale, ScaleForm::fp32);
}

TEST(Defaults, ExplainWritesTheRecipeDefaults) {
  const SourceFile file("t.fp8",
                        "recipe b = blockwise\nrecipe m = mxfp8\nrecipe c = current\n"
                        "layer fc1 = linear { in = 64 out = 64 recipe = b }\n");
  const CheckResult result = check_source(file);
  ASSERT_TRUE(result.spec);
  const std::string text = explain_spec(*result.spec);
  EXPECT_NE(text.find("recipe b = blockwise {\n  forward  = e4m3\n  backward = e4m3\n"
                      "  scale    = pow2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("recipe m = mxfp8 {\n  forward  = e4m3\n  backward = e4m3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("recipe c = current {\n  forward  = e4m3\n  backward = e5m2\n"
                      "  scale    = fp32\n"),
            std::string::npos)
      << text;
}

TEST(Defaults, EverySettingCanBeWritten) {
  const auto spec = check_ok(
      "target = sm_90a\n"
      "recipe r = delayed { forward = e5m2 backward = e4m3 history = 65536 amax = most_recent "
      "margin = 64 nan = error }\n"
      "recipe s = blockwise { scale = pow2 }\n"
      "layer fc1 = linear { in = 2147483632 out = 16 bias = true activation = silu dtype = fp16 "
      "output = fp32 recipe = r save_input = original gemm = generated weight_cache = true "
      "debug = { stats = true fallback = dgrad } }\n"
      "layer fc2 = linear { in = 64 out = 64 recipe = s activation = relu }\n");
  ASSERT_TRUE(spec);
  const Recipe& r = spec->recipes[0];
  EXPECT_EQ(r.forward, Fp8Format::e5m2);
  EXPECT_EQ(r.backward, Fp8Format::e4m3);
  EXPECT_EQ(r.history, 65536u);
  EXPECT_EQ(r.amax, AmaxAlgo::most_recent);
  EXPECT_EQ(r.margin, 64u);
  EXPECT_EQ(r.nan, NanPolicy::error);
  EXPECT_EQ(spec->recipes[1].scale, ScaleForm::pow2);
  const Layer& fc1 = spec->layers[0];
  EXPECT_EQ(fc1.in, 2147483632u);
  EXPECT_TRUE(fc1.bias);
  EXPECT_EQ(fc1.activation, Activation::silu);
  EXPECT_EQ(fc1.dtype, DType::fp16);
  EXPECT_EQ(fc1.output_dtype, DType::fp32);
  EXPECT_EQ(fc1.save_input, SaveInput::original);
  EXPECT_EQ(fc1.gemm, GemmBackend::generated);
  EXPECT_TRUE(fc1.weight_cache);
  EXPECT_FALSE(spec->layers[1].weight_cache);
  EXPECT_TRUE(fc1.debug.stats);
  EXPECT_EQ(fc1.debug.fallback, std::vector<GemmKind>{GemmKind::dgrad});
  EXPECT_EQ(spec->layers[1].activation, Activation::relu);
}

// ------------------------------------------------------------------ input =

TEST(Input, InIsTakenFromTheProducer) {
  const auto spec = check_ok(
      "layer a = linear { in = 64 out = 128 }\n"
      "layer b = linear { input = a out = 32 }\n");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->layers[1].input, "a");
  EXPECT_EQ(spec->layers[1].in, 128u);
}

TEST(Input, ChainsResolveWhateverTheFileOrder) {
  // c <- b <- a, written consumer first: b's `in` must be known before c's.
  const auto spec = check_ok(
      "layer c = linear { input = b out = 16 }\n"
      "layer b = linear { input = a out = 32 }\n"
      "layer a = linear { in = 64 out = 128 }\n");
  ASSERT_TRUE(spec);
  ASSERT_EQ(spec->layers.size(), 3u);
  EXPECT_EQ(spec->layers[0].name, "c");  // file order is kept
  EXPECT_EQ(spec->layers[0].in, 32u);
  EXPECT_EQ(spec->layers[1].in, 128u);
  EXPECT_EQ(spec->layers[2].in, 64u);
}

TEST(Input, AMatchingInIsAccepted) {
  const auto spec = check_ok(
      "layer a = linear { in = 64 out = 128 }\n"
      "layer b = linear { in = 128 input = a out = 32 }\n");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->layers[1].in, 128u);
}

TEST(Input, TwoConsumersShareAProducer) {
  const auto spec = check_ok(
      "layer a = linear { in = 64 out = 128 recipe = current }\n"
      "layer b = linear { input = a out = 32 recipe = current }\n"
      "layer c = linear { input = a out = 16 recipe = delayed }\n");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->layers[1].in, 128u);
  EXPECT_EQ(spec->layers[2].in, 128u);
}

TEST(Input, TensorParallelPairChains) {
  const auto spec = check_ok(
      "layout tp = { tensor_parallel = 4 sequence_parallel = true overlap = bulk }\n"
      "layer up = linear { in = 1024 out = 4096 recipe = current layout = tp column }\n"
      "layer down = linear { input = up out = 1024 recipe = current layout = tp row }\n"
      "layer up2 = linear { input = down out = 4096 recipe = current layout = tp column }\n");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->layers[0].out_per_rank(), 1024u);
  EXPECT_EQ(spec->layers[1].in_per_rank(), 1024u);
  EXPECT_EQ(spec->layers[1].out_per_rank(), 1024u);
  EXPECT_EQ(spec->layers[2].in, 1024u);
}

// ------------------------------------------------------------------ FP8 hand-over

TEST(Fp8Output, IntoOneDelayedConsumerIsHonoured) {
  const std::string text =
      "layer a = linear { in = 64 out = 128 dtype = fp16 recipe = delayed output = fp8 }\n"
      "layer b = linear { input = a out = 64 dtype = fp16 recipe = delayed { history = 4 } "
      "debug = { stats = true fallback = dgrad } }\n"
      "layer c = linear { input = b out = 64 dtype = fp16 recipe = current }\n";
  EXPECT_EQ(check_warnings(text), std::vector<std::string>{});
  const auto spec = check_ok(text);
  ASSERT_TRUE(spec);
  EXPECT_EQ(fp8_output_consumer(*spec, spec->layers[0]), &spec->layers[1]);
  EXPECT_EQ(fp8_output_consumer(*spec, spec->layers[1]), nullptr);  // no output = fp8
  EXPECT_EQ(fp8_output_consumer(*spec, spec->layers[2]), nullptr);
  EXPECT_EQ(spec->layers[0].output_dtype, DType::fp16);
  EXPECT_EQ(spec->layers[1].save_input, SaveInput::fp8);
}

TEST(Fp8Output, NotHonouredIsAWarningThatSaysWhyAndInWhatDtype) {
  const std::string prefix = "output = fp8 is not honoured, so 'a' writes its output in ";
  EXPECT_EQ(check_warnings("layer a = linear { in = 64 out = 64 recipe = delayed output = fp8 }\n"),
            std::vector<std::string>{
                "1:63: warning: " + prefix +
                "bf16: no layer consumes it (FP8 output is for a consumer with recipe delayed)"});
  EXPECT_EQ(
      check_warnings("layer a = linear { in = 64 out = 64 dtype = fp32 recipe = current "
                     "output = fp8 }\nlayer b = linear { input = a out = 64 dtype = fp32 "
                     "recipe = current }\n"),
      std::vector<std::string>{"1:76: warning: " + prefix +
                               "fp32: consumer 'b' uses recipe current, whose input scale comes "
                               "from the tensor's own amax, which is not known before this GEMM "
                               "runs"});
  EXPECT_EQ(check_warnings("layer a = linear { in = 64 out = 64 recipe = delayed output = fp8 }\n"
                           "layer b = linear { input = a out = 64 recipe = blockwise }\n"),
            std::vector<std::string>{
                "1:63: warning: " + prefix +
                "bf16: consumer 'b' uses recipe blockwise, whose block scales are computed from "
                "the data, which does not exist before this GEMM runs"});
  EXPECT_EQ(
      check_warnings("layer a = linear { in = 64 out = 64 recipe = delayed output = fp8 }\n"
                     "layer b = linear { input = a out = 64 recipe = mxfp8 }\n",
                     {Target{100, true}}),
      std::vector<std::string>{"1:63: warning: " + prefix +
                               "bf16: consumer 'b' uses recipe mxfp8, whose block scales are "
                               "computed from the data, which does not exist before this GEMM "
                               "runs"});
  EXPECT_EQ(check_warnings("layer a = linear { in = 64 out = 64 recipe = delayed output = fp8 }\n"
                           "layer b = linear { input = a out = 64 recipe = delayed }\n"
                           "layer c = linear { input = a out = 64 recipe = delayed }\n"
                           "layer d = linear { input = a out = 64 recipe = delayed }\n"),
            std::vector<std::string>{"1:63: warning: " + prefix +
                                     "bf16: layers 'b', 'c' and 'd' all consume it, and one FP8 "
                                     "tensor carries the input scale of one consumer"});
}

TEST(Fp8Output, NotHonouredMeansNoConsumer) {
  const auto spec = check_ok(
      "layer a = linear { in = 64 out = 64 dtype = fp16 recipe = delayed output = fp8 }\n"
      "layer b = linear { input = a out = 64 dtype = fp16 recipe = current save_input = original "
      "debug = { fallback = all } }\n"
      "layer c = linear { in = 64 out = 64 recipe = current output = fp8 }\n"
      "layer d = linear { input = c out = 64 recipe = delayed }\n"
      "layer e = linear { input = c out = 64 recipe = delayed save_input = original }\n");
  ASSERT_TRUE(spec);
  for (const auto& layer : spec->layers) EXPECT_EQ(fp8_output_consumer(*spec, layer), nullptr);
  EXPECT_EQ(spec->layers[0].output_dtype, DType::fp16);
  EXPECT_EQ(spec->layers[2].output_dtype, DType::bf16);
}

TEST(Fp8Output, IntoRecipeNoneIsAnErrorAndNoWarning) {
  EXPECT_EQ(check_errors("layer a = linear { in = 64 out = 64 recipe = delayed output = fp8 }\n"
                         "layer b = linear { input = a out = 64 }\n"),
            (std::vector<std::string>{
                "1:63: error: 'a' hands FP8 output to 'b', whose recipe is none: it has no FP8 "
                "input to take it",
                "2:7: note: 'b' runs in high precision"}));
}

TEST(Fp8Output, TheExamplesAndTheReadmeCheckWithoutWarnings) {
  std::vector<SourceFile> files;
  for (const auto& path : list_files(examples_dir(), ".fp8"))
    files.emplace_back(path, read_file(path));
  // README.md's "The language, in one example": the first ``` block after it.
  const std::string readme = read_file(examples_dir() + "/../README.md");
  const std::size_t section = readme.find("## The language, in one example");
  ASSERT_NE(section, std::string::npos);
  const std::size_t begin = readme.find("```\n", section);
  ASSERT_NE(begin, std::string::npos);
  const std::size_t end = readme.find("```", begin + 4);
  ASSERT_NE(end, std::string::npos);
  files.emplace_back("README.md", readme.substr(begin + 4, end - begin - 4));
  for (const auto& file : files) {
    SCOPED_TRACE(file.path());
    const CheckResult result = check_source(file);
    ASSERT_TRUE(result.spec) << result.diagnostics.render(file);
    EXPECT_TRUE(result.diagnostics.all().empty()) << result.diagnostics.render(file);
  }
}

// ------------------------------------------------------------------ chain dtypes

TEST(ChainDtypes, BackwardNeedsOneDtypeEvenWithFp8Output) {
  // Forward b reads FP8, but backward b's bf16 dX would be a's fp16 dY.
  EXPECT_EQ(check_errors("layer a = linear { in = 64 out = 64 dtype = fp16 recipe = delayed "
                         "output = fp8 }\nlayer b = linear { input = a out = 64 recipe = delayed "
                         "}\n"),
            (std::vector<std::string>{
                "2:7: error: 'b' has dtype bf16 but its input 'a' has dtype fp16: chained layers "
                "share one dtype, since the input gradient of 'b' is the output gradient of 'a'",
                "1:45: note: 'a' sets dtype here"}));
  // Not honoured (current consumer): the same error, and the warning.
  EXPECT_EQ(check_errors("layer a = linear { in = 64 out = 64 recipe = current output = fp8 }\n"
                         "layer b = linear { input = a out = 64 dtype = fp16 recipe = current "
                         "}\n"),
            (std::vector<std::string>{
                "2:47: error: 'b' has dtype fp16 but its input 'a' has dtype bf16: chained layers "
                "share one dtype, since the input gradient of 'b' is the output gradient of 'a'",
                "1:7: note: 'a' has the default dtype bf16",
                "1:63: warning: output = fp8 is not honoured, so 'a' writes its output in bf16: "
                "consumer 'b' uses recipe current, whose input scale comes from the tensor's own "
                "amax, which is not known before this GEMM runs"}));
}

TEST(ChainDtypes, ForwardNeedsTheOutputDtype) {
  EXPECT_EQ(check_errors("layer a = linear { in = 64 out = 64 dtype = fp16 output = fp32 }\n"
                         "layer b = linear { input = a out = 64 dtype = fp16 }\n"),
            (std::vector<std::string>{"2:47: error: 'b' takes fp16 but its input 'a' produces fp32",
                                      "1:59: note: 'a' sets output here"}));
  // A producer whose output dtype is the consumer's but whose dtype is not.
  EXPECT_EQ(check_errors("layer a = linear { in = 64 out = 64 output = fp16 }\n"
                         "layer b = linear { input = a out = 64 dtype = fp16 }\n"),
            (std::vector<std::string>{
                "2:47: error: 'b' has dtype fp16 but its input 'a' has dtype bf16: chained layers "
                "share one dtype, since the input gradient of 'b' is the output gradient of 'a'",
                "1:7: note: 'a' has the default dtype bf16"}));
}

TEST(ChainDtypes, MatchingDtypesChain) {
  const auto spec = check_ok(
      "layer a = linear { in = 64 out = 64 dtype = fp16 recipe = delayed output = fp8 }\n"
      "layer b = linear { input = a out = 64 dtype = fp16 recipe = delayed output = fp16 }\n"
      "layer c = linear { input = b out = 64 dtype = fp16 recipe = current output = fp32 }\n");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->layers[2].output_dtype, DType::fp32);
}

// ------------------------------------------------------------------ FP8 input

// The two specs.
TEST(Fp8Input, SaveInputOriginalIsRejected) {
  EXPECT_EQ(
      check_errors("recipe d = delayed { history = 2 }\n"
                   "layout tp2 = { tensor_parallel = 2 sequence_parallel = true }\n"
                   "layer a = linear { in = 128 out = 128 output = fp8 recipe = d layout = tp2 row "
                   "}\n"
                   "layer b = linear { input = a out = 256 recipe = d layout = tp2 column "
                   "save_input = original }\n"),
      (std::vector<std::string>{
          "4:84: error: save_input = original keeps the high-precision input of 'b', which it "
          "does not have: 'b' takes its input in FP8 from 'a'; use save_input = fp8",
          "3:48: note: 'a' writes its output in FP8 with the input scale of 'b'"}));
}

TEST(Fp8Input, FallbackOfFpropIsRejected) {
  EXPECT_EQ(
      check_errors("recipe d = delayed\n"
                   "layer a = linear { in = 128 out = 256 output = fp8 recipe = d layout = { "
                   "tensor_parallel = 2 } column }\n"
                   "layer b = linear { input = a out = 128 recipe = d layout = { tensor_parallel "
                   "= 2 } row debug = { fallback = fprop } }\n"),
      (std::vector<std::string>{
          "3:96: error: debug fallback of fprop needs the high-precision input of 'b', which it "
          "does not have: 'b' takes its input in FP8 from 'a'; only dgrad may fall back",
          "2:48: note: 'a' writes its output in FP8 with the input scale of 'b'"}));
}

TEST(Fp8Input, FallbackOfWgradAllAndNamedBlocksAreRejected) {
  const std::string chain =
      "layer a = linear { in = 64 out = 64 recipe = delayed output = fp8 }\n"
      "debug inspect = { stats = true fallback = all }\n"
      "debug wg = { fallback = wgrad dgrad }\n";
  const std::string why =
      " needs the high-precision input of 'b', which it does not have: 'b' takes its input in "
      "FP8 from 'a'; only dgrad may fall back";
  const std::string note = "1:63: note: 'a' writes its output in FP8 with the input scale of 'b'";
  EXPECT_EQ(
      check_errors(chain + "layer b = linear { input = a out = 64 recipe = delayed debug = "
                           "inspect }\n"),
      (std::vector<std::string>{"4:64: error: debug fallback of fprop and wgrad" + why, note}));
  EXPECT_EQ(check_errors(chain + "layer b = linear { input = a out = 64 recipe = delayed debug = "
                                 "wg }\n"),
            (std::vector<std::string>{"4:64: error: debug fallback of wgrad" + why, note}));
  EXPECT_EQ(
      check_errors(chain + "layer b = linear { input = a out = 64 recipe = delayed debug = "
                           "{ fallback = all } }\n"),
      (std::vector<std::string>{"4:64: error: debug fallback of fprop and wgrad" + why, note}));
  // A refinement that leaves only dgrad is fine.
  EXPECT_TRUE(check_ok(chain + "layer b = linear { input = a out = 64 recipe = delayed debug = "
                               "inspect { fallback = dgrad } }\n"));
}

TEST(Fp8Input, WhatAnFp8InputAllows) {
  const auto spec = check_ok(
      "layer a = linear { in = 64 out = 64 recipe = delayed output = fp8 }\n"
      "layer b = linear { input = a out = 64 recipe = delayed save_input = fp8 "
      "debug = { stats = true fallback = dgrad } }\n");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->layers[1].debug.fallback, std::vector<GemmKind>{GemmKind::dgrad});
  // The producer's own settings are not limited.
  EXPECT_TRUE(check_ok(
      "layer a = linear { in = 64 out = 64 recipe = delayed output = fp8 save_input = original "
      "debug = { fallback = all } }\nlayer b = linear { input = a out = 64 recipe = delayed }\n"));
}

// ------------------------------------------------------------------ sizes

TEST(Sizes, Mxfp8NeedsMultiplesOf32AndTheOthers16) {
  const CheckOptions sm100{Target{100, true}};
  const std::string tail =
      " is not a multiple of 32, which MXFP8 GEMMs need (their scale blocks are 32 long along "
      "K); pad it, or use another recipe";
  EXPECT_EQ(
      check_errors("layer a = linear { in = 48 out = 80 recipe = mxfp8 }\n", sm100),
      (std::vector<std::string>{"1:25: error: in = 48" + tail, "1:34: error: out = 80" + tail}));
  EXPECT_EQ(check_errors("layer a = linear { in = 64 out = 64 recipe = mxfp8 layout = { "
                         "tensor_parallel = 4 } column }\n",
                         sm100),
            std::vector<std::string>{"1:34: error: out = 64 (16 per rank)" + tail});
  EXPECT_TRUE(
      check_ok("layer a = linear { in = 96 out = 64 recipe = mxfp8 layout = { "
               "tensor_parallel = 2 } column }\n",
               sm100));
  for (const char* recipe : {"delayed", "current", "blockwise"})
    EXPECT_TRUE(check_ok("layer a = linear { in = 48 out = 80 recipe = " + std::string(recipe) +
                         " layout = { tensor_parallel = 5 } column }\n"));
  EXPECT_TRUE(check_ok("layer a = linear { in = 48 out = 40 }\n"));
}

// ------------------------------------------------------------------ recipes

TEST(Recipes, NamedRefinement) {
  const auto spec = check_ok(
      "recipe hybrid = delayed { history = 16 amax = most_recent }\n"
      "recipe strict = hybrid { nan = error }\n"
      "layer fc1 = linear { in = 64 out = 64 recipe = strict }\n"
      "layer fc2 = linear { in = 64 out = 64 recipe = strict { margin = 2 } }\n"
      "layer fc3 = linear { in = 64 out = 64 recipe = hybrid }\n");
  ASSERT_TRUE(spec);
  Recipe hybrid = make_recipe(RecipeKind::delayed, "hybrid");
  hybrid.history = 16;
  hybrid.amax = AmaxAlgo::most_recent;
  Recipe strict = hybrid;
  strict.name = "strict";
  strict.nan = NanPolicy::error;
  ASSERT_EQ(spec->recipes.size(), 2u);
  EXPECT_EQ(spec->recipes[0], hybrid);
  EXPECT_EQ(spec->recipes[1], strict);
  EXPECT_EQ(spec->layers[0].recipe, strict);
  // Refined inline: a copy with one more change, no longer the named recipe.
  Recipe inline_strict = strict;
  inline_strict.name = "";
  inline_strict.margin = 2;
  EXPECT_EQ(spec->layers[1].recipe, inline_strict);
  // Refining never changes the recipe refined.
  EXPECT_EQ(spec->layers[2].recipe, hybrid);
}

TEST(Recipes, ARefinementMayComeBeforeItsBase) {
  const auto spec = check_ok(
      "recipe strict = hybrid { nan = error }\n"
      "recipe hybrid = current { scale = pow2 }\n"
      "layer fc1 = linear { in = 64 out = 64 recipe = strict }\n");
  ASSERT_TRUE(spec);
  ASSERT_EQ(spec->recipes.size(), 2u);
  EXPECT_EQ(spec->recipes[0].name, "strict");  // file order
  EXPECT_EQ(spec->recipes[0].kind, RecipeKind::current);
  EXPECT_EQ(spec->recipes[0].scale, ScaleForm::pow2);
  EXPECT_EQ(spec->recipes[0].nan, NanPolicy::error);
  EXPECT_EQ(spec->recipes[1].nan, NanPolicy::propagate);
}

TEST(Recipes, AnAliasKeepsItsOwnName) {
  const auto spec = check_ok(
      "recipe hybrid = delayed\nrecipe alias = hybrid\n"
      "layer fc1 = linear { in = 64 out = 64 recipe = alias }\n");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->layers[0].recipe.name, "alias");
  EXPECT_EQ(spec->layers[0].recipe.kind, RecipeKind::delayed);
}

TEST(Recipes, AnInlineKindWithAnEmptyBlock) {
  const auto spec =
      check_ok("layer fc1 = linear { in = 64 out = 64 recipe = mxfp8 { } }\n", {Target{100, true}});
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->layers[0].recipe, make_recipe(RecipeKind::mxfp8));
}

// ------------------------------------------------------------------ layouts

TEST(Layouts, InlineLayoutWithMode) {
  const auto spec =
      check_ok("layer fc2 = linear { in = 64 out = 64 layout = { tensor_parallel = 2 } row }\n");
  ASSERT_TRUE(spec);
  const Layer& fc2 = spec->layers[0];
  EXPECT_EQ(fc2.layout, (Layout{"", 2, false, Overlap::none}));
  EXPECT_EQ(fc2.mode, ParallelMode::row);
  EXPECT_EQ(fc2.in_per_rank(), 32u);
  EXPECT_EQ(fc2.out_per_rank(), 64u);
}

TEST(Layouts, NamedLayoutRefinedInline) {
  const auto spec = check_ok(
      "layout tp8 = { tensor_parallel = 8 sequence_parallel = true }\n"
      "layout tp8ring = tp8 { overlap = ring }\n"
      "layer a = linear { in = 64 out = 64 layout = tp8 { overlap = bulk } column }\n"
      "layer b = linear { in = 64 out = 64 layout = tp8ring row }\n");
  ASSERT_TRUE(spec);
  ASSERT_EQ(spec->layouts.size(), 2u);
  EXPECT_EQ(spec->layouts[0], (Layout{"tp8", 8, true, Overlap::none}));
  EXPECT_EQ(spec->layouts[1], (Layout{"tp8ring", 8, true, Overlap::ring}));
  EXPECT_EQ(spec->layers[0].layout, (Layout{"", 8, true, Overlap::bulk}));
  EXPECT_EQ(spec->layers[0].mode, ParallelMode::column);
  EXPECT_EQ(spec->layers[1].layout, spec->layouts[1]);
  EXPECT_EQ(spec->layers[1].mode, ParallelMode::row);
}

TEST(Layouts, ASingleRankLayoutNeedsNoMode) {
  const auto spec = check_ok(
      "layer a = linear { in = 64 out = 64 layout = { overlap = none } }\n"
      "layer b = linear { in = 64 out = 64 layout = row }\n");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->layers[0].mode, ParallelMode::column);
  EXPECT_EQ(spec->layers[1].mode, ParallelMode::row);
  EXPECT_EQ(spec->layers[1].layout, Layout{});
}

// ------------------------------------------------------------------ debug

TEST(Debug, NamedInlineAndOff) {
  const auto spec = check_ok(
      "debug inspect = { stats = true fallback = wgrad fprop }\n"
      "layer a = linear { in = 64 out = 64 recipe = current debug = inspect }\n"
      "layer b = linear { in = 64 out = 64 recipe = current debug = inspect { fallback = all } }\n"
      "layer c = linear { in = 64 out = 64 recipe = current debug = off }\n"
      "layer d = linear { in = 64 out = 64 recipe = current debug = { fallback = none } }\n");
  ASSERT_TRUE(spec);
  const Debug inspect{"inspect", true, {GemmKind::fprop, GemmKind::wgrad}};  // sorted
  ASSERT_EQ(spec->debugs.size(), 1u);
  EXPECT_EQ(spec->debugs[0], inspect);
  EXPECT_EQ(spec->layers[0].debug, inspect);
  EXPECT_EQ(spec->layers[1].debug,
            (Debug{"", true, {GemmKind::fprop, GemmKind::dgrad, GemmKind::wgrad}}));
  EXPECT_EQ(spec->layers[2].debug, Debug{});
  EXPECT_FALSE(spec->layers[2].debug.enabled());
  EXPECT_EQ(spec->layers[3].debug, Debug{});
}

// ------------------------------------------------------------------ target

TEST(Target, EveryKnownTargetParsesAndPrints) {
  for (const char* name :
       {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_120", "sm_120a"}) {
    const auto target = parse_target(name);
    ASSERT_TRUE(target) << name;
    EXPECT_EQ(target->str(), name);
  }
  EXPECT_FALSE(parse_target("sm_91a"));
  EXPECT_FALSE(parse_target("SM_90A"));
  EXPECT_FALSE(parse_target(""));
}

TEST(Target, TheFilesTargetIsRead) {
  const auto spec =
      check_ok("target = sm_89\nlayer a = linear { in = 64 out = 64 recipe = current }\n");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->target, (Target{89, false}));
}

TEST(Target, TheOptionOverridesTheFile) {
  // The file's sm_80 cannot run FP8; checked for sm_90a it is fine.
  const std::string text =
      "target = sm_80\nlayer a = linear { in = 64 out = 64 recipe = current }\n";
  EXPECT_EQ(check_errors(text).size(), 2u);  // the error and a note at the target
  const auto spec = check_ok(text, {Target{90, true}});
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->target, (Target{90, true}));
  // And the other way round.
  EXPECT_EQ(check_errors("layer a = linear { in = 64 out = 64 recipe = blockwise }\n",
                         {Target{89, false}}),
            std::vector<std::string>{
                "1:46: error: blockwise scaling needs sm_90 or newer; the target is sm_89"});
}

TEST(Target, Mxfp8IsNativeFromSm100) {
  const SourceFile file("t.fp8",
                        "target = sm_100a\nlayer a = linear { in = 64 out = 64 recipe = mxfp8 }\n");
  const CheckResult result = check_source(file);
  ASSERT_TRUE(result.spec);
  EXPECT_TRUE(result.diagnostics.all().empty()) << result.diagnostics.render(file);
}

// ------------------------------------------------------------------ grammar corners

TEST(Grammar, TargetMayFollowAValueThatEndsInAWord) {
  const auto spec = check_ok(
      "recipe r = delayed\ntarget = sm_89\nlayer fc1 = linear { in = 64 out = 64 recipe = r }\n");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->target.sm, 89u);
  EXPECT_EQ(spec->recipes[0].kind, RecipeKind::delayed);
}

TEST(Grammar, ALayerMayBeNamedTarget) {
  const auto spec =
      check_ok("recipe r = delayed\nlayer target = linear { in = 64 out = 64 recipe = r }\n");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->layers[0].name, "target");
}

TEST(Grammar, DeclarationsMayShareALine) {
  const auto spec = check_ok(
      "recipe r = current layout l = { tensor_parallel = 2 } layer a = linear { in = 64 out = 64 "
      "recipe = r layout = l column } layer b = linear { input = a out = 64 recipe = r layout = l "
      "row } target = sm_90a");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->layers.size(), 2u);
  EXPECT_EQ(spec->layers[1].in, 64u);
}

TEST(Grammar, NamesMayHoldDigitsAndUnderscores) {
  const auto spec = check_ok("layer _blk0_fc_1 = linear { in = 64 out = 64 }\n");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->layers[0].name, "_blk0_fc_1");
}

TEST(Grammar, CommentsAndBlankLinesAnywhere) {
  const auto spec = check_ok(
      "# top\n\n\nlayer # after kind\n fc1 # after name\n = # after '='\n linear # after kind\n"
      " { # after brace\n in # k\n = # e\n 64 # v\n\n out = 64 } # end");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->layers[0].in, 64u);
}

// ------------------------------------------------------------------ the report

TEST(Report, DidYouMeanOnATypo) {
  EXPECT_EQ(
      check_errors("recipe r = delayed { hsitory = 16 }\nlayer a = linear { in = 64 out = 64 }\n"),
      std::vector<std::string>{
          "1:22: error: unknown key 'hsitory' in a delayed recipe, did you mean 'history'?"});
  // Case is ignored when looking for the closest word.
  EXPECT_EQ(check_errors("layer a = linear { in = 64 out = 64 Bias = true }\n"),
            std::vector<std::string>{
                "1:37: error: unknown key 'Bias' in layer 'a', did you mean 'bias'?"});
  // Nothing close: no guess.
  EXPECT_EQ(check_errors("layer a = linear { in = 64 out = 64 weight_decay = 1 }\n"),
            std::vector<std::string>{"1:37: error: unknown key 'weight_decay' in layer 'a'"});
}

TEST(Report, AllErrorsOfOneFileAreReported) {
  const auto errors = check_errors(
      "layer a = linear { in = 64 out = 64 activation = gleu dtype = bf17 output = fp9 }\n");
  EXPECT_EQ(errors, (std::vector<std::string>{
                        "1:50: error: unknown activation 'gleu', did you mean 'gelu'?",
                        "1:63: error: unknown dtype 'bf17', did you mean 'bf16'?",
                        "1:77: error: unknown output type 'fp9', did you mean 'fp8'?"}));
}

std::string fifty_unknown_keys() {
  std::string text;
  for (int i = 0; i < 50; ++i)
    text += "layer l" + std::to_string(i) + " = linear { in = 64 out = 64 bogus = 1 }\n";
  return text;
}

TEST(Report, TheErrorLimitShowsTwentyAndCountsTheRest) {
  const std::string text = fifty_unknown_keys();
  const SourceFile file("fifty.fp8", text);
  const CheckResult result = check_source(file);
  EXPECT_EQ(result.diagnostics.error_count(), 50u);
  EXPECT_EQ(result.diagnostics.all().size(), 20u);
  const std::string rendered = result.diagnostics.render(file);
  const auto lines = split_lines(rendered);
  ASSERT_EQ(lines.size(), 20u * 3 + 1);
  EXPECT_EQ(lines[57], "fifty.fp8:20:39: error: unknown key 'bogus' in layer 'l19'");
  EXPECT_EQ(lines.back(), "fifty.fp8: 30 more errors not shown (limit 20)");

  const std::string path = scratch_dir("error_limit") + "/fifty.fp8";
  write_file(path, text);
  const CommandResult run = run_fp8c({"check", path});
  EXPECT_EQ(run.status, 1);
  const auto command_lines = split_lines(run.err);
  ASSERT_EQ(command_lines.size(), 61u) << run.err;
  EXPECT_EQ(command_lines.back(), path + ": 30 more errors not shown (limit 20)");
}

TEST(Report, TheErrorLimitCountsSyntaxErrorsToo) {
  std::string text;
  for (int i = 0; i < 50; ++i) text += "layer l" + std::to_string(i) + " = linear { in 64 }\n";
  const SourceFile file("syntax.fp8", text);
  const CheckResult result = check_source(file);
  EXPECT_EQ(result.diagnostics.error_count(), 50u);
  EXPECT_EQ(result.diagnostics.all().size(), 20u);
  EXPECT_EQ(split_lines(result.diagnostics.render(file)).back(),
            "syntax.fp8: 30 more errors not shown (limit 20)");
}

TEST(Report, NotesOfHiddenErrorsAreHiddenToo) {
  std::string text;
  for (int i = 0; i < 51; ++i) text += "layer a = linear { in = 64 out = 64 }\n";
  const SourceFile file("dup.fp8", text);
  const CheckResult result = check_source(file);
  EXPECT_EQ(result.diagnostics.error_count(), 50u);
  // 20 errors, each with the note that points at the first 'a'.
  ASSERT_EQ(result.diagnostics.all().size(), 40u);
  EXPECT_EQ(result.diagnostics.all().back().severity, Severity::note);
  EXPECT_EQ(describe(file, result.diagnostics.all()[38]),
            "21:7: error: there is already a layer named 'a'");
}

TEST(Report, ALongLineIsShownAsAWindowAroundTheCaret) {
  const std::string line =
      "layer a = linear { in = 64 out = 64 " + std::string(300, ' ') + "bias = maybe }";
  const SourceFile file("long.fp8", line + "\n");
  const CheckResult result = check_source(file);
  ASSERT_EQ(result.diagnostics.all().size(), 1u);
  const auto lines = split_lines(result.diagnostics.render(file));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "long.fp8:1:344: error: bias must be true or false, found 'maybe'");
  const std::size_t start = 343 - 80;
  EXPECT_EQ(lines[1], "  ..." + line.substr(start, 160));
  EXPECT_EQ(lines[2], std::string(2 + 3 + 80, ' ') + "^~~~~");
}

TEST(Report, WarningsLeaveTheSpec) {
  const SourceFile file("w.fp8",
                        "layout sp = { sequence_parallel = true }\nlayer a = linear { in = 64 out "
                        "= 64 layout = sp }\n");
  const CheckResult result = check_source(file);
  ASSERT_TRUE(result.spec);
  EXPECT_EQ(describe_all(file, result.diagnostics),
            std::vector<std::string>{
                "2:46: warning: sequence_parallel = true has no effect with tensor_parallel = 1"});
}

// ------------------------------------------------------------------ load_spec

TEST(LoadSpec, ReturnsTheSpecOrThrowsTheRenderedReport) {
  const std::string dir = scratch_dir("load_spec");
  write_file(dir + "/good.fp8", "layer a = linear { in = 64 out = 64 }\n");
  EXPECT_EQ(load_spec(dir + "/good.fp8").layers.size(), 1u);

  const std::string bad_text = "layer a = linear { in = 64 }\n";
  write_file(dir + "/bad.fp8", bad_text);
  try {
    load_spec(dir + "/bad.fp8");
    FAIL() << "no SpecError";
  } catch (const SpecError& e) {
    const SourceFile file(dir + "/bad.fp8", bad_text);
    EXPECT_EQ(std::string(e.what()), check_source(file).diagnostics.render(file));
    EXPECT_EQ(
        std::string(e.what()).rfind(dir + "/bad.fp8:1:7: error: layer 'a' needs `out = N`\n", 0),
        0u);
  }

  try {
    load_spec(dir + "/missing.fp8");
    FAIL() << "no exception";
  } catch (const SpecError&) {
    FAIL() << "a missing file is not a SpecError";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/missing.fp8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp8c::test
