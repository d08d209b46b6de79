// Parameters of the act_quant pre-pass (moe_act_quant.cuh).
#pragma once
#include "kernel_params.cuh"
#include "routing_params.cuh"

MOEJIT_PARAMS_BEGIN

struct ActQuantParams {
  MOEJIT_PTR(const u16) x;         // [M][H] bf16, the layer input
  MOEJIT_PTR(u16) xq;              // [M][H] bf16 per token, [M*K][H] per pair (route.x_per_token): quantized rows
  MOEJIT_PTR(const float) gscale;  // FC1's fp32 scale plane (a4: a1_gs after the weights' global scales)
  RoutingArgs route;               // topk_ids, pairs, expert_begin, top_k, x_per_token (the lists are not read)
};

MOEJIT_PARAMS_END
