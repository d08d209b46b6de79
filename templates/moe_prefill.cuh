// Prefill family (large M, sm_90a): persistent, warp-specialized warpgroup-MMA kernels.
//
// A forward is route -> gather -> FC1 -> FC2 -> combine. The route kernel lists each active expert's
// pairs; the gather (FC1's module, entry _gather) cuts every expert's pairs into token tiles of kN and
// writes the tile table and the layer input of each tile as "token-tile blocks"; FC1 writes its output in
// the same blocks, so both FC kernels read their B operand (the tile's tokens) with one bulk copy per
// 64-wide K chunk.
//
// Token-tile blocks of a K-long operand: tile t holds R = roundup(pairs in the tile, 8) rows starting at
// row_base(t) (the rows of the slots before it, each slot's pairs rounded up to 8, plus the tile's first
// pair within its slot); its chunk c is R rows of 128 bytes at element (row_base * chunks + c * R) * 64,
// row r's 16-byte piece j stored at piece j ^ (r % 8) (the warpgroup MMA's 128-byte swizzle, so the
// shared-memory copy is the B operand as it lands), each row in MMA column order (fc1_epilogue.cuh
// mma_k_position: the prepared weights' K order within a k16 block). Rows past the tile's pairs are zero.
// So a layer's blocks take at most pairs + 7 x active experts rows whatever the tile width.
//
// The FC kernels: one CTA per SM takes work units (tile, row group) from the kernel's work counter as it
// reaches them (the unit queue below), so the units of one tile start together and the CTAs end together.
// Warpgroup kWarps / 4 is the producer: its first warp moves each chunk's B block (one bulk copy), kWarps
// slabs of prepared weights and their scales (one tensor copy each; cp.async pieces for CSF scales and
// cluster pairs) into a ring of kStages shared-memory
// stages, all completing on the stage's "full" mbarrier; warps 0..kWarps-1 (kWarps / 4 consumer warpgroups) decode their slab's FP4 into the A
// registers of m64nNk16 wgmmas against the stage's B, and release the stage on its "empty" mbarrier once
// the MMAs that read it are done. No CTA-wide barrier in the loop: the producer runs ahead across units
// (so the next unit's copies overlap this unit's epilogue) while the consumers compute.
//
// A tile whose pairs fit in half of kN runs on wgmmas of half the width, and every tile's B copies move
// only its rows, so an expert's last, partly filled tile costs about what it holds, not a whole tile.
//
// Every sum has a fixed order (K in chunk order in the accumulators, the top-k in slot order in the
// combine), so results are bit-reproducible whatever the scheduling.
#pragma once
#include "bulk_copy.cuh"
#include "fc1_epilogue.cuh"
#include "moe_prefill_params.cuh"
#include "slab_mma.cuh"
#include "token_tiles.cuh"
#include "topk_combine.cuh"
#include "wgmma.cuh"
#include "wgmma_slab_chunk.cuh"

// Defined by the generator for the keys whose producer moves each chunk's weights and scales with tensor
// copies (generator/families/prefill.cpp prefill_tensor_copies: plain scales, one CTA per cluster); the
// runtime passes those keys the planes' tensor maps.
#if defined(MOEJIT_PREFILL_TENSOR_COPIES)
inline constexpr bool kPrefillTensorCopies = true;
#else
inline constexpr bool kPrefillTensorCopies = false;
#endif

// One stage of the ring: the B block (kN rows of 128 bytes, 1024-aligned), then each consumer warp's
// weight runs (kA = slabs per warp x matrices runs of 32 lanes x 16 bytes, slab-major) and scale bytes in
// the same order, rounded up to 1024 bytes. The generator's dynamic_smem (generator/families/prefill.cpp)
// mirrors it: kStages stages and 1024 bytes of alignment slack.
template <bool kNvfp4, int kA, int kWarps, int kN>
struct PrefillStage {
  static constexpr int kScaleChunk = ScaleGeometry<kNvfp4>::kBytesPerChunk;
  static constexpr int kBBytes = kN * 128;
  static constexpr int kWeightBytes = kWarps * kA * 512;
  static constexpr int kUsed = kBBytes + kWeightBytes + kWarps * kA * kScaleChunk;
  static constexpr int kBytes = (kUsed + 1023) / 1024 * 1024;
};

// The element offset of (row r, MMA-order column k) of a token-tile block.
MOEJIT_DEVICE u32 tile_block_offset(int r, int k) {
  const int byte = 2 * k;
  return (u32)(r * 64 + ((((byte >> 4) ^ (r & 7)) << 4) + (byte & 15)) / 2);
}

// The tile table (workspace tiles): a header of kTileTableHeader words (the tile count, then FC1's and
// FC2's next unit, the persistent kernels' work counters, zeroed by the gather), then (slot, first pair,
// first block row) per tile.
inline constexpr int kTileTableHeader = 4;
inline constexpr int kTileTableFc1Next = 1, kTileTableFc2Next = 2;

// The tile table's entry for a unit's tile: the tile's expert, first pair within its slot, the slot's pair
// count and list, the pairs in the tile, its rows (rounded up to 8) and the first of them in the blocks.
struct PrefillTile {
  int expert, first, count, in_tile, rows;
  size_t row_base;
  const i32* pairs;
};

template <int kN>
MOEJIT_DEVICE PrefillTile prefill_tile(const i32* tiles, const RoutingArgs& r, int tile) {
  const i32* entry = tiles + kTileTableHeader + 3 * tile;
  const int slot = entry[0], first = entry[1], row_base = entry[2];
  const int off = r.active_offset[slot], count = r.active_offset[slot + 1] - off;
  const int in_tile = min(kN, count - first);
  return PrefillTile{r.active_expert[slot], first, count, in_tile, (in_tile + 7) & ~7, (size_t)row_base,
                     r.pair_index + off};
}

// The first block row of a slot: the pairs of the slots before it, each slot's rounded up to 8, by one warp.
MOEJIT_DEVICE int slot_row_base(const RoutingArgs& r, int slot) {
  return sum_over_slots(r, slot, [](int pairs) { return (pairs + 7) & ~7; });
}

