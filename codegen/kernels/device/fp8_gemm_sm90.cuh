// The generated FP8 GEMM for sm_90a: D = A . B^T with both operands FP8 and
// K innermost, fp32 accumulation, and a fused epilogue (bias, activation
// with its pre-activation kept, or the activation's gradient from a saved
// pre-activation; accumulation into D; D's column sums (dbias); FP8 D with
// its scale, its amax and its transposed copy), D in bf16, fp16, fp32, e4m3
// or e5m2.
//
// Compiled by NVRTC only, after a prefix that codegen/kernels/cuda_fp8_gemm.cpp
// writes: fp8_gemm_params.h, the configuration constants (kBlockM, kBlockN,
// kStages, kAScaleRows, kBScaleRows, kAScalesKMajor, kBScalesKMajor, kMx,
// kPromote, kOut, kClusterM, and the
// epilogue's kBias, kAux, kAccumulate, kAmax, kDact, kDbias, kTransposed),
// the activation act() and the gradient dact(), the wgmma wrapper
// wgmma_m64k32() for this kBlockN and type pair, and FP8C_GEMM_ENTRY.
//
// Shape of the kernel:
//  - persistent: one CTA (or cluster) per SM (or SM pair) walks the tiles
//    from its own index in steps of the grid's;
//  - warp-specialized: warpgroups 0..kConsumers-1 compute, the last
//    warpgroup loads; registers move from the loader to the math warpgroups
//    with setmaxnreg. A 64- or 128-row tile gives each math warpgroup 64
//    rows; a 256-row tile gives each two 64-row waves (rows 64 w + 128 v of
//    the tile for warpgroup w, wave v), computed one after the other from
//    the same stage, so that a K block's barrier wait and scale reads serve
//    twice the MMAs (1.10x the 128-row tile's speed, block-scaled);
//  - the loader's one thread TMA-loads 128-byte-wide K slices of A and B into
//    a kStages-deep ring in shared memory (128-byte swizzle, the layout wgmma
//    reads), signalling a "full" mbarrier with the bytes it expects; the math
//    warpgroups release a slot through its "empty" mbarrier once their wgmmas
//    have read it;
//  - per 128 K and wave, 4 x wgmma m64 x kBlockN x k32.
//    kPromote == false (per-tensor, fast accumulation): one accumulator for
//    all of K inside the tensor cores, one wgmma group kept in flight;
//    kPromote == true: each 128 K lands in a fresh partial accumulator that
//    is added into the fp32 total times the two operands' scales for that K
//    block (block scaling), or times 1 (per-tensor, precise accumulation).
//    Hopper's FP8 tensor cores keep about 14 bits while they accumulate;
//    the promotion bounds that error to one 128-long dot product.
//    kMx (MXFP8): the scales change every 32 K, so each wgmma k32 lands in
//    a fresh partial accumulator, added into the total times its row's and
//    column's power of two: two fp32 instructions per accumulator and 32 K
//    against one wgmma k32, which caps the kernel at about half the tensor
//    cores' rate (the fp32 pipe issues 1/32 of their multiply-adds).
//    Block scales travel with their stage: a second loader warp copies the
//    tile's scales for each K block from global memory into the stage's
//    scale slots (cp.async) and arrives on the same "full" barrier when they
//    land, running as far ahead as the ring does, so the math warpgroups
//    find them in shared memory (MXFP8: three loader warps, which also
//    decode the E8M0 codes; mx_scale_warps). K-block-major 1x128 scales are copied 16
//    bytes (4 rows) at a time, and a B tile inside one 128x128 block takes
//    one copy: an earlier form copied every row's and column's scale 4
//    bytes at a time (the B one 128 times over), which ncu counted as a
//    quarter of all shared-memory wavefronts
//    (bench/results/ncu_block_gemm_h200_2026-12-03.txt).
//  - kClusterM == 2: CTAs run in clusters of two that take vertically
//    adjacent tiles (rows 2i and 2i+1 of tiles, the same column), so they
//    share the B tile: each loads half of it and multicasts it to both, which
//    cuts the L2 traffic per MMA by a third at 128 x 256. A slot is then only
//    free once both CTAs' math warps have released it: they arrive on their
//    own and their peer's "empty" barrier. When the tile rows are odd, the
//    last cluster's second tile lies below M: TMA reads zeros and the
//    epilogue stores nothing.
//  - epilogue: registers straight to global memory, bounds-checked, while the
//    loader already fetches the next tile; bias, accumulation, the
//    pre-activation, the activation, amax and the FP8 cast are applied to
//    each element on the way (finish_pair), so a layer's output needs no
//    second pass. The amax is reduced per warp and raised once per warp
//    with an integer atomicMax on its bits. kDact multiplies by act'(aux)
//    instead (aux read: the pre-activation the forward saved). kDbias sums
//    each column over a warp's 16 rows (two rows a thread, then a butterfly
//    across the 8 lanes that share the column) and writes one partial row
//    per 16 rows of D, which a second kernel adds in order: deterministic,
//    and no atomics. kTransposed also writes the FP8 D transposed, a byte a
//    store (the transposed copy a consumer's wgrad reads).
// TMA zero-fills what lies outside A and B, so M, N and K need not be tile
// multiples (K a multiple of 16: TMA's stride rule).

namespace fp8c_gemm {

constexpr int kConsumers = kBlockM >= 128 ? 2 : 1;
// 64-row waves of the tile each math warpgroup computes in turn; a wave of
// all math warpgroups covers kWaveRows rows.
constexpr int kWaveRows = 64 * kConsumers;
constexpr int kWaves = kBlockM / kWaveRows;
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr int kBlockK = 128;  // bytes: one 128-byte swizzle row
constexpr int kATileBytes = kBlockM * kBlockK;
constexpr int kBTileBytes = kBlockN * kBlockK;
constexpr int kAccumulators = kBlockN / 2;  // per thread, for m64 x kBlockN
constexpr bool kBlockScaled = kAScaleRows != 0;
// Per stage, block-scaled only: the tile's A row scales and B column scales;
// with MXFP8 four of each (one per 32 K, decoded to floats): A's as
// [32 K][row] (K-block-major codes) or [row][32 K] (row-major), B's as
// [32 K][lane % 4][column pair][2], so that a thread's columns for one 32 K
// are consecutive floats (mx_scale_warps, mx_k_major_scale_warps).
constexpr int kScaleSlotFloats = kMx            ? 4 * (kBlockM + kBlockN)
                                 : kBlockScaled ? kBlockM + kBlockN
                                                : 0;
// MXFP8: per stage, the four E8M0 codes (one per 32 K) of each A row and B
// column, as copied from global memory before they are decoded.
constexpr int kRawWords = kMx ? kBlockM + kBlockN : 0;
// MXFP8 codes K-block-major ([ceil(K/32)][pitch] bytes: one 32 K's codes of
// consecutive rows are consecutive, as the lowering hands them after a byte
// transpose: the faster form, docs/gemm.md) are copied 16 rows at a time
// (mx_k_major_scale_warps); row-major ones ([rows][pitch], as the quantizers
// write them, and in a GEMM read one K segment at a time) are copied a row
// at a time (mx_scale_warps). Either way by the loader's warps 1-3.
constexpr bool kMxKMajor = kMx && kAScalesKMajor;
// Arrivals that complete a "full" barrier: the TMA thread's, and every lane
// of the scale warp's (with MXFP8, of the scale warps').
constexpr int kMxLanes = 96;  // the loader warpgroup's warps 1 to 3
constexpr unsigned kFullArrivals = kMx ? 1 + kMxLanes : kBlockScaled ? 33 : 1;
// Registers per thread after setmaxnreg. The CTA's pool is what it was
// launched with (168 a thread for three warpgroups: 64512), and an increase
// waits until the pool has the registers, so the split must fit in it:
// 40 x 128 + 232 x 256 = 64512. The scale warp's copy loop spills at 40,
// so block-scaled kernels split 56 x 128 + 224 x 256 = 64512.
constexpr int kLoaderRegisters = kBlockScaled ? 56 : 40;
constexpr int kMathRegisters = kBlockScaled ? 224 : 232;
static_assert(kLoaderRegisters * 128 + kMathRegisters * 128 * kConsumers <= 168 * 384,
              "the register split must fit the pool of the launch");

static_assert(kBlockM == 64 || kBlockM == 128 || kBlockM == 256, "tile rows");
static_assert(kClusterM == 1 || kClusterM == 2, "clusters of one or two CTAs");
// Rows of the B tile each CTA of a cluster loads (and multicasts).
constexpr int kBLoadRows = kBlockN / kClusterM;
constexpr int kBLoadBytes = kBLoadRows * kBlockK;
static_assert(kBlockN % 16 == 0 && kBlockN >= 16 && kBlockN <= 256, "wgmma N");
static_assert(kBlockScaled == (kBScaleRows != 0), "both operands block-scaled, or neither");
static_assert(!kBlockScaled || kPromote, "block scales need promotion");
static_assert(!kMx || (kBlockScaled && kWaves == 1), "MXFP8: 1x32 codes, 64- or 128-row tiles");
static_assert(!kMx || kAScalesKMajor == kBScalesKMajor, "MXFP8: both operands' codes in one order");

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// ---- mbarriers -------------------------------------------------------------

__device__ __forceinline__ void barrier_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(count));
}

