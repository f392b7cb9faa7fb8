// Just enough of CUDA to run a generated kernel's own source on the CPU, one
// block at a time, its threads as fibers (ucontext) on one OS thread:
// __syncthreads, __syncwarp and warp shuffles are real barriers among the
// fibers, shared memory is namespace-scope arrays (one block runs at a
// time; emit_for_host.cpp moves them out of the kernel and poisons them
// before each block), and the fibers run between barriers in an order the test picks
// (forward, backward, shuffled), so a missing barrier shows as a wrong result
// in some order. emit_for_host.cpp swaps the functions written in PTX
// (conversions, streaming stores) for the host_* functions below.
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <stdexcept>
#include <vector>

#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/half.hpp"

#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

namespace fp8c::emulation {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline Dim3 threadIdx, blockIdx, blockDim, gridDim;

struct alignas(8) uint2 {  // 8-byte aligned, as on the GPU
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline uint2 make_uint2(unsigned x, unsigned y) {
  return {x, y};
}
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
  return {x, y, z, w};
}
inline float4 make_float4(float x, float y, float z, float w) {
  return {x, y, z, w};
}

inline unsigned __float_as_uint(float f) {
  return std::bit_cast<unsigned>(f);
}
inline float __uint_as_float(unsigned u) {
  return std::bit_cast<float>(u);
}
inline float __int_as_float(int i) {
  return std::bit_cast<float>(i);
}
inline int __clz(unsigned x) {
  return x == 0 ? 32 : __builtin_clz(x);
}
inline unsigned __vmaxu2(unsigned a, unsigned b) {
  const unsigned lo = std::max(a & 0xFFFFu, b & 0xFFFFu), hi = std::max(a >> 16, b >> 16);
  return lo | (hi << 16);
}
// prmt.b32 d, a, b, c (default mode): byte n of d is byte c[4n + 3 : 4n]
// of {b, a} (bytes 0-3 from a, 4-7 from b).
inline unsigned host_prmt(unsigned a, unsigned b, unsigned c) {
  const std::uint64_t bytes = a | (static_cast<std::uint64_t>(b) << 32);
  unsigned d = 0;
  for (int n = 0; n < 4; ++n) {
    const unsigned selector = (c >> (4 * n)) & 0xFu;
    unsigned byte = (bytes >> (8 * (selector & 7))) & 0xFFu;
    if (selector & 8) byte = byte & 0x80u ? 0xFFu : 0u;  // sign replicate
    d |= byte << (8 * n);
  }
  return d;
}
inline int min(int a, int b) {
  return a < b ? a : b;
}
inline int max(int a, int b) {
  return a > b ? a : b;
}
inline unsigned min(unsigned a, unsigned b) {
  return a < b ? a : b;
}
inline unsigned max(unsigned a, unsigned b) {
  return a > b ? a : b;
}

// The PTX functions' host twins. cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 is
// numerics::float_to_fp8 (tests/numerics checks that against CUDA's own
// conversion code; the GPU tests against the instruction).
inline std::uint16_t host_pack(float lo, float hi, ElemType f) {
  const auto s = numerics::Saturation::satfinite;
  return static_cast<std::uint16_t>(numerics::float_to_fp8(lo, f, s) |
                                    (numerics::float_to_fp8(hi, f, s) << 8));
}
inline void host_check_aligned(const void* p, std::uintptr_t bytes) {
  if (reinterpret_cast<std::uintptr_t>(p) % bytes != 0)
    throw std::runtime_error("misaligned wide access (a fault on the GPU)");
}
inline float host_fp16_to_float(std::uint16_t h) {
  return numerics::fp16_to_float(h);
}
inline std::uint16_t host_float_to_fp16(float f) {
  return numerics::float_to_fp16(f);
}
inline std::uint16_t host_float_to_bf16(float f) {
  return numerics::float_to_bf16(f);
}
// cvt.rn.f16x2.{e4m3x2,e5m2x2}, exact (numerics::fp8_to_half_bits).
inline unsigned host_unpack_fp8x2(std::uint16_t codes, ElemType f) {
  const auto half = [&](std::uint8_t code) {
    return static_cast<unsigned>(numerics::fp8_to_half_bits(code, f));
  };
  return half(static_cast<std::uint8_t>(codes)) |
         (half(static_cast<std::uint8_t>(codes >> 8)) << 16);
}

// ---- The block of fibers.

inline constexpr int kMaxThreads = 1024;

enum class Order { forward, backward, shuffled };

inline const char* order_name(Order order) {
  static const char* const names[] = {"forward", "backward", "shuffled"};
  return names[static_cast<int>(order)];
}

class Block {
 public:
  static Block& current() {
    static Block b;
    return b;
  }

