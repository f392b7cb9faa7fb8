// The transpose, permute and scale-update kernels on the GPU against their
// CPU references, bit for bit, on random inputs (every one of the 256 FP8
// codes, NaNs included), shapes that are not multiples of anything, and
// outputs poisoned before each run. Skipped, visibly, where there is no GPU.

#include <gtest/gtest.h>

#include "gpu_fixture.hpp"

#include <bit>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <random>

#include "other_kernel_variants.hpp"
#include "runtime/kernel_launchers.hpp"
#include "runtime/reference/permute_reference.hpp"
#include "runtime/reference/scale_update_reference.hpp"
#include "runtime/reference/transpose_reference.hpp"

namespace fp8c {
void PrintTo(const ScaleUpdateKernel& k, std::ostream* os) {
  *os << k.name();
}
}  // namespace fp8c

namespace fp8c::runtime {
namespace {

constexpr unsigned char kPoison = 0xCD;

using testing::gpu;

// Random bytes in which each of the 256 codes (every FP8 NaN and Inf among
// them) appears at least once when there is room.
std::vector<std::uint8_t> random_bytes(std::size_t n, std::mt19937& rng) {
  std::vector<std::uint8_t> bytes(n);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : bytes) b = static_cast<std::uint8_t>(byte(rng));
  for (std::size_t i = 0; i < std::min<std::size_t>(n, 256); ++i)
    bytes[(i * 7919) % n] = static_cast<std::uint8_t>(i);
  return bytes;
}

DeviceBuffer upload(const std::vector<std::uint8_t>& host) {
  DeviceBuffer b(std::max<std::size_t>(host.size(), 1));
  if (!host.empty()) b.upload(host.data(), host.size());
  return b;
}

std::vector<std::uint8_t> download(const DeviceBuffer& b, std::size_t bytes) {
  std::vector<std::uint8_t> host(bytes);
  if (bytes) b.download(host.data(), bytes);
  return host;
}

// Index of the first differing byte, or -1.
std::int64_t first_difference(const std::vector<std::uint8_t>& a,
                              const std::vector<std::uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<std::int64_t>(i);
  return -1;
}

std::size_t differing_bytes(const std::vector<std::uint8_t>& a,
                            const std::vector<std::uint8_t>& b) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += a[i] != b[i];
  return n;
}

struct Shape {
  int rows, cols;
};

// Both backends build the transposes (kernel IR): each case runs on each,
// against the same reference on the same inputs.
const auto kBackends = ::testing::Values(KernelBackend::nvrtc, KernelBackend::llvm);

std::string backend_name(KernelBackend b) {
  return b == KernelBackend::llvm ? "llvm" : "nvrtc";
}

// `in` and `out` `offset` bytes into their buffers (a misaligned view when
// offset is not a multiple of 16).
std::vector<std::uint8_t> run_byte_transpose(const TransposeLauncher& launcher,
                                             const std::vector<std::uint8_t>& in, int rows,
                                             int cols, std::size_t offset) {
  const std::size_t n = in.size();
  std::vector<std::uint8_t> staged(offset, kPoison);
  staged.insert(staged.end(), in.begin(), in.end());
  DeviceBuffer din = upload(staged), dout(n + offset);
  dout.fill(kPoison);
  Stream stream;
  launcher.launch(din.get() + offset, dout.get() + offset, rows, cols, stream.get());
  stream.synchronize();
  auto all = download(dout, n + offset);
  for (std::size_t i = 0; i < offset; ++i)
    EXPECT_EQ(all[i], kPoison) << "byte " << i << " before the output was written";
  return {all.begin() + static_cast<std::ptrdiff_t>(offset), all.end()};
}

class TransposeGpu : public ::testing::TestWithParam<std::tuple<Shape, KernelBackend>> {};