__device__ __forceinline__ void barrier_expect_bytes(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void barrier_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(bar)) : "memory");
}

// Waits until the barrier's phase of parity `parity` has completed. A fresh
// barrier is in phase 0, so waiting for parity 1 passes at once: that is how
// the loader finds every slot empty on its first lap.
__device__ __forceinline__ void barrier_wait(unsigned long long* bar, unsigned parity) {
  const unsigned address = shared_address(bar);
  unsigned done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n"
        " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(address), "r"(parity)
        : "memory");
  }
}

// ---- clusters ----------------------------------------------------------------

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

// Every thread of every CTA of the cluster; orders shared-memory work before
// it with the peers' after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;" ::
          : "memory");
}

// Arrives on the barrier at the same place in CTA `rank`'s shared memory.
// Relaxed to the default (.release at CTA scope): the arrival publishes no
// writes, it only says that this CTA's wgmmas, already waited for, are done
// reading a slot. The cluster-scope release it used to carry made every
// math warp wait at each K block and halved clustered kernels' speed (512
// against 1001 TFLOP/s block-scaled at 8192^3 on the H100).
__device__ __forceinline__ void barrier_arrive_in(unsigned long long* bar, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(shared_address(bar)), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

// ---- TMA -------------------------------------------------------------------

__device__ __forceinline__ void tma_prefetch(const TmaDescriptor* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<unsigned long long>(map))
               : "memory");
}

// Box at (inner, outer) of `map` into shared memory at `dst`; its bytes count
// towards `bar`'s expected transaction.
__device__ __forceinline__ void tma_load(void* dst, const TmaDescriptor* map,
                                         unsigned long long* bar, int inner, int outer) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(shared_address(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(shared_address(bar)), "r"(inner),
      "r"(outer)
      : "memory");
}

// The same box into shared memory at `dst` in every CTA of `mask`, each
// CTA's `bar` (same offset) counting the bytes it receives.
__device__ __forceinline__ void tma_load_multicast(void* dst, const TmaDescriptor* map,
                                                   unsigned long long* bar, int inner, int outer,
                                                   unsigned short mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(shared_address(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(shared_address(bar)), "r"(inner),
      "r"(outer), "h"(mask)
      : "memory");
}

// ---- wgmma -----------------------------------------------------------------

// Shared memory matrix descriptor for a K-major tile of 128-byte rows in the
// 128-byte swizzle: 8-row atoms 1024 bytes apart (stride byte offset); the
// leading byte offset is unused in this layout. Advancing K by 32 bytes
// inside the swizzled row adds 2 to the start address field.
__device__ __forceinline__ unsigned long long tile_descriptor(const void* tile) {
  const unsigned long long start = (shared_address(tile) & 0x3FFFF) >> 4;
  return start | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int Pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(Pending) : "memory");
}
// Keeps the compiler from moving accumulator reads and writes across the
// asynchronous wgmmas that own them.
__device__ __forceinline__ void pin(float (&acc)[kAccumulators]) {
#pragma unroll
  for (int i = 0; i < kAccumulators; ++i) asm volatile("" : "+f"(acc[i])::"memory");
}
__device__ __forceinline__ void pin(float (&acc)[kWaves][kAccumulators]) {
#pragma unroll
  for (int w = 0; w < kWaves; ++w) pin(acc[w]);
}

// Fast accumulation: 128 K of every wave of this warpgroup, one commit group.
__device__ __forceinline__ void wgmma_waves(float (&acc)[kWaves][kAccumulators],
                                            const unsigned char* a_slice, unsigned long long b,
                                            bool accumulate) {
  pin(acc);
  wgmma_fence();
#pragma unroll
  for (int w = 0; w < kWaves; ++w) {
    const unsigned long long a = tile_descriptor(a_slice + w * kWaveRows * kBlockK);
#pragma unroll
    for (int kk = 0; kk < kBlockK / 32; ++kk)
      wgmma_m64k32(acc[w], a + 2 * kk, b + 2 * kk, (accumulate || kk > 0) ? 1 : 0);
  }
  wgmma_commit();
  pin(acc);
}

// 128 K of one math warpgroup's 64 x kBlockN tile; `accumulate` false: the
// first wgmma overwrites acc.
__device__ __forceinline__ void wgmma_block(float (&acc)[kAccumulators], unsigned long long a,
                                            unsigned long long b, bool accumulate) {
  pin(acc);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kBlockK / 32; ++kk)
    wgmma_m64k32(acc, a + 2 * kk, b + 2 * kk, (accumulate || kk > 0) ? 1 : 0);
  wgmma_commit();
  pin(acc);
}

// ---- the tile walk ---------------------------------------------------------

struct Tile {
  int m;  // tile row
  int n;  // tile column
};

// Groups of `group` tile rows are walked column by column, so CTAs running at
// the same time share their B tiles and a few A tiles in L2.
__device__ __forceinline__ Tile tile_at(int index, int tiles_m, int tiles_n, int group) {
  const int per_group = group * tiles_n;
  const int first = (index / per_group) * group;
  const int rows = min(group, tiles_m - first);
  const int at = index % per_group;
  return {first + at % rows, at / rows};
}

// ---- epilogue --------------------------------------------------------------
// Element types by code: 0 bf16, 1 fp16, 2 fp32, 3 e4m3, 4 e5m2; -1 none.

