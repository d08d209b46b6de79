// Batch family (M medium and large): the decode family's inner product with the token side widened.
//
// A CTA owns kWarps x kPerWarp adjacent 16-row slabs of one expert (kPerWarp per warp, the key's `slabs`;
// FC1's gate and up rows together)
// and a tile of kTile = 8 * kNT of that expert's pairs (tokens on the narrow N side of m16n8k16, "swap
// AB"). Per 64-wide K chunk the CTA stages its tile's activation rows in shared memory once (times 2^64,
// the MMA scaling of fp4_decode.cuh), and every warp decodes its slab's FP4 words once and multiplies them
// against all kNT column tiles, so one decode serves kTile tokens instead of 8. Activations, weights and
// scales stream through a ring of shared-memory stages by cp.async, `depth` chunks ahead of the one
// computed; the CTAs that share a slab group run next to each other in the grid (their tiles are
// consecutive), so the weights come from the L2 after the first of them.
//
// Tile assignment is fixed at launch: the grid has one CTA per (token tile, row group) of an upper bound
// on the tile count (pairs / kTile + active experts), and each CTA finds its (slot, tile) in the route
// kernel's lists; CTAs past the real count exit. Every sum has a fixed order (K in chunk order inside the
// MMA accumulators, the top-k in slot order in batch_combine), so results are bit-reproducible.
#pragma once
#include "bulk_copy.cuh"
#include "expert_work.cuh"
#include "fc1_epilogue.cuh"
#include "moe_batch_params.cuh"
#include "slab_mma.cuh"
#include "token_tiles.cuh"
#include "topk_combine.cuh"

// The activation tile in shared memory: kTile rows of one 64-wide chunk, 80 bf16 apart (160 bytes), so the
// 8-byte pieces that the 16 lanes of an LDS.64 phase read (4 rows x 4 quads) fall on 32 distinct banks.
inline constexpr int kBatchRowStride = 80;



// One 64-wide chunk of a slab against kNT column tiles: per k16 step and matrix, the word is decoded, its
// four A registers are multiplied by their rows' block scales (batch_row_scales), and the MMAs accumulate
// straight into acc. Per MMA that leaves ~3 other instructions (decode and scale shared by kNT MMAs),
// where chunk_mma's fp32 block-scale FMAs cost 4 per MMA. kRawB: the pieces are the layer input as is.
template <bool kNvfp4, int kMats, int kNT, bool kRawB, typename XPiece>
MOEJIT_DEVICE void batch_chunk_mma(const u32x4 (&wc)[kMats], const u32x2 (&sc)[kMats], int live_tiles,
                                   float (&acc)[kNT][kMats][4], XPiece x_piece) {
  constexpr int kStepsPerBlock = kNvfp4 ? 1 : 2;  // MXFP4 blocks span two k16 steps
  u32 sg[kMats], sg8[kMats];
#pragma unroll
  for (int st = 0; st < 4; ++st) {
    u32x2 xv[kNT];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) xv[nt] = x_piece(nt, st);
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      if (st % kStepsPerBlock == 0)
        batch_row_scales<kNvfp4, kBatchScaleShift<kRawB>>(sc[m], st / kStepsPerBlock, sg[m], sg8[m]);
      const u32 word = st == 0 ? wc[m].x : st == 1 ? wc[m].y : st == 2 ? wc[m].z : wc[m].w;
      u32 a[4];
      fp4_decode_word(word, a);
      a[0] = bf16x2_mul(a[0], sg[m]);
      a[1] = bf16x2_mul(a[1], sg8[m]);
      a[2] = bf16x2_mul(a[2], sg[m]);
      a[3] = bf16x2_mul(a[3], sg8[m]);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
        if (nt == 0 || nt < live_tiles) mma_bf16_16816(acc[nt][m], a, xv[nt].x, xv[nt].y);
    }
  }
}

// Which of the two chunk products a tile uses: from 4 column tiles (32 pairs) on, the weights are scaled
// once per step and matrix and shared by 4-8 MMAs (batch_chunk_mma); narrower tiles apply the block scales
// to the fp32 MMA results as the decode family does (chunk_mma), which costs less there (gpt-oss-120b
// M = 256, one column tile, 662 against 839 us; docs/perf-log.md v24).
template <int kNT>
inline constexpr bool kBatchScaledWeights = kNT >= 4;

