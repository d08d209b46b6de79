// The inner product of the decode family: one 16-row slab of FP4 weights against up to 8*kNT token
// rows of bf16 activations, on tensor cores (m16n8k16, weights as A, tokens on the narrow N side).
//
// K is split in 64-wide chunks over kParts parts (chunk c goes to part c % kParts; FC1 and FC2 give each
// warp of the CTA one part, FC2-sum gives each (expert, part) unit to one warp) and the partial sums
// are reduced in a fixed part order, so results are bit-reproducible.
#pragma once
#include "act_quant.cuh"
#include "bulk_copy.cuh"
#include "csf_scales.cuh"
#include "fp4_decode.cuh"
#include "trace.cuh"

// How far past its register ring each warp asks the L2 for its weights, in chunks of its K part: the
// key's l2_ahead, passed by the generator (one kernel per translation unit).
#ifndef MOEJIT_L2_AHEAD_CHUNKS
#define MOEJIT_L2_AHEAD_CHUNKS 0
#endif
inline constexpr int kL2AheadChunks = MOEJIT_L2_AHEAD_CHUNKS;
static_assert(kL2AheadChunks >= 0 && kL2AheadChunks <= 16, "l2_ahead is 0..16 chunks");
// FC1 at one token stages its x row in shared memory (the key's x_staged; see slab_mma's x_stage).
#ifndef MOEJIT_X_STAGED
#define MOEJIT_X_STAGED 0
#endif
inline constexpr bool kXStaged = MOEJIT_X_STAGED != 0;
// The kernel routes inline (the key's inline_route): its CTAs serve few pairs each, one pass per slab.
#ifndef MOEJIT_INLINE_ROUTED
#define MOEJIT_INLINE_ROUTED 0
#endif
inline constexpr bool kInlineRouted = MOEJIT_INLINE_ROUTED != 0;
// Registers per thread that the kernel's launch bounds leave ptxas (65536 / (threads x CTAs per SM),
// passed by the generator; 255 when unknown).
#ifndef MOEJIT_REGISTER_CAP
#define MOEJIT_REGISTER_CAP 255
#endif
inline constexpr int kRegisterCap = MOEJIT_REGISTER_CAP;
// Zero pieces (8 bytes each) at the front of each warp's staged x area, read by lanes without a pair.
inline constexpr int kStageZeros = 32;

template <bool kNvfp4>
struct ScaleGeometry {
  // Scale bytes per (chunk, matrix): 8 row groups x 2 rows x blocks per chunk (4 of 16 or 2 of 32).
  static constexpr int kBytesPerChunk = kNvfp4 ? 64 : 32;
  static constexpr int kBytesPerLane = kBytesPerChunk / 8;  // every lane of row group g reads g's bytes
  static_assert(kBytesPerChunk == CsfGeometry<kNvfp4>::kPlainBytesPerChunk, "CSF stages hold the plain bytes");
};

// The scale bytes of one slab's chunk (all its matrices) as the batch and prefill families copy them into a
// stage, plain (ScaleGeometry) or, reading CSF, the offsets (CsfGeometry): contiguous in the plane and in
// the stage (operand a of a warp at a x kChunkBytes of its area), copied in cp.async pieces of kPieceBytes
// (MXFP4's offsets are 4 bytes per matrix). The stages keep the plain bytes' room, so a key's shared memory
// and ring depth do not depend on its scale reads.
template <bool kNvfp4, int kMats, bool kCsf>
struct StageScales {
  static constexpr int kChunkBytes = kCsf ? CsfGeometry<kNvfp4>::kBytesPerChunk : ScaleGeometry<kNvfp4>::kBytesPerChunk;
  static constexpr int kSlabBytes = kMats * kChunkBytes;
  static constexpr int kPieceBytes = kSlabBytes < 16 ? kSlabBytes : 16;
  static constexpr int kPieces = kSlabBytes / kPieceBytes;
};

