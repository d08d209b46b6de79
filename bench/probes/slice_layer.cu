// A decode layer with FC2 cut at FC1's slices, computed on cluster pairs: the one layer structure whose
// measured floor (layer_floor.cu, slice+alu: 28.8-29.1 us) lies under gpt-oss-120b's two-token target
// (31.7 us, 70 % of copy). This probe computes the real layer for gpt-oss-120b's shapes (MXFP4, swigluoai
// with its clamp, biases, top-4) at one or two tokens, checks it against an fp64 CPU reference and times
// it as `moejit bench` times a forward. It is not part of moejit: it answers whether the structure,
// with every cost it really has, comes under the target before it is built as a kernel family.
//
// Structure (kernel 1, one 512-thread CTA per SM, clusters of two CTAs on two SMs):
// - An item is (active expert, slice of 64 rows of I): FC1's gate and up rows of the slice (4 slabs of 16
//   rows), and FC2's K chunk of the same 64 (all H rows). The pair computes its items in a fixed order
//   (cluster c takes items c, c + clusters, ...), so every partial sum below has a fixed order.
// - FC1: each CTA takes half of every slab's K chunks (chunks of parity slab + rank, so both CTAs read
//   as many bytes), each of its warps one slab and a quarter of that half. A warp's partial sums go to
//   both CTAs' shared memory (distributed shared memory), then the pair meets at a split cluster barrier.
// - After the barrier each CTA adds the 8 parts of every gate and up row in part order, applies the
//   activation and stores the slice's activations as bf16 times 2^64 (FC2's B operand as is).
// - FC2: CTA rank r owns H rows r * H/2 ..; each warp owns up to three pairs of 16-row slabs and keeps
//   their sums in registers across all of the pair's items (top-k weight applied per item in fp32).
// - Software pipelining: a warp computes FC1 of item i + 1 before FC2 of item i, so the barrier of item
//   i is long passed when its activations are needed; FC2's weights of item i are loaded while FC1 of
//   item i + 1 runs, and the FC1 ring of the next item is primed before each barrier.
// - At the end each CTA stores its H/2 x M sums (one partial row per cluster); kernel 2, a programmatic
//   dependent, adds the rows of every output in cluster order, times the MMA scaling, plus sum_k w_k b2.
//
// Forms timed (each checked against the reference, then timed with kernel 2, alone, and with no items):
// FC1 through a register ring (depth 2, FC2's next weights in registers; depth 3, FC2's in shared memory),
// FC1 and FC2 through cp.async with a whole item in flight, with either FC2 plane order; and two bounds of
// the last form with wrong results on purpose: no MMA arithmetic, no cluster barrier waits; and a
// warp-specialized form (k_slices_ws: FC1 warps and FC2 warps, mbarrier hand-over). A traced run prints
// each form's CTA start and end spread. Outcome (docs/PERFORMANCE.md v30): 48-51 us at two tokens,
// 30-33 us at one, against 34.1 and 23.6 us for the decode family; 37-40 and 22-23 us with no arithmetic.
//
// Build and run on the GPU machine:
//   nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/slice_layer bench/probes/slice_layer.cu && /tmp/slice_layer [REPLAYS]
#include "probe_timing.cuh"

#include "../../templates/activations.cuh"
#include "../../templates/slab_mma.cuh"  // chunk_mma: the decode family's FP4 decode, MMA and block scales

#include <cmath>
#include <cstring>
#include <string>

namespace {
using namespace probe;

constexpr int kH = 2880, kI = 2880, kE = 128, kTopK = 4;
constexpr int kC1 = kH / 64;        // FC1 K chunks
constexpr int kC2 = kI / 64;        // FC2 K chunks = slices per expert
constexpr int kS1 = kI / 16;        // FC1 slabs per matrix
constexpr int kS2 = kH / 16;        // FC2 slabs
constexpr int kSliceSlabs = 4;      // FC1 slabs per slice
constexpr int kWarps = 16;          // per CTA
constexpr int kCta = kWarps * 32;
constexpr int kHalfSlabs = kS2 / 2;            // FC2 slabs per CTA of the pair
constexpr int kPairsPerCta = kHalfSlabs / 2;   // FC2 slab pairs per CTA
constexpr int kFc2Steps = (kPairsPerCta + kWarps - 1) / kWarps;
constexpr int kLocalParts = kWarps / kSliceSlabs;  // FC1 K parts per slab per CTA
constexpr int kParts = 2 * kLocalParts;            // per slab over the pair
constexpr int kFc1Steps = ((kC1 + 1) / 2 + kLocalParts - 1) / kLocalParts;  // most chunks of one warp's part
constexpr int kPBufs = 3;                          // FC1 partial buffers (see the pipelining above)
constexpr int kMaxM = 2;
constexpr int kMaxSlots = kMaxM * kTopK;
constexpr int kTraceStamps = 3 + 4 * 6 + 2;
constexpr float kAlpha = 1.702f, kBeta = 1.f, kLimit = 7.f;
static_assert(kS2 % 4 == 0 && kWarps % kSliceSlabs == 0, "shape");

// Prepared planes, as the decode family's (docs/LAYOUT.md): FC1 [E][I/16][H/64][2][32] runs of 16 bytes
// with scales [E][I/16][H/64][2][32 bytes]; FC2 [E][H/16][I/64][32] with scales [E][H/16][I/64][32 bytes].
struct Layer {
  const u32x4* w1;
  const u8* s1;
  const float* b13;  // [E][2][I]
  const u32x4* w2;
  const u8* s2;
  const float* b2;   // [E][H]
};

struct Route {
  int slots;                      // distinct experts
  int expert[kMaxSlots];          // increasing
  float weight[kMaxSlots][kMaxM];  // top-k weight of token m for the slot's expert, 0 if not routed
};

MOEJIT_DEVICE void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
MOEJIT_DEVICE void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
MOEJIT_DEVICE u32 cluster_rank() {
  u32 r;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// Stores v at the same shared-memory offset as `local` in CTA `rank` of the cluster.
MOEJIT_DEVICE void st_cluster(float* local, u32 rank, float v) {
  const u32 a = static_cast<u32>(__cvta_generic_to_shared(local));
  u32 remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(a), "r"(rank));
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote), "f"(v) : "memory");
}

// FC2's weights of one item in shared memory (kSmemFc2): [step][slab][warp][lane] runs, then scale words.
constexpr int kFc2SmemRuns = kFc2Steps * 2 * kWarps * 32;
constexpr int kFc2SmemBytes = kFc2SmemRuns * 16 + kFc2SmemRuns * 4;

MOEJIT_DEVICE void cp_async_16(void* smem, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(static_cast<u32>(__cvta_generic_to_shared(smem))), "l"(src)
               : "memory");
}
MOEJIT_DEVICE void cp_async_4(void* smem, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(static_cast<u32>(__cvta_generic_to_shared(smem))), "l"(src)
               : "memory");
}
MOEJIT_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
MOEJIT_DEVICE void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// FC1's steps of one item for every warp in shared memory (kAsync): [warp][step][matrix][lane] runs, then
// scale words.
constexpr int kFc1SmemRuns = kWarps * kFc1Steps * 2 * 32;
constexpr int kFc1SmemBytes = kFc1SmemRuns * 16 + kFc1SmemRuns * 4;
// Commit groups a warp's cp.async queue holds behind the one it waits for (kAsync, see below).
constexpr int kAsyncBehind = kFc1Steps;
template <int kN>
MOEJIT_DEVICE void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(kN) : "memory"); }