// kReadOnly: `base` is not written while the kernel runs (the saved
// pre-activation under kDact), so the load goes through the read-only path
// (ld.global.nc), which the compiler may also move ahead of the epilogue's
// stores: without it each read waits behind the stores before it, in case
// they alias.
template <int kType, bool kReadOnly = false>
__device__ __forceinline__ float load_value(unsigned long long base, long long at) {
  if (kType == 2)
    return kReadOnly ? __ldg(reinterpret_cast<const float*>(base) + at)
                     : reinterpret_cast<const float*>(base)[at];
  const unsigned short bits = kReadOnly ? __ldg(reinterpret_cast<const unsigned short*>(base) + at)
                                        : reinterpret_cast<const unsigned short*>(base)[at];
  if (kType == 0) return __uint_as_float(static_cast<unsigned>(bits) << 16);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
  return f;
}

// x (low byte) and y as FP8 of type code kType (3 e4m3, 4 e5m2).
template <int kType>
__device__ __forceinline__ unsigned short fp8x2(float x, float y) {
  unsigned short packed;
  if (kType == 3)
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(y), "f"(x));
  else
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(y), "f"(x));
  return packed;
}

// x to element `at`, y to `at + 1` when `both`. FP8 rounds to nearest even
// and saturates to the largest finite value (NaN stays NaN), as the quantize
// kernels do.
template <int kType>
__device__ __forceinline__ void store_pair(unsigned long long base, long long at, float x, float y,
                                           bool both) {
  if (kType == 2) {
    float* out = reinterpret_cast<float*>(base) + at;
    if (both)
      *reinterpret_cast<float2*>(out) = make_float2(x, y);
    else
      out[0] = x;
    return;
  }
  if (kType >= 3) {
    const unsigned short packed = fp8x2<kType>(x, y);
    unsigned char* out = reinterpret_cast<unsigned char*>(base) + at;
    if (both)
      *reinterpret_cast<unsigned short*>(out) = packed;
    else
      out[0] = static_cast<unsigned char>(packed & 0xFF);
    return;
  }
  unsigned packed;
  if (kType == 0)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(y), "f"(x));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(y), "f"(x));
  unsigned short* out = reinterpret_cast<unsigned short*>(base) + at;
  if (both)
    *reinterpret_cast<unsigned*>(out) = packed;
  else
    out[0] = static_cast<unsigned short>(packed & 0xFFFF);
}

// K blocks before the end of a tile's K loop at which the epilogue's reads
// are prefetched (prefetch_tile_rows).
constexpr int kEpiloguePrefetchLead = 8;

// Bytes of an element of type code kType (above).
template <int kType>
__device__ __forceinline__ constexpr int element_bytes() {
  return kType == 2 ? 4 : kType >= 3 ? 1 : 2;
}

// Asks L2 for this thread's share of the rows the epilogue will read from
// `base` (row pitch `ld` elements of type kType) in a tile starting at column
// n0: the 4 lanes sharing a row take its 128-byte lines in turn. Issued
// near the end of the tile's K loop, so that the epilogue's scattered 4-byte
// reads (aux under kDact, D under kAccumulate) find their lines in L2
// instead of waiting on DRAM while the tensor cores idle.
template <int kType>
__device__ __forceinline__ void prefetch_tile_rows(unsigned long long base, long long ld, int row,
                                                   int n0, const Fp8GemmParams& p, int lane) {
  if (row >= p.m) return;
  constexpr int kRowBytes = kBlockN * element_bytes<kType>();
  const int cols = min(kBlockN, p.n - n0);
  const long long first = (row * ld + n0) * element_bytes<kType>();
  const int bytes = cols * element_bytes<kType>();
#pragma unroll
  for (int line = lane % 4; line * 128 < kRowBytes; line += 4)
    if (line * 128 < bytes)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(base + first + line * 128));
}

// |x| as bits: for non-negative floats the unsigned order is the numeric
// order and every NaN sorts above +Inf, so an integer max keeps a NaN.
__device__ __forceinline__ unsigned abs_bits(float x) {
  return __float_as_uint(x) & 0x7FFFFFFFu;
}

// FP8 D's elements (row, col) and (row, col + 1), already times d_scale,
// into D^T: the same conversion as store_pair's (fp8x2), so the same bits.
__device__ __forceinline__ void store_transposed(const Fp8GemmParams& p, long long row, int col,
                                                 float x, float y, bool both) {
  const unsigned short packed = fp8x2<kOut>(x, y);
  unsigned char* out = reinterpret_cast<unsigned char*>(p.d_t) + row;
  out[col * p.ld_dt] = static_cast<unsigned char>(packed & 0xFF);
  if (both) out[(col + 1) * p.ld_dt] = static_cast<unsigned char>(packed >> 8);
}

// D's elements (row, col) and (row, col + 1) (the second when `both`) from
// their scaled accumulators x and y, in the order the configuration fixes:
//   v = x (+ D, accumulating) (+ bias); aux = v, or with kDact v *= act'(aux);
//   v = act(v); dbias sums += v; amax |= |v|; D = v, or fp8(v * d_scale)
//   (and D^T the same).
__device__ __forceinline__ void finish_pair(const Fp8GemmParams& p, long long row, int col, float x,
                                            float y, float b0, float b1, bool both, float d_scale,
                                            unsigned& amax, float& sum_x, float& sum_y) {
  const long long at = row * p.ldd + col;
  if (kAccumulate) {
    x += load_value<kOut>(p.d, at);
    if (both) y += load_value<kOut>(p.d, at + 1);
  }
  if (kBias >= 0) {
    x += b0;
    y += b1;
  }
  if (kDact) {
    const long long z = row * p.ld_aux + col;
    x *= dact(load_value<kAux, true>(p.aux, z));
    if (both) y *= dact(load_value<kAux, true>(p.aux, z + 1));
  } else if (kAux >= 0) {
    store_pair<kAux>(p.aux, row * p.ld_aux + col, x, y, both);
  }
  x = act(x);
  y = act(y);
  if (kDbias) {
    sum_x += x;
    if (both) sum_y += y;
  }
  if (kAmax) amax = max(amax, both ? max(abs_bits(x), abs_bits(y)) : abs_bits(x));
  if (kOut >= 3) {
    x *= d_scale;
    y *= d_scale;
  }
  store_pair<kOut>(p.d, at, x, y, both);
  if (kTransposed) store_transposed(p, row, col, x, y, both);
}

// dbias: a warp's column sums over its 16 rows of one wave (row0 is this
// thread's first; lanes 0-3 hold rows 16 g), columns col and col + 1. The 8
// lanes sharing lane % 4 hold two rows each; a butterfly adds them (every
// lane ends with the same sums), and lane < 4 writes partial row g. Every
// lane of the warp must come here (shuffles).
__device__ __forceinline__ void column_sums_out(const Fp8GemmParams& p, int row0, int col,
                                                bool inside, bool both, float sum_x, float sum_y,
                                                int lane) {
#pragma unroll
  for (int o = 4; o < 32; o <<= 1) {
    sum_x += __shfl_xor_sync(0xFFFFFFFFu, sum_x, o);
    sum_y += __shfl_xor_sync(0xFFFFFFFFu, sum_y, o);
  }
  if (lane < 4 && inside && row0 < p.m) {
    float* out =
        reinterpret_cast<float*>(p.dbias_partial) + static_cast<long long>(row0 / 16) * p.n + col;
    out[0] = sum_x;
    if (both) out[1] = sum_y;
  }
}

// ---- block scales ----------------------------------------------------------

// Starts copying the block scale of row (or column) `r` in K block `kb` to
// shared memory at `dst`; zero outside the operand (whose products are zero
// anyway: TMA's fill), without reading there.
__device__ __forceinline__ void copy_scale(float* dst, unsigned long long base, int rows_per_scale,
                                           long long row_stride, long long kblock_stride, int r,
                                           int rows, int kb) {
  const bool inside = r < rows;
  const float* src = reinterpret_cast<const float*>(base) +
                     (inside ? (r / rows_per_scale) * row_stride + kb * kblock_stride : 0);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(shared_address(dst)), "l"(src),
               "r"(inside ? 4 : 0)
               : "memory");
}

