// The read loop of `moejit bench`'s read floor (generator.cpp, read_floor_source) and of the standalone
// probe bench/probes/layer_floor.cu: one loop in one place, so both time the same reads. Self-contained
// (no other template, no toolkit header): NVRTC and nvcc both compile it.
#pragma once

// Reads 16-byte words first, first + stride, ... below n16 of p with four streaming loads in flight per
// thread, and folds them into one word (XOR): the caller stores it only if it matches a value its data
// never produces, so the loads cannot be dropped.
__device__ __forceinline__ unsigned read_stream(const char* p, unsigned long long n16, unsigned long long first,
                                                unsigned long long stride) {
  unsigned acc = 0;
  for (unsigned long long i = first; i < n16; i += 4 * stride) {
    unsigned v[4][4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const unsigned long long k = i + u * stride;
      v[u][0] = v[u][1] = v[u][2] = v[u][3] = 0u;
      if (k < n16)
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v[u][0]), "=r"(v[u][1]), "=r"(v[u][2]), "=r"(v[u][3]) : "l"(p + 16 * k));
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u][0] ^ v[u][1] ^ v[u][2] ^ v[u][3];
  }
  return acc;
}
