// Which expert a decode CTA works on and which pairs it serves, from either source of routing:
// the route kernel's lists in the workspace, or routing done inside the CTA (inline_route.cuh).
#pragma once
#include "inline_route.cuh"
#include "routing_params.cuh"

struct ExpertWork {
  int num_active;    // active experts in this call
  int expert;        // this CTA's local expert (valid when its slot < num_active)
  int count;         // pairs routed to it
  const i32* pairs;  // their pair indices q, increasing (global or shared memory)
};

// Every thread calls it (it may contain a barrier). With kInline the route is computed from topk_ids
// (independent of earlier kernels); otherwise the route kernel's output is read, which the caller must
// already have waited for.
template <bool kInline, int kExperts>
MOEJIT_DEVICE ExpertWork expert_work(const RoutingArgs& r, int slot, InlineRouteShared& sh) {
  ExpertWork w;
  if (kInline) {
    inline_route<kExperts>(r.topk_ids, r.pairs, r.expert_begin, slot, sh);
    w.num_active = sh.num_active;
    w.expert = sh.expert;
    w.count = sh.count;
    w.pairs = sh.pair;
  } else {
    w.num_active = *r.num_active;
    w.expert = slot < w.num_active ? r.active_expert[slot] : -1;
    const int off = slot < w.num_active ? r.active_offset[slot] : 0;
    w.count = slot < w.num_active ? r.active_offset[slot + 1] - off : 0;
    w.pairs = r.pair_index + off;
  }
  return w;
}

// True when pair q's expert is local (contributes to the output).
MOEJIT_DEVICE bool pair_is_local(const RoutingArgs& r, int q, int experts) {
  const int e = r.topk_ids[q] - r.expert_begin;
  return e >= 0 && e < experts;
}

// The MMA columns of one pass over a slab. kCols = 8: column n of n-tile nt serves the pass's pair
// pass + 8*nt + n. kCols = 4: only even columns carry pairs (pass + 4*nt + n/2), so each lane's
// accumulators 1 and 3 (the odd columns) are never needed and chunk_mma skips their block-scale FMAs;
// a pass then covers 4 pairs per n-tile. The lane (g, c) supplies column g's activation row, row_of(t)
// (nullptr: the column multiplies zeros), and holds results for columns 2c and 2c + 1. Returns how many
// n-tiles hold a pair.
template <int kNT, int kCols, typename RowOf>
MOEJIT_DEVICE int pass_rows(int pass, int count, RowOf row_of, const u16* (&rows)[kNT]) {
  static_assert(kCols == 8 || kCols == 4, "pairs fill every MMA column or the even ones");
  const int g = lane_id() >> 2;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    const int t = pass + nt * kCols + (kCols == 8 ? g : g >> 1);
    rows[nt] = (kCols == 8 || (g & 1) == 0) && t < count ? row_of(t) : nullptr;
  }
  return min(kNT, (count - pass + kCols - 1) / kCols);
}

// The pair (index within the slot, before the count check) of this lane's accumulator i (0..3) in
// n-tile nt, or -1 when that accumulator belongs to a column without a pair (kCols = 4, odd columns).
template <int kCols>
MOEJIT_DEVICE int pass_pair(int pass, int nt, int c4, int i) {
  if (kCols == 8) return pass + nt * 8 + 2 * c4 + (i & 1);
  return (i & 1) ? -1 : pass + nt * 4 + c4;
}

// After a pass's MMAs: calls f(nt, i, t, r) for each of this lane's accumulators (n-tile nt, index i)
// that holds a pair, t being the pair's index within the slot (< count) and r its row within the
// 16-row slab. live: n-tiles holding a pair (pass_rows' result).
template <int kNT, int kCols, typename F>
MOEJIT_DEVICE void for_each_pass_result(int pass, int live, int count, F f) {
  const int lane = lane_id(), g = lane >> 2, c4 = lane & 3;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = pass_pair<kCols>(pass, nt, c4, i);
      if (nt < live && t >= 0 && t < count) f(nt, i, t, g + (i >> 1) * 8);
    }
}