// Starts copying the K-block-major scales of rows r .. r + 3 in K block kb
// (16 bytes, consecutive floats from a 16-byte aligned address: the layout
// kAScalesKMajor / kBScalesKMajor promise) to `dst`; rows past `rows` read
// nothing and land as zeros.
__device__ __forceinline__ void copy_scales4(float* dst, unsigned long long base,
                                             long long kblock_stride, int r, int rows, int kb) {
  const int valid = min(max(rows - r, 0), 4);
  const float* src = reinterpret_cast<const float*>(base) + (valid ? kb * kblock_stride + r : 0);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(dst)), "l"(src),
               "r"(valid * 4)
               : "memory");
}

// One arrival on `bar` once every copy this thread started has landed (the
// barrier counts it among its expected arrivals: .noinc).
__device__ __forceinline__ void barrier_arrive_on_copies(unsigned long long* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(shared_address(bar))
               : "memory");
}

// Four floats from shared memory, in program order with the other volatile
// asm (the MXFP8 promotion's pinned accumulators).
__device__ __forceinline__ void load_shared4(float (&v)[4], unsigned address) {
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
               : "r"(address));
}

// Columns of D one thread holds: 8j + 2 * (lane % 4) + {0, 1}, j < kBlockN / 8.
constexpr int kThreadColumns = kBlockN / 4;

// ---- MXFP8 scales ------------------------------------------------------------

// 2^(code - 127) for an E8M0 code: code 0 is 2^-127 (a subnormal float) and
// 0xFF is NaN, as codegen/numerics/e8m0.hpp decodes them.
__device__ __forceinline__ float e8m0_value(unsigned code) {
  return code == 0      ? __uint_as_float(0x00400000u)
         : code == 0xFF ? __uint_as_float(0x7FFFFFFFu)
                        : __uint_as_float(code << 23);
}

// The MXFP8 scale warps (the loader warpgroup's warps 1-3: one warp
// decoding a stage took about 5 us against 0.6 us of math, ncu at 2732106):
// the loader's walk, one K block's E8M0 codes per stage, decoded into the
// floats the math warpgroups multiply by. Decoding needs the codes in
// registers, so the copies run kLead K blocks ahead (cp.async into a ring of
// raw words, one commit group per K block) and the warps decode the oldest,
// wait for its stage to be free, write the floats and arrive on the stage's
// "full" barrier (each lane once: its arrival releases its stores). A
// stage's work is kMxItems items, item i going to lane i % kMxLanes: A's
// tile rows (one code word each, stored as a float4: [row][32 K]; four
// scalar stores into [32 K][row] spilled in clusters of two), then
// B's column pairs 8j + 2q + {0, 1} (two words, stored as a float2 per 32 K
// where thread q of a quad reads them: [32 K][q][2j, 2j + 1]). Each tile's
// code addresses are worked out once, not per stage. Codes of rows that
// start unaligned (K not a multiple of 128 leaves rows of ceil(K/32) bytes)
// are read byte by byte when decoded instead. Codes past M, N or K decode
// to 1 (their products are zeros: TMA's fill), so nothing there turns a zero
// into a NaN.
constexpr int kMxItems = kBlockM + kBlockN / 2;

// Item `item`'s first row of the stage's scale rows (A's tile rows, then B's
// tile columns); a B column pair's second row is the next.
__device__ __forceinline__ int mx_item_row(int item) {
  if (item < kBlockM) return item;
  const int pair = item - kBlockM;
  return kBlockM + 8 * (pair / 4) + 2 * (pair % 4);
}

// The code row of scale row r in the tile at (m0, n0), or -1 past M or N.
__device__ __forceinline__ int mx_code_row(const Fp8GemmParams& p, int m0, int n0, int r) {
  const bool is_a = r < kBlockM;
  const int row = is_a ? m0 + r : n0 + (r - kBlockM);
  return row < (is_a ? p.m : p.n) ? row : -1;
}

// Where the codes of scale row r (code row `row`, not -1) start in K block kb.
__device__ __forceinline__ const unsigned char* mx_code_address(const Fp8GemmParams& p, int r,
                                                                int row, int kb) {
  const bool is_a = r < kBlockM;
  const unsigned long long base = is_a ? p.a_scale : p.b_scale;
  const long long stride = is_a ? p.a_scale_row_stride : p.b_scale_row_stride;
  return reinterpret_cast<const unsigned char*>(base) + row * stride + 4 * kb;
}

// Four codes (one per 32 K, the first in the low byte) as floats; those at
// or past `valid` as 1.
__device__ __forceinline__ float4 mx_decode(unsigned word, int valid) {
  return make_float4(
      e8m0_value(valid > 0 ? word & 0xFF : 127), e8m0_value(valid > 1 ? (word >> 8) & 0xFF : 127),
      e8m0_value(valid > 2 ? (word >> 16) & 0xFF : 127), e8m0_value(valid > 3 ? word >> 24 : 127));
}