  // Runs `body` once per thread of a block of `threads` threads.
  void run(int threads, Order order, std::mt19937& rng, const std::function<void()>& body) {
    if (threads % 32 != 0 || threads > kMaxThreads) throw std::invalid_argument("block size");
    threads_ = threads;
    body_ = &body;
    if (stacks_.size() < static_cast<std::size_t>(threads) * kStack)
      stacks_.resize(static_cast<std::size_t>(threads) * kStack);
    fibers_.assign(threads, Fiber{});
    arrived_ = 0;
    generation_ = 0;
    warp_arrived_.assign(threads / 32, 0);
    warp_generation_.assign(threads / 32, 0);
    for (int i = 0; i < threads; ++i) {
      Fiber& f = fibers_[i];
      getcontext(&f.context);
      f.context.uc_stack.ss_sp = &stacks_[static_cast<std::size_t>(i) * kStack];
      f.context.uc_stack.ss_size = kStack;
      f.context.uc_link = &scheduler_;
      makecontext(&f.context, &Block::entry, 0);
    }
    std::vector<int> sequence(threads);
    for (int i = 0; i < threads; ++i) sequence[i] = order == Order::backward ? threads - 1 - i : i;
    int alive = threads;
    while (alive > 0) {
      if (order == Order::shuffled) std::shuffle(sequence.begin(), sequence.end(), rng);
      const long long progress_before = progress_;
      bool all_waiting = true;
      for (int i : sequence) {
        if (fibers_[i].done) continue;
        current_ = i;
        threadIdx = {static_cast<unsigned>(i), 0, 0};
        fibers_[i].waiting = false;
        swapcontext(&scheduler_, &fibers_[i].context);
        if (fibers_[i].done) {
          --alive;
          ++progress_;
        }
        if (!fibers_[i].waiting) all_waiting = false;
        if (error_) {
          const std::exception_ptr e = error_;
          error_ = nullptr;
          std::rethrow_exception(e);
        }
      }
      if (alive > 0 && all_waiting && progress_ == progress_before)
        throw std::runtime_error("emulated block deadlocked: a barrier not every thread reaches");
    }
  }

  void sync_threads() { barrier(arrived_, generation_, threads_); }
  void sync_warp() {
    const int w = current_ / 32;
    barrier(warp_arrived_[w], warp_generation_[w], 32);
  }
  template <typename T>
  T shuffle(unsigned mask, T v, int source_lane) {
    if (mask != 0xFFFFFFFFu) throw std::logic_error("emulated shuffles need a full mask");
    static_assert(sizeof(T) <= 8);
    const int w = current_ / 32;
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    exchange_[current_] = bits;
    sync_warp();
    const std::uint64_t got = exchange_[w * 32 + (source_lane & 31)];
    sync_warp();  // nobody overwrites a slot before every lane has read it
    T r;
    std::memcpy(&r, &got, sizeof(T));
    return r;
  }
  int lane() const { return current_ & 31; }

 private:
  static constexpr std::size_t kStack = 128 * 1024;
  struct Fiber {
    ucontext_t context{};
    bool done = false;
    bool waiting = false;
  };

