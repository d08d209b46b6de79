// Parameters of the decode family's kernels (moe_decode_*.cuh).
#pragma once
#include "kernel_params.cuh"
#include "routing_params.cuh"

MOEJIT_PARAMS_BEGIN

struct DecodeFc1Params {
  MOEJIT_PTR(const u32x4) w;     // prepared FC1 weights [E][I/16][chunks][mats][32 lanes] x 16 B
  MOEJIT_PTR(const u8) s;        // prepared FC1 scales  [E][I/16][chunks][mats][8 groups][2 rows][blocks]
  MOEJIT_PTR(const float) gscale;  // NVFP4: [E][2] (gate, up) for two matrices, [E] for one; MXFP4: null
  MOEJIT_PTR(const float) bias;  // [E][mats][I] or null
  MOEJIT_PTR(const u16) x;       // [M][H] bf16
  MOEJIT_PTR(u16) act;           // [M*K][I] bf16 times 2^64 (FC2's B operand as is), row q
  MOEJIT_PTR(i32) counters;      // FC2 completion counters, zeroed here when routing is inline
  i32 num_counters;
  float alpha, beta, limit;
  RoutingArgs route;
};

struct DecodeFc2Params {
  MOEJIT_PTR(const u32x4) w;     // prepared FC2 weights [E][H/16][chunks][32 lanes] x 16 B
  MOEJIT_PTR(const u8) s;        // prepared FC2 scales
  MOEJIT_PTR(const float) gscale;  // [E] (NVFP4) or null
  MOEJIT_PTR(const float) bias;  // [E][H] or null
  MOEJIT_PTR(const u16) act;     // [M*K][I] bf16 times 2^64 from FC1, row q
  MOEJIT_PTR(const float) topk_weights;  // [M*K]
  MOEJIT_PTR(float) partial;     // [M*K][H] fp32, row q
  MOEJIT_PTR(i32) counters;      // [H/16], zero on entry, zero again on exit
  MOEJIT_PTR(u16) out;           // [M][H] bf16
  i32 tokens;
  RoutingArgs route;
};

// Both phases in one cooperative launch (moe_decode_fused.cuh).
struct DecodeFusedParams {
  DecodeFc1Params fc1;
  DecodeFc2Params fc2;
  MOEJIT_PTR(u32) barrier;  // [2]: arrivals (0 on entry, 0 again on exit), generation
  i32 slots;                // active-slot capacity (the two-launch grids' y extent)
};

MOEJIT_PARAMS_END