// The MXFP8 scale warps' walk, for either code order: the loader's tiles
// and K blocks, one per stage. copy(s, kb, m0, n0) starts the cp.async
// copies of K block kb's codes (tile at m0, n0) into raw slot s (only where
// `async`: otherwise nothing is copied and decode reads global memory);
// kLead K blocks later, once those copies have landed (one commit group per
// K block) and stage s is free, decode(s, kb, m0, n0) writes the floats into
// its scale slot, and every lane arrives once on the stage's "full" barrier
// (its arrival releases its stores). Each tile's origin is worked out once.
template <typename Copy, typename Decode>
__device__ __forceinline__ void mx_scale_walk(const Fp8GemmParams& p, unsigned long long* full,
                                              unsigned long long* empty, int tiles_m, int tiles_n,
                                              int tiles, int kblocks, int first_tile,
                                              int tile_stride, unsigned rank, bool async,
                                              const Copy& copy, const Decode& decode) {
  constexpr int kLead = kStages - 1 < 4 ? kStages - 1 : 4;
  const int mine = first_tile < tiles ? (tiles - 1 - first_tile) / tile_stride + 1 : 0;
  const int steps = mine * kblocks;
  // The origin of the tile of step t.
  const auto origin = [&](int t, int& m0, int& n0) {
    const Tile tile =
        tile_at(first_tile + (t / kblocks) * tile_stride, tiles_m, tiles_n, p.tile_group);
    m0 = (tile.m * kClusterM + rank) * kBlockM;
    n0 = tile.n * kBlockN;
  };
  // The tiles being copied and decoded (kLead steps apart).
  int copy_m0 = 0, copy_n0 = 0, decode_m0 = 0, decode_n0 = 0;
  for (int t = 0; t < steps + kLead; ++t) {
    const int kb_copy = t % kblocks;
    if (t < steps && async) {
      if (kb_copy == 0) origin(t, copy_m0, copy_n0);
      copy(t % kStages, kb_copy, copy_m0, copy_n0);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    if (t < kLead) continue;
    // The K block kLead behind: its copies (every group but the newest
    // kLead) have landed.
    asm volatile("cp.async.wait_group %0;" ::"n"(kLead) : "memory");
    const int u = t - kLead;
    const int kb = u % kblocks;
    if (kb == 0) origin(u, decode_m0, decode_n0);
    const int s = u % kStages;
    barrier_wait(&empty[s], ((u / kStages) & 1) ^ 1);
    decode(s, kb, decode_m0, decode_n0);
    barrier_arrive(&full[s]);
  }
}

__device__ __forceinline__ void mx_scale_warps(const Fp8GemmParams& p, float* scale_slots,
                                               unsigned* raw, unsigned long long* full,
                                               unsigned long long* empty, int tiles_m, int tiles_n,
                                               int tiles, int kblocks, int first_tile,
                                               int tile_stride, unsigned rank) {
  constexpr int kRows = kBlockM + kBlockN;
  const int lane = threadIdx.x - (kConsumers * 128 + 32);
  const bool async = (p.a_scale | p.b_scale) % 4 == 0 && p.a_scale_row_stride % 4 == 0 &&
                     p.b_scale_row_stride % 4 == 0;
  const int codes = (p.k + 31) / 32;
  // The loops over a lane's items stay rolled, since unrolled (its rows
  // kept in registers) they spilled in the loader's 56 registers.
  const auto copy = [&](int s, int kb, int m0, int n0) {
    const int valid = min(4, codes - 4 * kb);
    unsigned* words = raw + s * kRows;
#pragma unroll 1
    for (int item = lane; item < kMxItems; item += kMxLanes) {
      const int r = mx_item_row(item);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (h == 1 && item < kBlockM) continue;
        const int row = mx_code_row(p, m0, n0, r + h);
        const unsigned char* src = mx_code_address(p, r + h, max(row, 0), row >= 0 ? kb : 0);
        asm volatile(
            "cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(shared_address(words + r + h)),
            "l"(src), "r"(row >= 0 ? valid : 0)
            : "memory");
      }
    }
  };
  const auto decode = [&](int s, int kb, int m0, int n0) {
    const int valid = min(4, codes - 4 * kb);
    float* slot = scale_slots + s * kScaleSlotFloats;
    const unsigned* words = raw + s * kRows;
#pragma unroll 1
    for (int item = lane; item < kMxItems; item += kMxLanes) {
      const int r = mx_item_row(item);
      float4 v[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (h == 1 && item < kBlockM) continue;
        const int row = mx_code_row(p, m0, n0, r + h);
        const int n = row >= 0 ? valid : 0;
        unsigned word = 0;
        if (async) {
          word = words[r + h];
        } else {
          const unsigned char* bytes = mx_code_address(p, r + h, max(row, 0), kb);
          for (int i = 0; i < n; ++i) word |= static_cast<unsigned>(bytes[i]) << (8 * i);
        }
        v[h] = mx_decode(word, n);
      }
      if (item < kBlockM) {
        *reinterpret_cast<float4*>(slot + 4 * r) = v[0];
      } else {
        const int pair = item - kBlockM;
        float* at = slot + 4 * kBlockM + (pair % 4) * kThreadColumns + 2 * (pair / 4);
        *reinterpret_cast<float2*>(at) = make_float2(v[0].x, v[1].x);
        *reinterpret_cast<float2*>(at + kBlockN) = make_float2(v[0].y, v[1].y);
        *reinterpret_cast<float2*>(at + 2 * kBlockN) = make_float2(v[0].z, v[1].z);
        *reinterpret_cast<float2*>(at + 3 * kBlockN) = make_float2(v[0].w, v[1].w);
      }
    }
  };
  mx_scale_walk(p, full, empty, tiles_m, tiles_n, tiles, kblocks, first_tile, tile_stride, rank,
                async, copy, decode);
}

// MXFP8 with K-block-major codes: the loader warpgroup's warps 1-3, the same
// walk as mx_scale_warps (mx_scale_walk), but a stage's work is at most 64
// chunks of 16 codes (one 32 K of 16 consecutive rows: a 16-byte copy, four
// 16-byte stores), at most one a lane: A's chunks, then B's. One warp doing
// two chunks a lane issued far fewer instructions than the row-major
// decoding but ran slower (197-206 TFLOP/s against 263-269 row-major, H100,
// 8f3478c): the math warps waited on its serial chain every stage. Spread
// over three warps it ran at 302-306 (H100, d69a377; docs/gemm.md, "MXFP8:
// where it stands"). Codes past M, N or K land as zeros and decode to
// 2^-127, which only multiplies zeros (TMA's fill). Where a code row or the
// codes' address is not 16-byte aligned, the bytes are read from global
// memory when decoded instead.
constexpr int kMxAChunks = 4 * (kBlockM / 16);
constexpr int kMxChunks = kMxAChunks + 4 * (kBlockN / 16);

// Where chunk `item` of the tile at (m0, n0) starts in K block kb, and how
// many of its 16 codes lie inside the operand (0: none, read nothing).
__device__ __forceinline__ const unsigned char* mx_chunk_source(const Fp8GemmParams& p, int item,
                                                                int m0, int n0, int kb, int codes,
                                                                int& valid) {
  const bool is_a = item < kMxAChunks;
  const int i = is_a ? item : item - kMxAChunks;
  const int per_32k = (is_a ? kBlockM : kBlockN) / 16;
  const int code_row = 4 * kb + i / per_32k;
  const int row = (is_a ? m0 : n0) + 16 * (i % per_32k);
  const int rows = is_a ? p.m : p.n;
  const bool inside = row < rows && code_row < codes;
  valid = inside ? min(16, rows - row) : 0;
  const unsigned long long base = is_a ? p.a_scale : p.b_scale;
  const long long pitch = is_a ? p.a_scale_kblock_stride : p.b_scale_kblock_stride;
  return reinterpret_cast<const unsigned char*>(base) + (inside ? code_row * pitch + row : 0);
}

// Decodes chunk `item`'s 16 codes (code e in byte e % 4 of word e / 4) into
// the stage's scale slot: A's as [32 K][row], B's where the math threads
// read them ([32 K][q][2j, 2j + 1] for column 8j + 2q + {0, 1}; a chunk
// starts at an even j, so each q takes one float4).
__device__ __forceinline__ void mx_store_chunk(float* slot, int item, const unsigned (&word)[4]) {
  float v[16];
#pragma unroll
  for (int e = 0; e < 16; ++e) v[e] = e8m0_value((word[e / 4] >> (8 * (e % 4))) & 0xFF);
  if (item < kMxAChunks) {
    constexpr int per_32k = kBlockM / 16;
    float* at = slot + (item / per_32k) * kBlockM + 16 * (item % per_32k);
#pragma unroll
    for (int q = 0; q < 4; ++q)
      *reinterpret_cast<float4*>(at + 4 * q) =
          make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
  } else {
    constexpr int per_32k = kBlockN / 16;
    const int i = item - kMxAChunks;
    float* at = slot + 4 * kBlockM + (i / per_32k) * kBlockN + 4 * (i % per_32k);
#pragma unroll
    for (int q = 0; q < 4; ++q)
      *reinterpret_cast<float4*>(at + q * kThreadColumns) =
          make_float4(v[2 * q], v[2 * q + 1], v[8 + 2 * q], v[9 + 2 * q]);
  }
}

