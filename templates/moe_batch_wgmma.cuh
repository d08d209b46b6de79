// Batch family on sm_90a's warpgroup MMA (keys with the tile suffix m): the batch kernels' work split
// (moe_batch.cuh: a CTA = kWarps 16-row slabs of one expert x a tile of 8 * kNT of its pairs, tiles
// fixed at launch, fp32 partial rows summed by the combine) with the product on wgmma: each warp decodes
// its slab's FP4 words into registers (the A operand, rows 16w.. of its warpgroup's 64), and the token
// tile is the shared-memory B operand, so one m64nNk16 instruction multiplies 64 rows by up to 256 pairs
// and the tensor cores run asynchronously beside the next chunk's decode and copies.
//
// K order. The prepared weights hold true K 4c..4c+3 of each k16 step in a lane's MMA columns
// {2c, 2c+1, 2c+8, 2c+9} (fp4_decode.cuh). wgmma reads B from shared memory in MMA column order, so the
// tile is stored in that order: FC1 loads the layer input into registers and stores each k16 block's two
// 16-byte pieces with their 4-byte units regrouped; FC1 writes its activations already in that order
// (mma_k_position), so FC2 copies 16-byte pieces. The act buffer of these kernels is therefore not the
// decode family's: both FC1 and FC2 of a forward use wgmma or neither (the host checks).
//
// Pipeline per 64-wide K chunk c (kStages stages of shared memory: one being multiplied, one being
// decoded, kStages - 2 being copied): every thread waits for its copies of chunk c and fences them to the
// async proxy, a barrier, the copies of chunk c + kStages - 2 go out into the stage of chunk c - 2; then
// per k16 step the warp waits for the MMAs of two steps back, decodes and scales its A fragments into
// the register slot they used, and issues that step's kMats wgmmas as one group. So each warp's decode
// overlaps its own previous step's MMAs.
#pragma once
#include "moe_batch.cuh"
#include "wgmma.cuh"
#include "wgmma_slab_chunk.cuh"

// One stage of the ring: the B tile (8 * kNT rows of 128 bytes, 128-byte swizzle, 1024-aligned), then each
// warp's weight runs (kMats x 32 lanes x 16 bytes) and scale bytes; rounded up to 1024 bytes so every
// stage's tile stays aligned. Mirrored by batch_dynamic_smem() (generator.cpp), which adds 1024 bytes of
// alignment slack.
template <bool kNvfp4, int kMats, int kWarps, int kNT>
struct WgmmaStage {
  static constexpr int kTile = 8 * kNT;
  static constexpr int kScaleChunk = ScaleGeometry<kNvfp4>::kBytesPerChunk;
  static constexpr int kActBytes = kTile * 128;
  static constexpr int kWeightBytes = kWarps * kMats * 512;
  static constexpr int kUsed = kActBytes + kWeightBytes + kWarps * kMats * kScaleChunk;
  static constexpr int kBytes = (kUsed + 1023) / 1024 * 1024;
};