// The a8/a4 gather's copy loop (moe_prefill_gather's items): as the a16 loop, with each piece quantized
// before its store. The piece's k16 block is its own thread's and the neighbouring lane's (item it ^ 1); an
// a8 block adds the neighbouring k16 block (items it ^ 2, it ^ 3): the block maximum is one or two
// shuffles, so the loop runs in whole warps (items past the end load nothing and store nothing).
template <int kH, int kChunks, int kMats>
MOEJIT_DEVICE void gather_quantized(const PrefillFc1Params& p, const u16* const* rows, int expert, int c0, int items,
                                    int rows_in_block, u16* tile_blocks) {
  const float gs = act_fc1_x_gs<kMats>(p.gscale, expert);
  const int warp_items = (items + 31) & ~31;
  for (int it = threadIdx.x; it < warp_items; it += blockDim.x) {
    const int h = it & 1, b = (it >> 1) & 3, r = (it >> 3) % rows_in_block, c = c0 + (it >> 3) / rows_in_block;
    const bool live = it < items;
    u32x4 lo{0u, 0u, 0u, 0u}, hi{0u, 0u, 0u, 0u};
    if (live && rows[r] && (kH % 64 == 0 || c * 64 + b * 16 < kH)) {
      const u32x4* src = reinterpret_cast<const u32x4*>(rows[r] + c * 64 + b * 16);
      lo = src[0];
      hi = src[1];
    }
    u32x2 piece[2] = {h ? u32x2{lo.y, lo.w} : u32x2{lo.x, lo.z}, h ? u32x2{hi.y, hi.w} : u32x2{hi.x, hi.z}};
    quantize_pieces<kActPrecision, 0, kActPrecision == kActA8 ? 0x3 : 0x1>(piece, gs);
    if (!live) continue;
    u16* block = tile_blocks + (size_t)c * rows_in_block * 64;
    *reinterpret_cast<u32x4*>(block + tile_block_offset(r, b * 16 + 8 * h)) =
        u32x4{piece[0].x, piece[0].y, piece[1].x, piece[1].y};
  }
}

// The gather: CTA (t, y) fills chunks y*kPerCta.. of tile t's block of the layer input; CTA (t, 0) writes
// the tile's table entry and its rows' pairs and top-k weights (FC2's epilogue), CTA (0, 0) the tile count.
// Each thread stores one 16-byte piece of MMA column order from a k16 block of the row's true-K order.
// a8/a4 (kActPrecision): where the layer quantizes x once per token (route.x_per_token), the act_quant
// pre-pass did it and x is its rows, copied as a16 copies x; otherwise (a4 with a1_gs per expert) x is
// quantized here, once per routed pair, as the reference does (x's scale blocks run along H; with the
// tile's expert's a1_gs: kMats places it in FC1's scale plane, act_quant.cuh).
template <int kH, int kN, int kPerCta, int kMats = 2>
__device__ void moe_prefill_gather(const PrefillFc1Params& p) {
  constexpr int kChunks = (kH + 63) / 64;
  pdl_wait_primary();  // the route kernel's lists
  pdl_launch_dependents();
  const int t_index = blockIdx.x;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x < 32) {
    const int total = token_tile_count<kN>(p.route);
    if (threadIdx.x == 0) {
      p.tiles[0] = total;
      p.tiles[kTileTableFc1Next] = 0;
      p.tiles[kTileTableFc2Next] = 0;
    }
  }
  const BatchTile t = batch_tile<kN, 1>(p.route, t_index);
  if (t.slot < 0) return;
  __shared__ int row_base;
  if (threadIdx.x < 32) {
    const int base = slot_row_base(p.route, t.slot) + t.first;
    if (threadIdx.x == 0) {
      row_base = base;
      if (blockIdx.y == 0) {
        i32* entry = p.tiles + kTileTableHeader + 3 * t_index;
        entry[0] = t.slot;
        entry[1] = t.first;
        entry[2] = base;
      }
    }
  }
  const int in_tile = min(kN, t.count - t.first), rows_in_block = (in_tile + 7) & ~7;
  __shared__ const u16* rows[kN];
  for (int r = threadIdx.x; r < kN; r += blockDim.x)
    rows[r] = r < in_tile ? p.x + (size_t)(t.pairs[t.first + r] / p.route.top_k) * kH : nullptr;
  __syncthreads();
  if (blockIdx.y == 0)
    for (int r = threadIdx.x; r < rows_in_block; r += blockDim.x) {
      p.row_pair[row_base + r] = r < in_tile ? t.pairs[t.first + r] : -1;
    }
  const int c0 = blockIdx.y * kPerCta;
  const int items = min(kPerCta, kChunks - c0) * rows_in_block * 8;  // (chunk, row, 16-byte piece)
  u16* const tile_blocks = p.xb + (size_t)row_base * kChunks * 64;
  if constexpr (kActPrecision != kActA16) {
    if (!p.route.x_per_token) {
      gather_quantized<kH, kChunks, kMats>(p, rows, t.expert, c0, items, rows_in_block, tile_blocks);
      return;
    }
  }
  for (int it = threadIdx.x; it < items; it += blockDim.x) {
    // Adjacent threads store the two pieces of one k16 block (one 32-byte sector); each loads the block.
    const int h = it & 1, b = (it >> 1) & 3, r = (it >> 3) % rows_in_block, c = c0 + (it >> 3) / rows_in_block;
    u32x4 lo{0u, 0u, 0u, 0u}, hi{0u, 0u, 0u, 0u};
    if (rows[r] && (kH % 64 == 0 || c * 64 + b * 16 < kH)) {
      const u32x4* src = reinterpret_cast<const u32x4*>(rows[r] + c * 64 + b * 16);
      lo = src[0];
      hi = src[1];
    }
    u16* block = tile_blocks + (size_t)c * rows_in_block * 64;
    *reinterpret_cast<u32x4*>(block + tile_block_offset(r, b * 16 + 8 * h)) =
        h ? u32x4{lo.y, lo.w, hi.y, hi.w} : u32x4{lo.x, lo.z, hi.x, hi.z};
  }
}

// The unit queue: the producer warp takes the CTA's units one at a time and hands each, with its tile's
// table entry, to the consumers through kPrefillQueue shared-memory slots (a unit past the last ends the
// team that reads it). Without cluster pairs each CTA takes its units from the kernel's work counter as it
// reaches them, so the units of one tile (which share its B blocks in L2) start close together on whichever
// CTAs are free, and every CTA ends within about a unit of the others whatever the units' widths; cluster
// pairs walk units cluster, cluster + clusters, ... (both CTAs of a pair must take the same ones).
inline constexpr int kPrefillQueue = 4;
struct PrefillQueueSlot {
  PrefillTile tile;
  int unit;
};

