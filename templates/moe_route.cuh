// Routing: per-expert counts, offsets and a stable token permutation, built on the GPU in one CTA.
//
// Output (all in the caller's workspace, see runtime/workspace.hpp):
//   num_active            experts with at least one routed (token, slot) pair
//   active_expert[s]      local expert of active slot s, in increasing expert order
//   active_offset[s]      first position of slot s in the permuted pair list (active_offset[n] = total)
//   pair_index[pos]       pair q = m*K + k at position pos
// Pairs of one expert keep increasing (m, k) order, so every later reduction is deterministic.
// It also zeroes the FC2 completion counters, so a workspace needs no initialization by the caller.
//
// Work split: warp w owns a contiguous segment of the pairs (whole steps of 32). It counts its
// segment's pairs per expert into its own row of a [warps][experts] table (shared atomics), the table
// is turned into cursors in (expert, warp) order, and each warp places its segment with its own
// cursors, ranking the lanes of one expert with ballots. So no CTA barrier sits inside the loops, and
// a warp's segment precedes the next warp's within every expert: the placement is stable. Each lane
// loads kRouteSteps ids at once (the next batch rides in registers while this one is processed),
// so a warp waits for one load round trip per batch, not per 32 pairs. The kernel this replaces placed
// 32 pairs per CTA barrier and loaded its ids per 512 pairs: ~100 us at 32,768 pairs.
#pragma once
#include "device_core.cuh"
#include "moe_route_params.cuh"
#include "trace.cuh"

constexpr int kRouteBatch = 512;              // pairs per warp batch
constexpr int kRouteSteps = kRouteBatch / 32;  // 32-pair steps per batch: ids per lane in flight

// The lanes whose v equals this lane's (what match.any.sync computes), from one ballot per bit of v
// (0 <= v < 2^kBits). match.any measured ~150 cycles per warp instruction per SM on sm_90 (a route of
// 32,768 pairs spent ~75 us in it); ballots issue at full rate.
template <int kBits>
MOEJIT_DEVICE u32 warp_peers(int v) {
  u32 peers = 0xffffffffu;
#pragma unroll
  for (int b = 0; b < kBits; ++b) {
    const bool bit = (v >> b) & 1;
    const u32 ones = __ballot_sync(0xffffffffu, bit);
    peers &= bit ? ones : ~ones;
  }
  return peers;
}

// Bits that hold 0..kExperts (kExperts marks a pair without a local expert).
template <int kExperts>
constexpr int route_key_bits() {
  int bits = 1;
  while ((1 << bits) <= kExperts) ++bits;
  return bits;
}

// Walks a warp's segment [begin, end) in batches of kRouteBatch pairs, calling f(e, base) per batch:
// e[j] is the local expert of pair base + 32 j + lane (-1 past `end` or outside this rank's experts).
// Every lane of the warp takes every batch and step, so the callers' warp collectives run converged.
template <int kExperts, typename F>
MOEJIT_DEVICE void route_walk_segment(const RouteParams& p, int begin, int end, F&& f) {
  const int lane = threadIdx.x & 31;
  int ids[kRouteSteps];
  auto load = [&](int base) {
#pragma unroll
    for (int j = 0; j < kRouteSteps; ++j) {
      const int q = base + j * 32 + lane;
      ids[j] = q < end ? p.topk_ids[q] : p.expert_begin - 1;
    }
  };
  load(begin);
  for (int base = begin; base < end; base += kRouteBatch) {
    int e[kRouteSteps];
#pragma unroll
    for (int j = 0; j < kRouteSteps; ++j) {
      e[j] = ids[j] - p.expert_begin;
      if (e[j] < 0 || e[j] >= kExperts) e[j] = -1;
    }
    load(base + kRouteBatch);  // the next batch rides in registers while this one is processed
    f(e, base);
  }
}

