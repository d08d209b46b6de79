// Decode family host side: FC1 then FC2 (+ combine), grids sized by the token count (no host sync).
// FC2 is a programmatic dependent of FC1, so its routing and first weight loads overlap FC1's tail.
#include <algorithm>

#include "runtime/families/families.hpp"
#include "runtime/kernel_params.hpp"
#include "runtime/launch.hpp"

namespace moejit::detail {

void launch_decode(const ForwardContext& ctx, const KernelKey& fc1_key, const KernelKey& fc2_key) {
  const LayerSpec& spec = ctx.layer.spec();
  const DevicePtr ws = ctx.args.workspace;
  const int pairs = ctx.args.tokens * spec.top_k;
  const unsigned slots = static_cast<unsigned>(std::min(pairs, spec.experts));
  const auto& L = ctx.layer;

  RoutingArgs r{};
  r.num_active = ws + ctx.ws.num_active;
  r.active_expert = ws + ctx.ws.active_expert;
  r.active_offset = ws + ctx.ws.active_offset;
  r.pair_index = ws + ctx.ws.pair_index;
  r.topk_ids = ctx.args.topk_ids;
  r.pairs = pairs;
  r.expert_begin = spec.expert_begin;
  r.top_k = spec.top_k;

  DecodeFc1Params p1{};
  p1.w = L.fc1_w.ptr();
  p1.s = L.fc1_s.ptr();
  p1.gscale = L.fc1_gs.ptr();
  p1.bias = L.fc1_bias.ptr();
  p1.x = ctx.args.x;
  p1.act = ws + ctx.ws.act;
  p1.counters = ws + ctx.ws.counters;
  p1.num_counters = spec.hidden / 16;
  p1.alpha = ctx.alpha;
  p1.beta = ctx.beta;
  p1.limit = ctx.limit;
  p1.route = r;
  LaunchShape s1{static_cast<unsigned>(spec.intermediate / 16), slots, 1, static_cast<unsigned>(fc1_key.warps * 32), 0};
  launch(ctx.modules.function(fc1_key, ctx.stream), s1, ctx.stream, &p1);

  DecodeFc2Params p2{};
  p2.w = L.fc2_w.ptr();
  p2.s = L.fc2_s.ptr();
  p2.gscale = L.fc2_gs.ptr();
  p2.bias = L.fc2_bias.ptr();
  p2.act = ws + ctx.ws.act;
  p2.topk_weights = ctx.args.topk_weights;
  p2.partial = ws + ctx.ws.partial;
  p2.counters = ws + ctx.ws.counters;
  p2.out = ctx.args.out;
  p2.tokens = ctx.args.tokens;
  p2.route = r;
  LaunchShape s2{static_cast<unsigned>(spec.hidden / 16), slots, 1, static_cast<unsigned>(fc2_key.warps * 32), 0};
  launch(ctx.modules.function(fc2_key, ctx.stream), s2, ctx.stream, &p2, /*programmatic_dependent=*/true);
}

}  // namespace moejit::detail
