// The batch family's key rules, generated source, geometry and plan.
#include "generator/families/batch.hpp"

#include <fmt/args.h>
#include <fmt/format.h>

#include <algorithm>

#include "generator/families/family.hpp"
#include "generator/families/route.hpp"
#include "moejit/error.hpp"

namespace moejit::detail {
namespace {

constexpr std::pair<KernelKind, std::string_view> kKinds[] = {{KernelKind::batch_fc1, "batch_fc1"},
                                                               {KernelKind::batch_fc2, "batch_fc2"}};

void normalize(KernelKey& k, const KernelKey& original) {
  auto fail = [&](std::string_view rule) { throw Error(fmt::format("kernel key {}: {}", original.str(), rule)); };
  // A warpgroup MMA takes up to 256 columns (32 n-tiles); the register-fed MMAs keep up to 8 n-tiles.
  normalize_common(k, original, k.wgmma ? 32 : 8);
  k.parts = 1;
  k.groups = 1;
  k.x_staged = false;
  // One tile shape: warps x 16 rows by 8 * ntiles pairs, `depth` chunks in flight through shared memory,
  // behind the route kernel; the decode family's loop variants do not apply.
  if (k.inline_route) fail(fmt::format("{} reads the route kernel's lists (i0)", to_string(k.kind)));
  if (k.warps > 16) fail("batch kernels take at most 16 warps");
  if (k.columns != 8) fail("batch kernels fill every MMA column (columns 8)");
  if (k.depth < 1 || k.depth > 7) fail("batch kernels keep 1..7 chunks in flight (depth)");
  k.l2_ahead = 0;
  if (k.wgmma) {
    if (k.arch != Arch::sm_90a) fail("warpgroup MMA (m) exists on sm_90a only");
    if (k.warps % 4) fail("warpgroup MMA kernels take whole warpgroups (warps 4, 8, 12, 16)");
    if (k.slabs != 1) fail("warpgroup MMA kernels give each warp one slab (no s suffix)");
    // Stages: one multiplied, one decoded, one or more copied; FC1 stores the layer input a step after
    // loading it into registers, so one more.
    const int min_depth = k.kind == KernelKind::batch_fc1 ? 3 : 2;
    if (k.depth < min_depth)
      fail(fmt::format("warpgroup MMA {} kernels need depth >= {}", to_string(k.kind), min_depth));
  }
  // docs/DECISIONS.md, "Precision": FC1 quantizes the intermediate one scale block of rows at a time. a8's
  // 32 rows are two slabs: of one warp in the register-fed kernels, of a warp pair in the warpgroup-MMA
  // kernels (one slab per warp; templates/slab_pair_max.cuh).
  if (k.kind == KernelKind::batch_fc1 && k.precision == ActPrecision::a8 && !k.wgmma && k.slabs != 2)
    fail("a8 batch_fc1 quantizes 32 intermediate rows per warp: it needs two slabs per warp (s2)");
  if (k.kind == KernelKind::batch_fc2) {
    // FC2 does not see the activation; the limit is an FC1 concern.
    k.activation = Activation::silu;
    k.limit = false;
  }
}

int dynamic_smem(const KernelKey& key) {
  const int mats = key.kind == KernelKind::batch_fc1 ? fc1_mats(key) : 1;
  if (key.wgmma) {
    // WgmmaStage::kBytes (1024-byte multiples) per stage, depth + 1 stages, and 1024 bytes to align the ring.
    const int used = 8 * key.ntiles * 128 + key.warps * mats * (512 + chunk_scale_bytes(key));
    return (key.depth + 1) * ((used + 1023) / 1024 * 1024) + 1024;
  }
  // BatchStage::kBytes per stage, depth + 1 stages.
  const int stage = 8 * key.ntiles * 160 + key.warps * key.slabs * mats * (512 + chunk_scale_bytes(key));
  return (key.depth + 1) * stage;
}

// Launch bounds promise the key's CTAs per SM (at least 1).
int ctas_per_sm(const KernelKey& key) { return std::max(key.min_blocks, 1); }

std::string source(const KernelKey& key, const std::string& entry) {
  const bool fc1 = key.kind == KernelKind::batch_fc1;
  const int smem = dynamic_smem(key);
  const int most = arch_limits(key.arch).max_dynamic_smem - slab_pair_exchange_bytes(key);
  if (smem > most)
    throw Error(fmt::format("kernel key {}: the copy ring needs {} bytes of shared memory, more than the {} a CTA has "
                            "on {}",
                            key.str(), smem, most, to_string(key.arch)));
  // The template arguments by name; each format below uses the ones it needs.
  fmt::dynamic_format_arg_store<fmt::format_context> a;
  push_layer_args(a, key);
  a.push_back(fmt::arg("warps", key.warps));
  a.push_back(fmt::arg("ntiles", key.ntiles));
  a.push_back(fmt::arg("stages", key.depth + 1));
  a.push_back(fmt::arg("slabs", key.slabs));
  a.push_back(fmt::arg("mats", fc1 ? fc1_mats(key) : 1));
  a.push_back(fmt::arg("bytes", smem));
  a.push_back(fmt::arg("threads", warps_threads(key)));
  a.push_back(fmt::arg("min_blocks", ctas_per_sm(key)));
  a.push_back(fmt::arg("entry", entry));
  a.push_back(fmt::arg("params", fc1 ? "BatchFc1Params" : "BatchFc2Params"));
  auto format = [&](std::string_view text) { return fmt::vformat(text, a); };
  std::string check, call, includes;
  if (key.wgmma) {
    check = format(
        "static_assert({stages} * WgmmaStage<{nvfp4}, {mats}, {warps}, {ntiles}>::kBytes + 1024 == {bytes}, \"host and "
        "device ring sizes differ\");\n");
    call = format(fc1 ? "moe_batch_wgmma_fc1<{nvfp4}, {act}, {limit}, {bias}, {hidden}, {intermediate}, {warps}, "
                        "{ntiles}, {stages}>"
                      : "moe_batch_wgmma_fc2<{nvfp4}, {bias}, {hidden}, {intermediate}, {warps}, {ntiles}, {stages}>");
    includes = "#include \"wgmma.cuh\"\n" + wgmma_rs_source(8 * key.ntiles) + "#include \"moe_batch_wgmma.cuh\"\n";
  } else {
    check = format(
        "static_assert({stages} * BatchStage<{nvfp4}, {mats}, {warps}, {ntiles}, {slabs}>::kBytes == {bytes}, \"host "
        "and device ring sizes differ\");\n");
    call = format(fc1 ? "moe_batch_fc1<{nvfp4}, {act}, {limit}, {bias}, {hidden}, {intermediate}, {warps}, {ntiles}, "
                        "{stages}, {slabs}>"
                      : "moe_batch_fc2<{nvfp4}, {bias}, {hidden}, {intermediate}, {warps}, {ntiles}, {stages}, {slabs}>");
    includes = "#include \"moe_batch.cuh\"\n";
  }
  a.push_back(fmt::arg("call", call));
  std::string out = kernel_header(key, 0) + includes + check +
                    format("extern \"C\" __global__ void __launch_bounds__({threads}, {min_blocks}) {entry}(const "
                           "{params} p) {{\n  {call}(p);\n}}\n");
  // FC2's module also holds the top-k combine, launched after FC2 (suffix _combine).
  if (!fc1)
    out += format("extern \"C\" __global__ void __launch_bounds__(256) {entry}_combine(const BatchFc2Params p) {{\n"
                  "  moe_topk_combine<{experts}, {hidden}, false>(p);\n}}\n");
  return out;
}

// The tile, from the pairs an expert gets on average: the token tile must hold the busiest experts' pairs
// (about p +- 3 sqrt(p)); narrower walks their weights twice, wider holds idle MMA columns and registers.
// Register MMAs: 1 tile up to 8 pairs, 2 below 14, 4 below 40, 8 from 40, two slabs per warp from 4 tiles
// (v26). On sm_90a warpgroup MMA from 14 pairs, 2 warpgroups and 2 CTAs per SM, 32 pairs below 26, 48 below
// 40, 56 below 48, 64 from 48 (v25, v26).
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

Plan plan(const PlanRequest& r) {
  Plan p;
  p.family = Family::batch;
  p.tokens = r.tokens;
  KernelKey fc1 = layer_key(r.spec, r.arch);
  const double per_expert = static_cast<double>(std::max(r.tokens, 1)) * r.spec.top_k / r.spec.experts;
  fc1.kind = KernelKind::batch_fc1;
  // Every precision takes the same tiles, except that a8's register-fed FC1 has two slabs per warp (one
  // 32-row scale block of the intermediate per warp; the warpgroup-MMA FC1 pairs warps instead).
  if (r.arch == Arch::sm_90a && per_expert >= kWgmmaFromPairsPerExpert) {
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
  if (r.spec.precision == ActPrecision::a8 && !fc1.wgmma) fc1.slabs = 2;
  // MOEJIT_BATCH_TILE_FC1 / _FC2 (or MOEJIT_DECODE_TILE for both) override the tiles, for sweeps.
  if (const auto& t = r.tuning.batch_tile_fc1 ? r.tuning.batch_tile_fc1 : r.tuning.decode_tile) t->apply(fc1);
  if (const auto& t = r.tuning.batch_tile_fc2 ? r.tuning.batch_tile_fc2 : r.tuning.decode_tile) t->apply(fc2);
  p.kernels = {route_key(r.spec, r.arch), fc1.normalized(), fc2.normalized()};
  return p;
}

}  // namespace

int batch_dynamic_smem(const KernelKey& raw) {
  const KernelKey key = raw.normalized();
  if (key.kind != KernelKind::batch_fc1 && key.kind != KernelKind::batch_fc2) return 0;
  return dynamic_smem(key);
}

const KernelFamily kBatchFamily{"batch",     kKinds, Family::batch, normalize, warps_threads, dynamic_smem,
                                ctas_per_sm, source, plan,          kMaxTokens};

}  // namespace moejit::detail
