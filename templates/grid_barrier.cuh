// Grid-wide barrier for kernels launched cooperatively (runtime/launch.hpp: launch_cooperative), whose
// grid is clamped to what can be co-resident, so every CTA of the grid runs at once and spinning
// cannot deadlock. `counter` starts at 0 and is never reset: barrier number n (1-based) waits for
// n * gridDim.x arrivals.
#pragma once
#include "device_core.cuh"

MOEJIT_DEVICE void grid_barrier(u32* counter, u32 generation) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counter, 1u);
    const u32 target = generation * gridDim.x;
    u32 seen;
    do {
      asm volatile("ld.global.acquire.gpu.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
    } while (seen < target);
  }
  __syncthreads();
}
