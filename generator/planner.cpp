// Planner: the family by M, then the family's own plan (generator/families/).
#include "moejit/planner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "generator/families/decode.hpp"
#include "generator/families/act_quant.hpp"
#include "generator/families/family.hpp"
#include "moejit/error.hpp"

namespace moejit {

int batch_from_tokens(const LayerSpec& spec) {
  // The batch family wins once an expert gets about 2, 6 and 8 pairs on average for 2.4, 12.4 and 22 MB
  // of FP4 weights per expert: the larger an expert, the more pairs its decode slabs carry before a
  // staged token tile pays (perf-log v24). Never while routing stays inside the decode CTAs.
  const double weight_mb =
      (static_cast<double>(spec.fc1_rows()) * spec.hidden + static_cast<double>(spec.hidden) * spec.intermediate) / 2e6;
  const double pairs_per_expert = weight_mb < 4 ? 2 : weight_mb < 16 ? 6 : 8;
  const int by_pairs = static_cast<int>(std::ceil(pairs_per_expert * spec.experts / spec.top_k));
  return std::clamp(std::max(by_pairs, detail::kInlineRouteMaxPairs / spec.top_k + 1), 1, kDecodeMaxTokens + 1);
}

// From 56 pairs per expert on average: at 48 the batch family is about 10 % faster on the bundled layers
// measured, at 64 the prefill family's 96-pair tiles are 14-25 % faster (perf-log v42).
int prefill_from_tokens(const LayerSpec& spec, Arch arch) {
  if (arch != Arch::sm_90a) return kMaxTokens + 1;
  constexpr double kPairsPerExpert = 56;
  const int by_pairs = static_cast<int>(std::ceil(kPairsPerExpert * spec.experts / spec.top_k));
  return std::clamp(std::max(by_pairs, batch_from_tokens(spec)), 1, kMaxTokens + 1);
}

Plan make_plan(const LayerSpec& spec, Arch arch, int tokens, int sm_count, Family force,
               const TuningOverrides& tuning) {
  spec.validate();
  if (tokens < 0) throw Error(fmt::format("tokens must be >= 0, got {}", tokens));
  if (tokens > kMaxTokens) throw Error(fmt::format("a forward serves at most {} tokens, asked for {}", kMaxTokens, tokens));
  const Family family = force != Family::automatic               ? force
                        : tokens >= prefill_from_tokens(spec, arch) ? Family::prefill
                        : tokens >= batch_from_tokens(spec)         ? Family::batch
                                                                    : Family::decode;
  const detail::KernelFamily& f = detail::planned_family(family);
  if (tokens > f.max_tokens)
    throw Error(fmt::format("the {} family serves at most {} tokens, asked for {}", f.name, f.max_tokens, tokens));
  Plan plan = f.plan(detail::PlanRequest{spec, arch, tokens, sm_count > 0 ? sm_count : 132, tuning});
  // a8/a4: the act_quant pre-pass (templates/moe_act_quant.cuh) quantizes the input first, once per token
  // or once per pair (the layer's a1_gs decides at prepare: runtime/families/act_quant.cpp); the prefill
  // family's gather quantizes per pair itself, so a prefill forward skips a per-pair pass.
  if (spec.precision != ActPrecision::a16 && !plan.kernels.empty())
    plan.kernels.insert(plan.kernels.begin(), detail::act_quant_key(spec, arch));
  return plan;
}

std::vector<KernelKey> keys_for_range(const LayerSpec& spec, Arch arch, int max_tokens, int sm_count, Family force,
                                      const TuningOverrides& tuning) {
  std::set<KernelKey> keys;
  for (int m = 1; m <= max_tokens; ++m)
    for (const auto& k : make_plan(spec, arch, m, sm_count, force, tuning).kernels) keys.insert(k);
  return {keys.begin(), keys.end()};
}

std::string Plan::describe() const {
  std::string s = fmt::format("M={} family={} launch={}", tokens, to_string(family), to_string(launch));
  for (const auto& k : kernels) s += fmt::format(" {}", k.str());
  return s;
}

namespace {
// A key reading the planes of csf_scales (batched_csf_scales for the batch and prefill families): the bits its
// kind reads, and, for the decode family, the tile fitted to its CSF scale stages (fit_decode_csf_key).
KernelKey csf_key(KernelKey k, int csf_scales, int batched_csf_scales) {
  const Family family = detail::family_of(k.kind).family;
  k.csf_scales = family == Family::batch || family == Family::prefill ? batched_csf_scales : csf_scales;
  k = k.normalized();
  if (family == Family::decode) k = detail::fit_decode_csf_key(k);
  return k;
}
}  // namespace

Plan with_csf_scales(Plan plan, int csf_scales, int batched_csf_scales) {
  for (KernelKey& k : plan.kernels) k = csf_key(k, csf_scales, batched_csf_scales);
  return plan;
}

Plan with_csf_scales(Plan plan, int csf_scales) { return with_csf_scales(std::move(plan), csf_scales, csf_scales); }

std::vector<KernelKey> with_csf_scales(std::vector<KernelKey> keys, int csf_scales, int batched_csf_scales) {
  std::vector<KernelKey> out;
  for (const KernelKey& raw : keys) {
    const KernelKey k = csf_key(raw, csf_scales, batched_csf_scales);
    if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  }
  return out;
}

std::vector<KernelKey> with_csf_scales(std::vector<KernelKey> keys, int csf_scales) {
  return with_csf_scales(std::move(keys), csf_scales, csf_scales);
}

}  // namespace moejit
