// The inner product of the decode family: one 16-row slab of FP4 weights against up to 8*kNT token
// rows of bf16 activations, on tensor cores (m16n8k16, weights as A, tokens on the narrow N side).
//
// Warps of the CTA split K in 64-wide chunks (chunk c goes to warp c % kWarps) and the partial sums
// are reduced in a fixed warp order, so results are bit-reproducible.
#pragma once
#include "fp4_decode.cuh"

template <bool kNvfp4>
struct ScaleGeometry {
  static constexpr int kBlocksPerChunk = kNvfp4 ? 4 : 2;  // scale blocks per 64-wide K chunk
  static constexpr int kU16PerChunk = kBlocksPerChunk * 8; // one u16 (rows g, g+8) per block and g
  // The packed scale pair a lane needs: its 16-wide K run lies in block 16*(lane%4)/blocksize.
  static MOEJIT_DEVICE int lane_index(int lane) { return (kNvfp4 ? (lane & 3) : ((lane & 3) >> 1)) * 8 + (lane >> 2); }
};

// w: this slab's first 16-byte run for this lane (chunk 0, matrix 0); runs of chunk c, matrix m are at
// w + (c * kMats + m) * 32. s: this slab's scale plane; b_rows[nt]: the bf16 row of the token that is
// column (lane/4) of n-tile nt, or nullptr (column contributes zeros).
template <bool kNvfp4, int kK, int kMats, int kWarps, int kNT>
MOEJIT_DEVICE void slab_mma(const u32x4* w, const u16* s, const u16* const (&b_rows)[kNT], int live_tiles,
                            float (&acc)[kNT][kMats][4], bool wait_primary_after_prefetch) {
  using SG = ScaleGeometry<kNvfp4>;
  constexpr int kChunks = (kK + 63) / 64;
  const int lane = lane_id(), warp = threadIdx.x >> 5;
  const int sidx = SG::lane_index(lane);
  const int kofs = 16 * (lane & 3);
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int m = 0; m < kMats; ++m)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[nt][m][i] = 0.f;

  // Two chunks in flight per warp: the next chunk's weights and scales are loaded before the current
  // one is decoded, so each lane keeps 2 * kMats 16-byte loads outstanding.
  u32x4 wn[kMats];
  u32 sn[kMats];
  int c = warp;
  if (c < kChunks) {
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      wn[m] = ld_stream_16(w + (c * kMats + m) * 32);
      sn[m] = ld_stream_u16(s + (c * kMats + m) * SG::kU16PerChunk + sidx);
    }
  }
  // Weights never depend on the previous kernel, so a programmatic dependent waits only here, after
  // its first loads are in flight and before touching the previous kernel's outputs (b_rows).
  if (wait_primary_after_prefetch) pdl_wait_primary();
  for (; c < kChunks; c += kWarps) {
    u32x4 wc[kMats];
    u32 sc[kMats];
#pragma unroll
    for (int m = 0; m < kMats; ++m) { wc[m] = wn[m]; sc[m] = sn[m]; }
    const int cn = c + kWarps;
    if (cn < kChunks) {
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
        wn[m] = ld_stream_16(w + (cn * kMats + m) * 32);
        sn[m] = ld_stream_u16(s + (cn * kMats + m) * SG::kU16PerChunk + sidx);
      }
    }
    const int k0 = c * 64 + kofs;
    u32x4 xv[kNT][2];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      if (b_rows[nt] != nullptr && (kK % 64 == 0 || k0 < kK)) {
        xv[nt][0] = ld_nc_16(b_rows[nt] + k0);
        xv[nt][1] = ld_nc_16(b_rows[nt] + k0 + 8);
      } else {
        xv[nt][0] = xv[nt][1] = u32x4{0u, 0u, 0u, 0u};
      }
    }
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      u32 sg, sg8;
      decode_scale_pair<kNvfp4>(sc[m], sg, sg8);
      const u32 words[4] = {wc[m].x, wc[m].y, wc[m].z, wc[m].w};
#pragma unroll
      for (int st = 0; st < 4; ++st) {
        u32 a[4];
        fp4_decode_word(words[st], sg, sg8, a);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          if (nt < live_tiles) {
            const u32x4& xq = xv[nt][st >> 1];
            const u32 b0 = (st & 1) ? xq.z : xq.x, b1 = (st & 1) ? xq.w : xq.y;
            mma_bf16_16816(acc[nt][m], a, b0, b1);
          }
        }
      }
    }
  }
}

// Sums acc over the CTA's warps in warp order into warp 0's registers (other warps' acc is left
// undefined). red must hold kWarps * kNT * kMats * 4 * 32 floats.
template <int kMats, int kWarps, int kNT>
MOEJIT_DEVICE void reduce_over_warps(float (&acc)[kNT][kMats][4], float* red) {
  if (kWarps == 1) return;
  const int lane = lane_id(), warp = threadIdx.x >> 5;
  if (warp != 0) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int m = 0; m < kMats; ++m)
#pragma unroll
        for (int i = 0; i < 4; ++i) red[(((warp * kNT + nt) * kMats + m) * 4 + i) * 32 + lane] = acc[nt][m][i];
  }
  __syncthreads();
  if (warp == 0) {
    for (int w = 1; w < kWarps; ++w)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int m = 0; m < kMats; ++m)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[nt][m][i] += red[(((w * kNT + nt) * kMats + m) * 4 + i) * 32 + lane];
  }
}
