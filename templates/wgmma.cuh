// sm_90a warpgroup MMA (wgmma) pieces: ordering fences, groups, and the descriptor of a shared-memory B
// operand. The MMA itself (wgmma_rs, one m64nNk16 with A from registers) is emitted by the generator for
// the key's N, since its operand list is as long as the accumulator (N / 2 registers per thread).
//
// A from registers: warp w of the warpgroup supplies rows 16w..16w+15 of the 64-row A in the register
// layout of mma.m16n8k16's A fragment, so fp4_decode_word's four registers are an A fragment as they are.
// The accumulator likewise: warp w holds rows 16w.., and per 8-column block j its registers 4j..4j+3 are
// an m16n8 accumulator.
#pragma once
#include "bulk_copy.cuh"  // fence_proxy_async_shared: cp.async writes -> wgmma reads

// Orders this thread's register writes (A fragments, accumulators) before the wgmmas that follow.
MOEJIT_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
MOEJIT_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most kPending committed groups of this warp are still running.
template <int kPending>
MOEJIT_DEVICE void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Descriptor of a K-major B operand in the 128-byte swizzle: rows of 64 bf16 (128 bytes), 8-row atoms of
// 1024 bytes stacked along N (stride 1024), the 16-byte piece j of row r stored at piece j ^ (r % 8). The
// atom base must be 1024-byte aligned; the k16 step s of the 64-wide row starts at byte 32 s (the
// hardware applies the swizzle to the address bits, so the start moves unswizzled).
MOEJIT_DEVICE u64 wgmma_desc_k_sw128(u32 smem_address) {
  return (u64)((smem_address & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

// Byte offset of the 16-byte piece j (0..7) of row r in a 128-byte swizzled tile.
MOEJIT_DEVICE u32 sw128_offset(int r, int j) { return (u32)(r * 128 + ((j ^ (r & 7)) << 4)); }

// Warp-specialized kernels move registers between warpgroups: a producer warpgroup gives up registers it
// does not need and the consumer warpgroups take them (every warp of a warpgroup executes the same one).
template <int kRegs>
MOEJIT_DEVICE void warpgroup_release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
MOEJIT_DEVICE void warpgroup_claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