// kDepth: FC1 chunk-steps in flight per warp ahead of the one computed (a register ring of kDepth + 1).
// kSmemFc2: FC2's weights of the next item wait in shared memory (cp.async, no registers held while FC1
// runs) instead of registers.
// kAsync (with kSmemFc2; kDepth unused): FC1's loads also go through cp.async into per-warp slots of shared
// memory, one slot per step of an item, each refilled with the next item's step as soon as it is computed,
// so a warp keeps a whole item of FC1 bytes in flight without registers. One commit group per FC1 step and
// one per FC2 item, always committed (empty when there is nothing to load), so the group a warp needs is
// always the kAsyncBehind-th before its newest: groups run F1(0) x6, (empty), F1(1) x6, F2(0), F1(2) x6, F2(1)...
// Where FC2's run (16-row slab, 64-wide chunk q) of expert e lies in the FC2 plane, in 16-byte runs / 32:
// slab-major as the decode family's layout (a slab's chunks contiguous), or chunk-major (kFc2ChunkMajor: an
// item's FC2 bytes, chunk q of every slab, contiguous).
template <bool kFc2ChunkMajor>
__host__ __device__ size_t fc2_run_index(int e, int slab, int q) {
  return kFc2ChunkMajor ? ((size_t)e * kC2 + q) * kS2 + slab : ((size_t)e * kS2 + slab) * kC2 + q;
}

// Every thread calls it (it has barriers): the distinct experts in increasing order and each token's top-k
// weight per slot. The ids and weights are loaded by one thread each, in one round trip.
template <int kM>
MOEJIT_DEVICE void route_tokens(const int* topk_ids, const float* topk_w, Route& route) {
  __shared__ int ids[kM * kTopK];
  __shared__ float wts[kM * kTopK];
  if (threadIdx.x < kM * kTopK) {
    ids[threadIdx.x] = topk_ids[threadIdx.x];
    wts[threadIdx.x] = topk_w[threadIdx.x];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int n = 0;
    for (int q = 0; q < kM * kTopK; ++q) {
      bool seen = false;
      for (int j = 0; j < n; ++j) seen |= route.expert[j] == ids[q];
      if (!seen) route.expert[n++] = ids[q];
    }
    for (int a = 1; a < n; ++a)
      for (int b = a; b > 0 && route.expert[b - 1] > route.expert[b]; --b) {
        const int t = route.expert[b];
        route.expert[b] = route.expert[b - 1];
        route.expert[b - 1] = t;
      }
    for (int j = 0; j < n; ++j)
      for (int m = 0; m < kM; ++m) {
        route.weight[j][m] = 0.f;
        for (int k = 0; k < kTopK; ++k)
          if (ids[m * kTopK + k] == route.expert[j]) route.weight[j][m] = wts[m * kTopK + k];
      }
    route.slots = n;
  }
}

// x times 2^64 (exact) into shared memory, then a zero row (lanes of columns without a token read it).
// Every 16-byte load is issued before the first is used: one round trip, not one per 512 elements.
template <int kM>
MOEJIT_DEVICE void stage_x(const u16* x, u16* xs) {
  constexpr int kPieces = kM * kH / 8, kPerThread = (kPieces + kCta - 1) / kCta;
  u32x4 v[kPerThread];
#pragma unroll
  for (int r = 0; r < kPerThread; ++r) {
    const int i = threadIdx.x + r * kCta;
    if (i < kPieces) v[r] = ld_stream_16(x + 8 * i);
  }
#pragma unroll
  for (int r = 0; r < kPerThread; ++r) {
    const int i = threadIdx.x + r * kCta;
    if (i < kPieces)
      *reinterpret_cast<u32x4*>(xs + 8 * i) =
          u32x4{bf16x2_mul(v[r].x, kActScaleBf16x2), bf16x2_mul(v[r].y, kActScaleBf16x2),
                bf16x2_mul(v[r].z, kActScaleBf16x2), bf16x2_mul(v[r].w, kActScaleBf16x2)};
  }
  for (int i = threadIdx.x; i < kH / 8; i += kCta) *reinterpret_cast<u32x4*>(xs + kM * kH + 8 * i) = u32x4{0u, 0u, 0u, 0u};
}

// The pair's items in their fixed order: cluster c takes items c, c + clusters, ... (item = slot * kC2 +
// slice), at most max_items of them (fewer: the structure's fixed cost; 0: routing, staging, the start
// barrier, zero partial rows).
struct ItemDeal {
  int cluster, clusters, count;
  MOEJIT_DEVICE void at(const Route& route, int k, int& e, int& q, int& slot) const {
    const int it = cluster + k * clusters;
    slot = it / kC2;
    q = it % kC2;
    e = route.expert[slot];
  }
};
MOEJIT_DEVICE ItemDeal deal_items(const Route& route, int max_items) {
  const int cluster = blockIdx.x / 2, clusters = gridDim.x / 2, items = route.slots * kC2;
  return ItemDeal{cluster, clusters, min(max_items, cluster < items ? (items - cluster + clusters - 1) / clusters : 0)};
}
// The MMA B-operand row a lane supplies: token g/2 in even columns (the family's 4-column form), else the
// zero row kM.
template <int kM>
MOEJIT_DEVICE int token_of_lane(int g) { return (g % 2 == 0 && g / 2 < kM) ? g / 2 : kM; }

// One FC1 step: gate and up runs of chunk ch against the staged x pieces of this lane's token row.
MOEJIT_DEVICE void fc1_step(const u32x4 (&wv)[2], const u32x2 (&sv)[2], const u16* x_row, int ch, float (&acc)[1][2][4]) {
  chunk_mma<false, 2, 1, 4, false>(wv, sv, 1, acc, [&](int, int st) { return *reinterpret_cast<const u32x2*>(x_row + ch * 64 + st * 16); });
}
// A warp's FC1 partial sums of its slab (gate and up, rows g and g + 8, token c4 in lanes c4 < kM) into this
// CTA's part buffer and the same buffer of CTA `peer`.
template <int kM>
MOEJIT_DEVICE void store_fc1_part(float (&part)[2][16][kM], const float (&acc)[1][2][4], u32 peer) {
  const int g = lane_id() / 4, c4 = lane_id() % 4;
  if (c4 >= kM) return;
#pragma unroll
  for (int mat = 0; mat < 2; ++mat)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float* p = &part[mat][g + 8 * h][c4];
      const float v = acc[0][mat][2 * h];
      *p = v;
      st_cluster(p, peer, v);
    }
}
// The slice's FC1 output for thread t < 64 kM (row t % 64 of token t / 64): its gate and up rows' partial sums
// added in part order, scaled, biased (bias_g / bias_u: the slice row's two biases, loaded early by the
// caller) and activated, stored as bf16 times 2^64 (FC2's B operand as is); 0 when the slot's expert does
// not serve the token (weight 0).
template <int kM, int kParts>
MOEJIT_DEVICE void store_activation(const float (&part)[kSliceSlabs][kParts][2][16][kM], int t, float bias_g,
                                    float bias_u, float weight, u16* acts) {
  const int m = t / 64, row = t % 64, sl = row / 16, r = row % 16;
  float gate = 0.f, up = 0.f;
#pragma unroll
  for (int p = 0; p < kParts; ++p) {
    gate += part[sl][p][0][r][m];
    up += part[sl][p][1][r][m];
  }
  gate = gate * kAccScale + bias_g;
  up = up * kAccScale + bias_u;
  const float a = weight != 0.f ? apply_activation<kActSwigluOai, true>(gate, up, kAlpha, kBeta, kLimit) : 0.f;
  acts[m * 64 + row] = f32_to_bf16(a * kActScale);
}
// FC1's biases of slice row t % 64 (gate, up) of expert e's slice q.
MOEJIT_DEVICE void load_slice_biases(const float* b13, int e, int q, int t, float& bias_g, float& bias_u) {
  const int irow = q * 64 + t % 64;
  bias_g = b13[((size_t)e * 2) * kI + irow];
  bias_u = b13[((size_t)e * 2 + 1) * kI + irow];
}
// One FC2 step of a slab pair at the item's chunk: the pair's MMA results times the token's top-k weight tw
// (this lane's column) added to the pair's sums.
MOEJIT_DEVICE void fc2_pair_step(const u32x4 (&wv)[2], const u32x2 (&sv)[2], const u16* a_row, float tw,
                                 float (&acc)[1][2][4]) {
  float d[1][2][4];
  zero_accumulators(d);
  chunk_mma<false, 2, 1, 4, false>(wv, sv, 1, d, [&](int, int st) { return *reinterpret_cast<const u32x2*>(a_row + st * 16); });
#pragma unroll
  for (int sl = 0; sl < 2; ++sl) {
    acc[0][sl][0] = fmaf(d[0][sl][0], tw, acc[0][sl][0]);
    acc[0][sl][2] = fmaf(d[0][sl][2], tw, acc[0][sl][2]);
  }
}
// The cluster's partial row, rows of slab pair pr of CTA rank's H half: token c4 in lanes c4 < kM.
template <int kM>
MOEJIT_DEVICE void store_pair_rows(float* partial, int cluster, u32 rank, int pr, const float (&acc)[1][2][4]) {
  const int g = lane_id() / 4, c4 = lane_id() % 4;
  if (c4 >= kM) return;
#pragma unroll
  for (int sl = 0; sl < 2; ++sl)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int hrow = (rank * kHalfSlabs + 2 * pr + sl) * 16 + g + 8 * h;
      partial[((size_t)cluster * kH + hrow) * kM + c4] = acc[0][sl][2 * h];
    }
}

