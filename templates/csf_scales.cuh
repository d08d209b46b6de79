// Block scales rebuilt in registers from a prepared CSF plane (docs/CSF.md §8): the decode kernels read
// 4-bit (NVFP4) or 1-bit (MXFP4) offsets per scale instead of whole scale bytes, plus one base byte per
// row and slab and, only for the rows that have them, exception records.
//
// Prepared CSF plane of a matrix with S slabs, `chunks` 64-wide K chunks and `mats` matrices per chunk
// (written on the host by prepare, reference/csf_prepared.cpp):
//   offsets [E][S][chunks][mats][kBytesPerChunk]: NVFP4 32 bytes, row group g's lane word at 4g, whose
//           byte i holds in its low nibble the offset of plain scale byte i (block i/2, row g + 8(i%2))
//           and in its high nibble that of plain byte 4 + i; MXFP4 4 bytes, row group g's nibble g,
//           whose bit i is the offset of plain byte i (block i/2, row g + 8(i%2)). So the lane's plain
//           scale bytes (fp4_decode.cuh block_scales) come out of a mask and an add (NVFP4, per word)
//           or a multiply, a mask and an add (MXFP4).
//   base    [E][S][mats][8 groups][2 rows]: the row's base byte (one u16 load per lane and slab).
//   exc     u32 list starts, then the records. A list covers one slab of FC1 (both matrices) or two
//           adjacent slabs of a one-matrix plane (FC2: list e * ceil(S / 2) + slab / 2), so FC2-sum's
//           slab pairs and FC1's gate and up rows walk one list. Records
//           chunk << 16 | m << 14 | g << 11 | i << 8 | byte (m: the matrix, or the slab's parity; i: the
//           plain byte index above) are the scales whose byte is not base + offset, sorted by chunk, and
//           each list ends with the sentinel 0xFFFF0000. Most lists are just the sentinel. 32 sentinels
//           follow the last list. Fewer than 2^31 words in all (a cursor keeps an m bit in bit 31).
//   head    [lists][32] u32: each list's first 32 words (records, sentinel, then sentinels): the decode
//           kernels' first window, whose address needs no load of the list's start.
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
};

inline constexpr u32 kCsfSentinel = 0xFFFF0000u;

// One slab's CSF side arrays: base bytes of its first matrix (matrix m at + 16 m: FC1's up rows, or
// FC2-sum's second slab of a pair), the exception array (the kernel parameter, which the compiler can
// reload rather than keep), and the index of the list's first record with, in bit 31, the m bit of the
// slab's records (FC2 over one slab: the slab's parity; else 0).
struct CsfSlab {
  const u8* base;
  const u32* exc;
  u32 start;
  const u32* head;  // the list's head (CsfWindowReader); null where the kernel walks the list itself
};

// Per-warp reading state of one slab, three registers beside the ring (it lives through the chunk
// loop of kernels at their register caps): the base bytes, a cursor into the slab's list, and how many
// chunks remain until the chunk of the record it points at (uniform over the warp: every lane walks the
// same list and the same chunks). kStride: chunks between a warp's consecutive chunks (its K parts).
// kMaskedPatch: records are applied with masks instead of branches (CsfWarpReader).
template <bool kNvfp4, int kMats, int kStride, bool kMaskedPatch = false>
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

  // The lane's offsets word of a matrix at `at` (ring loads): NVFP4 its row group's word, MXFP4 the
  // chunk's word (all lanes read the same address).
  MOEJIT_DEVICE static u32 load(const u8* at) { return ld_stream_4(at); }

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
        if constexpr (kMaskedPatch) {
          // Masks rather than branches per matrix and word: in the batch and prefill consumers a branch on
          // the record's matrix or byte index became an indexed local-memory access to the scale words.
          const u32 in_x = i < 4 ? ~0u : 0u;
#pragma unroll
          for (int m = 0; m < kMats; ++m) {
            const u32 in_m = kMats == 1 || (key >> 3) == (u32)m ? ~0u : 0u;
            const u32 mx = in_m & in_x & ~keep, my = in_m & ~in_x & ~keep;
            s[m].x = (s[m].x & ~mx) | (byte & mx);
            s[m].y = (s[m].y & ~my) | (byte & my);
          }
        } else {
#pragma unroll
          for (int m = 0; m < kMats; ++m)
            if (kMats == 1 || (key >> 3) == (u32)m) {
              if (i < 4) s[m].x = (s[m].x & keep) | byte;
              else s[m].y = (s[m].y & keep) | byte;
            }
        }
      }
      ++cursor;
      r = __ldg(exc + (cursor & 0x7FFFFFFFu));
    }
    gap = (int)((r >> 16) - c);
  }
};