__device__ __forceinline__ void mx_k_major_scale_warps(const Fp8GemmParams& p, float* scale_slots,
                                                       unsigned* raw, unsigned long long* full,
                                                       unsigned long long* empty, int tiles_m,
                                                       int tiles_n, int tiles, int kblocks,
                                                       int first_tile, int tile_stride,
                                                       unsigned rank) {
  const int lane = threadIdx.x - (kConsumers * 128 + 32);
  const bool async = (p.a_scale | p.b_scale) % 16 == 0 && p.a_scale_kblock_stride % 16 == 0 &&
                     p.b_scale_kblock_stride % 16 == 0;
  const int codes = (p.k + 31) / 32;
  // Both item loops stay rolled: unrolled, they spilled in the loader's 56
  // registers.
  const auto copy = [&](int s, int kb, int m0, int n0) {
    unsigned* chunks = raw + s * kRawWords;
#pragma unroll 1
    for (int item = lane; item < kMxChunks; item += kMxLanes) {
      int valid;
      const unsigned char* src = mx_chunk_source(p, item, m0, n0, kb, codes, valid);
      asm volatile(
          "cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(chunks + 4 * item)),
          "l"(src), "r"(valid)
          : "memory");
    }
  };
  const auto decode = [&](int s, int kb, int m0, int n0) {
    float* slot = scale_slots + s * kScaleSlotFloats;
    const unsigned* chunks = raw + s * kRawWords;
#pragma unroll 1
    for (int item = lane; item < kMxChunks; item += kMxLanes) {
      unsigned word[4] = {0, 0, 0, 0};
      if (async) {
        const uint4 c = *reinterpret_cast<const uint4*>(chunks + 4 * item);
        word[0] = c.x;
        word[1] = c.y;
        word[2] = c.z;
        word[3] = c.w;
      } else {
        int valid;
        const unsigned char* src = mx_chunk_source(p, item, m0, n0, kb, codes, valid);
#pragma unroll
        for (int e = 0; e < 16; ++e)
          if (e < valid) word[e / 4] |= static_cast<unsigned>(src[e]) << (8 * (e % 4));
      }
      mx_store_chunk(slot, item, word);
    }
  };
  mx_scale_walk(p, full, empty, tiles_m, tiles_n, tiles, kblocks, first_tile, tile_stride, rank,
                async, copy, decode);
}

// 128x128 B blocks that a tile never straddles: one scale per K block.
constexpr bool kUniformBScale = kBScaleRows == 128 && (128 % kBlockN == 0);
// Otherwise a tile of 128x128 B blocks (kBlockN <= 160, a multiple of 16,
// starting at a multiple of kBlockN) spans two: its columns before `split`
// (a multiple of 16, so no 8-column group of a thread straddles it) take
// the first block's scale, the rest the second's. Two floats, where a scale
// per column would take kBlockN / 4 registers.
constexpr bool kTwoBScales = kBScaleRows == 128 && !kUniformBScale;
static_assert(!kTwoBScales || kBlockN <= 160, "a tile spans at most two 128-column B blocks");

