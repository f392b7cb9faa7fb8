// The epilogue kernels (built as kernel IR), printed for the host by the
// CUDA printer (the same printer NVRTC's source comes from), run on the CPU
// (cuda_host.hpp) against the CPU reference, judged as the GPU test judges
// them (tests/runtime/epilogue_check.hpp): every variant, shapes that are
// not tile multiples (vector mode with partial tiles, scalar mode for
// cols % 8 != 0), each pointer the kernel reads or writes misaligned by one
// element on its own (scalar mode, which a wide access there would make a
// fault: the emulation is built with -fsanitize=alignment), threads in
// three orders, shared memory poisoned before each block and guards around
// each output. GELU and SiLU run with the host twins of tanh.approx /
// ex2.approx / div.approx (the C library's functions), so for them this
// checks the formulas and the data flow within activation_bound.hpp's
// bounds; the GPU tests check the instructions.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../runtime/epilogue_check.hpp"
#include "codegen/kernels/epilogue.hpp"
#include "cuda_host.hpp"
#include "emulation_variants.hpp"
#include "guarded_buffer.hpp"

namespace fp8c::emulation {

#include "epilogue_emulated.inc"

namespace {

using testing::Data;

// Which pointer sits one element past a 16-byte boundary.
enum class Misaligned { none, x, bias, pre, out, pre_out };

const char* misaligned_name(Misaligned m) {
  static const char* const names[] = {"aligned", "x", "bias", "pre", "out", "pre_out"};
  return names[static_cast<int>(m)];
}

struct Shape {
  int rows, cols;
  Data data;
};

Buffer input_buffer(const std::vector<unsigned char>& bytes, std::size_t misalign) {
  Buffer b(bytes.size(), misalign, 0);
  std::memcpy(b.data(), bytes.data(), bytes.size());
  return b;
}

void run_case(const EpilogueKernel& k, const EmulatedEpilogue& kernel, Shape shape, Order order,
              Misaligned m, std::uint32_t seed) {
  SCOPED_TRACE(k.name() + " " + std::to_string(shape.rows) + "x" + std::to_string(shape.cols) +
               (shape.data == Data::finite ? " finite" : " any-bits") + ", " + misaligned_name(m) +
               ", threads " + order_name(order));
  const testing::EpilogueInputs in =
      testing::epilogue_inputs(k, shape.rows, shape.cols, shape.data, seed);
  const auto n = static_cast<std::size_t>(in.rows * in.cols);
  const std::size_t in_width = element_bytes(k.input), out_width = element_bytes(k.output);
  const auto shift = [&](Misaligned which, std::size_t width) { return m == which ? width : 0; };
  Buffer x = input_buffer(in.x, shift(Misaligned::x, in_width)),
         bias = input_buffer(in.bias, shift(Misaligned::bias, in_width)),
         pre = input_buffer(in.pre, shift(Misaligned::pre, in_width)),
         out(n * out_width, shift(Misaligned::out, out_width), 0xCD),
         pre_out(k.store_pre ? n * in_width : 0, shift(Misaligned::pre_out, in_width), 0xCD);
  const int tile_rows = epilogue_tile_rows(k);
  const int row_tiles = (shape.rows + tile_rows - 1) / tile_rows;
  const int dbias_tiles = (shape.rows + kEpilogueDbiasTileRows - 1) / kEpilogueDbiasTileRows;
  Buffer partial(k.dbias ? static_cast<std::size_t>(dbias_tiles) * in.cols * 4 : 0, 0, 0xCD);
  unsigned amax = 0;
  EpilogueCall call;
  call.x = x.data();
  call.bias = bias.data();
  call.pre = pre.data();
  call.scale = &in.scale;
  call.out = out.data();
  call.pre_out = pre_out.data();
  call.amax = &amax;
  call.dbias_partial = reinterpret_cast<float*>(partial.data());
  call.rows = shape.rows;
  call.cols = shape.cols;
  const Dim3 grid{static_cast<unsigned>(row_tiles),
                  static_cast<unsigned>((shape.cols + kEpilogueTileCols - 1) / kEpilogueTileCols),
                  1};
  run_grid(
      grid, kEpilogueThreads, order, seed, [&] { kernel.run(call); }, kernel.poison_shared);

  testing::EpilogueOutputs got;
  got.out = out.contents();
  got.pre_out = pre_out.contents();
  got.amax_bits = amax;
  if (k.dbias) {
    got.dbias_partial.resize(static_cast<std::size_t>(dbias_tiles) * in.cols);
    std::memcpy(got.dbias_partial.data(), partial.data(), got.dbias_partial.size() * 4);
  }
  testing::expect_epilogue_matches_reference(k, in, got);
  EXPECT_TRUE(out.guards_intact()) << "a write outside out";
  EXPECT_TRUE(pre_out.guards_intact()) << "a write outside pre_out";
  EXPECT_TRUE(partial.guards_intact()) << "a write outside dbias_partial";
}

struct Case {
  std::size_t variant;
  Order order;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << emulated_epilogue_variants()[c.variant].name() << ", threads " << order_name(c.order);
}

class EpilogueEmulation : public ::testing::TestWithParam<Case> {};

TEST_P(EpilogueEmulation, MatchesTheCpuReference) {
  const Case c = GetParam();
  const EpilogueKernel k = emulated_epilogue_variants()[c.variant];
  const EmulatedEpilogue& kernel = kEmulatedEpilogues[c.variant];
  ASSERT_EQ(k.name(), kernel.name);
  // Vector mode on partial row and column tiles (and more than one chunk of
  // rows per backward thread), scalar mode on cols % 8 != 0, a single element.
  const Shape shapes[] = {{1, 1, Data::finite},
                          {37, 520, Data::any_bits},
                          {130, 1032, Data::finite},
                          {45, 77, Data::any_bits}};
  std::uint32_t seed = static_cast<std::uint32_t>(c.variant * 100);
  for (const Shape& s : shapes) {
    run_case(k, kernel, s, c.order, Misaligned::none, ++seed);
    if (::testing::Test::HasFailure()) return;
  }
  // Each pointer the variant uses misaligned on its own: scalar mode.
  std::vector<Misaligned> pointers = {Misaligned::x, Misaligned::out};
  if (k.bias) pointers.push_back(Misaligned::bias);
  if (k.backward && k.activation != Activation::none) pointers.push_back(Misaligned::pre);
  if (k.store_pre) pointers.push_back(Misaligned::pre_out);
  for (Misaligned m : pointers) {
    run_case(k, kernel, {33, 520, Data::any_bits}, c.order, m, ++seed);
    if (::testing::Test::HasFailure()) return;
  }
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (std::size_t v = 0; v < emulated_epilogue_variants().size(); ++v)
    for (Order order : {Order::forward, Order::backward, Order::shuffled})
      all.push_back({v, order});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Variants, EpilogueEmulation, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           std::string n = emulated_epilogue_variants()[info.param.variant].name();
                           (n += "_") += order_name(info.param.order);
                           return n;
                         });

}  // namespace
}  // namespace fp8c::emulation
