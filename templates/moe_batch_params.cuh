// Parameters of the batch family's kernels (moe_batch.cuh, moe_batch_wgmma.cuh).
#pragma once
#include "kernel_params.cuh"
#include "routing_params.cuh"

MOEJIT_PARAMS_BEGIN

struct BatchFc1Params {
  MOEJIT_PTR(const u32x4) w;     // prepared FC1 weights (the decode family's layout, docs/WEIGHT_LAYOUT.md)
  MOEJIT_PTR(const u8) s;        // prepared FC1 scales
  MOEJIT_PTR(const float) gscale;  // NVFP4: [E][2] (gate, up) for two matrices, [E] for one; MXFP4: null
  MOEJIT_PTR(const float) bias;  // [E][mats][I] or null
  MOEJIT_PTR(const u16) x;       // [M][H] bf16
  MOEJIT_PTR(u16) act;           // [M*K][I] bf16 times 2^64, row q (in MMA column order on warpgroup MMA)
  float alpha, beta, limit;
  RoutingArgs route;             // the route kernel's lists
#if MOEJIT_CSF_PLANE_FIELDS(MOEJIT_CSF_FC1)
  MOEJIT_PTR(const u8) s_base;   // CSF scales (s their offsets): base bytes [E][I/16][mats][8 groups][2 rows]
  MOEJIT_PTR(const u32) s_exc;   // CSF scales: list starts, then the records (csf_scales.cuh)
#endif
};

struct BatchFc2Params {
  MOEJIT_PTR(const u32x4) w;     // prepared FC2 weights
  MOEJIT_PTR(const u8) s;        // prepared FC2 scales
  MOEJIT_PTR(const float) gscale;  // [E] (NVFP4) or null
  MOEJIT_PTR(const float) bias;  // [E][H] or null
  MOEJIT_PTR(const u16) act;     // FC1's activations, row q
  MOEJIT_PTR(const float) topk_weights;  // [M*K]
  MOEJIT_PTR(float) partial;     // [M*K][H] fp32, row q, summed by the combine
  MOEJIT_PTR(u16) out;           // [M][H] bf16 (the combine)
  i32 tokens;
  RoutingArgs route;
#if MOEJIT_CSF_PLANE_FIELDS(MOEJIT_CSF_FC2)
  MOEJIT_PTR(const u8) s_base;   // CSF scales (s their offsets): base bytes [E][H/16][8 groups][2 rows]
  MOEJIT_PTR(const u32) s_exc;   // CSF scales: list starts, then the records (csf_scales.cuh)
#endif
};

MOEJIT_PARAMS_END