TEST_P(TransposeGpu, MatchesReferenceBitForBit) {
  const auto [s, backend] = GetParam();
  REQUIRE_GPU_AND_BACKEND(backend);
  const TransposeLauncher launcher(gpu().jit_for(backend));
  std::mt19937 rng(static_cast<unsigned>(s.rows * 131 + s.cols));
  const std::size_t n = static_cast<std::size_t>(s.rows) * s.cols;
  const auto in = random_bytes(n, rng);
  const auto want = reference_transpose(in.data(), s.rows, s.cols);
  // Shapes the vector path cannot take run from misaligned addresses too.
  const bool vectors = s.rows % 16 == 0 && s.cols % 16 == 0;
  for (std::size_t offset : {std::size_t{0}, vectors ? std::size_t{0} : std::size_t{3}}) {
    const auto got = run_byte_transpose(launcher, in, s.rows, s.cols, offset);
    const std::int64_t at = first_difference(got, want);
    EXPECT_EQ(at, -1) << s.rows << "x" << s.cols << " at offset " << offset
                      << ": first difference at output byte " << at << " (column " << at / s.rows
                      << ", row " << at % s.rows << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TransposeGpu,
    ::testing::Combine(::testing::Values(Shape{1, 1}, Shape{17, 33}, Shape{128, 256},
                                         Shape{4095, 8191}, Shape{4096, 8192}, Shape{144, 272},
                                         Shape{1, 4096}, Shape{4096, 1}, Shape{256, 16}),
                       kBackends),
    [](const auto& info) {
      const Shape s = std::get<0>(info.param);
      return std::to_string(s.rows) + "x" + std::to_string(s.cols) + "_" +
             backend_name(std::get<1>(info.param));
    });

// The LLVM and NVRTC builds of each transpose agree with each other, byte
// for byte, on the same input (not only each with the reference).
TEST(TransposeGpu, LlvmBuildEqualsNvrtcBuild) {
  REQUIRE_GPU_AND_BACKEND(KernelBackend::llvm);
  const TransposeLauncher nvrtc(gpu().jit_for(KernelBackend::nvrtc));
  const TransposeLauncher llvm(gpu().jit_for(KernelBackend::llvm));
  EXPECT_EQ(llvm.compiled().compiler.rfind("llvm ", 0), 0u) << llvm.compiled().compiler;
  EXPECT_EQ(nvrtc.compiled().compiler.rfind("nvrtc ", 0), 0u) << nvrtc.compiled().compiler;
  std::mt19937 rng(7);
  for (const Shape s : {Shape{1000, 3000}, Shape{2048, 4096}}) {
    const auto in = random_bytes(static_cast<std::size_t>(s.rows) * s.cols, rng);
    EXPECT_EQ(first_difference(run_byte_transpose(llvm, in, s.rows, s.cols, 0),
                               run_byte_transpose(nvrtc, in, s.rows, s.cols, 0)),
              -1)
        << s.rows << "x" << s.cols;
  }
}

// The word transpose that lays 1x128 block scales out K-block-major: fp32
// [rows][K / 128] -> [K / 128][rows], one matrix or a batch of rank segments.
struct WordCase {
  int rows, cols, batch;
};

class TransposeWordsGpu : public ::testing::TestWithParam<std::tuple<WordCase, KernelBackend>> {};

TEST_P(TransposeWordsGpu, MatchesReferenceBitForBit) {
  const auto [c, backend] = GetParam();
  REQUIRE_GPU_AND_BACKEND(backend);
  const TransposeLauncher launcher(gpu().jit_for(backend), TransposeKernel{4});
  std::mt19937 rng(static_cast<unsigned>(c.rows * 131 + c.cols * 7 + c.batch));
  const std::size_t one = static_cast<std::size_t>(c.rows) * c.cols * 4;
  const std::size_t n = one * static_cast<std::size_t>(c.batch);
  const auto in = random_bytes(n, rng);
  DeviceBuffer din = upload(in), dout(n);
  dout.fill(kPoison);
  Stream stream;
  launcher.launch(din.get(), dout.get(), c.rows, c.cols, stream.get(), c.batch);
  stream.synchronize();
  std::vector<std::uint8_t> want;
  for (int b = 0; b < c.batch; ++b) {
    const auto part = reference_transpose(in.data() + b * one, c.rows, c.cols, 4);
    want.insert(want.end(), part.begin(), part.end());
  }
  const std::int64_t at = first_difference(download(dout, n), want);
  EXPECT_EQ(at, -1) << "first difference at output byte " << at;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TransposeWordsGpu,
    ::testing::Combine(::testing::Values(WordCase{1, 1, 1}, WordCase{33, 31, 1},
                                         WordCase{8192, 32, 1}, WordCase{4096, 7, 1},
                                         WordCase{1024, 8, 4}, WordCase{100, 3, 3},
                                         WordCase{3584, 28, 2}),
                       kBackends),
    [](const auto& info) {
      const WordCase c = std::get<0>(info.param);
      return std::to_string(c.rows) + "x" + std::to_string(c.cols) + "_b" +
             std::to_string(c.batch) + "_" + backend_name(std::get<1>(info.param));
    });

// Launch-time refusals: a batch of bytes, a negative extent, pointers the
// kernel's accesses cannot take.
TEST(TransposeWordsGpu, RefusesWhatTheKernelsDoNotDo) {
  REQUIRE_GPU();
  testing::Gpu& g = gpu();
  const TransposeLauncher bytes(*g.jit);
  DeviceBuffer buffer(64 * 64 + 16);
  EXPECT_THROW(bytes.launch(buffer.get(), buffer.get(), 2, 2, nullptr, 2), std::invalid_argument);
  EXPECT_THROW(bytes.launch(buffer.get() + 1, buffer.get(), 16, 32, nullptr),
               std::invalid_argument);
  const TransposeLauncher words(*g.jit, TransposeKernel{4});
  EXPECT_THROW(words.launch(buffer.get(), buffer.get(), -1, 2, nullptr), std::invalid_argument);
  EXPECT_THROW(words.launch(buffer.get(), buffer.get() + 2, 4, 4, nullptr), std::invalid_argument);
}

struct PermuteCase {
  int element_bytes, ranks, outer;
  std::int64_t inner_local;
};

class PermuteGpu : public ::testing::TestWithParam<std::tuple<PermuteCase, KernelBackend>> {};

TEST_P(PermuteGpu, MatchesReferenceBitForBit) {
  const auto [c, backend] = GetParam();
  REQUIRE_GPU_AND_BACKEND(backend);
  const PermuteLauncher launcher(gpu().jit_for(backend), PermuteKernel{c.element_bytes});
  std::mt19937 rng(static_cast<unsigned>(c.ranks * 1000003 + c.outer * 31 + c.inner_local));
  const std::size_t bytes =
      static_cast<std::size_t>(c.ranks) * c.outer * c.inner_local * c.element_bytes;
  const auto in = random_bytes(bytes, rng);
  DeviceBuffer din = upload(in), dout(std::max<std::size_t>(bytes, 1));
  dout.fill(kPoison);
  Stream stream;
  launcher.launch(din.get(), dout.get(), c.ranks, c.outer, c.inner_local, stream.get());
  stream.synchronize();
  const auto want = reference_permute(in.data(), c.element_bytes, c.ranks, c.outer, c.inner_local);
  const auto got = download(dout, bytes);
  const std::int64_t at = first_difference(got, want);
  EXPECT_EQ(at, -1) << "first difference at output byte " << at << ": got 0x" << std::hex
                    << (at >= 0 ? int{got[static_cast<std::size_t>(at)]} : 0) << ", want 0x"
                    << (at >= 0 ? int{want[static_cast<std::size_t>(at)]} : 0) << std::dec << " ("
                    << differing_bytes(got, want) << " of " << bytes << " bytes differ)";
}

std::vector<PermuteCase> permute_cases() {
  std::vector<PermuteCase> all;
  for (int e : {1, 2, 4})
    for (int ranks : {1, 2, 4, 8})
      for (auto [outer, inner] : {std::pair<int, std::int64_t>{1, 1},
                                  {17, 33},
                                  {333, 257},
                                  {128, 256},
                                  {4095, 31},
                                  {7, 8191},
                                  {64, 1000}})
        all.push_back({e, ranks, outer, inner});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Shapes, PermuteGpu,
                         ::testing::Combine(::testing::ValuesIn(permute_cases()), kBackends),
                         [](const auto& info) {
                           const PermuteCase& c = std::get<0>(info.param);
                           return std::to_string(c.element_bytes) + "B_r" +
                                  std::to_string(c.ranks) + "_" + std::to_string(c.outer) + "x" +
                                  std::to_string(c.inner_local) + "_" +
                                  backend_name(std::get<1>(info.param));
                         });

class ScaleUpdateGpu
    : public ::testing::TestWithParam<std::tuple<ScaleUpdateKernel, KernelBackend>> {};

TEST_P(ScaleUpdateGpu, MatchesNumericsBitForBitOverSeveralSteps) {
  const auto [k, backend] = GetParam();
  REQUIRE_GPU_AND_BACKEND(backend);
  // The special values tried in turn against every tensor: as many tensors
  // as the description has, repeated over enough steps to see each value in
  // each slot, with histories that already hold NaN, Inf and zeros.
  const ScaleUpdateLauncher launcher(gpu().jit_for(backend), k);
  const std::size_t n = k.formats.size(), len = k.history_length;
  std::mt19937 rng(len * 7 + static_cast<unsigned>(k.margin + 1000));
  std::lognormal_distribution<float> magnitude(0.0f, 8.0f);
  const auto specials = testing::special_amaxes();
  ScaleUpdateState state;
  state.history.resize(n * len);
  for (std::size_t i = 0; i < state.history.size(); ++i) {
    const int pick = static_cast<int>(rng() % 100);
    state.history[i] = pick < 3 ? specials[rng() % specials.size()] : magnitude(rng);
  }
  for (std::size_t t = 0; t < n; ++t) state.scale.push_back(0.5f + static_cast<float>(t));
  DeviceBuffer history(n * len * 4), amax(n * 4), scale(n * 4), scale_inv(n * 4);
  history.upload(state.history.data(), n * len * 4);
  scale.upload(state.scale.data(), n * 4);
  Stream stream;
  const int steps = static_cast<int>(specials.size()) + 6;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<float> a(n);
    for (std::size_t t = 0; t < n; ++t)
      a[t] = step < static_cast<int>(specials.size())
                 ? specials[(static_cast<std::size_t>(step) + 3 * t) % specials.size()]
                 : magnitude(rng);
    amax.upload(a.data(), n * 4);
    scale_inv.fill(kPoison, stream.get());
    // In place: the previous scale buffer is the scale buffer.
    launcher.launch({history.get(), amax.get(), scale.get(), scale.get(), scale_inv.get()},
                    stream.get());
    stream.synchronize();
    state = reference_scale_update(k, state, a);
    std::vector<float> got_history(n * len), got_scale(n), got_inv(n);
    history.download(got_history.data(), n * len * 4);
    scale.download(got_scale.data(), n * 4);
    scale_inv.download(got_inv.data(), n * 4);
    for (std::size_t t = 0; t < n; ++t) {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(got_scale[t]),
                std::bit_cast<std::uint32_t>(state.scale[t]))
          << "tensor " << t << " amax " << a[t] << ": scale " << got_scale[t] << " want "
          << state.scale[t];
      EXPECT_EQ(std::bit_cast<std::uint32_t>(got_inv[t]),
                std::bit_cast<std::uint32_t>(state.scale_inv[t]))
          << "tensor " << t << ": scale_inv";
    }
    EXPECT_EQ(std::memcmp(got_history.data(), state.history.data(), n * len * 4), 0)
        << "history differs after the roll";
    if (::testing::Test::HasFailure()) return;
    // Keep the reference and the device on the same bits from here on.
    state.scale = got_scale;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, ScaleUpdateGpu,
                         ::testing::Combine(::testing::ValuesIn(testing::scale_update_variants()),
                                            kBackends),
                         [](const auto& info) {
                           return std::get<0>(info.param).name() + "_" +
                                  backend_name(std::get<1>(info.param));
                         });

