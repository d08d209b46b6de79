// The act_quant pre-pass host side (templates/moe_act_quant.cuh): launched first in an a8/a4 plan of the
// decode and batch families, a plain launch (the previous forward's kernels, which may still read the
// workspace it writes, are done before it starts). It writes each local pair's quantized input row into the
// workspace's partial region, which FC2 writes only after its wait for FC1, the rows' last reader; FC1
// reads the rows in place of x (the plan's FC1 keys address x by pair in a8/a4).
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
  const long long pairs = static_cast<long long>(ctx.args.tokens) * ctx.layer.spec().top_k;
  launch(ctx.modules.function(key, ctx.stream),
         LaunchShape{act_quant_ctas(key, pairs), 1, 1, static_cast<unsigned>(kernel_threads(key)), 0}, ctx.stream, &p);
}

DevicePtr act_quant_rows(const ForwardContext& ctx) { return ctx.args.workspace + ctx.ws.partial; }

}  // namespace moejit::detail
