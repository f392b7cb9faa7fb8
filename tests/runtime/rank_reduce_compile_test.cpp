// The single-GPU group's kernels (every rank_reduce variant and rank_copy)
// compile with NVRTC for sm_90a without register spills. No GPU needed, so
// this runs in CI; the GPU tests check what they compute.
#include <gtest/gtest.h>

#include <set>

#include "codegen/kernels/rank_copy.hpp"
#include "codegen/kernels/rank_reduce.hpp"
#include "collectives/device/rank_kernels.hpp"
#include "compile_check.hpp"
#include "runtime/jit.hpp"

namespace fp8c::runtime {
namespace {

std::vector<KernelSource> all_sources() {
  std::vector<KernelSource> sources;
  for (const auto& k : all_rank_reduce_kernels()) sources.push_back(emit_cuda(k));
  sources.push_back(emit_cuda(RankCopyKernel{}));
  return sources;
}

TEST(RankReduceKernels, EveryVariantIsSelfContainedAndNamedOnce) {
  std::set<std::string> names;
  for (const auto& s : all_sources()) {
    EXPECT_TRUE(names.insert(s.name).second) << "two kernels named " << s.name;
    EXPECT_EQ(s.entry, s.name);
    EXPECT_EQ(s.source.find("#include"), std::string::npos) << s.name << " must be self-contained";
  }
  EXPECT_EQ(names.size(), 13u);  // 6 element types x {sum, max} + copy
  EXPECT_TRUE(names.count("rank_reduce_sum_bf16"));
  EXPECT_TRUE(names.count("rank_reduce_max_f16"));
}

TEST(RankReduceKernels, EveryVariantCompilesForSm90aWithoutSpills) {
  testing::expect_compiles_without_spills(all_sources(), "fp8c-rank-reduce-compile-test");
}

TEST(RankReduceKernels, ReductionsUseExplicitlyRoundedAddsOnly) {
  // -fmad or a fast-math helper must never change a sum: every float add is
  // __fadd_rn/__dadd_rn, and there is nothing to contract.
  for (const auto& k : all_rank_reduce_kernels()) {
    const std::string s = emit_cuda(k).source;
    if (k.op == RankReduceOp::sum && (k.element == ElemType::fp32 || k.element == ElemType::bf16 ||
                                      k.element == ElemType::fp16)) {
      EXPECT_NE(s.find("__fadd_rn"), std::string::npos) << k.name();
    }
    if (k.op == RankReduceOp::sum && k.element == ElemType::fp64) {
      EXPECT_NE(s.find("__dadd_rn"), std::string::npos) << k.name();
    }
    EXPECT_EQ(s.find("__fmaf"), std::string::npos) << k.name();
  }
}

TEST(RankReduceKernels, Fp8IsNeverReduced) {
  EXPECT_THROW(rank_reduce_kernel(ElemType::e4m3, collectives::ReduceOp::kSum),
               std::invalid_argument);
  EXPECT_THROW(rank_reduce_kernel(ElemType::e5m2, collectives::ReduceOp::kMax),
               std::invalid_argument);
  EXPECT_THROW(rank_reduce_kernel(ElemType::e8m0, collectives::ReduceOp::kMax),
               std::invalid_argument);
  EXPECT_THROW(emit_cuda(RankReduceKernel{ElemType::e4m3, RankReduceOp::sum}),
               std::invalid_argument);
  EXPECT_EQ(rank_reduce_kernel(ElemType::bf16, collectives::ReduceOp::kMax).name(),
            "rank_reduce_max_bf16");
}

// Kernel names keep their f32/f16/f64 spelling (ElemType says fp32, ...):
// they are entry points in validated sources and part of cache keys.
TEST(RankReduceKernels, NamesKeepTheirElementSpelling) {
  std::vector<std::string> names;
  for (const auto& k : all_rank_reduce_kernels()) names.push_back(k.name());
  EXPECT_EQ(names, (std::vector<std::string>{
                       "rank_reduce_sum_f32", "rank_reduce_max_f32", "rank_reduce_sum_bf16",
                       "rank_reduce_max_bf16", "rank_reduce_sum_f16", "rank_reduce_max_f16",
                       "rank_reduce_sum_f64", "rank_reduce_max_f64", "rank_reduce_sum_i32",
                       "rank_reduce_max_i32", "rank_reduce_sum_u8", "rank_reduce_max_u8"}));
}

}  // namespace
}  // namespace fp8c::runtime
