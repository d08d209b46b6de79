// Block scales rebuilt from a prepared CSF plane (docs/CSF.md §8): the kernels read 4-bit (NVFP4) or
// 1-bit (MXFP4) offsets per scale instead of whole scale bytes, plus one base byte per row and slab and,
// only for the rows that have them, exception records. Every kernel reads the plain bytes from shared
// memory, rebuilt off its MMA chain: the decode kernels a slab's once, when a warp starts the slab
// (CsfStage); the batch kernels each chunk's into its stage, a step ahead of the chunk (CsfChunkStage); the
// prefill kernels' producer warpgroup each stage's (moe_prefill.cuh prefill_rebuild_scales).
//
// Prepared CSF plane of a matrix with S slabs, `chunks` 64-wide K chunks and `mats` matrices per chunk
// (written on the host by prepare, reference/csf_prepared.cpp):
//   offsets [E][S][chunks][mats][kBytesPerChunk]: NVFP4 32 bytes, row group g's lane word at 4g, whose
//           byte i holds in its low nibble the offset of plain scale byte i (block i/2, row g + 8(i%2))
//           and in its high nibble that of plain byte 4 + i; MXFP4 4 bytes, row group g's nibble g,
//           whose bit i is the offset of plain byte i (block i/2, row g + 8(i%2)). So the lane's plain
//           scale bytes (fp4_decode.cuh block_scales) come out of a mask and an add (NVFP4, per word)
//           or a multiply, a mask and an add (MXFP4).
//   base    [E][S][mats][8 groups][2 rows]: the row's base byte.
//   exc     u32 list starts, then the records. A list covers one slab of FC1 (both matrices) or two
//           adjacent slabs of a one-matrix plane (FC2: list e * ceil(S / 2) + slab / 2), so FC2-sum's
//           slab pairs and FC1's gate and up rows walk one list. Records
//           chunk << 16 | m << 14 | g << 11 | i << 8 | byte (m: the matrix, or the slab's parity; i: the
//           plain byte index above) are the scales whose byte is not base + offset, sorted by chunk, and
//           each list ends with the sentinel 0xFFFF0000. Most lists are just the sentinel. 32 sentinels
//           follow the last list. Fewer than 2^31 words in all (a list start keeps an m bit in bit 31).
//   head    [lists][32, 64 or 128] u32: each list's first words (records, sentinel, then sentinels),
//           whose address needs no load of the list's start (the decode kernels' records, the batch and
//           prefill kernels' first records of a list). The fewest
//           words that hold the plane's longest list, at most 128 (the kernel parameter s_head_words).
// The reconstruction is exact: every scale byte the plain plane holds (padding blocks included, which
// hold 0) comes back bit for bit, so the MMA results and everything after them are unchanged.
#pragma once
#include "device_core.cuh"

// Which planes the kernel reads as CSF (the key's csf_scales, passed by the generator).
#ifndef MOEJIT_CSF_FC1
#define MOEJIT_CSF_FC1 0
#endif
#ifndef MOEJIT_CSF_FC2
#define MOEJIT_CSF_FC2 0
#endif
inline constexpr bool kCsfFc1 = MOEJIT_CSF_FC1 != 0;
inline constexpr bool kCsfFc2 = MOEJIT_CSF_FC2 != 0;

template <bool kNvfp4>
struct CsfGeometry {
  static constexpr int kBytesPerChunk = kNvfp4 ? 32 : 4;  // offsets per (chunk, matrix)
  static constexpr int kLaneStride = kNvfp4 ? 4 : 0;      // bytes between row groups' words (MXFP4: one word)
  // The plain bytes they stand for (slab_mma.cuh ScaleGeometry): per (chunk, matrix), and per row group.
  static constexpr int kPlainBytesPerChunk = kNvfp4 ? 64 : 32;
  static constexpr int kPlainBytesPerLane = kPlainBytesPerChunk / 8;
};

