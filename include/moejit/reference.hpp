#pragma once
// The fp64 CPU reference of one MoE layer (DESIGN §1): exact dequantization, fp64 accumulation,
// intermediate rounded to bf16 (a16), output before and after the final bf16 rounding.
// Host-only. reference_forward runs on several threads internally (a pool per call) and is safe to
// call from several threads at once; the other functions are pure.
#include <cstdint>
#include <vector>

#include "moejit/host_layer.hpp"

namespace moejit {

struct ReferenceOutput {
  std::vector<double> out_f64;   // [M, H] before the final rounding
  std::vector<uint16_t> out;     // [M, H] bf16 bits
  // [E]: per local expert, the largest |x| of the tokens routed to it and the largest |intermediate|
  // (the fp64 activation before its rounding), 0 where no pair was routed: what a4 calibration reads.
  std::vector<double> x_amax, act_amax;
};

// The caller's global input scales of the a4 mode (DESIGN §1): a1_gs for x, a2_gs for the intermediate.
// Other modes ignore them.
struct ActivationScales {
  float a1_gs = 1.0f;
  float a2_gs = 1.0f;
  // Per local expert (size E) where a checkpoint calibrated each expert's inputs apart (ModelOpt's
  // input_scale per expert): then they replace the scalars, and x is quantized per routed pair with its
  // expert's a1_gs.
  std::vector<float> a1_gs_per_expert, a2_gs_per_expert;
  float a1(int64_t e) const { return a1_gs_per_expert.empty() ? a1_gs : a1_gs_per_expert[e]; }
  float a2(int64_t e) const { return a2_gs_per_expert.empty() ? a2_gs : a2_gs_per_expert[e]; }
};
// a4 global scales calibrated as NVFP4 checkpoints calibrate their input scales: gs = 448 * 6 / amax, amax
// the tensor's largest magnitude over a calibration batch (x and the intermediate as the a16 reference
// computes them). per_expert: one scale per local expert (an expert that received no pair takes the
// overall scale); else one scalar each. Throws moejit::Error when the batch routes no pair to the layer
// or a tensor is all zero (no scale maps a zero range).
ActivationScales calibrate_a4_scales(const HostLayer& layer, const HostInputs& calibration, bool per_expert);
// The a4 scales a layer carries (HostLayer::a1_gs, a2_gs: [1] or [E]); the defaults for other precisions.
ActivationScales layer_activation_scales(const HostLayer& layer);

// Every precision mode of DESIGN §1: a16 uses x as given and rounds the intermediate to bf16; a8 and a4
// quantize x (per token along H) and the intermediate (per routed pair along I, from its fp64 value)
// with quantize_activations, then multiply the dequantized values exactly. Token ids outside the
// layer's local experts [expert_begin, expert_begin + E) contribute nothing. Throws moejit::Error for
// an invalid layer (HostLayer::validate), inputs whose sizes do not match (x [M, H], ids and weights
// [M, K] with the layer's H and K), and a4 scales that are not finite and > 0.
ReferenceOutput reference_forward(const HostLayer& layer, const HostInputs& in,
                                  ActPrecision precision = ActPrecision::a16, ActivationScales scales = {});

// Elements per activation scale block along K: 1 (a16), 32 (a8, MXFP8), 16 (a4, NVFP4).
int activation_block(ActPrecision precision);
// Replaces row[0, n) by its quantized-then-dequantized values in the given mode (rules in
// reference/activation_quant.cpp and docs/DECISIONS.md): bf16 rounding (a16), MXFP8 (a8), or NVFP4 with
// global scale `global_scale` (a4; finite and > 0, else moejit::Error). Exact in double.
void quantize_activations(ActPrecision precision, double* row, int64_t n, double global_scale = 1.0);

// Activation of DESIGN §1 in fp64 (u ignored for relu2, where g is the single FC1 output), with the
// spec's alpha, beta and limit. Pure, never throws.
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
// actual and expected are the same [M, H] output; throws moejit::Error when their sizes differ. Any
// non-finite actual value makes every metric its worst (rel_l2 = inf, cosine = -1); an all-zero
// expected gives rel_l2 0 against an all-zero actual and inf otherwise. Pure.
Agreement compare(const std::vector<float>& actual, const std::vector<double>& expected);

}  // namespace moejit