// Where one expert's 16-row slab lives in a prepared plane, and its fp32 output multipliers.
struct SlabOperands {
  const u32x4* w;  // this lane's first 16-byte run (chunk 0, matrix 0)
  const u8* s;     // the slab's scale bytes
  float gs;        // global scale (NVFP4; 1 for MXFP4) x the 2^62 MMA-scaling correction; FC1: the gate's
  float gs_up;     // FC1 with two matrices: the up rows' (gate and up may be scaled apart); else gs
  CsfStageSlab csf;  // CSF scales: the slab's base bytes and exception list (s then points at its offsets)
};

// Index of expert e's first global scale in a prepared plane: FC1 with two matrices keeps [E][2] (gate,
// up), every other plane [E].
template <int kMats>
MOEJIT_DEVICE int global_scale_index(int e) {
  return kMats == 2 ? 2 * e : e;
}

// kCsf: s is a prepared CSF plane's offsets, s_base, s_exc and s_head its other arrays, s_head_words its
// heads' length (csf_scales.cuh).
template <bool kNvfp4, int kChunks, int kMats, int kSlabs, bool kCsf = false>
MOEJIT_DEVICE SlabOperands slab_operands(const u32x4* w, const u8* s, const float* gscale, int e, int slab,
                                         const u8* s_base = nullptr, const u32* s_exc = nullptr,
                                         const u32* s_head = nullptr, int s_head_words = 0) {
  constexpr int kScaleBytes = kCsf ? CsfGeometry<kNvfp4>::kBytesPerChunk : ScaleGeometry<kNvfp4>::kBytesPerChunk;
  const size_t slab_index = (size_t)e * kSlabs + slab;
  const int g = global_scale_index<kMats>(e);
  const float gs = kNvfp4 ? gscale[g] * kAccScale : kAccScale;
  CsfStageSlab csf{nullptr, nullptr, nullptr, 0u, 0u, 0};
  if (kCsf) {
    // FC1: a list per slab (both matrices); one-matrix planes: a list per two slabs (csf_scales.cuh).
    const size_t list = kMats == 2 ? slab_index : (size_t)e * ((kSlabs + 1) / 2) + slab / 2;
    csf = CsfStageSlab{s_base + slab_index * kMats * 16, s_head + list * s_head_words, s_exc, (u32)list,
                       (u32)(slab & 1), s_head_words};
  }
  return SlabOperands{w + slab_index * kChunks * kMats * 32 + lane_id(), s + slab_index * kChunks * kMats * kScaleBytes, gs,
                      kNvfp4 && kMats == 2 ? gscale[g + 1] * kAccScale : gs, csf};
}

// Chunks of K part `part` when a slab's kChunks chunks are dealt to kParts parts in turn (chunk c to
// part c % kParts).
template <int kChunks, int kParts>
MOEJIT_DEVICE int part_chunks(int part) {
  return part < kChunks ? (kChunks - 1 - part) / kParts + 1 : 0;
}

// Zeroes a block of MMA accumulators (any two outer dimensions, 4 per lane and MMA).
template <int kA, int kB>
MOEJIT_DEVICE void zero_accumulators(float (&v)[kA][kB][4]) {
#pragma unroll
  for (int a = 0; a < kA; ++a)
#pragma unroll
    for (int b = 0; b < kB; ++b)
#pragma unroll
      for (int i = 0; i < 4; ++i) v[a][b][i] = 0.f;
}

