// The fp64 CPU reference of one MoE layer (DESIGN §1), the oracle every kernel family is tested against.
//
// Numerics, step by step (the golden layers of ../shared/golden were computed the same way by an
// independent implementation):
// - weights are dequantized exactly: e2m1 * block scale is exact in double, and NVFP4's fp32 global
//   scale multiplies the fp64 dot product (x . (c * s)) * g, which is the exact dot product of the
//   dequantized row up to fp64 rounding;
// - FC1 and FC2 accumulate in fp64, biases (fp32 values) are added in fp64;
// - the activation is evaluated in fp64 and rounded once to bf16 (A16 intermediate), or quantized from
//   its fp64 value to MXFP8 (a8) or NVFP4 (a4) blocks along I, as x is along H in those modes
//   (reference/activation_quant.cpp);
// - out[m] = sum over the token's valid slots of w * y in fp64, reported before (out_f64) and after
//   one rounding to bf16 (out).
// Slots whose expert id falls outside [expert_begin, expert_begin + E) contribute nothing.
//
// Cost: only experts that some slot routes to are touched, each weight row is decoded once per call
// and reused by every slot routed to that expert, and rows are spread over threads. Each output value
// is computed by one thread in a fixed order, so the result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "moejit/codecs.hpp"
#include "moejit/csf_layer.hpp"
#include "moejit/error.hpp"
#include "moejit/reference.hpp"
#include "reference/parallel.hpp"

namespace moejit {
namespace {

constexpr double kE2m1[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};

// Decodes row `row` of one expert's packed matrix [rows, cols] into dst[cols] as e2m1 * block scale
// (no global scale), exact in double.
void decode_row(ScaleFormat format, const uint8_t* q, const uint8_t* scales, int64_t row, int64_t cols, double* dst) {
  const int block = scale_block(format);
  const uint8_t* qrow = q + row * (cols / 2);
  const uint8_t* srow = scales + row * (cols / block);
  for (int64_t b = 0; b < cols / block; ++b) {
    const double s = format == ScaleFormat::nvfp4 ? static_cast<double>(e4m3_to_float(srow[b]))
                                                  : static_cast<double>(e8m0_to_float(srow[b]));
    for (int64_t j = b * block; j < (b + 1) * block; j += 2) {
      const uint8_t byte = qrow[j >> 1];
      dst[j] = kE2m1[byte & 0xF] * s;
      dst[j + 1] = kE2m1[byte >> 4] * s;
    }
  }
}

double dot(const double* a, const double* b, int64_t n) {
  // Four partial sums: fp64 leaves ~1e-16 relative error either way, and this lets the compiler overlap adds.
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    s0 += a[j] * b[j];
    s1 += a[j + 1] * b[j + 1];
    s2 += a[j + 2] * b[j + 2];
    s3 += a[j + 3] * b[j + 3];
  }
  for (; j < n; ++j) s0 += a[j] * b[j];
  return (s0 + s1) + (s2 + s3);
}

void check_inputs(const LayerSpec& spec, const HostInputs& in) {
  auto fail = [](const std::string& msg) { throw Error("reference_forward: " + msg); };
  if (in.tokens < 0) fail("tokens must be >= 0 (got " + std::to_string(in.tokens) + ")");
  if (in.top_k <= 0) fail("top_k must be > 0 (got " + std::to_string(in.top_k) + ")");
  if (in.hidden != spec.hidden)
    fail("inputs have hidden = " + std::to_string(in.hidden) + " but the layer has hidden = " + std::to_string(spec.hidden));
  const size_t M = static_cast<size_t>(in.tokens), K = static_cast<size_t>(in.top_k), H = static_cast<size_t>(in.hidden);
  if (in.x.size() != M * H)
    fail("x has " + std::to_string(in.x.size()) + " values, expected tokens * hidden = " + std::to_string(M * H));
  if (in.topk_ids.size() != M * K)
    fail("topk_ids has " + std::to_string(in.topk_ids.size()) + " values, expected tokens * top_k = " + std::to_string(M * K));
  if (in.topk_weights.size() != M * K)
    fail("topk_weights has " + std::to_string(in.topk_weights.size()) + " values, expected tokens * top_k = " +
         std::to_string(M * K));
}

}  // namespace

