// Slabs streamed through shared memory: one producer lane copies each slab a stage at a time
// (kWarps * kGroup chunks of weights and their scales, one bulk copy each, completing on the stage's
// "full" barrier) into a ring of kStages stages, running ahead of the consumer warps as far as the ring
// allows, across slabs; the kWarps consumer warps compute each stage from shared memory and release it
// on its "empty" barrier. The bytes in flight per SM are set by the ring, not by registers, and the
// stream does not drain between slabs. Producer and consumers walk the same sequence of slabs, each
// counting the stages it has passed (n), which names the stage's slot and barrier phase.
//
// Chunk c of a slab goes to consumer warp c % kWarps, in increasing order: the same split and the
// same sums as slab_mma with kParts = kWarps, so results match the register-fed kernels bit for bit.
#pragma once
#include "slab_mma.cuh"

// kSuspendNs: how long each try of a barrier wait may suspend the thread (0: the hardware's default).
// kCsf: the slab's scales are a prepared CSF plane (csf_scales.cuh); the ring then carries weights only,
// and each consumer warp rebuilds its chunks' plain scale bytes into its own CsfStage area when it starts
// the slab, before it waits for the slab's first stage, and reads them from there.
template <bool kNvfp4, int kMats, int kWarps, int kStages, int kGroup, int kSuspendNs = 0, bool kCsf = false>
struct SlabStreamRing {
  using SG = ScaleGeometry<kNvfp4>;
  using CG = CsfGeometry<kNvfp4>;
  static constexpr int kStageChunks = kWarps * kGroup;
  static constexpr int kWeightBytes = kStageChunks * kMats * 512;
  static constexpr int kStageBytes = kWeightBytes + (kCsf ? 0 : kStageChunks * kMats * SG::kBytesPerChunk);
  // kStages full barriers, then kStages empty barriers, padded so the stages start 128-byte aligned.
  static constexpr int kBarrierBytes = (2 * kStages * 8 + 127) / 128 * 128;
  static constexpr int kBytes = kBarrierBytes + kStages * kStageBytes;  // the launch's dynamic shared memory

  u32 full0, empty0, ring0;  // shared addresses of the first full barrier, empty barrier and stage

  // Every thread, before the CTA barrier that publishes the initialization.
  MOEJIT_DEVICE static SlabStreamRing make(u8* smem) {
    SlabStreamRing r;
    r.full0 = shared_address(smem);
    r.empty0 = r.full0 + 8 * kStages;
    r.ring0 = r.full0 + kBarrierBytes;
    if (threadIdx.x == 0) {
      for (int i = 0; i < kStages; ++i) {
        mbarrier_init(r.full0 + 8 * i, 1);        // the producer's arrival (plus the copies' bytes)
        mbarrier_init(r.empty0 + 8 * i, kWarps);  // one arrival per consumer warp
      }
      mbarrier_init_fence();
    }
    return r;
  }

  // Producer lane: copies one slab of kChunks chunks (w: its first weight byte, s: its first scale
  // byte), stage by stage; n counts the stages filled so far.
  template <int kChunks>
  MOEJIT_DEVICE void fill_slab(const u8* w, const u8* s, u32& n, u64 policy) const {
    constexpr int kStagesPerSlab = (kChunks + kStageChunks - 1) / kStageChunks;
    for (int st = 0; st < kStagesPerSlab; ++st, ++n) {
      const u32 idx = n % kStages;
      if (n >= kStages) mbarrier_wait<kSuspendNs>(empty0 + 8 * idx, (n / kStages - 1) & 1);
      const int c0 = st * kStageChunks;
      const u32 chunks = min(kStageChunks, kChunks - c0);
      const u32 wbytes = chunks * kMats * 512, sbytes = kCsf ? 0 : chunks * kMats * SG::kBytesPerChunk;
      const u32 stage = ring0 + idx * kStageBytes, full = full0 + 8 * idx;
      mbarrier_arrive_expect_tx(full, wbytes + sbytes);
      bulk_copy_to_shared(stage, w + (size_t)c0 * kMats * 512, wbytes, full, policy);
      if (!kCsf)
        bulk_copy_to_shared(stage + kWeightBytes, s + (size_t)c0 * kMats * SG::kBytesPerChunk, sbytes, full, policy);
    }
  }