inline constexpr u32 kCsfSentinel = 0xFFFF0000u;
// The longest head a plane has (include/moejit/csf_prepared.hpp kPreparedCsfHeadMost).
inline constexpr int kCsfHeadMostWords = 128;

// One slab's CSF side arrays as a decode warp's CsfStage reads them: base bytes of its first matrix
// (matrix m at + 16 m: FC1's up rows, or FC2-sum's second slab of a pair), its list's head (head_words
// long: 32, 64 or 128), and, for a list longer than its head (only in planes with a list longer than 128
// words), the exception array and the list's index (its start is loaded only then). parity: which slab of
// its list's pair a single slab of a one-matrix plane is (its records' m bit).
struct CsfStageSlab {
  const u8* base;
  const u32* head;
  const u32* exc;
  u32 list;
  u32 parity;
  int head_words;
};

// The decode kernels' CSF reads: when a warp starts a slab, its lanes rebuild the plain prepared scale
// bytes of the warp's chunks (part, part + kParts, ...) into the warp's own shared-memory area, once, and
// every chunk then reads its lane's bytes from there as the plain kernels read them from global memory.
// No per-chunk reconstruction and no record walk in the chunk loop, which at decode sizes is a chain of
// dependent instructions per chunk at the kernels' register caps; a warp-private area needs no CTA barrier
// (FC2-sum's warps take units of different experts). Area: [local chunk i][kMats][8 groups][lane bytes], the
// plain plane's order (chunk part + i * kParts).
//
// kMats 2: FC1's gate and up, or (kSlabPair) two adjacent slabs of a one-matrix plane, whose offsets
// follow each other per slab (kChunks chunks apart); both walk one list, whose m bit names the matrix.
// kMats 1: one slab of a one-matrix plane (FC2, relu2's FC1), whose list it shares with the other slab of
// its pair: only records with its parity are its own.
template <bool kNvfp4, int kMats, int kChunks, int kParts, bool kSlabPair = false>
struct CsfStage {
  using CG = CsfGeometry<kNvfp4>;
  static_assert(kMats == 1 || kMats == 2, "one or two matrices");
  static_assert(!kSlabPair || kMats == 2, "a slab pair is two matrices");
  static constexpr int kPartChunks = (kChunks + kParts - 1) / kParts;  // the most chunks a part takes
  static constexpr int kChunkBytes = kMats * CG::kPlainBytesPerChunk;  // one local chunk, every matrix
  static constexpr int kWarpBytes = kPartChunks * kChunkBytes;         // one warp's area
  // The rebuild gives each lane 4 row groups of one matrix of a chunk: 16 (kMats 1) or 8 chunks per pass.
  static constexpr int kChunksPerPass = 16 / kMats;
  static constexpr int kPasses = (kPartChunks + kChunksPerPass - 1) / kChunksPerPass;
  static constexpr int kPlaneMats = kSlabPair ? 1 : kMats;  // matrices interleaved per chunk in the plane

