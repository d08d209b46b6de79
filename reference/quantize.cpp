// Float weights -> NVFP4 / MXFP4 in the logical layout of DESIGN §3.
//
// Scale choice, per block of 16 (NVFP4) or 32 (MXFP4) elements along K:
// - NVFP4: a per-expert fp32 global scale g = amax / (6 * 448) maps the expert's largest block onto the
//   top of the e4m3 range; each block scale is the smallest e4m3 value s with blockmax / (s * g) <= 6
//   ("rounded so elements fit"; a relative slack of 2^-20 absorbs the rounding of g itself, so a
//   block whose ideal scale is exactly an e4m3 value keeps it instead of jumping to the next one).
// - MXFP4: the smallest power of two s >= blockmax / 6 (e8m0), so no element saturates.
// Elements are e2m1(w / scale), rounded to nearest even, computed in double.
//
// Both quantizers are idempotent: quantize(dequantize(q)) == q code for code (tests check it) for every
// block whose scale is an e4m3 normal (NVFP4) or above 2^-127 (MXFP4):
// - NVFP4: a ceiling scale is less than 1.125x its ideal value for e4m3 normals, so the block maximum
//   lands in (5.33, 6] and encodes as 6, and the dequantized block maps back onto the same scale.
// - MXFP4: blockmax / s lies in (3, 6]; when it falls in (3, 3.5) the maximum rounds to 3 and the
//   dequantized block (max 3s) would requantize with scale s/2. Such blocks are stored in that
//   canonical form directly (scale s/2, every code doubled: 0,0.5,1,1.5,2,3 -> 0,1,2,3,4,6), which
//   dequantizes to exactly the same values, so the representation is unique.
// All-zero blocks get scale code 0 (NVFP4, value 0) or 127 (MXFP4, value 1); their elements keep the
// sign of zero.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "moejit/codecs.hpp"
#include "moejit/error.hpp"
#include "moejit/host_layer.hpp"
#include "reference/parallel.hpp"
#include "reference/quantize_matrix.hpp"

namespace moejit {
namespace detail {
namespace {

constexpr double kNvfp4ScaleSlack = 0x1p-20;

void check_finite(const float* w, int64_t rows, int64_t cols, const char* tensor, int expert) {
  for (int64_t i = 0; i < rows * cols; ++i)
    if (!std::isfinite(w[i]))
      throw Error(std::string("quantize: ") + tensor + " of expert " + std::to_string(expert) + " has a non-finite value at row " +
                  std::to_string(i / cols) + ", column " + std::to_string(i % cols));
}

// Encodes one block (n even, `first` even) as e2m1(w / denom), or as signed zeros when denom == 0.
// Returns the largest magnitude index (0..7) written. The division is a true division, not a multiply
// by 1/denom: for NVFP4 scales the reciprocal is inexact and could move a value off an exact midpoint.
int encode_block(const float* w, int n, double denom, uint8_t* q, int64_t first) {
  int max_mag = 0;
  uint8_t* out = q + (first >> 1);
  for (int j = 0; j < n; j += 2) {
    uint8_t lo, hi;
    if (denom > 0) {
      lo = double_to_e2m1(static_cast<double>(w[j]) / denom);
      hi = double_to_e2m1(static_cast<double>(w[j + 1]) / denom);
    } else {
      lo = std::signbit(w[j]) ? 0x8 : 0x0;
      hi = std::signbit(w[j + 1]) ? 0x8 : 0x0;
    }
    max_mag = std::max(max_mag, std::max(lo & 0x7, hi & 0x7));
    out[j >> 1] = static_cast<uint8_t>(lo | (hi << 4));
  }
  return max_mag;
}

void quantize_nvfp4(const float* w, int64_t rows, int64_t cols, uint8_t* q, uint8_t* scales, float* global) {
  constexpr int block = 16;
  double amax = 0;
  for (int64_t i = 0; i < rows * cols; ++i) amax = std::max(amax, std::fabs(static_cast<double>(w[i])));
  float g = amax > 0 ? static_cast<float>(amax / (6.0 * 448.0)) : 1.0f;
  if (!(g > 0)) g = std::numeric_limits<float>::denorm_min();  // weights so small that amax/2688 underflows
  *global = g;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / block; ++b) {
      const float* src = w + r * cols + b * block;
      double bmax = 0;
      for (int j = 0; j < block; ++j) bmax = std::max(bmax, std::fabs(static_cast<double>(src[j])));
      uint8_t code = 0;
      if (bmax > 0) {
        const double ideal = bmax / 6.0 / g;
        const double need = ideal * (1.0 - kNvfp4ScaleSlack);
        // Start from the nearest code and step to the smallest one that is >= need (at most one step
        // either way); positive e4m3 codes 0x00..0x7E are ordered like their values.
        code = float_to_e4m3(static_cast<float>(ideal));
        while (code < 0x7E && e4m3_to_float(code) < need) ++code;
        while (code > 1 && e4m3_to_float(static_cast<uint8_t>(code - 1)) >= need) --code;
      }
      scales[r * (cols / block) + b] = code;
      encode_block(src, block, static_cast<double>(e4m3_to_float(code)) * g, q, r * cols + b * block);
    }
  }
}

// Smallest integer e with 2^e >= v (v > 0, finite).
int ceil_log2(double v) {
  int e2;
  const double f = std::frexp(v, &e2);  // v = f * 2^e2, f in [0.5, 1)
  return f == 0.5 ? e2 - 1 : e2;
}

void quantize_mxfp4(const float* w, int64_t rows, int64_t cols, uint8_t* q, uint8_t* scales) {
  constexpr int block = 32;
  // Doubling a code's magnitude: 0, .5, 1, 1.5, 2, 3 -> 0, 1, 2, 3, 4, 6 (indices 0..5 -> 0,2,4,5,6,7).
  constexpr uint8_t kDouble[6] = {0, 2, 4, 5, 6, 7};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / block; ++b) {
      const float* src = w + r * cols + b * block;
      double bmax = 0;
      for (int j = 0; j < block; ++j) bmax = std::max(bmax, std::fabs(static_cast<double>(src[j])));
      const int64_t first = r * cols + b * block;
      int code = 127;
      if (bmax > 0) {
        // bmax / 6 in double is a power of two only when it truly is one (bmax has 24 bits).
        code = std::clamp(ceil_log2(bmax / 6.0) + 127, 0, 254);
        int max_mag = encode_block(src, block, std::ldexp(1.0, code - 127), q, first);
        // Canonical form (see the file comment): a block whose largest code is 3 (or less, only when
        // the scale was clamped) is stored with half the scale and doubled codes.
        while (max_mag > 0 && max_mag <= 5 && code > 0) {
          --code;
          max_mag = 0;
          for (int j = 0; j < block; ++j) {
            const int64_t idx = first + j;
            uint8_t& byte = q[idx >> 1];
            const int shift = (idx & 1) * 4;
            const uint8_t nib = (byte >> shift) & 0xF;
            const uint8_t doubled = static_cast<uint8_t>((nib & 0x8) | kDouble[nib & 0x7]);
            max_mag = std::max(max_mag, doubled & 0x7);
            byte = static_cast<uint8_t>((byte & ~(0xF << shift)) | (doubled << shift));
          }
        }
      } else {
        encode_block(src, block, 0.0, q, first);
      }
      scales[r * (cols / block) + b] = static_cast<uint8_t>(code);
    }
  }
}

}  // namespace

