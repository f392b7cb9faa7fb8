#include "collectives/device/rank_kernels.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace fp8c::runtime {
namespace {

using collectives::ReduceOp;

// Every reducible element type, in the order all_rank_reduce_kernels() lists them.
constexpr ElemType kElements[] = {ElemType::fp32, ElemType::bf16, ElemType::fp16,
                                  ElemType::fp64, ElemType::i32,  ElemType::u8};
constexpr RankReduceOp kOps[] = {RankReduceOp::sum, RankReduceOp::max};

// Enough blocks to fill an H200 several times over; the kernels grid-stride
// past that.
constexpr std::uint64_t kMaxBlocksX = 1024;

unsigned blocks_for(std::uint64_t items, unsigned threads) {
  return static_cast<unsigned>(
      std::min<std::uint64_t>((items + threads - 1) / threads, kMaxBlocksX));
}

void require_count(int value, const char* what) {
  if (value < 1 || value > kRankMaxRanks) {
    throw std::invalid_argument(std::string("rank kernels: ") + what + " " + std::to_string(value) +
                                " is outside 1.." + std::to_string(kRankMaxRanks));
  }
}

}  // namespace

RankReduceKernel rank_reduce_kernel(ElemType dtype, ReduceOp op) {
  if (!collectives::is_reducible(dtype))
    throw std::invalid_argument("rank reduction: " + std::string(to_string(dtype)) +
                                " is never reduced");
  return {dtype, op == ReduceOp::kMax ? RankReduceOp::max : RankReduceOp::sum};
}

std::vector<RankReduceKernel> all_rank_reduce_kernels() {
  std::vector<RankReduceKernel> all;
  for (const ElemType element : kElements)
    for (const RankReduceOp op : kOps) all.push_back({element, op});
  return all;
}

RankKernels::RankKernels(const Jit& jit) {
  const std::vector<RankReduceKernel> reductions = all_rank_reduce_kernels();
  std::vector<KernelSource> sources;
  for (const auto& k : reductions) sources.push_back(emit_cuda(k));
  sources.push_back(emit_cuda(RankCopyKernel{}));
  std::vector<CompiledKernel> compiled = jit.compile_all(sources);
  const auto load = [](CompiledKernel&& kernel) {
    Module module(kernel.cubin);
    const CUfunction function = module.function(kernel.entry);
    return Loaded{std::move(kernel), std::move(module), function};
  };
  reduce_.reserve(reductions.size());
  for (std::size_t i = 0; i < reductions.size(); ++i)
    reduce_.push_back(load(std::move(compiled[i])));
  copy_.push_back(load(std::move(compiled.back())));
}

void RankKernels::reduce(ElemType dtype, ReduceOp op, const RankPointerTable& inputs, int ranks,
                         std::uint64_t input_stride, const RankPointerTable& outputs,
                         int output_count, std::uint64_t count, CUstream stream) const {
  require_count(ranks, "input count");
  require_count(output_count, "output count");
  if (count == 0) return;
  const RankReduceKernel wanted = rank_reduce_kernel(dtype, op);
  const std::vector<RankReduceKernel> all = all_rank_reduce_kernels();
  const auto index =
      static_cast<std::size_t>(std::find(all.begin(), all.end(), wanted) - all.begin());
  unsigned long long stride = input_stride, elements = count;
  void* args[] = {const_cast<RankPointerTable*>(&inputs), &ranks, &stride,
                  const_cast<RankPointerTable*>(&outputs), &elements};
  LaunchShape shape;
  shape.grid[0] = blocks_for(count, kRankReduceThreads);
  shape.grid[1] = static_cast<unsigned>(output_count);
  shape.block[0] = kRankReduceThreads;
  launch(reduce_.at(index).function, shape, stream, args);
}

void RankKernels::copy(const RankPointerTable& sources, int source_count,
                       const RankPointerTable& destinations, int destination_count,
                       std::uint64_t bytes, std::uint64_t destination_stride,
                       CUstream stream) const {
  require_count(source_count, "source count");
  require_count(destination_count, "destination count");
  if (bytes == 0) return;
  unsigned long long length = bytes, stride = destination_stride;
  void* args[] = {const_cast<RankPointerTable*>(&sources),
                  const_cast<RankPointerTable*>(&destinations), &length, &stride};
  LaunchShape shape;
  // Enough threads for the widest unit; narrower units grid-stride.
  shape.grid[0] = blocks_for((bytes + 15) / 16, kRankCopyThreads);
  shape.grid[1] = static_cast<unsigned>(destination_count);
  shape.grid[2] = static_cast<unsigned>(source_count);
  shape.block[0] = kRankCopyThreads;
  launch(copy_.front().function, shape, stream, args);
}

}  // namespace fp8c::runtime
