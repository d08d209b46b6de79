#pragma once
// Helpers shared by the GPU tests: layers of random FP4 codes (fast at any size), running one forward
// with a poisoned output, and comparing with the fp64 CPU reference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "moejit/codecs.hpp"
#include "moejit/reference.hpp"
#include "moejit/runtime.hpp"

namespace moejit::test {

// GPU output vs fp64 reference: bf16 output rounding alone gives rel_l2 ~1e-3; fp32 tensor-core
// accumulation, fp32 activations and rare bf16 rounding flips of the intermediate stay well below.
inline constexpr double kRelL2Tolerance = 4e-3;
inline constexpr double kCosineTolerance = 0.99999;

// Random FP4 codes and scale codes drawn so that dequantized weights have magnitude ~ 1/sqrt(K):
// quantizing floats on the host is too slow for real model sizes, and random codes exercise every
// code point, including -0.
inline HostLayer random_code_layer(const LayerSpec& spec, uint64_t seed) {
  HostLayer L;
  L.spec = spec;
  std::mt19937_64 rng(seed);
  auto fill_bytes = [&](std::vector<uint8_t>& v, size_t n) {
    v.resize(n);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t r = rng();
      for (int b = 0; b < 8; ++b) v[i + b] = static_cast<uint8_t>(r >> (8 * b));
    }
    for (; i < n; ++i) v[i] = static_cast<uint8_t>(rng());
  };
  const size_t E = spec.experts, H = spec.hidden, I = spec.intermediate, R = spec.fc1_rows();
  const int blk = scale_block(spec.format);
  fill_bytes(L.w13, E * R * H / 2);
  fill_bytes(L.w2, E * H * I / 2);
  auto scales = [&](std::vector<uint8_t>& v, size_t n, int k) {
    v.resize(n);
    // Target dequantized magnitude ~ 1/sqrt(k); e2m1 codes average ~2.6 in magnitude.
    const double target = 1.0 / std::sqrt(static_cast<double>(k)) / 2.6;
    std::uniform_int_distribution<int> jitter(-1, 1);
    for (auto& c : v) {
      if (spec.format == ScaleFormat::mxfp4) {
        c = static_cast<uint8_t>(127 + static_cast<int>(std::lround(std::log2(target))) + jitter(rng));
      } else {
        // e4m3 scale near 64 (global scale carries the rest), varied by the jitter
        c = float_to_e4m3(static_cast<float>(64.0 * std::exp2(jitter(rng) * 0.5)));
      }
    }
  };
  scales(L.w13_scale, E * R * H / blk, static_cast<int>(H));
  scales(L.w2_scale, E * H * I / blk, static_cast<int>(I));
  if (spec.format == ScaleFormat::nvfp4) {
    std::uniform_real_distribution<float> u(0.7f, 1.3f);
    L.w13_global_scale.resize(E);
    L.w2_global_scale.resize(E);
    for (auto& g : L.w13_global_scale) g = u(rng) / 64.f / 2.6f / std::sqrt(static_cast<float>(H));
    for (auto& g : L.w2_global_scale) g = u(rng) / 64.f / 2.6f / std::sqrt(static_cast<float>(I));
  }
  if (spec.has_bias) {
    std::normal_distribution<float> n(0.f, 0.1f);
    L.w13_bias.resize(E * R);
    L.w2_bias.resize(E * H);
    for (auto& b : L.w13_bias) b = n(rng);
    for (auto& b : L.w2_bias) b = n(rng);
  }
  return L;
}

struct DeviceInputs {
  DeviceBuffer x, ids, weights, out, workspace;
  size_t workspace_bytes = 0;
};

inline DeviceInputs upload_inputs(Runtime& rt, const PreparedLayer& layer, const HostInputs& in, int max_tokens) {
  DeviceInputs d;
  d.x = DeviceBuffer::from(in.x);
  d.ids = DeviceBuffer::from(in.topk_ids);
  d.weights = DeviceBuffer::from(in.topk_weights);
  d.out = DeviceBuffer(static_cast<size_t>(in.tokens) * in.hidden * 2);
  d.workspace_bytes = rt.workspace_size(layer, max_tokens);
  d.workspace = DeviceBuffer(d.workspace_bytes);
  d.workspace.fill_bytes(0xA5);  // garbage: the kernels must not rely on a zeroed workspace
  return d;
}

inline ForwardArgs args_for(DeviceInputs& d, int tokens) {
  ForwardArgs a;
  a.x = d.x.ptr();
  a.topk_ids = d.ids.ptr();
  a.topk_weights = d.weights.ptr();
  a.out = d.out.ptr();
  a.tokens = tokens;
  a.workspace = d.workspace.ptr();
  a.workspace_bytes = d.workspace_bytes;
  return a;
}

// Poisons out with NaN (0xFFFF), runs forward eagerly, synchronizes and returns the bf16 output.
inline std::vector<uint16_t> run_poisoned(Runtime& rt, const PreparedLayer& layer, DeviceInputs& d, int tokens,
                                          Family force = Family::automatic) {
  d.out.fill_bytes(0xFF);
  ForwardArgs a = args_for(d, tokens);
  a.force = force;
  rt.forward(layer, a);
  return d.out.to_vector<uint16_t>(static_cast<size_t>(tokens) * layer.spec().hidden);
}

inline std::vector<float> to_float(const std::vector<uint16_t>& bf) {
  std::vector<float> f(bf.size());
  for (size_t i = 0; i < bf.size(); ++i) f[i] = bf16_to_float(bf[i]);
  return f;
}

}  // namespace moejit::test
