// Host pieces the families that run experts' pairs in token tiles share (batch, prefill): the bound on
// their tile count and the top-k combine launch.
#include <algorithm>

#include "runtime/families/families.hpp"
#include "runtime/launch.hpp"

namespace moejit::detail {

long long token_tile_bound(const ForwardContext& ctx, long long tile) {
  const LayerSpec& spec = ctx.layer.spec();
  const long long pairs = static_cast<long long>(ctx.args.tokens) * spec.top_k;
  const long long slots = std::min<long long>(pairs, spec.experts);
  return (pairs + slots * (tile - 1)) / tile;
}

void launch_topk_combine(const ForwardContext& ctx, const KernelKey& fc2_key, void* params) {
  const long long quads = static_cast<long long>(ctx.args.tokens) * (ctx.layer.spec().hidden / 4);
  const unsigned grid =
      static_cast<unsigned>(std::clamp<long long>((quads + 255) / 256, 1, 16LL * std::max(ctx.sm_count, 1)));
  launch(ctx.modules.function(fc2_key, ctx.stream, "_combine"), LaunchShape{grid, 1, 1, 256, 0}, ctx.stream, params,
         /*programmatic_dependent=*/true);
}

}  // namespace moejit::detail