// acc[m] = this warp's rows of slab matrix m x the tile (wgmma accumulator layout), over K = kK.
// rows[r]: global address of tile row r's K = 0 (shared memory, filled by the caller before a barrier; rows
// past the tile repeat its last pair). A warp whose slab lies past the matrix (the last group of slabs)
// still takes part in its warpgroup's MMAs and the CTA's barriers: the caller gives it slab 0's operands
// and drops its rows, so every warp runs the same branch-free step (a zero-filled A set for it cost 16
// register moves per chunk on every warp, v26). kRawB: B is the layer input in true K order (staged
// through registers into MMA column order), else rows already in MMA column order (16-byte cp.async pieces).
// The key's precision a8/a4 (kActPrecision) with kRawB: rows are the pairs' rows of the quantized layer
// input (the act_quant pre-pass, moe_act_quant.cuh), staged as the a16 kernels stage x.
// kCsf: s is the slab's CSF offsets (csf_scales.cuh), copied into the stage in place of its scale bytes,
// and csf_arrays, e, slab, slabs say which base bytes and list the warp reads (slab_operands' slab).
template <bool kNvfp4, int kK, int kMats, int kWarps, int kNT, int kStages, bool kRawB, bool kCsf = false>
MOEJIT_DEVICE void wgmma_slab_mma(const u32x4* w, const u8* s, const u16* const* rows, u8* smem,
                                  float (&acc)[kMats][kNT * 4], const CsfPlaneArrays& csf_arrays = CsfPlaneArrays{}, int e = 0, int slab = 0,
                                  int slabs = 0) {
  using SG = ScaleGeometry<kNvfp4>;
  using Stage = WgmmaStage<kNvfp4, kMats, kWarps, kNT>;
  constexpr int kChunks = (kK + 63) / 64;
  constexpr int kThreads = kWarps * 32;
  constexpr int kTile = Stage::kTile;
  constexpr int kScalePieces = kMats * Stage::kScaleChunk / 16;
  static_assert(kStages >= 3, "a ring of at least three stages: one being copied, one being multiplied, one ahead");
  static_assert(!kRawB || kStages >= 4, "the layer input is stored a step after its load: four stages at least");
  static_assert(kWarps % 4 == 0, "whole warpgroups");
  const int lane = lane_id(), warp = threadIdx.x >> 5, g = lane >> 2;
  const u32 smem_base = shared_address(smem);
  const u32 ring = (smem_base + 1023u) & ~1023u;
  u8* const ring_ptr = smem + (ring - smem_base);
#pragma unroll
  for (int m = 0; m < kMats; ++m)
#pragma unroll
    for (int i = 0; i < kNT * 4; ++i) acc[m][i] = 0.f;

  // The layer input (kRawB) in true K order: each k16 block of a row (32 bytes: 4-byte units u0..u7, each
  // a pair of true K) is loaded into registers and stored as the two 16-byte pieces of MMA column order,
  // {u0, u2, u4, u6} and {u1, u3, u5, u7} (unit u goes to column pair (u >> 1) + 4 (u & 1)): no copy of
  // less than 16 bytes. A chunk is loaded one step before it is stored (the load's latency hides behind a
  // step), kStages - 3 steps before it is multiplied.
  constexpr int kBlocks = kTile * 4;  // (row, k16 block) pieces of a chunk
  constexpr int kBlocksPerThread = (kBlocks + kThreads - 1) / kThreads;
  u32x4 staged[kRawB ? kBlocksPerThread : 1][2];
  auto load_b = [&](int chunk) {
#pragma unroll
    for (int i = 0; i < kBlocksPerThread; ++i) {
      const int bi = threadIdx.x + i * kThreads, row = bi >> 2, b = bi & 3, k = chunk * 64 + b * 16;
      const bool live = (kBlocks % kThreads == 0 || bi < kBlocks) && (kK % 64 == 0 || k < kK);
      staged[i][0] = live ? *reinterpret_cast<const u32x4*>(rows[row] + k) : u32x4{0u, 0u, 0u, 0u};
      staged[i][1] = live ? *reinterpret_cast<const u32x4*>(rows[row] + k + 8) : u32x4{0u, 0u, 0u, 0u};
    }
  };
  auto store_b = [&](int stage) {
    u8* const base = ring_ptr + stage * Stage::kBytes;
#pragma unroll
    for (int i = 0; i < kBlocksPerThread; ++i) {
      const int bi = threadIdx.x + i * kThreads, row = bi >> 2, b = bi & 3;
      if (kBlocks % kThreads == 0 || bi < kBlocks) {
        const u32x4 lo = staged[i][0], hi = staged[i][1];
        *reinterpret_cast<u32x4*>(base + sw128_offset(row, 2 * b)) = u32x4{lo.x, lo.z, hi.x, hi.z};
        *reinterpret_cast<u32x4*>(base + sw128_offset(row, 2 * b + 1)) = u32x4{lo.y, lo.w, hi.y, hi.w};
      }
    }
  };

  auto issue = [&](int stage, int chunk) {
    const u32 base = ring + stage * Stage::kBytes;
    if constexpr (kRawB) {
      // The layer input goes through registers instead (load_b / store_b below).
    } else {
      constexpr int kPieces = kTile * 8;
#pragma unroll 4
      for (int i = 0; i < (kPieces + kThreads - 1) / kThreads; ++i) {
        const int piece = threadIdx.x + i * kThreads;
        if (kPieces % kThreads == 0 || piece < kPieces) {
          const int row = piece >> 3, j = piece & 7, k = chunk * 64 + j * 8;
          const bool in_k = kK % 64 == 0 || k < kK;
          cp_async_16(base + sw128_offset(row, j), rows[row] + (in_k ? k : 0), in_k ? 16 : 0);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < kMats; ++m)
      cp_async_16(base + Stage::kActBytes + ((warp * kMats + m) * 32 + lane) * 16, w + (chunk * kMats + m) * 32, 16);
    if constexpr (kCsf) {
      using SS = StageScales<kNvfp4, kMats, true>;
      if (lane < SS::kPieces)
        cp_async_piece<SS::kPieceBytes>(base + Stage::kActBytes + Stage::kWeightBytes + warp * SS::kSlabBytes +
                                            lane * SS::kPieceBytes,
                                        s + chunk * SS::kSlabBytes + lane * SS::kPieceBytes);
    } else if (lane < kScalePieces) {
      cp_async_16(base + Stage::kActBytes + Stage::kWeightBytes + warp * kMats * Stage::kScaleChunk + lane * 16,
                  s + chunk * kMats * Stage::kScaleChunk + lane * 16, 16);
    }
  };
  // CSF: the slab's base bytes and list cursor (begun below, while the first chunks are in flight).
  typename CsfWarpReaderOf<kCsf, kNvfp4, kMats, 1, 1>::Type csf;

  // A fragments in a ring of two k16 steps: step j is decoded into slot j % 2 once the MMAs of step j - 2
  // (the last readers of that slot) are done, while step j - 1's MMAs run. 8 kMats registers instead of
  // two whole-chunk sets (32 kMats each): at 2 CTAs per SM the sets left FC1 (64 accumulators at 64 pairs)
  // no room, and ptxas serialized its wgmmas (and MXFP4 FC2's); the ring keeps every kernel asynchronous
  // (v26: 2-11 % faster at M = 1024-4096).
  u32 ar[2][kMats][4];  // [slot][matrix][register]
  // Chunk c: its stage was last used by chunk c - 2, whose MMAs every warp has waited for (the per-step
  // waits of chunk c - 1) before the barrier below.
  auto step = [&](int chunk) {
    const int stage = chunk % kStages;
    cp_async_wait_group<kStages - 3>();
    fence_proxy_async_shared();  // this thread's copies of the chunk, to the MMAs' async proxy
    __syncthreads();
    const int next = chunk + kStages - 2;
    if (kRawB) {
      // The chunk loaded at the previous step (next - 1) goes to its stage, freed at that step's barrier;
      // it is multiplied at step next - 1 >= chunk + 1, after this thread's fence and that step's barrier.
      if (chunk >= 1 && next - 1 < kChunks) store_b((next - 1) % kStages);
      if (next < kChunks) load_b(next);
    }
    if (next < kChunks) issue(next % kStages, next);
    cp_async_commit();

    const u8* at = ring_ptr + stage * Stage::kBytes;
    const u32x4* wr = reinterpret_cast<const u32x4*>(at + Stage::kActBytes) + warp * kMats * 32 + lane;
    if constexpr (kCsf) {
      constexpr int kOffsetBytes = CsfGeometry<kNvfp4>::kBytesPerChunk;
      const u8* orow = at + Stage::kActBytes + Stage::kWeightBytes + warp * kMats * kOffsetBytes + csf.lane_offset(g);
      u32 words[kMats];
      u32x2 sc[kMats];
#pragma unroll
      for (int m = 0; m < kMats; ++m) words[m] = *reinterpret_cast<const u32*>(orow + m * kOffsetBytes);
      csf.scales(words, sc, csf_arrays.exc);
      wgmma_slab_chunk_from_registers<kNvfp4, kMats, kRawB>(wr, sc, wgmma_desc_k_sw128(ring + stage * Stage::kBytes), ar,
                                                           acc, [](int) {});
    } else {
      const u8* sr = at + Stage::kActBytes + Stage::kWeightBytes + warp * kMats * Stage::kScaleChunk + g * SG::kBytesPerLane;
      wgmma_slab_chunk<kNvfp4, kMats, Stage::kScaleChunk, kRawB>(wr, sr, wgmma_desc_k_sw128(ring + stage * Stage::kBytes),
                                                                 ar, acc, [](int) {});
    }
  };

#pragma unroll
  for (int st = 0; st < kStages - 2; ++st) {
    if (st < kChunks) {
      issue(st, st);
      if (kRawB) {
        load_b(st);
        store_b(st);
      }
    }
    cp_async_commit();
  }
  if constexpr (kCsf) csf.begin(csf_arrays, e, slab, slabs, g, 0);
#pragma unroll 1
  for (int chunk = 0; chunk < kChunks; ++chunk) step(chunk);
  wgmma_wait<0>();
  cp_async_wait_all();
}

// One warp's wgmma accumulators (matrix m, n-tile nt's four values at nt * 4) in the [n-tile][matrix][4]
// order of fc1_epilogue.cuh's stores.
template <int kMats, int kNT>
MOEJIT_DEVICE void wgmma_acc_as_pass(const float (&acc)[kMats][kNT * 4], float (&part)[kNT][kMats][4]) {
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int m = 0; m < kMats; ++m)
#pragma unroll
      for (int i = 0; i < 4; ++i) part[nt][m][i] = acc[m][nt * 4 + i];
}

// FC1: act[q, :] = activation(x[token(q)] . W13[e]^T + b13[e]) as bf16 times 2^64, each 16-row block in MMA
// column order (mma_k_position).
template <bool kNvfp4, int kAct, bool kLimit, bool kBias, int kH, int kI, int kWarps, int kNT, int kStages>
__device__ void moe_batch_wgmma_fc1(const BatchFc1Params& p) {
  constexpr int kMats = kAct == kActRelu2 ? 1 : 2;
  constexpr int kChunks = (kH + 63) / 64;
  constexpr int kSlabs = kI / 16;
  constexpr int kGroups = (kSlabs + kWarps - 1) / kWarps;
  constexpr int kTile = 8 * kNT;
  extern __shared__ __align__(16) u8 batch_ring[];
  pdl_wait_primary();  // the route kernel's lists
  pdl_launch_dependents();
  const BatchTile t = batch_tile<kTile, kGroups>(p.route, blockIdx.x);
  if (t.slot < 0) return;
  const int slab = t.group * kWarps + (int)(threadIdx.x >> 5);
  const bool valid = slab < kSlabs;
  const CsfPlaneArrays csf = MOEJIT_FC1_CSF_ARRAYS(p);
  const SlabOperands ops = slab_operands<kNvfp4, kChunks, kMats, kSlabs, kCsfFc1>(p.w, p.s, p.gscale, t.expert,
                                                                                  valid ? slab : 0, csf.base, csf.exc);
  const int in_tile = min(kTile, t.count - t.first);
  __shared__ const u16* rows[kTile];
  for (int r = threadIdx.x; r < kTile; r += kWarps * 32)
    rows[r] = fc1_x_row<kH>(p.x, t.pairs[t.first + min(r, in_tile - 1)], p.route);
  __syncthreads();
  float acc[kMats][kNT * 4];
  const float x_gs = act_fc1_x_gs<kMats>(p.gscale, t.expert);  // a4's global scale of x (1 otherwise)
  wgmma_slab_mma<kNvfp4, kH, kMats, kWarps, kNT, kStages, true, kCsfFc1>(ops.w, ops.s, rows, batch_ring, acc, csf,
                                                                         t.expert, valid ? slab : 0, kSlabs);
  // a8's scale blocks of the intermediate span a warp pair (slab_pair_max.cuh), so a warp past the matrix
  // stays for its partner's exchange.
  if (kActPrecision != kActA8 && !valid) return;
  const ExpertWork work{0, t.expert, t.count, t.pairs};
  const int g = global_scale_index<kMats>(t.expert);
  const float gs = wgmma_output_scale<kNvfp4, true>(p.gscale, g);
  const float gs_up = kMats == 2 ? wgmma_output_scale<kNvfp4, true>(p.gscale, g + 1) : gs;
  if constexpr (kActPrecision != kActA16) {
    float part[1][kNT][kMats][4];
    wgmma_acc_as_pass(acc, part[0]);
    const float unscale = act_unscale(x_gs);  // a4: x's 1/a1_gs
    fc1_store_pass_quantized<kAct, kLimit, kBias, kI, kMats, kNT, 8, 1, true>(
        p, work, slab, valid ? 1u : 0u, t.first, (in_tile + 7) / 8, part, gs * unscale, gs_up * unscale,
        act_fc1_out_gs<kMats>(p.gscale, t.expert), OneSlabPerWarpBlockMax<kWarps, kTile>{});
  } else {
    float part[kNT][kMats][4];
    wgmma_acc_as_pass(acc, part);
    fc1_store_pass<kAct, kLimit, kBias, kI, kMats, kNT, 8, true>(p, work, slab, t.first, (in_tile + 7) / 8, part, gs,
                                                                 gs_up);
  }
}

// FC2: partial[q, :] = w_q * (act[q] . W2[e]^T + b2[e]) in fp32 for every pair; batch_combine sums them.
template <bool kNvfp4, bool kBias, int kH, int kI, int kWarps, int kNT, int kStages>
__device__ void moe_batch_wgmma_fc2(const BatchFc2Params& p) {
  constexpr int kChunks = (kI + 63) / 64;
  constexpr int kSlabs = kH / 16;
  constexpr int kGroups = (kSlabs + kWarps - 1) / kWarps;
  constexpr int kTile = 8 * kNT;
  extern __shared__ __align__(16) u8 batch_ring[];
  pdl_wait_primary();  // FC1's activations (and, through FC1's own wait, the route lists)
  pdl_launch_dependents();
  const BatchTile t = batch_tile<kTile, kGroups>(p.route, blockIdx.x);
  if (t.slot < 0) return;
  const int slab = t.group * kWarps + (int)(threadIdx.x >> 5);
  const bool valid = slab < kSlabs;
  const CsfPlaneArrays csf = MOEJIT_FC2_CSF_ARRAYS(p);
  const SlabOperands ops =
      slab_operands<kNvfp4, kChunks, 1, kSlabs, kCsfFc2>(p.w, p.s, p.gscale, t.expert, valid ? slab : 0, csf.base, csf.exc);
  const int in_tile = min(kTile, t.count - t.first);
  __shared__ const u16* rows[kTile];
  for (int r = threadIdx.x; r < kTile; r += kWarps * 32) rows[r] = p.act + (size_t)t.pairs[t.first + min(r, in_tile - 1)] * kI;
  __syncthreads();
  float acc[1][kNT * 4];
  wgmma_slab_mma<kNvfp4, kI, 1, kWarps, kNT, kStages, false, kCsfFc2>(ops.w, ops.s, rows, batch_ring, acc,
                                                                      csf, t.expert,
                                                                      valid ? slab : 0, kSlabs);
  if (!valid) return;
  const int e = t.expert;
  float gs = wgmma_output_scale<kNvfp4, false>(p.gscale, e);
  if (kActPrecision == kActA4) gs *= act_unscale(act_fc2_gs(p.gscale, e));  // a4: the intermediate's 1/a2_gs
  for_each_pass_result<kNT, 8>(t.first, (in_tile + 7) / 8, t.count, [&](int nt, int i, int tt, int r) {
    const int row = slab * 16 + r;
    const int q = t.pairs[tt];
    float y = acc[0][nt * 4 + i] * gs;
    if (kBias) y += p.bias[(size_t)e * kH + row];
    p.partial[(size_t)q * kH + row] = p.topk_weights[q] * y;
  });
}
