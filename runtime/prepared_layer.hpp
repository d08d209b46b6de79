#pragma once
// A layer in the decode family's prepared layout, in device memory.
#include <cuda.h>

#include "moejit/csf_prepared.hpp"
#include "moejit/runtime.hpp"
#include "runtime/prepared_layout.hpp"

namespace moejit::detail {

struct PreparedLayerImpl final : PreparedLayer {
  LayerSpec layer_spec;
  // The context of the Runtime that prepared it (its device's primary context): the buffers below are
  // that device's memory, so only a Runtime of the same context may launch on them.
  CUcontext context = nullptr;
  DeviceBuffer fc1_w, fc1_s, fc1_gs, fc1_bias;  // fc1_bias: [E][mats][I] fp32
  DeviceBuffer fc2_w, fc2_s, fc2_gs, fc2_bias;  // fc2_bias: [E][H] fp32
  // fc1_gs / fc2_gs: the weights' global scales ([E][mats], [E]; NVFP4 only), and in a4 layers (either
  // format, ones in place of MXFP4's weight scales) the activations' global scales after them: FC1's plane
  // [E][mats] + a1_gs [E] + a2_gs [E], FC2's [E] + a2_gs [E] (templates/act_quant.cuh).
  // Prepared CSF planes (include/moejit/csf_prepared.hpp) the kernels read instead of fc1_s / fc2_s where
  // fc1_csf / fc2_csf (keys with csf_scales): the decode family's, and the batch and prefill families' too
  // where batched_csf (ScaleReads::compact, csf). An a16 layer whose every family reads CSF holds no
  // fc1_s / fc2_s (null); other layers keep them for the kernels that read them (runtime/runtime.cpp prepare).
  struct CsfBuffers {
    DeviceBuffer offsets, base, exc, head;
    int head_words = 0;  // PreparedCsfPlane::head_words
    size_t bytes() const { return offsets.size() + base.size() + exc.size() + head.size(); }
  };
  CsfBuffers fc1_csf_s, fc2_csf_s;
  bool fc1_csf = false, fc2_csf = false;
  bool batched_csf = false;
  // a8/a4: x is quantized once per token, not once per routed pair: a8 always (its blocks have no global
  // scale), a4 when every expert's a1_gs is the same value (prepare; then every pair of a token quantizes
  // the token's row to the same bits).
  bool x_quant_per_token = false;
  const LayerSpec& spec() const override { return layer_spec; }
  size_t device_bytes() const override {
    return fc1_w.size() + fc1_s.size() + fc1_gs.size() + fc1_bias.size() + fc2_w.size() + fc2_s.size() + fc2_gs.size() +
           fc2_bias.size() + fc1_csf_s.bytes() + fc2_csf_s.bytes();
  }
  int csf_scales() const override { return (fc1_csf ? 1 : 0) | (fc2_csf ? 2 : 0); }
  int batched_csf_scales() const override { return batched_csf ? csf_scales() : 0; }
  PreparedScaleBytes scale_bytes() const override {
    return {fc1_prepared_geometry(layer_spec).plain_bytes(), fc1_csf ? fc1_csf_s.bytes() : 0,
            fc2_prepared_geometry(layer_spec).plain_bytes(), fc2_csf ? fc2_csf_s.bytes() : 0};
  }
};

}  // namespace moejit::detail
