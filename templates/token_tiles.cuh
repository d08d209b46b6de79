// Token tiles of the families that run an expert's routed pairs through the tensor cores in tiles
// (batch, prefill): which (slot, tile) a tile index names in the route kernel's lists, and the block
// scales as bf16x2 multipliers of the placed FP4 weights.
#pragma once
#include "fp4_decode.cuh"
#include "routing_params.cuh"

// Which (slot, token tile, row group) CTA `id` of the batch grid serves: ids are laid out slot by slot,
// each slot's tiles x row groups with the tile varying fastest. Called by every thread (barrier inside).
struct BatchTile {
  int slot;       // active slot, or -1 when the CTA has nothing to do
  int expert;     // local expert
  int first;      // the tile's first pair within the slot
  int count;      // pairs routed to the slot
  int group;      // row group (kWarps slabs)
  const i32* pairs;  // the slot's pair indices (route kernel list)
};

template <int kTile, int kGroups>
MOEJIT_DEVICE BatchTile batch_tile(const RoutingArgs& r, int id) {
  __shared__ BatchTile found;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    const int num_active = *r.num_active;
    BatchTile t{-1, -1, 0, 0, 0, nullptr};
    int before = 0;  // CTAs of the slots already scanned
    for (int base = 0; base < num_active; base += 32) {
      const int s = base + lane;
      int ctas = 0, off = 0, end = 0;
      if (s < num_active) {
        off = r.active_offset[s];
        end = r.active_offset[s + 1];
        ctas = (end - off + kTile - 1) / kTile * kGroups;
      }
      int incl = ctas;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += v;
      }
      const int excl = before + incl - ctas;
      const u32 hit = __ballot_sync(0xffffffffu, s < num_active && id >= excl && id < excl + ctas);
      if (hit) {
        const int src = __ffs(hit) - 1;
        const int local = __shfl_sync(0xffffffffu, id - excl, src);
        const int o = __shfl_sync(0xffffffffu, off, src), e = __shfl_sync(0xffffffffu, end, src);
        const int tiles = (e - o + kTile - 1) / kTile;
        t.slot = base + src;
        t.expert = r.active_expert[t.slot];
        t.first = local % tiles * kTile;
        t.group = local / tiles;
        t.count = e - o;
        t.pairs = r.pair_index + o;
        break;
      }
      before = __shfl_sync(0xffffffffu, before + incl, 31);
    }
    if (lane == 0) found = t;
  }
  __syncthreads();
  return found;
}

// The sum over active slots 0..slots-1 of units(pairs routed to the slot). Called by the 32 lanes of one
// warp; every lane returns the sum.
template <typename Units>
MOEJIT_DEVICE int sum_over_slots(const RoutingArgs& r, int slots, Units units) {
  int total = 0;
  for (int s = lane_id(); s < slots; s += 32) total += units(r.active_offset[s + 1] - r.active_offset[s]);
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) total += __shfl_xor_sync(0xffffffffu, total, d);
  return total;
}

// The number of kTile-pair tiles of all active slots (each slot's pairs rounded up to whole tiles), by one
// warp.
template <int kTile>
MOEJIT_DEVICE int token_tile_count(const RoutingArgs& r) {
  return sum_over_slots(r, *r.num_active, [](int pairs) { return (pairs + kTile - 1) / kTile; });
}

// The block scales of rows g and g + 8 as bf16x2 multipliers of the placed weights (fp4_decode.cuh: e2m1
// value x 2^-126), each the scale x 2^kShift, so a placed weight times it is e2m1 x scale x 2^(kShift-126).
// FC2 (activations stored times 2^64) takes kShift = 62: the MMA sums true products. FC1 (the layer input as
// is, no multiply per piece) takes kShift = 100: products x w 2^-26, corrected by batch_output_scale. Exact
// in bf16 for every NVFP4 scale (e4m3 x 2^kShift: 4 significant bits) and for the MXFP4 codes whose
// product stays above bf16's smallest subnormal and whose multiplier is finite: 59..192 (scales
// 2^-68..2^65) for FC2, 21..154 (2^-106..2^27) for FC1; code 0 gives 0 and codes above the range infinity,
// as block_scales' 0 and 255 do. Both halves carry the same value.
template <bool kNvfp4, int kShift>
MOEJIT_DEVICE void batch_row_scales(u32x2 packed, int block, u32& sg, u32& sg8) {
  if (kNvfp4) {
    float a, b;
    block_scales<true>(packed, block, a, b);
    const float shift = __uint_as_float((u32)(127 + kShift) << 23);  // 2^kShift
    const u32 ha = f32_to_bf16(a * shift), hb = f32_to_bf16(b * shift);
    sg = ha | (ha << 16);
    sg8 = hb | (hb << 16);
  } else {
    // e8m0 code c is 2^(c - 127); times 2^kShift its bf16 exponent field is c + kShift.
    constexpr u32 kTop = 254 - kShift;
    const u32 cg = (packed.x >> (16 * block)) & 0xFFu, cg8 = (packed.x >> (16 * block + 8)) & 0xFFu;
    const u32 bg = cg == 0 ? 0u : cg > kTop ? 0x7F80u : (cg + kShift) << 7;
    const u32 bg8 = cg8 == 0 ? 0u : cg8 > kTop ? 0x7F80u : (cg8 + kShift) << 7;
    sg = bg | (bg << 16);
    sg8 = bg8 | (bg8 << 16);
  }
}

// The scale shift of batch_row_scales: FC1 reads the layer input as is (kRawB), FC2 its stored activations
// times 2^64.
template <bool kRawB>
inline constexpr int kBatchScaleShift = kRawB ? 100 : 62;

// The fp32 multiplier of the sums: NVFP4's global scale, and 2^26 for FC1, whose weights are scaled with
// kShift = 100 against the raw layer input (batch_row_scales).
template <bool kNvfp4, bool kRawB>
MOEJIT_DEVICE float wgmma_output_scale(const float* gscale, int e) {
  return (kNvfp4 ? gscale[e] : 1.f) * (kRawB ? 67108864.f : 1.f);
}
