// Block scales rebuilt from a prepared CSF plane (docs/CSF.md §8): the kernels read 4-bit (NVFP4) or
// 1-bit (MXFP4) offsets per scale instead of whole scale bytes, plus one base byte per row and slab and,
// only for the rows that have them, exception records. The decode kernels rebuild a slab's plain bytes
// into shared memory once, when a warp starts the slab (CsfStage); the batch and prefill kernels rebuild
// each chunk's in registers (CsfWarpReader).
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
//           follow the last list. Fewer than 2^31 words in all (a cursor keeps an m bit in bit 31).
//   head    [lists][32, 64 or 128] u32: each list's first words (records, sentinel, then sentinels),
//           whose address needs no load of the list's start: the decode kernels' records. The fewest
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

// One slab's CSF side arrays as CsfReader walks them: base bytes of its first matrix (matrix m at + 16 m:
// FC1's up rows, or the second slab of a pair), the exception array (the kernel parameter, which the
// compiler can reload rather than keep), and the index of the list's first record with, in bit 31, the m
// bit of the slab's records (one slab of a one-matrix plane: the slab's parity; else 0).
struct CsfSlab {
  const u8* base;
  const u32* exc;
  u32 start;
};

// Per-warp reading state of one slab, three registers beside the ring (it lives through the chunk
// loop of kernels at their register caps): the base bytes, a cursor into the slab's list, and how many
// chunks remain until the chunk of the record it points at (uniform over the warp: every lane walks the
// same list and the same chunks). kStride: chunks between a warp's consecutive chunks (its K parts).
// CsfWarpReader's building block.
template <bool kNvfp4, int kMats, int kStride>
struct CsfReader {
  static_assert(kMats == 1 || kMats == 2, "one or two matrices");
  u32 bases;   // kMats 1: the base pattern; 2: rows (g, g + 8) of matrix 0 | of matrix 1 << 16
  u32 cursor;  // the next record not yet passed (an index into exc), and CsfSlab::start's bit 31
  int gap;     // its chunk minus the chunk of the warp's next step

  // second (kMats 2): the second matrix exists; a one-matrix plane's slab pair whose second slab lies past
  // the plane (an odd slab count) has no base bytes there, and its rows are dropped by the caller.
  MOEJIT_DEVICE void begin(const CsfSlab& s, int g, int first_chunk, bool second = true) {
    const u32 pair0 = *reinterpret_cast<const u16*>(s.base + 2 * g);  // rows g, g + 8
    const u32 pair1 = kMats == 2 && second ? (u32)*reinterpret_cast<const u16*>(s.base + 16 + 2 * g) : pair0;
    bases = kMats == 2 ? pair0 | pair1 << 16 : pair0 * 0x00010001u;
    cursor = s.start;
    gap = (int)(__ldg(s.exc + (cursor & 0x7FFFFFFFu)) >> 16) - first_chunk;
  }

  // The lane's plain scale bytes (the u32x2 of fp4_decode.cuh block_scales) of each matrix for the
  // warp's next chunk, from its offsets words; then steps to the warp's following chunk.
  MOEJIT_DEVICE void scales(const u32 (&word)[kMats], u32x2 (&s)[kMats], const u32* exc) {
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      u32 pattern = bases;
      if (kMats == 2) asm("prmt.b32 %0, %1, 0, %2;" : "=r"(pattern) : "r"(bases), "r"(m == 0 ? 0x1010u : 0x3232u));
      if (kNvfp4) {
        s[m].x = (word[m] & 0x0F0F0F0Fu) + pattern;  // no carries: base + offset <= 255 for every byte kept
        s[m].y = ((word[m] >> 4) & 0x0F0F0F0Fu) + pattern;
      } else {
        const u32 bits = (word[m] >> (lane_id() & 0x1Cu)) & 0xFu;  // nibble g = lane / 4
        s[m].x = ((bits * 0x00204081u) & 0x01010101u) + pattern;  // bit i -> bit 8i
        s[m].y = 0u;
      }
    }
    // Only a list with a record at or before this chunk enters (a warp-uniform branch); records of
    // earlier chunks belong to other warps' K parts and are passed over.
    if (gap <= 0) patch(s, exc);
    gap -= kStride;
  }

  MOEJIT_DEVICE void patch(u32x2 (&s)[kMats], const u32* exc) {
    // The records this lane applies: its row group g = lane / 4 and, with one matrix, its slab's m bit.
    const u32 g = lane_id() >> 2, who = kMats == 2 ? g : g | (cursor >> 31) << 3;
    u32 r = __ldg(exc + (cursor & 0x7FFFFFFFu));
    const u32 c = (r >> 16) - (u32)gap;
    while ((r >> 16) <= c) {
      const u32 key = (r >> 11) & 0xFu;
      if ((r >> 16) == c && (kMats == 2 ? (key & 7u) == who : key == who)) {
        const u32 i = (r >> 8) & 7u, shift = 8u * (i & 3u), keep = ~(0xFFu << shift), byte = (r & 0xFFu) << shift;
        // Masks rather than branches per matrix and word: in the batch and prefill consumers a branch on the
        // record's matrix or byte index became an indexed local-memory access to the scale words.
        const u32 in_x = i < 4 ? ~0u : 0u;
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
          const u32 in_m = kMats == 1 || (key >> 3) == (u32)m ? ~0u : 0u;
          const u32 mx = in_m & in_x & ~keep, my = in_m & ~in_x & ~keep;
          s[m].x = (s[m].x & ~mx) | (byte & mx);
          s[m].y = (s[m].y & ~my) | (byte & my);
        }
      }
      ++cursor;
      r = __ldg(exc + (cursor & 0x7FFFFFFFu));
    }
    gap = (int)((r >> 16) - c);
  }
};

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

