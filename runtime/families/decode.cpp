// Decode family host side: FC1 then FC2 (+ combine), grids sized by the token count (no host sync).
// Default: FC2 is a programmatic dependent of FC1, so its routing and first weight loads overlap FC1's
// tail. With few pairs FC1 may be decode_fc1_loop or decode_fc1_stream (one wave walking the items) and
// FC2 decode_fc2_sum (the top-k sum inside each CTA). The plan may ask for two plain launches or one
// cooperative launch (decode_fused).
#include <fmt/format.h>

#include <algorithm>

#include "generator/families/decode.hpp"
#include "moejit/error.hpp"
#include "moejit/generator.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/families/families.hpp"
#include "runtime/kernel_params.hpp"
#include "runtime/launch.hpp"

namespace moejit::detail {

namespace {

DecodeFc1Params fc1_params(const ForwardContext& ctx, const KernelKey& key) {
  DecodeFc1Params p{};
  set_fc1_common(p, ctx);
  set_fc1_scales(p, ctx, key);
  p.counters = ctx.args.workspace + ctx.ws.counters;  // zeroed by FC1 where routing is inline
  p.num_counters = ctx.layer.spec().hidden / 16;
  return p;
}

DecodeFc2Params fc2_params(const ForwardContext& ctx, const KernelKey& key) {
  DecodeFc2Params p{};
  set_fc2_common(p, ctx);
  set_fc2_scales(p, ctx, key);
  p.counters = ctx.args.workspace + ctx.ws.counters;
  return p;
}

// Active-slot capacity: the y extent of the two-launch grids.
unsigned slot_capacity(const ForwardContext& ctx) {
  const LayerSpec& spec = ctx.layer.spec();
  return static_cast<unsigned>(std::min(ctx.args.tokens * spec.top_k, spec.experts));
}

void launch_two(const ForwardContext& ctx, const KernelKey& fc1_key, const KernelKey& fc2_key) {
  const LayerSpec& spec = ctx.layer.spec();
  const unsigned slots = slot_capacity(ctx);
  DecodeFc1Params p1 = fc1_params(ctx, fc1_key);
  // One CTA per (slab, slot) item; a8's per (32-row scale block, slot), in two slab groups of warps. Dynamic
  // shared memory: a streaming ring, or CSF scale stages too large for static shared memory (0 for the
  // other keys).
  const unsigned per_slot = static_cast<unsigned>(decode_fc1_items_per_slot(fc1_key));
  const unsigned fc1_smem = static_cast<unsigned>(kernel_dynamic_smem(fc1_key));
  LaunchShape s1{per_slot, slots, 1, static_cast<unsigned>(kernel_threads(fc1_key)), fc1_smem};
  if (fc1_key.kind == KernelKind::decode_fc1_loop || fc1_key.kind == KernelKind::decode_fc1_stream) {
    // One wave walks the items: as many CTAs as the register cap (and a streaming kernel's ring) keeps
    // resident, at most one per item.
    const unsigned items = per_slot * slots;
    const unsigned wave = static_cast<unsigned>(ctx.sm_count * decode_ctas_per_sm(fc1_key));
    s1 = LaunchShape{std::min(items, wave), 1, 1, static_cast<unsigned>(kernel_threads(fc1_key)), fc1_smem};
  }
  // After the a8/a4 pre-pass FC1 is its programmatic dependent: the weight loads overlap it, and slab_mma
  // waits for it before reading the rows.
  launch(ctx.modules.function(fc1_key, ctx.stream), s1, ctx.stream, &p1,
         /*programmatic_dependent=*/ctx.after_act_quant);

  DecodeFc2Params p2 = fc2_params(ctx, fc2_key);
  // decode_fc2_sum: `groups` CTAs per slab serve every expert; decode_fc2: one CTA per (slab, slot).
  const unsigned fc2_slots = fc2_key.kind == KernelKind::decode_fc2_sum ? static_cast<unsigned>(fc2_key.groups) : slots;
  LaunchShape s2{static_cast<unsigned>(spec.hidden / (16 * fc2_key.slabs)), fc2_slots, 1,
                 static_cast<unsigned>(fc2_key.warps * 32), static_cast<unsigned>(kernel_dynamic_smem(fc2_key))};
  launch(ctx.modules.function(fc2_key, ctx.stream), s2, ctx.stream, &p2,
         /*programmatic_dependent=*/ctx.plan.launch == DecodeLaunch::pdl);
}

// FC1 and FC2 in one cooperative launch (decode_fused), grid clamped to what is co-resident.
void launch_fused(const ForwardContext& ctx, const KernelKey& key) {
  const LayerSpec& spec = ctx.layer.spec();
  DecodeFusedParams p{};
  p.fc1 = fc1_params(ctx, key);
  p.fc2 = fc2_params(ctx, key);
  p.barrier = ctx.args.workspace + ctx.ws.barrier;
  p.slots = static_cast<int32_t>(slot_capacity(ctx));
  // The barrier's arrival counter must be 0 on entry (the kernel leaves it at 0, but the workspace needs
  // no initialization, so clear it every call: one memset node in a graph). The generation word may hold
  // any value, but it is cleared with it: every CTA reads it, and a read of memory nothing wrote is what
  // compute-sanitizer's initcheck reports.
  check(driver().cuMemsetD8Async(p.barrier, 0, 2 * sizeof(uint32_t), ctx.stream), "cuMemsetD8Async(barrier)");
  const unsigned items = static_cast<unsigned>(std::max(spec.intermediate, spec.hidden) / 16) * p.slots;
  launch_cooperative(ctx.modules.function(key, ctx.stream), items, static_cast<unsigned>(key.warps * 32),
                     static_cast<unsigned>(kernel_dynamic_smem(key)), ctx.sm_count, ctx.stream, &p);
}

}  // namespace

void launch_decode(const ForwardContext& ctx) {
  const std::vector<KernelKey>& k = ctx.plan.kernels;
  size_t next = 0;
  if (k.at(0).kind == KernelKind::route) launch_route(ctx, k.at(next++));
  if (k.at(next).kind == KernelKind::decode_fused) return launch_fused(ctx, k.at(next));
  if (k.size() != next + 2)
    throw Error(fmt::format("decode plan: expected FC1 and FC2 after routing, got {}", ctx.plan.describe()));
  launch_two(ctx, k.at(next), k.at(next + 1));
}

}  // namespace moejit::detail
