// Float weights -> NVFP4 / MXFP4 in the logical layout of DESIGN §3.
//
// Scale choice, per block of 16 (NVFP4) or 32 (MXFP4) elements along K:
// - NVFP4: a per-expert fp32 global scale g = amax / (6 * 448) maps the expert's largest block onto the
//   top of the e4m3 range; each block scale is the smallest e4m3 value s with blockmax / (s * g) <= 6
//   ("rounded so elements fit"; a relative slack of 2^-20 absorbs the rounding of g itself, so a
//   block whose ideal scale is exactly an e4m3 value keeps it instead of jumping to the next one).
// - MXFP4: the smallest power of two s >= blockmax / 6 (e8m0), so no element saturates.
// Elements are e2m1(w / scale), rounded to nearest even on the exact quotient.
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
#include <array>
#include <bit>
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

// Throws for the first non-finite weight (only called once a pass has seen one).
[[noreturn]] void throw_non_finite(const float* w, int64_t rows, int64_t cols, const char* tensor, int expert) {
  int64_t i = 0;
  while (i < rows * cols && std::isfinite(w[i])) ++i;
  throw Error(std::string("quantize: ") + tensor + " of expert " + std::to_string(expert) +
              " has a non-finite value at row " + std::to_string(i / cols) + ", column " + std::to_string(i % cols));
}

// Largest block magnitude; `bad` is set when the block holds a NaN or an infinity.
template <int N>
float block_max(const float* w, bool& bad) {
  float m = 0;
  bool nonfinite = false;
  for (int j = 0; j < N; ++j) {
    const float a = std::fabs(w[j]);
    nonfinite |= !(a <= std::numeric_limits<float>::max());
    m = std::max(m, a);
  }
  bad |= nonfinite;
  return m;
}

// The float comparisons below are exact stand-ins for comparisons with a double threshold t:
// for a float a, a > t <=> a > float_down(t) and a >= t <=> a >= float_up(t).
float float_down(double t) {
  float f = static_cast<float>(t);
  if (f > t) f = std::nextafter(f, 0.0f);
  return f;
}
float float_up(double t) {
  float f = static_cast<float>(t);
  if (f < t) f = std::nextafter(f, std::numeric_limits<float>::infinity());
  return f;
}

// Encodes one block of N elements as e2m1(w / denom) into N/2 bytes (element 2j in the low nibble),
// or as signed zeros when denom == 0. Returns the largest magnitude index (0..7) written.
//
// Instead of dividing, |w| is compared with the e2m1 midpoints times denom. Those products are exact
// in double (denom = e4m3 * fp32 global has at most 28 significant bits, or is a power of two; a
// midpoint has at most 3), so each comparison decides on the true quotient: the rounding of
// double_to_e2m1(w / denom) without the quotient's own rounding. Done in float with directed
// thresholds, the loop vectorizes; it runs once per weight of multi-GB layers.
template <int N>
int encode_block(const float* w, double denom, uint8_t* out) {
  uint8_t codes[N];
  if (denom > 0) {
    // Ties go to the even code: "> midpoint" below codes 1, 3, 5, 7 (the odd ones), ">=" below the even.
    const float t0 = float_down(0.25 * denom), t1 = float_up(0.75 * denom), t2 = float_down(1.25 * denom),
                t3 = float_up(1.75 * denom), t4 = float_down(2.5 * denom), t5 = float_up(3.5 * denom),
                t6 = float_down(5.0 * denom);
    for (int j = 0; j < N; ++j) {
      const float a = std::fabs(w[j]);
      const int mag = (a > t0) + (a >= t1) + (a > t2) + (a >= t3) + (a > t4) + (a >= t5) + (a > t6);
      codes[j] = static_cast<uint8_t>(mag | ((std::bit_cast<uint32_t>(w[j]) >> 28) & 0x8));
    }
  } else {
    for (int j = 0; j < N; ++j) codes[j] = static_cast<uint8_t>((std::bit_cast<uint32_t>(w[j]) >> 28) & 0x8);
  }
  int max_mag = 0;
  for (int j = 0; j < N / 2; ++j) {
    out[j] = static_cast<uint8_t>(codes[2 * j] | (codes[2 * j + 1] << 4));
    max_mag = std::max(max_mag, std::max(codes[2 * j] & 0x7, codes[2 * j + 1] & 0x7));
  }
  return max_mag;
}

