// Parameters of the decode family's kernels (moe_decode_*.cuh).
#pragma once
#include "kernel_params.cuh"
#include "routing_params.cuh"

// The CSF planes' base bytes and exception lists come last, and a kernel that reads its plane plainly is
// compiled without them (the host always has them and passes its whole struct; a launch copies the bytes
// the kernel declares): the two extra pointers changed ptxas's register allocation, and spills, of the
// inline-routed FC1 kernels at their register caps. The cooperative kernel nests both structs, so its
// keys always carry the fields (MOEJIT_CSF_FIELDS, generator/families/common.cpp).
#if !defined(__CUDACC__)
#define MOEJIT_DECODE_CSF_FIELDS(plane) 1
#else
#define MOEJIT_DECODE_CSF_FIELDS(plane) (plane || MOEJIT_CSF_FIELDS)
#endif
// The arguments slab_operands takes for a CSF plane where the fields exist.
#if defined(__CUDACC__) && (MOEJIT_CSF_FC1 || MOEJIT_CSF_FIELDS)
#define MOEJIT_FC1_CSF_PLANES(p) , (p).s_base, (p).s_exc, (p).s_head, (p).s_head_words
#else
#define MOEJIT_FC1_CSF_PLANES(p)
#endif
#if defined(__CUDACC__) && (MOEJIT_CSF_FC2 || MOEJIT_CSF_FIELDS)
#define MOEJIT_FC2_CSF_PLANES(p) , (p).s_base, (p).s_exc, (p).s_head, (p).s_head_words
#else
#define MOEJIT_FC2_CSF_PLANES(p)
#endif

MOEJIT_PARAMS_BEGIN

struct DecodeFc1Params {
  MOEJIT_PTR(const u32x4) w;     // prepared FC1 weights [E][I/16][chunks][mats][32 lanes] x 16 B
  MOEJIT_PTR(const u8) s;        // prepared FC1 scales  [E][I/16][chunks][mats][8 groups][2 rows][blocks], or
                                 // with CSF scales (MOEJIT_CSF_FC1) their offsets (docs/CSF.md §8)
  MOEJIT_PTR(const float) gscale;  // NVFP4: [E][2] (gate, up) for two matrices, [E] for one; MXFP4: null
  MOEJIT_PTR(const float) bias;  // [E][mats][I] or null
  MOEJIT_PTR(const u16) x;       // [M][H] bf16
  MOEJIT_PTR(u16) act;           // [M*K][I] bf16 times 2^64 (FC2's B operand as is), row q
  MOEJIT_PTR(i32) counters;      // FC2 completion counters, zeroed here when routing is inline
  i32 num_counters;
  float alpha, beta, limit;
  RoutingArgs route;
#if MOEJIT_DECODE_CSF_FIELDS(MOEJIT_CSF_FC1)
  MOEJIT_PTR(const u8) s_base;   // CSF scales: base bytes [E][I/16][mats][8 groups][2 rows]; else null
  MOEJIT_PTR(const u32) s_exc;   // CSF scales: list starts (one list per slab, or per two
                                 // slabs of relu2's one matrix) + 1, then the records; else null
  MOEJIT_PTR(const u32) s_head;  // CSF scales: each list's first words [lists][s_head_words]; else null
  i32 s_head_words;              // CSF scales: 32, 64 or 128 (include/moejit/csf_prepared.hpp)
#endif
};

struct DecodeFc2Params {
  MOEJIT_PTR(const u32x4) w;     // prepared FC2 weights [E][H/16][chunks][32 lanes] x 16 B
  MOEJIT_PTR(const u8) s;        // prepared FC2 scales, or their CSF offsets (MOEJIT_CSF_FC2)
  MOEJIT_PTR(const float) gscale;  // [E] (NVFP4) or null
  MOEJIT_PTR(const float) bias;  // [E][H] or null
  MOEJIT_PTR(const u16) act;     // [M*K][I] bf16 times 2^64 from FC1, row q
  MOEJIT_PTR(const float) topk_weights;  // [M*K]
  MOEJIT_PTR(float) partial;     // [M*K][H] fp32, row q
  MOEJIT_PTR(i32) counters;      // [H/16], zero on entry, zero again on exit
  MOEJIT_PTR(u16) out;           // [M][H] bf16
  i32 tokens;
  RoutingArgs route;
#if MOEJIT_DECODE_CSF_FIELDS(MOEJIT_CSF_FC2)
  MOEJIT_PTR(const u8) s_base;   // CSF scales: base bytes [E][H/16][8 groups][2 rows]; else null
  MOEJIT_PTR(const u32) s_exc;   // CSF scales: list starts [E*ceil(H/32) + 1], then the records; else null
  MOEJIT_PTR(const u32) s_head;  // CSF scales: each list's first words [E*ceil(H/32)][s_head_words]; else null
  i32 s_head_words;              // CSF scales: 32, 64 or 128 (include/moejit/csf_prepared.hpp)
#endif
};

// Both phases in one cooperative launch (moe_decode_fused.cuh).
struct DecodeFusedParams {
  DecodeFc1Params fc1;
  DecodeFc2Params fc2;
  MOEJIT_PTR(u32) barrier;  // [2]: arrivals (0 on entry, 0 again on exit), generation
  i32 slots;                // active-slot capacity (the two-launch grids' y extent)
};

MOEJIT_PARAMS_END