// The math warpgroups: wait for a stage, run its wgmmas, release it, and at
// the end of each tile store D.
__device__ __forceinline__ void consume(const Fp8GemmParams& p, const unsigned char* a_tiles,
                                        const unsigned char* b_tiles, const float* scale_slots,
                                        unsigned long long* full, unsigned long long* empty,
                                        int tiles_m, int tiles_n, int tiles, int kblocks,
                                        int first_tile, int tile_stride, unsigned rank) {
  const int warpgroup = threadIdx.x / 128;
  const int warp = (threadIdx.x / 32) % 4;
  const int lane = threadIdx.x % 32;
  const bool releases = lane == 0;
  const unsigned char* a_slice = a_tiles + warpgroup * 64 * kBlockK;  // this warpgroup's rows

  float acc[kWaves][kAccumulators];
  float part[kAccumulators];
  float part_odd[kAccumulators];  // MXFP8 only: the other k32's partial set
  float a_per_tensor = 1.0f, b_per_tensor = 1.0f;
  if (!kBlockScaled) {
    a_per_tensor = *reinterpret_cast<const float*>(p.a_scale);
    b_per_tensor = *reinterpret_cast<const float*>(p.b_scale);
  }
  const float d_scale = kOut >= 3 ? *reinterpret_cast<const float*>(p.d_scale) : 1.0f;
  unsigned amax = 0;  // bits of max |D| (before d_scale) over this thread's elements

  // A slot read by this CTA's wgmmas is free for the loaders of every CTA
  // that writes into it: this one's, and with clusters its peer's.
  const auto release = [&](int s) {
    if (!releases) return;
    barrier_arrive(&empty[s]);
    if (kClusterM > 1) barrier_arrive_in(&empty[s], rank ^ 1);
  };

  unsigned step = 0;
  for (int index = first_tile; index < tiles; index += tile_stride) {
    const Tile tile = tile_at(index, tiles_m, tiles_n, p.tile_group);
    // This thread's accumulator rows in wave v: row_base + kWaveRows v, and 8
    // below.
    const int row_base =
        (tile.m * kClusterM + rank) * kBlockM + warpgroup * 64 + warp * 16 + lane / 4;
    const int col0 = tile.n * kBlockN + 2 * (lane % 4);
    // The epilogue's reads, asked of L2 a few K blocks before the end of
    // the tile's K loop: late enough that the streaming A and B tiles do not
    // evict them first, early enough to cover DRAM's latency.
    const int prefetch_kb = max(kblocks - kEpiloguePrefetchLead, 0);
    const auto prefetch_epilogue_reads = [&](int kb) {
      if (!(kDact || kAccumulate) || kb != prefetch_kb) return;
#pragma unroll
      for (int w = 0; w < kWaves; ++w)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = row_base + w * kWaveRows + 8 * half;
          if (kDact) prefetch_tile_rows<kAux>(p.aux, p.ld_aux, row, tile.n * kBlockN, p, lane);
          if (kAccumulate) prefetch_tile_rows<kOut>(p.d, p.ldd, row, tile.n * kBlockN, p, lane);
        }
    };

    if (!kPromote) {
      int pending = -1;  // the slot the last wgmma group may still be reading
      for (int kb = 0; kb < kblocks; ++kb, ++step) {
        const int s = step % kStages;
        prefetch_epilogue_reads(kb);
        barrier_wait(&full[s], (step / kStages) & 1);
        wgmma_waves(acc, a_slice + s * kATileBytes, tile_descriptor(b_tiles + s * kBTileBytes),
                    kb > 0);
        wgmma_wait<1>();
        pin(acc);
        if (pending >= 0) release(pending);
        pending = s;
      }
      wgmma_wait<0>();
      pin(acc);
      if (pending >= 0) release(pending);
      const float alpha = a_per_tensor * b_per_tensor;
#pragma unroll
      for (int w = 0; w < kWaves; ++w)
#pragma unroll
        for (int i = 0; i < kAccumulators; ++i) acc[w][i] *= alpha;
    } else {
#pragma unroll
      for (int w = 0; w < kWaves; ++w)
#pragma unroll
        for (int i = 0; i < kAccumulators; ++i) acc[w][i] = 0.0f;
      for (int kb = 0; kb < kblocks && kMx; ++kb, ++step) {
        prefetch_epilogue_reads(kb);
        const int s = step % kStages;
        barrier_wait(&full[s], (step / kStages) & 1);
        const float* slot = scale_slots + s * kScaleSlotFloats;
        const unsigned long long b = tile_descriptor(b_tiles + s * kBTileBytes);
        const unsigned long long a = tile_descriptor(a_slice + s * kATileBytes);
        const int r = warpgroup * 64 + warp * 16 + lane / 4;
        // The row scales of this K block's four k32s, read up front: read in
        // each promotion instead, the 80-wide tiles spilled 16-20.
        float sa[kBlockK / 32][2];
        if (kMxKMajor) {
#pragma unroll
          for (int kk = 0; kk < kBlockK / 32; ++kk) {
            sa[kk][0] = slot[kk * kBlockM + r];
            sa[kk][1] = slot[kk * kBlockM + r + 8];
          }
        } else {
          const float4 x = *reinterpret_cast<const float4*>(slot + 4 * r);
          const float4 y = *reinterpret_cast<const float4*>(slot + 4 * (r + 8));
          sa[0][0] = x.x, sa[1][0] = x.y, sa[2][0] = x.z, sa[3][0] = x.w;
          sa[0][1] = y.x, sa[1][1] = y.y, sa[2][1] = y.z, sa[3][1] = y.w;
        }
        // 32 K's partial sum times its row's and column's scales, into the
        // total. This thread's columns' scales for these 32 K are
        // consecutive floats (the scale warps' order), read four (two
        // column pairs) at a time as the promotion goes, each load issued
        // one group ahead of its use so that its latency hides under the
        // previous group's arithmetic. The loads and the pinned results keep
        // that order: hoisted all together, the loads took 32 registers and
        // the 128-wide tile spilled 24.
        const auto promote = [&](float(&partial)[kAccumulators], int kk) {
          const float s0 = sa[kk][0], s1 = sa[kk][1];
          const unsigned columns =
              shared_address(slot + 4 * kBlockM + kk * kBlockN + (lane % 4) * kThreadColumns);
          float sb[2][4];
          load_shared4(sb[0], columns);
#pragma unroll
          for (int i = 0; i < kThreadColumns / 4; ++i) {
            if (i + 1 < kThreadColumns / 4) load_shared4(sb[(i + 1) % 2], columns + 16 * (i + 1));
#pragma unroll
            for (int jj = 0; jj < 2; ++jj)
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                const int j = 2 * i + jj;
                const float sb_j = sb[i % 2][2 * jj + c];
                acc[0][4 * j + c] = fmaf(partial[4 * j + c] * sb_j, s0, acc[0][4 * j + c]);
                acc[0][4 * j + 2 + c] =
                    fmaf(partial[4 * j + 2 + c] * sb_j, s1, acc[0][4 * j + 2 + c]);
              }
#pragma unroll
            for (int e = 0; e < 8; ++e) asm volatile("" : "+f"(acc[0][8 * i + e]));
          }
        };
        // Each k32's wgmma is issued before the previous one's promotion,
        // into the other partial set, so that the tensor cores work while
        // the fp32 arithmetic runs (1.12x at 8192^3 on the H200, measured
        // with the decoding taken out).
#pragma unroll
        for (int kk = 0; kk < kBlockK / 32; ++kk) {
          float(&next)[kAccumulators] = kk % 2 ? part_odd : part;
          float(&done)[kAccumulators] = kk % 2 ? part : part_odd;
          pin(next);
          wgmma_fence();
          wgmma_m64k32(next, a + 2 * kk, b + 2 * kk, 0);
          wgmma_commit();
          if (kk > 0) {
            wgmma_wait<1>();
            pin(done);
            promote(done, kk - 1);
          }
        }
        wgmma_wait<0>();
        pin(part_odd);
        promote(part_odd, kBlockK / 32 - 1);
        // The stage's tiles and scales are all read (the scale reads above
        // complete before this arrival, which releases them).
        release(s);
      }
      for (int kb = 0; kb < kblocks && !kMx; ++kb, ++step) {
        prefetch_epilogue_reads(kb);
        const int s = step % kStages;
        barrier_wait(&full[s], (step / kStages) & 1);
        // This K block's scales, out of the stage before it is released.
        float sa0[kWaves], sa1[kWaves];
        float sb_uniform = b_per_tensor;
        float sb[kBlockScaled && !kUniformBScale && !kTwoBScales ? kThreadColumns : 1];
        float sb_second = b_per_tensor;
#pragma unroll
        for (int w = 0; w < kWaves; ++w) sa0[w] = sa1[w] = a_per_tensor;
        if (kBlockScaled) {
          const float* slot = scale_slots + s * kScaleSlotFloats;
#pragma unroll
          for (int w = 0; w < kWaves; ++w) {
            const int r = w * kWaveRows + warpgroup * 64 + warp * 16 + lane / 4;
            sa0[w] = slot[r];
            sa1[w] = slot[r + 8];
          }
          if (kUniformBScale) {
            sb_uniform = slot[kBlockM];
          } else if (kTwoBScales) {
            sb_uniform = slot[kBlockM];
            sb_second = slot[kBlockM + 1];
          } else {
#pragma unroll
            for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
              for (int h = 0; h < 2; ++h)
                sb[2 * j + h] = slot[kBlockM + 8 * j + 2 * (lane % 4) + h];
          }
        }
#pragma unroll
        for (int w = 0; w < kWaves; ++w) {
          wgmma_block(part, tile_descriptor(a_slice + w * kWaveRows * kBlockK + s * kATileBytes),
                      tile_descriptor(b_tiles + s * kBTileBytes), false);
          wgmma_wait<0>();
          pin(part);
          if (w == kWaves - 1) release(s);
          // part[4j + 2h + c] is row (h ? row1 : row0) of wave w, column
          // col0 + 8j + c.
          if (kTwoBScales) {
            const int split = 128 - (tile.n * kBlockN) % 128;
#pragma unroll
            for (int j = 0; j < kBlockN / 8; ++j) {
              const float sb_j = 8 * j < split ? sb_uniform : sb_second;
              const float s0 = sa0[w] * sb_j, s1 = sa1[w] * sb_j;
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                acc[w][4 * j + c] += part[4 * j + c] * s0;
                acc[w][4 * j + 2 + c] += part[4 * j + 2 + c] * s1;
              }
            }
          } else if (kBlockScaled && !kUniformBScale) {
#pragma unroll
            for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                acc[w][4 * j + c] += part[4 * j + c] * (sa0[w] * sb[2 * j + c]);
                acc[w][4 * j + 2 + c] += part[4 * j + 2 + c] * (sa1[w] * sb[2 * j + c]);
              }
          } else {
            const float s0 = sa0[w] * sb_uniform, s1 = sa1[w] * sb_uniform;
#pragma unroll
            for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                acc[w][4 * j + c] += part[4 * j + c] * s0;
                acc[w][4 * j + 2 + c] += part[4 * j + 2 + c] * s1;
              }
          }
        }
      }
    }

    // Column pairs outermost: a pair's bias is loaded once for every wave
    // (waves outermost kept all of the tile's bias live: NVRTC spilled).
    // With kDbias every lane walks every column pair (column_sums_out
    // shuffles across lanes); without, a lane skips its columns past N.
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
      const int col = col0 + 8 * j;
      const bool inside = col < p.n;
      if (!kDbias && !inside) continue;
      const bool both = col + 1 < p.n;
      float b0 = 0.0f, b1 = 0.0f;
      if (kBias >= 0 && inside) {
        b0 = load_value<kBias>(p.bias, col);
        if (both) b1 = load_value<kBias>(p.bias, col + 1);
      }
