// Planner: family and tile from the layer geometry and the token count.
#include "moejit/planner.hpp"

#include <fmt/format.h>

#include <algorithm>
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
// Token columns held in registers per pass: enough for the expected tokens per expert, at most 8
// tiles (64 tokens); an expert with more tokens takes more passes over its weights.
int decode_ntiles(const LayerSpec& spec, int tokens) {
  // A single expert can receive every token; size for min(M, 64) so small batches never re-read.
  int cols = std::min(tokens, 64);
  (void)spec;
  int nt = (cols + 7) / 8;
  return std::clamp(nt, 1, 8);
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
  fc1.warps = 4;
  fc1.ntiles = decode_ntiles(spec, std::max(tokens, 1));
  KernelKey fc2 = fc1;
  fc2.kind = KernelKind::decode_fc2;
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