// kBound (timing bounds only, wrong results): 1 skips the MMA arithmetic of FC1 and FC2 (the loads and
// barriers stay), 2 skips the cluster barrier waits.
template <int kM, int kDepth, bool kSmemFc2, bool kAsync = false, int kBound = 0, bool kFc2ChunkMajor = false>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kCta, 1)
    k_slices(Layer L, const int* topk_ids, const float* topk_w, const u16* x, float* partial, long long* trace,
             int max_items) {
  static_assert(kM >= 1 && kM <= kMaxM, "tokens");
  __shared__ Route route;
  __shared__ alignas(16) u16 xs[(kM + 1) * kH];   // x times 2^64, then a zero row
  __shared__ alignas(16) u16 acts[(kM + 1) * 64]; // the item's activations times 2^64, then a zero row
  __shared__ float parts[kPBufs][kSliceSlabs][kParts][2][16][kM];
  pdl_launch_dependents();
  extern __shared__ __align__(16) u8 dyn_smem[];
  constexpr int kRing = kDepth + 1;
  const u32 rank = cluster_rank(), peer = rank ^ 1u;
  const int cluster = blockIdx.x / 2;
  const int warp = threadIdx.x / 32, lane = lane_id(), g = lane / 4, c4 = lane % 4;

  stage_x<kM>(x, xs);  // its loads go out beside the routing's
  for (int i = threadIdx.x; i < 64; i += kCta) acts[kM * 64 + i] = 0;
  route_tokens<kM>(topk_ids, topk_w, route);
  __syncthreads();
  const ItemDeal deal = deal_items(route, max_items);
  const int my_items = deal.count;
  auto item_at = [&](int k, int& e, int& q, int& slot) { deal.at(route, k, e, q, slot); };
  const int m_lane = token_of_lane<kM>(g);
  const u16* x_row = xs + m_lane * kH + 4 * c4;
  const u16* a_row = acts + m_lane * 64 + 4 * c4;

  // FC1: slab s = warp % 4 of the slice, local part lp = warp / 4; this CTA's chunks of slab s have the
  // parity (s + rank) & 1, and part lp takes every fourth of them.
  const int s = warp % kSliceSlabs, lp = warp / kSliceSlabs, gp = rank * kLocalParts + lp;
  const int ch0 = ((s + rank) & 1) + 2 * lp;
  const int n1 = ch0 < kC1 ? (kC1 - 1 - ch0) / (2 * kLocalParts) + 1 : 0;
  constexpr int kChStep = 2 * kLocalParts;
  u32x4 ring_w[kRing][2];
  u32x2 ring_s[kRing][2];
  const u32x4* w1p = nullptr;
  const u8* s1p = nullptr;
  auto fc1_point = [&](int k) {  // this warp's first run and scale word of item k
    int e, q, slot;
    item_at(k, e, q, slot);
    const size_t run = (((size_t)e * kS1 + q * kSliceSlabs + s) * kC1 + ch0) * 2;
    w1p = L.w1 + run * 32 + lane;
    s1p = L.s1 + run * 32 + g * 4;
  };
  auto fc1_load = [&](int j, int slot) {
    if (j < n1) {
#pragma unroll
      for (int mat = 0; mat < 2; ++mat) {
        ring_w[slot][mat] = ld_stream_16(w1p + (size_t)j * kChStep * 64 + mat * 32);
        ring_s[slot][mat] = u32x2{ld_stream_4(s1p + (size_t)j * kChStep * 64 + mat * 32), 0u};
      }
    }
  };
  auto fc1_prime = [&](int k) {
    fc1_point(k);
#pragma unroll
    for (int j = 0; j < kDepth; ++j) fc1_load(j, j);
  };
  // FC1 of item k (ring primed): partial sums of this warp's part to both CTAs' buffer k % kPBufs.
  auto fc1_run = [&](int k) {
    float acc[1][2][4];
    zero_accumulators(acc);
#pragma unroll
    for (int j = 0; j < kFc1Steps; ++j) {
      fc1_load(j + kDepth, (j + kDepth) % kRing);
      if (j < n1) {
        const int ch = ch0 + j * kChStep;
        fc1_step(ring_w[j % kRing], ring_s[j % kRing], x_row, ch, acc);
      }
    }
    store_fc1_part<kM>(parts[k % kPBufs][s][gp], acc, peer);
  };

  // kAsync: FC1 step j of item k into this warp's slot j (nothing past the items or the warp's steps), one group.
  u32x4* const f1_sw = reinterpret_cast<u32x4*>(dyn_smem) + warp * kFc1Steps * 2 * 32;
  u32* const f1_ss = reinterpret_cast<u32*>(dyn_smem + kFc1SmemRuns * 16) + warp * kFc1Steps * 2 * 32;
  auto fc1_issue = [&](int k, int j) {
    if (k < my_items && j < n1) {
      int e, q, slot;
      item_at(k, e, q, slot);
      const size_t run = (((size_t)e * kS1 + q * kSliceSlabs + s) * kC1 + ch0 + j * kChStep) * 2;
#pragma unroll
      for (int mat = 0; mat < 2; ++mat) {
        cp_async_16(f1_sw + (j * 2 + mat) * 32 + lane, L.w1 + (run + mat) * 32 + lane);
        cp_async_4(f1_ss + (j * 2 + mat) * 32 + lane, L.s1 + (run + mat) * 32 + g * 4);
      }
    }
    cp_async_commit();
  };
  // kAsync FC1 of item k (its groups issued): each step waits for its group, computes, and refills its slot
  // with item k + 1's step. wait_first: the start barrier's wait, before the first store to the peer.
  auto fc1_run_async = [&](int k, bool wait_first) {
    float acc[1][2][4];
    zero_accumulators(acc);
#pragma unroll
    for (int j = 0; j < kFc1Steps; ++j) {
      cp_async_wait<kAsyncBehind>();
      if (kBound != 1 && k < my_items && j < n1) {
        const int ch = ch0 + j * kChStep;
        u32x4 wv[2];
        u32x2 sv[2];
#pragma unroll
        for (int mat = 0; mat < 2; ++mat) {
          wv[mat] = f1_sw[(j * 2 + mat) * 32 + lane];
          sv[mat] = u32x2{f1_ss[(j * 2 + mat) * 32 + lane], 0u};
        }
        fc1_step(wv, sv, x_row, ch, acc);
      }
      fc1_issue(k + 1, j);
    }
    if (wait_first && kBound != 2) cluster_wait();
    if (k < my_items) store_fc1_part<kM>(parts[k % kPBufs][s][gp], acc, peer);
  };

  // FC2: this warp's slab pairs pr = warp, warp + 16, ... of the CTA's H half, at the item's chunk q.
  u32x4 f2_w[kSmemFc2 ? 1 : kFc2Steps][2];
  u32x2 f2_s[kSmemFc2 ? 1 : kFc2Steps][2];
  static_assert(!kAsync || kSmemFc2, "kAsync keeps FC2 in shared memory too");
  u8* const f2_base = dyn_smem + (kAsync ? kFc1SmemBytes : 0);
  u32x4* const f2_sw = reinterpret_cast<u32x4*>(f2_base);                         // [step][slab][warp][lane]
  u32* const f2_ss = reinterpret_cast<u32*>(f2_base + kFc2SmemRuns * 16);         // same order
  auto f2_at = [&](int p, int sl) { return ((p * 2 + sl) * kWarps + warp) * 32 + lane; };
  float acc2[kFc2Steps][1][2][4];
  zero_accumulators(acc2[0]);
#pragma unroll
  for (int p = 1; p < kFc2Steps; ++p) zero_accumulators(acc2[p]);
  auto fc2_load = [&](int k) {
    int e, q, slot;
    item_at(k, e, q, slot);
#pragma unroll
    for (int p = 0; p < kFc2Steps; ++p) {
      const int pr = warp + p * kWarps;
      if (pr < kPairsPerCta && k < my_items) {
        const int slab = rank * kHalfSlabs + 2 * pr;
#pragma unroll
        for (int sl = 0; sl < 2; ++sl) {
          const size_t run = fc2_run_index<kFc2ChunkMajor>(e, slab + sl, q);
          if (kSmemFc2) {
            cp_async_16(f2_sw + f2_at(p, sl), L.w2 + run * 32 + lane);
            cp_async_4(f2_ss + f2_at(p, sl), L.s2 + run * 32 + g * 4);
          } else {
            f2_w[kSmemFc2 ? 0 : p][sl] = ld_stream_16(L.w2 + run * 32 + lane);
            f2_s[kSmemFc2 ? 0 : p][sl] = u32x2{ld_stream_4(L.s2 + run * 32 + g * 4), 0u};
          }
        }
      }
    }
    if (kSmemFc2) cp_async_commit();
  };
  auto fc2_run = [&](int k) {
    int e, q, slot;
    item_at(k, e, q, slot);
    const float tw = c4 < kM ? route.weight[slot][c4] : 0.f;
    // This lane's own copies: no barrier needed.
    if (kAsync) cp_async_wait<kAsyncBehind>();
    else if (kSmemFc2) cp_async_wait_all();
#pragma unroll
    for (int p = 0; p < kFc2Steps; ++p) {
      if (kBound != 1 && warp + p * kWarps < kPairsPerCta) {
        u32x4 wv[2];
        u32x2 sv[2];
#pragma unroll
        for (int sl = 0; sl < 2; ++sl) {
          wv[sl] = kSmemFc2 ? f2_sw[f2_at(p, sl)] : f2_w[kSmemFc2 ? 0 : p][sl];
          sv[sl] = kSmemFc2 ? u32x2{f2_ss[f2_at(p, sl)], 0u} : f2_s[kSmemFc2 ? 0 : p][sl];
        }
        fc2_pair_step(wv, sv, a_row, tw, acc2[p]);
      }
    }
  };
  // After the barrier of item k: the slice's activations from the 8 parts of each gate and up row.
  // Thread t < 64 kM computes row t % 64 of token t / 64; its two bias values are loaded before the barrier.
  static_assert(kM * 64 <= kCta, "one activation per thread");
  float bias_g = 0.f, bias_u = 0.f;
  auto bias_load = [&](int k) {
    int e, q, slot;
    item_at(k, e, q, slot);
    if (threadIdx.x < kM * 64) load_slice_biases(L.b13, e, q, threadIdx.x, bias_g, bias_u);
  };
  auto activations = [&](int k) {
    int e, q, slot;
    item_at(k, e, q, slot);
    if (threadIdx.x < kM * 64)
      store_activation<kM, kParts>(parts[k % kPBufs], threadIdx.x, bias_g, bias_u, route.weight[slot][threadIdx.x / 64], acts);
  };

  // Trace (optional): SM clock of warp 0 at each phase boundary, kTraceStamps per CTA.
  int stamp = 0;
  auto mark = [&] {
    if (trace != nullptr && threadIdx.x == 0 && stamp < kTraceStamps) trace[blockIdx.x * kTraceStamps + stamp] = clock64();
    ++stamp;
  };
  if (trace != nullptr && threadIdx.x == 0) {
    long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    trace[blockIdx.x * kTraceStamps + kTraceStamps - 2] = now;
  }
  mark();
  if (kAsync) {
    // The start barrier (the peer must be running before anything is stored into its shared memory) is
    // waited for just before FC1(0)'s partial sums go out.
    cluster_arrive();
    mark();
    if (my_items > 0) {
#pragma unroll
      for (int j = 0; j < kFc1Steps; ++j) fc1_issue(0, j);
      cp_async_commit();  // stands for FC2(-1)
      fc1_run_async(0, true);
      mark();
      fc2_load(0);
      if (kBound != 2) cluster_arrive();
      for (int k = 0; k < my_items; ++k) {
        fc1_run_async(k + 1, false);  // past the last item: only its (empty) groups
        bias_load(k);
        mark();
        if (kBound != 2) cluster_wait();
        mark();
        activations(k);
        __syncthreads();
        mark();
        fc2_run(k);
        mark();
        fc2_load(k + 1);
        if (k + 1 < my_items && kBound != 2) cluster_arrive();
      }
      if (kBound == 2) cluster_wait();  // pairs the first arrive
    } else {
      cluster_wait();
    }
  } else {
    // The peer must be running before anything is stored into its shared memory.
    cluster_arrive();
    cluster_wait();
    mark();
    if (my_items > 0) {
      fc1_prime(0);
      fc1_run(0);
      mark();
      if (my_items > 1) fc1_prime(1);
      fc2_load(0);
      cluster_arrive();
      for (int k = 0; k < my_items; ++k) {
        if (k + 1 < my_items) {
          fc1_run(k + 1);
          if (k + 2 < my_items) fc1_prime(k + 2);
        }
        bias_load(k);
        mark();
        cluster_wait();
        mark();
        activations(k);
        __syncthreads();
        mark();
        fc2_run(k);
        mark();
        if (k + 1 < my_items) {
          fc2_load(k + 1);
          cluster_arrive();
        }
      }
    }
  }
  mark();
  if (trace != nullptr && threadIdx.x == 0) {  // absolute start and end (ns) in the last two slots
    long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    trace[blockIdx.x * kTraceStamps + kTraceStamps - 1] = now;
  }
  // One partial row per cluster.
#pragma unroll
  for (int p = 0; p < kFc2Steps; ++p)
    if (warp + p * kWarps < kPairsPerCta) store_pair_rows<kM>(partial, cluster, rank, warp + p * kWarps, acc2[p]);
}

