#pragma once
// Host side of each kernel family: builds its parameters and launches its kernels (one file per family,
// runtime/families/<family>.cpp), behind one table (runtime/families/table.cpp) by Family.
#include <cuda.h>

#include <memory>

#include "moejit/runtime.hpp"
#include "runtime/kernel_params.hpp"
#include "runtime/module_registry.hpp"
#include "runtime/prepared_layer.hpp"
#include "runtime/workspace.hpp"

namespace moejit::detail {

std::shared_ptr<PreparedLayerImpl> prepare_layer(ModuleRegistry& modules, Arch arch, const DeviceLayerView& v,
                                                 CUstream stream);

// Everything one forward launch sequence needs.
struct ForwardContext {
  const PreparedLayerImpl& layer;
  const ForwardArgs& args;
  const WorkspaceLayout& ws;
  const Plan& plan;
  ModuleRegistry& modules;
  CUstream stream;
  float alpha, beta, limit;
  int sm_count;
  // The plan's act_quant pre-pass ran just before: args.x is its rows (one per pair), and FC1 may be its
  // programmatic dependent (FC1 waits for it before reading them).
  bool after_act_quant = false;
};

// The routing arguments of the families that read routed pairs (the route kernel's workspace lists and
// the raw top-k ids).
RoutingArgs routing_args(const ForwardContext& ctx);
// The a8/a4 pre-pass (runtime/families/act_quant.cpp) and where it writes its rows.
void launch_act_quant(const ForwardContext& ctx, const KernelKey& key);
DevicePtr act_quant_rows(const ForwardContext& ctx);
// Routing kernel: counts, offsets and the stable permutation into the workspace.
void launch_route(const ForwardContext& ctx, const KernelKey& key);

// A planned family's launches of ctx.plan.kernels, in order (the route kernel first where planned).
void launch_decode(const ForwardContext& ctx);
void launch_batch(const ForwardContext& ctx);
void launch_prefill(const ForwardContext& ctx);

// FC1's and FC2's fields every computing family's parameters share: the prepared planes (weights, block
// scales, global scales, bias), the activations, the workspace regions and the routing. A family sets its
// own fields after these.
template <class Params>
void set_fc1_common(Params& p, const ForwardContext& ctx) {
  const PreparedLayerImpl& L = ctx.layer;
  p.w = L.fc1_w.ptr();
  p.s = L.fc1_s.ptr();
  p.gscale = L.fc1_gs.ptr();
  p.bias = L.fc1_bias.ptr();
  p.x = ctx.args.x;
  p.act = ctx.args.workspace + ctx.ws.act;
  p.alpha = ctx.alpha;
  p.beta = ctx.beta;
  p.limit = ctx.limit;
  p.route = routing_args(ctx);
}
template <class Params>
void set_fc2_common(Params& p, const ForwardContext& ctx) {
  const PreparedLayerImpl& L = ctx.layer;
  p.w = L.fc2_w.ptr();
  p.s = L.fc2_s.ptr();
  p.gscale = L.fc2_gs.ptr();
  p.bias = L.fc2_bias.ptr();
  p.act = ctx.args.workspace + ctx.ws.act;
  p.topk_weights = ctx.args.topk_weights;
  p.partial = ctx.args.workspace + ctx.ws.partial;
  p.out = ctx.args.out;
  p.tokens = ctx.args.tokens;
  p.route = routing_args(ctx);
}

// Where a kernel's parameters take the lists' heads and their length (the decode kernels' s_head and
// s_head_words); null where they do not (the batch and prefill kernels).
struct CsfHeadFields {
  DevicePtr* head = nullptr;
  i32* words = nullptr;
};
// The scale plane `plane` (1 FC1's, 2 FC2's) as `key` reads it: the plain prepared plane in s, or, where
// key.csf_scales has the plane's bit, the prepared CSF plane (offsets in s, base bytes and exception lists
// in s_base and s_exc, the lists' heads and their length in heads' fields where the kernel takes them).
// Throws moejit::Error where the layer holds no such plane.
void select_scale_plane(const ForwardContext& ctx, const KernelKey& key, int plane, DevicePtr& s, DevicePtr& s_base,
                        DevicePtr& s_exc, CsfHeadFields heads);
template <class Params>
CsfHeadFields csf_heads_of(Params& p) {
  if constexpr (requires { p.s_head; })
    return {&p.s_head, &p.s_head_words};
  else
    return {};
}
template <class Params>
void set_fc1_scales(Params& p, const ForwardContext& ctx, const KernelKey& key) {
  select_scale_plane(ctx, key, 1, p.s, p.s_base, p.s_exc, csf_heads_of(p));
}
template <class Params>
void set_fc2_scales(Params& p, const ForwardContext& ctx, const KernelKey& key) {
  select_scale_plane(ctx, key, 2, p.s, p.s_base, p.s_exc, csf_heads_of(p));
}

// An upper bound on the token tiles of `tile` pairs the routing of ctx's tokens can produce, from M alone
// (no host sync): each of at most min(pairs, E) active experts rounds its pairs up to a whole tile, so at
// most (pairs + slots * (tile - 1)) / tile.
long long token_tile_bound(const ForwardContext& ctx, long long tile);

// The top-k combine in FC2's module (entry _combine) of the families whose FC2 writes a weighted fp32 row
// per pair (batch, prefill): four outputs per thread, a grid-stride loop over at most 16 CTAs of 256
// threads per SM, a programmatic dependent of FC2. params: the FC2 parameter struct the combine reads.
void launch_topk_combine(const ForwardContext& ctx, const KernelKey& fc2_key, void* params);

// The launcher of a plan's family. Throws moejit::Error for a family without one.
void launch_plan(const ForwardContext& ctx);

}  // namespace moejit::detail
