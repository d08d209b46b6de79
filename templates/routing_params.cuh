// Routing parameters shared by the kernel families that read routed pairs (decode, batch): the route
// kernel's lists in the workspace, or the raw top-k ids for routing inside a CTA.
#pragma once
#include "kernel_params.cuh"

MOEJIT_PARAMS_BEGIN

struct RoutingArgs {
  MOEJIT_PTR(const i32) num_active;     // route kernel outputs (unused with inline routing)
  MOEJIT_PTR(const i32) active_expert;
  MOEJIT_PTR(const i32) active_offset;
  MOEJIT_PTR(const i32) pair_index;
  MOEJIT_PTR(const i32) topk_ids;       // [M*K] global expert ids
  i32 pairs;                            // M*K
  i32 expert_begin;
  i32 top_k;
  // a8/a4: 1 when FC1's input x holds the layer input already quantized, one row per token (the act_quant
  // pre-pass ran per token: a8, or a4 with one a1_gs for every expert); 0 when the decode and batch
  // families' x holds one quantized row per pair and the prefill gather quantizes per pair. Unused by a16.
  i32 x_per_token;
};

MOEJIT_PARAMS_END