// The fp32 multiplier of a slab's sums: NVFP4's global scale, times the correction of the products' scaling:
// 2^62 when the block scales were applied to the fp32 results (chunk_mma's products are x w 2^-62), 2^26 for
// FC1's scaled weights (batch_row_scales with kShift = 100), 1 for FC2's.
template <bool kNvfp4, int kNT, bool kRawB>
MOEJIT_DEVICE float batch_output_scale(const float* gscale, int e) {
  const float g = kNvfp4 ? gscale[e] : 1.f;
  return !kBatchScaledWeights<kNT> ? g * kAccScale : kRawB ? g * 67108864.f : g;
}

// One stage of the CTA's copy ring: the chunk's activation tile (kTile rows, 80 bf16 apart), then each warp's
// weight runs (kSlabs slabs x kMats x 32 lanes x 16 bytes) and scale bytes (kSlabs x kMats x
// ScaleGeometry::kBytesPerChunk). Mirrored on the host by batch_dynamic_smem() (generator.cpp); the
// generated source checks the size.
template <bool kNvfp4, int kMats, int kWarps, int kNT, int kSlabs>
struct BatchStage {
  static constexpr int kTile = 8 * kNT;
  static constexpr int kScaleChunk = ScaleGeometry<kNvfp4>::kBytesPerChunk;
  static constexpr int kActBytes = kTile * kBatchRowStride * 2;
  static constexpr int kWeightBytes = kWarps * kSlabs * kMats * 512;
  static constexpr int kBytes = kActBytes + kWeightBytes + kWarps * kSlabs * kMats * kScaleChunk;
};

// The tile's product for one warp's kSlabs adjacent slabs: acc[nt][j * kMats + m] = sum over K of slab j's
// matrix m (16 rows) x the tile's columns of n-tile nt, with the block scales applied as kBatchScaledWeights
// picks (times batch_output_scale). A second slab per warp multiplies every activation piece it loads
// from shared memory twice as often. Chunks stream through kStages stages of shared memory by cp.async
// (kStages - 1 chunks in flight while one is computed): rows of the tile (pairs past its end repeat its
// last pair; their MMA columns are never stored), the warps' weight runs and scale bytes. w and s: the
// warp's first slab (chunk 0, matrix 0; w includes the lane); slab j follows at j slabs' plane stride.
// kRawB: the tile is the layer input as is (FC1): chunk_mma multiplies its pieces by 2^64 on use,
// batch_chunk_mma scales the weights for it instead; FC1's output is stored multiplied. valid: bit j set
// when slab j exists (the last row group may be partial); a warp without any copies only its share of the
// activation tile and meets every barrier.
//
// The key's precision a8/a4 (kActPrecision) with kRawB: the rows are the pairs' rows of the quantized
// layer input (the act_quant pre-pass, moe_act_quant.cuh), read as the a16 kernels read x.
//
// kCsf: s is the warp's first slab's CSF offsets (csf_scales.cuh), copied into the stages in place of the
// scale bytes; the warp rebuilds its scale bytes per chunk from them, the base bytes and lists of csf_arrays
// (expert e, first slab `slab` of the plane's plane_slabs).
template <bool kNvfp4, int kK, int kMats, int kSlabs, int kWarps, int kNT, int kStages, bool kRawB, typename RowOf,
          bool kCsf = false>
