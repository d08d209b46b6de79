// Decode family, FC1 with its weights streamed through shared memory by a producer warp
// (decode_fc1_stream keys). Same items and results as decode_fc1_loop (one wave of CTAs walks the
// (slab, slot) items with inline routing), but the weights no longer ride in registers: warp kWarps
// copies each slab, kWarps * kGroup chunks at a time, into a ring of kStages shared-memory stages with
// the bulk copy engine (one copy for the weights and one for the scales of a stage, completing on the
// stage's "full" barrier), and runs ahead across the CTA's items as far as the ring allows. The
// kWarps consumer warps compute from shared memory and release each stage on its "empty" barrier.
// So the bytes in flight per SM are set by the ring (tens of KB), not by registers, and a CTA's
// stream does not drain between items.
//
// Chunk c of a slab goes to consumer warp c % kWarps, in increasing order: the same split and the same
// sums as slab_mma with kParts = kWarps, so results equal decode_fc1_loop's with the same warps bit for bit.
#pragma once
#include "moe_decode_fc1.cuh"

template <bool kNvfp4, int kMats, int kWarps, int kStages, int kGroup>
struct Fc1StreamRing {
  using SG = ScaleGeometry<kNvfp4>;
  static constexpr int kStageChunks = kWarps * kGroup;
  static constexpr int kWeightBytes = kStageChunks * kMats * 512;
  static constexpr int kStageBytes = kWeightBytes + kStageChunks * kMats * SG::kBytesPerChunk;
  // kStages full barriers, then kStages empty barriers, padded so the stages start 128-byte aligned.
  static constexpr int kBarrierBytes = (2 * kStages * 8 + 127) / 128 * 128;
  static constexpr int kBytes = kBarrierBytes + kStages * kStageBytes;  // the launch's dynamic shared memory
};

template <bool kNvfp4, int kAct, bool kLimit, bool kBias, int kE, int kH, int kI, int kWarps, int kNT, int kCols, int kStages, int kGroup>
__device__ void moe_decode_fc1_stream(const DecodeFc1Params& p) {
  constexpr int kMats = kAct == kActRelu2 ? 1 : 2;
  constexpr int kChunks = (kH + 63) / 64;
  constexpr int kSlabs = kI / 16;
  using Ring = Fc1StreamRing<kNvfp4, kMats, kWarps, kStages, kGroup>;
  using SG = ScaleGeometry<kNvfp4>;
  constexpr int kStagesPerSlab = (kChunks + Ring::kStageChunks - 1) / Ring::kStageChunks;
  extern __shared__ __align__(128) u8 stream_smem[];
  __shared__ InlineRouteList route;
  __shared__ float red[kWarps > 1 ? kWarps * kNT * kMats * 4 * 32 : 1];
  pdl_launch_dependents();
  const int lane = lane_id(), warp = threadIdx.x >> 5;
  const u32 full0 = shared_address(stream_smem), empty0 = full0 + 8 * kStages, ring0 = full0 + Ring::kBarrierBytes;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbarrier_init(full0 + 8 * i, 1);           // the producer's arrival (plus the copies' bytes)
      mbarrier_init(empty0 + 8 * i, kWarps);     // one arrival per consumer warp
    }
    mbarrier_init_fence();
  }
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < p.num_counters; i += blockDim.x) p.counters[i] = 0;
  // Its closing CTA barrier also publishes the barriers' initialization.
  inline_route_list<kE>(p.route.topk_ids, p.route.pairs, p.route.expert_begin, route);
  const int items = kSlabs * route.num_active;

  if (warp == kWarps) {  // the producer: one lane issues every copy, in the consumers' order
    if (lane == 0) {
      const u64 policy = l2_evict_first_policy();
      u32 n = 0;  // stages filled so far
      for (int item = blockIdx.x; item < items; item += gridDim.x) {
        const int slot = item / kSlabs, slab = item % kSlabs;
        const int count = route.offset[slot + 1] - route.offset[slot];
        const size_t slab_index = (size_t)route.expert[slot] * kSlabs + slab;
        const u8* w = reinterpret_cast<const u8*>(p.w + slab_index * kChunks * kMats * 32);
        const u8* s = p.s + slab_index * kChunks * kMats * SG::kBytesPerChunk;
        for (int pass = 0; pass < count; pass += kCols * kNT) {
          for (int st = 0; st < kStagesPerSlab; ++st, ++n) {
            const u32 idx = n % kStages;
            if (n >= kStages) mbarrier_wait(empty0 + 8 * idx, (n / kStages - 1) & 1);
            const int c0 = st * Ring::kStageChunks;
            const u32 chunks = min(Ring::kStageChunks, kChunks - c0);
            const u32 wbytes = chunks * kMats * 512, sbytes = chunks * kMats * SG::kBytesPerChunk;
            const u32 stage = ring0 + idx * Ring::kStageBytes, full = full0 + 8 * idx;
            mbarrier_arrive_expect_tx(full, wbytes + sbytes);
            bulk_copy_to_shared(stage, w + (size_t)c0 * kMats * 512, wbytes, full, policy);
            bulk_copy_to_shared(stage + Ring::kWeightBytes, s + (size_t)c0 * kMats * SG::kBytesPerChunk, sbytes, full,
                                policy);
          }
        }
      }
    }
    return;
  }

  const int g = lane >> 2, kofs = 4 * (lane & 3);
  u32 n = 0;  // stages consumed so far
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int slot = item / kSlabs, slab = item % kSlabs;
    const int first = route.offset[slot];
    const ExpertWork work{route.num_active, route.expert[slot], route.offset[slot + 1] - first, route.pair + first};
    const float gs = kNvfp4 ? p.gscale[work.expert] * kAccScale : kAccScale;
    for (int pass = 0; pass < work.count; pass += kCols * kNT) {
      const u16* rows[kNT];
      const int live = pass_rows<kNT, kCols>(
          pass, work.count, [&](int t) { return p.x + (size_t)(work.pairs[t] / p.route.top_k) * kH; }, rows);
      float acc[kNT][kMats][4];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int m = 0; m < kMats; ++m)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[nt][m][i] = 0.f;
