// The kernels built as kernel IR (transposes, permutes), printed for the
// host by the CUDA printer (the same printer NVRTC's source comes from),
// run on the CPU (cuda_host.hpp) against the CPU reference byte for byte:
// the transposes' vector fast path and edge path, batches of word
// matrices, the permutes' every unit width, pointers misaligned where the
// kernels allow it, threads in several orders, shared memory poisoned
// before each block and guards around each output.

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "codegen/kernels/permute.hpp"
#include "codegen/kernels/transpose.hpp"
#include "cuda_host.hpp"
#include "guarded_buffer.hpp"
#include "runtime/reference/permute_reference.hpp"
#include "runtime/reference/transpose_reference.hpp"

namespace fp8c::emulation {

#include "ir_kernels_emulated.inc"

namespace {

struct Case {
  int element_bytes, rows, cols, batch;
  Order order;
  std::size_t misalign = 0;
};

std::string describe(const Case& c) {
  static const char* const orders[] = {"forward", "backward", "shuffled"};
  return std::to_string(c.element_bytes) + "-byte " + std::to_string(c.rows) + "x" +
         std::to_string(c.cols) + " batch " + std::to_string(c.batch) + ", threads " +
         orders[static_cast<int>(c.order)] +
         (c.misalign ? ", misaligned by " + std::to_string(c.misalign) : "");
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << describe(c);
}

const EmulatedTranspose& kernel_for(int element_bytes) {
  for (const auto& k : kEmulatedTransposes)
    if (k.element_bytes == element_bytes) return k;
  throw std::invalid_argument("no emulated transpose of " + std::to_string(element_bytes));
}

class TransposeEmulation : public ::testing::TestWithParam<Case> {};

TEST_P(TransposeEmulation, MatchesReferenceBitForBit) {
  const Case c = GetParam();
  SCOPED_TRACE(describe(c));
  const std::size_t one = static_cast<std::size_t>(c.rows) * c.cols * c.element_bytes;
  const std::size_t n = one * static_cast<std::size_t>(c.batch);
  std::mt19937 rng(static_cast<unsigned>(c.rows * 977 + c.cols * 31 + c.batch));
  std::uniform_int_distribution<int> byte(0, 255);
  Buffer in(n, c.misalign, 0), out(n, c.misalign, 0xCD);
  for (std::size_t i = 0; i < n; ++i) in.data()[i] = static_cast<unsigned char>(byte(rng));
  std::vector<std::uint8_t> want;
  for (int b = 0; b < c.batch; ++b) {
    const auto part =
        runtime::reference_transpose(in.data() + b * one, c.rows, c.cols, c.element_bytes);
    want.insert(want.end(), part.begin(), part.end());
  }
  const int tile = transpose_tile(c.element_bytes);
  const Dim3 grid{static_cast<unsigned>((c.cols + tile - 1) / tile),
                  static_cast<unsigned>((c.rows + tile - 1) / tile),
                  static_cast<unsigned>(c.batch)};
  const EmulatedTranspose& kernel = kernel_for(c.element_bytes);
  run_grid(
      grid, kTransposeThreads, c.order, 17,
      [&] { kernel.run(in.data(), out.data(), c.rows, c.cols); }, kernel.poison_shared);
  check_bytes(out.contents(), want, "transposed");
  EXPECT_TRUE(out.guards_intact()) << "a write outside the output";
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (Order order : {Order::forward, Order::backward, Order::shuffled}) {
    // Bytes: whole 128x128 tiles (the vector path), partial tiles, shapes
    // not multiples of 16 (the edge path, also from misaligned addresses).
    all.push_back({1, 128, 256, 1, order});
    all.push_back({1, 144, 272, 1, order});
    all.push_back({1, 256, 16, 1, order});
    all.push_back({1, 17, 33, 1, order, 3});
    all.push_back({1, 1, 1, 1, order, 1});
    all.push_back({1, 130, 131, 1, order, 5});
    // Words: one matrix and batches, edges on both sides.
    all.push_back({4, 33, 31, 1, order});
    all.push_back({4, 100, 3, 3, order, 4});
    all.push_back({4, 64, 40, 2, order});
  }
  return all;
}

std::string test_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  static const char* const orders[] = {"forward", "backward", "shuffled"};
  return "u" + std::to_string(8 * c.element_bytes) + "_" + std::to_string(c.rows) + "x" +
         std::to_string(c.cols) + "_b" + std::to_string(c.batch) + "_" +
         orders[static_cast<int>(c.order)] +
         (c.misalign ? "_off" + std::to_string(c.misalign) : "");
}

INSTANTIATE_TEST_SUITE_P(Cases, TransposeEmulation, ::testing::ValuesIn(cases()), test_name);

struct PermuteCase {
  int element_bytes, ranks, outer;
  long long inner_local;
  Order order;
};

void PrintTo(const PermuteCase& c, std::ostream* os) {
  *os << c.element_bytes << "-byte ranks " << c.ranks << " outer " << c.outer << " inner "
      << c.inner_local << " order " << static_cast<int>(c.order);
}

class PermuteEmulation : public ::testing::TestWithParam<PermuteCase> {};

// Each unit width (16, 8, 4, 2, 1 bytes, chosen by the segment's byte
// length) and more units than one round of threads moves.
TEST_P(PermuteEmulation, MatchesReferenceBitForBit) {
  const PermuteCase c = GetParam();
  const std::size_t n =
      static_cast<std::size_t>(c.ranks) * c.outer * c.inner_local * c.element_bytes;
  std::mt19937 rng(static_cast<unsigned>(c.ranks * 7 + c.outer * 131 + c.inner_local));
  std::uniform_int_distribution<int> byte(0, 255);
  Buffer in(n, 0, 0), out(n, 0, 0xCD);
  for (std::size_t i = 0; i < n; ++i) in.data()[i] = static_cast<unsigned char>(byte(rng));
  const auto want =
      runtime::reference_permute(in.data(), c.element_bytes, c.ranks, c.outer, c.inner_local);
  const EmulatedPermute* kernel = nullptr;
  for (const auto& k : kEmulatedPermutes)
    if (k.element_bytes == c.element_bytes) kernel = &k;
  ASSERT_NE(kernel, nullptr);
  run_grid({static_cast<unsigned>(c.outer), 1, 1}, kPermuteThreads, c.order, 5,
           [&] { kernel->run(in.data(), out.data(), c.ranks, c.outer, c.inner_local); });
  check_bytes(out.contents(), want, "permuted");
  EXPECT_TRUE(out.guards_intact()) << "a write outside the output";
}

std::vector<PermuteCase> permute_cases() {
  std::vector<PermuteCase> all;
  for (Order order : {Order::forward, Order::shuffled})
    for (int e : {1, 2, 4})
      for (auto [ranks, outer, inner] : {std::tuple<int, int, long long>{1, 1, 1},
                                         {2, 3, 16},
                                         {4, 2, 8},
                                         {3, 2, 4},
                                         {2, 2, 3},
                                         {8, 2, 1000},
                                         {4, 1, 4097}})
        all.push_back({e, ranks, outer, inner, order});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Cases, PermuteEmulation, ::testing::ValuesIn(permute_cases()));

}  // namespace
}  // namespace fp8c::emulation