// The side arrays of a plane read as CSF (base bytes, exception lists): the batch and prefill kernels'
// parameter structs hold them as s_base and s_exc only where the key reads the plane as CSF (the plain
// kernels' parameters, and so their code, stay as they were); these macros read them where they exist.
struct CsfPlaneArrays {
  const u8* base;
  const u32* exc;
};
#if MOEJIT_CSF_FC1
#define MOEJIT_FC1_CSF_ARRAYS(p) CsfPlaneArrays{(p).s_base, (p).s_exc}
#else
#define MOEJIT_FC1_CSF_ARRAYS(p) CsfPlaneArrays{nullptr, nullptr}
#endif
#if MOEJIT_CSF_FC2
#define MOEJIT_FC2_CSF_ARRAYS(p) CsfPlaneArrays{(p).s_base, (p).s_exc}
#else
#define MOEJIT_FC2_CSF_ARRAYS(p) CsfPlaneArrays{nullptr, nullptr}
#endif

// The CSF reading state of a warp that holds kPerWarp adjacent 16-row slabs of a plane of kMats matrices
// (the batch and prefill families, whose stages order a warp's A operands slab-major: operand a = slab j x
// kMats + matrix m). FC1's slabs each walk their own list (both matrices); a one-matrix plane's two slabs
// (kPerWarp 2, the first slab even) walk their pair's list as the two matrices of one reader, a single
// slab its pair's list with its parity bit. Slabs at or past the plane's `slabs` (a last, partial row
// group) read one that exists: the caller drops their rows.
template <bool kNvfp4, int kMats, int kPerWarp, int kStride>
struct CsfWarpReader {
  static_assert(kPerWarp == 1 || kPerWarp == 2, "one or two slabs per warp");
  static constexpr int kA = kMats * kPerWarp;
  static constexpr int kReaders = kMats == 2 ? kPerWarp : 1;
  static constexpr int kReaderMats = kA / kReaders;
  static constexpr bool kReads = true;
  CsfReader<kNvfp4, kReaderMats, kStride> reader[kReaders];

  // e: the expert; slab0: the warp's first slab; slabs: the plane's slabs per matrix; g: the lane's row group.
  MOEJIT_DEVICE void begin(const CsfPlaneArrays& a, int e, int slab0, int slabs, int g, int first_chunk) {
#pragma unroll
    for (int j = 0; j < kReaders; ++j) {
      int slab = slab0 + j;
      if (slab >= slabs) slab = slab0 < slabs ? slab0 : 0;
      const size_t index = (size_t)e * slabs + slab;
      const size_t list = kMats == 2 ? index : (size_t)e * ((slabs + 1) / 2) + slab / 2;
      const u32 parity = kReaderMats == 1 ? (u32)(slab & 1) << 31 : 0u;
      reader[j].begin(CsfSlab{a.base + index * kMats * 16, a.exc, __ldg(a.exc + list) | parity}, g, first_chunk,
                      kMats == 2 || slab + 1 < slabs);
    }
  }

  // Where the lane's offsets word of operand a lies in a stage's offsets (operand a's bytes at a x
  // kBytesPerChunk, the lane's row group's word in them).
  MOEJIT_DEVICE static int lane_offset(int g) { return g * CsfGeometry<kNvfp4>::kLaneStride; }

  // The lane's plain scale bytes of every operand for the warp's next chunk, from its offsets words.
  MOEJIT_DEVICE void scales(const u32 (&word)[kA], u32x2 (&s)[kA], const u32* exc) {
#pragma unroll
    for (int j = 0; j < kReaders; ++j) {
      u32 w[kReaderMats];
      u32x2 r[kReaderMats];
#pragma unroll
      for (int m = 0; m < kReaderMats; ++m) w[m] = word[j * kReaderMats + m];
      reader[j].scales(w, r, exc);
#pragma unroll
      for (int m = 0; m < kReaderMats; ++m) s[j * kReaderMats + m] = r[m];
    }
  }
};

// Stands in for a CsfWarpReader in kernels that read plain scales (no state, no code).
struct CsfNoReader {
  static constexpr bool kReads = false;
};
template <bool kCsf, bool kNvfp4, int kMats, int kPerWarp, int kStride>
struct CsfWarpReaderOf {
  using Type = CsfNoReader;
};
template <bool kNvfp4, int kMats, int kPerWarp, int kStride>
struct CsfWarpReaderOf<true, kNvfp4, kMats, kPerWarp, kStride> {
  using Type = CsfWarpReader<kNvfp4, kMats, kPerWarp, kStride>;
};
