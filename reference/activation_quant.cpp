// Activation quantization of DESIGN §1's precision modes, as the fp64 reference applies it to x (per
// token along H) and to the intermediate (per routed pair along I). Each value is replaced by what the
// tensor cores would multiply: the dequantized value, exact in double.
//
// Rules (docs/DECISIONS.md, "Activation precisions"):
// - a16: one rounding to bf16.
// - a8, MXFP8 (OCP MX v1.0): blocks of 32 along K. Shared exponent X = floor(log2(amax)) - 8 (8 is
//   e4m3's largest exponent, 448 = 1.75 * 2^8), clamped to e8m0's [-127, 127]; elements
//   q = e4m3(v / 2^X), rounded to nearest even on the exact quotient and saturated to +-448 (a block
//   maximum in [448, 512) * 2^X saturates, as the spec's floor rule implies); value q * 2^X.
// - a4, NVFP4 with the caller's global scale gs (> 0): blocks of 16 along K. Block scale
//   s = e4m3(amax * gs / 6) (nearest even, saturated to 448); elements q = e2m1(v * gs / s) (nearest
//   even, saturated to +-6; 0 when s is 0); value q * s / gs. gs maps the tensor's range onto the
//   e4m3 x e2m1 grid, as in NVFP4 checkpoints' input scales (typically 448 * 6 / amax(tensor)).
// A last block shorter than the block size (K a multiple of 16 but not of 32 in a8) is quantized on
// the elements it has. A block holding a NaN or an infinity becomes all NaN (the scale of a non-finite
// amax is NaN in both formats).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "moejit/codecs.hpp"
#include "moejit/error.hpp"
#include "moejit/reference.hpp"

namespace moejit {
namespace {

double block_amax(const double* v, int64_t n, bool& nonfinite) {
  double m = 0;
  nonfinite = false;
  for (int64_t j = 0; j < n; ++j) {
    const double a = std::fabs(v[j]);
    if (!(a <= std::numeric_limits<double>::max())) nonfinite = true;
    m = std::max(m, a);
  }
  return m;
}

void mxfp8_block(double* v, int64_t n) {
  bool bad;
  const double amax = block_amax(v, n, bad);
  if (bad) {
    std::fill(v, v + n, std::numeric_limits<double>::quiet_NaN());
    return;
  }
  if (amax == 0) return;  // every element is +-0 and stays so
  int e2;
  std::frexp(amax, &e2);  // amax = f * 2^e2, f in [0.5, 1): floor(log2(amax)) = e2 - 1
  const int x = std::clamp(e2 - 1 - 8, -127, 127);
  for (int64_t j = 0; j < n; ++j)
    v[j] = std::ldexp(static_cast<double>(e4m3_to_float(double_to_e4m3(std::ldexp(v[j], -x)))), x);
}

void nvfp4_block(double* v, int64_t n, double gs) {
  bool bad;
  const double amax = block_amax(v, n, bad);
  if (bad) {
    std::fill(v, v + n, std::numeric_limits<double>::quiet_NaN());
    return;
  }
  const double s = static_cast<double>(e4m3_to_float(double_to_e4m3(amax * gs / 6.0)));
  for (int64_t j = 0; j < n; ++j) {
    if (s == 0) {
      v[j] = std::copysign(0.0, v[j]);
      continue;
    }
    v[j] = static_cast<double>(e2m1_to_float(double_to_e2m1(v[j] * gs / s))) * s / gs;
  }
}

}  // namespace

int activation_block(ActPrecision precision) {
  switch (precision) {
    case ActPrecision::a16:
      return 1;
    case ActPrecision::a8:
      return 32;
    case ActPrecision::a4:
      return 16;
  }
  throw Error("activation_block: invalid precision");
}

void quantize_activations(ActPrecision precision, double* row, int64_t n, double global_scale) {
  if (precision == ActPrecision::a4 && !(global_scale > 0 && std::isfinite(global_scale)))
    throw Error("quantize_activations: the a4 global scale must be finite and > 0, got " + std::to_string(global_scale));
  const int64_t block = activation_block(precision);
  for (int64_t b = 0; b < n; b += block) {
    const int64_t len = std::min(block, n - b);
    switch (precision) {
      case ActPrecision::a16:
        row[b] = static_cast<double>(bf16_to_float(double_to_bf16(row[b])));
        break;
      case ActPrecision::a8:
        mxfp8_block(row + b, len);
        break;
      case ActPrecision::a4:
        nvfp4_block(row + b, len, global_scale);
        break;
    }
  }
}

}  // namespace moejit