// The ring's barriers: full[s] (the producer's announcement of the B block's bytes and one arrival per
// producer lane when its weight and scale pieces have landed) and empty[s] (one arrival per consumer warp).
template <int kStages>
struct PrefillBarriers {
  u32 base;  // shared address of full[0]; empty[s] follows the kStages full barriers
  MOEJIT_DEVICE u32 full(int s) const { return base + 8 * s; }
  MOEJIT_DEVICE u32 empty(int s) const { return base + 8 * (kStages + s); }
  // Teams only: team t's turn, completed by the other team's warps as each of its products ends.
  MOEJIT_DEVICE u32 turn(int t) const { return base + 8 * (2 * kStages + t); }
  // The unit queue's slot q: filled (the producer's lane 0) and read (lane 0 of each warp of the team that
  // takes it).
  MOEJIT_DEVICE u32 queue_full(int q) const { return base + 8 * (2 * kStages + 2 + q); }
  MOEJIT_DEVICE u32 queue_empty(int q) const { return base + 8 * (2 * kStages + 2 + kPrefillQueue + q); }
  static constexpr int kWords = 2 * kStages + 2 + 2 * kPrefillQueue;
};

// Consumer lanes that release each stage: all 32 of a warp, so each lane's own arrival orders its reads of
// the stage before the producer's next copies into it. Cluster pairs keep lane 0's release (on both CTAs'
// barriers): any per-lane or divergent arrival in their loop makes ptxas serialize its wgmmas (C7513), and
// racecheck reports their stages' reads (docs/RELIABILITY.md). perf-log v48.
template <int kCluster>
inline constexpr int kPrefillReleaseLanes = kCluster == 1 ? 32 : 1;

// A consumer warp's release of stage s, by its kPrefillReleaseLanes lanes: on its own CTA's empty barrier
// and, in a cluster pair, on the other CTA's too, whose producer multicasts half of each B block into this
// CTA's stage.
template <int kCluster, int kStages>
MOEJIT_DEVICE void prefill_release(const PrefillBarriers<kStages>& bars, int s) {
  if (kPrefillReleaseLanes<kCluster> == 32 || lane_id() == 0) {
    mbarrier_arrive(bars.empty(s));
    if constexpr (kCluster > 1) mbarrier_arrive_cluster(bars.empty(s), cluster_cta_rank() ^ 1u);
  }
}

// Ring position, shared by producer and consumers' walks: the stage and the parity of its current use.
template <int kStages>
struct RingCursor {
  int stage = 0;
  u32 phase = 0;
  MOEJIT_DEVICE void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
  // Past n uses (another team's unit): the parity flips once per turn of the ring.
  MOEJIT_DEVICE void skip(int n) {
    stage += n;
    phase ^= (u32)((stage / kStages) & 1);
    stage %= kStages;
  }
};

// The producer warp's copies of one unit. With tensor copies (kPrefillTensorCopies) lane 0 alone moves each
// chunk (below). Otherwise per chunk, every lane waits for the stage to be empty; lane 0
// announces the B block's bytes on full and copies it in one bulk copy (`rows` rows; the stage's rows past
// them keep stale values, which reach only MMA columns whose results are dropped); the 32 lanes copy the
// consumer warps' weight runs and scale bytes in 16-byte cp.async pieces and each arrives on full when
// its pieces have landed. Bulk copies of the small runs (one per slab and kind, 17 per stage) bounded the
// kernel by the copy engine's requests; cp.async spreads them over the lanes. The unit's row group holds
// kWarps x kPerWarp slabs, warp w's from slab w x kPerWarp on; slabs past the matrix copy the last one
// (their rows are dropped). kCluster 2: the two CTAs of a cluster work on one tile (row groups 2i and
// 2i + 1) and share its B blocks: each copies half of a block's rows (whole 8-row swizzle blocks; rank 0
// the first half) into both CTAs' stage at once, so the full barrier of each still counts the whole block. kCsf: s is a prepared CSF plane's offsets, and the slabs' offsets of the chunk
// take the place of their scale bytes (StageScales: half of NVFP4's bytes, an eighth of MXFP4's).
template <bool kNvfp4, int kChunks, int kMats, int kPerWarp, int kSlabs, int kWarps, int kN, int kStages, bool kCsf,
          int kCluster>
