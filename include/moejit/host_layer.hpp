#pragma once
// A MoE layer's weights in the logical, checkpoint-shaped layout of DESIGN §3, in host memory.
//
// Layouts: every tensor is row-major with the expert outermost. Packed FP4 holds two e2m1 codes per
// byte along K (element 2j in the low nibble of byte j); scale planes hold one e4m3 (nvfp4, per 16
// along K) or e8m0 (mxfp4, per 32) code per block. Host-only; const member functions and the free
// functions are thread-safe (no shared state) unless a caller writes the same HostLayer concurrently.
#include <cstdint>
#include <optional>
#include <vector>

#include "moejit/csf.hpp"
#include "moejit/types.hpp"

namespace moejit {

struct HostLayer {
  LayerSpec spec;
  // FC1: w13 [E, 2I, H/2] (or w1 [E, I, H/2] for relu2), rows in spec.gate_up_order.
  std::vector<uint8_t> w13;
  std::vector<uint8_t> w13_scale;         // [E, rows, H/block] e4m3 or e8m0 codes
  // nvfp4 only: [E], one FC1 global scale per expert, or [E, 2] (gate, up) for checkpoints whose gate
  // and up projections were calibrated apart (ModelOpt weight_scale_2 per projection;
  // docs/CHECKPOINTS.md). relu2's single W1 takes [E] only.
  std::vector<float> w13_global_scale;
  std::vector<float> w13_bias;            // [E, rows], when spec.has_bias
  std::vector<uint8_t> w2;                // [E, H, I/2]
  std::vector<uint8_t> w2_scale;          // [E, H, I/block]
  std::vector<float> w2_global_scale;     // [E], nvfp4 only
  std::vector<float> w2_bias;             // [E, H], when spec.has_bias
  // a4 only (spec.precision): the global input scales of x (a1_gs) and of the intermediate (a2_gs), each
  // [1] (every expert) or [E], finite and > 0. They multiply (NVFP4 block scale e4m3(amax * gs / 6)), so a
  // ModelOpt checkpoint's input_scale s (which divides) gives gs = 1 / s (docs/DECISIONS.md, "Precision").
  std::vector<float> a1_gs, a2_gs;
  // A scale plane may instead be held in the compressed scale format (docs/CSF.md, rows E * rows per
  // expert): then its plain vector above is empty. Exactly one of the two forms holds each plane.
  std::optional<CsfPlane> w13_scale_csf;
  std::optional<CsfPlane> w2_scale_csf;

