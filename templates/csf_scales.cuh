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
//   exc     u32 list starts [E*S*mats + 1], then the records: list (e*S + slab)*mats + m holds the
//           scales of that (slab, matrix) whose byte is not base + offset, as u32 records
//           chunk << 16 | g << 11 | i << 8 | byte (i: the plain byte index above), sorted by chunk,
//           ending with the sentinel 0xFFFF0000. Most lists are just the sentinel.
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

// One slab's CSF side arrays: base bytes of its first matrix (matrix m at + 16 m), the exception array
// and the list index of its first matrix (matrix m's list at + m). For FC2-sum's slab pairs the second
// "matrix" is the next slab of the same one-matrix plane, which sits at the same + 16 and + 1.
struct CsfSlab {
  const u8* base;
  const u32* exc;
  u32 list;
};

// Per-warp reading state of one slab: each matrix's base bytes repeated over the lane's plain word, and
// a cursor into its exception list with the chunk of the record it points at (uniform over the warp:
// every lane walks the same list and the same chunks).
template <bool kNvfp4, int kMats>
struct CsfReader {
  u32 base_pattern[kMats];
  u32 cursor[kMats];
  u32 next_chunk[kMats];
  u32 nibble_shift;  // MXFP4: 4 g

  MOEJIT_DEVICE void begin(const CsfSlab& s, int g) {
    nibble_shift = 4u * (u32)g;
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      const u32 pair = *reinterpret_cast<const u16*>(s.base + 16 * m + 2 * g);  // rows g, g + 8
      base_pattern[m] = pair * 0x00010001u;
      cursor[m] = __ldg(s.exc + s.list + m);
    }
#pragma unroll
    for (int m = 0; m < kMats; ++m) next_chunk[m] = __ldg(s.exc + cursor[m]) >> 16;
  }

  // The lane's offsets word of matrix m at `at` (ring loads): NVFP4 its row group's word, MXFP4 the
  // chunk's word (all lanes read the same address).
  MOEJIT_DEVICE static u32 load(const u8* at) { return ld_stream_4(at); }

  // The lane's plain scale bytes (the u32x2 of fp4_decode.cuh block_scales) of matrix m, chunk c.
  MOEJIT_DEVICE u32x2 scales(u32 word, int m, int c, int g, const u32* exc) {
    u32x2 s;
    if (kNvfp4) {
      s.x = (word & 0x0F0F0F0Fu) + base_pattern[m];  // no carries: base + offset <= 255 for every byte kept
      s.y = ((word >> 4) & 0x0F0F0F0Fu) + base_pattern[m];
    } else {
      const u32 bits = (word >> nibble_shift) & 0xFu;
      s.x = ((bits * 0x00204081u) & 0x01010101u) + base_pattern[m];  // bit i -> bit 8i
      s.y = 0u;
    }
    // Records of this (slab, matrix): only a list with a record at or before chunk c enters (a warp-
    // uniform branch); records of earlier chunks belong to other warps' K parts and are passed over.
    if (next_chunk[m] <= (u32)c) {
      u32 r;
      while (((r = __ldg(exc + cursor[m])) >> 16) <= (u32)c) {
        if ((r >> 16) == (u32)c && ((r >> 11) & 7u) == (u32)g) {
          const u32 i = (r >> 8) & 7u, shift = 8u * (i & 3u), keep = ~(0xFFu << shift), byte = (r & 0xFFu) << shift;
          if (i < 4) s.x = (s.x & keep) | byte;
          else s.y = (s.y & keep) | byte;
        }
        ++cursor[m];
      }
      next_chunk[m] = r >> 16;
    }
    return s;
  }
};
