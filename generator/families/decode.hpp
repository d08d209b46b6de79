#pragma once
// The decode family's geometry (templates/moe_decode_*.cuh): tensor-core MMA with FP4 decoded in
// registers, tokens on the narrow N side of the MMA, for few tokens per expert. Kinds: decode_fc1
// (one CTA per (16-row slab, expert slot) item), decode_fc1_loop (one wave of CTAs walking the items,
// inline routing), decode_fc1_stream (that wave with its weights streamed through shared memory by a
// producer warp: depth = ring stages, parts = chunks per consumer warp and stage), decode_fc2 (fp32
// partial rows summed by the last CTA of each slab), decode_fc2_sum (one CTA, or `groups` CTAs, per
// output slab summing the top-k itself) and decode_fused (FC1 and FC2 in one cooperative launch with a
// grid barrier, MOEJIT_DECODE_LAUNCH=cooperative).
#include "moejit/key.hpp"

namespace moejit::detail {

// Up to this many (token, slot) pairs the decode kernels may route inside each CTA (no route launch):
// 64 with two pairs per lane (key field i1), 128 with four (i2), where FC2 sums the top-k in its CTAs.
inline constexpr int kInlineRouteMaxPairs = 128;
inline constexpr int kInlineRoutePairsNarrow = 64;

// Slab groups of a decode FC1 CTA: 2 for a8's decode_fc1 and decode_fc1_loop, whose CTA owns one 32-row
// scale block of the intermediate (slabs 2j and 2j + 1) and computes each slab with a group of `warps`
// warps (templates/moe_decode_fc1.cuh), so its block is 2 x warps x 32 threads and its grid has
// ceil(I / 32) CTAs per slot; 1 for every other key (decode_fused keeps one group: a8's even-slab item
// computes both slabs in turn). Pure.
int decode_fc1_slab_groups(const KernelKey& key);
// FC1's CTAs (decode_fc1) or items (decode_fc1_loop, decode_fused) per expert slot: I / 16 slabs, or the
// ceil(I / 32) scale blocks of two slab groups. Pure.
int decode_fc1_items_per_slot(const KernelKey& key);
// CTAs per SM a decode kernel's register cap is built for (__launch_bounds__' second argument): the
// key's min_blocks, else at least 512 resident threads per SM (1 for wide token tiles; a streaming FC1
// as many as its shared memory allows).
int decode_ctas_per_sm(const KernelKey& key);
// Registers per thread a decode kernel's launch bounds leave ptxas: 65536 / (threads x
// decode_ctas_per_sm), at most 255. The generated source passes it to the templates
// (MOEJIT_REGISTER_CAP), whose chunk loop depends on it. Pure.
int decode_register_cap(const KernelKey& key);
// Whether a register-fed decode kernel keeps its activation pieces one chunk ahead in registers (a ring
// of ~16 registers): FC2 always with one token tile, FC1 only where its register cap leaves 80. Pure;
// throws moejit::Error for a key that does not normalize.
bool decode_activation_ring(const KernelKey& key);
// Shared memory of a decode CTA, at most: its static arrays (templates/moe_decode_*.cuh: the reduction or
// raw-sum buffer, routing state, a staged x row, the CSF scale stages of templates/csf_scales.cuh) and its
// dynamic shared memory (a streaming ring; CSF stages too large for static shared memory). Pure.
int decode_cta_smem(const KernelKey& key);
// Whether a decode key's CTA fits the architecture at the CTAs per SM it is built for (decode_ctas_per_sm):
// decode_cta_smem per CTA, plus what the driver reserves, per SM. Pure.
bool decode_smem_fits(const KernelKey& key);
// A planned decode key as it reads CSF scales (KernelKey::csf_scales set): where its CSF scale stages do not
// fit beside a staged x row at its CTAs per SM, x is read per step (and NVFP4's long FC1 warps take 8
// columns, as the planner gives them without staging); where the CTA still does not fit, fewer CTAs per SM.
// Keys that read plain scales, or fit, come back as they are. Pure.
KernelKey fit_decode_csf_key(KernelKey key);
// Static shared memory of a decode_fc1 CTA that stages its x row (KernelKey::x_staged): each warp's part of
// the row at 128 bytes per chunk after 256 bytes of zeros (templates/slab_mma.cuh: kStageZeros), the
// cross-warp reduction buffer (both per slab group) and the inline routing list. Pure.
int staged_x_cta_bytes(const KernelKey& key);
// The most (token, slot) pairs a key's inline routing covers: 64 (i1) or 128 (i2); 0 without. Pure.
int inline_route_pairs(const KernelKey& key);
// Bytes of shared memory the inline routing list takes in a CTA of this key: sizeof(InlineRouteList)
// in templates/inline_route.cuh (checked there by a static_assert), for inline_route 1 (64 pairs) or 2
// (128); a key without inline routing gets the 64-pair size. Pure.
int inline_route_list_bytes(const KernelKey& key);

}  // namespace moejit::detail