double reference_activation(const LayerSpec& spec, double g, double u) {
  auto clamp_limit = [&] {
    if (spec.limit) {
      const double L = *spec.limit;
      g = std::min(g, L);
      u = std::clamp(u, -L, L);
    }
  };
  switch (spec.activation) {
    case Activation::silu:
      clamp_limit();
      return g / (1.0 + std::exp(-g)) * u;
    case Activation::gelu_tanh:
      return 0.5 * g * (1.0 + std::tanh(0.7978845608 * (g + 0.044715 * g * g * g))) * u;
    case Activation::relu2: {
      const double r = std::max(0.0, g);
      return r * r;
    }
    case Activation::swigluoai:
      clamp_limit();
      return g / (1.0 + std::exp(-static_cast<double>(spec.swiglu_alpha) * g)) * (u + static_cast<double>(spec.swiglu_beta));
  }
  throw Error("reference_activation: invalid activation");
}

ActivationScales calibrate_a4_scales(const HostLayer& layer, const HostInputs& calibration, bool per_expert) {
  const ReferenceOutput r = reference_forward(layer, calibration, ActPrecision::a16);
  const double x_all = *std::max_element(r.x_amax.begin(), r.x_amax.end());
  const double a_all = *std::max_element(r.act_amax.begin(), r.act_amax.end());
  if (!(x_all > 0) || !(a_all > 0))
    throw Error("calibrate_a4_scales: the calibration batch gives a zero range (no pair routed to the layer, or "
                "all-zero activations): no global scale maps it");
  constexpr double kRange = 448.0 * 6.0;  // e4m3's largest block scale times e2m1's largest value
  ActivationScales s;
  s.a1_gs = static_cast<float>(kRange / x_all);
  s.a2_gs = static_cast<float>(kRange / a_all);
  if (per_expert) {
    for (size_t e = 0; e < r.x_amax.size(); ++e) {
      s.a1_gs_per_expert.push_back(r.x_amax[e] > 0 ? static_cast<float>(kRange / r.x_amax[e]) : s.a1_gs);
      s.a2_gs_per_expert.push_back(r.act_amax[e] > 0 ? static_cast<float>(kRange / r.act_amax[e]) : s.a2_gs);
    }
  }
  return s;
}

ActivationScales layer_activation_scales(const HostLayer& layer) {
  ActivationScales s;
  if (layer.spec.precision != ActPrecision::a4) return s;
  auto take = [&](const std::vector<float>& v, float& scalar, std::vector<float>& per_expert) {
    if (v.size() == 1) scalar = v[0];
    else per_expert = v;
  };
  take(layer.a1_gs, s.a1_gs, s.a1_gs_per_expert);
  take(layer.a2_gs, s.a2_gs, s.a2_gs_per_expert);
  return s;
}