  // Rebuilds the warp's area (every lane of the warp calls it): offsets is the slab's first offsets byte
  // (chunk 0, matrix 0), my_chunks the part's chunks (part_chunks in slab_mma.cuh).
  MOEJIT_DEVICE static void rebuild(u8* area, const u8* offsets, const CsfStageSlab& s, int part, int my_chunks) {
    const int lane = lane_id();
    const int h = lane & 1;                               // row groups 4h .. 4h + 3
    const int m = kMats == 2 ? (lane >> 1) & 1 : 0;       // matrix (or slab of the pair)
    const int i0 = lane >> (kMats == 2 ? 2 : 1);          // local chunk of the first pass
    // Offsets of the lane's row groups in each pass's chunk: NVFP4 their four words, MXFP4 the chunk's word
    // (nibbles 4h .. 4h + 3). All loads leave before any is used.
    const u8* at = offsets + (size_t)part * kPlaneMats * CG::kBytesPerChunk +
                   (kSlabPair ? (size_t)m * kChunks * CG::kBytesPerChunk : (size_t)m * CG::kBytesPerChunk) +
                   (kNvfp4 ? 16 * h : 0);
    constexpr int kPassStride = kChunksPerPass * kParts * kPlaneMats * CG::kBytesPerChunk;
    u32x4 w[kPasses];
#pragma unroll
    for (int k = 0; k < kPasses; ++k) {
      const int i = i0 + k * kChunksPerPass;
      const u8* p = at + (size_t)i0 * kParts * kPlaneMats * CG::kBytesPerChunk + k * kPassStride;
      w[k] = i >= my_chunks ? u32x4{0u, 0u, 0u, 0u}
             : kNvfp4       ? ld_stream_16(p)
                            : u32x4{ld_stream_4(p), 0u, 0u, 0u};
    }
    const u32x2 pairs = ld_stream_8(s.base + 16 * m + 8 * h);  // rows (g, g + 8) of groups 4h .. 4h + 3
    // The list's head: words lane, 32 + lane, ... of its head_words.
    u32 head[kCsfHeadMostWords / 32];
#pragma unroll
    for (int k = 0; k < kCsfHeadMostWords / 32; ++k)
      head[k] = k == 0 || 32 * k < s.head_words ? __ldg(s.head + 32 * k + lane) : 0u;
    __syncwarp();  // the area's reads of the warp's previous slab are done
#pragma unroll
    for (int k = 0; k < kPasses; ++k) {
      const int i = i0 + k * kChunksPerPass;
      if (i >= my_chunks) break;
      u32 x[4], y[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        // The row pair's bytes repeated: (b_g | b_{g+8} << 8) * 0x00010001.
        u32 pattern;
        asm("prmt.b32 %0, %1, 0, %2;"
            : "=r"(pattern)
            : "r"(q < 2 ? pairs.x : pairs.y), "r"(q % 2 == 0 ? 0x1010u : 0x3232u));
        if (kNvfp4) {
          const u32 word = q == 0 ? w[k].x : q == 1 ? w[k].y : q == 2 ? w[k].z : w[k].w;
          x[q] = (word & 0x0F0F0F0Fu) + pattern;  // no carries: base + offset <= 255 for every byte kept
          y[q] = ((word >> 4) & 0x0F0F0F0Fu) + pattern;
        } else {
          const u32 bits = (w[k].x >> (16 * h + 4 * q)) & 0xFu;  // nibble g = 4h + q
          x[q] = ((bits * 0x00204081u) & 0x01010101u) + pattern;  // bit i -> bit 8i
          y[q] = 0u;
        }
      }
      u8* out = area + i * kChunkBytes + m * CG::kPlainBytesPerChunk + h * 4 * CG::kPlainBytesPerLane;
      if (kNvfp4) {
        reinterpret_cast<u32x4*>(out)[0] = u32x4{x[0], y[0], x[1], y[1]};
        reinterpret_cast<u32x4*>(out)[1] = u32x4{x[2], y[2], x[3], y[3]};
      } else {
        *reinterpret_cast<u32x4*>(out) = u32x4{x[0], x[1], x[2], x[3]};
      }
    }
    __syncwarp();  // the words before the records that replace their bytes
    // The records, 32 words of the list at a time, one per lane: those of the warp's chunks (and, with one
    // matrix, of its slab) replace their byte. A list longer than its head (loaded with the offsets) goes on
    // in exc, from its start, loaded only then (exc ends with 32 sentinels, so no 32 words of a list read
    // past it); words past a list's sentinel belong to the next list.
    u32 word = head[0], start = 0;
    for (int from = 0;; from += 32) {
      const u32 sentinels = __ballot_sync(0xffffffffu, word == kCsfSentinel);
      const bool live = sentinels == 0 || lane < __ffs(sentinels) - 1;
      const u32 c = word >> 16, mbit = (word >> 14) & 1u;
      if (live && c % kParts == (u32)part && (kMats == 2 || mbit == s.parity))
        area[((c / kParts) * kMats + (kMats == 2 ? mbit : 0u)) * CG::kPlainBytesPerChunk +
             ((word >> 11) & 7u) * CG::kPlainBytesPerLane + ((word >> 8) & 7u)] = (u8)word;
      if (sentinels) break;
      const int next = from + 32;
      if (next < s.head_words) {  // the head's next 32 words
        word = next == 32 ? head[1] : next == 64 ? head[2] : head[3];
        continue;
      }
      if (next == s.head_words) start = __ldg(s.exc + s.list);
      word = __ldg(s.exc + start + next + lane);
    }
    __syncwarp();  // the area before the chunk loop reads it
  }