MOEJIT_DEVICE void prefill_produce(const u16* b_blocks, int rows, const u32x4* w, const u8* s, int expert, int group,
                                   u32 ring, const PrefillBarriers<kStages>& bars, RingCursor<kStages>& cur,
                                   const void* w_map, const void* s_map) {
  using Stage = PrefillStage<kNvfp4, kPerWarp * kMats, kWarps, kN>;
  constexpr int kRunPieces = kMats * 32;                         // 16-byte pieces of one slab's chunk run
  constexpr int kScalePieces = kMats * Stage::kScaleChunk / 16;  // and of its scale bytes
  constexpr int kGroupSlabs = kWarps * kPerWarp;
  const int lane = lane_id();
  if constexpr (kPrefillTensorCopies) {
    // Per chunk three copies by lane 0: the B block, the row group's weight runs and their scale bytes, the
    // last two as one box each of the planes' [slab][chunk][run] tensor maps (slabs past the matrix read the
    // next expert's, or zeros past the last: their rows are dropped, as the clamped pieces' are). The full
    // barrier counts lane 0's one arrival. Per-lane 16-byte copies (below) cost 9 to 18 cp.async per lane and
    // 33 arrivals per stage, and were 5-17 % slower on the large configs (perf-log v47).
    static_assert(!kCsf && kCluster == 1, "tensor copies of plain planes, one CTA");
    if (lane == 0) {
      constexpr u32 kWeightBytes = kGroupSlabs * kRunPieces * 16, kScaleBytes = kGroupSlabs * kScalePieces * 16;
      const int slab0 = expert * kSlabs + group * kGroupSlabs;
#pragma unroll 1
      for (int c = 0; c < kChunks; ++c) {
        mbarrier_wait(bars.empty(cur.stage), cur.phase ^ 1u);
        const u32 full = bars.full(cur.stage), at = ring + cur.stage * Stage::kBytes;
        mbarrier_arrive_expect_tx(full, rows * 128 + kWeightBytes + kScaleBytes);
        bulk_copy_to_shared(at, b_blocks + (size_t)c * rows * 64, rows * 128, full);
        tensor_copy_3d_to_shared(at + Stage::kBBytes, w_map, 0, c, slab0, full);
        tensor_copy_3d_to_shared(at + Stage::kBBytes + Stage::kWeightBytes, s_map, 0, c, slab0, full);
        cur.advance();
      }
    } else {
      cur.skip(kChunks);
    }
  } else {
    const u8* wb = reinterpret_cast<const u8*>(w);
    // A cluster pair's rows of each B block: the CTA of the pair's even row group (rank 0) copies the first half.
    const int b_half = (rows / 8 + 1) / 2 * 8, b_second = group % kCluster;
    const int b_first = b_second ? b_half : 0, b_count = b_second ? rows - b_half : b_half;
#pragma unroll 1
    for (int c = 0; c < kChunks; ++c) {
      mbarrier_wait(bars.empty(cur.stage), cur.phase ^ 1u);
      const u32 full = bars.full(cur.stage), at = ring + cur.stage * Stage::kBytes;
      if (lane == 0) {
        mbarrier_arrive_expect_tx(full, rows * 128);
        if constexpr (kCluster == 1)
          bulk_copy_to_shared(at, b_blocks + (size_t)c * rows * 64, rows * 128, full);
        else if (b_count > 0)
          bulk_copy_to_shared_multicast(at + b_first * 128, b_blocks + ((size_t)c * rows + b_first) * 64, b_count * 128,
                                        full, (u16)0x3);
      }
#pragma unroll
      for (int i = lane; i < kGroupSlabs * kRunPieces; i += 32) {
        const int si = i / kRunPieces, piece = i % kRunPieces;
        const size_t slab = (size_t)expert * kSlabs + min(group * kGroupSlabs + si, kSlabs - 1);
        cp_async_16(at + Stage::kBBytes + i * 16, wb + ((slab * kChunks + c) * kRunPieces + piece) * 16, 16);
      }
      if constexpr (kCsf) {
        using SS = StageScales<kNvfp4, kMats, true>;
#pragma unroll
        for (int i = lane; i < kGroupSlabs * SS::kPieces; i += 32) {
          const int si = i / SS::kPieces, piece = i % SS::kPieces;
          const size_t slab = (size_t)expert * kSlabs + min(group * kGroupSlabs + si, kSlabs - 1);
          cp_async_piece<SS::kPieceBytes>(at + Stage::kBBytes + Stage::kWeightBytes + i * SS::kPieceBytes,
                                          s + (slab * kChunks + c) * SS::kSlabBytes + piece * SS::kPieceBytes);
        }
      } else {
#pragma unroll
        for (int i = lane; i < kGroupSlabs * kScalePieces; i += 32) {
          const int si = i / kScalePieces, piece = i % kScalePieces;
          const size_t slab = (size_t)expert * kSlabs + min(group * kGroupSlabs + si, kSlabs - 1);
          cp_async_16(at + Stage::kBBytes + Stage::kWeightBytes + i * 16,
                      s + ((slab * kChunks + c) * kScalePieces + piece) * 16, 16);
        }
      }
      cp_async_mbarrier_arrive(full);
      cur.advance();
    }
  }
}

// The consumers' product of one unit: acc[a] = the rows of this warp's A operand a (slab a / matrices,
// matrix a % matrices) x the tile's kNW columns, over K = 64 kChunks. Per chunk: wait for the stage, load the warp's weight run and scales,
// then per k16 step decode into a two-slot A ring (the slot's last reader, step j - 2, done: wgmma_wait<1>)
// and issue the step's kMats wgmmas as one group. Chunk c - 1's stage is released at chunk c's second
// step, once every MMA of chunk c - 1 is done.
// CSF scales (Csf a CsfWarpReader, begun for the unit's slabs): the stage holds the operands' offsets
// words; the warp rebuilds its lane's scale bytes in registers from them (csf_exc: the plane's lists).
// kWarps: the unit's warps; kTeamed: the CTA's consumer warps form teams, and team_warp is this warp's
// index among its team's (else the warp index itself).
template <bool kNvfp4, int kChunks, int kA, int kWarps, int kN, int kNW, int kStages, bool kRawB, bool kTeamed, int kCluster,
          class Csf>
MOEJIT_DEVICE void prefill_consume(u32 ring, const u8* ring_ptr, const PrefillBarriers<kStages>& bars,
                                   RingCursor<kStages>& cur, float (&acc)[kA][kNW / 2], Csf& csf,
                                   const u32* csf_exc, int team_warp) {
  constexpr bool kCsf = Csf::kReads;
  using SG = ScaleGeometry<kNvfp4>;
  using Stage = PrefillStage<kNvfp4, kA, kWarps, kN>;
  const int lane = lane_id(), warp = kTeamed ? team_warp : threadIdx.x >> 5, g = lane >> 2;
#pragma unroll
  for (int m = 0; m < kA; ++m)
#pragma unroll
    for (int i = 0; i < kNW / 2; ++i) acc[m][i] = 0.f;
  u32 ar[2][kA][4];
  int prev = -1;
#pragma unroll 1
  for (int c = 0; c < kChunks; ++c) {
    const int stage = cur.stage;
    mbarrier_wait(bars.full(stage), cur.phase);
    const u8* at = ring_ptr + stage * Stage::kBytes;
    const u32x4* wr = reinterpret_cast<const u32x4*>(at + Stage::kBBytes) + warp * kA * 32 + lane;
    auto release_previous = [&](int st) {
      if (st == 1 && prev >= 0) {
        // Every MMA of the previous chunk is done. Each lane releases the stage itself (kPrefillReleaseLanes),
        // so its own reads of the stage (its A words and scales) are ordered before the producer's next
        // copies into it by its own arrival. Lane 0's arrival alone relies on the data flow into the
        // warp-collective MMAs (racecheck reports the reads); a __syncwarp before it makes ptxas serialize
        // every wgmma of the loop (C7513).
        prefill_release<kCluster>(bars, prev);
        prev = -1;
      }
    };
    if constexpr (kCsf) {
      constexpr int kOffsetBytes = CsfGeometry<kNvfp4>::kBytesPerChunk;
      const u8* orow = at + Stage::kBBytes + Stage::kWeightBytes + warp * kA * kOffsetBytes + Csf::lane_offset(g);
      u32 words[kA];
      u32x2 sc[kA];
#pragma unroll
      for (int a = 0; a < kA; ++a) words[a] = *reinterpret_cast<const u32*>(orow + a * kOffsetBytes);
      csf.scales(words, sc, csf_exc);
      wgmma_slab_chunk_from_registers<kNvfp4, kA, kRawB>(wr, sc, wgmma_desc_k_sw128(ring + stage * Stage::kBytes), ar,
                                                        acc, release_previous);
    } else {
      const u8* sr = at + Stage::kBBytes + Stage::kWeightBytes + warp * kA * Stage::kScaleChunk + g * SG::kBytesPerLane;
      wgmma_slab_chunk<kNvfp4, kA, Stage::kScaleChunk, kRawB>(wr, sr, wgmma_desc_k_sw128(ring + stage * Stage::kBytes),
                                                              ar, acc, release_previous);
    }
    prev = stage;
    cur.advance();
  }
  wgmma_wait<0>();
  if (prev >= 0) prefill_release<kCluster>(bars, prev);
}