void quantize_nvfp4(const float* w, int64_t rows, int64_t cols, uint8_t* q, uint8_t* scales, float* global,
                    const char* tensor, int expert) {
  constexpr int block = 16;
  bool bad = false;
  float amax = 0;
  for (int64_t i = 0; i < rows * cols; i += block) amax = std::max(amax, block_max<block>(w + i, bad));
  if (bad) throw_non_finite(w, rows, cols, tensor, expert);
  float g = amax > 0 ? static_cast<float>(static_cast<double>(amax) / (6.0 * 448.0)) : 1.0f;
  if (!(g > 0)) g = std::numeric_limits<float>::denorm_min();  // weights so small that amax/2688 underflows
  *global = g;
  static const std::array<double, 0x7F> values = [] {
    std::array<double, 0x7F> v{};
    for (int c = 0; c < 0x7F; ++c) v[c] = e4m3_to_float(static_cast<uint8_t>(c));
    return v;
  }();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / block; ++b) {
      const float* src = w + r * cols + b * block;
      const double bmax = block_max<block>(src, bad);
      int code = 0;
      if (bmax > 0) {
        const double need = bmax / 6.0 / g * (1.0 - kNvfp4ScaleSlack);
        // The smallest e4m3 value >= need (saturating at 448): positive codes 0x00..0x7E are ordered
        // like their values, so this is a binary search of the value table.
        code = static_cast<int>(std::lower_bound(values.begin(), values.end(), need) - values.begin());
        code = std::min(code, 0x7E);
      }
      scales[r * (cols / block) + b] = static_cast<uint8_t>(code);
      encode_block<block>(src, values[code] * g, q + (r * cols + b * block) / 2);
    }
  }
}

// Smallest integer e with 2^e >= v (v > 0, finite).
int ceil_log2(double v) {
  int e2;
  const double f = std::frexp(v, &e2);  // v = f * 2^e2, f in [0.5, 1)
  return f == 0.5 ? e2 - 1 : e2;
}

void quantize_mxfp4(const float* w, int64_t rows, int64_t cols, uint8_t* q, uint8_t* scales, const char* tensor,
                    int expert) {
  constexpr int block = 32;
  // Doubling a code's magnitude: 0, .5, 1, 1.5, 2, 3 -> 0, 1, 2, 3, 4, 6 (indices 0..5 -> 0,2,4,5,6,7).
  constexpr uint8_t kDouble[6] = {0, 2, 4, 5, 6, 7};
  bool bad = false;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / block; ++b) {
      const float* src = w + r * cols + b * block;
      const double bmax = block_max<block>(src, bad);
      if (bad) throw_non_finite(w, rows, cols, tensor, expert);
      uint8_t* out = q + (r * cols + b * block) / 2;
      int code = 127;
      if (bmax > 0) {
        // bmax / 6 in double is a power of two only when it truly is one (bmax has 24 bits).
        code = std::clamp(ceil_log2(bmax / 6.0) + 127, 0, 254);
        int max_mag = encode_block<block>(src, std::ldexp(1.0, code - 127), out);
        // Canonical form (see the file comment): a block whose largest code is 3 (or less, only when
        // the scale was clamped) is stored with half the scale and doubled codes.
        while (max_mag > 0 && max_mag <= 5 && code > 0) {
          --code;
          max_mag = 0;
          for (int j = 0; j < block / 2; ++j) {
            const uint8_t lo = out[j] & 0xF, hi = out[j] >> 4;
            const uint8_t dlo = static_cast<uint8_t>((lo & 0x8) | kDouble[lo & 0x7]);
            const uint8_t dhi = static_cast<uint8_t>((hi & 0x8) | kDouble[hi & 0x7]);
            out[j] = static_cast<uint8_t>(dlo | (dhi << 4));
            max_mag = std::max(max_mag, std::max(dlo & 0x7, dhi & 0x7));
          }
        }
      } else {
        encode_block<block>(src, 0.0, out);
      }
      scales[r * (cols / block) + b] = static_cast<uint8_t>(code);
    }
  }
}

}  // namespace

void quantize_matrix(ScaleFormat format, const float* w, int64_t rows, int64_t cols, uint8_t* q, uint8_t* scales,
                     float* global, const char* tensor, int expert) {
  if (format == ScaleFormat::nvfp4)
    quantize_nvfp4(w, rows, cols, q, scales, global, tensor, expert);
  else
    quantize_mxfp4(w, rows, cols, q, scales, tensor, expert);
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

  HostLayer layer = allocate_layer(spec);
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
