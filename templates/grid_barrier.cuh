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

// A barrier that leaves its arrival counter at 0 again, for kernels launched over and over (graph
// replays) with the same counter: the last CTA to arrive resets `arrived` and then advances
// `generation`, which the others watch. `arrived` must be 0 before the first use (the host clears it);
// `generation` may hold any value.
MOEJIT_DEVICE void grid_barrier_reusable(u32* arrived, u32* generation) {
  __syncthreads();
  if (threadIdx.x == 0) {
    u32 gen;
    asm volatile("ld.global.acquire.gpu.u32 %0, [%1];" : "=r"(gen) : "l"(generation) : "memory");
    __threadfence();
    if (atomicAdd(arrived, 1u) == gridDim.x - 1) {
      *arrived = 0u;  // every CTA has arrived: nobody touches it again before the generation moves
      __threadfence();
      asm volatile("st.global.release.gpu.u32 [%0], %1;" ::"l"(generation), "r"(gen + 1u) : "memory");
    } else {
      u32 now;
      do {
        asm volatile("ld.global.acquire.gpu.u32 %0, [%1];" : "=r"(now) : "l"(generation) : "memory");
      } while (now == gen);
    }
  }
  __syncthreads();
}
