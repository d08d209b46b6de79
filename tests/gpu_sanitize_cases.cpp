// One kernel family at one shape, for compute-sanitizer (tools/gpu_sanitize.sh runs this under memcheck,
// racecheck, synccheck and initcheck): prepare a layer, run a few forwards of the family, check the
// output against the fp64 CPU reference at the small shape, and exit.
//
//   gpu_sanitize_cases --family decode|cooperative|batch|wgmma|prefill|csf|csf-stream|csf-batch|csf-prefill|
//                               decode-a8|decode-a4|wgmma-a8|wgmma-a4|prefill-a8|prefill-a4|prefill-teams|
//                               prefill-cluster
//                      --shape small|long|real
//
// decode: the default decode launches (route kernel or inline routing, FC1, FC2/FC2-sum); cooperative:
// MOEJIT_DECODE_LAUNCH=cooperative (one launch with a grid barrier, read by the Runtime's constructor);
// batch: the batch family below the warpgroup-MMA cutover; wgmma: the
// batch family at enough pairs per expert for warpgroup MMA (sm_90a); prefill: the prefill family forced
// (sm_90a: gather, the persistent producer/consumer FC kernels, combine); csf: the decode launches with
// CSF scale reads (PrepareOptions: every plane read as CSF, docs/CSF.md §8: the offsets, base bytes and
// exception lists the kernels walk); csf-stream: the same with the streaming FC1 and FC2-sum; csf-batch: the
// batch family with CSF scale reads, register-fed and warpgroup-MMA (sm_90a) token counts; csf-prefill: the
// prefill family with CSF scale reads (sm_90a: the producer copies offsets, the consumers rebuild the
// scales); decode-a8, decode-a4, wgmma-a8, wgmma-a4, prefill-a8, prefill-a4: decode, wgmma and prefill
// with the layer in the a8 or a4 activation precision (x quantized by the pre-pass or where FC1 stages it,
// the intermediate in FC1's epilogue, a8's scale blocks exchanged between warp pairs or slab groups
// through shared memory; a4 with calibrated scales). Every case also runs the weight-repack (prepare)
// kernel and, where the plan has it, the route kernel. small: 3 experts, H 96, I 160 (tails in every
// tile); long: the same experts with H 1008 and I 672, so a unit's K runs through more chunks than the
// deepest ring has stages and every stage is refilled while the kernel runs (at the small shape no stage is
// ever reused, so a missing order between a stage's last readers and its next copy cannot show); real:
// gpt-oss-120b's layer (random FP4 codes; no reference check there, it would take minutes
// under the sanitizer's slowdown). The workspace is left as cuMemAlloc returns it, so initcheck sees any
// read of memory no kernel wrote. Exit 0 ok, 1 wrong output, 2 error, 77 no GPU.
#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "moejit/codecs.hpp"
#include "moejit/error.hpp"
#include "moejit/model_config.hpp"
#include "moejit/reference.hpp"
#include "moejit/runtime.hpp"

using namespace moejit;