template <int kExperts, int kThreads>
__device__ void moe_route(const RouteParams& p) {
  constexpr int kWarps = kThreads / 32;
  extern __shared__ i32 smem[];
  i32* table = smem;                       // [kWarps][kExperts]: counts, then cursors
  i32* count = smem + kWarps * kExperts;   // [kExperts]
  __shared__ i32 warp_sums[kWarps][2];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  MOEJIT_TRACE_CTA(0);
  MOEJIT_TRACE_CTA_KIND(4);
  // The dependent kernel (FC1) may take its SMs now; it waits for this grid before reading the lists.
  pdl_launch_dependents();

  // Segments of whole 32-pair steps spread over every warp (a few pairs still use several warps).
  const int steps = (p.pairs + 31) / 32;
  const int seg = (steps + kWarps - 1) / kWarps * 32;
  const int begin = min(warp * seg, p.pairs), end = min(begin + seg, p.pairs);

  for (int i = tid; i < p.num_counters; i += kThreads) p.counters[i] = 0;
  for (int i = tid; i < kWarps * kExperts; i += kThreads) table[i] = 0;
  __syncthreads();
  i32* const row = table + warp * kExperts;
  route_walk_segment<kExperts>(p, begin, end, [&](const int (&e)[kRouteSteps], int) {
#pragma unroll
    for (int j = 0; j < kRouteSteps; ++j)
      if (e[j] >= 0) atomicAdd(&row[e[j]], 1);
  });
  __syncthreads();
  for (int e = tid; e < kExperts; e += kThreads) {
    int c = 0;
#pragma unroll 4
    for (int w = 0; w < kWarps; ++w) c += table[w * kExperts + e];
    count[e] = c;
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
    int wp = lane < kWarps ? warp_sums[lane][0] : 0, wa = lane < kWarps ? warp_sums[lane][1] : 0;
    int ip = wp, ia = wa;
    for (int d = 1; d < 32; d <<= 1) {
      int a = __shfl_up_sync(0xffffffffu, ip, d), b = __shfl_up_sync(0xffffffffu, ia, d);
      if (lane >= d) { ip += a; ia += b; }
    }
    if (lane < kWarps) { warp_sums[lane][0] = ip - wp; warp_sums[lane][1] = ia - wa; }
    if (lane == kWarps - 1) { *p.num_active = ia; p.active_offset[ia] = ip; }
  }
  __syncthreads();
  int pos = warp_sums[warp][0] + inc_pairs - run_pairs;
  int slot = warp_sums[warp][1] + inc_active - run_active;
  for (int i = 0; i < kPer; ++i) {
    int e = first + i;
    if (e < kExperts) {
      if (count[e] > 0) { p.active_expert[slot] = e; p.active_offset[slot] = pos; ++slot; }
      // The expert's cursors per warp: its pairs go in warp (segment) order.
      for (int w = 0; w < kWarps; ++w) {
        const int c = table[w * kExperts + e];
        table[w * kExperts + e] = pos;
        pos += c;
      }
    }
  }
  __syncthreads();

  // Stable placement: each warp walks its segment again (the ids now come from the L2) with its cursors.
  route_walk_segment<kExperts>(p, begin, end, [&](const int (&e)[kRouteSteps], int base) {
    u32 peers[kRouteSteps];
#pragma unroll
    for (int j = 0; j < kRouteSteps; ++j)  // steps past the segment (warp-uniform) are skipped
      peers[j] = base + 32 * j < end ? warp_peers<route_key_bits<kExperts>()>(e[j] >= 0 ? e[j] : kExperts) : 0u;
#pragma unroll
    for (int j = 0; j < kRouteSteps; ++j) {
      if (base + 32 * j >= end) break;  // warp-uniform
      const int rank = __popc(peers[j] & ((1u << lane) - 1u));
      const int start = e[j] >= 0 ? row[e[j]] : 0;
      __syncwarp();  // every lane has read its cursor before the leaders advance them
      if (e[j] >= 0) {
        p.pair_index[start + rank] = base + j * 32 + lane;
        if (rank == 0) row[e[j]] = start + __popc(peers[j]);
      }
      __syncwarp();
    }
  });
  MOEJIT_TRACE_CTA(6);
}
