// Decode family, FC2 and the top-k combine: partial[pos, :] = w_pos * (act[pos] . W2[e]^T + b2[e]) for
// every routed pair, then, per 16-row slab of H, the last CTA to finish that slab sums the pairs of each
// token in slot order (k = 0..K-1) and writes out[m, slab] in bf16. Fixed-order sums, no float
// atomics: the output is bit-identical from run to run. Grid: (H/16 slabs, active-slot capacity).
#pragma once
#include "slab_mma.cuh"

struct DecodeFc2Params {
  const u32x4* w;            // prepared FC2 weights [E][H/16][chunks][32 lanes] x 16 B
  const u16* s;              // prepared FC2 scales
  const float* gscale;       // [E] (NVFP4) or null
  const float* bias;         // [E][H] or null
  const u16* act;            // [pairs][I] bf16 from FC1
  const i32* num_active;
  const i32* active_expert;
  const i32* active_offset;
  const float* pair_weight;
  const i32* pos_of;         // [M*K]
  float* partial;            // [pairs][H] fp32
  i32* counters;             // [H/16], zero on entry (route zeroes them), zero again on exit
  u16* out;                  // [M][H] bf16
  i32 tokens, top_k;
};

template <bool kNvfp4, bool kBias, int kH, int kI, int kWarps, int kNT>
__device__ void moe_decode_fc2(const DecodeFc2Params& p) {
  constexpr int kChunks = (kI + 63) / 64;
  constexpr int kSlabs = kH / 16;
  using SG = ScaleGeometry<kNvfp4>;
  __shared__ float red[kWarps > 1 ? kWarps * kNT * 4 * 32 : 1];
  __shared__ int is_last;

  pdl_wait_primary();
  const int slab = blockIdx.x, slot = blockIdx.y;
  const int n_active = *p.num_active;
  // With no routed pair at all, slot 0 still takes part so that out is written (with zeros).
  const int participants = n_active > 0 ? n_active : 1;
  if (slot >= participants) return;
  const int lane = lane_id(), warp = threadIdx.x >> 5, g = lane >> 2, c4 = lane & 3;

  if (slot < n_active) {
    const int e = p.active_expert[slot];
    const int off = p.active_offset[slot], count = p.active_offset[slot + 1] - off;
    const size_t slab_index = (size_t)e * kSlabs + slab;
    const u32x4* w = p.w + slab_index * kChunks * 32 + lane;
    const u16* s = p.s + slab_index * kChunks * SG::kU16PerChunk;
    const float gs = kNvfp4 ? p.gscale[e] : 1.f;
    for (int pass = 0; pass < count; pass += 8 * kNT) {
      const int live = min(kNT, (count - pass + 7) / 8);
      const u16* rows[kNT];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const int t = pass + nt * 8 + g;
        rows[nt] = t < count ? p.act + (size_t)(off + t) * kI : nullptr;
      }
      float acc[kNT][1][4];
      slab_mma<kNvfp4, kI, 1, kWarps, kNT>(w, s, rows, live, acc);
      reduce_over_warps<1, kWarps, kNT>(acc, red);
      if (warp == 0) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int t = pass + nt * 8 + 2 * c4 + (i & 1);
            if (nt < live && t < count) {
              const int row = slab * 16 + g + (i >> 1) * 8;
              float y = acc[nt][0][i] * gs;
              if (kBias) y += p.bias[(size_t)e * kH + row];
              p.partial[(size_t)(off + t) * kH + row] = p.pair_weight[off + t] * y;
            }
          }
        }
      }
      __syncthreads();
    }
  }

  // Completion ticket: the last participant of this slab combines it.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(&p.counters[slab], 1) == participants - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  for (int idx = threadIdx.x; idx < p.tokens * 16; idx += blockDim.x) {
    const int m = idx >> 4, row = slab * 16 + (idx & 15);
    float sum = 0.f;
    for (int k = 0; k < p.top_k; ++k) {
      const int pos = p.pos_of[m * p.top_k + k];
      if (pos >= 0) sum += ld_cg_f32(p.partial + (size_t)pos * kH + row);
    }
    p.out[(size_t)m * kH + row] = f32_to_bf16(sum);
  }
  if (threadIdx.x == 0) p.counters[slab] = 0;
}
