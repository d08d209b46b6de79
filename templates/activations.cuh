// The activations of DESIGN §1 in fp32 on the device.
#pragma once
#include "device_core.cuh"

enum ActKind { kActSilu = 0, kActGeluTanh = 1, kActRelu2 = 2, kActSwigluOai = 3 };

template <int kAct, bool kLimit>
MOEJIT_DEVICE float apply_activation(float g, float u, float alpha, float beta, float limit) {
  if (kAct == kActRelu2) {
    float r = g > 0.f ? g : 0.f;
    return r * r;
  }
  if (kLimit && (kAct == kActSilu || kAct == kActSwigluOai)) {
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
  }
  // The sigmoids in fast intrinsics: a few fp32 ulps, far below the bf16 rounding of the result, where the IEEE
  // expf and division cost about 25 instructions and a slow-path call per result in the FC1 epilogues; where
  // 1 + e^-g overflows, __fdividef gives 0, silu's limit (docs/DECISIONS.md, "Precision").
  if (kAct == kActSilu) return __fdividef(g, 1.f + __expf(-g)) * u;
  if (kAct == kActSwigluOai) return __fdividef(g, 1.f + __expf(-alpha * g)) * (u + beta);
  // gelu_tanh
  float inner = 0.7978845608f * (g + 0.044715f * g * g * g);
  return 0.5f * g * (1.f + tanhf(inner)) * u;
}
