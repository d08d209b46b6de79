// Developer timelines (built only with the CMake option MOEJIT_TRACE, which adds "#define MOEJIT_TRACE 1"
// to every generated source): kernels stamp %globaltimer (ns) at fixed points into per-CTA and per-warp
// records of their module, the host copies them out when the runtime unloads the module
// (MOEJIT_TRACE_DIR), and tools/trace_timeline.py lines FC1 and FC2 up. Each launch overwrites the
// records of the previous one, so a dump holds the last forward. Without the option every mark is
// empty and kernels are unchanged.
//
// CTA record slots: 0 start, 1 routed, 3 programmatic wait returned (warp 0), 4 warp 0's first chunk
// computed (of its last item, in kernels that walk several), 5 work done (before the completion
// ticket where one is taken), 6 end, 7 kind << 32 | SM id (kind 1 FC1, 2 FC2, 4 the route kernel). Warp record
// slots (FC2-sum): 0 start, 1 first unit done, 2 last unit done, 3 exit, 4 chunks, 5 units, 7 3 << 32 |
// SM id.
// Grids larger than kTraceRecords CTAs (warps) record their first kTraceRecords only.
#pragma once
#include "device_core.cuh"

#ifdef MOEJIT_TRACE
inline constexpr unsigned kTraceRecords = 16384;
__device__ u64 moejit_trace_cta[kTraceRecords][8];
__device__ u64 moejit_trace_warp[kTraceRecords][8];
MOEJIT_DEVICE u64 trace_now() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
MOEJIT_DEVICE u32 trace_smid() {
  u32 s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}
MOEJIT_DEVICE u32 trace_cta() { return blockIdx.x + blockIdx.y * gridDim.x; }
MOEJIT_DEVICE u32 trace_warp() { return trace_cta() * (blockDim.x >> 5) + (threadIdx.x >> 5); }
// Thread 0 stamps the CTA record; lane 0 of each warp its warp record.
#define MOEJIT_TRACE_CTA(slot) \
  do { if (threadIdx.x == 0 && trace_cta() < kTraceRecords) moejit_trace_cta[trace_cta()][slot] = trace_now(); } while (0)
#define MOEJIT_TRACE_CTA_KIND(kind) \
  do { \
    if (threadIdx.x == 0 && trace_cta() < kTraceRecords) \
      moejit_trace_cta[trace_cta()][7] = (u64)(kind) << 32 | trace_smid(); \
  } while (0)
#define MOEJIT_TRACE_WARP(slot, value) \
  do { \
    if ((threadIdx.x & 31) == 0 && trace_warp() < kTraceRecords) moejit_trace_warp[trace_warp()][slot] = (value); \
  } while (0)
#else
#define MOEJIT_TRACE_CTA(slot) do {} while (0)
#define MOEJIT_TRACE_CTA_KIND(kind) do {} while (0)
#define MOEJIT_TRACE_WARP(slot, value) do {} while (0)
#endif