  // Exceptions do not cross fibers: the first is kept and rethrown by run().
  static void entry() {
    Block& b = current();
    try {
      (*b.body_)();
    } catch (...) {
      if (!b.error_) b.error_ = std::current_exception();
    }
    b.fibers_[b.current_].done = true;
  }

  void yield_waiting() {
    fibers_[current_].waiting = true;
    swapcontext(&fibers_[current_].context, &scheduler_);
  }

  void barrier(int& arrived, long long& generation, int count) {
    const long long mine = generation;
    if (++arrived == count) {
      arrived = 0;
      ++generation;
      ++progress_;
      // The last to arrive yields too, so the others may run first.
      swapcontext(&fibers_[current_].context, &scheduler_);
      return;
    }
    while (generation == mine) yield_waiting();
  }

  int threads_ = 0;
  const std::function<void()>* body_ = nullptr;
  std::vector<char> stacks_;
  std::vector<Fiber> fibers_;
  ucontext_t scheduler_{};
  int current_ = 0;
  int arrived_ = 0;
  long long generation_ = 0;
  std::vector<int> warp_arrived_;
  std::vector<long long> warp_generation_;
  long long progress_ = 0;
  std::uint64_t exchange_[kMaxThreads] = {};
  std::exception_ptr error_;
};

// One block runs at a time on one OS thread: a plain max is atomic here.
inline unsigned atomicMax(unsigned* p, unsigned v) {
  const unsigned old = *p;
  if (v > old) *p = v;
  return old;
}

// A per-tensor quantize kernel's arguments (codegen/kernels/quantize.hpp),
// for the emulated entry points' table.
struct QuantizeCall {
  const void* x = nullptr;
  const void* pre = nullptr;
  const float* scale = nullptr;
  const unsigned* amax_in = nullptr;
  unsigned char* rowwise = nullptr;
  unsigned char* columnwise = nullptr;
  unsigned* amax_out = nullptr;
  float* dbias_partial = nullptr;
  float* scale_out = nullptr;
  int rows = 0, cols = 0;
};

// An epilogue kernel's arguments (codegen/kernels/epilogue.hpp), for the
// emulated entry points' table.
struct EpilogueCall {
  const void* x = nullptr;
  const void* bias = nullptr;
  const void* pre = nullptr;
  const float* scale = nullptr;
  void* out = nullptr;
  void* pre_out = nullptr;
  unsigned* amax = nullptr;
  float* dbias_partial = nullptr;
  int rows = 0, cols = 0;
};

inline void __syncthreads() {
  Block::current().sync_threads();
}
inline void __syncwarp(unsigned mask = 0xFFFFFFFFu) {
  if (mask != 0xFFFFFFFFu) throw std::logic_error("emulated __syncwarp needs a full mask");
  Block::current().sync_warp();
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  return Block::current().shuffle(mask, v, Block::current().lane() ^ lane_mask);
}
template <typename T>
T __shfl_sync(unsigned mask, T v, int source_lane) {
  return Block::current().shuffle(mask, v, source_lane);
}

// Runs a grid, block after block in order, each block's threads as above,
// with shared memory poisoned before each block when `poison_shared` is given.
// 16-byte streaming stores made (emit_for_host's twin counts them), so a
// test can tell that a wide path ran.
inline long long host_wide_stores = 0;

inline void run_grid(Dim3 grid, int threads, Order order, std::uint32_t seed,
                     const std::function<void()>& kernel, void (*poison_shared)() = nullptr) {
  std::mt19937 rng(seed);
  gridDim = grid;
  blockDim = {static_cast<unsigned>(threads), 1, 1};
  for (unsigned z = 0; z < std::max(grid.z, 1u); ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = {x, y, z};
        if (poison_shared) poison_shared();
        Block::current().run(threads, order, rng, kernel);
      }
}

}  // namespace fp8c::emulation
