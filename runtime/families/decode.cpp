// Decode family host side: FC1 then FC2 (+ combine), grids sized by the token count (no host sync).
// Default: FC2 is a programmatic dependent of FC1, so its routing and first weight loads overlap
// FC1's tail. With few pairs FC1 may be decode_fc1_loop (one wave walking the items) and FC2
// decode_fc2_sum (the top-k sum inside each CTA). The plan may ask for two plain launches, one
// cooperative launch (decode_fused) or one co-resident launch pipelined by expert slot (decode_pipe,
// after its clear kernel).
#include <fmt/format.h>

#include <algorithm>

#include "moejit/error.hpp"

#include "moejit/generator.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/families/families.hpp"
#include "runtime/kernel_params.hpp"
#include "runtime/launch.hpp"

namespace moejit::detail {

namespace {

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
  return r;
}

// One matrix family's prepared planes (FC1 or FC2): weights, block scales, global scales, bias.
template <class Params>
void set_planes(Params& p, const DeviceBuffer& w, const DeviceBuffer& s, const DeviceBuffer& gs, const DeviceBuffer& bias) {
  p.w = w.ptr();
  p.s = s.ptr();
  p.gscale = gs.ptr();
  p.bias = bias.ptr();
}

}  // namespace

DecodeFc1Params fc1_params(const ForwardContext& ctx) {
  const LayerSpec& spec = ctx.layer.spec();
  const DevicePtr ws = ctx.args.workspace;
  const auto& L = ctx.layer;
  DecodeFc1Params p{};
  set_planes(p, L.fc1_w, L.fc1_s, L.fc1_gs, L.fc1_bias);
  p.x = ctx.args.x;
  p.act = ws + ctx.ws.act;
  p.counters = ws + ctx.ws.counters;
  p.num_counters = spec.hidden / 16;
  p.alpha = ctx.alpha;
  p.beta = ctx.beta;
  p.limit = ctx.limit;
  p.route = routing_args(ctx);
  return p;
}

DecodeFc2Params fc2_params(const ForwardContext& ctx) {
  const DevicePtr ws = ctx.args.workspace;
  const auto& L = ctx.layer;
  DecodeFc2Params p{};
  set_planes(p, L.fc2_w, L.fc2_s, L.fc2_gs, L.fc2_bias);
  p.act = ws + ctx.ws.act;
  p.topk_weights = ctx.args.topk_weights;
  p.partial = ws + ctx.ws.partial;
  p.counters = ws + ctx.ws.counters;
  p.out = ctx.args.out;
  p.tokens = ctx.args.tokens;
  p.route = routing_args(ctx);
  return p;
}

namespace {

// Active-slot capacity: the y extent of the two-launch grids.
unsigned slot_capacity(const ForwardContext& ctx) {
  const LayerSpec& spec = ctx.layer.spec();
  return static_cast<unsigned>(std::min(ctx.args.tokens * spec.top_k, spec.experts));
}

}  // namespace

void launch_decode(const ForwardContext& ctx, const KernelKey& fc1_key, const KernelKey& fc2_key) {
  const LayerSpec& spec = ctx.layer.spec();
  const unsigned slots = slot_capacity(ctx);
  DecodeFc1Params p1 = fc1_params(ctx);
  LaunchShape s1{static_cast<unsigned>(spec.intermediate / 16), slots, 1, static_cast<unsigned>(fc1_key.warps * 32), 0};
  if (fc1_key.kind == KernelKind::decode_fc1_loop || fc1_key.kind == KernelKind::decode_fc1_stream) {
    // One wave walks the (slab, slot) items: as many CTAs as the register cap (and a streaming
    // kernel's ring) keeps resident, at most one per item.
    const unsigned items = static_cast<unsigned>(spec.intermediate / 16) * slots;
    const unsigned wave = static_cast<unsigned>(ctx.sm_count * decode_ctas_per_sm(fc1_key));
    s1 = LaunchShape{std::min(items, wave), 1, 1, static_cast<unsigned>(kernel_threads(fc1_key)),
                     static_cast<unsigned>(decode_dynamic_smem(fc1_key))};
  }
  launch(ctx.modules.function(fc1_key, ctx.stream), s1, ctx.stream, &p1);

  DecodeFc2Params p2 = fc2_params(ctx);
  // decode_fc2_sum: `groups` CTAs per slab serve every expert; decode_fc2: one CTA per (slab, slot).
  const unsigned fc2_slots = fc2_key.kind == KernelKind::decode_fc2_sum ? static_cast<unsigned>(fc2_key.groups) : slots;
  LaunchShape s2{static_cast<unsigned>(spec.hidden / (16 * fc2_key.slabs)), fc2_slots, 1,
                 static_cast<unsigned>(fc2_key.warps * 32), 0};
  launch(ctx.modules.function(fc2_key, ctx.stream), s2, ctx.stream, &p2,
         /*programmatic_dependent=*/ctx.plan.launch == DecodeLaunch::pdl);
}

