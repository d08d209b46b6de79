// Decode family in one cooperative launch: every CTA of a co-resident grid walks FC1's (slab, slot)
// items, waits at a grid barrier, then walks FC2's items (with the top-k combine). The alternative to
// the two launches (FC1, then FC2 as a programmatic dependent); docs/perf-log.md compares them.
#pragma once
#include "grid_barrier.cuh"
#include "moe_decode_fc1.cuh"
#include "moe_decode_fc2.cuh"

template <bool kNvfp4, int kAct, bool kLimit, bool kBias, int kE, int kH, int kI, int kWarps, int kNT, int kCols, int kDepth, bool kInline, bool kPrefetchX>
__device__ void moe_decode_fused(const DecodeFusedParams& p) {
  const int fc1_slabs = kI / 16, fc2_slabs = kH / 16;
  const int fc1_items = fc1_slabs * p.slots, fc2_items = fc2_slabs * p.slots;
  // a8: one slab group per CTA (FC2's phase runs kWarps warps), so the even slab's item computes both
  // slabs of its scale block and the odd slab's returns (moe_decode_fc1_work without kSlabPairs).
  for (int item = blockIdx.x; item < fc1_items; item += gridDim.x) {
    moe_decode_fc1_item<kNvfp4, kAct, kLimit, kBias, kE, kH, kI, kWarps, kNT, kCols, kDepth, kInline, kPrefetchX>(
        p.fc1, item % fc1_slabs, item / fc1_slabs);
    __syncthreads();  // shared routing and reduction buffers are reused by the next item
  }
  grid_barrier_reusable(p.barrier, p.barrier + 1);
  for (int item = blockIdx.x; item < fc2_items; item += gridDim.x) {
    moe_decode_fc2_item<kNvfp4, kBias, kE, kH, kI, kWarps, kNT, kCols, kDepth, kInline, kPrefetchX>(
        p.fc2, item % fc2_slabs, item / fc2_slabs);
    __syncthreads();
  }
}