ReferenceOutput reference_forward(const HostLayer& layer, const HostInputs& in, ActPrecision precision,
                                  ActivationScales scales) {
  layer.validate();
  if (precision == ActPrecision::a4) {
    for (const auto& [name, v] : {std::pair{"a1_gs", scales.a1_gs}, std::pair{"a2_gs", scales.a2_gs}})
      if (!(v > 0 && std::isfinite(v)))
        throw Error(std::string("reference_forward: the a4 global scale ") + name + " must be finite and > 0, got " +
                    std::to_string(v));
    for (const auto& [name, v] : {std::pair{"a1_gs_per_expert", &scales.a1_gs_per_expert},
                                  std::pair{"a2_gs_per_expert", &scales.a2_gs_per_expert}}) {
      if (!v->empty() && v->size() != static_cast<size_t>(layer.spec.experts))
        throw Error(std::string("reference_forward: ") + name + " has " + std::to_string(v->size()) +
                    " values, expected E = " + std::to_string(layer.spec.experts));
      for (float s : *v)
        if (!(s > 0 && std::isfinite(s)))
          throw Error(std::string("reference_forward: the a4 global scale ") + name + " must be finite and > 0, got " +
                      std::to_string(s));
    }
  }
  const LayerSpec& spec = layer.spec;
  check_inputs(spec, in);

  const int64_t M = in.tokens, K = in.top_k, H = spec.hidden, I = spec.intermediate, E = spec.experts;
  const int64_t rows = spec.fc1_rows();
  const int block = scale_block(spec.format);
  const bool nvfp4 = spec.format == ScaleFormat::nvfp4;
  const bool gated = is_gated(spec.activation);
  // CSF scale planes (docs/CSF.md) are expanded once; plain planes are read in place.
  std::vector<uint8_t> fc1_expanded, fc2_expanded;
  const std::vector<uint8_t>& fc1_scales = plain_scale_plane(layer.w13_scale, layer.w13_scale_csf, fc1_expanded);
  const std::vector<uint8_t>& fc2_scales = plain_scale_plane(layer.w2_scale, layer.w2_scale_csf, fc2_expanded);

  ReferenceOutput result;
  result.out_f64.assign(M * H, 0.0);
  result.out.assign(M * H, 0);

  std::vector<double> x(M * H);
  for (int64_t i = 0; i < M * H; ++i) x[i] = static_cast<double>(bf16_to_float(in.x[i]));
  // a16 multiplies the bf16 x as given; per-expert a4 scales quantize x per routed pair (below).
  const bool x_per_expert = precision == ActPrecision::a4 && !scales.a1_gs_per_expert.empty();
  const std::vector<double> x_plain = x_per_expert ? x : std::vector<double>{};
  if (precision != ActPrecision::a16 && !x_per_expert)
    for (int64_t m = 0; m < M; ++m) quantize_activations(precision, x.data() + m * H, H, scales.a1_gs);

  // Slots (m * K + k) per local expert, in slot order; out-of-range ids are dropped here.
  std::vector<std::vector<int64_t>> slots(E);
  for (int64_t s = 0; s < M * K; ++s) {
    const int64_t e = static_cast<int64_t>(in.topk_ids[s]) - spec.expert_begin;
    if (e >= 0 && e < E) slots[e].push_back(s);
  }

  // Where gate i and up i live among the FC1 rows (spec.gate_up_order); relu2 has only "gate" rows.
  std::vector<int64_t> gate_row(I), up_row(gated ? I : 0);
  for (int i = 0; i < I; ++i) {
    gate_row[i] = fc1_row_of(spec, false, i);
    if (gated) up_row[i] = fc1_row_of(spec, true, i);
  }

  result.x_amax.assign(E, 0.0);
  result.act_amax.assign(E, 0.0);
  std::vector<double> h, a;
  for (int64_t e = 0; e < E; ++e) {
    const auto& es = slots[e];
    const int64_t P = static_cast<int64_t>(es.size());
    if (P == 0) continue;
    for (int64_t p = 0; p < P; ++p)
      for (int64_t j = 0; j < H; ++j)
        result.x_amax[e] = std::max(result.x_amax[e], std::fabs(static_cast<double>(bf16_to_float(in.x[(es[p] / K) * H + j]))));

    // FC1: h[p, r] = x[m_p] . W1[e, r] (* global) (+ bias), for every slot p routed to e.
    const uint8_t* q1 = layer.w13.data() + e * rows * H / 2;
    const uint8_t* s1 = fc1_scales.data() + e * rows * H / block;
    // Per row: an [E, 2] layer scales its gate and up rows apart (HostLayer::fc1_global_scale).
    std::vector<double> g1(rows, 1.0);
    if (nvfp4)
      for (int64_t r = 0; r < rows; ++r) g1[r] = layer.fc1_global_scale(static_cast<int>(e), static_cast<int>(r));
    h.assign(P * rows, 0.0);
    // x of each slot: the token's row, or with per-expert a4 scales its row quantized with this expert's.
    std::vector<double> x_e;
    if (x_per_expert) {
      x_e.resize(P * H);
      for (int64_t p = 0; p < P; ++p) {
        std::copy_n(x_plain.data() + (es[p] / K) * H, H, x_e.data() + p * H);
        quantize_activations(precision, x_e.data() + p * H, H, scales.a1(e));
      }
    }
    auto x_of = [&](int64_t p) { return x_per_expert ? x_e.data() + p * H : x.data() + (es[p] / K) * H; };
    detail::parallel_for(rows, detail::worker_count(rows, static_cast<double>(H) * (P + 1)), [&](int64_t r0, int64_t r1) {
      std::vector<double> w(H);
      for (int64_t r = r0; r < r1; ++r) {
        decode_row(spec.format, q1, s1, r, H, w.data());
        const double b = spec.has_bias ? static_cast<double>(layer.w13_bias[e * rows + r]) : 0.0;
        for (int64_t p = 0; p < P; ++p) h[p * rows + r] = dot(x_of(p), w.data(), H) * g1[r] + b;
      }
    });

    // Activation in fp64, rounded once to the intermediate's precision (bf16 in a16; MXFP8 or NVFP4
    // blocks along I otherwise).
    a.assign(P * I, 0.0);
    for (int64_t p = 0; p < P; ++p) {
      for (int64_t i = 0; i < I; ++i) {
        const double g = h[p * rows + gate_row[i]];
        const double u = gated ? h[p * rows + up_row[i]] : 0.0;
        a[p * I + i] = reference_activation(spec, g, u);
        result.act_amax[e] = std::max(result.act_amax[e], std::fabs(a[p * I + i]));
      }
      quantize_activations(precision, a.data() + p * I, I, scales.a2(e));
    }

    // FC2 and the weighted sum: out[m_p, r] += w_p * (a_p . W2[e, r] (* global) (+ bias)). Row r of out
    // belongs to one thread; slots are added in slot order, experts in expert order.
    const uint8_t* q2 = layer.w2.data() + e * H * I / 2;
    const uint8_t* s2 = fc2_scales.data() + e * H * I / block;
    const double g2 = nvfp4 ? static_cast<double>(layer.w2_global_scale[e]) : 1.0;
    detail::parallel_for(H, detail::worker_count(H, static_cast<double>(I) * (P + 1)), [&](int64_t r0, int64_t r1) {
      std::vector<double> w(I);
      for (int64_t r = r0; r < r1; ++r) {
        decode_row(spec.format, q2, s2, r, I, w.data());
        const double b = spec.has_bias ? static_cast<double>(layer.w2_bias[e * H + r]) : 0.0;
        for (int64_t p = 0; p < P; ++p) {
          const double y = dot(a.data() + p * I, w.data(), I) * g2 + b;
          const int64_t m = es[p] / K;
          result.out_f64[m * H + r] += static_cast<double>(in.topk_weights[es[p]]) * y;
        }
      }
    });
  }

  for (int64_t i = 0; i < M * H; ++i) result.out[i] = double_to_bf16(result.out_f64[i]);
  return result;
}

