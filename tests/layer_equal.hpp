#pragma once
// Checks that two host layers are the same layer: every spec field and every tensor, byte for byte
// (layer files and checkpoints read back what was written).
#include "catch_compat.hpp"

#include "moejit/host_layer.hpp"

namespace moejit_test {

inline void check_same_layer(const moejit::HostLayer& a, const moejit::HostLayer& b) {
  CHECK(a.spec.format == b.spec.format);
  CHECK(a.spec.activation == b.spec.activation);
  CHECK(a.spec.gate_up_order == b.spec.gate_up_order);
  CHECK(a.spec.experts == b.spec.experts);
  CHECK(a.spec.hidden == b.spec.hidden);
  CHECK(a.spec.intermediate == b.spec.intermediate);
  CHECK(a.spec.top_k == b.spec.top_k);
  CHECK(a.spec.expert_begin == b.spec.expert_begin);
  CHECK(a.spec.has_bias == b.spec.has_bias);
  CHECK(a.spec.swiglu_alpha == b.spec.swiglu_alpha);
  CHECK(a.spec.swiglu_beta == b.spec.swiglu_beta);
  CHECK(a.spec.limit == b.spec.limit);
  CHECK(a.spec.precision == b.spec.precision);
  CHECK(a.a1_gs == b.a1_gs);
  CHECK(a.a2_gs == b.a2_gs);
  CHECK(a.w13 == b.w13);
  CHECK(a.w13_scale == b.w13_scale);
  CHECK(a.w13_global_scale == b.w13_global_scale);
  CHECK(a.w13_bias == b.w13_bias);
  CHECK(a.w2 == b.w2);
  CHECK(a.w2_scale == b.w2_scale);
  CHECK(a.w2_global_scale == b.w2_global_scale);
  CHECK(a.w2_bias == b.w2_bias);
}

}  // namespace moejit_test
