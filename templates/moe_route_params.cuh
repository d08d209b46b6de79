// Parameters of the route kernel (moe_route.cuh).
#pragma once
#include "kernel_params.cuh"

MOEJIT_PARAMS_BEGIN

struct RouteParams {
  MOEJIT_PTR(const i32) topk_ids;  // [M*K]
  i32 pairs;                       // M*K
  i32 expert_begin;
  MOEJIT_PTR(i32) num_active;
  MOEJIT_PTR(i32) active_expert;
  MOEJIT_PTR(i32) active_offset;
  MOEJIT_PTR(i32) pair_index;
  MOEJIT_PTR(i32) counters;        // FC2 completion counters to zero
  i32 num_counters;
};

MOEJIT_PARAMS_END
