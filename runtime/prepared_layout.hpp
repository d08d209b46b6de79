#pragma once
// Sizes of the decode family's prepared planes (see templates/fp4_decode.cuh and docs/WEIGHT_LAYOUT.md).
#include <cstddef>

#include "moejit/types.hpp"

namespace moejit::detail {

struct PlaneGeometry {
  int experts = 0, slabs = 0, chunks = 0, mats = 0, k = 0, block = 0;
  size_t runs() const { return static_cast<size_t>(experts) * slabs * chunks * mats * 32; }
  size_t weight_bytes() const { return runs() * 16; }
  // One byte per (row, scale block): 16 rows x 64/block blocks per (slab, chunk, matrix).
  size_t scale_bytes() const { return static_cast<size_t>(experts) * slabs * chunks * scale_run_bytes(); }
  // The bytes of one (slab, chunk): its matrices' 32 lane runs of 16 bytes, and their scale bytes.
  int weight_run_bytes() const { return mats * 32 * 16; }
  int scale_run_bytes() const { return mats * 16 * (64 / block); }
};

inline PlaneGeometry fc1_geometry(const LayerSpec& s) {
  return {s.experts, s.intermediate / 16, (s.hidden + 63) / 64, is_gated(s.activation) ? 2 : 1, s.hidden,
          scale_block(s.format)};
}
inline PlaneGeometry fc2_geometry(const LayerSpec& s) {
  return {s.experts, s.hidden / 16, (s.intermediate + 63) / 64, 1, s.intermediate, scale_block(s.format)};
}

}  // namespace moejit::detail
