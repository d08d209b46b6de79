// Device-only wrappers for the Hopper asynchronous copy engine as inline PTX (NVRTC has no
// cuda::barrier without the CUDA headers): shared-memory mbarriers, bulk global -> shared copies that
// signal one, and plain shared-memory loads by 32-bit shared address.
#pragma once
#include "device_core.cuh"

// The 32-bit shared-window address of a pointer into this CTA's shared memory.
MOEJIT_DEVICE u32 shared_address(const void* p) {
  u32 a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

MOEJIT_DEVICE void mbarrier_init(u32 bar, u32 arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes initialized barriers visible to the async proxy (the copy engine); a CTA barrier must follow
// before other threads use them.
MOEJIT_DEVICE void mbarrier_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
// One arrival that also announces `bytes` of copies that will complete on the barrier.
MOEJIT_DEVICE void mbarrier_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// One arrival (release: this thread's earlier shared-memory reads are done before it counts).
MOEJIT_DEVICE void mbarrier_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Blocks until the barrier's phase with the given parity has completed. kSuspendNs > 0: each try
// suspends the thread up to that long (fewer issued retries while a phase is far from complete).
template <int kSuspendNs = 0>
MOEJIT_DEVICE void mbarrier_wait(u32 bar, u32 parity) {
  if constexpr (kSuspendNs > 0) {
    u32 done;
    do {
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3; selp.u32 %0, 1, 0, p; }"
          : "=r"(done)
          : "r"(bar), "r"(parity), "n"(kSuspendNs)
          : "memory");
    } while (!done);
    return;
  }
  u32 done;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// One box of a 3-D tensor map (map: the generic address of a __grid_constant__ parameter's map) at
// element coordinates (c0, c1, c2), innermost first, into shared memory at dst (128-byte aligned); it
// completes the box's bytes of the barrier's expected transactions (out-of-bounds elements arrive as zeros).
MOEJIT_DEVICE void tensor_copy_3d_to_shared(u32 dst, const void* map, int c0, int c1, int c2, u32 bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(
          dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// An L2 policy for data read exactly once: evict it first, so it does not push out what is reused.
MOEJIT_DEVICE u64 l2_evict_first_policy() {
  u64 p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory; the
// copy completes `bytes` of the barrier's expected transactions.
MOEJIT_DEVICE void bulk_copy_to_shared(u32 dst, const void* src, u32 bytes, u32 bar, u64 policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}

// The same copy under the L2's default policy (for data other CTAs read again: weights shared by an
// expert's token tiles, a tile's blocks shared by its row groups).
MOEJIT_DEVICE void bulk_copy_to_shared(u32 dst, const void* src, u32 bytes, u32 bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// Clusters (sm_90): this CTA's rank in its cluster, a barrier over every thread of the cluster (release /
// acquire: shared-memory writes before it, barrier inits included, are seen by the other CTAs after it),
// an arrival on the barrier at the same shared address in CTA `rank` of the cluster, and the bulk copy that
// lands at the same shared address in every CTA of `cta_mask` and completes its bytes on each one's barrier
// at `bar`'s address.
MOEJIT_DEVICE u32 cluster_cta_rank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
MOEJIT_DEVICE void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
MOEJIT_DEVICE void mbarrier_arrive_cluster(u32 bar, u32 rank) {
  asm volatile(
      "{ .reg .b32 r; mapa.shared::cluster.u32 r, %0, %1; mbarrier.arrive.release.cluster.shared::cluster.b64 _, [r]; }" ::"r"(bar),
      "r"(rank)
      : "memory");
}
MOEJIT_DEVICE void bulk_copy_to_shared_multicast(u32 dst, const void* src, u32 bytes, u32 bar, u16 cta_mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "h"(cta_mask)
      : "memory");
}

// 16-byte global -> shared copies that bypass the registers (L2 only, so rows other CTAs wrote are
// seen); src_bytes 0 fills zeros. Commit, then wait for all of this thread's copies.
MOEJIT_DEVICE void cp_async_16(u32 dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// A global -> shared copy of kBytes (4, 8 or 16; both addresses kBytes-aligned) of read-only data: pieces
// smaller than cp_async_16's (a CSF plane's MXFP4 offsets, 4 bytes per chunk and matrix).
template <int kBytes>
MOEJIT_DEVICE void cp_async_piece(u32 dst, const void* src) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (kBytes == 16)
    cp_async_16(dst, src, 16);
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(dst), "l"(src), "n"(kBytes) : "memory");
}
// One arrival on the barrier, made when every cp.async this thread issued before it has landed (the
// barrier's expected arrivals must count it: noinc).
MOEJIT_DEVICE void cp_async_mbarrier_arrive(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
MOEJIT_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
MOEJIT_DEVICE void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
MOEJIT_DEVICE void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}
// Orders this thread's shared-memory accesses through the generic proxy (loads, stores, cp.async) with the
// async proxy's (bulk copies, wgmma operand reads): reads before later copy-engine writes of the same
// bytes, writes before the warpgroup MMAs that read them (after a barrier).
MOEJIT_DEVICE void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Shared-memory loads by shared address (volatile: they must stay after the barrier wait that made
// the data visible).
MOEJIT_DEVICE u32x4 ld_shared_16(u32 a) {
  u32x4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
  return v;
}
MOEJIT_DEVICE u32x2 ld_shared_8(u32 a) {
  u32x2 v;
  asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a));
  return v;
}
MOEJIT_DEVICE u32 ld_shared_4(u32 a) {
  u32 v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
  return v;
}

// A barrier for the first `threads` threads of the CTA only (named barrier 1), so that a producer warp
// outside them never has to join.
template <int kThreads>
MOEJIT_DEVICE void sync_first_threads() {
  asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");
}
