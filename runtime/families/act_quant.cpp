// The act_quant pre-pass host side (templates/moe_act_quant.cuh): launched first in an a8/a4 plan, a plain
// launch (the previous forward's kernels, which may still read the workspace it writes, are done before it
// starts). Where the layer quantizes x once per token (PreparedLayerImpl::x_quant_per_token) it writes one
// row per token into the workspace's xq region, which only this pass writes; otherwise one row per local
// pair into the partial region, which FC2 writes only after its wait for FC1, the rows' last reader (the
// decode and batch families; the prefill family's gather quantizes per pair itself, and its blocks live in
// the partial region). FC1 or the gather reads the rows in place of x (RoutingArgs::x_per_token says
// which rows: fc1_x_row).
#include <fmt/format.h>

#include "generator/families/act_quant.hpp"
#include "moejit/error.hpp"
#include "moejit/generator.hpp"
#include "runtime/families/families.hpp"
#include "runtime/kernel_params.hpp"
#include "runtime/launch.hpp"

namespace moejit::detail {

void launch_act_quant(const ForwardContext& ctx, const KernelKey& key) {
  ActQuantParams p{};
  p.x = ctx.args.x;
  p.xq = act_quant_rows(ctx);
  p.gscale = ctx.layer.fc1_gs.ptr();
  p.route = routing_args(ctx);
  const long long rows = static_cast<long long>(ctx.args.tokens) * (p.route.x_per_token ? 1 : ctx.layer.spec().top_k);
  launch(ctx.modules.function(key, ctx.stream),
         LaunchShape{act_quant_ctas(key, rows), 1, 1, static_cast<unsigned>(kernel_threads(key)), 0}, ctx.stream, &p);
}

DevicePtr act_quant_rows(const ForwardContext& ctx) {
  return ctx.args.workspace + (ctx.layer.x_quant_per_token ? ctx.ws.xq : ctx.ws.partial);
}

}  // namespace moejit::detail