// ---- The warp-specialized form: FC1 warps stream, FC2 warps consume ----
//
// The forms above run FC1 and FC2 in the same warps, so each warp's FC2 phase and the barrier before it
// leave its own loads idle. Here 8 warps of each CTA only compute FC1 (2 per slab of the slice, a quarter of
// the slab's K over the pair each) and 8 only compute FC2 (up to 6 slab pairs each, sums in registers
// across items). Each role streams its bytes through its own per-warp cp.async ring in shared memory
// (8 steps in flight), across item boundaries. The hand-over goes through mbarriers at cluster scope
// instead of CTA-wide barriers: FC1 warps store their partial sums into both CTAs' buffer k % 3 and arrive
// on both CTAs' full[k % 3]; FC2 warps wait on their own full[k % 3], compute the slice's activations (8
// warps, one named barrier), and arrive on both CTAs' empty[k % 3], which FC1 warps wait for before they
// reuse the buffer three items later. Routing and x staging take one round trip.
constexpr int kWsSlots = 8;                             // ring slots (steps in flight) per warp, both roles
constexpr int kWsRuns = kWarps * kWsSlots * 2 * 32;     // 16-byte runs, then a scale word each
constexpr int kWsSmemBytes = kWsRuns * 16 + kWsRuns * 4;

