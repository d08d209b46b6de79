// Device-only basics shared by every kernel: fixed-width types, bf16 conversions, cached loads,
// tensor-core MMA and programmatic-dependent-launch controls, all as inline PTX so generated source
// needs no CUDA toolkit header (a server ships with the driver and libnvrtc only).
#pragma once

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef int i32;

struct alignas(16) u32x4 { u32 x, y, z, w; };
struct alignas(8) u32x2 { u32 x, y; };
// A compile-time flag passed to generic lambdas (the sources are C++17: no explicit lambda templates).
template <bool kValue>
struct BoolTag {
  static constexpr bool value = kValue;
};
// Likewise a compile-time int (a width, a count).
template <int kValue>
struct IntTag {
  static constexpr int value = kValue;
};

#define MOEJIT_DEVICE __device__ __forceinline__

// fp32 -> bf16 bits, round to nearest even (NaN stays NaN).
MOEJIT_DEVICE u16 f32_to_bf16(float v) {
  u16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(v));
  return r;
}
// Element-wise bf16x2 product, exact whenever the product is representable (no fast-math flush).
MOEJIT_DEVICE u32 bf16x2_mul(u32 a, u32 b) {
  u32 r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(0x80008000u));
  return r;
}

// Streaming loads of data read exactly once (weights, scales): skip L1 allocation. volatile: a
// non-volatile asm counts as side-effect free and may be speculated out of its bounds check.
MOEJIT_DEVICE u32x4 ld_stream_16(const void* p) {
  u32x4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
MOEJIT_DEVICE u32x2 ld_stream_8(const void* p) {
  u32x2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
MOEJIT_DEVICE u32 ld_stream_4(const void* p) {
  u32 v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
// Asks the L2 to fetch the line holding p from DRAM; nothing comes back to the thread.
MOEJIT_DEVICE void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
// Rows of the layer input x (read-only while the forward runs; volatile: must stay after
// griddepcontrol.wait in programmatic dependents).
MOEJIT_DEVICE u32x2 ld_nc_8(const void* p) {
  u32x2 v;
  asm volatile("ld.global.nc.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
// Activation rows another grid wrote while this one may already run (FC1's output read by a programmatic
// dependent FC2, or by the fused kernel's second phase after its grid barrier). A plain (weak) load: the
// PTX memory model makes the writer's stores visible to it once griddepcontrol.wait returns, or once the
// barrier's acquire has been seen, so it may still be cached in L1. The non-coherent path of ld_nc_8 may
// not be used here: it assumes the data is unchanged for the kernel's whole life, and may serve lines an
// earlier forward left in this SM's L1, since the dependent started before the rows were written.
// (volatile: must stay after the wait or barrier.)
MOEJIT_DEVICE u32x2 ld_act_8(const void* p) {
  u32x2 v;
  asm volatile("ld.global.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
// Loads of data another CTA of the same grid wrote (bypass the incoherent L1).
MOEJIT_DEVICE float ld_cg_f32(const float* p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}

// Counters one CTA hands results over with to another CTA of the same grid, at GPU scope. Release and
// acquire patterns are cumulative: writes a CTA ordered before its release by __syncthreads() are seen
// by a CTA whose acquire reads that release (or a later read-modify-write of the same counter), and
// __syncthreads() after the acquire extends that to all its threads. Cheaper than __threadfence() (a
// sequentially consistent fence, in every thread) around relaxed atomics.
MOEJIT_DEVICE int atomic_add_acquire_gpu(int* p, int v) {
  int old;
  asm volatile("atom.acquire.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
MOEJIT_DEVICE void red_add_release_gpu(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
MOEJIT_DEVICE int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// For polling loops: relaxed reads, then one fence once the awaited value is seen (together an acquire;
// an acquiring read in the loop would fence on every poll).
MOEJIT_DEVICE int ld_relaxed_gpu(const int* p) {
  int v;
  asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
MOEJIT_DEVICE void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

// D = A(16x16 bf16, row) * B(16x8 bf16, col) + C, fp32 accumulators.
MOEJIT_DEVICE void mma_bf16_16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Programmatic dependent launch: let the next kernel in the stream start its prologue, and wait
// for the previous kernel's memory to be visible. No-ops when launched without the attribute.
MOEJIT_DEVICE void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
MOEJIT_DEVICE void pdl_wait_primary() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

MOEJIT_DEVICE u32 lane_id() { return threadIdx.x & 31u; }