namespace {

struct Case {
  Family family = Family::decode;
  std::vector<int> tokens;
  ScaleReads scales = ScaleReads::plain;
  ActPrecision precision = ActPrecision::a16;
};

LayerSpec small_layer() {
  LayerSpec s;
  s.format = ScaleFormat::nvfp4;
  s.activation = Activation::swigluoai;
  s.gate_up_order = GateUpOrder::interleaved;
  s.experts = 3;
  s.hidden = 96;
  s.intermediate = 160;
  s.top_k = 2;
  s.expert_begin = 5;
  s.has_bias = true;
  s.limit = 7.0f;
  return s;
}

// Token counts per family: a few decode sizes (inline routing and the route kernel), batch below and
// at the warpgroup-MMA cutover (14 pairs per expert).
Case case_for(const std::string& family, bool real) {
  if (family == "decode") return {Family::decode, {1, 5, real ? 64 : 33}};
  if (family == "cooperative") {
    ::setenv("MOEJIT_DECODE_LAUNCH", "cooperative", 1);
    return {Family::decode, {1, 9}};
  }
  if (family == "batch") return {Family::batch, {real ? 64 : 5, real ? 200 : 17}};
  if (family == "wgmma") return {Family::batch, {real ? 512 : 64}};
  if (family == "prefill") return {Family::prefill, {real ? 256 : 65, real ? 512 : 127}};
  if (family == "prefill-teams") {
    // Two teams of consumer warpgroups taking the units in turn (their ring walks skip each other's stages).
    ::setenv("MOEJIT_PREFILL_TILE_FC1", "w8n8d3g2", 1);
    ::setenv("MOEJIT_PREFILL_TILE_FC2", "w8n8d3g2", 1);
    return {Family::prefill, {real ? 256 : 65, real ? 512 : 127}};
  }
  if (family == "prefill-cluster") {
    // Clusters of two CTAs sharing each B block: copies into the other CTA's stages, arrivals on its
    // barriers, and (FC2 at the small shape: one row group) a pair whose second group is past the matrix.
    ::setenv("MOEJIT_PREFILL_TILE_FC1", "w8n8d3p2", 1);
    ::setenv("MOEJIT_PREFILL_TILE_FC2", "w8n8d3p2", 1);
    return {Family::prefill, {real ? 256 : 65, real ? 512 : 127}};
  }
  for (ActPrecision p : {ActPrecision::a8, ActPrecision::a4}) {
    const std::string suffix = fmt::format("-{}", to_string(p));
    if (family == "decode" + suffix) return {Family::decode, {1, 5, real ? 32 : 17}, ScaleReads::plain, p};
    if (family == "wgmma" + suffix) return {Family::batch, {real ? 512 : 64}, ScaleReads::plain, p};
    if (family == "prefill" + suffix) return {Family::prefill, {real ? 256 : 65, real ? 512 : 127}, ScaleReads::plain, p};
  }
  if (family == "csf") return {Family::decode, {1, 5, real ? 64 : 33}, ScaleReads::csf};
  if (family == "csf-stream") {
    ::setenv("MOEJIT_DECODE_FC1", "stream", 1);
    ::setenv("MOEJIT_DECODE_FC2", "sum", 1);
    return {Family::decode, {1, 5}, ScaleReads::csf};
  }
  if (family == "csf-batch") return {Family::batch, {real ? 64 : 5, real ? 512 : 64}, ScaleReads::csf};
  if (family == "csf-prefill") return {Family::prefill, {real ? 256 : 65, real ? 512 : 127}, ScaleReads::csf};
  throw Error(fmt::format("--family {}: expected decode, cooperative, batch, wgmma, prefill, csf, csf-stream, "
                          "csf-batch, csf-prefill, decode-a8, decode-a4, wgmma-a8, wgmma-a4, prefill-a8, prefill-a4, prefill-teams or "
                          "prefill-cluster",
                          family));
}

int run(const std::string& family, const std::string& shape) {
  if (shape != "small" && shape != "long" && shape != "real")
    throw Error(fmt::format("--shape {}: expected small, long or real", shape));
  const bool real = shape == "real";
  const Case c = case_for(family, real);
  LayerSpec spec = real ? load_model_config("gpt-oss-120b").local() : small_layer();
  if (shape == "long") {
    spec.hidden = 1008;       // FC1's K: 15 whole 64-wide chunks and a 48-wide one
    spec.intermediate = 672;  // FC2's K: 10 whole chunks and a 32-wide one
  }
  HostLayer host = real ? make_random_code_layer(spec, 11) : make_random_layer(spec, 11);
  if (c.precision == ActPrecision::a4) {
    const ActivationScales s = calibrate_a4_scales(host, make_random_inputs(spec, 16, 12), /*per_expert=*/false);
    host.a1_gs = {s.a1_gs};
    host.a2_gs = {s.a2_gs};
  }
  host.spec.precision = c.precision;
  host.validate();
  Runtime rt;
  auto layer = rt.prepare(host, PrepareOptions{c.scales});
  if (c.scales == ScaleReads::csf && layer->csf_scales() != 3) throw Error("the layer was not prepared with CSF reads");
  int max_tokens = 0;
  for (int m : c.tokens) max_tokens = std::max(max_tokens, m);
  const size_t ws_bytes = rt.workspace_size(*layer, max_tokens);
  DeviceBuffer workspace(ws_bytes);  // not initialized: initcheck reports any read before a write
  int failures = 0;
  for (int m : c.tokens) {
    const HostInputs in = make_random_inputs(spec, m, 100 + static_cast<uint64_t>(m), /*include_invalid=*/true);
    DeviceBuffer x = DeviceBuffer::from(in.x), ids = DeviceBuffer::from(in.topk_ids),
                 w = DeviceBuffer::from(in.topk_weights);
    DeviceBuffer out(static_cast<size_t>(m) * spec.hidden * 2);
    ForwardArgs a;
    a.x = x.ptr();
    a.topk_ids = ids.ptr();
    a.topk_weights = w.ptr();
    a.out = out.ptr();
    a.tokens = m;
    a.workspace = workspace.ptr();
    a.workspace_bytes = ws_bytes;
    a.force = c.family;
    const Plan plan = rt.plan(*layer, m, c.family);
    rt.forward(*layer, a);
    const std::vector<uint16_t> got = out.to_vector<uint16_t>(static_cast<size_t>(m) * spec.hidden);
    std::printf("gpu_sanitize_cases: %s %s M=%d: %s\n", family.c_str(), shape.c_str(), m, plan.describe().c_str());
    if (real) continue;
    std::vector<float> f(got.size());
    for (size_t i = 0; i < got.size(); ++i) f[i] = bf16_to_float(got[i]);
    const std::vector<double> want = reference_forward(host, in, c.precision, layer_activation_scales(host)).out_f64;
    const Agreement ag = compare(f, want);
    // Every pair routed to other ranks: the output is exactly zero (and rel_l2 undefined).
    const bool all_zero = std::all_of(want.begin(), want.end(), [](double v) { return v == 0; });
    const bool ok = ag.nonfinite == 0 && (all_zero ? std::all_of(f.begin(), f.end(), [](float v) { return v == 0; })
                                                   : ag.rel_l2 <= (c.precision == ActPrecision::a16 ? 4e-3 : 1e-2));
    if (!ok) {
      std::printf("gpu_sanitize_cases: FAILED: M=%d rel_l2 %.3e nonfinite %lld\n", m, ag.rel_l2,
                  static_cast<long long>(ag.nonfinite));
      ++failures;
    }
  }
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string family, shape;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--family") family = argv[i + 1];
    else if (a == "--shape") shape = argv[i + 1];
  }
  if (family.empty() || shape.empty()) {
    std::fprintf(stderr,
                 "usage: gpu_sanitize_cases --family decode|cooperative|batch|wgmma|prefill|csf|csf-stream|csf-batch|"
                 "csf-prefill|decode-a8|decode-a4|wgmma-a8|wgmma-a4|prefill-a8|prefill-a4|prefill-teams|prefill-cluster "
                 "--shape small|long|real\n");
    return 2;
  }
  try {
    std::string why;
    if (!gpu_available(&why)) {
      std::printf("gpu_sanitize_cases: skipped: no usable GPU (%s)\n", why.c_str());
      return 77;
    }
    return run(family, shape);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_sanitize_cases: error: %s\n", e.what());
    return 2;
  }
}
