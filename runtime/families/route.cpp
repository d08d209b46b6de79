// Routing family host side.
#include "moejit/generator.hpp"
#include "runtime/families/families.hpp"
#include "runtime/kernel_params.hpp"
#include "runtime/launch.hpp"

namespace moejit::detail {

RoutingArgs routing_args(const ForwardContext& ctx) {
  const LayerSpec& spec = ctx.layer.spec();
  const DevicePtr ws = ctx.args.workspace;
  RoutingArgs r{};
  r.num_active = ws + ctx.ws.num_active;
  r.active_expert = ws + ctx.ws.active_expert;
  r.active_offset = ws + ctx.ws.active_offset;
  r.pair_index = ws + ctx.ws.pair_index;
  r.topk_ids = ctx.args.topk_ids;
  r.pairs = ctx.args.tokens * spec.top_k;
  r.expert_begin = spec.expert_begin;
  r.top_k = spec.top_k;
  r.x_per_token = ctx.layer.x_quant_per_token ? 1 : 0;
  return r;
}

void launch_route(const ForwardContext& ctx, const KernelKey& key) {
  const LayerSpec& spec = ctx.layer.spec();
  const DevicePtr ws = ctx.args.workspace;
  RouteParams p{};
  p.topk_ids = ctx.args.topk_ids;
  p.pairs = ctx.args.tokens * spec.top_k;
  p.expert_begin = spec.expert_begin;
  p.num_active = ws + ctx.ws.num_active;
  p.active_expert = ws + ctx.ws.active_expert;
  p.active_offset = ws + ctx.ws.active_offset;
  p.pair_index = ws + ctx.ws.pair_index;
  p.counters = ws + ctx.ws.counters;
  p.num_counters = spec.hidden / 16;
  LaunchShape shape;
  shape.block = static_cast<unsigned>(kernel_threads(key));
  shape.dynamic_smem = static_cast<unsigned>(kernel_dynamic_smem(key));
  launch(ctx.modules.function(key, ctx.stream), shape, ctx.stream, &p);
}

}  // namespace moejit::detail