MOEJIT_DEVICE u32 smem_u32(const void* p) { return static_cast<u32>(__cvta_generic_to_shared(p)); }
MOEJIT_DEVICE void mbar_init(u64* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
// Arrives on barrier `bar` (same offset) of CTA `rank` of the cluster, releasing this thread's prior writes
// (and those ordered before them) at cluster scope.
MOEJIT_DEVICE void mbar_arrive_at(u64* bar, u32 rank) {
  u32 remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_u32(bar)), "r"(rank));
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
MOEJIT_DEVICE void mbar_wait(u64* bar, u32 parity) {
  asm volatile(
      "{\n .reg .pred done;\n WAIT_%=:\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra WAIT_%=;\n}" ::"r"(smem_u32(bar)), "r"(parity) : "memory");
}

// kWsF1Warps of the 16 warps compute FC1 (a multiple of 4: whole slabs), the others FC2.
template <int kM, int kWsF1Warps>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kCta, 1)
    k_slices_ws(Layer L, const int* topk_ids, const float* topk_w, const u16* x, float* partial, long long* trace,
                int max_items) {
  constexpr int kWsF2Warps = kWarps - kWsF1Warps;
  constexpr int kWsParts = 2 * kWsF1Warps / kSliceSlabs;  // FC1 parts per slab over the pair
  constexpr int kWsF2Pairs = (kPairsPerCta + kWsF2Warps - 1) / kWsF2Warps;
  static_assert(kWsF1Warps % kSliceSlabs == 0 && kM * 64 <= kWsF2Warps * 32, "whole slabs; one activation per FC2 thread");
  __shared__ Route route;
  __shared__ alignas(16) u16 xs[(kM + 1) * kH];
  __shared__ alignas(16) u16 acts[2][(kM + 1) * 64];  // double-buffered by item; row kM is zeros
  __shared__ float parts[kPBufs][kSliceSlabs][kWsParts][2][16][kM];
  __shared__ alignas(8) u64 full[kPBufs], empty[kPBufs];
  extern __shared__ __align__(16) u8 dyn_smem[];
  pdl_launch_dependents();
  const u32 rank = cluster_rank(), peer = rank ^ 1u;
  const int cluster = blockIdx.x / 2;
  const int warp = threadIdx.x / 32, lane = lane_id(), g = lane / 4, c4 = lane % 4;
  if (trace != nullptr && threadIdx.x == 0) {
    long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    trace[blockIdx.x * kTraceStamps + kTraceStamps - 2] = now;
  }
  stage_x<kM>(x, xs);
  for (int i = threadIdx.x; i < 2 * 64; i += kCta) acts[i / 64][kM * 64 + i % 64] = 0;
  if (threadIdx.x == 0) {
    for (int b = 0; b < kPBufs; ++b) {
      mbar_init(&full[b], 2 * kWsF1Warps);
      mbar_init(&empty[b], 2 * kWsF2Warps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  route_tokens<kM>(topk_ids, topk_w, route);
  // Both CTAs' barriers initialized and routed before any remote access.
  cluster_arrive();
  cluster_wait();
  const ItemDeal deal = deal_items(route, max_items);
  const int my_items = deal.count;
  auto item_at = [&](int k, int& e, int& q, int& slot) { deal.at(route, k, e, q, slot); };
  const int m_lane = token_of_lane<kM>(g);
  u32x4* const ring_w = reinterpret_cast<u32x4*>(dyn_smem) + warp * kWsSlots * 2 * 32;
  u32* const ring_s = reinterpret_cast<u32*>(dyn_smem + kWsRuns * 16) + warp * kWsSlots * 2 * 32;
  auto ring_read = [&](int i, u32x4 (&wv)[2], u32x2 (&sv)[2]) {
    const int slot = i % kWsSlots;
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      wv[m] = ring_w[(slot * 2 + m) * 32 + lane];
      sv[m] = u32x2{ring_s[(slot * 2 + m) * 32 + lane], 0u};
    }
  };

  if (warp < kWsF1Warps) {
    // FC1: slab s, part lp of this CTA's chunks of s (parity (s + rank) & 1), every fourth chunk.
    const int s = warp % kSliceSlabs, lp = warp / kSliceSlabs, gp = rank * (kWsF1Warps / kSliceSlabs) + lp;
    const int ch0 = ((s + rank) & 1) + 2 * lp;
    constexpr int kStride = 2 * (kWsF1Warps / kSliceSlabs);
    const int n1 = (kC1 - 1 - ch0) / kStride + 1;
    const int total = my_items * n1;
    auto issue = [&](int i) {
      if (i < total) {
        int e, q, slot;
        item_at(i / n1, e, q, slot);
        const size_t run = (((size_t)e * kS1 + q * kSliceSlabs + s) * kC1 + ch0 + (i % n1) * kStride) * 2;
        const int at = i % kWsSlots;
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          cp_async_16(ring_w + (at * 2 + m) * 32 + lane, L.w1 + (run + m) * 32 + lane);
          cp_async_4(ring_s + (at * 2 + m) * 32 + lane, L.s1 + (run + m) * 32 + g * 4);
        }
      }
      cp_async_commit();
    };
    for (int i = 0; i < kWsSlots - 1; ++i) issue(i);
    float acc[1][2][4];
    zero_accumulators(acc);
    const u16* x_row = xs + m_lane * kH + 4 * c4;
    for (int i = 0, k = 0, j = 0; i < total; ++i) {
      issue(i + kWsSlots - 1);
      cp_async_wait<kWsSlots - 1>();
      u32x4 wv[2];
      u32x2 sv[2];
      ring_read(i, wv, sv);
      const int ch = ch0 + j * kStride;
      fc1_step(wv, sv, x_row, ch, acc);
      if (++j == n1) {  // item k done: its partial sums to both CTAs, then the hand-over
        const int b = k % kPBufs;
        if (k >= kPBufs) mbar_wait(&empty[b], (k / kPBufs - 1) & 1);
        store_fc1_part<kM>(parts[b][s][gp], acc, peer);
        // Every lane's stores (local and remote) ordered before lane 0's release at cluster scope.
        asm volatile("fence.acq_rel.cluster;" ::: "memory");
        __syncwarp();
        if (lane == 0) {
          mbar_arrive_at(&full[b], rank);
          mbar_arrive_at(&full[b], peer);
        }
        zero_accumulators(acc);
        j = 0;
        ++k;
      }
    }
  } else {
    // FC2: slab pairs pr = fw, fw + 8, ... of this CTA's H half; the item's chunk q.
    const int fw = warp - kWsF1Warps, t = threadIdx.x - kWsF1Warps * 32;
    const int n2 = (kPairsPerCta - 1 - fw) / kWsF2Warps + 1;
    const int total = my_items * n2;
    auto issue = [&](int i) {
      if (i < total) {
        int e, q, slot;
        item_at(i / n2, e, q, slot);
        const int slab = rank * kHalfSlabs + 2 * (fw + (i % n2) * kWsF2Warps);
        const int at = i % kWsSlots;
#pragma unroll
        for (int sl = 0; sl < 2; ++sl) {
          const size_t run = fc2_run_index<false>(e, slab + sl, q);
          cp_async_16(ring_w + (at * 2 + sl) * 32 + lane, L.w2 + run * 32 + lane);
          cp_async_4(ring_s + (at * 2 + sl) * 32 + lane, L.s2 + run * 32 + g * 4);
        }
      }
      cp_async_commit();
    };
    for (int i = 0; i < kWsSlots - 1; ++i) issue(i);
    float acc2[kWsF2Pairs][1][2][4];
#pragma unroll
    for (int p = 0; p < kWsF2Pairs; ++p) zero_accumulators(acc2[p]);
    for (int k = 0; k < my_items; ++k) {
      int e, q, slot;
      item_at(k, e, q, slot);
      const int b = k % kPBufs;
      float bias_g = 0.f, bias_u = 0.f;
      if (t < kM * 64) load_slice_biases(L.b13, e, q, t, bias_g, bias_u);
      mbar_wait(&full[b], (k / kPBufs) & 1);
      if (t < kM * 64) store_activation<kM, kWsParts>(parts[b], t, bias_g, bias_u, route.weight[slot][t / 64], acts[k % 2]);
      asm volatile("bar.sync 1, %0;" ::"n"(kWsF2Warps * 32) : "memory");  // the FC2 warps only
      if (lane == 0) {
        mbar_arrive_at(&empty[b], rank);
        mbar_arrive_at(&empty[b], peer);
      }
      const float tw = c4 < kM ? route.weight[slot][c4] : 0.f;
      const u16* a_row = acts[k % 2] + m_lane * 64 + 4 * c4;
#pragma unroll
      for (int p = 0; p < kWsF2Pairs; ++p) {
        if (p < n2) {
          const int i = k * n2 + p;
          issue(i + kWsSlots - 1);
          cp_async_wait<kWsSlots - 1>();
          u32x4 wv[2];
          u32x2 sv[2];
          ring_read(i, wv, sv);
          fc2_pair_step(wv, sv, a_row, tw, acc2[p]);
        }
      }
    }
#pragma unroll
    for (int p = 0; p < kWsF2Pairs; ++p)
      if (p < n2) store_pair_rows<kM>(partial, cluster, rank, fw + p * kWsF2Warps, acc2[p]);
  }
  // No CTA leaves while its peer may still store into it or arrive on its barriers.
  cluster_arrive();
  cluster_wait();
  if (trace != nullptr && threadIdx.x == 0) {
    long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    trace[blockIdx.x * kTraceStamps + kTraceStamps - 1] = now;
  }
}

// Kernel 2: out[m][h] = 2^62 x (the clusters' partial rows added in cluster order) + sum_k w_k b2[e_k][h].
// 32 outputs per CTA of 8 warps; warp w adds clusters w, w + 8, ... (all loads issued first), then the
// warp sums are added in warp order.
constexpr int kSumWarps = 8, kSumRows = 9;
template <int kM>
__global__ void __launch_bounds__(kSumWarps * 32) k_sum(const float* partial, int clusters, const int* topk_ids,
                                                       const float* topk_w, const float* b2, float* out) {
  __shared__ float sums[kSumWarps][32];
  const int warp = threadIdx.x / 32, lane = lane_id();
  const int o = blockIdx.x * 32 + lane;  // output (h, m) at h * kM + m
  pdl_wait_primary();
  float v[kSumRows];
#pragma unroll
  for (int j = 0; j < kSumRows; ++j) {
    const int c = warp + j * kSumWarps;
    v[j] = (o < kH * kM && c < clusters) ? partial[(size_t)c * kH * kM + o] : 0.f;
  }
  float acc = 0.f;
#pragma unroll
  for (int j = 0; j < kSumRows; ++j) acc += v[j];
  sums[warp][lane] = acc;
  __syncthreads();
  if (warp == 0 && o < kH * kM) {
    float t = 0.f;
    for (int w = 0; w < kSumWarps; ++w) t += sums[w][lane];
    const int h = o / kM, m = o % kM;
    float bias = 0.f;
    for (int k = 0; k < kTopK; ++k) bias += topk_w[m * kTopK + k] * b2[(size_t)topk_ids[m * kTopK + k] * kH + h];
    out[(size_t)m * kH + h] = t * kAccScale + bias;
  }
}

// ---- data and the fp64 reference ----

__host__ __device__ u32 hash32(u64 i, u32 seed) {
  u64 z = i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<u32>(z ^ (z >> 31));
}

// Random prepared words: every 32-bit pattern is 8 valid e2m1 codes.
__global__ void k_fill_words(u32* p, size_t n, u32 seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = hash32(i, seed);
}
// e8m0 scales 2^-9 .. 2^-4 (codes 118..123): four per word.
__global__ void k_fill_scales(u32* p, size_t n, u32 seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const u32 z = hash32(i, seed);
    u32 r = 0;
    for (int b = 0; b < 4; ++b) r |= (118u + static_cast<u32>((z >> (8 * b)) % 6)) << (8 * b);
    p[i] = r;
  }
}

