#pragma once
// Prepared CSF scale planes (docs/CSF.md §8): a scale plane in the order the decode kernels read it
// (docs/WEIGHT_LAYOUT.md "Scales"), stored as offsets from a base byte per prepared row, with the bytes
// outside a row's window as exception records. templates/csf_scales.cuh rebuilds the plain prepared
// bytes from it (the decode kernels into shared memory once per slab, the batch and prefill kernels in
// registers per chunk); this header is the host side: the builder prepare uploads, and C++ mirrors of the
// plain repack and of the kernels' reconstruction, for tests.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "moejit/types.hpp"

namespace moejit {

// One prepared plane as the kernels see it.
struct PreparedScaleGeometry {
  ScaleFormat format = ScaleFormat::nvfp4;
  int experts = 0;
  int slabs = 0;         // output rows / 16 (FC1: per matrix)
  int mats = 1;          // 2 for gated FC1 (gate, up)
  int k = 0;             // reduction length (FC1 H, FC2 I)
  int logical_rows = 0;  // rows per expert of the logical plane (DESIGN §3)
  int order = 0;         // FC1 gate/up order of the logical rows: 0 gate_up, 1 up_gate, 2 interleaved
  int chunks() const { return (k + 63) / 64; }
  int block() const { return scale_block(format); }
  // Exception lists: one per slab of a two-matrix plane (both matrices), one per two slabs of a
  // one-matrix plane (the slabs 2p and 2p + 1 FC2-sum reads together).
  int64_t lists() const {
    return static_cast<int64_t>(experts) * (mats == 2 ? slabs : (slabs + 1) / 2);
  }
  // Bytes of the plain prepared plane (the repack kernel's output).
  size_t plain_bytes() const;
  // Logical row of prepared row r (0..16*slabs-1) of matrix mat.
  int logical_row(int mat, int r) const;
};

// The prepared planes of a layer: FC1's (gate/up order of the spec) and FC2's.
PreparedScaleGeometry fc1_prepared_geometry(const LayerSpec& spec);
PreparedScaleGeometry fc2_prepared_geometry(const LayerSpec& spec);

// Bytes of offsets per (chunk, matrix): NVFP4 32 (4 per row group), MXFP4 4 (a nibble per row group).
int prepared_csf_chunk_bytes(ScaleFormat format);
// The terminating record of every exception list.
inline constexpr uint32_t kPreparedCsfSentinel = 0xFFFF0000u;
// Words of a list's head (PreparedCsfPlane::head_words): 32, 64 or 128, one to four per lane of a warp.
inline constexpr int kPreparedCsfHeadLeast = 32;
inline constexpr int kPreparedCsfHeadMost = 128;
// Whether n is a head length a plane may have.
inline constexpr bool prepared_csf_head_words_valid(int n) { return n == 32 || n == 64 || n == 128; }
// Sentinels after the last list (a warp's 32 words read from any word of a list stay inside the array).
inline constexpr int kPreparedCsfTail = 32;

struct PreparedCsfPlane {
  std::vector<uint8_t> offsets;  // [E][slabs][chunks][mats][prepared_csf_chunk_bytes]
  std::vector<uint8_t> base;     // [E][slabs][mats][8 row groups][2 rows]
  // List starts [lists + 1] (indices into this array), then each list's records
  // (chunk << 16 | m << 14 | g << 11 | i << 8 | byte, by chunk; m: the matrix, or the slab's parity for
  // a one-matrix plane) and its sentinel; then kPreparedCsfTail sentinels, so 32 words from any record
  // of a list lie inside the array.
  std::vector<uint32_t> exc;
  // [lists][head_words]: each list's first words (its records from the start, then its sentinel, then
  // sentinels), where the decode kernels read a list's records, at an address known without reading the
  // list's start first; only a list longer than its head needs its start.
  std::vector<uint32_t> head;
  int head_words = kPreparedCsfHeadLeast;  // 32, 64 or 128
  size_t bytes() const { return offsets.size() + base.size() + 4 * exc.size() + 4 * head.size(); }
  int64_t records(const PreparedScaleGeometry& g) const;  // records other than the sentinels
};

// Builds the prepared CSF plane of a plain logical plane ([E][logical_rows][k / block] bytes). Each
// prepared row's base is the smallest of its bytes whose window covers the most of them (as
// csf_encode chooses), so rows without exceptions, the common case, take no records. Exact for every
// input. The heads are the fewest words of 32, 64 and 128 that hold every list (records and sentinel), 128
// where a list is longer, unless head_words names one of the three. Throws moejit::Error for a geometry
// the format cannot hold (k / 64 chunks beyond 65535) or another head_words.
PreparedCsfPlane build_prepared_csf(const PreparedScaleGeometry& g, const uint8_t* logical, int head_words = 0);
// The plain prepared bytes of a logical plane, as templates/prepare_repack.cuh repack_scales writes them.
std::vector<uint8_t> prepared_plain_scales(const PreparedScaleGeometry& g, const uint8_t* logical);
// The plain prepared bytes rebuilt from a prepared CSF plane the way the kernels rebuild them
// (templates/csf_scales.cuh: offsets, base pattern, then records); equal to prepared_plain_scales of
// the plane it was built from.
std::vector<uint8_t> expand_prepared_csf(const PreparedScaleGeometry& g, const PreparedCsfPlane& p);

}  // namespace moejit
