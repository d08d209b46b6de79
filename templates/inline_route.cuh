// Routing done inside each CTA of the decode kernels when there are few pairs (M*K <= 64, or 128): one warp
// finds the CTA's expert and that expert's pairs from topk_ids directly, which saves a launch and a
// dependent round trip through memory at decode. Slot s is the s-th smallest local expert that has a
// pair, and its pairs are listed in increasing pair index, exactly like the route kernel's output.
#pragma once
#include "device_core.cuh"

// The most pairs (M*K) one warp routes: 64 (two per lane) or 128 (four per lane), the key's inline
// routing level, passed by the generator (i1: 64, i2: 128).
#ifndef MOEJIT_INLINE_ROUTE_MAX_PAIRS
#define MOEJIT_INLINE_ROUTE_MAX_PAIRS 64
#endif
inline constexpr int kInlineMaxPairs = MOEJIT_INLINE_ROUTE_MAX_PAIRS;
static_assert(kInlineMaxPairs == 64 || kInlineMaxPairs == 128, "inline routing covers 64 or 128 pairs");
inline constexpr int kInlinePairsPerLane = kInlineMaxPairs / 32;

struct InlineRouteShared {
  i32 pair[kInlineMaxPairs];  // pair indices q = m*K + k of this CTA's expert, increasing
  i32 expert, count, num_active;
  u32 bits[32];               // experts present (E <= 1024)
};

// Warp 0's first step in both routines: the local experts of the lane's pairs q = lane + 32 h (-1: no
// pair, or an expert outside this rank's range) and the bitmap of experts present (kWords words of
// `bits`, cleared here).
template <int kExperts>
MOEJIT_DEVICE void mark_pair_experts(const i32* ids, int pairs, int expert_begin, u32* bits,
                                     int (&e)[kInlinePairsPerLane]) {
  constexpr int kWords = (kExperts + 31) / 32;
  const int lane = lane_id();
  if (lane < kWords) bits[lane] = 0u;
  __syncwarp();
#pragma unroll
  for (int h = 0; h < kInlinePairsPerLane; ++h) {
    const int q = lane + 32 * h;
    const int v = q < pairs ? ids[q] - expert_begin : -1;
    e[h] = (v >= 0 && v < kExperts) ? v : -1;
    if (e[h] >= 0) atomicOr(&bits[e[h] >> 5], 1u << (e[h] & 31));
  }
  __syncwarp();
}

// Inclusive prefix sum of v over the warp's lanes.
MOEJIT_DEVICE int warp_inclusive_sum(int v) {
  const int lane = lane_id();
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int t = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += t;
  }
  return v;
}

// Called by every thread; warp 0 computes, the rest wait at the barrier. ids: [pairs] global ids.
template <int kExperts>
MOEJIT_DEVICE void inline_route(const i32* ids, int pairs, int expert_begin, int slot, InlineRouteShared& sh) {
  static_assert(kExperts <= 1024, "inline routing covers at most 1024 experts");
  constexpr int kWords = (kExperts + 31) / 32;
  if ((threadIdx.x >> 5) == 0) {
    const int lane = lane_id();
    int e[kInlinePairsPerLane];
    mark_pair_experts<kExperts>(ids, pairs, expert_begin, sh.bits, e);
    const u32 word = lane < kWords ? sh.bits[lane] : 0u;
    const int n = __popc(word);
    const int inc = warp_inclusive_sum(n);
    const int total = __shfl_sync(0xffffffffu, inc, 31);
    // The lane whose word holds the slot-th set bit finds the expert.
    int found = -1;
    if (slot < total && inc - n <= slot && slot < inc) {
      u32 w = word;
      for (int skip = slot - (inc - n); skip > 0; --skip) w &= w - 1u;
      found = lane * 32 + __ffs(w) - 1;
    }
    const u32 who = __ballot_sync(0xffffffffu, found >= 0);
    const int expert = who ? __shfl_sync(0xffffffffu, found, __ffs(who) - 1) : -1;
    const u32 lt = (1u << lane) - 1u;
    // The expert's pairs in increasing q: lane + 32 h comes after every pair of the earlier h.
    int listed = 0;
#pragma unroll
    for (int h = 0; h < kInlinePairsPerLane; ++h) {
      const u32 mine = __ballot_sync(0xffffffffu, expert >= 0 && e[h] == expert);
      if (expert >= 0 && e[h] == expert) sh.pair[listed + __popc(mine & lt)] = lane + 32 * h;
      listed += __popc(mine);
    }
    if (lane == 0) {
      sh.expert = expert;
      sh.count = listed;
      sh.num_active = total;
    }
  }
  __syncthreads();
}

