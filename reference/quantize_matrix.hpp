#pragma once
// The per-expert quantizer behind quantize_layer and make_random_layer (internal).
#include <cstdint>

#include "moejit/types.hpp"

namespace moejit::detail {

// Quantizes one expert's matrix w [rows, cols] (row-major, blocks along cols) to FP4:
//   q       rows * cols / 2 bytes (element 2j in the low nibble of byte j)
//   scales  rows * cols / scale_block(format) codes (e4m3 for nvfp4, e8m0 for mxfp4)
//   global  the expert's fp32 global scale (nvfp4 only; untouched for mxfp4)
// Throws moejit::Error naming `tensor`, the expert and the element when a weight is not finite.
void quantize_matrix(ScaleFormat format, const float* w, int64_t rows, int64_t cols, uint8_t* q, uint8_t* scales,
                     float* global, const char* tensor, int expert);

}  // namespace moejit::detail
