// Parameters of the prefill family's kernels (moe_prefill.cuh).
#pragma once
#include "kernel_params.cuh"
#include "routing_params.cuh"

MOEJIT_PARAMS_BEGIN

// The gather kernel and FC1 (one module: FC1's entry and its _gather entry take the same struct).
struct PrefillFc1Params {
  MOEJIT_PTR(const u32x4) w;       // prepared FC1 weights (docs/WEIGHT_LAYOUT.md)
  MOEJIT_PTR(const u8) s;          // prepared FC1 scales
  MOEJIT_PTR(const float) gscale;  // NVFP4: [E][2] (gate, up) for two matrices, [E] for one; MXFP4: null
  MOEJIT_PTR(const float) bias;    // [E][mats][I] or null
  MOEJIT_PTR(const u16) x;         // [M][H] bf16
  MOEJIT_PTR(u16) xb;              // the gather's output: x in token-tile blocks (moe_prefill.cuh)
  MOEJIT_PTR(u16) act;             // FC1's output in token-tile blocks, bf16 times 2^64
  MOEJIT_PTR(i32) tiles;           // the tile table (moe_prefill.cuh kTileTableHeader): header, then 3 words per tile
  MOEJIT_PTR(i32) row_pair;        // per block row: its pair q, or -1 (rows past a tile's pairs)
  float alpha, beta, limit;
  RoutingArgs route;               // the route kernel's lists
  // The weight and scale planes as [slabs][chunks][run] tensors, so the producer moves a row group's chunk
  // in one tensor copy each (runtime/families/prefill.cpp; unused by keys with CSF scales or cluster pairs).
  TensorMapBytes w_map, s_map;
#if MOEJIT_CSF_PLANE_FIELDS(MOEJIT_CSF_FC1)
  MOEJIT_PTR(const u8) s_base;   // CSF scales (s their offsets): base bytes [E][I/16][mats][8 groups][2 rows]
  MOEJIT_PTR(const u32) s_exc;   // CSF scales: list starts, then the records (csf_scales.cuh)
#endif
};

struct PrefillFc2Params {
  MOEJIT_PTR(const u32x4) w;       // prepared FC2 weights
  MOEJIT_PTR(const u8) s;          // prepared FC2 scales
  MOEJIT_PTR(const float) gscale;  // [E] (NVFP4) or null
  MOEJIT_PTR(const float) bias;    // [E][H] or null
  MOEJIT_PTR(const u16) act;       // FC1's output in token-tile blocks
  MOEJIT_PTR(i32) tiles;           // the gather's tile table (FC2 takes its units from the header's counter)
  MOEJIT_PTR(const i32) row_pair;  // the gather's row table
  MOEJIT_PTR(const float) topk_weights;  // [M*K], weighing the partial rows in the combine
  MOEJIT_PTR(float) partial;       // [M*K][H] fp32, row q, summed by the combine
  MOEJIT_PTR(u16) out;             // [M][H] bf16 (the combine)
  i32 tokens;
  RoutingArgs route;
  TensorMapBytes w_map, s_map;  // as PrefillFc1Params's
#if MOEJIT_CSF_PLANE_FIELDS(MOEJIT_CSF_FC2)
  MOEJIT_PTR(const u8) s_base;   // CSF scales (s their offsets): base bytes [E][H/16][8 groups][2 rows]
  MOEJIT_PTR(const u32) s_exc;   // CSF scales: list starts, then the records (csf_scales.cuh)
#endif
};

MOEJIT_PARAMS_END
