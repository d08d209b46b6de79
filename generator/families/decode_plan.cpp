// The decode family's plan: which FC1 and FC2 kinds, their tiles and the launch structure for M tokens.
// Every step below was measured; the tags name the perf-log.md entries (docs/perf-log.md) that hold the
// numbers.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "generator/families/decode.hpp"
#include "generator/families/family.hpp"
#include "generator/families/route.hpp"
#include "moejit/error.hpp"

namespace moejit::detail {
namespace {

// Token columns held in registers per pass (8 per tile, at most 8 tiles), sized for the busiest expert
// under balanced routing (mean + 3 sigma + 1 of Binomial(M*K, 1/E) pairs, capped by M); up to 32 pairs
// one tile walks its slab once per 8 pairs from the L2 and keeps the register cap of the one-pass
// kernels (v14).
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

// Decode grids are (16-row slabs) x (active experts) CTAs whose warps split K; a warp's life is a chain
// of dependent chunk loads, so the tile aims for one wave that fills the SMs with warps (v3.1, v5).
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
    // A grid too small to give 4-warp CTAs 20+ warps per SM: 8 warps split K, 3 CTAs per SM (v5).
    k.warps = 8;
    k.min_blocks = 3;
    return;
  }
  if (split_k_freely && k.ntiles == 2 && (k.intermediate + 63) / 64 <= 16) {
    // FC2 with two token tiles over a short K: 2 warps of more chunks each at 12 CTAs per SM, since per-CTA
    // costs outweigh the loads of 4 short warps (v11).
    k.warps = 2;
    k.min_blocks = 12;
    return;
  }
  if (!split_k_freely && k.ntiles == 1 && ctas > 8.0 * sm_count && ctas * 2 <= 24.0 * sm_count) {
    // Too big for one wave of 4-warp CTAs, small enough for one wave of 2-warp CTAs at 85 registers (v5).
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

// FC2-sum (few pairs): one CTA (or `groups` CTAs) per 16-row slab of H walks every active expert, its
// warps covering (expert, K part) units so that at M = 1 every warp has one unit; registers go to depth
// (v6, v8, v12, v13, v18, v20).
void choose_fc2_sum_tile(KernelKey& k, const LayerSpec& spec, int tokens, double experts_touched, int sm_count) {
  const int slots = std::max(1, static_cast<int>(std::lround(experts_touched)));
  const int ctas = spec.hidden / 16;
  k.min_blocks = std::max(1, (ctas + sm_count - 1) / sm_count);
  // Up to 4 tokens, two CTAs' registers per SM even where one CTA per SM would do, so that the CTA starts
  // beside FC1's last CTA instead of after it (v13).
  if (k.min_blocks == 1 && tokens <= 4) k.min_blocks = 2;
  k.warps = std::clamp(32 / k.min_blocks, 4, 16);
  k.parts = std::clamp(k.warps / slots, 1, 4);
  // Where whole slabs spread unevenly over the SMs and a slab holds enough units to split, each slab goes
  // to 2 CTAs of half the warps (v12); where every reachable expert's K parts fill the CTA's warps exactly
  // once, the whole slab stays in one CTA (v18).
  const bool slab_fills_warps = std::min(tokens * spec.top_k, spec.experts) * k.parts == k.warps && k.parts >= 2;
  const bool uneven = fc2_sum_imbalance(spec, sm_count) > 1.25 && slots >= 6;
  if (uneven && !slab_fills_warps && k.warps % 2 == 0 && (k.warps / 2) % k.parts == 0) {
    k.groups = 2;
    k.warps /= 2;
    k.min_blocks = (2 * ctas + sm_count - 1) / sm_count;
  }
  // There, with whole slabs, two adjacent slabs per CTA: each warp carries both slabs of its unit through
  // every chunk, moving its bytes faster than the idle SMs cost (v20).
  if (uneven && slab_fills_warps && spec.hidden % 32 == 0 && spec.hidden / 32 <= sm_count) {
    k.slabs = 2;
    k.min_blocks = 1;
  }
  const int register_cap = std::min(255, 65536 / (k.min_blocks * k.warps * 32));
  // Registers per ring slot in ptxas output: ~12 for one slab, ~20 for two (v20).
  const int per_chunk = k.slabs == 2 ? 20 : 12;
  const int chunks_per_part = ((spec.intermediate + 63) / 64 + k.parts - 1) / k.parts;
  k.depth = std::clamp((register_cap - 64) / per_chunk - 1, 1, std::clamp(chunks_per_part - 1, 1, 8));
  if (k.ntiles > 1) k.depth = std::min(k.depth, 2);
  // Each warp asks the L2 for its chunks two past its register ring, the first before the wait for FC1
  // (v8).
  k.l2_ahead = 2;
}

// The inline routing level (KernelKey::inline_route) for `pairs` (token, slot) pairs: 1 up to 64 pairs;
// 2 up to 128 where FC2 sums the top-k inside one CTA per SM (wide); 0 beyond (v14).
// MOEJIT_DECODE_INLINE_PAIRS=N replaces the rule by "inline up to N pairs".
int inline_route_level(long long pairs, bool wide, const TuningOverrides& tuning) {
  const int most = tuning.decode_inline_pairs.value_or(wide ? kInlineRouteMaxPairs : kInlineRoutePairsNarrow);
  return pairs > most ? 0 : pairs <= kInlineRoutePairsNarrow ? 1 : 2;
}

// decode_fc1_stream's tile: 4 consumer warps, a ring of 3 stages of 4 chunks per warp, as many CTAs per
// SM as the ring allows (v7).
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

// MMA columns per n-tile that carry a pair (KernelKey::columns): 4 where no expert is expected to get more
// than 4 pairs (half the block-scale FMAs), else 8 (v7, v9); FC2-sum and two-matrix FC1s stay in 4 up to 8
// tokens (v13), except NVFP4's register-fed FC1 with long warps and no staged x (v9).
// MOEJIT_DECODE_COLUMNS=8|4 sets both kernels.
int decode_columns(int tokens, const KernelKey& k, const TuningOverrides& tuning) {
  if (tuning.decode_columns) return *tuning.decode_columns;
  const bool nvfp4_register_fc1 =
      k.format == ScaleFormat::nvfp4 && (k.kind == KernelKind::decode_fc1 || k.kind == KernelKind::decode_fc1_loop);
  const bool long_nvfp4_fc1_warps = nvfp4_register_fc1 && fc1_chunks_per_warp(k) > 16 && !k.x_staged;
  const bool fc1 = k.kind == KernelKind::decode_fc1 || k.kind == KernelKind::decode_fc1_loop ||
                   k.kind == KernelKind::decode_fc1_stream;
  if (k.kind == KernelKind::decode_fc2_sum) return tokens <= 8 ? 4 : 8;
  const int four_up_to = fc1 && is_gated(k.activation) ? 8 : 4;
  return tokens <= four_up_to && !long_nvfp4_fc1_warps ? 4 : 8;
}

// FC2 with the top-k sum in its CTAs (decode_fc2_sum) or through partial rows (decode_fc2).
KernelKey plan_fc2(const LayerSpec& spec, const KernelKey& fc1, int tokens, double experts_touched, int sms,
                   bool use_sum) {
  KernelKey fc2 = fc1;
  if (use_sum) {
    fc2.kind = KernelKind::decode_fc2_sum;
    choose_fc2_sum_tile(fc2, spec, tokens, experts_touched, sms);
    return fc2;
  }
  fc2.kind = KernelKind::decode_fc2;
  choose_decode_tile(fc2, spec.hidden / 16 * experts_touched, sms, /*split_k_freely=*/true);
  if (fc2.ntiles == 1 && fc2.warps == 1 && tokens > 32) {
    // Many pairs per expert, walked in passes: 2-warp CTAs, 16 per SM (v14).
    fc2.warps = 2;
    fc2.min_blocks = 16;
  }
  // A short K (at most 16 chunks) leaves each CTA's chain too short to hide its first loads: ask the L2
  // for 2 chunks ahead (v14).
  if ((spec.intermediate + 63) / 64 <= 16) fc2.l2_ahead = 2;
  return fc2;
}

// FC1's register caps where measured better than the tile rule's (v10, v17).
void retune_fc1_loop(KernelKey& fc1) {
  if (fc1.kind != KernelKind::decode_fc1_loop) return;
  // 9-16-chunk warps in 4 columns run without spills at 72 registers (7 CTAs per SM) (v10).
  if (fc1.columns == 4 && fc1.min_blocks == 8) fc1.min_blocks = 7;
  // MXFP4's steady-state loop in 8 columns: 80 registers, 6 CTAs per SM, where the activation ring fits (v17).
  if (fc1.format == ScaleFormat::mxfp4 && fc1.columns == 8 && fc1.activation != Activation::relu2 &&
      fc1.ntiles == 1 && fc1.min_blocks == 8)
    fc1.min_blocks = 6;
  // NVFP4's two-matrix loop in 8 columns at 96 registers (5 CTAs per SM) does not spill (v17).
  if (fc1.format == ScaleFormat::nvfp4 && fc1.activation != Activation::relu2 && fc1.columns == 8 &&
      fc1.ntiles == 1 && fc1.min_blocks == 6)
    fc1.min_blocks = 5;
}

// a8's FC1 CTAs hold two slab groups (decode_fc1_slab_groups), while the rules above choose tiles of
// one-slab CTAs (a8 plans take a16's tiles). A CTA of two groups stands for two one-slab CTAs of the tile,
// so the kernel's CTAs per SM are half the tile's, rounded up: the grid of half as many CTAs then keeps
// the one-slab grid's waves, and an odd count leaves each thread fewer registers instead of adding a wave.
KernelKey with_slab_groups(KernelKey fc1) {
  if (decode_fc1_slab_groups(fc1) == 2 && fc1.min_blocks > 0) fc1.min_blocks = (fc1.min_blocks + 1) / 2;
  return fc1;
}

// The CTAs per SM of FC1's tile in one-slab CTAs, whatever the precision builds of it.
int one_slab_ctas_per_sm(KernelKey fc1) {
  fc1.precision = ActPrecision::a16;
  return decode_ctas_per_sm(fc1);
}

}  // namespace

KernelKey fit_decode_csf_key(KernelKey k) {
  if (k.csf_scales == 0 || decode_smem_fits(k)) return k;
  if (k.x_staged) {
    k.x_staged = false;
    if (k.format == ScaleFormat::nvfp4 && k.kind == KernelKind::decode_fc1 && fc1_chunks_per_warp(k) > 16)
      k.columns = 8;
    k = k.normalized();
    if (decode_smem_fits(k)) return k;
  }
  const ArchLimits& arch = arch_limits(k.arch);
  k.min_blocks = std::max(1, arch.smem_per_sm / (decode_cta_smem(k) + arch.smem_reserved));
  return k.normalized();
}

Plan plan_decode(const PlanRequest& r) {
  const LayerSpec& spec = r.spec;
  const int tokens = r.tokens, sms = r.sm_count;
  const TuningOverrides& tuning = r.tuning;
  Plan plan;
  plan.family = Family::decode;
  plan.tokens = tokens;
  KernelKey fc1 = layer_key(spec, r.arch);
  fc1.kind = KernelKind::decode_fc1;
  fc1.ntiles = decode_ntiles(spec, std::max(tokens, 1));
  const double experts_touched = std::max(1.0, expected_experts(spec, std::max(tokens, 1)));
  choose_decode_tile(fc1, spec.intermediate / 16 * experts_touched, sms, /*split_k_freely=*/false);
  // FC2-sum's grid is H/16 CTAs: where that leaves SMs with one CTA more than others by a wide margin and
  // many experts make each CTA long, the split FC2's even grid wins (v5, v6).
  const bool fc2_sum_default = fc2_sum_imbalance(spec, sms) <= 1.25 || experts_touched <= 32;
  // Few pairs: every decode CTA routes for itself, saving the route launch, and FC2 sums the top-k experts
  // inside each CTA (v2, v6).
  fc1.inline_route =
      spec.experts <= 1024 ? inline_route_level(static_cast<long long>(tokens) * spec.top_k,
                                                fc2_sum_default && spec.hidden / 16 <= sms, tuning)
                           : 0;
  plan.launch = tuning.decode_launch.value_or(DecodeLaunch::pdl);
  const bool cooperative = plan.launch == DecodeLaunch::cooperative;
  KernelKey fc2 = plan_fc2(spec, fc1, tokens, experts_touched, sms,
                           fc1.inline_route && !cooperative && tuning.decode_fc2_sum.value_or(fc2_sum_default));
  const double fc1_ctas = spec.intermediate / 16 * experts_touched;
  const bool fc1_multi_wave = fc1_ctas > static_cast<double>(sms) * one_slab_ctas_per_sm(fc1);
  const int fc1_warp_chunks = fc1_chunks_per_warp(fc1);
  if (fc1.inline_route && !cooperative) {
    // FC1 grids of more than one wave with inline routing: one wave of CTAs walks the items (v6); long
    // slabs (more than 16 chunks per warp) stream their weights through shared memory instead (v7), in a16
    // (the streamed FC1 computes in a16 only; a8/a4 walk the items with the register-fed loop).
    const bool streams = spec.precision == ActPrecision::a16;
    const DecodeFc1Variant v =
        tuning.decode_fc1.value_or(!fc1_multi_wave                         ? DecodeFc1Variant::grid
                                   : fc1_warp_chunks <= 16 || !streams ? DecodeFc1Variant::loop
                                                                       : DecodeFc1Variant::stream);
    if (v == DecodeFc1Variant::loop) {
      fc1.kind = KernelKind::decode_fc1_loop;
      if (fc1.ntiles == 1 && fc1.warps == 4 && fc1_warp_chunks > 8) fc1.min_blocks = 8;
    } else if (v == DecodeFc1Variant::stream) {
      choose_fc1_stream_tile(fc1);
    }
  }
  // One token: an FC1 grid without the activation ring stages its x row in shared memory (v9), where the
  // staged CTAs still fit the SM's shared memory at the CTAs per SM the tile is built for (SM12x: 100 KiB).
  const KernelKey built = with_slab_groups(fc1);
  fc1.x_staged = tokens == 1 && fc1.kind == KernelKind::decode_fc1 && fc1.ntiles == 1 && !cooperative &&
                 !decode_activation_ring(built);
  if (fc1.x_staged) {
    const ArchLimits& limits = arch_limits(fc1.arch);
    fc1.x_staged = decode_ctas_per_sm(built) * (staged_x_cta_bytes(built) + limits.smem_reserved) <= limits.smem_per_sm;
  }
  // FC1 grids of several waves behind the route kernel: 2-warp CTAs at 85 registers, 12 per SM (v14).
  if (!fc1.inline_route && fc1.kind == KernelKind::decode_fc1 && fc1.ntiles == 1 && fc1_ctas > 8.0 * sms) {
    fc1.warps = 2;
    fc1.min_blocks = 12;
  }
  fc1.columns = decode_columns(tokens, fc1, tuning);
  fc2.columns = decode_columns(tokens, fc2, tuning);
  retune_fc1_loop(fc1);
  // One block shape for both phases of the cooperative kernel: FC1's tile, in one slab group.
  if (cooperative)
    fc1.kind = KernelKind::decode_fused;
  else
    fc1 = with_slab_groups(fc1);
  // MOEJIT_DECODE_TILE_FC1 / _FC2 (or MOEJIT_DECODE_TILE for both) override the tiles, for sweeps.
  if (const auto& t = tuning.decode_tile_fc1 ? tuning.decode_tile_fc1 : tuning.decode_tile) t->apply(fc1);
  if (const auto& t = tuning.decode_tile_fc2 ? tuning.decode_tile_fc2 : tuning.decode_tile) t->apply(fc2);
  // The key states what its launch bounds promise: at most the CTAs the architecture keeps resident.
  for (KernelKey* k : {&fc1, &fc2})
    if (k->min_blocks > 0) k->min_blocks = decode_ctas_per_sm(*k);
  if (cooperative)
    plan.kernels = {fc1.normalized()};
  else
    plan.kernels = {fc1.normalized(), fc2.normalized()};
  if (!fc1.inline_route) plan.kernels.insert(plan.kernels.begin(), route_key(spec, r.arch));
  return plan;
}

}  // namespace moejit::detail