void launch_decode_fused(const ForwardContext& ctx, const KernelKey& key) {
  const LayerSpec& spec = ctx.layer.spec();
  DecodeFusedParams p{};
  p.fc1 = fc1_params(ctx);
  p.fc2 = fc2_params(ctx);
  p.barrier = ctx.args.workspace + ctx.ws.barrier;
  p.slots = static_cast<int32_t>(slot_capacity(ctx));
  // The barrier's arrival counter must be 0 on entry (the kernel leaves it at 0, but the workspace
  // needs no initialization, so clear it every call: one memset node in a graph).
  check(driver().cuMemsetD8Async(p.barrier, 0, sizeof(uint32_t), ctx.stream), "cuMemsetD8Async(barrier)");
  const unsigned items = static_cast<unsigned>(std::max(spec.intermediate, spec.hidden) / 16) * p.slots;
  launch_cooperative(ctx.modules.function(key, ctx.stream), items, static_cast<unsigned>(key.warps * 32), 0, ctx.sm_count,
                     ctx.stream, &p);
}

void launch_decode_pipe(const ForwardContext& ctx, const KernelKey& key) {
  const LayerSpec& spec = ctx.layer.spec();
  const DecodePipeLayout l = decode_pipe_layout(key, ctx.args.tokens, spec.top_k, ctx.sm_count);
  if (l.window < 1)
    throw Error(fmt::format("decode_pipe: {} tokens do not fit one expert slot per FC2 warp in shared memory ({})",
                            ctx.args.tokens, key.str()));
  DecodePipeParams p{};
  p.fc1 = fc1_params(ctx);
  p.fc2 = fc2_params(ctx);
  p.slot_done = ctx.args.workspace + ctx.ws.slot_done;
  p.slots = l.slots;
  p.fc2_parts = l.fc2_parts;
  p.part_chunks = l.part_chunks;
  p.window = l.window;
  p.units_per_warp = l.units_per_warp;
  p.stage_pairs = l.stage_pairs;
  p.bar_offset = l.bar_offset;
  p.buf_offset = l.buf_offset;
  p.stage_offset = l.stage_offset;
  p.acc_offset = l.acc_offset;
  const unsigned block = static_cast<unsigned>(kernel_threads(key));
  CUfunction f = ctx.modules.function(key, ctx.stream);
  // One CTA per SM; the layout above was computed for that grid.
  const unsigned sms = static_cast<unsigned>(ctx.sm_count);
  if (cooperative_grid_limit(f, block, static_cast<unsigned>(l.bytes), ctx.sm_count) < sms)
    throw Error(fmt::format("decode_pipe: {} cannot keep one CTA on each of the {} SMs", key.str(), ctx.sm_count));
  // The clear kernel zeroes the slot counters (the workspace needs no initialization) and lets the layer
  // kernel start at once; the layer kernel waits for it only before its first counter access.
  launch(ctx.modules.function(key, ctx.stream, "_clear"), LaunchShape{1, 1, 1, 128, 0}, ctx.stream, &p);
  launch_cooperative(f, sms, block, static_cast<unsigned>(l.bytes), ctx.sm_count, ctx.stream, &p,
                     /*programmatic_dependent=*/true);
}

}  // namespace moejit::detail