#pragma unroll 1
      for (int st = 0; st < kStagesPerSlab; ++st, ++n) {
        const u32 idx = n % kStages;
        mbarrier_wait(full0 + 8 * idx, (n / kStages) & 1);
        const u32 stage = ring0 + idx * Ring::kStageBytes;
#pragma unroll
        for (int i = 0; i < kGroup; ++i) {
          const int local = i * kWarps + warp;  // chunk within the stage
          const int c = st * Ring::kStageChunks + local;
          if (kChunks % Ring::kStageChunks != 0 && c >= kChunks) break;
          // Activation pieces first (L1 hits after the first item), then the chunk from the stage.
          u32x2 xc[kNT][4];
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int s4 = 0; s4 < 4; ++s4) {
              const int k = c * 64 + kofs + 16 * s4;
              xc[nt][s4] = rows[nt] != nullptr && (kH % 64 == 0 || k < kH) ? ld_nc_8(rows[nt] + k) : u32x2{0u, 0u};
            }
          u32x4 wc[kMats];
          u32x2 sc[kMats];
#pragma unroll
          for (int m = 0; m < kMats; ++m) {
            wc[m] = ld_shared_16(stage + (local * kMats + m) * 512 + lane * 16);
            const u32 sa = stage + Ring::kWeightBytes + (local * kMats + m) * SG::kBytesPerChunk + g * SG::kBytesPerLane;
            sc[m] = kNvfp4 ? ld_shared_8(sa) : u32x2{ld_shared_4(sa), 0u};
          }
          chunk_mma<kNvfp4, kMats, kNT, kCols, true>(wc, sc, live, acc, [&](int nt, int s4) { return xc[nt][s4]; });
        }
        __syncwarp();
        if (lane == 0) mbarrier_arrive(empty0 + 8 * idx);  // this warp is done with the stage
      }
      reduce_over_warps<kMats, kWarps, kNT>(acc, red);
      if (warp == 0) fc1_store_pass<kAct, kLimit, kBias, kI, kMats, kNT, kCols>(p, work, slab, pass, live, acc, gs);
      sync_first_threads<kWarps * 32>();  // red is reused by the next pass
    }
  }
}