  // The lane's plain scale bytes (fp4_decode.cuh block_scales) of matrix m of a local chunk, from the
  // lane's row group's bytes of that chunk (area + i * kChunkBytes + g * kPlainBytesPerLane).
  MOEJIT_DEVICE static u32x2 read(const u8* lane_chunk, int m) {
    const u8* p = lane_chunk + m * CG::kPlainBytesPerChunk;
    return kNvfp4 ? *reinterpret_cast<const u32x2*>(p) : u32x2{*reinterpret_cast<const u32*>(p), 0u};
  }
};

// Where a decode kernel's CSF stages live: static shared memory, `kBytes` (one array per size; the fused
// kernel's two phases, which never overlap, share it where their sizes agree), or, where the generator
// finds them too large for static shared memory beside the kernel's other arrays
// (MOEJIT_CSF_STAGE_DYNAMIC), the launch's dynamic shared memory from byte kDynamicOffset (after a
// streaming kernel's ring).
#ifndef MOEJIT_CSF_STAGE_DYNAMIC
#define MOEJIT_CSF_STAGE_DYNAMIC 0
#endif
template <int kBytes, int kDynamicOffset = 0>
MOEJIT_DEVICE u8* csf_stage_area() {
#if MOEJIT_CSF_STAGE_DYNAMIC
  extern __shared__ __align__(16) u8 csf_stage_dynamic[];
  return csf_stage_dynamic + kDynamicOffset;
#else
  __shared__ __align__(16) u8 area[kBytes];
  return area;
#endif
}

// The side arrays of a plane read as CSF (base bytes, exception lists and their heads): the batch and
// prefill kernels' parameter structs hold them as s_base, s_exc, s_head and s_head_words only where the key
// reads the plane as CSF (the plain kernels' parameters, and so their code, stay as they were); these macros
// read them where they exist.
struct CsfPlaneArrays {
  const u8* base;
  const u32* exc;
  const u32* head;  // the lists' heads (their first 32 words are read), head_words apart
  int head_words;
};
#if MOEJIT_CSF_FC1
#define MOEJIT_FC1_CSF_ARRAYS(p) CsfPlaneArrays{(p).s_base, (p).s_exc, (p).s_head, (p).s_head_words}
#else
#define MOEJIT_FC1_CSF_ARRAYS(p) CsfPlaneArrays{nullptr, nullptr, nullptr, 0}
#endif
#if MOEJIT_CSF_FC2
#define MOEJIT_FC2_CSF_ARRAYS(p) CsfPlaneArrays{(p).s_base, (p).s_exc, (p).s_head, (p).s_head_words}
#else
#define MOEJIT_FC2_CSF_ARRAYS(p) CsfPlaneArrays{nullptr, nullptr, nullptr, 0}
#endif

