// The prefill family's key rules, generated source, geometry and plan (templates/moe_prefill.cuh).
//
// Tile fields: warps = consumer warps (whole warpgroups; a producer warpgroup is added), ntiles = the token
// tile in n8 blocks (16..256 tokens, even), depth = stages of the shared-memory ring less one, slabs = 16-row
// slabs per consumer warp (FC2: 1 or 2; FC1: 1), groups = teams of consumer warpgroups that take the CTA's
// units in turn (1: every consumer warp works on each unit; 2: two teams, one's epilogue beside the other's
// MMAs), parts = CTAs of a cluster that share each B block (1, or 2: a pair of CTAs on two row groups of
// one tile, each copying half of every B block into both; tile suffix p2), min_blocks 1 (one persistent
// CTA per SM).
#include <fmt/args.h>
#include <fmt/format.h>

#include <algorithm>

#include "generator/families/family.hpp"
#include "generator/families/prefill.hpp"
#include "generator/families/route.hpp"
#include "moejit/error.hpp"

namespace moejit::detail {
namespace {

constexpr std::pair<KernelKind, std::string_view> kKinds[] = {{KernelKind::prefill_fc1, "prefill_fc1"},
                                                               {KernelKind::prefill_fc2, "prefill_fc2"}};


int mats(const KernelKey& k) { return k.kind == KernelKind::prefill_fc1 ? fc1_mats(k) : 1; }

// A operands per consumer warp: its slabs times the matrices of each.
int operands(const KernelKey& k) { return mats(k) * k.slabs; }

// The warps that share a unit (and a stage): one team's.
int unit_warps(const KernelKey& k) { return k.warps / k.groups; }

// The narrowest product width the kernels run next to the tile's and its half (templates/moe_prefill.cuh
// kPrefillQuarterWidth): a quarter of tiles of 64 tokens and more.
bool quarter_width(int n) { return n % 32 == 0 && n / 4 >= 16; }

// fp32 accumulator registers per consumer thread: operands x the tile's ntiles n8 blocks x 4.
int accumulators(const KernelKey& k) { return operands(k) * k.ntiles * 4; }

// Whether a tile's accumulators exceed 128 registers per consumer thread; such a kernel runs 128-wide
// products in place of half-tile ones (templates/moe_prefill.cuh kPrefillWideAcc).
bool wide_accumulators(const KernelKey& k) { return accumulators(k) > 128; }

// The widths below the tile that tiles wider than 128 tokens also run (templates/moe_prefill.cuh
// kPrefillMidWidth): 128 and 96 where they lie above half the tile, only 128 with wide accumulators.
bool mid_width(const KernelKey& k, int w) {
  const int n = 8 * k.ntiles;
  return n > 128 && w < n && (wide_accumulators(k) ? w == 128 : w > n / 2);
}

// PrefillStage::kBytes (templates/moe_prefill.cuh).
int stage_bytes(const KernelKey& k) {
  const int used = 8 * k.ntiles * 128 + unit_warps(k) * operands(k) * (512 + chunk_scale_bytes(k));
  return (used + 1023) / 1024 * 1024;
}

int dynamic_smem(const KernelKey& k) { return (k.depth + 1) * stage_bytes(k) + 1024; }

void normalize(KernelKey& k, const KernelKey& original) {
  auto fail = [&](std::string_view rule) { throw Error(fmt::format("kernel key {}: {}", original.str(), rule)); };
  normalize_common(k, original, 32);
  if (k.arch != Arch::sm_90a) fail("the prefill family runs on sm_90a's warpgroup MMA only");
  if (k.warps % 4 || k.warps > 16) fail("prefill kernels take 1..4 consumer warpgroups (warps 4, 8, 12, 16)");
  if (k.ntiles % 2 || k.ntiles < 2) fail("prefill tiles hold an even number of n8 blocks (16..256 tokens)");
  if (k.inline_route) fail(fmt::format("{} reads the route kernel's lists (i0)", to_string(k.kind)));
  if (k.depth < 1) fail("prefill kernels keep at least two stages (depth >= 1)");
  k.min_blocks = 1;
  if (k.groups > 2 || (k.warps / k.groups) % 4)
    fail("prefill kernels take one team of consumer warpgroups or two (g2) of whole warpgroups each");
  if (k.parts != 1 && k.parts != 2) fail("prefill kernels run alone (p1) or in clusters of two CTAs (p2)");
  if (k.parts == 2 && k.groups != 1) fail("clusters of two CTAs (p2) take one team of consumer warpgroups (g1)");
  if (k.kind == KernelKind::prefill_fc1 && k.slabs != 1) fail("prefill_fc1 takes one slab per consumer warp");
  // At most 160 accumulator registers per consumer thread (above 128 the producer keeps 24 registers
  // instead of 40, templates/moe_prefill.cuh).
  if (accumulators(k) > 160)
    fail(fmt::format("{} operands per warp on {} tokens need {} accumulator registers per thread (at most 160)",
                     operands(k), 8 * k.ntiles, accumulators(k)));
  k.columns = 8;
  k.l2_ahead = 0;
  k.x_staged = false;
  k.wgmma = false;
  if (k.kind == KernelKind::prefill_fc2) {
    // FC2 does not see the activation; the limit is an FC1 concern.
    k.activation = Activation::silu;
    k.limit = false;
  }
  // a8's FC1 adds the warp pairs' exchange area (static shared memory) to the ring.
  const int most = arch_limits(k.arch).max_dynamic_smem - slab_pair_exchange_bytes(k);
  if (dynamic_smem(k) > most)
    fail(fmt::format("{} stages of {} bytes exceed the {} bytes of shared memory a CTA has", k.depth + 1,
                     stage_bytes(k), most));
}

// Consumer warps plus the producer warpgroup (registers move between warpgroups, templates/wgmma.cuh).
int threads(const KernelKey& k) { return k.warps * 32 + 128; }

int ctas_per_sm(const KernelKey&) { return 1; }

std::string source(const KernelKey& key, const std::string& entry) {
  const bool fc1 = key.kind == KernelKind::prefill_fc1;
  const int n = 8 * key.ntiles;
  fmt::dynamic_format_arg_store<fmt::format_context> a;
  push_layer_args(a, key);
  a.push_back(fmt::arg("warps", key.warps));
  a.push_back(fmt::arg("teams", key.groups));
  a.push_back(fmt::arg("unit_warps", unit_warps(key)));
  a.push_back(fmt::arg("n", n));
  a.push_back(fmt::arg("stages", key.depth + 1));
  a.push_back(fmt::arg("operands", operands(key)));
  a.push_back(fmt::arg("slabs", key.slabs));
  a.push_back(fmt::arg("bytes", dynamic_smem(key)));
  a.push_back(fmt::arg("threads", threads(key)));
  a.push_back(fmt::arg("cluster", key.parts));
  a.push_back(fmt::arg("cluster_dims", key.parts > 1 ? fmt::format("__cluster_dims__({}, 1, 1) ", key.parts) : ""));
  a.push_back(fmt::arg("entry", entry));
  // a8/a4's gather quantizes x, a4's with a1_gs from FC1's scale plane, placed by the matrix count (a16's
  // source keeps the template's default).
  a.push_back(fmt::arg("gather_args", key.precision == ActPrecision::a16
                                          ? fmt::format("{}", kPrefillGatherChunksPerCta)
                                          : fmt::format("{}, {}", kPrefillGatherChunksPerCta, mats(key))));
  a.push_back(fmt::arg("params", fc1 ? "PrefillFc1Params" : "PrefillFc2Params"));
  auto format = [&](std::string_view text) { return fmt::vformat(text, a); };
  const std::string call =
      format(fc1 ? "moe_prefill_fc1<{nvfp4}, {act}, {limit}, {bias}, {hidden}, {intermediate}, {warps}, {teams}, {n}, "
                   "{stages}, {cluster}>"
                 : "moe_prefill_fc2<{nvfp4}, {bias}, {hidden}, {intermediate}, {warps}, {teams}, {slabs}, {n}, {stages}, "
                   "{cluster}>");
  a.push_back(fmt::arg("call", call));
  // Keys whose producer moves a stage's weights and scales with one tensor copy each (the runtime passes the
  // planes' tensor maps): moe_prefill.cuh reads the define.
  std::string out = kernel_header(key, 0) + (prefill_tensor_copies(key) ? "#define MOEJIT_PREFILL_TENSOR_COPIES 1\n" : "") +
                    "#include \"wgmma.cuh\"\n" + wgmma_rs_source(n) +
                    (wide_accumulators(key) ? std::string() : wgmma_rs_source(n / 2)) +
                    (quarter_width(n) ? wgmma_rs_source(n / 4) : std::string()) +
                    (mid_width(key, 96) ? wgmma_rs_source(96) : std::string()) +
                    (mid_width(key, 128) ? wgmma_rs_source(128) : std::string()) +
                    "#include \"moe_prefill.cuh\"\n" +
                    format("static_assert({stages} * PrefillStage<{nvfp4}, {operands}, {unit_warps}, {n}>::kBytes + 1024 == "
                           "{bytes}, \"host and device ring sizes differ\");\n") +
                    fmt::format("static_assert(kTileTableHeader == {}, \"host and device tile tables differ\");\n",
                                kPrefillTileTableHeader) +
                    format("extern \"C\" __global__ void {cluster_dims}__launch_bounds__({threads}, 1) {entry}(const __grid_constant__ {params} p) {{\n"
                           "  {call}(p);\n}}\n");
  if (fc1)
    out += format("extern \"C\" __global__ void __launch_bounds__(256) {entry}_gather(const __grid_constant__ PrefillFc1Params p) {{\n"
                  "  moe_prefill_gather<{hidden}, {n}, {gather_args}>(p);\n}}\n");
  else
    out += format("extern \"C\" __global__ void __launch_bounds__(256) {entry}_combine(const __grid_constant__ PrefillFc2Params p) {{\n"
                  "  moe_topk_combine<{experts}, {hidden}, true>(p);\n}}\n");
  return out;
}

// The token tile from the pairs an expert gets on average: wide enough that most experts' pairs fit one
// tile (a second tile decodes the expert's weights again, for a few pairs), so 96 pairs from 48 on average;
// from 96 on average 128, not 160: the 160-pair tile costs more than the nearly empty second tiles it saves
// (perf-log v42). The narrower paths cover a partly filled tile. The ring takes as many stages as fit in
// 200 KiB, at most 8.
int prefill_ntiles(double pairs_per_expert) {
  if (pairs_per_expert >= 96) return 16;
  if (pairs_per_expert >= 48) return 12;
  if (pairs_per_expert >= 40) return 8;
  return 4;
}

Plan plan(const PlanRequest& r) {
  Plan p;
  p.family = Family::prefill;
  p.tokens = r.tokens;
  KernelKey fc1 = layer_key(r.spec, r.arch);
  fc1.kind = KernelKind::prefill_fc1;
  const double per_expert = static_cast<double>(std::max(r.tokens, 1)) * r.spec.top_k / r.spec.experts;
  fc1.warps = 8;
  fc1.ntiles = prefill_ntiles(per_expert);
  fc1.min_blocks = 1;
  KernelKey fc2 = fc1;
  fc2.kind = KernelKind::prefill_fc2;
  const auto fit_depth = [](KernelKey& k) {
    k.depth = 1;
    while (k.depth < 7 && (k.depth + 2) * stage_bytes(k) + 1024 <= 200 * 1024) ++k.depth;
  };
  // a8/a4 FC1 quantizes its output in the epilogue, where the tensor pipe idles; two teams of one warpgroup
  // each overlap one team's epilogue with the other's products. Measured to pay at the 128-token tile for
  // hidden sizes up to 4096 and to cost at DeepSeek-V3's 7168 (perf-log v44).
  if (fc1.precision != ActPrecision::a16 && fc1.ntiles == 16 && r.spec.hidden <= 4096) fc1.groups = 2;
  // FC2 over two slabs per consumer warp (256-row units) at the 128-token tile: each B block it copies feeds
  // twice the rows, half of FC2's B traffic through L2. Measured to pay at DeepSeek-V3's hidden size of 7168
  // (3 % at M = 4096, 10 % at 16384) and to stay within 1 % at 2880 and 2048 (perf-log v49).
  if (fc1.ntiles == 16 && r.spec.hidden >= 4096) fc2.slabs = 2;
  fit_depth(fc1);
  fit_depth(fc2);
  // MOEJIT_PREFILL_TILE_FC1 / _FC2 override the tiles, for sweeps (both must keep one ntiles). With one of
  // them set, the other kernel keeps its planned tile at the override's token tile (its ring refitted), so
  // one kernel's variant is timed against the other's plan at every M.
  const auto& o1 = r.tuning.prefill_tile_fc1;
  const auto& o2 = r.tuning.prefill_tile_fc2;
  if (o1) o1->apply(fc1);
  if (o2) o2->apply(fc2);
  if (o1 && !o2 && fc2.ntiles != fc1.ntiles) {
    fc2.ntiles = fc1.ntiles;
    fit_depth(fc2);
  }
  if (o2 && !o1 && fc1.ntiles != fc2.ntiles) {
    fc1.ntiles = fc2.ntiles;
    fit_depth(fc1);
  }
  p.kernels = {route_key(r.spec, r.arch), fc1.normalized(), fc2.normalized()};
  if (p.kernels[1].ntiles != p.kernels[2].ntiles)
    throw Error(fmt::format("prefill plan: FC1 {} and FC2 {} must share one token tile (FC1 writes FC2's blocks)",
                            p.kernels[1].str(), p.kernels[2].str()));
  return p;
}

}  // namespace

bool prefill_tensor_copies(const KernelKey& key) { return key.csf_scales == 0 && key.parts == 1; }

const KernelFamily kPrefillFamily{"prefill", kKinds, Family::prefill, normalize, threads, dynamic_smem,
                                  ctas_per_sm, source, plan,          kMaxTokens};

}  // namespace moejit::detail