// Calls f(col, i, r) for each of this lane's accumulators i of a kNW-column product: col the token row
// within the tile, r the row within the warp's 16-row slab.
template <int kNW, typename F>
MOEJIT_DEVICE void for_each_tile_result(F f) {
  const int lane = lane_id(), g = lane >> 2, c4 = lane & 3;
#pragma unroll
  for (int nt = 0; nt < kNW / 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) f(nt * 8 + 2 * c4 + (i & 1), nt * 4 + i, g + (i >> 1) * 8);
}

// Registers per thread: the producer warpgroup keeps producer_regs (kPrefillProducerRegs: 40, or 24 for wide
// tiles) and the consumer warpgroups take what that frees.
// A CTA holds the registers of its launch bound: per scheduler one warp of each warpgroup, each at the cap
// ptxas gives kWarpgroups + 1 warpgroups (the 512 registers per lane of a scheduler shared among them, in
// multiples of 8, at most 255), and setmaxnreg.inc waits until the CTA's pool can give what it asks.
constexpr int prefill_consumer_regs(int consumer_warpgroups, int producer_regs) {
  const int launch_cap = (512 / (consumer_warpgroups + 1) > 255 ? 255 : 512 / (consumer_warpgroups + 1)) / 8 * 8;
  const int r = ((consumer_warpgroups + 1) * launch_cap - producer_regs) / consumer_warpgroups / 8 * 8;
  return r > 256 ? 256 : r;
}

// The token widths a unit's product runs at: the tile's, half of it and (tiles of 128 and more) a quarter,
// the narrowest that holds the unit's pairs, so an expert's last, partly filled tile costs about what it
// holds. The generator emits the wgmma of each width (generator/families/prefill.cpp, same rule).
template <int kN>
inline constexpr bool kPrefillQuarterWidth = kN % 32 == 0 && kN / 4 >= 16;
// Tiles wider than 128 tokens also run 128- and 96-wide products (those between half the tile and the
// tile): an expert's pairs rarely fill such a tile, and the next width down would be half of it. A tile
// whose accumulators exceed 128 registers (FC1's two matrices on more than 128 tokens, kA operands per
// warp) runs three widths at most, or ptxas serializes its wgmmas: the tile's, 128 in place of half the
// tile, and a quarter.
template <int kN, int kA>
inline constexpr bool kPrefillWideAcc = kA * kN / 2 > 128;
// Such wide tiles also need the 8 more registers per consumer thread that a 24-register producer frees
// (prefill_consumer_regs); at 232 ptxas serializes their wgmmas.
template <int kN, int kA>
inline constexpr int kPrefillProducerRegs = kPrefillWideAcc<kN, kA> ? 24 : 40;
template <int kN, int kW, int kA>
inline constexpr bool kPrefillMidWidth =
    kN > 128 && kW < kN && (kPrefillWideAcc<kN, kA> ? kW == 128 : kW > kN / 2);

// The shared skeleton of both FC kernels: barriers, the producer's and the consumers' walks over the
// units, the width choice per tile. The consumer warps form kTeams teams of kUnitWarps = kWarps / kTeams
// (whole warpgroups); team t takes the CTA's units i = t, t + kTeams, ... (the i-th entry of the CTA's unit
// queue) and skips the others' stages. With two teams the ring, filled in unit order, serializes the teams'
// products (a unit's stages are there only once the previous unit's are consumed), so one team's epilogue
// runs while the other's MMAs do. A unit is (tile, row group of kUnitWarps x kPerWarp slabs); the team's
// warp w owns kPerWarp adjacent slabs from slab0 = group x kUnitWarps x kPerWarp + w x kPerWarp, each
// with kMats matrices (kA = kPerWarp x kMats A operands, slab-major). Every consumer warp calls preload(t, slab0)
// before a unit's product (its loads are in flight while the product runs) and epilogue(t, slab0, acc,
// preloaded) after it (acc[kA][kNW / 2], kNW the width run), also for slabs past the matrix (>= kSlabs).
// The producer takes the next unit and loads its tile entry before it copies the current one's chunks, and
// hands both to the consumers in the queue, so those dependent loads are off the path too. kCsf: s is the
// plane's CSF offsets and csf its other arrays (csf_scales.cuh); each consumer warp begins its slabs' readers
// with the unit's preload.
// kCluster 2 (one team only): the grid is clusters of two CTAs; cluster i walks units i, i + clusters, ...
// of (tile, pair of row groups), its rank-r CTA taking row group 2 x pair + r (past the last group when
// their count is odd: that CTA's products are dropped), so both read each B block once between them
// (prefill_produce). A stage is empty once both CTAs' consumers have released it; the producer waits for
// its stages' last releases before the CTA exits, as the other CTA's arrivals and copies target it.
template <bool kNvfp4, int kChunks, int kMats, int kPerWarp, int kSlabs, int kWarps, int kTeams, int kN, int kStages,
          bool kRawB, bool kCsf, int kCluster, class Preload, class Epilogue>