MOEJIT_DEVICE void batch_slab_mma(const u32x4* w, const u8* s, u32 valid, int live_tiles, RowOf row_of, u8* smem,
                                  float (&acc)[kNT][kSlabs * kMats][4], const CsfPlaneArrays& csf_arrays = CsfPlaneArrays{}, int e = 0, int slab = 0,
                                  int plane_slabs = 0) {
  using SG = ScaleGeometry<kNvfp4>;
  using Stage = BatchStage<kNvfp4, kMats, kWarps, kNT, kSlabs>;
  constexpr int kChunks = (kK + 63) / 64;
  constexpr int kThreads = kWarps * 32;
  constexpr int kActPieces = Stage::kTile * 8;
  constexpr int kScalePieces = kMats * Stage::kScaleChunk / 16;  // per slab
  constexpr int kAll = kSlabs * kMats;
  constexpr int kSlabW = kChunks * kMats * 32;                    // u32x4 runs from one slab to the next
  constexpr int kSlabS = kChunks * kMats * Stage::kScaleChunk;    // scale bytes likewise
  static_assert(kStages >= 2, "a ring of at least two stages");
  const int lane = lane_id(), warp = threadIdx.x >> 5, g = lane >> 2, c4 = lane & 3;
  const u32 ring = shared_address(smem);
  zero_accumulators(acc);

  auto issue = [&](int stage, int chunk) {
    const u32 base = ring + stage * Stage::kBytes;
#pragma unroll
    for (int i = 0; i < (kActPieces + kThreads - 1) / kThreads; ++i) {
      const int piece = threadIdx.x + i * kThreads;
      if (kActPieces % kThreads == 0 || piece < kActPieces) {
        const int row = piece >> 3, col = (piece & 7) * 8, k = chunk * 64 + col;
        const bool in_k = kK % 64 == 0 || k < kK;
        const u16* src = row_of(row) + (in_k ? k : 0);
        cp_async_16(base + (row * kBatchRowStride + col) * 2, src, in_k ? 16 : 0);
      }
    }
#pragma unroll
    for (int j = 0; j < kSlabs; ++j) {
      if (!(valid >> j & 1u)) continue;
#pragma unroll
      for (int m = 0; m < kMats; ++m)
        cp_async_16(base + Stage::kActBytes + (((warp * kSlabs + j) * kMats + m) * 32 + lane) * 16,
                    w + j * kSlabW + (chunk * kMats + m) * 32, 16);
      if constexpr (kCsf) {
        using SS = StageScales<kNvfp4, kMats, true>;
        if (lane < SS::kPieces)
          cp_async_piece<SS::kPieceBytes>(
              base + Stage::kActBytes + Stage::kWeightBytes + (warp * kSlabs + j) * SS::kSlabBytes + lane * SS::kPieceBytes,
              s + (j * kChunks + chunk) * SS::kSlabBytes + lane * SS::kPieceBytes);
      } else if (lane < kScalePieces) {
        cp_async_16(base + Stage::kActBytes + Stage::kWeightBytes + (warp * kSlabs + j) * kMats * Stage::kScaleChunk +
                        lane * 16,
                    s + j * kSlabS + chunk * kMats * Stage::kScaleChunk + lane * 16, 16);
      }
    }
  };

#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < kChunks) issue(st, st);
    cp_async_commit();
  }
  // CSF: the slabs' base bytes and list cursors, loaded while the first chunks are in flight.
  typename CsfWarpReaderOf<kCsf, kNvfp4, kMats, kSlabs, 1>::Type csf;
  if constexpr (kCsf)
    if (valid) csf.begin(csf_arrays, e, slab, plane_slabs, g, 0);
  int stage = 0;
#pragma unroll 1
  for (int chunk = 0; chunk < kChunks; ++chunk) {
    cp_async_wait_group<kStages - 2>();
    __syncthreads();  // the chunk's copies are visible to every warp, and stage (chunk - 1) is free again
    const int next = chunk + kStages - 1;
    if (next < kChunks) issue(next % kStages, next);
    cp_async_commit();
    if (valid) {
      const u8* at = smem + stage * Stage::kBytes;
      const u16* tile = reinterpret_cast<const u16*>(at);
      const u32x4* wr = reinterpret_cast<const u32x4*>(at + Stage::kActBytes) + warp * kAll * 32 + lane;
      const u8* sr =
          at + Stage::kActBytes + Stage::kWeightBytes + warp * kAll * Stage::kScaleChunk + g * SG::kBytesPerLane;
      u32x4 wc[kAll];
      u32x2 sc[kAll];
      if constexpr (kCsf) {
        constexpr int kOffsetBytes = CsfGeometry<kNvfp4>::kBytesPerChunk;
        const u8* orow = at + Stage::kActBytes + Stage::kWeightBytes + warp * kAll * kOffsetBytes + csf.lane_offset(g);
        u32 words[kAll];
#pragma unroll
        for (int m = 0; m < kAll; ++m) {
          wc[m] = wr[m * 32];
          words[m] = *reinterpret_cast<const u32*>(orow + m * kOffsetBytes);
        }
        csf.scales(words, sc, csf_arrays.exc);
      } else {
#pragma unroll
        for (int m = 0; m < kAll; ++m) {
          wc[m] = wr[m * 32];
          sc[m] = kNvfp4 ? *reinterpret_cast<const u32x2*>(sr + m * Stage::kScaleChunk)
                         : u32x2{*reinterpret_cast<const u32*>(sr + m * Stage::kScaleChunk), 0u};
        }
      }
      auto piece = [&](int nt, int st) {
        return *reinterpret_cast<const u32x2*>(tile + (nt * 8 + g) * kBatchRowStride + st * 16 + 4 * c4);
      };
      if constexpr (kBatchScaledWeights<kNT>)
        batch_chunk_mma<kNvfp4, kAll, kNT, kRawB>(wc, sc, live_tiles, acc, piece);
      else
        chunk_mma<kNvfp4, kAll, kNT, 8, kRawB>(wc, sc, live_tiles, acc, piece);
    }
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
  cp_async_wait_all();
}