  // The CSF stage of one consumer warp's chunks of a slab of kK reduction elements (chunk c to warp c % kWarps).
  template <int kK>
  using CsfStageOf = CsfStage<kNvfp4, kMats, (kK + 63) / 64, kWarps>;

  // Consumer warp `warp`: its chunks of one slab of kK reduction elements, against the activation rows
  // b_rows (as in slab_mma; kScaleB: multiply them by 2^64 here), into acc; n counts the stages
  // consumed so far. kCsf: csf_offsets is the slab's first CSF offsets byte, csf its other arrays,
  // csf_area the warp's CsfStageOf<kK> area.
  template <int kK, int kNT, int kCols, bool kScaleB>
  MOEJIT_DEVICE void mma_slab(const u16* const (&b_rows)[kNT], int live_tiles, float (&acc)[kNT][kMats][4], int warp,
                              u32& n, const u8* csf_offsets = nullptr, const CsfStageSlab& csf = CsfStageSlab{},
                              u8* csf_area = nullptr) const {
    constexpr int kChunks = (kK + 63) / 64;
    constexpr int kStagesPerSlab = (kChunks + kStageChunks - 1) / kStageChunks;
    const int lane = lane_id(), g = lane >> 2, kofs = 4 * (lane & 3);
    zero_accumulators(acc);
    using Stage = CsfStageOf<kK>;
    if constexpr (kCsf) Stage::rebuild(csf_area, csf_offsets, csf, warp, part_chunks<kChunks, kWarps>(warp));
#pragma unroll 1
    for (int st = 0; st < kStagesPerSlab; ++st, ++n) {
      const u32 idx = n % kStages;
      mbarrier_wait<kSuspendNs>(full0 + 8 * idx, (n / kStages) & 1);
      const u32 stage = ring0 + idx * kStageBytes;
#pragma unroll
      for (int i = 0; i < kGroup; ++i) {
        const int local = i * kWarps + warp;  // chunk within the stage
        const int c = st * kStageChunks + local;
        if (kChunks % kStageChunks != 0 && c >= kChunks) break;
        // Activation pieces first (L1 hits after the first slab), then the chunk from the stage.
        u32x2 xc[kNT][4];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int s4 = 0; s4 < 4; ++s4) {
            const int k = c * 64 + kofs + 16 * s4;
            xc[nt][s4] = b_rows[nt] != nullptr && (kK % 64 == 0 || k < kK) ? ld_nc_8(b_rows[nt] + k) : u32x2{0u, 0u};
          }
        u32x4 wc[kMats];
        u32x2 sc[kMats];
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
          wc[m] = ld_shared_16(stage + (local * kMats + m) * 512 + lane * 16);
          if constexpr (!kCsf) {
            const u32 sa = stage + kWeightBytes + (local * kMats + m) * SG::kBytesPerChunk + g * SG::kBytesPerLane;
            sc[m] = kNvfp4 ? ld_shared_8(sa) : u32x2{ld_shared_4(sa), 0u};
          }
        }
        if constexpr (kCsf) {
          // The warp's local chunk c / kWarps = st * kGroup + i.
          const u8* cs = csf_area + (st * kGroup + i) * Stage::kChunkBytes + g * CG::kPlainBytesPerLane;
#pragma unroll
          for (int m = 0; m < kMats; ++m) sc[m] = Stage::read(cs, m);
        }
        chunk_mma<kNvfp4, kMats, kNT, kCols, kScaleB>(wc, sc, live_tiles, acc, [&](int nt, int s4) { return xc[nt][s4]; });
      }
      __syncwarp();
      if (lane == 0) mbarrier_arrive(empty0 + 8 * idx);  // this warp is done with the stage
    }
  }
};