  // Throws moejit::Error naming the tensor whose size does not match spec (or the spec's own rule,
  // LayerSpec::validate), a tensor the spec does not use (biases without has_bias, global scales for
  // mxfp4) and a non-finite global scale; a4 input scales missing, of another size than [1] or [E], or not
  // finite and > 0, and input scales given for a16 or a8.
  void validate() const;
  // Exactly dequantized FC1/FC2 weight element (row, k) of local expert e: FC1 rows in logical order
  // (spec.gate_up_order, 0 <= row < fc1_rows, 0 <= k < H), FC2 rows 0 <= row < H, 0 <= k < I. The
  // e2m1 * block-scale product is exact; nvfp4 multiplies the global scale once in fp32. Throws
  // moejit::Error for an index out of range (the layer itself is assumed valid).
  float fc1_weight(int e, int row, int k) const;
  // True when w13_global_scale holds a gate and an up scale per expert ([E, 2]).
  bool has_split_fc1_global_scale() const;
  // The FC1 global scale that applies to logical FC1 row `row` of expert e (nvfp4; 1 for mxfp4): the
  // expert's [E] value, or its gate or up value of [E, 2] by fc1_row_role. Throws moejit::Error for e
  // or row out of range.
  float fc1_global_scale(int e, int row) const;
  float fc2_weight(int e, int row, int k) const;
};

// Logical FC1 row (DESIGN §3, spec.gate_up_order) that holds gate element i (up = false) or up element
// i (up = true), 0 <= i < I:
//   gate_up:     gate i -> row i,      up i -> row I + i
//   up_gate:     up i   -> row i,      gate i -> row I + i
//   interleaved: gate i -> row 2i,     up i -> row 2i + 1   (gpt-oss)
// relu2 has one matrix W1 of I rows: (false, i) -> row i; asking for an up row throws moejit::Error, as
// does i outside [0, I).
int fc1_row_of(const LayerSpec& spec, bool up, int i);

// The inverse: which half (up or gate) and index i a logical FC1 row holds (relu2: never up). Throws
// moejit::Error for a row outside [0, fc1_rows).
struct Fc1RowRole {
  bool up = false;
  int index = 0;
};
Fc1RowRole fc1_row_role(const LayerSpec& spec, int row);

// The FC1 global scales in the form the GPU kernels take (empty for mxfp4): for a gated layer [E, 2], a
// gate and an up scale per expert (an [E] layer's value twice), for relu2 [E]. Runtime::prepare uploads
// this; DeviceLayerView::w13_global_scale_gate_up says which form a device view holds.
std::vector<float> kernel_fc1_global_scale(const HostLayer& layer);

// A layer of the spec's shapes with every code, scale and global scale zero and no biases
// (callers fill them in). Does not validate the spec.
HostLayer allocate_layer(const LayerSpec& spec);

// Quantizes float weights (logical layout, row-major: fc1 [E, fc1_rows, H], fc2 [E, H, I]; biases
// [E, fc1_rows] and [E, H], both empty or both given with spec.has_bias) to the spec's format:
// NVFP4 picks a per-expert global scale so block maxima map onto the e4m3 range, then e4m3 block
// scales; MXFP4 picks e8m0 block scales rounded up so every element fits e2m1. Throws moejit::Error
// for an invalid spec or vectors of the wrong length. Runs on several threads internally.
HostLayer quantize_layer(const LayerSpec& spec, const std::vector<float>& fc1, const std::vector<float>& fc2,
                         const std::vector<float>& fc1_bias = {}, const std::vector<float>& fc2_bias = {});

// A layer of random weights (normal, std ~ 1/sqrt(K)) quantized with quantize_layer; deterministic per
// seed (the same on every toolchain). Throws moejit::Error for an invalid spec.
HostLayer make_random_layer(const LayerSpec& spec, uint64_t seed);

// A layer made the way trained ones are, for the compressed scale format (docs/CSF.md): normal
// weights as make_random_layer, each output row multiplied by its own factor exp(row_spread * N(0,1))
// (trained rows differ in norm), quantized with quantize_layer's quantizers. Neighbouring block scales
// of a row are then close, as in real checkpoints, while rows differ. row_spread = 0 gives
// make_random_layer's layer bit for bit; row_spread outside [0, 4] throws moejit::Error.
HostLayer make_realistic_layer(const LayerSpec& spec, uint64_t seed, double row_spread = 0.5);

// A random layer of any size in about a second, for benchmarks and large-shape tests: FP4 codes are
// uniform random bytes (every code point, -0 included), block scales valid e4m3/e8m0 codes around
// 1/(rms(e2m1)·sqrt(K)) with a random ±1 binade, NVFP4 global scales per expert, biases uniform in
// [-0.1, 0.1]; FC1 and FC2 outputs are O(1). Deterministic per seed and independent of the thread
// count. make_random_layer quantizes normal floats instead, which takes tens of seconds at gpt-oss
// size. Throws moejit::Error for an invalid spec.
HostLayer make_random_code_layer(const LayerSpec& spec, uint64_t seed);

// Token inputs of one call (DESIGN §1).
struct HostInputs {
  int tokens = 0;                   // M
  int top_k = 0;                    // K
  int hidden = 0;                   // H
  std::vector<uint16_t> x;          // [M, H] bf16 bits
  std::vector<int32_t> topk_ids;    // [M, K] global expert ids
  std::vector<float> topk_weights;  // [M, K]
};

// Random inputs: x ~ N(0,1) in bf16, ids drawn uniformly from [expert_begin - 1, expert_begin + E]
// when include_invalid (so some fall outside the local range), else from the local range;
// weights positive and normalized per token (sum 1 over the K slots). Deterministic per seed. Throws
// moejit::Error for an invalid spec or tokens < 0.
HostInputs make_random_inputs(const LayerSpec& spec, int tokens, uint64_t seed, bool include_invalid = false);

}  // namespace moejit