float bf16_to_f32(u16 b) {
  u32 v = static_cast<u32>(b) << 16;
  float f;
  std::memcpy(&f, &v, 4);
  return f;
}
u16 f32_to_bf16_host(float f) {
  u32 v;
  std::memcpy(&v, &f, 4);
  v += 0x7FFFu + ((v >> 16) & 1u);
  return static_cast<u16>(v >> 16);
}
u32 rotl_host(u32 w, int b) { return (w << b) | (w >> (32 - b)); }

// The e2m1 values of one prepared 16-byte run (rows g, g + 8 of a slab, one 64-wide chunk), decoded with the
// decode family's bit placement (fp4_decode.cuh) independently of the device code: out[row 0..1][k 0..15]
// for the lane's 4 K values per k16 step st at 16 st + 4 c + 0..3.
void decode_run(const u32x4& run, int c, float (*vals)[64], int g) {
  const u32 words[4] = {run.x, run.y, run.z, run.w};
  for (int st = 0; st < 4; ++st) {
    const u32 w = words[st];
    const u32 a[4] = {w & kPlacedMask, (w << 4) & kPlacedMask, rotl_host(w, 10) & kPlacedMask,
                      ((w << 6) & 0x80C080C0u) | (rotl_host(w, 14) & 0x01000100u)};
    for (int p = 0; p < 4; ++p)
      for (int h = 0; h < 2; ++h) {
        const u16 bits = static_cast<u16>(a[p] >> (16 * h));
        const double v = std::ldexp(static_cast<double>(bf16_to_f32(bits)), 126);
        const int row = g + 8 * (p & 1);            // MMA A registers 0/2: row g, 1/3: row g + 8
        const int k = 16 * st + 4 * c + 2 * (p >> 1) + h;  // registers 2/3: true K 4c + 2, 4c + 3
        vals[row][k] = static_cast<float>(v);
      }
  }
}

// One slab-chunk (16 rows x 64 K) of a prepared plane, with its e8m0 block scales applied.
void slab_chunk(const std::vector<u32x4>& w, const std::vector<u8>& sc, size_t run0, float (*out)[64]) {
  for (int lane = 0; lane < 32; ++lane) decode_run(w[run0 * 32 + lane], lane % 4, out, lane / 4);
  for (int row = 0; row < 16; ++row)
    for (int k = 0; k < 64; ++k) {
      const int grp = row % 8, hi = row / 8, block = k / 32;
      const u8 code = sc[run0 * 32 + grp * 4 + 2 * block + hi];
      out[row][k] *= std::ldexp(1.f, static_cast<int>(code) - 127);
    }
}

double swiglu_oai(double g, double u) {
  g = std::min(g, (double)kLimit);
  u = std::min(std::max(u, -(double)kLimit), (double)kLimit);
  return g / (1.0 + std::exp(-kAlpha * g)) * (u + kBeta);
}

struct Buffers {
  u32x4 *w1, *w2;
  u8 *s1, *s2;
  float *b13, *b2, *tw, *partial, *out;
  u16* x;
  int* ids;
};

}  // namespace