// The batch kernels' CSF reads (moe_batch.cuh, moe_batch_wgmma.cuh): a warp that holds kSlabs adjacent 16-row
// slabs of a plane of kMats matrices (operand a = slab a / kMats, matrix a % kMats) rebuilds the plain scale
// bytes of each of its chunks into the chunk's stage, at the places where the plain kernels' cp.async puts
// them ([operand][8 row groups][8 or 4 bytes], the warp's own area), so the consumer step is the plain
// kernels' own. The per-chunk rebuild in registers it replaces (a reconstruction per operand and a walk of
// the chunk's records with a dependent load per record, on every lane) lay on each warp's MMA chain: +23-29 %
// instructions and time at gpt-oss-120b M = 256 (docs/perf-log.md v42). Here the rebuild is split in two
// halves a step apart, off that chain:
//   load (with the chunk's copies): lane q's offsets word(s) of the chunk, into registers the caller keeps;
//   store (a step later, before the barrier after which the chunk's stage is read): plain word q of the
//     chunk's area (a mask, or a multiply and a mask, and an add of the row pair's base pattern, as
//     CsfStage::rebuild), then the records: lane i of the warp holds word i of its list from the cursor on
//     (the window, loaded a step ahead), one ballot finds the chunk's records (a prefix of the window, the
//     list being sorted by chunk: most chunks have none), and their lanes store their bytes after a
//     __syncwarp. The cursor passes them and the window is reloaded from there, to be used a step later;
//     only a chunk with 32 records or more waits for a reload.
// A list's first window comes from its head (no load of its start on the path); later ones from exc. One
// list per FC1 slab (both matrices); a one-matrix plane's two slabs per warp (the first even) walk their
// pair's list, the m bit naming the operand; a single slab of a one-matrix plane walks its pair's list and
// stores only its parity's records. Slabs not in `valid` (past the plane) are neither loaded nor stored:
// their rows are dropped, as the plain kernels leave their scale bytes uncopied.
// Per lane: a base pattern and a pending offsets word per plain word it builds (kPerLane: NVFP4 one per
// operand pair, MXFP4 one for up to four operands), and the window, cursor and start of each list.
template <bool kNvfp4, int kMats, int kSlabs, int kChunks>
struct CsfChunkStage {
  using CG = CsfGeometry<kNvfp4>;
  static_assert(kMats == 1 || kMats == 2, "one or two matrices");
  static_assert(kSlabs == 1 || kSlabs == 2, "one or two slabs per warp");
  static constexpr int kA = kMats * kSlabs;
  static constexpr int kWordsPerA = CG::kPlainBytesPerChunk / 4;  // plain words per operand and chunk
  static constexpr int kWords = kA * kWordsPerA;
  static constexpr int kPerLane = (kWords + 31) / 32;
  static constexpr int kLists = kMats == 2 ? kSlabs : 1;
  static constexpr bool kParity = kMats == 1 && kSlabs == 1;  // the list's other slab's records pass by

  u32 pattern[kPerLane];  // the row pair's base bytes repeated, of each plain word the lane builds
  u32 window[kLists];     // word `cursor + lane` of the list
  u32 cursor[kLists];     // the list's first record not yet passed (from its start)
  u32 start[kLists];      // the list's start in exc; bit 31: the slab's parity (kParity)

  // Plain word q = lane + 32 k of a chunk: operand q / kWordsPerA, word w = q % kWordsPerA of it (NVFP4 row
  // group w / 2, half w % 2; MXFP4 row group w), at byte 4 q of the area.
  MOEJIT_DEVICE static bool live(int k, u32 valid) {
    const int q = (int)lane_id() + 32 * k;
    return (kWords % 32 == 0 || q < kWords) && (kSlabs == 1 || ((valid >> (q / kWordsPerA / kMats)) & 1u));
  }

