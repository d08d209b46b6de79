// Prefill family host side: after the route kernel, the gather (tile table and the layer input's token-
// tile blocks), FC1, FC2 and the top-k combine, each a programmatic dependent of the kernel before it
// (each waits for its predecessor before reading its outputs). FC1 and FC2 are persistent: one CTA per SM
// (or fewer when the bound on their work units is smaller; clusters of two where the key says p2) walking
// the units the tile table holds. The
// gather's grid is sized from the token count alone (no host sync): one CTA per (tile, 8 chunks) of an
// upper bound on the tile count; CTAs past the real count exit (templates/moe_prefill.cuh).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "moejit/error.hpp"
#include "generator/families/prefill.hpp"
#include "moejit/generator.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/families/families.hpp"
#include "runtime/kernel_params.hpp"
#include "runtime/launch.hpp"
#include "runtime/prepared_layout.hpp"

namespace moejit::detail {

namespace {

// One CTA per SM, or one per unit of the bound when it is smaller; a kernel in clusters of two CTAs (p2)
// takes as many clusters as the device runs at once, each walking units of two row groups.
unsigned persistent_grid(const ForwardContext& ctx, const KernelKey& key, int rows, CUfunction f) {
  const long long group_slabs = static_cast<long long>(key.warps / key.groups) * key.slabs;
  const long long groups = (rows / 16 + group_slabs - 1) / group_slabs;
  const long long units = token_tile_bound(ctx, 8LL * key.ntiles) * ((groups + key.parts - 1) / key.parts);
  const long long most =
      key.parts > 1 ? max_active_clusters(f, static_cast<unsigned>(key.parts), static_cast<unsigned>(kernel_threads(key)),
                                          static_cast<unsigned>(kernel_dynamic_smem(key)))
                    : std::max(ctx.sm_count, 1);
  return static_cast<unsigned>(key.parts * std::clamp<long long>(units, 1, most));
}

// Where prefill_tensor_copies(key), the kernels move each chunk's weights and scales with one tensor copy
// each, from maps over a plane seen as [slabs][chunks][run bytes] (the prepared layout: docs/WEIGHT_LAYOUT.md),
// one box = the row group's slabs' runs of one chunk.
void encode_slab_runs(TensorMapBytes& map, DevicePtr plane, long long slabs, int chunks, int run_bytes, int box_slabs) {
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(run_bytes / 4), static_cast<cuuint64_t>(chunks),
                              static_cast<cuuint64_t>(slabs)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(run_bytes), static_cast<cuuint64_t>(chunks) * run_bytes};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(run_bytes / 4), 1, static_cast<cuuint32_t>(box_slabs)};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  static_assert(sizeof(TensorMapBytes) == sizeof(CUtensorMap) && alignof(TensorMapBytes) == alignof(CUtensorMap));
  MOEJIT_CU(cuTensorMapEncodeTiled(reinterpret_cast<CUtensorMap*>(&map), CU_TENSOR_MAP_DATA_TYPE_UINT32, 3,
                                   reinterpret_cast<void*>(static_cast<std::uintptr_t>(plane)), dims, strides, box,
                                   element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
}

// The maps of one FC kernel over its planes, whose layout `g` gives (w_bytes, s_bytes: the planes' sizes,
// checked against it). The maps span every local expert's slabs, so a box past the last one reads zeros,
// never past the allocation.
template <class Params>
void set_tensor_maps(Params& p, const KernelKey& key, const PlaneGeometry& g, size_t w_bytes, size_t s_bytes) {
  if (g.weight_bytes() != w_bytes || g.scale_bytes() != s_bytes)
    throw Error(fmt::format("{}: planes of {} and {} bytes, where the prepared layout has {} and {}", key.str(), w_bytes,
                            s_bytes, g.weight_bytes(), g.scale_bytes()));
  const long long slabs = static_cast<long long>(g.experts) * g.slabs;
  const int box_slabs = key.warps / key.groups * key.slabs;
  encode_slab_runs(p.w_map, p.w, slabs, g.chunks, g.weight_run_bytes(), box_slabs);
  encode_slab_runs(p.s_map, p.s, slabs, g.chunks, g.scale_run_bytes(), box_slabs);
}

}  // namespace

void launch_prefill(const ForwardContext& ctx) {
  const std::vector<KernelKey>& k = ctx.plan.kernels;
  if (k.size() != 3 || k[0].kind != KernelKind::route || k[1].kind != KernelKind::prefill_fc1 ||
      k[2].kind != KernelKind::prefill_fc2)
    throw Error(fmt::format("prefill plan: expected the route kernel, FC1 and FC2, got {}", ctx.plan.describe()));
  const KernelKey& fc1_key = k[1];
  const KernelKey& fc2_key = k[2];
  if (fc1_key.ntiles != fc2_key.ntiles)
    throw Error(fmt::format("prefill plan: FC1 {} and FC2 {} must share one token tile (FC1 writes FC2's blocks)",
                            fc1_key.str(), fc2_key.str()));
  const LayerSpec& spec = ctx.layer.spec();
  if (ctx.args.tokens == 0) return;
  launch_route(ctx, k[0]);
  const long long tiles = token_tile_bound(ctx, 8LL * fc1_key.ntiles);
  PrefillFc1Params p1{};
  set_fc1_common(p1, ctx);
  set_fc1_scales(p1, ctx, fc1_key);
  p1.xb = ctx.args.workspace + ctx.ws.partial;
  p1.tiles = ctx.args.workspace + ctx.ws.tiles;
  p1.row_pair = ctx.args.workspace + ctx.ws.row_pair;
  if (prefill_tensor_copies(fc1_key))
    set_tensor_maps(p1, fc1_key, fc1_geometry(spec), ctx.layer.fc1_w.size(), ctx.layer.fc1_s.size());
  const unsigned gather_y = static_cast<unsigned>(((spec.hidden + 63) / 64 + kPrefillGatherChunksPerCta - 1) / kPrefillGatherChunksPerCta);
  launch(ctx.modules.function(fc1_key, ctx.stream, "_gather"),
         LaunchShape{static_cast<unsigned>(tiles), gather_y, 1, 256, 0}, ctx.stream, &p1,
         /*programmatic_dependent=*/true);
  const CUfunction fc1 = ctx.modules.function(fc1_key, ctx.stream);
  launch(fc1,
         LaunchShape{persistent_grid(ctx, fc1_key, spec.intermediate, fc1), 1, 1,
                     static_cast<unsigned>(kernel_threads(fc1_key)), static_cast<unsigned>(kernel_dynamic_smem(fc1_key))},
         ctx.stream, &p1, /*programmatic_dependent=*/true);
  PrefillFc2Params p2{};
  set_fc2_common(p2, ctx);
  set_fc2_scales(p2, ctx, fc2_key);
  p2.tiles = p1.tiles;
  p2.row_pair = p1.row_pair;
  if (prefill_tensor_copies(fc2_key))
    set_tensor_maps(p2, fc2_key, fc2_geometry(spec), ctx.layer.fc2_w.size(), ctx.layer.fc2_s.size());
  const CUfunction fc2 = ctx.modules.function(fc2_key, ctx.stream);
  launch(fc2,
         LaunchShape{persistent_grid(ctx, fc2_key, spec.hidden, fc2), 1, 1, static_cast<unsigned>(kernel_threads(fc2_key)),
                     static_cast<unsigned>(kernel_dynamic_smem(fc2_key))},
         ctx.stream, &p2, /*programmatic_dependent=*/true);
  launch_topk_combine(ctx, fc2_key, &p2);
}

}  // namespace moejit::detail
