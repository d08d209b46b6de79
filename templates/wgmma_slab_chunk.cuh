// One 64-wide K chunk of a warp's 16-row slab on warpgroup MMA, for the families whose warps decode their
// slab's FP4 words into wgmma's register A operand against a shared-memory B tile (the batch family's
// warpgroup tiles, the prefill family). Include it after the generator's wgmma_rs overloads.
#pragma once
#include "slab_mma.cuh"
#include "token_tiles.cuh"
#include "wgmma.cuh"

// wr: the warp's weight runs in shared memory (lane's 16 bytes; matrix m at wr[m * 32]); sr: this lane's
// row group's scale bytes (matrix m at sr + m * kScaleChunk); desc: the B tile's descriptor. Per k16 step
// st: the rows' block scales (batch_row_scales), a wait until step j - 2's MMAs, the last readers of the A
// slot st % 2, are done, then after_wait(st) (where a caller releases what the previous chunk's MMAs read),
// the A fragments decoded and scaled into the slot, and the step's kMats wgmmas issued as one group, so
// each warp's decode overlaps its previous step's MMAs. The k16 step st of the tile starts 32 bytes
// further: its descriptor's address field (bytes >> 4) is 2 st higher, with no carry (the tile is
// 1024-aligned and shared addresses stay below 2^18). kRawB: B is the layer input as is (the scales'
// shift, kBatchScaleShift).
//
// kScalesInRegisters: sr is unused, and sc_regs holds the lane's scale bytes of each matrix, which the caller
// rebuilt (CSF scales, csf_scales.cuh); wgmma_slab_chunk_from_registers below.
template <bool kNvfp4, int kMats, int kScaleChunk, bool kRawB, int kAcc, class AfterWait, bool kScalesInRegisters = false>
MOEJIT_DEVICE void wgmma_slab_chunk(const u32x4* wr, const u8* sr, u64 desc, u32 (&ar)[2][kMats][4],
                                    float (&acc)[kMats][kAcc], AfterWait after_wait, const u32x2* sc_regs = nullptr) {
  constexpr int kStepsPerBlock = kNvfp4 ? 1 : 2;  // MXFP4 blocks span two k16 steps
  u32x4 wc[kMats];
  u32x2 sc[kMats];
  u32 sg[kMats], sg8[kMats];
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
    wc[m] = wr[m * 32];
    if constexpr (kScalesInRegisters)
      sc[m] = sc_regs[m];
    else
      sc[m] = kNvfp4 ? *reinterpret_cast<const u32x2*>(sr + m * kScaleChunk)
                     : u32x2{*reinterpret_cast<const u32*>(sr + m * kScaleChunk), 0u};
  }
#pragma unroll
  for (int st = 0; st < 4; ++st) {
    const int slot = st & 1;
#pragma unroll
    for (int m = 0; m < kMats; ++m)
      if (st % kStepsPerBlock == 0)
        batch_row_scales<kNvfp4, kBatchScaleShift<kRawB>>(sc[m], st / kStepsPerBlock, sg[m], sg8[m]);
    wgmma_wait<1>();  // step j - 2's MMAs, the last to read this slot, are done
    after_wait(st);
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      const u32 word = st == 0 ? wc[m].x : st == 1 ? wc[m].y : st == 2 ? wc[m].z : wc[m].w;
      u32* r = ar[slot][m];
      fp4_decode_word(word, ar[slot][m]);
      r[0] = bf16x2_mul(r[0], sg[m]);
      r[1] = bf16x2_mul(r[1], sg8[m]);
      r[2] = bf16x2_mul(r[2], sg[m]);
      r[3] = bf16x2_mul(r[3], sg8[m]);
    }
    wgmma_fence();
#pragma unroll
    for (int m = 0; m < kMats; ++m) wgmma_rs(acc[m], ar[slot][m], desc + (u64)(2 * st));
    wgmma_commit();
  }
}

// One chunk step with the lane's scale bytes of each matrix from registers (sc) rather than the stage.
template <bool kNvfp4, int kMats, bool kRawB, int kAcc, class AfterWait>
MOEJIT_DEVICE void wgmma_slab_chunk_from_registers(const u32x4* wr, const u32x2 (&sc)[kMats], u64 desc,
                                                   u32 (&ar)[2][kMats][4], float (&acc)[kMats][kAcc],
                                                   AfterWait after_wait) {
  wgmma_slab_chunk<kNvfp4, kMats, 0, kRawB, kAcc, AfterWait, true>(wr, nullptr, desc, ar, acc, after_wait, sc);
}
