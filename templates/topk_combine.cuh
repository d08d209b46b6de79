// The top-k combine of the families whose FC2 writes one fp32 row per pair (batch, prefill).
// Params: tokens, route, partial, out and (kWeigh) topk_weights.
#pragma once
#include "expert_work.cuh"

// out[m, :] = sum over k = 0..K-1 of w[m*K + k] partial[m*K + k, :] (pairs routed to a local expert only), in
// bf16, w the top-k weight where kWeigh (the partial row is unweighted) and 1 where FC2 has weighed it.
// Four outputs per thread, fp32 sums in slot order; the product is rounded before the sum (no fused
// multiply-add), the bits an FC2 that stores the weighted row gives.
template <int kE, int kH, bool kWeigh, class Params>
__device__ void moe_topk_combine(const Params& p) {
  pdl_wait_primary();  // FC2's partial rows
  const int K = p.route.top_k;
  const size_t quads = (size_t)p.tokens * (kH / 4);
  for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < quads; idx += (size_t)gridDim.x * blockDim.x) {
    const int m = (int)(idx / (kH / 4)), h = (int)(idx % (kH / 4)) * 4;
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
    for (int k = 0; k < K; ++k) {
      const int q = m * K + k;
      if (!pair_is_local(p.route, q, kE)) continue;
      float v0, v1, v2, v3;
      asm volatile("ld.global.v4.f32 {%0,%1,%2,%3}, [%4];"
                   : "=f"(v0), "=f"(v1), "=f"(v2), "=f"(v3) : "l"(p.partial + (size_t)q * kH + h));
      if (kWeigh) {
        const float wq = p.topk_weights[q];
        v0 = __fmul_rn(wq, v0);
        v1 = __fmul_rn(wq, v1);
        v2 = __fmul_rn(wq, v2);
        v3 = __fmul_rn(wq, v3);
      }
      s0 += v0;
      s1 += v1;
      s2 += v2;
      s3 += v3;
    }
    u16* o = p.out + (size_t)m * kH + h;
    const u32 lo = (u32)f32_to_bf16(s0) | ((u32)f32_to_bf16(s1) << 16), hi = (u32)f32_to_bf16(s2) | ((u32)f32_to_bf16(s3) << 16);
    asm volatile("st.global.v2.u32 [%0], {%1,%2};" ::"l"(o), "r"(lo), "r"(hi) : "memory");
  }
}
