#pragma once
// The kernels' parameter structs as the host builds them: the very definitions the templates compile
// (templates/kernel_params.cuh), every pointer a 64-bit device address. Kernels take one struct by value.
#include "templates/moe_act_quant_params.cuh"
#include "templates/moe_batch_params.cuh"
#include "templates/moe_prefill_params.cuh"
#include "templates/moe_decode_params.cuh"
#include "templates/moe_route_params.cuh"
#include "templates/prepare_repack_params.cuh"
