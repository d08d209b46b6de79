#pragma once
// The fp64 CPU reference of one MoE layer (DESIGN §1): exact dequantization, fp64 accumulation,
// intermediate rounded to bf16 (a16), output before and after the final bf16 rounding.
#include <cstdint>
#include <vector>

#include "moejit/host_layer.hpp"

namespace moejit {

struct ReferenceOutput {
  std::vector<double> out_f64;   // [M, H] before the final rounding
  std::vector<uint16_t> out;     // [M, H] bf16 bits
};

// Only ActPrecision::a16 is implemented by this reference; other modes throw moejit::Error.
ReferenceOutput reference_forward(const HostLayer& layer, const HostInputs& in,
                                  ActPrecision precision = ActPrecision::a16);

// Activation of DESIGN §1 in fp64 (u ignored for relu2, where g is the single FC1 output).
double reference_activation(const LayerSpec& spec, double g, double u);

// Comparison metrics used by tests and `moejit run --check`.
struct Agreement {
  double rel_l2 = 0;       // ||a - b|| / ||b||
  double cosine = 0;       // cos(a, b)
  double max_abs = 0;      // max |a - b|
  // max |a - b| / (|b| + rms(b)): the worst single element against its own size or, near zero, the
  // output's typical size, so one wrong element stands out however many right ones surround it.
  double max_scaled = 0;
  int64_t nonfinite = 0;   // count of non-finite values in a
};
Agreement compare(const std::vector<float>& actual, const std::vector<double>& expected);

}  // namespace moejit