// One 64-wide chunk of a slab: wc/sc are this lane's weight run and scale bytes of each matrix,
// x_piece(nt, st) the lane's 8-byte activation piece of n-tile nt for k16 step st (multiplied by 2^64
// here when kScaleB). Each scale block's MMA result is scaled by its block scale in fp32 (every lane of
// a step shares the scale block) and added to acc, so weights go to the tensor cores as placed bits.
template <bool kNvfp4, int kMats, int kNT, int kCols, bool kScaleB, typename XPiece>
MOEJIT_DEVICE void chunk_mma(const u32x4 (&wc)[kMats], const u32x2 (&sc)[kMats], int live_tiles,
                             float (&acc)[kNT][kMats][4], XPiece x_piece) {
  constexpr int kStepsPerBlock = kNvfp4 ? 1 : 2;  // MXFP4 blocks span two k16 steps
#pragma unroll
  for (int st0 = 0; st0 < 4; st0 += kStepsPerBlock) {
    float d[kMats][kNT][4];
    zero_accumulators(d);
#pragma unroll
    for (int st = st0; st < st0 + kStepsPerBlock; ++st) {
      u32x2 xv[kNT];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const u32x2 v = x_piece(nt, st);
        xv[nt] = kScaleB ? u32x2{bf16x2_mul(v.x, kActScaleBf16x2), bf16x2_mul(v.y, kActScaleBf16x2)} : v;
      }
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
        const u32 word = st == 0 ? wc[m].x : st == 1 ? wc[m].y : st == 2 ? wc[m].z : wc[m].w;
        u32 a[4];
        fp4_decode_word(word, a);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
          if (nt == 0 || nt < live_tiles) mma_bf16_16816(d[m][nt], a, xv[nt].x, xv[nt].y);
      }
    }
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      float sg, sg8;
      block_scales<kNvfp4>(sc[m], st0 / kStepsPerBlock, sg, sg8);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        acc[nt][m][0] = fmaf(d[m][nt][0], sg, acc[nt][m][0]);
        acc[nt][m][2] = fmaf(d[m][nt][2], sg8, acc[nt][m][2]);
        if (kCols == 8) {  // odd columns carry pairs only when every column does (pass_rows)
          acc[nt][m][1] = fmaf(d[m][nt][1], sg, acc[nt][m][1]);
          acc[nt][m][3] = fmaf(d[m][nt][3], sg8, acc[nt][m][3]);
        }
      }
    }
  }
}

// w: this slab's first 16-byte run for this lane (chunk 0, matrix 0); runs of chunk c, matrix m are at
// w + (c * kMats + m) * 32. s: this slab's scale plane; b_rows[nt]: the bf16 row of the token that is
// column (lane/4) of n-tile nt, or nullptr (column contributes zeros). kScaleB: the rows hold plain
// activations, multiplied by 2^64 here; otherwise they were stored multiplied (FC1's output).
// kPrefetchX: see the activation ring below. part: which of the kParts K parts this warp computes.
// x_stage (kXStaged FC1 only): this warp's shared-memory area of kStageZeros + its part's chunks x 16
// pieces; every column of the pass that holds a pair must hold the same token (decode at one token).
// The key's precision a8/a4 (kActPrecision): b_rows are the pairs' rows of the quantized layer input
// (the act_quant pre-pass, moe_act_quant.cuh), read as the a16 kernels read x.
//
// kSlabPair: the kMats = 2 "matrices" are two adjacent 16-row slabs of a one-matrix plane (FC2-sum over
// 32-row CTAs; w and s point at the first slab), both multiplied by the same activation pieces, as FC1's
// gate and up rows are; otherwise the plane interleaves kMats matrices per chunk (FC1).
//
// kCsf: s points at the slab's CSF offsets (the prepared CSF plane of csf_scales.cuh) and csf at its base
// bytes and exception list; after issuing its first chunks the warp rebuilds its part's plain scale bytes
// into csf_area (its CsfStage area) and each chunk reads its scale bytes from there: the ring carries
// weights only.
//
// Each warp walks its part's chunks (part, part + kParts, ...) with running pointers, kDepth chunks ahead, so
// each lane keeps kDepth * kMats 16-byte weight loads in flight. Each scale block's MMA result is
// scaled by its block scale in fp32 (every lane of a step shares the scale block), so weights go to
// the tensor cores as placed bits.
template <bool kNvfp4, int kK, int kMats, int kParts, int kNT, int kCols, int kDepth, bool kScaleB, bool kPrefetchX,
          bool kSlabPair = false, bool kCsf = false>
