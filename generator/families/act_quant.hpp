#pragma once
// The act_quant pre-pass (templates/moe_act_quant.cuh): the a8/a4 layer input quantized once per routed
// pair before FC1, planned first in the decode and batch families' a8/a4 plans (the prefill family's
// gather quantizes as it gathers).
#include "moejit/generator.hpp"
#include "moejit/key.hpp"
#include "moejit/types.hpp"

namespace moejit::detail {

// The pre-pass key of an a8/a4 layer on `arch` (normalized).
KernelKey act_quant_key(const LayerSpec& spec, Arch arch);
// Its CTAs for `pairs` routed pairs (256 threads, one k16 block each; never 0).
unsigned act_quant_ctas(const KernelKey& key, long long pairs);

}  // namespace moejit::detail
