#pragma once
// A layer in the decode family's prepared layout, in device memory.
#include <cuda.h>

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
  DeviceBuffer a1_gs, a2_gs;  // a4: [E] global input scales of x and of the intermediate (else empty)
  const LayerSpec& spec() const override { return layer_spec; }
  size_t device_bytes() const override {
    return fc1_w.size() + fc1_s.size() + fc1_gs.size() + fc1_bias.size() + fc2_w.size() + fc2_s.size() + fc2_gs.size() +
           fc2_bias.size();
  }
};

}  // namespace moejit::detail