MOEJIT_DEVICE void prefill_fc(const i32* tiles, i32* next_unit, const RoutingArgs& route, const u16* b_base, const u32x4* w, const u8* s,
                              const CsfPlaneArrays& csf_arrays, const void* w_map, const void* s_map, Preload preload,
                              Epilogue epilogue) {
  constexpr int kA = kPerWarp * kMats;
  constexpr int kUnitWarps = kWarps / kTeams;
  constexpr int kGroupSlabs = kUnitWarps * kPerWarp;
  constexpr int kGroups = (kSlabs + kGroupSlabs - 1) / kGroupSlabs;
  constexpr int kPairs = (kGroups + kCluster - 1) / kCluster;  // units per tile: row groups, or pairs of them
  constexpr int kProducerRegs = kPrefillProducerRegs<kN, kA>;
  static_assert(kWarps % 4 == 0 && kUnitWarps % 4 == 0 && kUnitWarps * kTeams == kWarps,
                "whole consumer warpgroups in every team");
  static_assert(kCluster == 1 || (kCluster == 2 && kTeams == 1), "clusters of two CTAs, with one team");
  static_assert(kN % 16 == 0 && kN <= 256, "a tile of 16..256 tokens, halves of whole n8 blocks");
  extern __shared__ __align__(16) u8 prefill_ring[];
  __shared__ __align__(8) u64 barrier_words[PrefillBarriers<kStages>::kWords];
  __shared__ PrefillQueueSlot queue[kPrefillQueue];
  const u32 smem_base = shared_address(prefill_ring);
  const u32 ring = (smem_base + 1023u) & ~1023u;
  const u8* ring_ptr = prefill_ring + (ring - smem_base);
  const PrefillBarriers<kStages> bars{shared_address(barrier_words)};
  // Broadcast from lane 0 so that the compiler knows the warp index, hence a team's ring cursor and the
  // stages' descriptors, to be warp-uniform: it keeps them in uniform registers. With threadIdx.x >> 5 the
  // two-team loops computed them per lane (16 R2UR and about 20 more instructions per chunk, perf-log v49).
  const int warp = __shfl_sync(0xffffffffu, threadIdx.x >> 5, 0);
  if (threadIdx.x == 0) {
    for (int st = 0; st < kStages; ++st) {
      // Tensor copies: lane 0's announcement of the stage's bytes; else the B block's announcement, then every
      // producer lane's copies.
      mbarrier_init(bars.full(st), kPrefillTensorCopies ? 1 : 1 + 32);
      mbarrier_init(bars.empty(st), kUnitWarps * kCluster * kPrefillReleaseLanes<kCluster>);
    }
    if (kTeams > 1)
      for (int t = 0; t < 2; ++t) mbarrier_init(bars.turn(t), kUnitWarps);
    for (int q = 0; q < kPrefillQueue; ++q) {
      mbarrier_init(bars.queue_full(q), 1);
      mbarrier_init(bars.queue_empty(q), kUnitWarps);
    }
    mbarrier_init_fence();
  }
  if constexpr (kCluster > 1)
    cluster_sync_all();  // the other CTA's barriers exist before this one copies into or arrives on them
  else
    __syncthreads();
  pdl_wait_primary();  // the tile table and the B blocks
  pdl_launch_dependents();
  const int units = tiles[0] * kPairs;
  const unsigned cluster = blockIdx.x / kCluster, clusters = gridDim.x / kCluster;
  const int rank = kCluster > 1 ? (int)cluster_cta_rank() : 0;
  RingCursor<kStages> cur;
  if (warp >= kWarps) {
    warpgroup_release_registers<kProducerRegs>();
    if (warp != kWarps) return;
    const int lane = lane_id();
    int taken = 0;
    auto take_unit = [&]() {
      if constexpr (kCluster > 1) return (int)(cluster + taken++ * clusters);
      int u = 0;
      if (lane == 0) u = atomicAdd(next_unit, 1);
      return __shfl_sync(0xffffffffu, u, 0);
    };
    // The next unit and its tile entry are loaded while this one's copies are issued.
    int next = take_unit();
    PrefillTile next_tile = next < units ? prefill_tile<kN>(tiles, route, next / kPairs) : PrefillTile{};
    for (int j = 0, ended = 0;; ++j) {
      const int unit = next;
      const PrefillTile t = next_tile;
      const int q = j % kPrefillQueue;
      if (lane == 0) {
        mbarrier_wait(bars.queue_empty(q), (u32)((j / kPrefillQueue) & 1) ^ 1u);
        queue[q] = PrefillQueueSlot{t, unit};
        mbarrier_arrive(bars.queue_full(q));
      }
      if (unit >= units) {
        if (++ended == kTeams) break;  // one end for each team
        continue;
      }
      next = take_unit();
      if (next < units) next_tile = prefill_tile<kN>(tiles, route, next / kPairs);
      prefill_produce<kNvfp4, kChunks, kMats, kPerWarp, kSlabs, kUnitWarps, kN, kStages, kCsf, kCluster>(
          b_base + t.row_base * kChunks * 64, t.rows, w, s, t.expert, unit % kPairs * kCluster + rank, ring, bars, cur,
          w_map, s_map);
    }
    if constexpr (kCluster > 1)
      for (int st = 0; st < kStages; ++st) {  // every stage's last use released by both CTAs' consumers
        mbarrier_wait(bars.empty(cur.stage), cur.phase ^ 1u);
        cur.advance();
      }
    return;
  }
  warpgroup_claim_registers<prefill_consumer_regs(kWarps / 4, kProducerRegs)>();
  const int team = kTeams == 1 ? 0 : warp / kUnitWarps, unit_warp = kTeams == 1 ? warp : warp % kUnitWarps;
  if (kTeams > 1) cur.skip(team * kChunks);  // the units before this team's first
  // Teams take turns: a team starts a product once the other's previous one has passed all its waits on
  // the ring. Then every stage a team waits on is at most one use ahead of the barrier's completed phase,
  // which a parity wait needs (a team running ahead by whole units would mistake an earlier use's
  // completion for its own). Team 0's first unit goes first. The queue's entries alternate between the
  // teams; a team reads its entry before its turn, so that the end (a unit past the last) needs no turn.
  static_assert(kTeams <= 2, "one team or two");
  static_assert(kPrefillQueue % kTeams == 0, "each team's entries in fixed queue slots");
  for (int j = team, turns = 0;; j += kTeams, ++turns) {
    const int q = j % kPrefillQueue;
    mbarrier_wait(bars.queue_full(q), (u32)((j / kPrefillQueue) & 1));
    const PrefillTile t = queue[q].tile;
    const int unit = queue[q].unit;
    __syncwarp();  // every lane's reads of the slot before lane 0 frees it
    if (lane_id() == 0) mbarrier_arrive(bars.queue_empty(q));
    if (unit >= units) break;
    if (kTeams > 1 && (team > 0 || turns > 0)) mbarrier_wait(bars.turn(team), (u32)((team == 0 ? turns - 1 : turns) & 1));
    const int slab0 = (unit % kPairs * kCluster + rank) * kGroupSlabs + unit_warp * kPerWarp;
    const auto pre = preload(t, slab0);
    typename CsfWarpReaderOf<kCsf, kNvfp4, kMats, kPerWarp, 1>::Type csf;
    if constexpr (kCsf) csf.begin(csf_arrays, t.expert, slab0, kSlabs, lane_id() >> 2, 0);
    auto run = [&](auto width) {
      constexpr int kNW = decltype(width)::value;
      float acc[kA][kNW / 2];
      prefill_consume<kNvfp4, kChunks, kA, kUnitWarps, kN, kNW, kStages, kRawB, (kTeams > 1), kCluster>(
          ring, ring_ptr, bars, cur, acc, csf, csf_arrays.exc, unit_warp);
      if (kTeams > 1 && lane_id() == 0) mbarrier_arrive(bars.turn(1 - team));  // the other team's turn
      epilogue(t, slab0, acc, pre);
      // The epilogue's lanes part ways (columns past the tile's rows, a8/a4's block maxima); without this
      // reconvergence point the compiler treats the next unit's chunk loop as divergent and computes its ring
      // cursor and descriptors per lane, as in the two-team loops above (perf-log v49).
      __syncwarp();
    };
    if (kPrefillQuarterWidth<kN> && t.in_tile <= kN / 4)
      run(IntTag<kPrefillQuarterWidth<kN> ? kN / 4 : kN>{});
    else if (!kPrefillWideAcc<kN, kA> && t.in_tile <= kN / 2)
      run(IntTag<kPrefillWideAcc<kN, kA> ? kN : kN / 2>{});
    else if (kPrefillMidWidth<kN, 96, kA> && t.in_tile <= 96)
      run(IntTag<kPrefillMidWidth<kN, 96, kA> ? 96 : kN>{});
    else if (kPrefillMidWidth<kN, 128, kA> && t.in_tile <= 128)
      run(IntTag<kPrefillMidWidth<kN, 128, kA> ? 128 : kN>{});
    else
      run(IntTag<kN>{});
    if (kTeams > 1) cur.skip((kTeams - 1) * kChunks);  // the other teams' units before this team's next
  }
}

