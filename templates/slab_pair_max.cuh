// An a8 scale block of FC1's output (the intermediate) spans 32 rows along I: two 16-row slabs. In the
// warpgroup-MMA kernels (batch tiles `m`, prefill) each warp owns one slab, and a CTA's slabs are
// consecutive by warp (slab = group * kWarps + warp, kWarps even), so the block of slabs 2j and 2j + 1
// sits in warps 2w and 2w + 1 of one warpgroup. The pair exchanges its per-column maxima through a small
// shared-memory area, synchronized by a named barrier of the pair's 64 threads only: no CTA-wide barrier,
// so the rest of the CTA (other pairs, a producer warpgroup) runs on. The decode family's a8 FC1 pairs the
// first warps of its two slab groups the same way (SlabGroupPairBlock).
#pragma once
#include "act_quant.cuh"

// Named barrier ids of the pairs: 2 + warp / 2 (at most 9 with 16 warps). 0 is __syncthreads, 1 is
// bulk_copy.cuh's sync_first_threads.
inline constexpr int kSlabPairBarrierBase = 2;

// The barrier of pair `pair` among kPairs, each id an immediate: ptxas then counts the ids the kernel
// uses (2 + kPairs) rather than all 16 a register operand could name.
template <int kId>
MOEJIT_DEVICE void named_barrier_64() {
  asm volatile("bar.sync %0, 64;" ::"n"(kId) : "memory");
}
template <int kPairs, int kPair = 0>
MOEJIT_DEVICE void slab_pair_sync(int pair) {
  if constexpr (kPair < kPairs) {
    if (pair == kPair)
      named_barrier_64<kSlabPairBarrierBase + kPair>();
    else
      slab_pair_sync<kPairs, kPair + 1>(pair);
  }
}

// The exchange area of a kernel: one u32 per (warp, column) of a kCols-wide token tile. A function-scope
// shared array, so every caller with the same shape shares one area (the full- and half-width tiles of
// the prefill kernels included).
template <int kWarps, int kCols>
MOEJIT_DEVICE unsigned* slab_pair_area() {
  __shared__ unsigned area[kWarps * kCols];
  return area;
}

// A block's rows spread over one warp: nothing to exchange.
struct SingleWarpBlock {
  static constexpr int kBlockWarps = 1;
  template <int kNT>
  MOEJIT_DEVICE void operator()(unsigned (&)[kNT][2]) const {}
};

// The exchange itself: this warp's column maxima into `mine` (lanes 0..3 hold every column's), `sync` (a
// barrier of both warps), then the maximum with the partner's from `other`.
template <int kNT, class Sync>
MOEJIT_DEVICE void exchange_column_maxima(unsigned (&amax)[kNT][2], unsigned* mine, const unsigned* other, Sync sync) {
  const int lane = lane_id(), c4 = lane & 3;
  if (lane < 4)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) mine[nt * 8 + 2 * c4 + c] = amax[nt][c];
  sync();
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const unsigned o = other[nt * 8 + 2 * c4 + c];
      amax[nt][c] = o > amax[nt][c] ? o : amax[nt][c];
    }
}

// amax[nt][c]: the maximum (fp32 bits of |v|) over this warp's 16 rows of column nt * 8 + 2 * (lane & 3) + c,
// already reduced over the lanes of the column (every lane of a column holds it). Becomes the maximum over
// both slabs of the pair. Every lane of both warps must call it, also a warp whose slab lies past the
// matrix (its maxima are 0). Two barriers: the first keeps a warp from overwriting its area while the
// partner still reads the previous exchange (the persistent prefill kernels exchange once per unit).
template <int kWarps, int kCols>
struct WarpPairBlock {
  static constexpr int kBlockWarps = 2;
  static_assert(kWarps % 2 == 0 && kWarps <= 16, "pairs of warps, named barriers 2..9");
  template <int kNT>
  MOEJIT_DEVICE void operator()(unsigned (&amax)[kNT][2]) const {
    static_assert(kNT * 8 <= kCols, "the area holds the tile's columns");
    unsigned* area = slab_pair_area<kWarps, kCols>();
    const int warp = threadIdx.x >> 5;
    slab_pair_sync<kWarps / 2>(warp >> 1);
    exchange_column_maxima(amax, area + warp * kCols, area + (warp ^ 1) * kCols,
                           [&] { slab_pair_sync<kWarps / 2>(warp >> 1); });
  }
};

