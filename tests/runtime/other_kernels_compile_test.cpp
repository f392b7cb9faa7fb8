// The transpose, permute and scale-update kernels compile with NVRTC for
// sm_90a with no register spills (no GPU needed, so this runs in CI), and
// plans map their steps to these kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "codegen/lower/lowered.hpp"
#include "codegen/plan/planner.hpp"
#include "compile_check.hpp"
#include "fp8c/dsl.hpp"
#include "other_kernel_variants.hpp"
#include "runtime/jit.hpp"
#include "tests/test_paths.hpp"

namespace fp8c::runtime {
namespace {

TEST(OtherKernelsCompile, EveryVariantCompilesWithoutSpills) {
  std::vector<KernelSource> sources;
  std::set<std::string> names;
  for (const auto& k : testing::other_kernel_variants()) {
    sources.push_back(emit_cuda(k));
    EXPECT_TRUE(names.insert(k.name()).second) << "two variants named " << k.name();
    EXPECT_EQ(sources.back().source.find("#include"), std::string::npos)
        << k.name() << " must be self-contained";
    EXPECT_EQ(sources.back().entry, k.name());
  }
  testing::expect_compiles_without_spills(sources, "fp8c-other-kernels-compile-test");
}

TEST(OtherKernelsCompile, ScaleUpdateDividesWithIeeeDivisionOnly) {
  // The divisions must be div.rn.f32 whatever the compiler flags; no
  // approximate reciprocal or fast-math helper may appear.
  for (const auto& k : testing::scale_update_variants()) {
    const std::string s = emit_cuda(k).source;
    EXPECT_NE(s.find("div.rn.f32"), std::string::npos) << k.name();
    EXPECT_EQ(s.find("__fdividef"), std::string::npos) << k.name();
    EXPECT_EQ(s.find("rcp.approx"), std::string::npos) << k.name();
  }
}

TEST(OtherKernelsCompile, BadDescriptionsAreRejected) {
  EXPECT_THROW(emit_cuda(PermuteKernel{3}), std::invalid_argument);
  EXPECT_THROW(emit_cuda(ScaleUpdateKernel{}), std::invalid_argument);
  EXPECT_THROW(emit_cuda(ScaleUpdateKernel{{ElemType::e4m3}, 0, 0, AmaxAlgo::max}),
               std::invalid_argument);
  EXPECT_THROW(emit_cuda(ScaleUpdateKernel{{ElemType::e4m3}, 4, 101, AmaxAlgo::max}),
               std::invalid_argument);
  EXPECT_THROW(emit_cuda(ScaleUpdateKernel{{ElemType::e4m3, ElemType::fp32}, 4, 0, AmaxAlgo::max}),
               std::invalid_argument);
}

// Every example's plan at 1, 2 and 8 ranks: transpose, permute and
// scale_update steps all have kernels now, never "not generated".
TEST(OtherKernelsCompile, PlansMapTransposePermuteAndScaleUpdateStepsToKernels) {
  std::set<std::string> kinds;
  for (const auto& entry : std::filesystem::directory_iterator(::fp8c::testing::examples_dir())) {
    if (entry.path().extension() != ".fp8") continue;
    const Spec spec = load_spec(entry.path().string());
    for (std::uint32_t ranks : {1u, 2u, 8u}) {
      Plan plan;
      try {
        plan = plan_spec(spec, {ranks, 1024});
      } catch (const PlanError&) {
        continue;  // this example does not split over that many ranks
      }
      const LoweredPlan kernels = lower_plan(spec, plan);
      for (const auto& p : kernels.kernels) kinds.insert(p.kernel.name().substr(0, 9));
    }
  }
  EXPECT_TRUE(kinds.count("transpose")) << "no example plan needs a transpose";
  EXPECT_TRUE(kinds.count("scale_upd")) << "no example plan needs a scale update";
}

}  // namespace
}  // namespace fp8c::runtime