// FC1's store of a warp's slab of results (v: this lane's kNW / 2 values, already bf16-ready fp32, zero
// where the column or the slab holds nothing) into the tile's act block. A token's 16 rows of the slab sit
// in the 8 lanes of one lane % 4 (rows g and g + 8), and mma_k_position puts rows 2j and 2j + 1 side by side:
// one exchange with lane g ^ 1 gives each lane two adjacent values (even g rows g, g + 1; odd g rows g + 7,
// g + 8), so the slab goes out in 4-byte stores, each warp store filling whole 32-byte sectors.
template <int kIChunks, int kNW>
MOEJIT_DEVICE void prefill_fc1_store_slab(u16* act, const PrefillTile& t, int slab, const float (&v)[kNW / 2]) {
  const int lane = lane_id(), g = lane >> 2, c4 = lane & 3;
  const bool odd = g & 1;
  const int row = slab * 16, k = (row % 64) / 16 * 16 + mma_k_position(odd ? g + 7 : g);
  u16* const block = act + (t.row_base * kIChunks + (size_t)(row / 64) * t.rows) * 64;
#pragma unroll
  for (int nt = 0; nt < kNW / 8; ++nt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float lo = v[nt * 4 + h], hi = v[nt * 4 + 2 + h];
      const float got = __shfl_xor_sync(0xffffffffu, odd ? lo : hi, 4);
      const int col = nt * 8 + 2 * c4 + h;
      if (col >= t.rows) continue;
      const u32 pair = (u32)f32_to_bf16(odd ? got : lo) | ((u32)f32_to_bf16(odd ? hi : got) << 16);
      *reinterpret_cast<u32*>(block + tile_block_offset(col, k)) = pair;
    }
}

// The activations of a warp's slab for the unit's columns (v[i] per accumulator i, times 2^64 where kScaled:
// a16's stored operand), 0 where the column lies past the tile's pairs or the slab past I. Both FC1 stores
// (a16, and a8/a4 before their quantization) take them from here.
template <int kAct, bool kLimit, bool kBias, bool kScaled, int kSlabs, int kMats, int kNW, class Pre>
MOEJIT_DEVICE void prefill_fc1_activations(const PrefillFc1Params& p, const PrefillTile& t, int slab,
                                           const float (&acc)[kMats][kNW / 2], const Pre& pre, float (&v)[kNW / 2]) {
  for_each_tile_result<kNW>([&](int col, int i, int r) {
    v[i] = 0.f;
    if (col < t.in_tile && slab < kSlabs) {
      float gate = acc[0][i] * pre.gs, up = kMats == 2 ? acc[kMats - 1][i] * pre.gs_up : 0.f;
      if (kBias) {
        gate += pre.bias[0][r >> 3];
        if (kMats == 2) up += pre.bias[1][r >> 3];
      }
      v[i] = apply_activation<kAct, kLimit>(gate, up, p.alpha, p.beta, p.limit) * (kScaled ? kActScale : 1.f);
    }
  });
}

// The a8/a4 form of FC1's store (moe_prefill_fc1's epilogue): the slab's activations are quantized as the
// reference quantizes the intermediate (slab_pair_max.cuh: a4's block is the warp's slab, a8's the slab pair
// of warps 2w, 2w + 1, both past the last chunk or neither, as kIChunks * 4 is even) and stored as the
// operand times 2^64 (a4 without 1/a2_gs, which FC2 folds into its output multiplier). A slab past I in its
// last chunk stores zeros and gives its partner zero maxima. pre: gs, gs_up, bias and out_gs as loaded by
// the preload.
template <int kAct, bool kLimit, bool kBias, int kI, int kMats, int kWarps, int kN, int kNW, class Pre>
MOEJIT_DEVICE void prefill_fc1_store_quantized(const PrefillFc1Params& p, const PrefillTile& t, int slab,
                                               const float (&acc)[kMats][kNW / 2], const Pre& pre) {
  constexpr int kSlabs = kI / 16, kIChunks = (kI + 63) / 64;
  float v[kNW / 2];
  prefill_fc1_activations<kAct, kLimit, kBias, false, kSlabs, kMats, kNW>(p, t, slab, acc, pre, v);
  quantize_slab_columns<kNW / 8>(v, pre.out_gs, OneSlabPerWarpBlockMax<kWarps, kN>{});
  // Zero past I whatever the partner's block holds (a NaN there makes the block's values NaN).
  if (slab >= kSlabs)
#pragma unroll
    for (int i = 0; i < kNW / 2; ++i) v[i] = 0.f;
  prefill_fc1_store_slab<kIChunks, kNW>(p.act, t, slab, v);
}

