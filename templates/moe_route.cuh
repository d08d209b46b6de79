// Routing: per-expert counts, offsets and a stable token permutation, built on the GPU in one CTA.
//
// Output (all in the caller's workspace, see runtime/workspace.hpp):
//   num_active            experts with at least one routed (token, slot) pair
//   active_expert[s]      local expert of active slot s, in increasing expert order
//   active_offset[s]      first position of slot s in the permuted pair list (active_offset[n] = total)
//   pair_index[pos]       pair q = m*K + k at position pos
// Pairs of one expert keep increasing (m, k) order, so every later reduction is deterministic.
// It also zeroes the FC2 completion counters, so a workspace needs no initialization by the caller.
#pragma once
#include "device_core.cuh"
#include "trace.cuh"

struct RouteParams {
  const i32* topk_ids;       // [M*K]
  i32 pairs;                 // M*K
  i32 expert_begin;
  i32* num_active;
  i32* active_expert;
  i32* active_offset;
  i32* pair_index;
  i32* counters;             // FC2 completion counters to zero
  i32 num_counters;
};

template <int kExperts, int kThreads>
__device__ void moe_route(const RouteParams& p) {
  extern __shared__ i32 smem[];
  i32* count = smem;                // [kExperts]
  i32* cursor = smem + kExperts;    // [kExperts]
  __shared__ i32 warp_sums[kThreads / 32][2];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  MOEJIT_TRACE_CTA(0);
  MOEJIT_TRACE_CTA_KIND(4);

  for (int i = tid; i < p.num_counters; i += kThreads) p.counters[i] = 0;
  for (int e = tid; e < kExperts; e += kThreads) count[e] = 0;
  __syncthreads();
  for (int q = tid; q < p.pairs; q += kThreads) {
    int e = p.topk_ids[q] - p.expert_begin;
    if (e >= 0 && e < kExperts) atomicAdd(&count[e], 1);
  }
  __syncthreads();

  // Exclusive scans of counts (offsets) and of (count > 0) (active slots): each thread owns a
  // contiguous run of experts, warps scan with shuffles, warp totals are scanned by warp 0.
  constexpr int kPer = (kExperts + kThreads - 1) / kThreads;
  const int first = tid * kPer;
  int run_pairs = 0, run_active = 0;
  for (int i = 0; i < kPer; ++i) {
    int e = first + i;
    if (e < kExperts) { run_pairs += count[e]; run_active += count[e] > 0; }
  }
  int inc_pairs = run_pairs, inc_active = run_active;
  for (int d = 1; d < 32; d <<= 1) {
    int a = __shfl_up_sync(0xffffffffu, inc_pairs, d), b = __shfl_up_sync(0xffffffffu, inc_active, d);
    if (lane >= d) { inc_pairs += a; inc_active += b; }
  }
  if (lane == 31) { warp_sums[warp][0] = inc_pairs; warp_sums[warp][1] = inc_active; }
  __syncthreads();
  if (warp == 0) {
    int wp = lane < kThreads / 32 ? warp_sums[lane][0] : 0, wa = lane < kThreads / 32 ? warp_sums[lane][1] : 0;
    int ip = wp, ia = wa;
    for (int d = 1; d < 32; d <<= 1) {
      int a = __shfl_up_sync(0xffffffffu, ip, d), b = __shfl_up_sync(0xffffffffu, ia, d);
      if (lane >= d) { ip += a; ia += b; }
    }
    if (lane < kThreads / 32) { warp_sums[lane][0] = ip - wp; warp_sums[lane][1] = ia - wa; }
    if (lane == kThreads / 32 - 1) { *p.num_active = ia; p.active_offset[ia] = ip; }
  }
  __syncthreads();
  int pos = warp_sums[warp][0] + inc_pairs - run_pairs;
  int slot = warp_sums[warp][1] + inc_active - run_active;
  for (int i = 0; i < kPer; ++i) {
    int e = first + i;
    if (e < kExperts) {
      cursor[e] = pos;
      if (count[e] > 0) { p.active_expert[slot] = e; p.active_offset[slot] = pos; ++slot; }
      pos += count[e];
    }
  }
  __syncthreads();

  // Stable placement: chunks of kThreads pairs; inside a chunk the warps take turns, each warp
  // placing its lanes in lane order (lanes of one expert found with match_any).
  for (int base = 0; base < p.pairs; base += kThreads) {
    const int q = base + tid;
    int e = -1;
    if (q < p.pairs) {
      e = p.topk_ids[q] - p.expert_begin;
      if (e < 0 || e >= kExperts) e = -1;
    }
    const u32 peers = __match_any_sync(0xffffffffu, e);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    const int leader = __ffs(peers) - 1;
    for (int w = 0; w < kThreads / 32; ++w) {
      if (warp == w) {
        int start = e >= 0 ? cursor[e] : 0;
        __syncwarp();
        if (e >= 0 && lane == leader) cursor[e] = start + __popc(peers);
        if (e >= 0) p.pair_index[start + rank] = q;
      }
      __syncthreads();
    }
  }
  MOEJIT_TRACE_CTA(6);
}
