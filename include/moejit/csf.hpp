#pragma once
// The compressed scale format (CSF, docs/CSF.md): a lossless encoding of one FP4 block-scale plane.
//
// A scale plane is row-major [rows][C] bytes (rows = E * rows per expert, C = K / scale block). Each
// row stores one base byte and one unsigned offset per scale at a fixed stride (1 bit for MXFP4 e8m0,
// 4 bits for NVFP4 e4m3), so scale j of row n is base[n] + offset(n, j) without any prefix scan. Bytes
// outside a row's window [base, base + 2^bits - 1] are exception records (position, byte), sorted by
// position; a row whose records would take at least as many bytes as the row itself is stored plainly.
// Bytes are treated as bytes: sign bits, NaN codes and e8m0 0/255 round-trip like any other value.
#include <cstdint>
#include <string>
#include <vector>

#include "moejit/types.hpp"

namespace moejit {

// How a row of a CSF plane is stored (the byte in CsfPlane::mode).
enum class CsfRowMode : uint8_t {
  packed = 0,  // base + offsets, and exception records for the bytes outside the window
  plain = 1,   // the row's C bytes as they are, in the exception stream; base and offsets are zero
};

// Bits per offset: 1 (mxfp4: e8m0 in {base, base + 1}) or 4 (nvfp4: e4m3 in [base, base + 15]).
int csf_offset_bits(ScaleFormat format);
// Bytes between the offsets of consecutive rows: ceil(C * bits / 8) rounded up to a multiple of 4, so
// each row's offsets start on a 32-bit boundary.
int64_t csf_offset_stride(ScaleFormat format, int64_t scales_per_row);
// Bytes of one exception record: position (u16, little-endian) then the scale byte.
inline constexpr int64_t kCsfRecordBytes = 3;
// Positions are u16: a row holds at most this many scales (K <= 1,048,576 for NVFP4).
inline constexpr int64_t kCsfMaxScalesPerRow = 65536;

struct CsfPlane {
  ScaleFormat format = ScaleFormat::nvfp4;
  int64_t rows = 0;            // rows of the logical plane, all experts together
  int64_t scales_per_row = 0;  // C
  std::vector<uint8_t> base;              // [rows]
  std::vector<uint8_t> mode;              // [rows] CsfRowMode
  std::vector<uint8_t> offsets;           // [rows, offset_stride()]
  std::vector<uint32_t> exception_start;  // [rows + 1] byte offsets of each row's part of `exceptions`
  std::vector<uint8_t> exceptions;        // packed rows: records; plain rows: the row's C bytes

  int64_t offset_stride() const { return csf_offset_stride(format, scales_per_row); }
  // Scale j of row n: O(1) from base and offset, plus a binary search of the row's records when it
  // has any. Throws moejit::Error when (n, j) is outside the plane; expects a validated plane.
  uint8_t scale(int64_t n, int64_t j) const;
  // Bytes of every array together (what a GPU would read for the whole plane).
  size_t bytes() const;
  // Every invariant of docs/CSF.md; throws moejit::Error naming `name`, the array, the row and the rule.
  void validate(const std::string& name) const;
};

// Encodes rows x scales_per_row bytes (row-major). Each row's base is the smallest of its bytes whose
// window covers the most of its bytes (so the fewest exception records). Throws moejit::Error when
// scales_per_row is outside [1, kCsfMaxScalesPerRow] or the exception stream would pass 4 GiB.
CsfPlane csf_encode(ScaleFormat format, const uint8_t* scales, int64_t rows, int64_t scales_per_row);
// The plain plane, rows x scales_per_row bytes. Validates first.
std::vector<uint8_t> csf_decode(const CsfPlane& plane);

// What an encoding holds, for reports and tests.
struct CsfPlaneStats {
  int64_t packed_rows = 0;
  int64_t plain_rows = 0;
  int64_t exceptions = 0;   // records in packed rows
  size_t plain_bytes = 0;   // rows * C
  size_t csf_bytes = 0;     // CsfPlane::bytes()
  double ratio() const { return csf_bytes ? static_cast<double>(plain_bytes) / static_cast<double>(csf_bytes) : 0.0; }
};
CsfPlaneStats csf_stats(const CsfPlane& plane);

}  // namespace moejit
