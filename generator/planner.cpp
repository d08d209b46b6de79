// Planner: family and tile from the layer geometry and the token count.
#include "moejit/planner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "moejit/error.hpp"
#include "moejit/generator.hpp"

namespace moejit {

std::string_view to_string(Family f) {
  switch (f) {
    case Family::automatic: return "auto";
    case Family::decode: return "decode";
    case Family::batch: return "batch";
  }
  return "?";
}

std::string_view to_string(DecodeLaunch l) {
  switch (l) {
    case DecodeLaunch::pdl: return "pdl";
    case DecodeLaunch::plain: return "plain";
    case DecodeLaunch::cooperative: return "cooperative";
  }
  return "?";
}

Family parse_family(std::string_view s) {
  if (s == "auto") return Family::automatic;
  if (s == "decode") return Family::decode;
  if (s == "batch") return Family::batch;
  throw Error(fmt::format("family '{}' is unknown (expected auto, decode or batch)", s));
}

namespace {
// Token columns held in registers per pass (8 per tile, at most 8 tiles). The busiest expert under
// balanced routing has mean + 3 sigma + 1 of Binomial(M*K, 1/E) pairs (capped by M). Up to 32 of them
// (four passes) one 8-column tile serves it, walking its slab once per 8 pairs: the slab is back from
// the L2 for the later passes, and the narrow tile keeps the register cap (hence the warps per SM) of
// the one-pass kernels. v14 measured that against 2-8 tiles, same runs, µs (n1 tiles as planned now):
// Qwen3-30B-A3B M = 40/48/64 175.6/188.9/194.8 -> 125.6/135.3/143.2, M = 96/128/192/256
// 208.1/462.1/497.7/528.0 -> 173.1/220.4/297.0/376.4 (busiest ~29 pairs at 256); gpt-oss-120b M =
// 128/192/256 716.8/770.1/1527.0 -> 499.5/626.4/781.0; DeepSeek-V3 M = 128/256 2700.3/5833.9 ->
// 1837.3/2637.9; Nemotron-3-Nano M = 64/128/256 436.3/488.4/875.2 -> 261.5/339.7/589.0. Busier experts
// (few experts, many tokens; not measured) keep tiles for the busiest expert: more tiles than tokens
// cost registers (occupancy) and idle MMAs, and an expert with more tokens than the tiles hold is
// still served correctly by another pass over its weights.
int decode_ntiles(const LayerSpec& spec, int tokens) {
  const double mean = static_cast<double>(tokens) * spec.top_k / spec.experts;
  const double busiest = mean + 3.0 * std::sqrt(mean) + 1.0;
  const int cols = std::min(tokens, static_cast<int>(std::ceil(busiest)));
  if (cols <= 32) return 1;
  int nt = 1;
  while (nt * 8 < cols) nt *= 2;  // 1, 2, 4, 8: few variants to prewarm
  return std::clamp(nt, 1, 8);
}

// Distinct experts M tokens are expected to touch under balanced routing: E * (1 - (1 - K/E)^M).
double expected_experts(const LayerSpec& spec, int tokens) {
  const double p = static_cast<double>(spec.top_k) / spec.experts;
  return std::min<double>(spec.experts, spec.experts * (1.0 - std::pow(1.0 - p, tokens)));
}

// Decode grids are (16-row slabs) x (active experts) CTAs whose warps split K. At decode a warp's
// life is a chain of dependent chunk loads, so the tile aims for one wave that fills the SMs with
// warps (32 per SM at 64 registers). FC2 (split_k_freely): warps per CTA = one-wave warps / CTAs,
// rounded down to 4, 2 or 1 (1 and 2 measured best for grids of thousands of CTAs, 6 and 8 slower
// everywhere, docs/PERFORMANCE.md); FC1 keeps 4 warps, 8 on grids small enough for one wave of
// 8-warp CTAs, 2 where only 2-warp CTAs make one wave. Registers: 80 per thread (6 CTAs of 4 warps
// per SM), which lets the activations ride one chunk ahead, unless the grid fits one wave only at 8
// CTAs per SM; then 64. Two token tiles: 4 warps, FC1 at 128 registers and FC2 at 80 (no spills).
void choose_decode_tile(KernelKey& k, double ctas, int sm_count, bool split_k_freely) {
  if (k.ntiles > 2) {  // wide token tiles keep registers for their accumulators
    k.warps = 4;
    k.depth = k.ntiles == 4 ? 2 : 1;
    k.min_blocks = 0;
    return;
  }
  const double one_wave_warps = 32.0 * sm_count;
  const int warps = !split_k_freely || k.ntiles > 1 || ctas * 4 <= one_wave_warps
                        ? 4
                        : (ctas * 2 <= one_wave_warps ? 2 : 1);
  k.warps = warps;
  k.depth = 1;
  if (!split_k_freely && k.ntiles == 1 && ctas * 8 <= 24.0 * sm_count) {
    // A grid too small to give 4-warp CTAs 20+ warps per SM (Qwen3 M=1: 384 CTAs): 8 warps split
    // K, 3 CTAs per SM at 85 registers.
    k.warps = 8;
    k.min_blocks = 3;
    return;
  }
  if (split_k_freely && k.ntiles == 2 && (k.intermediate + 63) / 64 <= 16) {
    // FC2 with two token tiles over a short K (Qwen3-30B-A3B, I = 768: 12 chunks): 4 warps would walk 3
    // chunks each, so per-CTA costs (routing lists, the cross-warp reduction, partial rows, the ticket)
    // outweigh the loads; 2 warps of 6 chunks at 12 CTAs per SM keep the 80 registers. Qwen3 M = 40/48/64,
    // two runs each, w4d1o6 : w2d1o12 µs: 198.2/212.5/216.7, 198.0/212.4/216.6 : 176.0/189.2/194.2,
    // 175.5/188.7/194.3 (w2d2o12 196.3, w2d2o10 200.2, w4d2o4 251.7 at M = 64).
    k.warps = 2;
    k.min_blocks = 12;
    return;
  }
  if (!split_k_freely && k.ntiles == 1 && ctas > 8.0 * sm_count && ctas * 2 <= 24.0 * sm_count) {
    // Too big for one wave of 4-warp CTAs at any register cap, small enough for one wave of 2-warp
    // CTAs at 85 registers (gpt-oss M=2: 1260 CTAs; 45.6 µs against 50.0 at 4 warps).
    k.warps = 2;
    k.min_blocks = 12;
    return;
  }
  if (warps == 4) {
    const bool fits_at_6 = ctas <= 6.0 * sm_count, fits_at_8 = ctas <= 8.0 * sm_count;
    if (k.ntiles == 2) {
      // FC1 holds two matrices x two tiles of accumulators: 128 registers (no spill), FC2 80.
      k.min_blocks = k.kind == KernelKind::decode_fc1 ? 4 : 6;
    } else {
      k.min_blocks = !fits_at_6 && fits_at_8 ? 8 : 6;
    }
  } else {
    k.min_blocks = 32 / warps;
  }
}

// FC2-sum's grid of H/16 whole slabs over the SMs: the busiest SM's slabs against the mean (1 when every
// SM holds as many; gpt-oss's 180 slabs on 132 SMs: 1.47).
double fc2_sum_imbalance(const LayerSpec& spec, int sm_count) {
  const int ctas = spec.hidden / 16;
  return std::ceil(static_cast<double>(ctas) / sm_count) * sm_count / ctas;
}

// FC2-sum (few pairs): one CTA (or `groups` CTAs) per 16-row slab of H works through every active expert, so the
// grid is fixed (H/16 x groups CTAs) and the tile sets how the CTA's warps cover (expert, K part) units: 16 warps (8
// when 3-4 CTAs share an SM: at most 32 warps per SM at 64+ registers) and K parts P = warps / S for
// S expected experts (1..4), so that at M = 1 every warp has one unit. Registers go to depth: as many
// chunks in flight per warp as the register cap allows (~12 registers per ring slot in ptxas output),
// at most the part's chunks and the key's limit of 8.
void choose_fc2_sum_tile(KernelKey& k, const LayerSpec& spec, int tokens, double experts_touched, int sm_count) {
  const int slots = std::max(1, static_cast<int>(std::lround(experts_touched)));
  const int ctas = spec.hidden / 16;
  k.min_blocks = std::max(1, (ctas + sm_count - 1) / sm_count);
  // Up to 4 tokens, two CTAs' registers per SM even where H/16 slabs leave one CTA per SM (Qwen3: 128
  // slabs): a CTA that takes the whole register file becomes resident only once every FC1 CTA on its
  // SM has ended, so its routing and first loads wait behind FC1's tail; at 64 registers it starts
  // beside FC1's last CTA. Qwen3, same runs, M = 1/2/4, µs: w16d4o1 15.6/21.0/33.5, 15.6/21.0/33.6 ->
  // w16d1o2 15.5/21.3/32.2, 15.4/21.3/32.2. With more tokens each warp walks several units and the
  // deeper ring wins: M = 6/8 in 4 columns 46.9/54.3, 46.5/54.5 (w16d4o1) against 51.4/59.5, 51.5/56.8.
  if (k.min_blocks == 1 && tokens <= 4) k.min_blocks = 2;
  k.warps = std::clamp(32 / k.min_blocks, 4, 16);
  k.parts = std::clamp(k.warps / slots, 1, 4);
  // Where H/16 whole slabs spread unevenly over the SMs (gpt-oss: 180 on 132 put two on 48 SMs, which
  // finish 5-10 us after the rest) and a slab holds enough units to split, each slab goes to 2 CTAs of
  // half the warps (groups): 360 CTAs, 2-3 per SM. The hand-over through the partial rows costs the
  // last CTA ~1 us, so one token (4 experts) keeps whole slabs. gpt-oss, same run, µs, M = 1/2/4/8,
  // g1 : g2 (w8d1o3): 24.8/37.2/66.8/138.8 : 25.2/35.9/65.0/131.1; DeepSeek-V3 (448 slabs, 1.18) M = 1/2/4
  // 58.3/115.1/221.6 : 59.1/114.5/219.0 and Qwen3 (128 slabs) lose or gain nothing, so they keep g1.
  // Where every expert the pairs can reach, split in K parts, fills the CTA's warps exactly once (gpt-oss
  // at 2 tokens: at most 8 experts x 2 parts on 16 warps), the whole slab stays in one CTA, without the
  // hand-over (v18, three rounds, µs, M = 2/3/4, g2 : g1 w16d1o2p2 : g1 w16d1o2p1: gpt-oss-120b
  // 34.9/52.8/61.8 : 34.4/54.3/64.3 : 37.1/53.8/64.4, gpt-oss-20b M = 2/3/4 35.0/45.4/62.5 : 34.4/39.4/64.8).
  const bool slab_fills_warps = std::min(tokens * spec.top_k, spec.experts) * k.parts == k.warps && k.parts >= 2;
  const bool uneven = fc2_sum_imbalance(spec, sm_count) > 1.25 && slots >= 6;
  if (uneven && !slab_fills_warps && k.warps % 2 == 0 && (k.warps / 2) % k.parts == 0) {
    k.groups = 2;
    k.warps /= 2;
    k.min_blocks = (2 * ctas + sm_count - 1) / sm_count;
  }
  // There, with whole slabs, two adjacent slabs per CTA (slabs 2): H/32 CTAs, at most one per SM, each
  // warp carrying both slabs of its unit through every chunk (two weight runs in flight for one set of
  // activation pieces), at the whole register file's 128 registers. The CTA starts only once its SM's
  // FC1 CTAs have all ended (~1 us later than beside FC1's last CTA) and the grid leaves 42 of 132 SMs
  // idle, but its warps move their bytes ~1.8x as fast (v20 timeline at M = 2: 0.43 us per two-slab chunk
  // against 0.38 per one-slab chunk; from the median first chunk to the last CTA's work done 11.0 against
  // 11.6 us). Three rounds each, µs, planned w16d1o2p2 : w16d2o1p2s2:
  // gpt-oss-120b M = 2 34.6 : 34.3 and 34.6 : 34.4 (7 experts), 37.4 : 36.9 (8 experts, seed 2);
  // gpt-oss-20b M = 2 34.7 : 34.0. One token (4 experts; w16d2o1p4s2 23.2 : 23.4) keeps one slab.
  if (uneven && slab_fills_warps && spec.hidden % 32 == 0 && spec.hidden / 32 <= sm_count) {
    k.slabs = 2;
    k.min_blocks = 1;
  }
  const int register_cap = std::min(255, 65536 / (k.min_blocks * k.warps * 32));
  // Registers per ring slot in ptxas output: ~12 for one slab; two slabs take 106/122/125 registers at
  // depth 1/2/3 (w16d1o1p2s2: 35.6 µs at gpt-oss M = 2 against d2's 34.4).
  const int per_chunk = k.slabs == 2 ? 20 : 12;
  const int chunks_per_part = ((spec.intermediate + 63) / 64 + k.parts - 1) / k.parts;
  k.depth = std::clamp((register_cap - 64) / per_chunk - 1, 1, std::clamp(chunks_per_part - 1, 1, 8));
  if (k.ntiles > 1) k.depth = std::min(k.depth, 2);
  // Each warp asks the L2 for its chunks two past its register ring; the first of those requests go out
  // before the wait for FC1, so FC2's first chunks are near when FC1 ends. Same-run sweep, µs, M = 1/2/4
  // (f0 : f2 : f3 : f4 : f6): gpt-oss 24.7/38.3/71.9 : 24.3/36.7/69.2 : 24.3/36.6/69.3 : 24.4/36.4/69.0 :
  // 25.3/36.9/69.5; DeepSeek M = 1 61.4 : 59.9 : 60.0 : 60.3 : 60.7, MXFP4 59.0 : 56.0 : 56.4 : 56.4 :
  // 56.8; Qwen3 M = 2 22.7 : 21.6 : 21.9 : 22.1 : 22.4. (The same in FC1 loses everywhere, e.g. gpt-oss
  // M = 4 85.6 against 72.1 at f8; the split FC2 loses at M = 32: 336.9 against 331.0. All measured
  // while FC2 still loaded its activations through the non-coherent path.)
  k.l2_ahead = 2;
}

// Variant switches for comparisons, where both variants apply: MOEJIT_DECODE_FC2=split|sum (inline routing).
// Returns whether `on` was chosen.
bool variant_from_env(const char* name, std::string_view on, std::string_view off, bool default_value) {
  const char* env = std::getenv(name);
  if (!env || !*env) return default_value;
  if (env == on) return true;
  if (env == off) return false;
  throw Error(fmt::format("{}='{}' must be {} or {}", name, env, off, on));
}

// MOEJIT_DECODE_TILE="w<warps>[n<token tiles>]d<depth>[o<CTAs per SM>][p<parts>][g<groups>][s<slabs>][c<columns>][f<L2 prefetch>][x<0|1>]" overrides
// the decode tile of FC1 and FC2 (decode_fc1_stream: d = stages, p = chunks per warp and stage),
// MOEJIT_DECODE_TILE_FC1 / _FC2 one kernel only (they win over the shared one), for tuning sweeps with
// `moejit bench` (keys stay canonical, so the cache and prewarm see exactly what runs).
void apply_tuning_overrides(KernelKey& k, const char* specific_variable) {
  const char* name = specific_variable;
  const char* env = std::getenv(name);
  if (!env || !*env) {
    name = "MOEJIT_DECODE_TILE";
    env = std::getenv(name);
  }
  if (!env || !*env) return;
  // Letter-number fields in the order w, n, d, o, p, g, s, c, f, x, m; w and d required.
  const std::string_view text(env), order("wndopgscfxm");
  int value[11] = {0, 1, 0, 0, 1, 1, 1, 8, 0, 0, 0};
  bool seen[11] = {false, false, false, false, false, false, false, false, false, false, false};
  size_t at = 0, last = 0;
  bool ok = true;
  while (ok && at < text.size()) {
    const size_t field = order.find(text[at]);
    ok = field != std::string_view::npos && (at == 0 ? field == 0 : field > last) && !seen[field];
    if (!ok) break;
    const char* begin = text.data() + at + 1;
    auto [ptr, ec] = std::from_chars(begin, text.data() + text.size(), value[field]);
    ok = ec == std::errc() && ptr != begin;
    seen[field] = true;
    last = field;
    at = static_cast<size_t>(ptr - text.data());
  }
  // Token tiles: 1, 2, 4 or 8 for register-fed MMAs, 1..32 with warpgroup MMA (m1; the key checks).
  ok = ok && seen[0] && seen[2] && value[0] >= 1 && value[0] <= 32 &&
       (value[10] == 1 ? value[1] >= 1 && value[1] <= 32
                       : value[1] == 1 || value[1] == 2 || value[1] == 4 || value[1] == 8) && value[2] >= 1 && value[2] <= 8 && value[3] >= 0 && value[3] <= 32 &&
       value[4] >= 1 && value[4] <= 8 && value[5] >= 1 && value[5] <= 16 && (value[6] == 1 || value[6] == 2) &&
       (value[7] == 8 || value[7] == 4) && value[8] >= 0 && value[8] <= 16 && (value[9] == 0 || value[9] == 1) &&
       (value[10] == 0 || value[10] == 1);
  if (!ok)
    throw Error(fmt::format("{}='{}' must look like w4d2, w4d2o6, w4n1d1o6, w8d4o2p2, w8d1o3p2g2, w4d4p4, w16d1o1p4s2, "
                            "w4d1o8c4, w8d1o4c4f2, w4d1o8c4x1 or w8n16d3o1m1 (warps 1..32, token tiles 1, 2, 4 or 8 (1..32 with m1), "
                            "depth 1..8, CTAs per SM 0..32, parts 1..8, CTAs per slab 1..8 (decode_pipe: FC2 warps 1..16), "
                            "slabs per CTA 1 or 2, columns 8 or 4, L2 prefetch 0..16 chunks, staged x 0 or 1, warpgroup MMA 0 "
                            "or 1)",
                            name, env));
  k.warps = value[0];
  if (seen[1]) k.ntiles = value[1];
  k.depth = value[2];
  k.min_blocks = value[3];
  if (seen[4]) k.parts = value[4];
  if (seen[5]) k.groups = value[5];
  // Slabs per CTA set the grid's shape, as the warps do: a tile without s has one (even where the
  // planner chose two), so that an override never meets a planned field it cannot combine with (g).
  k.slabs = seen[6] ? value[6] : 1;
  if (k.slabs == 2 && !seen[5]) k.groups = 1;  // two slabs per CTA keep each slab in one CTA
  if (seen[7]) k.columns = value[7];
  if (seen[8]) k.l2_ahead = value[8];
  if (seen[9]) k.x_staged = value[9] == 1;
  // Likewise the MMA kind: an override without m1 asks for the register-fed MMAs.
  k.wgmma = seen[10] && value[10] == 1;
}

// The inline routing level (KernelKey::inline_route) for `pairs` (token, slot) pairs: 1 up to 64 pairs;
// 2 up to 128 where FC2 sums the top-k inside one CTA per SM (wide: decode_fc2_sum is the default FC2
// and H/16 <= SMs, Qwen3-30B-A3B); 0 beyond. v14, same run, µs, route kernel : inline over 128 pairs,
// M = 9/12/16: Qwen3 64.2/74.6/86.8 : 60.9/69.2/83.7; DeepSeek-V3 (448 FC2-sum slabs, streamed FC1)
// 459.9/539.8/682.5 : 463.6/549.2/702.7, so it keeps the route kernel there.
// MOEJIT_DECODE_INLINE_PAIRS=N (0..128) replaces the rule by "inline up to N pairs", for measurements.
int inline_route_level(long long pairs, bool wide) {
  const char* env = std::getenv("MOEJIT_DECODE_INLINE_PAIRS");
  int most = wide ? kInlineRouteMaxPairs : kInlineRoutePairsNarrow;
  if (env && *env) {
    int v = -1;
    const std::string_view text(env);
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || ptr != text.data() + text.size() || v < 0 || v > kInlineRouteMaxPairs)
      throw Error(
          fmt::format("MOEJIT_DECODE_INLINE_PAIRS='{}' must be an integer in [0, {}]", env, kInlineRouteMaxPairs));
    most = v;
  }
  return pairs > most ? 0 : pairs <= kInlineRoutePairsNarrow ? 1 : 2;
}

// FC1 with inline routing: one CTA per item (grid), one wave walking the items (loop), or that wave
// with its weights streamed through shared memory (stream). MOEJIT_DECODE_FC1 overrides the choice.
enum class Fc1Variant { grid, loop, stream };
Fc1Variant fc1_variant_from_env(Fc1Variant default_value) {
  const char* env = std::getenv("MOEJIT_DECODE_FC1");
  if (!env || !*env) return default_value;
  const std::string_view v(env);
  if (v == "grid") return Fc1Variant::grid;
  if (v == "loop") return Fc1Variant::loop;
  if (v == "stream") return Fc1Variant::stream;
  throw Error(fmt::format("MOEJIT_DECODE_FC1='{}' must be grid, loop or stream", env));
}

// decode_fc1_stream's tile: 4 consumer warps, a ring of 3 stages of 4 chunks per warp (16 chunks,
// 17-18 KiB of a gated slab's weights and scales per stage), 3 CTAs per SM. Measured on DeepSeek-V3
// M = 2/4/8 (µs, NVFP4; MXFP4): w4d3p4 117.8/225.1/390.4; 110.3/210.4/362.2, w4d2p4 118.8/226.1/390.0;
// 114.4/220.4/379.0, w8d3p2 119.8/229.0/397.3; 112.0/216.4/370.9.
void choose_fc1_stream_tile(KernelKey& k) {
  k.kind = KernelKind::decode_fc1_stream;
  k.warps = 4;
  k.depth = 3;
  k.parts = 4;
  k.min_blocks = 0;
  k.min_blocks = decode_ctas_per_sm(k);
}

// 64-wide K chunks each warp of a register-fed FC1 CTA walks (K = H, split over the warps).
int fc1_chunks_per_warp(const KernelKey& fc1) { return ((fc1.hidden + 63) / 64 + fc1.warps - 1) / fc1.warps; }

// MMA columns per n-tile that carry a pair (KernelKey::columns): 4 where no expert has more than 4 pairs
// (M <= 4, each token routing to distinct experts: one pass over the weights either way, and half the
// block-scale FMAs), else 8. MXFP4's FC1 gains (gpt-oss M = 1/4 26.1/73.4 -> 24.8/72.2 us, DeepSeek-V3
// MXFP4 59.4/219.8 -> 58.5/216.7), and so does the streaming FC1 in both formats (DeepSeek-V3 M = 2/4,
// two runs: NVFP4 117.9/225.9, 118.4/227.1 -> 114.7/219.2, 114.4/218.7; MXFP4 110.6/211.2,
// 110.7/211.2 -> 107.3/205.2, 107.6/204.9). NVFP4's register-fed FC1 (its loads pinned ahead of the
// MMAs, slab_mma.cuh: kPinLoads) gains where its warps are short, up to 16 chunks (Qwen3-30B-A3B M =
// 1/2/4, two runs, 8 : 4 columns: 16.1/21.7/34.5 : 15.7/21.1/33.5 and 15.6/20.9/33.5 us; unpinned 4
// columns 16.0/22.0/34.7). On DeepSeek-V3's 28-chunk warps, without the activation ring, ptxas sinks
// each step's x load next to its MMA in 4 columns, and 4 columns lose (M = 1, two runs: 59.8, 59.8 :
// 63.0, 62.7) unless x is staged (k.x_staged: 60.6, 59.9 : 59.0, 59.0; 8 columns staged 61.1, 61.3).
// MOEJIT_DECODE_COLUMNS=8|4 sets both kernels, for comparisons and tests.
int decode_columns(int tokens, const KernelKey& k) {
  const char* env = std::getenv("MOEJIT_DECODE_COLUMNS");
  const bool nvfp4_register_fc1 = k.format == ScaleFormat::nvfp4 &&
                                  (k.kind == KernelKind::decode_fc1 || k.kind == KernelKind::decode_fc1_loop);
  const bool long_nvfp4_fc1_warps = nvfp4_register_fc1 && fc1_chunks_per_warp(k) > 16 && !k.x_staged;
  // FC2-sum stays in 4 columns up to 8 tokens: few experts serve more than 4 pairs,
  // and those take a second pass over their slab from the L2. Same runs, µs, M = 6/8, 8 : 4 columns:
  // gpt-oss 107.3/130.5, 103.9/130.5 : 104.0/129.9, 104.1/130.5; DeepSeek-V3 315.9/398.2, 314.8/393.7 :
  // 309.2/388.7, 309.9/389.0; Qwen3 47.3/54.9, 47.4/55.2 : 46.9/54.3, 46.5/54.5.
  // FC1 (grid, loop, stream) with two matrices likewise up to 8 tokens, except NVFP4's register-fed FC1
  // with long warps; one-matrix FC1s (relu2) lose there. Same runs, µs, M = 6/8, 8 : 4 columns: gpt-oss
  // loop 103.3/130.1, 103.9/129.8 : 97.1/125.4, 96.8/125.2 (at 7 CTAs per SM; 99.6/127.4 at 8);
  // DeepSeek-V3 stream 308.8/405.5, 310.0/397.9 : 299.7/384.1, 300.7/397.4; Qwen3 loop 46.6/54.4,
  // 46.6/54.1 : 45.6/53.2, 45.5/53.2; Nemotron (relu2) 76.3/89.9, 76.1/89.9 : 76.7/91.3, 77.0/91.0.
  if (!env || !*env) {
    const bool fc1 = k.kind == KernelKind::decode_fc1 || k.kind == KernelKind::decode_fc1_loop ||
                     k.kind == KernelKind::decode_fc1_stream;
    if (k.kind == KernelKind::decode_fc2_sum) return tokens <= 8 ? 4 : 8;
    const int four_up_to = fc1 && is_gated(k.activation) ? 8 : 4;
    return tokens <= four_up_to && !long_nvfp4_fc1_warps ? 4 : 8;
  }
  const std::string_view v(env);
  if (v == "8") return 8;
  if (v == "4") return 4;
  throw Error(fmt::format("MOEJIT_DECODE_COLUMNS='{}' must be 8 or 4", env));
}

DecodeLaunch decode_launch_from_env() {
  const char* env = std::getenv("MOEJIT_DECODE_LAUNCH");
  if (!env || !*env) return DecodeLaunch::pdl;
  for (auto l : {DecodeLaunch::pdl, DecodeLaunch::plain, DecodeLaunch::cooperative})
    if (to_string(l) == env) return l;
  throw Error(fmt::format("MOEJIT_DECODE_LAUNCH='{}' must be pdl, plain or cooperative", env));
}

// decode_pipe (FC1 and FC2 in one co-resident launch, pipelined by expert slot) for few tokens.
// MOEJIT_DECODE_PIPE=on|off overrides the rule, MOEJIT_DECODE_TILE_PIPE its tile.
bool decode_pipe_from_env(bool default_value) {
  return variant_from_env("MOEJIT_DECODE_PIPE", "on", "off", default_value);
}

// decode_pipe's tile: 16 FC1 consumer warps fed by a ring of 3 stages of one chunk per warp, 8 FC2 warps.
void choose_decode_pipe_tile(KernelKey& k, int tokens) {
  k.kind = KernelKind::decode_pipe;
  k.warps = 16;
  k.depth = 3;
  k.parts = 1;
  k.groups = 8;
  k.ntiles = 1;
  k.columns = tokens <= 4 ? 4 : 8;
  k.l2_ahead = 0;
  k.x_staged = false;
  k.min_blocks = 1;
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

// The batch family's tile, from the pairs an expert gets on average (p). The token tile must hold the
// busiest experts' pairs (routing spreads them about p +- 3 sqrt(p)): a tile narrower than that walks those
// experts' weights twice, a wider one holds idle MMA columns and registers. v26's sweeps (docs/PERFORMANCE.md,
// every tile forced at p = 4..64 on gpt-oss-120b, DeepSeek-V3 and Qwen3-30B-A3B) set the steps:
// - register MMAs, 4 warps by 8 * ntiles pairs, two slabs per warp from 4 column tiles on (every activation
//   piece reused for twice the MMAs): 1 tile up to 8 pairs, 2 below 14 (gpt-oss p = 12: 2 tiles 809.9 µs
//   against 888.7 with 4 and 885.2 on warpgroup MMA), 4 below 40 (p = 14 / 16, 2 tiles : 4: DeepSeek-V3
//   3309.3 / 3880.9 : 2763.1 / 2841.7, Qwen3 218.1 / 247.5 : 195.6 / 199.3), 8 from 40 (p = 40, 4 : 8:
//   DeepSeek-V3 5348.2 : 4941.8, Qwen3 384.1 : 367.4, gpt-oss 1738.1 : 1567.3; at p = 28 8 tiles lose
//   25-34 %); on sm_90a the last two steps give way to warpgroup MMA;
// - on sm_90a, warpgroup MMA from 14 pairs (final kernels, register 4 tiles : warpgroup 32 pairs, p = 14 /
//   16 / 24: gpt-oss 892.7 / 906.3 / 1005.4 : 883.1 / 887.8 / 945.9, DeepSeek-V3 2782.1 / 2856.5 / 3110.1 :
//   2769.0 / 2779.2 / 2923.7, Qwen3 195.8 / 200.4 / 237.1 : 185.9 / 188.3 / 215.2), 2 warpgroups and 2 CTAs
//   per SM; 32 pairs below 26, 48 below 40 (p = 28 / 32, 32 : 48 : 56 pairs: gpt-oss 1062.8 / 1252.4 :
//   1007.5 / 1008.8 : 1046.2 / 1046.9, DeepSeek-V3 3295.9 / 4036.7 : 3182.3 / 3210.1 : 3326.6 / 3325.5,
//   Qwen3 228.2 / 278.9 : 224.3 / 229.9 : 232.4 / 236.5; at p = 24 before the step ring 32 pairs beat 48 by
//   14 %), 56 below 48 (p = 40, 48 : 56 : 64: gpt-oss 1122.0 : 1074.2 : 1149.8, DeepSeek-V3 3448.9 : 3364.4
//   : 3637.6, Qwen3 265.5 : 250.8 : 264.0), 64 from 48 (p = 48, 56 : 64: gpt-oss 1176.5 : 1185.0,
//   DeepSeek-V3 3610.2 : 3671.7, Qwen3 288.0 : 278.7, a tie; v25 measured 64 pairs best at M = 4096). 40
//   pairs measured slower than 32 and 48 (p = 24 / 28, gpt-oss 1108.1 / 1121.2, first sweep).
// MOEJIT_BATCH_TILE_FC1 / _FC2 override it (w<warps>n<tiles>d<chunks in flight>o<CTAs per SM>s<slabs per
// warp>m<warpgroup MMA 0|1>).
constexpr double kWgmmaFromPairsPerExpert = 14;

int register_batch_ntiles(double pairs_per_expert) {
  if (pairs_per_expert <= 8) return 1;
  if (pairs_per_expert < 14) return 2;
  if (pairs_per_expert < 40) return 4;
  return 8;
}

int wgmma_batch_ntiles(double pairs_per_expert) {
  if (pairs_per_expert < 26) return 4;
  if (pairs_per_expert < 40) return 6;
  if (pairs_per_expert < 48) return 7;
  return 8;
}

Plan batch_plan(const LayerSpec& spec, int tokens, Plan plan, const KernelKey& route) {
  KernelKey fc1 = base_key(spec, route.arch);
  const double per_expert = static_cast<double>(std::max(tokens, 1)) * spec.top_k / spec.experts;
  fc1.kind = KernelKind::batch_fc1;
  if (route.arch == Arch::sm_90a && per_expert >= kWgmmaFromPairsPerExpert) {
    fc1.wgmma = true;
    fc1.warps = 8;
    fc1.ntiles = wgmma_batch_ntiles(per_expert);
    fc1.depth = 3;
    fc1.min_blocks = 2;
    fc1.slabs = 1;
  } else {
    const int nt = register_batch_ntiles(per_expert);
    fc1.warps = 4;
    fc1.ntiles = nt;
    fc1.depth = 3;  // a ring of 4 stages in shared memory
    fc1.min_blocks = 0;
    fc1.slabs = nt >= 4 ? 2 : 1;
  }
  KernelKey fc2 = fc1;
  fc2.kind = KernelKind::batch_fc2;
  apply_tuning_overrides(fc1, "MOEJIT_BATCH_TILE_FC1");
  apply_tuning_overrides(fc2, "MOEJIT_BATCH_TILE_FC2");
  plan.kernels = {route.normalized(), fc1.normalized(), fc2.normalized()};
  return plan;
}
}  // namespace

int batch_from_tokens(const LayerSpec& spec) {
  // Measured cutovers (docs/PERFORMANCE.md, "batch family"; µs, decode : batch, same run): Qwen3-30B-A3B
  // (2.4 MB of FP4 weights per expert) M = 32/64/128 113.7/138.2/213.9 : 110.1/125.0/167.6; gpt-oss-120b
  // (12.4 MB) M = 128/192/256 494.9/602.9/734.3 : 518.4/589.6/712.1; DeepSeek-V3 (22.0 MB) M = 192/256
  // 2053.9/2571.8 : 2133.2/2484.3. The batch family wins once an expert gets about 2, 6 and 8 pairs on
  // average: the larger an expert's weights, the more pairs its decode slabs carry before a staged token
  // tile pays. Never while routing stays inside the decode CTAs (at most 128 pairs).
  const double weight_mb =
      (static_cast<double>(spec.fc1_rows()) * spec.hidden + static_cast<double>(spec.hidden) * spec.intermediate) / 2e6;
  const double pairs_per_expert = weight_mb < 4 ? 2 : weight_mb < 16 ? 6 : 8;
  const int by_pairs = static_cast<int>(std::ceil(pairs_per_expert * spec.experts / spec.top_k));
  return std::clamp(std::max(by_pairs, kInlineRouteMaxPairs / spec.top_k + 1), 1, kDecodeMaxTokens + 1);
}

Plan make_plan(const LayerSpec& spec, Arch arch, int tokens, int sm_count, Family force) {
  spec.validate();
  if (tokens < 0) throw Error(fmt::format("tokens must be >= 0, got {}", tokens));
  if (tokens > kMaxTokens) throw Error(fmt::format("a forward serves at most {} tokens, asked for {}", kMaxTokens, tokens));
  Family family = force != Family::automatic ? force : tokens >= batch_from_tokens(spec) ? Family::batch : Family::decode;
  if (family == Family::decode && tokens > kDecodeMaxTokens)
    throw Error(fmt::format("the decode family serves at most {} tokens, asked for {}", kDecodeMaxTokens, tokens));
  Plan plan;
  plan.family = family;
  plan.tokens = tokens;
  KernelKey route = base_key(spec, arch);
  route.kind = KernelKind::route;
  route.warps = route_warps(spec.experts);
  if (family == Family::batch) return batch_plan(spec, tokens, plan, route);
  KernelKey fc1 = base_key(spec, arch);
  fc1.kind = KernelKind::decode_fc1;
  fc1.ntiles = decode_ntiles(spec, std::max(tokens, 1));
  const int sms = sm_count > 0 ? sm_count : 132;
  const double experts_touched = std::max(1.0, expected_experts(spec, std::max(tokens, 1)));
  choose_decode_tile(fc1, spec.intermediate / 16 * experts_touched, sms, /*split_k_freely=*/false);
  // FC2-sum's grid is H/16 CTAs: where that leaves SMs with one CTA more than others by a wide margin
  // (gpt-oss: 180 CTAs on 132 SMs, the busiest SM has 1.47x the average) and many experts make each
  // CTA long, the split FC2's even grid wins (gpt-oss M = 16, 55 experts: 246.9 against 254.7 µs;
  // sum wins at 31 experts and below, and on DeepSeek and Qwen3 everywhere it applies).
  const bool fc2_sum_default = fc2_sum_imbalance(spec, sms) <= 1.25 || experts_touched <= 32;
  // Few pairs: every decode CTA routes for itself, saving the route launch, and FC2 sums the top-k
  // experts inside each CTA (decode_fc2_sum) instead of through a partial buffer and a last-CTA pass.
  fc1.inline_route =
      spec.experts <= 1024
          ? inline_route_level(static_cast<long long>(tokens) * spec.top_k, fc2_sum_default && spec.hidden / 16 <= sms)
          : 0;
  plan.launch = decode_launch_from_env();
  KernelKey fc2 = fc1;
  if (fc1.inline_route && plan.launch != DecodeLaunch::cooperative &&
      variant_from_env("MOEJIT_DECODE_FC2", "sum", "split", fc2_sum_default)) {
    fc2.kind = KernelKind::decode_fc2_sum;
    choose_fc2_sum_tile(fc2, spec, tokens, experts_touched, sms);
  } else {
    fc2.kind = KernelKind::decode_fc2;
    choose_decode_tile(fc2, spec.hidden / 16 * experts_touched, sms, /*split_k_freely=*/true);
    if (fc2.ntiles == 1 && fc2.warps == 1 && tokens > 32) {
      // Many pairs per expert, walked in passes: 2-warp CTAs, 16 per SM (v14, µs, w1 at 32 per SM :
      // w2 at 16: gpt-oss-120b M = 128/192 508.8/652.8 : 499.5/626.4, Nemotron-3-Nano M = 64/128/256
      // 267.7/365.0/642.7 : 261.5/339.7/589.0, Qwen3-30B-A3B M = 40/48/64 127.3/138.9/149.6 :
      // 125.6/135.3/143.2; DeepSeek-V3 M = 128/256 1837.3/2637.9 : 1859.3/2624.1). Up to 32 tokens the
      // one-warp CTAs stay (Qwen3 M = 16/32 88.3/117.7 : 89.5/117.4).
      fc2.warps = 2;
      fc2.min_blocks = 16;
    }
    // A short K (at most 16 chunks, Qwen3-30B-A3B's 12) leaves each CTA's chain too short to hide its
    // first loads: ask the L2 for 2 chunks ahead (v14, µs, Qwen3 M = 9/12/16/24/32 67.8/77.3/90.8/
    // 101.6/119.5 -> 65.1/73.8/88.3/99.3/117.7); DeepSeek-V3's 32-chunk K loses (M = 16 681.4 -> 698.4).
    if ((spec.intermediate + 63) / 64 <= 16) fc2.l2_ahead = 2;
  }
  // FC1 grids of more than one wave with inline routing and short CTAs (at most 16 chunks per warp):
  // one wave of CTAs walks the items, so later items skip the CTA launch and the routing round trip
  // (gpt-oss M = 4/8: 80.4/148.0 -> 77.2/144.3 µs; DeepSeek's 28-chunk warps gain nothing, M = 2 and
  // 8 lose 2 %). Warps of 9-16 chunks run it at 8 CTAs per SM (7 in 4 columns, below), without the activation
  // ring (gpt-oss: 75.8/141.6 µs); 8-chunk warps keep the ring (Qwen3 M=8: 59.6 µs at 6 CTAs per SM,
  // 63.5 at 8).
  const double fc1_ctas = spec.intermediate / 16 * experts_touched;
  const bool fc1_multi_wave = fc1_ctas > static_cast<double>(sms) * decode_ctas_per_sm(fc1);
  const int fc1_warp_chunks = fc1_chunks_per_warp(fc1);
  if (fc1.inline_route && plan.launch != DecodeLaunch::cooperative) {
    // Long slabs (more than 16 chunks per warp, DeepSeek-V3) on several waves stream their weights
    // through shared memory instead (M = 2/4/8, µs, grid : stream: NVFP4 120.5/229.2/397.9 :
    // 117.8/225.1/390.4, MXFP4 115.3/219.8/376.4 : 110.3/210.4/362.2); at M = 1 the grid is one wave
    // and wins (62.8 : 68.1).
    const Fc1Variant v = fc1_variant_from_env(!fc1_multi_wave          ? Fc1Variant::grid
                                              : fc1_warp_chunks <= 16 ? Fc1Variant::loop
                                                                          : Fc1Variant::stream);
    if (v == Fc1Variant::loop) {
      fc1.kind = KernelKind::decode_fc1_loop;
      if (fc1.ntiles == 1 && fc1.warps == 4 && fc1_warp_chunks > 8) fc1.min_blocks = 8;
    } else if (v == Fc1Variant::stream) {
      choose_fc1_stream_tile(fc1);
    }
  }
  // One token: an FC1 grid without the activation ring stages its x row in shared memory, times 2^64,
  // once per warp (KernelKey::x_staged), so no step waits on its own x load or multiplies it. Same runs,
  // µs at M = 1, staged : per-step loads: DeepSeek-V3 MXFP4 (no ring at 8 CTAs per SM) 55.0, 54.9 :
  // 56.2, 56.1; DeepSeek-V3 NVFP4 in 4 columns (decode_columns) 59.0, 59.0 : 60.6, 59.9 in 8; gpt-oss
  // (its ring already loads x a chunk ahead) 25.3, 25.1 : 25.0, 24.7, so only ring-less grids stage.
  fc1.x_staged = tokens == 1 && fc1.kind == KernelKind::decode_fc1 && fc1.ntiles == 1 &&
                 plan.launch != DecodeLaunch::cooperative && !decode_activation_ring(fc1);
  // FC1 grids of several waves behind the route kernel: 2-warp CTAs at 85 registers, 12 per SM, as for
  // one wave of them above (v14, µs, w4 at 6 per SM : w2 at 12: Qwen3-30B-A3B M = 16/32, FC2 with L2
  // requests, 88.3/117.7 : 86.9/115.5; gpt-oss-120b M = 32/64 330.1/450.6 : 318.3/435.8; DeepSeek-V3
  // M = 16/32/64 681.4/1161.3/1498.2 : 678.8/1150.5/1478.5; Nemotron-3-Nano M = 16/32 156.0/219.2 :
  // 154.1/213.7). Inline-routed grids of several waves walk their items in a loop instead (above).
  if (!fc1.inline_route && fc1.kind == KernelKind::decode_fc1 && fc1.ntiles == 1 && fc1_ctas > 8.0 * sms) {
    fc1.warps = 2;
    fc1.min_blocks = 12;
  }
  fc1.columns = decode_columns(tokens, fc1);
  fc2.columns = decode_columns(tokens, fc2);
  // The loop's 9-16-chunk warps in 4 columns run without spills at 72 registers (7 CTAs per SM), where
  // 64 (8 per SM) spill 40 bytes: gpt-oss M = 4, two runs each, 69.2, 69.4 -> 67.3, 66.8 us; M = 6/8
  // 99.6/127.4 -> 97.1/125.4. In 8 columns 7 CTAs lose (M = 16 232.1 -> 236.5), so they keep 8.
  if (fc1.kind == KernelKind::decode_fc1_loop && fc1.columns == 4 && fc1.min_blocks == 8) fc1.min_blocks = 7;
  // MXFP4's steady-state loop (v16) made 80 registers pay in 8 columns too: 6 CTAs per SM, where the
  // activation ring fits (gpt-oss M = 12/16, two runs, 8 per SM 160.7/230.5, 161.1/229.9; 7 per SM
  // 157.9/230.4, 157.8/231.3; 6 per SM 154.7/226.2, 154.6/225.9 us; another session's A/B, M = 9/12/16:
  // gpt-oss-120b 128.9/153.2/223.2 -> 128.0/151.7/222.1, gpt-oss-20b 100.4/111.2/123.9 -> 97.0/107.2/119.0).
  if (fc1.kind == KernelKind::decode_fc1_loop && fc1.format == ScaleFormat::mxfp4 && fc1.columns == 8 &&
      fc1.activation != Activation::relu2 && fc1.ntiles == 1 && fc1.min_blocks == 8)
    fc1.min_blocks = 6;
  // NVFP4's two-matrix loop in 8 columns at 96 registers (5 CTAs per SM) runs the steady-state chunk
  // loop without spilling (templates/slab_mma.cuh; at 85 it spills inside the loop): Qwen3 M = 9/12/16,
  // two runs, 60.4/68.9/81.7, 59.7/68.7/82.0 -> 56.1/66.4/78.7, 56.3/66.5/78.9 us (5 per SM with the
  // checked loop: M = 12/16 69.8/83.2).
  if (fc1.kind == KernelKind::decode_fc1_loop && fc1.format == ScaleFormat::nvfp4 &&
      fc1.activation != Activation::relu2 && fc1.columns == 8 && fc1.ntiles == 1 && fc1.min_blocks == 6)
    fc1.min_blocks = 5;
  if (fc1.inline_route == 1 && tokens <= 8 && plan.launch != DecodeLaunch::cooperative &&
      decode_pipe_from_env(false)) {
    KernelKey pipe = fc1;
    choose_decode_pipe_tile(pipe, tokens);
    apply_tuning_overrides(pipe, "MOEJIT_DECODE_TILE_PIPE");
    pipe = pipe.normalized();
    if (decode_pipe_layout(pipe, std::max(tokens, 1), spec.top_k, sms).window >= 1) {
      plan.kernels = {pipe};
      return plan;
    }
  }
  apply_tuning_overrides(fc1, "MOEJIT_DECODE_TILE_FC1");
  apply_tuning_overrides(fc2, "MOEJIT_DECODE_TILE_FC2");
  if (plan.launch == DecodeLaunch::cooperative) {
    // One block shape for both phases: FC1's tile.
    KernelKey fused = fc1;
    fused.kind = KernelKind::decode_fused;
    if (fc1.inline_route)
      plan.kernels = {fused.normalized()};
    else
      plan.kernels = {route.normalized(), fused.normalized()};
    return plan;
  }
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
  std::string s = fmt::format("M={} family={} launch={}", tokens, to_string(family), to_string(launch));
  for (const auto& k : kernels) s += fmt::format(" {}", k.str());
  return s;
}

}  // namespace moejit
