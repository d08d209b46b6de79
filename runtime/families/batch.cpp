// Batch family host side: after the route kernel, FC1, FC2 and the top-k combine, each a programmatic
// dependent of the kernel before it (each waits for its predecessor before reading its outputs, so only
// the launch latency overlaps). Grids are sized from the token count alone (no host sync): one CTA per
// (token tile, row group) of an upper bound on the tiles the routing can produce; CTAs past the real
// count exit at once (templates/moe_batch.cuh).
#include <fmt/format.h>

#include <algorithm>

#include "moejit/error.hpp"
#include "moejit/generator.hpp"
#include "runtime/families/families.hpp"
#include "runtime/kernel_params.hpp"
#include "runtime/launch.hpp"

namespace moejit::detail {

namespace {

// CTAs of a batch grid: the experts' token tiles (token_tile_bound) times the row groups (warps x slabs
// per warp slabs of 16 rows each).
unsigned batch_grid(const ForwardContext& ctx, const KernelKey& key, int rows) {
  const long long tiles = token_tile_bound(ctx, 8LL * key.ntiles);
  const long long slabs_per_cta = static_cast<long long>(key.warps) * key.slabs;
  const long long groups = (rows / 16 + slabs_per_cta - 1) / slabs_per_cta;
  return static_cast<unsigned>(tiles * groups);
}

}  // namespace

void launch_batch(const ForwardContext& ctx) {
  const std::vector<KernelKey>& k = ctx.plan.kernels;
  if (k.size() != 3 || k[0].kind != KernelKind::route)
    throw Error(fmt::format("batch plan: expected the route kernel, FC1 and FC2, got {}", ctx.plan.describe()));
  const KernelKey& fc1_key = k[1];
  const KernelKey& fc2_key = k[2];
  const LayerSpec& spec = ctx.layer.spec();
  // The warpgroup-MMA kernels store FC1's activations in MMA column order (templates/moe_batch_wgmma.cuh).
  if (fc1_key.wgmma != fc2_key.wgmma)
    throw Error(fmt::format("batch plan: FC1 {} and FC2 {} disagree on warpgroup MMA (m); their activation layouts "
                            "differ, so both or neither must use it",
                            fc1_key.str(), fc2_key.str()));
  launch_route(ctx, k[0]);
  BatchFc1Params p1{};
  set_fc1_common(p1, ctx);
  set_fc1_scales(p1, ctx, fc1_key);
  launch(ctx.modules.function(fc1_key, ctx.stream),
         LaunchShape{batch_grid(ctx, fc1_key, spec.intermediate), 1, 1, static_cast<unsigned>(fc1_key.warps * 32),
                     static_cast<unsigned>(kernel_dynamic_smem(fc1_key))},
         ctx.stream, &p1, /*programmatic_dependent=*/true);
  BatchFc2Params p2{};
  set_fc2_common(p2, ctx);
  set_fc2_scales(p2, ctx, fc2_key);
  launch(ctx.modules.function(fc2_key, ctx.stream),
         LaunchShape{batch_grid(ctx, fc2_key, spec.hidden), 1, 1, static_cast<unsigned>(fc2_key.warps * 32),
                     static_cast<unsigned>(kernel_dynamic_smem(fc2_key))},
         ctx.stream, &p2, /*programmatic_dependent=*/true);
  launch_topk_combine(ctx, fc2_key, &p2);
}

}  // namespace moejit::detail