Agreement compare(const std::vector<float>& actual, const std::vector<double>& expected) {
  if (actual.size() != expected.size())
    throw Error("compare: actual has " + std::to_string(actual.size()) + " values, expected has " +
                std::to_string(expected.size()));
  Agreement r;
  double diff2 = 0, ref2 = 0, act2 = 0, cross = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], b = expected[i];
    if (!std::isfinite(a)) {
      ++r.nonfinite;
      continue;
    }
    const double d = a - b;
    diff2 += d * d;
    ref2 += b * b;
    act2 += a * a;
    cross += a * b;
    r.max_abs = std::max(r.max_abs, std::fabs(d));
  }
  if (r.nonfinite > 0) {
    // A NaN metric would make "metric <= tolerance" false but "!(metric > tolerance)" true; report the
    // worst finite values instead so every way of writing the check fails.
    r.rel_l2 = std::numeric_limits<double>::infinity();
    r.max_abs = std::numeric_limits<double>::infinity();
    r.max_scaled = std::numeric_limits<double>::infinity();
    r.cosine = -1.0;
    return r;
  }
  const double rms = actual.empty() ? 0.0 : std::sqrt(ref2 / static_cast<double>(actual.size()));
  for (size_t i = 0; i < actual.size(); ++i) {
    const double d = std::fabs(actual[i] - expected[i]), scale = std::fabs(expected[i]) + rms;
    r.max_scaled = std::max(r.max_scaled, scale > 0 ? d / scale : (d > 0 ? std::numeric_limits<double>::infinity() : 0.0));
  }
  r.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : (diff2 > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  // Two all-zero vectors agree perfectly; one zero vector against a nonzero one does not.
  if (ref2 > 0 && act2 > 0) r.cosine = cross / (std::sqrt(ref2) * std::sqrt(act2));
  else r.cosine = (ref2 == 0 && act2 == 0) ? 1.0 : 0.0;
  return r;
}

}  // namespace moejit
