// Planner: family and tile from the layer geometry and the token count.
#include "moejit/planner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "moejit/error.hpp"

namespace moejit {

std::string_view to_string(Family f) {
  switch (f) {
    case Family::automatic: return "auto";
    case Family::decode: return "decode";
  }
  return "?";
}

Family parse_family(std::string_view s) {
  if (s == "auto") return Family::automatic;
  if (s == "decode") return Family::decode;
  throw Error(fmt::format("family '{}' is unknown (expected auto or decode)", s));
}

namespace {
// Token columns held in registers per pass (8 per tile, at most 8 tiles). Sized for the busiest expert
// under balanced routing, mean + 3 sigma + 1 of Binomial(M*K, 1/E), capped by M: more tiles than
// tokens cost registers (occupancy) and idle MMAs, and an expert with more tokens than the tiles hold
// is still served correctly by another pass over its weights.
int decode_ntiles(const LayerSpec& spec, int tokens) {
  const double mean = static_cast<double>(tokens) * spec.top_k / spec.experts;
  const double busiest = mean + 3.0 * std::sqrt(mean) + 1.0;
  const int cols = std::min(tokens, static_cast<int>(std::ceil(busiest)));
  int nt = 1;
  while (nt * 8 < cols) nt *= 2;  // 1, 2, 4, 8: few variants to prewarm
  return std::clamp(nt, 1, 8);
}

// MOEJIT_DECODE_TILE="w<warps>d<depth>[o<CTAs per SM>]" overrides the decode tile, for tuning sweeps
// with `moejit bench` (keys stay canonical, so the cache and prewarm see exactly what runs).
void apply_tuning_overrides(KernelKey& k) {
  const char* env = std::getenv("MOEJIT_DECODE_TILE");
  if (!env || !*env) return;
  int warps = 0, depth = 0, blocks = 0;
  const int n = std::sscanf(env, "w%dd%do%d", &warps, &depth, &blocks);
  if (n < 2 || warps < 1 || warps > 16 || depth < 1 || depth > 8 || blocks < 0 || blocks > 32)
    throw Error(fmt::format("MOEJIT_DECODE_TILE='{}' must look like w4d2 or w4d2o6 (warps 1..16, depth 1..8, "
                            "CTAs per SM 0..32)", env));
  k.warps = warps;
  k.depth = depth;
  k.min_blocks = blocks;
}

KernelKey base_key(const LayerSpec& spec, Arch arch) {
  KernelKey k;
  k.arch = arch;
  k.format = spec.format;
  k.activation = spec.activation;
  k.precision = ActPrecision::a16;
  k.experts = spec.experts;
  k.hidden = spec.hidden;
  k.intermediate = spec.intermediate;
  k.bias = spec.has_bias;
  k.limit = spec.limit.has_value();
  return k;
}
}  // namespace

Plan make_plan(const LayerSpec& spec, Arch arch, int tokens, int sm_count, Family force) {
  spec.validate();
  if (tokens < 0) throw Error(fmt::format("tokens must be >= 0, got {}", tokens));
  (void)sm_count;
  Family family = force == Family::automatic ? Family::decode : force;
  if (family == Family::decode && tokens > kDecodeMaxTokens)
    throw Error(fmt::format("the decode family serves at most {} tokens, asked for {}", kDecodeMaxTokens, tokens));
  Plan plan;
  plan.family = family;
  plan.tokens = tokens;
  KernelKey route = base_key(spec, arch);
  route.kind = KernelKind::route;
  route.warps = 16;
  KernelKey fc1 = base_key(spec, arch);
  fc1.kind = KernelKind::decode_fc1;
  fc1.ntiles = decode_ntiles(spec, std::max(tokens, 1));
  // Four warps split K. Narrow token tiles: one chunk ahead with registers capped for 8 CTAs per SM
  // (a single wave at decode grids), the measured best of w2..w8 x d1..d4 x 4..8 CTAs/SM on the H200
  // (docs/PERFORMANCE.md). Wider tiles keep registers for their accumulators.
  fc1.warps = 4;
  fc1.depth = fc1.ntiles <= 2 ? 1 : (fc1.ntiles == 4 ? 2 : 1);
  fc1.min_blocks = fc1.ntiles <= 2 ? 8 : 0;
  apply_tuning_overrides(fc1);
  // Few pairs: every decode CTA routes for itself, saving the route launch.
  fc1.inline_route = static_cast<long long>(tokens) * spec.top_k <= kInlineRouteMaxPairs && spec.experts <= 1024;
  KernelKey fc2 = fc1;
  fc2.kind = KernelKind::decode_fc2;
  apply_tuning_overrides(fc2);
  if (fc1.inline_route)
    plan.kernels = {fc1.normalized(), fc2.normalized()};
  else
    plan.kernels = {route.normalized(), fc1.normalized(), fc2.normalized()};
  return plan;
}

std::vector<KernelKey> keys_for_range(const LayerSpec& spec, Arch arch, int max_tokens, int sm_count, Family force) {
  std::set<KernelKey> keys;
  for (int m = 1; m <= max_tokens; ++m)
    for (const auto& k : make_plan(spec, arch, m, sm_count, force).kernels) keys.insert(k);
  return {keys.begin(), keys.end()};
}

std::string Plan::describe() const {
  std::string s = fmt::format("M={} family={}", tokens, to_string(family));
  for (const auto& k : kernels) s += fmt::format(" {}", k.str());
  return s;
}

}  // namespace moejit
