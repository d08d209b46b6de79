// Which expert a decode CTA works on and which pairs it serves, from either source of routing:
// the route kernel's lists in the workspace, or routing done inside the CTA (inline_route.cuh).
#pragma once
#include "inline_route.cuh"

struct RoutingArgs {
  const i32* num_active;     // route kernel outputs (unused with inline routing)
  const i32* active_expert;
  const i32* active_offset;
  const i32* pair_index;
  const i32* topk_ids;       // [M*K] global expert ids
  i32 pairs;                 // M*K
  i32 expert_begin;
  i32 top_k;
};

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

// The MMA columns of one pass over a slab: column lane/4 of n-tile nt serves the pass's pair
// pass + 8*nt + lane/4, whose bf16 row row_of(t) is the B operand (nullptr past the last pair: that
// column multiplies zeros). Returns how many n-tiles hold a pair.
template <int kNT, typename RowOf>
MOEJIT_DEVICE int pass_rows(int pass, int count, RowOf row_of, const u16* (&rows)[kNT]) {
  const int g = lane_id() >> 2;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    const int t = pass + nt * 8 + g;
    rows[nt] = t < count ? row_of(t) : nullptr;
  }
  return min(kNT, (count - pass + 7) / 8);
}