// Bit j set when slab `first + j` of the row group exists.
template <int kSlabsPerWarp, int kSlabs>
MOEJIT_DEVICE u32 batch_valid_slabs(int first) {
  u32 v = 0;
#pragma unroll
  for (int j = 0; j < kSlabsPerWarp; ++j)
    if (first + j < kSlabs) v |= 1u << j;
  return v;
}

// FC1: act[q, :] = activation(x[token(q)] . W13[e]^T + b13[e]) as bf16 times 2^64, as decode_fc1 writes it.
template <bool kNvfp4, int kAct, bool kLimit, bool kBias, int kH, int kI, int kWarps, int kNT, int kStages, int kPerWarp>
__device__ void moe_batch_fc1(const BatchFc1Params& p) {
  constexpr int kMats = kAct == kActRelu2 ? 1 : 2;
  constexpr int kChunks = (kH + 63) / 64;
  constexpr int kSlabs = kI / 16;
  constexpr int kGroups = (kSlabs + kWarps * kPerWarp - 1) / (kWarps * kPerWarp);
  constexpr int kTile = 8 * kNT;
  extern __shared__ __align__(16) u8 batch_ring[];
  pdl_wait_primary();  // the route kernel's lists
  pdl_launch_dependents();
  const BatchTile t = batch_tile<kTile, kGroups>(p.route, blockIdx.x);
  if (t.slot < 0) return;
  const int warp = threadIdx.x >> 5;
  const int slab = (t.group * kWarps + warp) * kPerWarp;
  const u32 valid = batch_valid_slabs<kPerWarp, kSlabs>(slab);
  const CsfPlaneArrays csf = MOEJIT_FC1_CSF_ARRAYS(p);
  const SlabOperands ops = slab_operands<kNvfp4, kChunks, kMats, kSlabs, kCsfFc1>(p.w, p.s, p.gscale, t.expert,
                                                                                  valid ? slab : 0, csf.base, csf.exc);
  const int in_tile = min(kTile, t.count - t.first);
  const int live = (in_tile + 7) / 8;
  auto row_of = [&](int r) {
    return fc1_x_row<kH>(p.x, t.pairs[t.first + min(r, in_tile - 1)], p.route);
  };
  float acc[kNT][kPerWarp * kMats][4];
  batch_slab_mma<kNvfp4, kH, kMats, kPerWarp, kWarps, kNT, kStages, true, decltype(row_of), kCsfFc1>(
      ops.w, ops.s, valid, live, row_of, batch_ring, acc, csf, t.expert, slab, kSlabs);
  const ExpertWork work{0, t.expert, t.count, t.pairs};
  const int g = global_scale_index<kMats>(t.expert);
  const float unscale = act_unscale(act_fc1_x_gs<kMats>(p.gscale, t.expert));  // a4: x's 1/a1_gs
  const float gs = batch_output_scale<kNvfp4, kNT, true>(p.gscale, g) * unscale;
  const float gs_up = kMats == 2 ? batch_output_scale<kNvfp4, kNT, true>(p.gscale, g + 1) * unscale : gs;
  if constexpr (kActPrecision != kActA16) {
    // One scale block of rows at a time (a4: a slab; a8: two, so the key has two slabs per warp, which
    // start at an even slab): the intermediate quantized in the epilogue, as the decode family does.
    constexpr int kSub = kActPrecision == kActA8 ? 2 : 1;  // 16-row slabs per scale block (a16: unused)
    static_assert(kPerWarp % kSub == 0, "a8 needs two slabs per warp (the key rule)");
    const float out_gs = act_fc1_out_gs<kMats>(p.gscale, t.expert);
#pragma unroll
    for (int j0 = 0; j0 < kPerWarp; j0 += kSub) {
      if (!(valid >> j0 & 1u)) continue;
      float part[kSub][kNT][kMats][4];
#pragma unroll
      for (int j = 0; j < kSub; ++j)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int m = 0; m < kMats; ++m)
#pragma unroll
            for (int i = 0; i < 4; ++i) part[j][nt][m][i] = acc[nt][(j0 + j) * kMats + m][i];
      fc1_store_pass_quantized<kAct, kLimit, kBias, kI, kMats, kNT, 8, kSub>(p, work, slab + j0, (valid >> j0) & 3u,
                                                                             t.first, live, part, gs, gs_up, out_gs);
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < kPerWarp; ++j) {
    if (!(valid >> j & 1u)) continue;
    float part[kNT][kMats][4];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int m = 0; m < kMats; ++m)
#pragma unroll
        for (int i = 0; i < 4; ++i) part[nt][m][i] = acc[nt][j * kMats + m][i];
    fc1_store_pass<kAct, kLimit, kBias, kI, kMats, kNT, 8>(p, work, slab + j, t.first, live, part, gs, gs_up);
  }
}