// The decode kernels' reader: as CsfReader, but the warp holds its list's next 32 words in a register,
// one per lane (the window), so a chunk with records shuffles them out of registers instead of walking
// the list with dependent loads, and the first window is the list's head, whose address is known
// without reading the list's start: a decode kernel's warps take a few chunks each, and a chain of
// loads before the first chunk or inside the loop is latency on their critical path. A list longer than
// the window loads the words past it while the warp consumes it (only such lists: 32 lanes of sentinel
// padding follow the last list, so a window never reads past the array).
template <bool kNvfp4, int kMats, int kStride>
struct CsfWindowReader {
  static_assert(kMats == 1 || kMats == 2, "one or two matrices");
  u32 bases;  // as CsfReader
  u32 win;    // lane l: the list's word at index at + l (records by chunk, then the sentinel, then garbage)
  u32 at;     // the window's first word (an index into exc), and CsfSlab::start's bit 31
  int gap;    // the window's first record's chunk minus the chunk of the warp's next step

  MOEJIT_DEVICE void begin(const CsfSlab& s, int g, int first_chunk, bool second = true) {
    const u32 pair0 = *reinterpret_cast<const u16*>(s.base + 2 * g);  // rows g, g + 8
    const u32 pair1 = kMats == 2 && second ? (u32)*reinterpret_cast<const u16*>(s.base + 16 + 2 * g) : pair0;
    bases = kMats == 2 ? pair0 | pair1 << 16 : pair0 * 0x00010001u;
    win = __ldg(s.head + lane_id());
    at = s.start;
    gap = (int)(__shfl_sync(0xffffffffu, win, 0) >> 16) - first_chunk;
  }

  MOEJIT_DEVICE static u32 load(const u8* at_) { return ld_stream_4(at_); }

  MOEJIT_DEVICE void scales(const u32 (&word)[kMats], u32x2 (&s)[kMats], const u32* exc) {
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      u32 pattern = bases;
      if (kMats == 2) asm("prmt.b32 %0, %1, 0, %2;" : "=r"(pattern) : "r"(bases), "r"(m == 0 ? 0x1010u : 0x3232u));
      if (kNvfp4) {
        s[m].x = (word[m] & 0x0F0F0F0Fu) + pattern;
        s[m].y = ((word[m] >> 4) & 0x0F0F0F0Fu) + pattern;
      } else {
        const u32 bits = (word[m] >> (lane_id() & 0x1Cu)) & 0xFu;
        s[m].x = ((bits * 0x00204081u) & 0x01010101u) + pattern;
        s[m].y = 0u;
      }
    }
    if (gap <= 0) patch(s, exc);
    gap -= kStride;
  }

  MOEJIT_DEVICE void patch(u32x2 (&s)[kMats], const u32* exc) {
    const int lane = lane_id();
    const u32 g = (u32)lane >> 2, who = kMats == 2 ? g : g | (at >> 31) << 3;
    const u32 c = (__shfl_sync(0xffffffffu, win, 0) >> 16) - (u32)gap;  // this step's chunk
    for (;;) {
      // The window's words up to the list's sentinel; of them, the records up to this chunk (a prefix:
      // records are sorted by chunk) are passed, and those of this chunk applied.
      const u32 sentinels = __ballot_sync(0xffffffffu, win == kCsfSentinel);
      const u32 live = sentinels ? (sentinels & (0u - sentinels)) - 1u : 0xffffffffu;
      const u32 rc = win >> 16;
      const u32 passed = __ballot_sync(0xffffffffu, rc <= c) & live;
      u32 here = __ballot_sync(0xffffffffu, rc == c) & live;
      while (here) {
        const u32 r = __shfl_sync(0xffffffffu, win, __ffs(here) - 1);
        here &= here - 1u;
        const u32 key = (r >> 11) & 0xFu;
        if (kMats == 2 ? (key & 7u) == g : key == who) {
          const u32 i = (r >> 8) & 7u, shift = 8u * (i & 3u), keep = ~(0xFFu << shift), byte = (r & 0xFFu) << shift;
#pragma unroll
          for (int m = 0; m < kMats; ++m)
            if (kMats == 1 || (key >> 3) == (u32)m) {
              if (i < 4) s[m].x = (s[m].x & keep) | byte;
              else s[m].y = (s[m].y & keep) | byte;
            }
        }
      }
      // Slide the window past the passed records; a list that goes on past it (no sentinel in it) fills
      // the freed lanes from the list.
      const int n = __popc(passed);
      const u32 slid = __shfl_down_sync(0xffffffffu, win, n & 31);
      at += n;
      win = slid;
      if (!sentinels && lane >= 32 - n) win = __ldg(exc + (at & 0x7FFFFFFFu) + lane);
      if (n < 32) break;
    }
    gap = (int)((__shfl_sync(0xffffffffu, win, 0) >> 16) - c);
  }
};

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
  CsfReader<kNvfp4, kReaderMats, kStride, true> reader[kReaders];

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