// Under `nan = error` the update reads the layer's NaN verdict first: finite
// values change nothing about what it computes; a NaN anywhere in it (or a
// NaN with its sign bit set) leaves every byte it would write as it was.
class ScaleUpdateGuardGpu : public ::testing::TestWithParam<KernelBackend> {};

TEST_P(ScaleUpdateGuardGpu, WritesNothingWhenTheVerdictHoldsANan) {
  REQUIRE_GPU_AND_BACKEND(GetParam());
  const runtime::Jit& jit = gpu().jit_for(GetParam());
  ScaleUpdateKernel k{{ElemType::e4m3, ElemType::e5m2}, 16, 0, AmaxAlgo::max};
  k.guard = 3;
  const ScaleUpdateLauncher launcher(jit, k);
  const std::size_t n = 2, len = 16;
  ScaleUpdateState state;
  for (std::size_t i = 0; i < n * len; ++i) state.history.push_back(0.25f * float(i + 1));
  state.scale = {0.5f, 1.5f};
  DeviceBuffer history(n * len * 4), amax(n * 4), scale(n * 4), scale_inv(n * 4), guard(3 * 4);
  history.upload(state.history.data(), n * len * 4);
  scale.upload(state.scale.data(), n * 4);
  const std::vector<float> a = {3.0f, 70.0f};
  amax.upload(a.data(), n * 4);
  Stream stream;
  const auto run = [&](std::vector<float> verdict) {
    guard.upload(verdict.data(), 3 * 4);
    scale_inv.fill(kPoison, stream.get());
    ScaleUpdateArgs args{history.get(), amax.get(), scale.get(), scale.get(), scale_inv.get()};
    args.guard = guard.get();
    launcher.launch(args, stream.get());
    stream.synchronize();
  };
  const auto bytes = [&](const DeviceBuffer& b) {
    std::vector<std::uint8_t> v(b.bytes());
    b.download(v.data(), v.size());
    return v;
  };
  // Finite verdict: as the unguarded update.
  run({1.0f, 0.0f, INFINITY});
  const ScaleUpdateState want = reference_scale_update(k, state, a);
  std::vector<float> got_scale(n), got_history(n * len);
  scale.download(got_scale.data(), n * 4);
  history.download(got_history.data(), n * len * 4);
  for (std::size_t t = 0; t < n; ++t)
    EXPECT_EQ(std::bit_cast<std::uint32_t>(got_scale[t]),
              std::bit_cast<std::uint32_t>(want.scale[t]));
  EXPECT_EQ(std::memcmp(got_history.data(), want.history.data(), n * len * 4), 0);
  // A NaN in any slot, either sign: nothing written.
  for (const float nan :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()})
    for (int slot = 0; slot < 3; ++slot) {
      SCOPED_TRACE("NaN in slot " + std::to_string(slot));
      const auto h0 = bytes(history), s0 = bytes(scale);
      std::vector<float> verdict = {1.0f, 2.0f, 3.0f};
      verdict[static_cast<std::size_t>(slot)] = nan;
      run(verdict);
      EXPECT_EQ(bytes(history), h0);
      EXPECT_EQ(bytes(scale), s0);
      for (std::uint8_t b : bytes(scale_inv)) ASSERT_EQ(b, kPoison) << "scale_inv written";
    }
  EXPECT_THROW(
      launcher.launch({history.get(), amax.get(), scale.get(), scale.get(), scale_inv.get()},
                      stream.get()),
      std::invalid_argument)
      << "a guarded update without its verdict is refused";
}

INSTANTIATE_TEST_SUITE_P(Backends, ScaleUpdateGuardGpu, kBackends,
                         [](const auto& info) { return backend_name(info.param); });

}  // namespace
}  // namespace fp8c::runtime
