// The table of planned families' launchers (the generator's table: generator/families/table.cpp).
#include <fmt/format.h>

#include "moejit/error.hpp"
#include "runtime/families/families.hpp"

namespace moejit::detail {
namespace {
struct FamilyLauncher {
  Family family;
  void (*launch)(const ForwardContext& ctx);
};
constexpr FamilyLauncher kLaunchers[] = {
    {Family::decode, launch_decode}, {Family::batch, launch_batch}, {Family::prefill, launch_prefill}};

void launch_family(const ForwardContext& ctx) {
  for (const FamilyLauncher& l : kLaunchers)
    if (l.family == ctx.plan.family) return l.launch(ctx);
  throw Error(fmt::format("forward: no launcher for the {} family", to_string(ctx.plan.family)));
}
}  // namespace

void launch_plan(const ForwardContext& ctx) {
  const std::vector<KernelKey>& k = ctx.plan.kernels;
  if (k.empty() || k.front().kind != KernelKind::act_quant) return launch_family(ctx);
  // a8/a4: the pre-pass first, then the family's launches with its rows as the layer input; but not for the
  // prefill family where x is quantized per pair, which its gather does itself (act_quant.cpp).
  if (ctx.args.tokens == 0) return;
  Plan rest = ctx.plan;
  rest.kernels.erase(rest.kernels.begin());
  const bool pass = ctx.plan.family != Family::prefill || ctx.layer.x_quant_per_token;
  ForwardArgs args = ctx.args;
  if (pass) {
    launch_act_quant(ctx, k.front());
    args.x = act_quant_rows(ctx);
  }
  const ForwardContext next{ctx.layer,     args,        ctx.ws,    rest,         ctx.modules, ctx.stream,
                            ctx.alpha,     ctx.beta,    ctx.limit, ctx.sm_count, /*after_act_quant=*/pass};
  launch_family(next);
}

}  // namespace moejit::detail
