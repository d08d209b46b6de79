#pragma once
// The planner picks kernel family and tile from (M, K, E, H, I, SM count). Pure host code: the CLI's
// `plan` and `prewarm` use it without a GPU.
#include <string>
#include <vector>

#include "moejit/key.hpp"

namespace moejit {

enum class Family { automatic, decode, batch };
std::string_view to_string(Family f);
Family parse_family(std::string_view s);

// How the decode family's FC1 and FC2 are launched: FC2 as a programmatic dependent of FC1 (default,
// measured fastest), two plain launches, or one cooperative launch with a grid barrier
// (decode_fused). MOEJIT_DECODE_LAUNCH=pdl|plain|cooperative selects one, for comparisons.
enum class DecodeLaunch { pdl, plain, cooperative };
std::string_view to_string(DecodeLaunch l);

struct Plan {
  Family family = Family::decode;
  DecodeLaunch launch = DecodeLaunch::pdl;
  std::vector<KernelKey> kernels;  // in launch order
  int tokens = 0;
  std::string describe() const;    // one line for logs and the CLI
};

// Largest M the decode family serves.
inline constexpr int kDecodeMaxTokens = 256;
// Largest M one forward serves (the batch family's grids and the workspace's indices stay in range).
inline constexpr int kMaxTokens = 65536;
// From this many tokens on, the automatic plan is the batch family (docs/PERFORMANCE.md v24): the measured
// cutover in pairs per expert for the layer's expert size, never while the decode family routes inline
// (M * top_k <= 128), and at most kDecodeMaxTokens + 1. Pure function of a valid spec's geometry
// (experts, top_k, hidden, intermediate, activation); thread-safe; does not throw.
int batch_from_tokens(const LayerSpec& spec);
// Up to this many (token, slot) pairs the decode kernels may route inside each CTA (no route launch):
// 64 with two pairs per lane (key field i1), 128 with four (i2), where FC2 sums the top-k in its CTAs.
inline constexpr int kInlineRouteMaxPairs = 128;
inline constexpr int kInlineRoutePairsNarrow = 64;

// Throws moejit::Error when a forced family cannot serve M.
Plan make_plan(const LayerSpec& spec, Arch arch, int tokens, int sm_count, Family force = Family::automatic);
// Every distinct key forward may need for 1..max_tokens tokens.
std::vector<KernelKey> keys_for_range(const LayerSpec& spec, Arch arch, int max_tokens, int sm_count,
                                      Family force = Family::automatic);

}  // namespace moejit