// FC1: act block of tile t = activation(x . W13[e]^T + b13[e]) as bf16 times 2^64 in MMA column order, zero
// in the rows past the tile's pairs and in the columns past I.
template <bool kNvfp4, int kAct, bool kLimit, bool kBias, int kH, int kI, int kWarps, int kTeams, int kN, int kStages,
          int kCluster = 1>
__device__ void moe_prefill_fc1(const PrefillFc1Params& p) {
  constexpr int kMats = kAct == kActRelu2 ? 1 : 2;
  constexpr int kChunks = (kH + 63) / 64, kIChunks = (kI + 63) / 64;
  constexpr int kSlabs = kI / 16;
  // The unit's output multipliers and this lane's bias values (rows g and g + 8 of gate and up); a4: the
  // intermediate's global scale (out_gs).
  struct Fc1Preload {
    float gs, gs_up, bias[2][2], out_gs;
  };
  auto preload = [&](const PrefillTile& t, int slab) {
    Fc1Preload pre{};
    const int gi = global_scale_index<kMats>(t.expert);
    pre.gs = wgmma_output_scale<kNvfp4, true>(p.gscale, gi);
    pre.gs_up = kMats == 2 ? wgmma_output_scale<kNvfp4, true>(p.gscale, gi + 1) : pre.gs;
    if (kActPrecision == kActA4) {
      const float unscale = act_unscale(act_fc1_x_gs<kMats>(p.gscale, t.expert));  // x's 1/a1_gs
      pre.gs *= unscale;
      pre.gs_up *= unscale;
      pre.out_gs = act_fc1_out_gs<kMats>(p.gscale, t.expert);
    }
    if (kBias && slab < kSlabs)
#pragma unroll
      for (int m = 0; m < kMats; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          pre.bias[m][h] = p.bias[((size_t)t.expert * kMats + m) * kI + slab * 16 + (lane_id() >> 2) + 8 * h];
    return pre;
  };
  auto epilogue = [&](const PrefillTile& t, int slab, const auto& acc, const Fc1Preload& pre) {
    constexpr int kNW = 2 * (int)(sizeof(acc[0]) / sizeof(float));
    // Slabs past I that fall in its last chunk store zeros: FC2 multiplies them by its K padding.
    if (slab >= kIChunks * 4) return;
    if constexpr (kActPrecision != kActA16) {
      prefill_fc1_store_quantized<kAct, kLimit, kBias, kI, kMats, kWarps, kN, kNW>(p, t, slab, acc, pre);
      return;
    }
    float v[kNW / 2];
    prefill_fc1_activations<kAct, kLimit, kBias, true, kSlabs, kMats, kNW>(p, t, slab, acc, pre, v);
    prefill_fc1_store_slab<kIChunks, kNW>(p.act, t, slab, v);
  };
  prefill_fc<kNvfp4, kChunks, kMats, 1, kSlabs, kWarps, kTeams, kN, kStages, true, kCsfFc1, kCluster>(
      p.tiles, p.tiles + kTileTableFc1Next, p.route, p.xb, p.w, p.s, MOEJIT_FC1_CSF_ARRAYS(p), &p.w_map, &p.s_map, preload, epilogue);
}

// FC2: partial[q, :] = act[q] . W2[e]^T + b2[e] in fp32 for every pair; moe_topk_combine weighs them by the
// pairs' top-k weights and sums them. Each consumer warp owns kPerWarp adjacent slabs of H: two halve the B
// traffic per MMA (one B block feeds 256 rows) at twice the accumulators.
template <bool kNvfp4, bool kBias, int kH, int kI, int kWarps, int kTeams, int kPerWarp, int kN, int kStages,
          int kCluster = 1>
__device__ void moe_prefill_fc2(const PrefillFc2Params& p) {
  constexpr int kChunks = (kI + 63) / 64;
  constexpr int kSlabs = kH / 16;
  // The unit's output multiplier, this lane's bias values (rows g and g + 8 of each slab) and the pair of
  // each column it holds (the gather's row table; -1 past the tile's pairs).
  struct Fc2Preload {
    float gs, bias[kPerWarp][2];
    int pair[kN / 4];
  };
  auto preload = [&](const PrefillTile& t, int slab0) {
    Fc2Preload pre{};
    pre.gs = wgmma_output_scale<kNvfp4, false>(p.gscale, t.expert);
    if (kActPrecision == kActA4) pre.gs *= act_unscale(act_fc2_gs(p.gscale, t.expert));  // the intermediate's 1/a2_gs
    if (kBias)
#pragma unroll
      for (int j = 0; j < kPerWarp; ++j)
        if (slab0 + j < kSlabs)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            pre.bias[j][h] = p.bias[(size_t)t.expert * kH + (slab0 + j) * 16 + (lane_id() >> 2) + 8 * h];
    const int c4 = lane_id() & 3;
#pragma unroll
    for (int j = 0; j < kN / 4; ++j) {
      const int col = (j >> 1) * 8 + 2 * c4 + (j & 1);
      pre.pair[j] = col < t.rows ? p.row_pair[t.row_base + col] : -1;
    }
    return pre;
  };
  auto epilogue = [&](const PrefillTile& t, int slab0, const auto& acc, const Fc2Preload& pre) {
    constexpr int kNW = 2 * (int)(sizeof(acc[0]) / sizeof(float));
    // This lane's results: rows g and g + 8 of each slab for the columns (n-tile nt, parity h) it holds,
    // one pair each (pre.pair[2 nt + h]); the column's address is formed once for both rows and all slabs.
    float* const lane_rows = p.partial + slab0 * 16 + (lane_id() >> 2);
#pragma unroll
    for (int nt = 0; nt < kNW / 8; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int q = pre.pair[nt * 2 + h];
        if (q < 0) continue;
        float* const dst = lane_rows + (size_t)q * kH;
#pragma unroll
        for (int sj = 0; sj < kPerWarp; ++sj) {
          if (slab0 + sj >= kSlabs) break;
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            float y = acc[sj][nt * 4 + 2 * half + h] * pre.gs;
            if (kBias) y += pre.bias[sj][half];
            dst[sj * 16 + 8 * half] = y;
          }
        }
      }
  };
  prefill_fc<kNvfp4, kChunks, 1, kPerWarp, kSlabs, kWarps, kTeams, kN, kStages, false, kCsfFc2, kCluster>(
      p.tiles, p.tiles + kTileTableFc2Next, p.route, p.act, p.w, p.s, MOEJIT_FC2_CSF_ARRAYS(p), &p.w_map, &p.s_map, preload, epilogue);
}
