#pragma once
// Helpers shared by the GPU tests: running one forward with a poisoned output and comparing with the
// fp64 CPU reference.
#include "catch_compat.hpp"
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "moejit/codecs.hpp"
#include "moejit/model_config.hpp"
#include "moejit/reference.hpp"
#include "moejit/runtime.hpp"
#include "moejit/safetensors.hpp"
#include "moejit/tuning.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/graph_capture.hpp"
#include "scoped_env.hpp"  // ScopedEnv: the planner overrides a case sets, restored at its end

namespace moejit::test {

// A Runtime planning with the overrides the environment holds now. A Runtime reads them once, when it
// is constructed (RuntimeOptions::tuning), so the cases that compare planner variants set them through a
// ScopedEnv and take the Runtime of that set here: one per distinct set, kept for the process. Layers
// prepared by any of them serve every other (they share the device's primary context).
inline Runtime& tuned_runtime() {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Runtime>> by_tuning;
  const TuningOverrides tuning = TuningOverrides::from_environment();
  const std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<Runtime>& rt = by_tuning[tuning.describe()];
  if (!rt) {
    RuntimeOptions options;
    options.tuning = tuning;
    rt = std::make_unique<Runtime>(options);
  }
  return *rt;
}

// GPU output vs fp64 reference: bf16 output rounding alone gives rel_l2 ~1e-3; fp32 tensor-core
// accumulation, fp32 activations and rare bf16 rounding flips of the intermediate stay well below.
inline constexpr double kRelL2Tolerance = 4e-3;
inline constexpr double kCosineTolerance = 0.99999;
// Per element, |gpu - ref| <= kElementTolerance * (|ref| + rms(ref)): bf16 rounding of the output is at most
// 2^-8 of |ref|, of the intermediate a few 2^-8 of rms over I-term sums; a wrong, missing or doubled
// element is off by its own size or the output's. Catches what rel_l2 averages away over large outputs
// (one wrong element among 184,320 moves rel_l2 by ~2e-3).
inline constexpr double kElementTolerance = 1.0 / 32;

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

// Captures one forward of `tokens` (family `force`) on its own stream into a CUDA graph and replays it three
// times on NaN-poisoned output: every replay must give `want` bit for bit.
inline void check_graph_replays(Runtime& rt, const PreparedLayer& layer, DeviceInputs& d, int tokens, Family force,
                                const std::vector<uint16_t>& want) {
  detail::OwnedStream stream;
  ForwardArgs a = args_for(d, tokens);
  a.force = force;
  a.stream = stream.get();
  const detail::CapturedGraph graph(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL, [&] { rt.forward(layer, a); });
  for (int rep = 0; rep < 3; ++rep) {
    d.out.fill_bytes(0xFF);
    graph.launch(stream.get());
    detail::check(detail::driver().cuStreamSynchronize(stream.get()), "cuStreamSynchronize");
    CHECK(d.out.to_vector<uint16_t>(static_cast<size_t>(tokens) * layer.spec().hidden) == want);
  }
}

// DESIGN §8's agreement checks of one GPU output against the fp64 reference: no non-finite value, a
// relative L2 error under kRelL2Tolerance, every element within kElementTolerance and, with_cosine, a
// cosine similarity above kCosineTolerance.
inline void check_agreement(const Agreement& ag, bool with_cosine) {
  CHECK(ag.nonfinite == 0);
  CHECK(ag.rel_l2 < kRelL2Tolerance);
  CHECK(ag.max_scaled < kElementTolerance);
  if (with_cosine) CHECK(ag.cosine > kCosineTolerance);
}

// The small layer most GPU cases use: 3 experts (local ids 5..7), top 2, H = 96 (1.5 chunks of K for FC1,
// 6 row slabs), I = 160 (2.5 chunks of K for FC2), gate/up interleaved for swigluoai; limit 7 for
// swigluoai, 3 for silu.
inline LayerSpec small_spec(ScaleFormat f, Activation a, bool bias, bool limit) {
  LayerSpec s;
  s.format = f;
  s.activation = a;
  s.experts = 3;
  s.hidden = 96;
  s.intermediate = 160;
  s.top_k = 2;
  s.expert_begin = 5;
  s.has_bias = bias;
  s.gate_up_order = a == Activation::swigluoai ? GateUpOrder::interleaved : GateUpOrder::gate_up;
  if (limit) s.limit = a == Activation::swigluoai ? 7.f : 3.f;
  return s;
}

// gpt-oss-120b's layer as the bundled config gives it (E128 H2880 I2880 top-4, MXFP4, swigluoai with its
// limit, biases, interleaved gate/up rows): the real geometry both families' GPU suites run.
inline LayerSpec gptoss_120b_spec() { return load_model_config("gpt-oss-120b").local(); }

// small_spec for every format x activation x bias x limit the layer accepts (a limit only for silu and
// swigluoai), in a fixed order: the families' full sweeps.
inline std::vector<LayerSpec> small_spec_variants() {
  std::vector<LayerSpec> v;
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4})
    for (Activation a : {Activation::silu, Activation::gelu_tanh, Activation::relu2, Activation::swigluoai})
      for (bool bias : {false, true})
        for (bool limit : {false, true})
          if (!limit || a == Activation::silu || a == Activation::swigluoai) v.push_back(small_spec(f, a, bias, limit));
  return v;
}

// Skews the routing of random inputs: the first pair of every even token goes to local expert 0 (about
// half of all first pairs, so that expert holds many tiles), and no pair goes to the last local expert
// (an expert with no pair between active ones). Ids outside the local range that the inputs hold stay.
inline void skew_routing(const LayerSpec& spec, HostInputs& in) {
  const int k = spec.top_k, first = spec.expert_begin, last = spec.expert_begin + spec.experts - 1;
  for (int m = 0; m < in.tokens; ++m)
    for (int j = 0; j < k; ++j) {
      int32_t& id = in.topk_ids[static_cast<size_t>(m) * k + j];
      if (j == 0 && m % 2 == 0) id = first;
      else if (id == last) id = first + 1;
    }
}

// A golden layer's expected output (expected.safetensors' out_f32 in golden directory `dir`), widened to
// double for compare().
inline std::vector<double> golden_expected(const std::string& dir) {
  SafetensorsFile expected = read_safetensors(dir + "/expected.safetensors");
  const Tensor& t = expected.tensors.at("out_f32");
  std::vector<double> want(t.data.size() / 4);
  for (size_t i = 0; i < want.size(); ++i) {
    float v;
    std::memcpy(&v, t.data.data() + 4 * i, 4);
    want[i] = v;
  }
  return want;
}

inline std::vector<float> to_float(const std::vector<uint16_t>& bf) {
  std::vector<float> f(bf.size());
  for (size_t i = 0; i < bf.size(); ++i) f[i] = bf16_to_float(bf[i]);
  return f;
}

}  // namespace moejit::test
