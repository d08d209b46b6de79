#pragma once
// Prepared CSF scale planes (docs/CSF.md §8): a scale plane in the order the decode kernels read it
// (docs/WEIGHT_LAYOUT.md "Scales"), stored as offsets from a base byte per prepared row, with the bytes
// outside a row's window as exception records. templates/csf_scales.cuh rebuilds the plain prepared
// bytes from it in registers; this header is the host side: the builder prepare uploads, and C++
// mirrors of the plain repack and of the kernels' reconstruction, for tests.
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
// Words of a list's head (a warp's window of records, one per lane) and of sentinels after the last list.
inline constexpr int kPreparedCsfHead = 32;

struct PreparedCsfPlane {
  std::vector<uint8_t> offsets;  // [E][slabs][chunks][mats][prepared_csf_chunk_bytes]
  std::vector<uint8_t> base;     // [E][slabs][mats][8 row groups][2 rows]
  // List starts [lists + 1] (indices into this array), then each list's records
  // (chunk << 16 | m << 14 | g << 11 | i << 8 | byte, by chunk; m: the matrix, or the slab's parity for
  // a one-matrix plane) and its sentinel; then kPreparedCsfHead sentinels, so a window of that many
  // words from any record of a list lies inside the array.
  std::vector<uint32_t> exc;
  // [lists][kPreparedCsfHead]: each list's first words (its records from the start, then its sentinel,
  // then sentinels), the decode kernels' first window of records, read at an address known without
  // reading the list's start first.
  std::vector<uint32_t> head;
  size_t bytes() const { return offsets.size() + base.size() + 4 * exc.size() + 4 * head.size(); }
  int64_t records(const PreparedScaleGeometry& g) const;  // records other than the sentinels
};

// Builds the prepared CSF plane of a plain logical plane ([E][logical_rows][k / block] bytes). Each
// prepared row's base is the smallest of its bytes whose window covers the most of them (as
// csf_encode chooses), so rows without exceptions, the common case, take no records. Exact for every
// input. Throws moejit::Error for a geometry the format cannot hold (k / 64 chunks beyond 65535).
PreparedCsfPlane build_prepared_csf(const PreparedScaleGeometry& g, const uint8_t* logical);
// The plain prepared bytes of a logical plane, as templates/prepare_repack.cuh repack_scales writes them.
std::vector<uint8_t> prepared_plain_scales(const PreparedScaleGeometry& g, const uint8_t* logical);
// The plain prepared bytes rebuilt from a prepared CSF plane the way the kernels rebuild them
// (templates/csf_scales.cuh: offsets, base pattern, then records); equal to prepared_plain_scales of
// the plane it was built from.
std::vector<uint8_t> expand_prepared_csf(const PreparedScaleGeometry& g, const PreparedCsfPlane& p);

}  // namespace moejit
