#pragma once
// Host mirrors of the kernel parameter structs in templates/ (same field order and types; pointers
// as 64-bit device addresses). Kernels take one struct by value.
#include <cstdint>

namespace moejit::detail {

using dptr = uint64_t;

struct RepackParams {
  dptr src, src_scale, dst, dst_scale;
  int32_t experts, slabs, mats, k, chunks, logical_rows, rows_per_mat, block, order;
};

struct RouteParams {
  dptr topk_ids;
  int32_t pairs, expert_begin;
  dptr num_active, active_expert, active_offset, pair_index, counters;
  int32_t num_counters;
};

struct RoutingArgs {
  dptr num_active, active_expert, active_offset, pair_index, topk_ids;
  int32_t pairs, expert_begin, top_k;
};

struct DecodeFc1Params {
  dptr w, s, gscale, bias, x, act, counters;
  int32_t num_counters;
  float alpha, beta, limit;
  RoutingArgs route;
};

struct DecodeFc2Params {
  dptr w, s, gscale, bias, act, topk_weights, partial, counters, out;
  int32_t tokens;
  RoutingArgs route;
};

struct DecodeFusedParams {
  DecodeFc1Params fc1;
  DecodeFc2Params fc2;
  dptr barrier;
  int32_t slots;
};

struct DecodePipeParams {
  DecodeFc1Params fc1;
  DecodeFc2Params fc2;
  dptr slot_done;
  int32_t slots, fc2_parts, part_chunks, window, units_per_warp, stage_pairs;
  int32_t bar_offset, buf_offset, stage_offset, acc_offset;
};

}  // namespace moejit::detail