MOEJIT_DEVICE void slab_mma(const u32x4* w, const u8* s, const u16* const (&b_rows)[kNT], int live_tiles,
                            float (&acc)[kNT][kMats][4], bool wait_primary_after_prefetch, int part,
                            u32x2* x_stage = nullptr, const CsfStageSlab& csf = CsfStageSlab{},
                            u8* csf_area = nullptr) {
  using SG = ScaleGeometry<kNvfp4>;
  using CG = CsfGeometry<kNvfp4>;
  constexpr int kSBytes = SG::kBytesPerChunk;  // scale bytes per (chunk, matrix) (plain reads; CSF reads its stage)
  constexpr int kChunks = (kK + 63) / 64;
  static_assert(!kSlabPair || kMats == 2, "a slab pair is two matrices");
  constexpr int kPlaneMats = kSlabPair ? 1 : kMats;           // matrices interleaved per chunk in the plane
  constexpr int kWStride = kParts * kPlaneMats * 32;          // u32x4 runs per step of a part
  constexpr int kSStride = kParts * kPlaneMats * kSBytes;
  // From matrix 0's run (scale bytes) of a chunk to matrix m's: the next slab, or the next matrix.
  constexpr int kMatW = kSlabPair ? kChunks * 32 : 32;
  constexpr int kMatS = kSlabPair ? kChunks * kSBytes : kSBytes;
  constexpr int kXStride = kParts * 64;                       // bf16 elements per step of a part
  const int lane = lane_id();
  const int g = lane >> 2;
  const int kofs = 4 * (lane & 3);
  const int my_chunks = part_chunks<kChunks, kParts>(part);
  zero_accumulators(acc);

  const u32x4* wp = w + part * kPlaneMats * 32;
  const u8* sp = s + part * kPlaneMats * kSBytes + g * SG::kBytesPerLane;
  // A ring of kDepth + 1 slots: chunk i lives in slot i % kRing, and the load of chunk i + kDepth goes
  // to the slot chunk i - 1 left, so nothing is copied between slots.
  constexpr int kRing = kDepth + 1;
  // NVFP4 with two matrices in even columns only: without the odd columns' FFMAs ptxas sinks the next
  // chunk's weight loads below this chunk's MMAs (2 of 8 loads issued before the first MMA, against 8
  // in 8 columns), and the loads wait longer than the FFMAs saved. A warp barrier after the issue keeps
  // them ahead (memory operations do not move across it); the other tiles keep their loads early without it.
  constexpr bool kPinLoads = kNvfp4 && kMats == 2 && kCols == 4;
  u32x4 wq[kRing][kMats];
  u32x2 sq[kRing][kMats];
  int issued = 0;
  // kL2AheadChunks > 0: every chunk issued also asks the L2 for this part's chunk kL2AheadChunks further
  // on (and the first call asks for the chunks between the ring and that distance), so a later load
  // finds its line in L2 or on its way without a register held for it. Each lane requests its own
  // weight run and scale bytes; the lines are the ones the loads will touch.
  auto prefetch_chunk = [&](const u32x4* w_at, const u8* s_at) {
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      prefetch_l2(w_at + m * kMatW);
      if constexpr (!kCsf) prefetch_l2(s_at + m * kMatS);
    }
  };
  if (kL2AheadChunks > 0) {
#pragma unroll 1
    for (int c = kDepth; c < kDepth + kL2AheadChunks && c < my_chunks; ++c)
      prefetch_chunk(wp + c * kWStride, sp + c * kSStride);
  }
  // Loads this warp's next chunk into ring slot `slot` (nothing past the warp's last chunk). kChecked =
  // false: the caller knows the chunk exists and that the ring is primed (the steady-state loop below).
  auto issue = [&](int slot, auto checked) {
    constexpr bool kChecked = decltype(checked)::value;
    if (kL2AheadChunks > 0 && (!kChecked || issued >= kDepth) && issued + kL2AheadChunks < my_chunks)
      prefetch_chunk(wp + kL2AheadChunks * kWStride, sp + kL2AheadChunks * kSStride);
    if (!kChecked || issued < my_chunks) {
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
        wq[slot][m] = ld_stream_16(wp + m * kMatW);
        if constexpr (!kCsf) {
          const u8* smp = sp + m * kMatS;
          sq[slot][m] = kNvfp4 ? ld_stream_8(smp) : u32x2{ld_stream_4(smp), 0u};
        }
      }
    }
    ++issued;
    wp += kWStride;
    sp += kSStride;
  };