// Every slot's expert and pairs at once, for a CTA that serves all active experts (FC2-sum): the same
// slots and pair order as the route kernel's lists. Called by every thread; warp 0 computes.
struct InlineRouteList {
  i32 pair[kInlineMaxPairs];        // pair indices grouped by slot, increasing within a slot
  i32 offset[kInlineMaxPairs + 1];  // slot s owns pair[offset[s] .. offset[s + 1])
  i32 expert[kInlineMaxPairs];      // local expert of slot s
  i32 count[kInlineMaxPairs];       // pairs of slot s, then (while listing) those already placed
  i32 word_base[32];                // experts present below bits word w
  u32 bits[32];                     // experts present (E <= 1024)
  i32 num_active;
};
// The host sizes streaming kernels' shared memory with this (inline_route_list_bytes in generator.hpp).
static_assert(sizeof(InlineRouteList) == 16 * kInlineMaxPairs + 264, "update inline_route_list_bytes");

// Slot of local expert e (present in the list): experts present below e.
MOEJIT_DEVICE int inline_slot_of(const InlineRouteList& sh, int e) {
  return sh.word_base[e >> 5] + __popc(sh.bits[e >> 5] & ((1u << (e & 31)) - 1u));
}

template <int kExperts>
MOEJIT_DEVICE void inline_route_list(const i32* ids, int pairs, int expert_begin, InlineRouteList& sh) {
  static_assert(kExperts <= 1024, "inline routing covers at most 1024 experts");
  constexpr int kWords = (kExperts + 31) / 32;
  constexpr int kSlotsPerLane = kInlineMaxPairs / 32;  // at most one slot per pair
  if ((threadIdx.x >> 5) == 0) {
    const int lane = lane_id();
#pragma unroll
    for (int j = 0; j < kSlotsPerLane; ++j) sh.count[kSlotsPerLane * lane + j] = 0;
    int e[kInlinePairsPerLane];
    mark_pair_experts<kExperts>(ids, pairs, expert_begin, sh.bits, e);  // its __syncwarp covers the counts
    // Slot of expert e = experts present below e: a scan over the bit words, then a popcount.
    const u32 word = lane < kWords ? sh.bits[lane] : 0u;
    const int n = __popc(word);
    const int inc = warp_inclusive_sum(n);
    sh.word_base[lane] = inc - n;
    const int total = __shfl_sync(0xffffffffu, inc, 31);
    __syncwarp();
    int slot[kInlinePairsPerLane];
#pragma unroll
    for (int h = 0; h < kInlinePairsPerLane; ++h) {
      slot[h] = -1;
      if (e[h] >= 0) {
        slot[h] = inline_slot_of(sh, e[h]);
        atomicAdd(&sh.count[slot[h]], 1);
        sh.expert[slot[h]] = e[h];
      }
    }
    __syncwarp();
    // Offsets: exclusive scan of the counts, slots kSlotsPerLane * lane + j per lane; the counts then
    // restart at zero as the number of each slot's pairs placed so far.
    int c[kSlotsPerLane], mine = 0;
#pragma unroll
    for (int j = 0; j < kSlotsPerLane; ++j) {
      c[j] = sh.count[kSlotsPerLane * lane + j];
      mine += c[j];
    }
    int run = warp_inclusive_sum(mine) - mine;
#pragma unroll
    for (int j = 0; j < kSlotsPerLane; ++j) {
      sh.offset[kSlotsPerLane * lane + j] = run;
      sh.count[kSlotsPerLane * lane + j] = 0;
      run += c[j];
    }
    if (lane == 31) sh.offset[kInlineMaxPairs] = run;
    __syncwarp();
    // Place pairs in increasing q: lane + 32 h after the lower lanes of its h with the same expert and
    // after every pair of that expert in earlier h (the slot's placed count, which the lowest lane of
    // each group of lanes advances).
    const u32 lt = (1u << lane) - 1u;
#pragma unroll
    for (int h = 0; h < kInlinePairsPerLane; ++h) {
      const u32 same = __match_any_sync(0xffffffffu, e[h]);
      if (e[h] >= 0) sh.pair[sh.offset[slot[h]] + sh.count[slot[h]] + __popc(same & lt)] = lane + 32 * h;
      __syncwarp();
      if (e[h] >= 0 && (same & lt) == 0u) sh.count[slot[h]] += __popc(same);
      __syncwarp();
    }
    if (lane == 0) sh.num_active = total;
  }
  __syncthreads();
}