// FC2: partial[q, :] = w_q * (act[q] . W2[e]^T + b2[e]) in fp32 for every pair; batch_combine sums them.
template <bool kNvfp4, bool kBias, int kH, int kI, int kWarps, int kNT, int kStages, int kPerWarp>
__device__ void moe_batch_fc2(const BatchFc2Params& p) {
  constexpr int kChunks = (kI + 63) / 64;
  constexpr int kSlabs = kH / 16;
  constexpr int kGroups = (kSlabs + kWarps * kPerWarp - 1) / (kWarps * kPerWarp);
  constexpr int kTile = 8 * kNT;
  extern __shared__ __align__(16) u8 batch_ring[];
  pdl_wait_primary();  // FC1's activations (and, through FC1's own wait, the route lists)
  pdl_launch_dependents();
  const BatchTile t = batch_tile<kTile, kGroups>(p.route, blockIdx.x);
  if (t.slot < 0) return;
  const int warp = threadIdx.x >> 5;
  const int slab = (t.group * kWarps + warp) * kPerWarp;
  const u32 valid = batch_valid_slabs<kPerWarp, kSlabs>(slab);
  const CsfPlaneArrays csf = MOEJIT_FC2_CSF_ARRAYS(p);
  const SlabOperands ops =
      slab_operands<kNvfp4, kChunks, 1, kSlabs, kCsfFc2>(p.w, p.s, p.gscale, t.expert, valid ? slab : 0, csf.base, csf.exc);
  const int in_tile = min(kTile, t.count - t.first);
  const int live = (in_tile + 7) / 8;
  auto row_of = [&](int r) { return p.act + (size_t)t.pairs[t.first + min(r, in_tile - 1)] * kI; };
  float acc[kNT][kPerWarp][4];
  batch_slab_mma<kNvfp4, kI, 1, kPerWarp, kWarps, kNT, kStages, false, decltype(row_of), kCsfFc2>(
      ops.w, ops.s, valid, live, row_of, batch_ring, acc, csf, t.expert, slab, kSlabs);
  const int e = t.expert;
  float gs = batch_output_scale<kNvfp4, kNT, false>(p.gscale, e);
  if (kActPrecision == kActA4) gs *= act_unscale(act_fc2_gs(p.gscale, e));  // a4: the intermediate's 1/a2_gs
#pragma unroll
  for (int j = 0; j < kPerWarp; ++j) {
    if (!(valid >> j & 1u)) continue;
    for_each_pass_result<kNT, 8>(t.first, live, t.count, [&](int nt, int i, int tt, int r) {
      const int row = (slab + j) * 16 + r;
      const int q = t.pairs[tt];
      float y = acc[nt][j][i] * gs;
      if (kBias) y += p.bias[(size_t)e * kH + row];
      p.partial[(size_t)q * kH + row] = p.topk_weights[q] * y;
    });
  }
}