#pragma unroll
  for (int j = 0; j < kDepth; ++j) issue(j, BoolTag<true>{});
  // CSF: the part's scale bytes rebuilt into the warp's area while the first chunks are in flight; then
  // the lane's row group's bytes of the next chunk to compute (cs, one chunk further per step).
  using Stage = CsfStage<kNvfp4, kMats, kChunks, kParts, kSlabPair>;
  const u8* cs = nullptr;
  if constexpr (kCsf) {
    Stage::rebuild(csf_area, s, csf, part, my_chunks);
    cs = csf_area + g * CG::kPlainBytesPerLane;
  }
  // Weights never depend on the previous kernel, so a programmatic dependent waits only here, after
  // its first loads are in flight and before touching the previous kernel's outputs (b_rows).
  if (wait_primary_after_prefetch) {
    pdl_wait_primary();
    MOEJIT_TRACE_CTA(3);
  }

  // Activation pieces (per step 8 bytes per token: the lane's K values 4c..4c+3 of the step, times 2^64
  // on use when kScaleB). kPrefetchX: they ride one chunk ahead in the ring, so no step waits on a
  // fresh load (16 more registers per token tile); otherwise each step loads its own piece, and
  // issue_x only advances the pointers.
  // Chunk i's pieces live in slot i % kXRing; an even ring holds them in two slots (chunk parity is
  // known at compile time), since they only ever run one chunk ahead.
  constexpr int kXRing = kRing % 2 == 0 ? 2 : kRing;
  // Staged x: the warp first copies its part of the token's row, times 2^64, into x_stage (piece (chunk
  // c, step st, lane quad) at kStageZeros + c * 16 + st * 4 + quad, zeros past K), and every step then
  // reads its piece from there: no global load and no multiply per step, and the copy's loads leave
  // together. The area's first kStageZeros pieces are zeros, which the lanes of columns without a pair
  // read at a fixed place (their pointer does not advance): one unpredicated shared load per step for
  // every lane, instead of a zeroing move and a predicated load.
  constexpr bool kStageX = kXStaged && kScaleB;
  static_assert(!kStageX || kNT == 1, "a staged x row serves one token tile");
  if constexpr (kStageX) {
    const u16* row = reinterpret_cast<const u16*>(
        __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(b_rows[0]), 0));  // column 0 holds a pair
    // More than one token is a planner bug. a8/a4 rows are per pair (the act_quant pre-pass): two pairs of
    // one token and expert (duplicate ids) have rows of their own with the same values, so only a16's
    // rows name the token.
    if (kActPrecision == kActA16 && b_rows[0] != nullptr && b_rows[0] != row) __trap();
    x_stage[lane] = u32x2{0u, 0u};
    for (int i = lane; i < my_chunks * 16; i += 32) {
      const int k = (part + (i >> 4) * kParts) * 64 + ((i >> 2) & 3) * 16 + 4 * (i & 3);
      const u32x2 v = kK % 64 == 0 || k < kK ? ld_nc_8(row + k) : u32x2{0u, 0u};
      x_stage[kStageZeros + i] = u32x2{bf16x2_mul(v.x, kActScaleBf16x2), bf16x2_mul(v.y, kActScaleBf16x2)};
    }
    __syncwarp();
  }
  u32x2 xq[kXRing][kNT][4];
  const u16* xp[kNT];
  bool x_live[kNT];
  // kAnyRow: lanes of a column without a pair read column 0's row of n-tile 0 (which always holds one):
  // their MMA column then computes a result nobody reads (MMA columns are independent, and only columns
  // with a pair are stored), and the loads need neither a predicate nor zeroing moves; the lanes read
  // the addresses column 0's lanes read in the same instruction, so no extra memory traffic either.
  // NVFP4 kernels behind the route kernel (8 columns, many waves) keep the predicated loads: with them
  // they read 3-6 % slower (DeepSeek-V3 M = 16/32, Qwen3 M = 32/64; docs/perf-log.md v16).
  constexpr bool kAnyRow = !kNvfp4 || kCols == 4 || kInlineRouted;
  const u16* const any_row = !kAnyRow ? reinterpret_cast<const u16*>(w) : reinterpret_cast<const u16*>(
      __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(b_rows[0]), 0));
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    x_live[nt] = b_rows[nt] != nullptr;
    xp[nt] = (x_live[nt] ? b_rows[nt] : any_row) + part * 64 + kofs;
  }
  // Whether lane's column nt loads (always, with kAnyRow).
  auto x_loads = [&](int nt) { return kAnyRow || x_live[nt]; };
  // Staged x: this lane's piece of the next chunk, step 0, and how far it moves per chunk. The zero
  // pieces cover both offsets a step reads at (xs[4 st] ahead of the advance with the activation ring,
  // xs[4 st - 16] after it).
  const u32x2* xs = kStageX ? x_stage + (x_live[0] ? kStageZeros : 16) + (lane & 3) : nullptr;
  const int xs_step = x_live[0] ? 16 : 0;
  // The layer input (kScaleB) is read-only during the forward; FC1's output is not (see ld_act_8).
  auto ld_x = [](const u16* at) { return kScaleB ? ld_nc_8(at) : ld_act_8(at); };
  int x_issued = 0;
  int kx = part * 64 + kofs;  // true K of this lane's first element in the next chunk to load
  auto issue_x = [&](int slot, auto checked) {
    constexpr bool kChecked = decltype(checked)::value;
    if (kPrefetchX && (!kChecked || x_issued < my_chunks)) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int st = 0; st < 4; ++st)
          xq[slot][nt][st] = kStageX ? xs[4 * st]
                             : x_loads(nt) && (kK % 64 == 0 || kx + 16 * st < kK) ? ld_x(xp[nt] + 16 * st)
                                                                                   : u32x2{0u, 0u};
    }
    ++x_issued;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) xp[nt] += kXStride;
    kx += kXStride;
    if (kStageX) xs += xs_step;
  };
  if (kPrefetchX) issue_x(0, BoolTag<true>{});

  // Where the steady loop pays (docs/perf-log.md, v16 and v17): NVFP4 chunks hold four scale blocks
  // per matrix, and in the inline-routed NVFP4 kernels (decode up to 16 tokens) at 64-85 registers the
  // steady loop's freer schedule spills inside the loop (Qwen3 FC1 12 -> 120 bytes) and measures
  // slower; so does MXFP4 FC1 with a staged x row (DeepSeek-V3 MXFP4 M = 1: 0 -> 32 bytes, +1 us). The
  // other MXFP4 kernels keep their registers and gain (gpt-oss-120b M = 1-32: -2 to -6 %), and so do
  // NVFP4's FC1 and split FC2 behind the route kernel, whose spills stay outside the loop (DeepSeek-V3
  // M = 16/32/64 -5/-8/-6.5 % for both, Qwen3 M = 32/64 -2 to -3 %), and the inline NVFP4 FC1 in 8
  // columns given 96 registers (Qwen3 M = 12/16 at 5 CTAs per SM: -3 %, no spill).
  constexpr bool kSteadyLoop =
      !kStageX && (!(kNvfp4 && kInlineRouted) || (kMats == 2 && kCols == 8 && kRegisterCap >= 96));
  // One chunk: the loads kDepth chunks ahead, then this chunk's MMAs from ring slot j.
  auto step = [&](int j, auto checked) {
    issue((j + kDepth) % kRing, checked);
    issue_x(kPrefetchX ? (j + 1) % kRing % kXRing : j, checked);
    if (kPinLoads) asm volatile("bar.warp.sync -1;" ::: "memory");
    // Staged pieces are already times 2^64.
    auto x_piece_of = [&](int nt, int st) {
      // Without the ring each step loads its own piece right here (fewer live registers).
      return kPrefetchX ? xq[j % kXRing][nt][st]
             : kStageX  ? xs[4 * st - 16]
             : x_loads(nt) && (kK % 64 == 0 || kx - kXStride + 16 * st < kK) ? ld_x(xp[nt] - kXStride + 16 * st)
                                                                              : u32x2{0u, 0u};
    };
    if constexpr (kCsf) {
      // The chunk's scale bytes from the warp's area (CSF).
      u32x2 sc[kMats];
#pragma unroll
      for (int m = 0; m < kMats; ++m) sc[m] = Stage::read(cs, m);
      cs += Stage::kChunkBytes;
      chunk_mma<kNvfp4, kMats, kNT, kCols, kScaleB && !kStageX>(wq[j], sc, live_tiles, acc, x_piece_of);
    } else {
      // The chunk's scale bytes: the ring slot itself (a copy of it changed ptxas's spill choices at the
      // register caps).
      u32x2 (&sc)[kMats] = sq[j];
      chunk_mma<kNvfp4, kMats, kNT, kCols, kScaleB && !kStageX>(wq[j], sc, live_tiles, acc, x_piece_of);
    }
  };
  // Rolled over groups of kRing chunks, unrolled inside a group so that ring slots are compile-time
  // register indices (a full unroll spills at large K). While every load a group issues is one of the
  // warp's chunks (the steady state), the group runs without bound checks or predicated loads; the
  // last groups check each chunk.
  // The checked groups from chunk `base` on (the whole part where the steady loop does not apply).
  auto checked_groups = [&](int base) {
#pragma unroll 1
    for (; base < my_chunks; base += kRing) {
#pragma unroll
      for (int j = 0; j < kRing; ++j) {
        if (base + j >= my_chunks) break;
        step(j, BoolTag<true>{});
        if (base == 0 && j == 0) MOEJIT_TRACE_CTA(4);
      }
    }
  };
  if constexpr (kSteadyLoop) {
    int base = 0;
#pragma unroll 1
    for (; base + kRing + kDepth <= my_chunks; base += kRing) {
#pragma unroll
      for (int j = 0; j < kRing; ++j) {
        step(j, BoolTag<false>{});
        if (j == 0 && base == 0) MOEJIT_TRACE_CTA(4);
      }
    }
    // The counters the checked groups test, as they stand at chunk `base` (set here so that the steady
    // loop keeps none of them live).
    issued = base + kDepth;
    x_issued = base + (kPrefetchX ? 1 : 0);
    kx = part * 64 + kofs + x_issued * kXStride;
    checked_groups(base);
  } else {
    checked_groups(0);
  }
}

// Sums acc over the CTA's first kWarps warps in warp order into warp 0's registers (other warps' acc is
// left undefined; warps beyond kWarps, such as a producer warp, do not take part). red must hold
// kWarps * kNT * kMats * 4 * 32 floats. kGroups > 1: the first kGroups * kWarps warps are groups of kWarps
// (group g: warps g * kWarps ..), each summed the same way into its own first warp through its own area
// of red (kGroups times the size); every warp of every group calls it.
template <int kMats, int kWarps, int kNT, int kGroups = 1>
MOEJIT_DEVICE void reduce_over_warps(float (&acc)[kNT][kMats][4], float* red) {
  if (kWarps == 1) return;
  const int lane = lane_id(), cta_warp = threadIdx.x >> 5;
  const int group = kGroups == 1 ? 0 : cta_warp / kWarps, warp = cta_warp - group * kWarps;
  red += group * (kWarps * kNT * kMats * 4 * 32);
  if (warp != 0) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int m = 0; m < kMats; ++m)
#pragma unroll
        for (int i = 0; i < 4; ++i) red[(((warp * kNT + nt) * kMats + m) * 4 + i) * 32 + lane] = acc[nt][m][i];
  }
  sync_first_threads<kGroups * kWarps * 32>();
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