#pragma unroll
      for (int w = 0; w < kWaves; ++w) {
        const int row0 = row_base + w * kWaveRows;
        const int row1 = row0 + 8;
        float sum_x = 0.0f, sum_y = 0.0f;  // dbias: this thread's rows of the two columns
        if (inside && row0 < p.m)
          finish_pair(p, row0, col, acc[w][4 * j], acc[w][4 * j + 1], b0, b1, both, d_scale, amax,
                      sum_x, sum_y);
        if (inside && row1 < p.m)
          finish_pair(p, row1, col, acc[w][4 * j + 2], acc[w][4 * j + 3], b0, b1, both, d_scale,
                      amax, sum_x, sum_y);
        if (kDbias) column_sums_out(p, row0, col, inside, both, sum_x, sum_y, lane);
      }
    }
  }

  // One atomic per warp for the whole walk. Every math thread gets here
  // (the tile loop's trip count is the CTA's), so the shuffles are complete.
  if (kAmax) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    if (lane == 0 && amax != 0) atomicMax(reinterpret_cast<unsigned*>(p.d_amax), amax);
  }
}

}  // namespace fp8c_gemm

extern "C" __global__ void __launch_bounds__(fp8c_gemm::kThreads, 1)
    FP8C_GEMM_ENTRY(const __grid_constant__ fp8c_gemm::Fp8GemmParams p) {
  using namespace fp8c_gemm;
  extern __shared__ unsigned char shared_raw[];
  // The 128-byte swizzle repeats every 1024 bytes: tiles start on that grid.
  unsigned char* shared = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<unsigned long long>(shared_raw) + 1023) & ~1023ull);
  unsigned char* a_tiles = shared;
  unsigned char* b_tiles = a_tiles + kStages * kATileBytes;
  float* scale_slots = reinterpret_cast<float*>(b_tiles + kStages * kBTileBytes);
  unsigned* raw_codes = reinterpret_cast<unsigned*>(scale_slots + kStages * kScaleSlotFloats);
  unsigned long long* full = reinterpret_cast<unsigned long long*>(raw_codes + kStages * kRawWords);
  unsigned long long* empty = full + kStages;

  // A cluster walks the tiles of a grid whose rows are pairs of tile rows.
  const int tiles_m = ((p.m + kBlockM - 1) / kBlockM + kClusterM - 1) / kClusterM;
  const int tiles_n = (p.n + kBlockN - 1) / kBlockN;
  const int tiles = tiles_m * tiles_n;
  const int first_tile = blockIdx.x / kClusterM;
  const int tile_stride = gridDim.x / kClusterM;
  const unsigned rank = kClusterM > 1 ? cluster_rank() : 0;
  const int kblocks = (p.k + kBlockK - 1) / kBlockK;
  const int warpgroup = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(&full[s], kFullArrivals);
      barrier_init(&empty[s], kConsumers * 4 * kClusterM);  // lane 0 of every math warp
    }
    // Make the initialized barriers visible to the TMA unit (async proxy).
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  // The peers' barriers must exist before anything arrives on them.
  if (kClusterM > 1)
    cluster_sync();
  else
    __syncthreads();

  if (warpgroup == kConsumers) {
    // The loader: one thread issues every TMA load.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kLoaderRegisters));
    if (threadIdx.x == kConsumers * 128) {
      tma_prefetch(&p.a);
      tma_prefetch(&p.b);
      unsigned step = 0;
      for (int index = first_tile; index < tiles; index += tile_stride) {
        const Tile tile = tile_at(index, tiles_m, tiles_n, p.tile_group);
        const int m0 = (tile.m * kClusterM + rank) * kBlockM;
        for (int kb = 0; kb < kblocks; ++kb, ++step) {
          const int s = step % kStages;
          barrier_wait(&empty[s], ((step / kStages) & 1) ^ 1);
          barrier_expect_bytes(&full[s], kATileBytes + kBTileBytes);
          tma_load(a_tiles + s * kATileBytes, &p.a, &full[s], kb * kBlockK, m0);
          unsigned char* b_part = b_tiles + s * kBTileBytes + rank * kBLoadBytes;
          const int n0 = tile.n * kBlockN + rank * kBLoadRows;
          if (kClusterM > 1)
            tma_load_multicast(b_part, &p.b, &full[s], kb * kBlockK, n0, (1 << kClusterM) - 1);
          else
            tma_load(b_part, &p.b, &full[s], kb * kBlockK, n0);
        }
      }
    } else if (kMxKMajor && threadIdx.x / 32 > kConsumers * 4) {
      mx_k_major_scale_warps(p, scale_slots, raw_codes, full, empty, tiles_m, tiles_n, tiles,
                             kblocks, first_tile, tile_stride, rank);
    } else if (kMx && !kMxKMajor && threadIdx.x / 32 > kConsumers * 4) {
      mx_scale_warps(p, scale_slots, raw_codes, full, empty, tiles_m, tiles_n, tiles, kblocks,
                     first_tile, tile_stride, rank);
    } else if (kBlockScaled && threadIdx.x / 32 == kConsumers * 4 + 1) {
      // The scale warp: the same walk, one K block's scales per stage.
      const int lane = threadIdx.x % 32;
      unsigned step = 0;
      for (int index = first_tile; index < tiles; index += tile_stride) {
        const Tile tile = tile_at(index, tiles_m, tiles_n, p.tile_group);
        const int m0 = (tile.m * kClusterM + rank) * kBlockM;
        for (int kb = 0; kb < kblocks; ++kb, ++step) {
          const int s = step % kStages;
          float* slot = scale_slots + s * kScaleSlotFloats;
          barrier_wait(&empty[s], ((step / kStages) & 1) ^ 1);
          // Asynchronous copies, so that this warp runs ahead by as many
          // K blocks as the ring holds instead of waiting out a global load
          // per block; each lane's arrival lands when its copies have.
          if (kAScalesKMajor) {
            for (int c = lane; c < kBlockM / 4; c += 32)
              copy_scales4(slot + 4 * c, p.a_scale, p.a_scale_kblock_stride, m0 + 4 * c, p.m, kb);
          } else {
            for (int r = lane; r < kBlockM; r += 32)
              copy_scale(slot + r, p.a_scale, kAScaleRows, p.a_scale_row_stride,
                         p.a_scale_kblock_stride, m0 + r, p.m, kb);
          }
          const int n0 = tile.n * kBlockN;
          if (kUniformBScale) {
            // One 128x128 block covers the tile's columns: one copy (the
            // math warps read only this one).
            if (lane == 0)
              copy_scale(slot + kBlockM, p.b_scale, kBScaleRows, p.b_scale_row_stride,
                         p.b_scale_kblock_stride, n0, p.n, kb);
          } else if (kTwoBScales) {
            // The two 128-column blocks the tile spans (the second may lie
            // past N: zero, and so are its columns' products).
            if (lane < 2)
              copy_scale(slot + kBlockM + lane, p.b_scale, kBScaleRows, p.b_scale_row_stride,
                         p.b_scale_kblock_stride, (n0 / 128 + lane) * 128, p.n, kb);
          } else if (kBScalesKMajor) {
            for (int c = lane; c < kBlockN / 4; c += 32)
              copy_scales4(slot + kBlockM + 4 * c, p.b_scale, p.b_scale_kblock_stride, n0 + 4 * c,
                           p.n, kb);
          } else {
            for (int c = lane; c < kBlockN; c += 32)
              copy_scale(slot + kBlockM + c, p.b_scale, kBScaleRows, p.b_scale_row_stride,
                         p.b_scale_kblock_stride, n0 + c, p.n, kb);
          }
          barrier_arrive_on_copies(&full[s]);
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kMathRegisters));
    consume(p, a_tiles, b_tiles, scale_slots, full, empty, tiles_m, tiles_n, tiles, kblocks,
            first_tile, tile_stride, rank);
  }
  // No CTA may leave while its peer can still write into its shared memory
  // or arrive on its barriers.
  if (kClusterM > 1) cluster_sync();
}