void quantize_matrix(ScaleFormat format, const float* w, int64_t rows, int64_t cols, uint8_t* q, uint8_t* scales,
                     float* global, const char* tensor, int expert) {
  check_finite(w, rows, cols, tensor, expert);
  if (format == ScaleFormat::nvfp4)
    quantize_nvfp4(w, rows, cols, q, scales, global);
  else
    quantize_mxfp4(w, rows, cols, q, scales);
}

}  // namespace detail

HostLayer quantize_layer(const LayerSpec& spec, const std::vector<float>& fc1, const std::vector<float>& fc2,
                         const std::vector<float>& fc1_bias, const std::vector<float>& fc2_bias) {
  spec.validate();
  const int64_t E = spec.experts, H = spec.hidden, I = spec.intermediate, rows = spec.fc1_rows();
  const int block = scale_block(spec.format);
  auto expect = [](const char* what, size_t got, int64_t want, const std::string& shape) {
    if (got != static_cast<size_t>(want))
      throw Error(std::string("quantize_layer: ") + what + " has " + std::to_string(got) + " values, expected " +
                  std::to_string(want) + " " + shape);
  };
  const std::string rows_name = is_gated(spec.activation) ? "2I" : "I";
  expect("fc1", fc1.size(), E * rows * H, "[E, " + rows_name + ", H]");
  expect("fc2", fc2.size(), E * H * I, "[E, H, I]");
  if (spec.has_bias) {
    expect("fc1_bias", fc1_bias.size(), E * rows, "[E, " + rows_name + "]");
    expect("fc2_bias", fc2_bias.size(), E * H, "[E, H]");
    for (float v : fc1_bias)
      if (!std::isfinite(v)) throw Error("quantize_layer: fc1_bias has a non-finite value");
    for (float v : fc2_bias)
      if (!std::isfinite(v)) throw Error("quantize_layer: fc2_bias has a non-finite value");
  } else if (!fc1_bias.empty() || !fc2_bias.empty()) {
    throw Error("quantize_layer: biases were given but spec.has_bias is false");
  }

  HostLayer layer;
  layer.spec = spec;
  layer.w13.assign(E * rows * H / 2, 0);
  layer.w13_scale.assign(E * rows * H / block, 0);
  layer.w2.assign(E * H * I / 2, 0);
  layer.w2_scale.assign(E * H * I / block, 0);
  if (spec.format == ScaleFormat::nvfp4) {
    layer.w13_global_scale.assign(E, 0.0f);
    layer.w2_global_scale.assign(E, 0.0f);
  }
  if (spec.has_bias) {
    layer.w13_bias = fc1_bias;
    layer.w2_bias = fc2_bias;
  }
  const char* fc1_name = is_gated(spec.activation) ? "fc1 (w13)" : "fc1 (w1)";
  // Experts are independent; each is written by one thread, so the result does not depend on threads.
  detail::parallel_for(E, detail::worker_count(E, static_cast<double>(rows * H + H * I) * 4), [&](int64_t e0, int64_t e1) {
    for (int64_t e = e0; e < e1; ++e) {
      float dummy = 0;
      float* g1 = layer.w13_global_scale.empty() ? &dummy : &layer.w13_global_scale[e];
      float* g2 = layer.w2_global_scale.empty() ? &dummy : &layer.w2_global_scale[e];
      detail::quantize_matrix(spec.format, fc1.data() + e * rows * H, rows, H, layer.w13.data() + e * rows * H / 2,
                              layer.w13_scale.data() + e * rows * H / block, g1, fc1_name, static_cast<int>(e));
      detail::quantize_matrix(spec.format, fc2.data() + e * H * I, H, I, layer.w2.data() + e * H * I / 2,
                              layer.w2_scale.data() + e * H * I / block, g2, "fc2 (w2)", static_cast<int>(e));
    }
  });
  return layer;
}

}  // namespace moejit