  // e: the expert; slab0: the warp's first slab; slabs: the plane's slabs per matrix; valid: bit j when slab
  // slab0 + j exists. Issues the loads (base bytes, list starts, first windows); nothing waits for them here.
  MOEJIT_DEVICE void begin(const CsfPlaneArrays& a, int e, int slab0, int slabs, u32 valid) {
    const int lane = lane_id();
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int q = lane + 32 * k, op = q / kWordsPerA, w = q % kWordsPerA, g = kNvfp4 ? w >> 1 : w;
      const size_t row = ((size_t)e * slabs + slab0 + op / kMats) * kMats + op % kMats;
      pattern[k] = live(k, valid) ? (u32)__ldg(reinterpret_cast<const unsigned short*>(a.base + row * 16) + g) * 0x00010001u
                                  : 0u;
    }
#pragma unroll
    for (int j = 0; j < kLists; ++j) {
      const int slab = slab0 + j;
      const size_t list = kMats == 2 ? (size_t)e * slabs + slab : (size_t)e * ((slabs + 1) / 2) + slab / 2;
      const bool on = (valid >> j) & 1u;
      start[j] = on ? __ldg(a.exc + list) | (kParity ? (u32)(slab & 1) << 31 : 0u) : 0u;
      window[j] = on ? __ldg(a.head + list * a.head_words + lane) : kCsfSentinel;
      cursor[j] = 0u;
    }
  }

  // The lane's offsets words of `chunk` (s: the warp's first slab's offsets, chunk 0, matrix 0).
  MOEJIT_DEVICE static void load(const u8* s, int chunk, u32 valid, u32 (&word)[kPerLane]) {
    const int lane = lane_id();
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int q = lane + 32 * k, op = q / kWordsPerA, w = q % kWordsPerA;
      const u8* p = s + ((size_t)((op / kMats) * kChunks + chunk) * kMats + op % kMats) * CG::kBytesPerChunk +
                    (kNvfp4 ? 4 * (w >> 1) : 0);
      word[k] = live(k, valid) ? ld_stream_4(p) : 0u;
    }
  }

  // Stores the plain bytes of `chunk` into its area (the warp's scale bytes in the chunk's stage) from the
  // words load() gave, then the chunk's records; reloads the windows that moved.
  MOEJIT_DEVICE void store(u8* area, int chunk, u32 valid, const u32 (&word)[kPerLane], const u32* exc) {
    const int lane = lane_id();
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int q = lane + 32 * k, w = q % kWordsPerA;
      const u32 v = kNvfp4 ? ((word[k] >> (4 * (w & 1))) & 0x0F0F0F0Fu) + pattern[k]  // no carries: base + offset <= 255
                           : ((((word[k] >> (4 * w)) & 0xFu) * 0x00204081u) & 0x01010101u) + pattern[k];  // bit i -> 8i
      if (live(k, valid)) reinterpret_cast<u32*>(area)[q] = v;
    }
#pragma unroll
    for (int j = 0; j < kLists; ++j) {
      if (!((valid >> j) & 1u)) continue;
      for (;;) {
        const u32 r = window[j];
        const u32 here = __ballot_sync(0xffffffffu, (r >> 16) == (u32)chunk);
        if (here == 0u) break;  // the common case: no record in this chunk
        const int n = here == 0xffffffffu ? 32 : __ffs(~here) - 1;  // the chunk's records: lanes 0 .. n - 1
        __syncwarp();  // the words before the records' bytes replace theirs
        const u32 m = (r >> 14) & 1u;
        if (lane < n && (!kParity || m == start[j] >> 31)) {
          const u32 op = kMats == 2 ? 2u * j + m : kSlabs == 2 ? m : 0u;
          area[op * CG::kPlainBytesPerChunk + ((r >> 11) & 7u) * CG::kPlainBytesPerLane + ((r >> 8) & 7u)] = (u8)r;
        }
        cursor[j] += (u32)n;
        // exc ends with 32 sentinels: no window reads past it.
        window[j] = __ldg(exc + (start[j] & 0x7FFFFFFFu) + cursor[j] + lane);
        if (n < 32) break;
      }
    }
  }
};

// Stands in for a CsfChunkStage in kernels that read plain scales (no state, no code).
struct CsfNoStage {
  static constexpr int kPerLane = 1;
};
template <bool kCsf, bool kNvfp4, int kMats, int kSlabs, int kChunks>
struct CsfChunkStageOf {
  using Type = CsfNoStage;
};
template <bool kNvfp4, int kMats, int kSlabs, int kChunks>
struct CsfChunkStageOf<true, kNvfp4, kMats, kSlabs, kChunks> {
  using Type = CsfChunkStage<kNvfp4, kMats, kSlabs, kChunks>;
};