int main(int argc, char** argv) {
  const int replays = argc > 1 ? std::atoi(argv[1]) : 40;
  Device dev;
  CHECK(cudaDeviceGetAttribute(&dev.sms, cudaDevAttrMultiProcessorCount, 0));
  int l2 = 0;
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  dev.l2 = static_cast<size_t>(l2);
  const int clusters = dev.sms / 2;
  const size_t w1_runs = (size_t)kE * kS1 * kC1 * 2 * 32, w2_runs = (size_t)kE * kS2 * kC2 * 32;
  Buffers b{};
  CHECK(cudaMalloc(&b.w1, w1_runs * 16));
  CHECK(cudaMalloc(&b.s1, w1_runs));
  CHECK(cudaMalloc(&b.w2, w2_runs * 16));
  CHECK(cudaMalloc(&b.s2, w2_runs));
  CHECK(cudaMalloc(&b.b13, sizeof(float) * kE * 2 * kI));
  CHECK(cudaMalloc(&b.b2, sizeof(float) * kE * kH));
  CHECK(cudaMalloc(&b.x, sizeof(u16) * kMaxM * kH));
  CHECK(cudaMalloc(&b.ids, sizeof(int) * kMaxM * kTopK));
  CHECK(cudaMalloc(&b.tw, sizeof(float) * kMaxM * kTopK));
  CHECK(cudaMalloc(&b.partial, sizeof(float) * clusters * kH * kMaxM));
  CHECK(cudaMalloc(&b.out, sizeof(float) * kMaxM * kH));
  k_fill_words<<<1024, 256>>>(reinterpret_cast<u32*>(b.w1), w1_runs * 4, 1);
  k_fill_words<<<1024, 256>>>(reinterpret_cast<u32*>(b.w2), w2_runs * 4, 2);
  k_fill_scales<<<1024, 256>>>(reinterpret_cast<u32*>(b.s1), w1_runs / 4, 3);
  k_fill_scales<<<1024, 256>>>(reinterpret_cast<u32*>(b.s2), w2_runs / 4, 4);
  CHECK(cudaGetLastError());
  // Host-side data: biases, x, routing (token 0 and 1 share one expert: 7 distinct at two tokens, as the
  // bench's gpt-oss routing), weights.
  std::vector<float> b13((size_t)kE * 2 * kI), b2((size_t)kE * kH);
  for (size_t i = 0; i < b13.size(); ++i) b13[i] = ((int)(hash32(i, 5) % 2001) - 1000) * 1e-4f;
  for (size_t i = 0; i < b2.size(); ++i) b2[i] = ((int)(hash32(i, 6) % 2001) - 1000) * 1e-4f;
  std::vector<u16> x((size_t)kMaxM * kH);
  for (size_t i = 0; i < x.size(); ++i) x[i] = f32_to_bf16_host(((int)(hash32(i, 7) % 2001) - 1000) * 1e-3f);
  const int ids[kMaxM * kTopK] = {90, 17, 101, 64, 5, 64, 127, 33};
  const float tw[kMaxM * kTopK] = {0.4f, 0.3f, 0.2f, 0.1f, 0.35f, 0.3f, 0.25f, 0.1f};
  CHECK(cudaMemcpy(b.b13, b13.data(), sizeof(float) * b13.size(), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b.b2, b2.data(), sizeof(float) * b2.size(), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b.x, x.data(), sizeof(u16) * x.size(), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b.ids, ids, sizeof(ids), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b.tw, tw, sizeof(tw), cudaMemcpyHostToDevice));
  const size_t flush_bytes = 2 * dev.l2;
  char* flush;
  unsigned* sink;
  CHECK(cudaMalloc(&flush, flush_bytes));
  CHECK(cudaMalloc(&sink, 16));
  CHECK(cudaMemset(flush, 1, flush_bytes));
  const unsigned long long flush16 = flush_bytes / 16;
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const Layer layer{b.w1, b.s1, b.b13, b.w2, b.s2, b.b2};
  {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(2 * clusters);
    cfg.blockDim = dim3(kCta);
    int active = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&active, k_slices<2, 2, false>, &cfg));
    std::printf("co-resident clusters of 2 CTAs: %d (grid asks %d)\n", active, clusters);
  }
  std::printf("slice layer, gpt-oss-120b shapes, %d clusters of 2 CTAs on %d SMs, L2 flushed by a read of %.1f MB, "
              "median of %d replays (us)\n", clusters, dev.sms, flush_bytes / 1e6, replays);

  auto run_case = [&](auto m_tag) {
    constexpr int kM = decltype(m_tag)::value;
    std::vector<int> experts;
    for (int q = 0; q < kM * kTopK; ++q)
      if (std::find(experts.begin(), experts.end(), ids[q]) == experts.end()) experts.push_back(ids[q]);
    // The reference for each FC2 layout (slab-major, chunk-major): the same bytes define another matrix.
    std::vector<double> refs[2];
    refs[0].assign((size_t)kM * kH, 0.0);
    for (int m = 0; m < kM; ++m)
      for (int h = 0; h < kH; ++h)
        for (int k = 0; k < kTopK; ++k) refs[0][(size_t)m * kH + h] += tw[m * kTopK + k] * b2[(size_t)ids[m * kTopK + k] * kH + h];
    refs[1] = refs[0];
    for (int e : experts) {
      // Copy this expert's planes back and compute its FC1 and FC2 for the tokens routed to it.
      std::vector<u32x4> w1((size_t)kS1 * kC1 * 2 * 32), w2((size_t)kS2 * kC2 * 32);
      std::vector<u8> s1(w1.size()), s2(w2.size());
      CHECK(cudaMemcpy(w1.data(), b.w1 + (size_t)e * w1.size(), 16 * w1.size(), cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(s1.data(), b.s1 + (size_t)e * s1.size(), s1.size(), cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(w2.data(), b.w2 + (size_t)e * w2.size(), 16 * w2.size(), cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(s2.data(), b.s2 + (size_t)e * s2.size(), s2.size(), cudaMemcpyDeviceToHost));
      for (int m = 0; m < kM; ++m) {
        double wgt = 0;
        for (int k = 0; k < kTopK; ++k)
          if (ids[m * kTopK + k] == e) wgt = tw[m * kTopK + k];
        if (wgt == 0) continue;
        std::vector<double> act(kI);
        float blk[16][64];
        for (int slab = 0; slab < kS1; ++slab) {
          double gu[2][16] = {};
          for (int ch = 0; ch < kC1; ++ch)
            for (int mat = 0; mat < 2; ++mat) {
              slab_chunk(w1, s1, ((size_t)slab * kC1 + ch) * 2 + mat, blk);
              for (int r = 0; r < 16; ++r)
                for (int k = 0; k < 64; ++k) gu[mat][r] += (double)blk[r][k] * bf16_to_f32(x[(size_t)m * kH + ch * 64 + k]);
            }
          for (int r = 0; r < 16; ++r) {
            const int i = slab * 16 + r;
            const double a = swiglu_oai(gu[0][r] + b13[((size_t)e * 2) * kI + i], gu[1][r] + b13[((size_t)e * 2 + 1) * kI + i]);
            act[i] = bf16_to_f32(f32_to_bf16_host(static_cast<float>(a)));
          }
        }
        for (int layout = 0; layout < 2; ++layout)
          for (int slab = 0; slab < kS2; ++slab)
            for (int ch = 0; ch < kC2; ++ch) {
              slab_chunk(w2, s2, layout ? fc2_run_index<true>(0, slab, ch) : fc2_run_index<false>(0, slab, ch), blk);
              for (int r = 0; r < 16; ++r) {
                double t = 0;
                for (int k = 0; k < 64; ++k) t += (double)blk[r][k] * act[ch * 64 + k];
                refs[layout][(size_t)m * kH + slab * 16 + r] += wgt * t;
              }
            }
      }
    }
    const size_t bytes = experts.size() * ((size_t)kS1 * kC1 * 2 * 32 * 17 + (size_t)kS2 * kC2 * 32 * 17);
    const float t_read = time_us(st, flush, flush16, sink, dev.sms, replays, [&] {
      k_read<<<4 * dev.sms, kThreads, 0, st>>>(reinterpret_cast<const char*>(b.w1), bytes / 16, sink);
    });
    std::printf("M=%d: %zu distinct experts, %.1f MB of weights and scales, a read of as many bytes %.1f us\n", kM,
                experts.size(), bytes / 1e6, t_read);
    bool ok = true;
    // Checks kernel 1 (launch_k1(trace, max_items)) + the sum against ref, then times the layer, kernel 1
    // alone, one traced forward and kernel 1 with no items. bound: wrong results by design (not checked).
    auto measure = [&](const std::string& label, bool bound, const std::vector<double>& ref, auto launch_k1) {
      auto forward = [&] {
        launch_k1(nullptr, 1 << 30);
        launch_ex(st, Launch::programmatic, (kH * kM + 31) / 32, kSumWarps * 32, k_sum<kM>, (const float*)b.partial,
                  clusters, (const int*)b.ids, (const float*)b.tw, (const float*)b.b2, b.out);
      };
      // Correctness: poisoned output, one forward, against fp64 on the same prepared bytes.
      CHECK(cudaMemset(b.out, 0xFF, sizeof(float) * kMaxM * kH));
      forward();
      CHECK(cudaStreamSynchronize(st));
      CHECK(cudaGetLastError());
      std::vector<float> got((size_t)kM * kH);
      CHECK(cudaMemcpy(got.data(), b.out, sizeof(float) * got.size(), cudaMemcpyDeviceToHost));
      double worst = 0, scale = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        scale = std::max(scale, std::fabs(ref[i]));
        worst = std::isnan(got[i]) ? INFINITY : std::max(worst, std::fabs(got[i] - ref[i]));
      }
      const bool good = worst <= 1e-2 * scale;
      if (!bound) ok &= good;
      const float t_layer = time_us(st, flush, flush16, sink, dev.sms, replays, forward);
      const float t_k1 = time_us(st, flush, flush16, sink, dev.sms, replays, [&] { launch_k1(nullptr, 1 << 30); });
      // One traced forward: mean over CTAs of each phase (SM clocks at the clock rate of the run).
      long long* tr;
      CHECK(cudaMalloc(&tr, sizeof(long long) * 2 * clusters * kTraceStamps));
      CHECK(cudaMemset(tr, 0, sizeof(long long) * 2 * clusters * kTraceStamps));
      k_read<<<4 * dev.sms, kThreads, 0, st>>>(flush, flush16, sink);
      launch_k1(tr, 1 << 30);
      CHECK(cudaStreamSynchronize(st));
      std::vector<long long> h((size_t)2 * clusters * kTraceStamps);
      CHECK(cudaMemcpy(h.data(), tr, sizeof(long long) * h.size(), cudaMemcpyDeviceToHost));
      CHECK(cudaFree(tr));
      int clock_khz = 0;
      CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
      auto stamps = [&](int c) {
        int n = 0;
        while (n < kTraceStamps - 2 && h[(size_t)c * kTraceStamps + n] != 0) ++n;
        return n;
      };
      int most = 0;
      for (int c = 0; c < 2 * clusters; ++c) most = std::max(most, stamps(c));
      if (most > 1)
        std::printf("  trace (us from the CTA's start, mean / max over the CTAs with the most items): start sync, fc1(0), "
                    "then per item k: fc1(k+1), wait(k), act(k), fc2(k); end\n  ");
      for (int i = 1; i < most; ++i) {
        double sum = 0, mx = 0;
        int n = 0;
        for (int c = 0; c < 2 * clusters; ++c) {
          const long long* t = &h[(size_t)c * kTraceStamps];
          if (stamps(c) != most) continue;
          const double us = (t[i] - t[0]) / (clock_khz * 1e-3);
          sum += us;
          mx = std::max(mx, us);
          ++n;
        }
        if (n) std::printf("%.2f/%.2f ", sum / n, mx);
      }
      if (most > 1) std::printf("\n");
      std::vector<double> starts, ends;
      for (int c = 0; c < 2 * clusters; ++c) {
        starts.push_back((double)h[(size_t)c * kTraceStamps + kTraceStamps - 2]);
        ends.push_back((double)h[(size_t)c * kTraceStamps + kTraceStamps - 1]);
      }
      const double t0 = *std::min_element(starts.begin(), starts.end());
      for (auto& v : starts) v = (v - t0) / 1e3;
      for (auto& v : ends) v = (v - t0) / 1e3;
      std::sort(starts.begin(), starts.end());
      std::sort(ends.begin(), ends.end());
      std::printf("  CTA starts (us after the first): median %.2f, 90th %.2f, last %.2f; ends: first %.2f, median %.2f, last %.2f\n",
                  starts[starts.size() / 2], starts[starts.size() * 9 / 10], starts.back(), ends.front(), ends[ends.size() / 2],
                  ends.back());
      const float t_empty = time_us(st, flush, flush16, sink, dev.sms, replays, [&] { launch_k1(nullptr, 0); });
      std::printf("  kernel 1 with no items (routing, staging, start barrier, zero rows): %.1f us\n", t_empty);
      std::printf("M=%d %s: max |out - fp64| %.3g of max |out| %.3g (%s); layer %.1f us, kernel 1 alone %.1f us\n", kM,
                  label.c_str(), worst, scale, bound ? "bound, wrong by design" : good ? "ok" : "MISMATCH", t_layer, t_k1);
    };
    auto variant = [&](auto depth_tag, auto smem_tag, auto async_tag, auto bound_tag, auto major_tag) {
      constexpr bool kMajor = decltype(major_tag)::value;
      constexpr int kDepth = decltype(depth_tag)::value;
      constexpr bool kSmemFc2 = decltype(smem_tag)::value;
      constexpr bool kAsync = decltype(async_tag)::value;
      constexpr int kBound = decltype(bound_tag)::value;
      auto kernel = k_slices<kM, kDepth, kSmemFc2, kAsync, kBound, kMajor>;
      const int dyn = (kSmemFc2 ? kFc2SmemBytes : 0) + (kAsync ? kFc1SmemBytes : 0);
      CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn));
      std::string label = kAsync ? "FC1 through shared memory (a whole item in flight)" : "FC1 register ring depth " + std::to_string(kDepth);
      label += kSmemFc2 ? ", FC2 weights in shared memory" : ", FC2 weights in registers";
      if (kMajor) label += ", FC2 plane chunk-major";
      if (kBound) label += kBound == 1 ? ", bound: no MMA arithmetic" : ", bound: no cluster barrier waits";
      measure(label, kBound != 0, refs[kMajor ? 1 : 0], [&](long long* trace, int max_items) {
        kernel<<<2 * clusters, kCta, dyn, st>>>(layer, b.ids, b.tw, b.x, b.partial, trace, max_items);
      });
    };
    auto warp_specialized = [&](auto f1_tag) {
      constexpr int kF1 = decltype(f1_tag)::value;
      CHECK(cudaFuncSetAttribute(k_slices_ws<kM, kF1>, cudaFuncAttributeMaxDynamicSharedMemorySize, kWsSmemBytes));
      measure("warp-specialized (" + std::to_string(kF1) + " FC1 warps, " + std::to_string(kWarps - kF1) +
                  " FC2 warps, mbarrier hand-over)",
              false, refs[0], [&](long long* trace, int max_items) {
                k_slices_ws<kM, kF1><<<2 * clusters, kCta, kWsSmemBytes, st>>>(layer, b.ids, b.tw, b.x, b.partial, trace, max_items);
              });
    };
    warp_specialized(std::integral_constant<int, 8>{});
    warp_specialized(std::integral_constant<int, 12>{});
    using I0 = std::integral_constant<int, 0>;
    using F = std::false_type;
    using T = std::true_type;
    variant(std::integral_constant<int, 2>{}, F{}, F{}, I0{}, F{});
    variant(std::integral_constant<int, 3>{}, T{}, F{}, I0{}, F{});
    variant(I0{}, T{}, T{}, I0{}, F{});
    variant(I0{}, T{}, T{}, std::integral_constant<int, 1>{}, F{});
    variant(I0{}, T{}, T{}, std::integral_constant<int, 2>{}, F{});
    variant(std::integral_constant<int, 3>{}, T{}, F{}, I0{}, T{});
    variant(I0{}, T{}, T{}, I0{}, T{});
    variant(I0{}, T{}, T{}, std::integral_constant<int, 1>{}, T{});
    return ok;
  };
  bool ok = run_case(std::integral_constant<int, 2>{});
  ok &= run_case(std::integral_constant<int, 1>{});
  CHECK(cudaDeviceSynchronize());
  return ok ? 0 : 1;
}