// The decode family's a8 FC1 CTA (templates/moe_decode_fc1.cuh) computes a block's two slabs with two
// groups of kWarps warps; after each group's reduction over its K parts, its first warp (warp 0 or warp
// kWarps) holds its slab's sums for kNT n-tiles. Those two warps exchange their maxima through an area of
// kNT * 8 columns each, behind one named barrier of their 64 threads (the kernel has no warp pairs of
// WarpPairBlock, whose ids start at the same one). One barrier is enough: the CTA-wide barrier that ends
// each of the kernel's passes keeps the next exchange from writing the area before the partner has read
// it. Every lane of both warps calls it, a warp without a slab too (its maxima are 0).
template <int kWarps, int kNT>
struct SlabGroupPairBlock {
  static constexpr int kBlockWarps = 2;
  template <int kN>
  MOEJIT_DEVICE void operator()(unsigned (&amax)[kN][2]) const {
    static_assert(kN == kNT, "the area holds the pass's n-tiles");
    unsigned* area = slab_pair_area<2, kNT * 8>();
    const int group = (threadIdx.x >> 5) / kWarps;
    exchange_column_maxima(amax, area + group * kNT * 8, area + (group ^ 1) * kNT * 8,
                           [] { named_barrier_64<kSlabPairBarrierBase>(); });
  }
};

// The block maximum of a kernel with one slab per warp (kWarps consumer warps, token tiles of kCols):
// a8's blocks span a warp pair, a4's one warp.
template <bool kPair, int kWarps, int kCols>
struct SlabBlockMaxOf {
  using type = SingleWarpBlock;
};
template <int kWarps, int kCols>
struct SlabBlockMaxOf<true, kWarps, kCols> {
  using type = WarpPairBlock<kWarps, kCols>;
};
template <int kWarps, int kCols>
using OneSlabPerWarpBlockMax = typename SlabBlockMaxOf<kActPrecision == kActA8, kWarps, kCols>::type;

// The quantizers of a warp's kNT x 2 accumulator columns (MMA layout: column nt * 8 + 2 * (lane & 3) + c,
// rows g and g + 8 of a 16-row slab in lane g * 4 + lane % 4), from each lane's own maxima (fp32 bits of
// |v| over its rows of the column): the block maximum over the column's 8 lanes (one lane % 4), then over
// the block's other slab where BlockMax says so; a4 with 4 or more n-tiles shares the block scales out
// (act_quant.cuh a4_column_block_scales, one scale per lane). apply(nt, c, quantizer) is called once per
// column with its block's ActBlockQuant (operand values times 2^64, a4 without 1/gs). gs: a4's global scale
// of the intermediate. Every lane of the warp calls it.
template <int kNT, class BlockMax, class Apply>
MOEJIT_DEVICE void with_column_quantizers(unsigned (&amax)[kNT][2], float gs, BlockMax block_max, Apply apply) {
  using Quant = ActBlockQuant<kActPrecision, 64>;
  if constexpr (kA4SharedScales<kNT>) {
    static_assert(BlockMax::kBlockWarps == 1, "a4's blocks lie in one warp");
    float scale[kNT][2];
    a4_column_block_scales<kNT>(amax, gs, scale);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) apply(nt, c, Quant::from_a4_scale(scale[nt][c], gs));
  } else {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) amax[nt][c] = block_amax_bits<0x1C>(amax[nt][c]);
    block_max(amax);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) apply(nt, c, Quant(amax[nt][c], gs));
  }
}

// The slab's quantized FC1 outputs in the MMA accumulator layout: v[nt * 4 + i] is row g + 8 (i >> 1) and
// column nt * 8 + 2 * (lane & 3) + (i & 1) (g = lane >> 2), with 0 where there is no value (a column past
// the tile, a slab past the matrix). Each becomes the key's operand value times 2^64 (a4 without 1/gs), by
// its column's quantizer (with_column_quantizers). gs: a4's global scale of the intermediate. Every lane of
// the warp calls it.
template <int kNT, class BlockMax>
MOEJIT_DEVICE void quantize_slab_columns(float (&v)[kNT * 4], float gs, BlockMax block_max) {
  static_assert(kActPrecision == kActA16 || 16 * BlockMax::kBlockWarps == kActBlock<kActPrecision>,
                "one scale block of rows");
  unsigned amax[kNT][2];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const unsigned a = __float_as_uint(v[nt * 4 + c]) & 0x7FFFFFFFu, b = __float_as_uint(v[nt * 4 + 2 + c]) & 0x7FFFFFFFu;
      amax[nt][c] = a > b ? a : b;
    }
  with_column_quantizers<kNT>(amax, gs, block_max, [&](int nt, int c, const ActBlockQuant<kActPrecision, 64>& q) {
    v[nt * 4 + c] = q(v[nt * 4 + c]);
    v[nt * 4 + 2 + c] = q(v[nt * 4 + 2 + c]);
  });
}
