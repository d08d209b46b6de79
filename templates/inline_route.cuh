// Routing done inside each CTA of the decode kernels when there are few pairs (M*K <= 64): one warp
// finds the CTA's expert and that expert's pairs from topk_ids directly, which saves a launch and a
// dependent round trip through memory at decode. Slot s is the s-th smallest local expert that has a
// pair, and its pairs are listed in increasing pair index, exactly like the route kernel's output.
#pragma once
#include "device_core.cuh"

inline constexpr int kInlineMaxPairs = 64;  // two pairs per lane of one warp
// The planner's threshold (kInlineRouteMaxPairs in moejit/planner.hpp), passed by the generator.
#ifdef MOEJIT_INLINE_ROUTE_MAX_PAIRS
static_assert(MOEJIT_INLINE_ROUTE_MAX_PAIRS == kInlineMaxPairs,
              "the planner routes inline for more pairs than inline_route handles");
#endif

struct InlineRouteShared {
  i32 pair[kInlineMaxPairs];  // pair indices q = m*K + k of this CTA's expert, increasing
  i32 expert, count, num_active;
  u32 bits[32];               // experts present (E <= 1024)
};

// Warp 0's first step in both routines: the local experts of the lane's two pairs q = lane and
// lane + 32 (-1: no pair, or an expert outside this rank's range) and the bitmap of experts present
// (kWords words of `bits`, cleared here).
template <int kExperts>
MOEJIT_DEVICE void mark_pair_experts(const i32* ids, int pairs, int expert_begin, u32* bits, int (&e)[2]) {
  constexpr int kWords = (kExperts + 31) / 32;
  const int lane = lane_id();
  if (lane < kWords) bits[lane] = 0u;
  __syncwarp();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
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
    int e[2];
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
    const u32 m0 = __ballot_sync(0xffffffffu, expert >= 0 && e[0] == expert);
    const u32 m1 = __ballot_sync(0xffffffffu, expert >= 0 && e[1] == expert);
    if (expert >= 0 && e[0] == expert) sh.pair[__popc(m0 & lt)] = lane;
    if (expert >= 0 && e[1] == expert) sh.pair[__popc(m0) + __popc(m1 & lt)] = lane + 32;
    if (lane == 0) {
      sh.expert = expert;
      sh.count = __popc(m0) + __popc(m1);
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
  i32 count[kInlineMaxPairs];       // pairs of slot s
  i32 count_low[kInlineMaxPairs];   // of which pairs q < 32 (the first of each lane's two)
  i32 word_base[32];                // experts present below bits word w
  u32 bits[32];                     // experts present (E <= 1024)
  i32 num_active;
};
// The host sizes streaming kernels' shared memory with this (kInlineRouteListBytes in generator.hpp).
static_assert(sizeof(InlineRouteList) == 1544, "update kInlineRouteListBytes");

// Slot of local expert e (present in the list): experts present below e.
MOEJIT_DEVICE int inline_slot_of(const InlineRouteList& sh, int e) {
  return sh.word_base[e >> 5] + __popc(sh.bits[e >> 5] & ((1u << (e & 31)) - 1u));
}

template <int kExperts>
MOEJIT_DEVICE void inline_route_list(const i32* ids, int pairs, int expert_begin, InlineRouteList& sh) {
  static_assert(kExperts <= 1024, "inline routing covers at most 1024 experts");
  static_assert(kInlineMaxPairs == 64, "two pairs and two slots per lane");
  constexpr int kWords = (kExperts + 31) / 32;
  if ((threadIdx.x >> 5) == 0) {
    const int lane = lane_id();
    sh.count[lane] = sh.count[lane + 32] = 0;
    sh.count_low[lane] = sh.count_low[lane + 32] = 0;
    int e[2];
    mark_pair_experts<kExperts>(ids, pairs, expert_begin, sh.bits, e);  // its __syncwarp covers the counts
    // Slot of expert e = experts present below e: a scan over the bit words, then a popcount.
    const u32 word = lane < kWords ? sh.bits[lane] : 0u;
    const int n = __popc(word);
    const int inc = warp_inclusive_sum(n);
    sh.word_base[lane] = inc - n;
    const int total = __shfl_sync(0xffffffffu, inc, 31);
    __syncwarp();
    int slot[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      slot[h] = -1;
      if (e[h] >= 0) {
        slot[h] = inline_slot_of(sh, e[h]);
        atomicAdd(&sh.count[slot[h]], 1);
        if (h == 0) atomicAdd(&sh.count_low[slot[h]], 1);
        sh.expert[slot[h]] = e[h];
      }
    }
    __syncwarp();
    // Offsets: exclusive scan of the counts, slots 2*lane and 2*lane + 1 per lane.
    const int c0 = sh.count[2 * lane], c1 = sh.count[2 * lane + 1];
    const int run = warp_inclusive_sum(c0 + c1);
    sh.offset[2 * lane] = run - c0 - c1;
    sh.offset[2 * lane + 1] = run - c1;
    if (lane == 31) sh.offset[64] = run;
    __syncwarp();
    // Place each pair after the earlier pairs of its expert: lower lanes of the same half, and for
    // the second half every first-half pair of that expert.
    const u32 lt = (1u << lane) - 1u;
    const u32 same0 = __match_any_sync(0xffffffffu, e[0]);
    const u32 same1 = __match_any_sync(0xffffffffu, e[1]);
    if (e[0] >= 0) sh.pair[sh.offset[slot[0]] + __popc(same0 & lt)] = lane;
    if (e[1] >= 0) sh.pair[sh.offset[slot[1]] + sh.count_low[slot[1]] + __popc(same1 & lt)] = lane + 32;
    if (lane == 0) sh.num_active = total;
  }
  __syncthreads();
}
