#pragma once
// A layer in the decode family's prepared layout, in device memory.
#include "moejit/runtime.hpp"
#include "runtime/prepared_layout.hpp"

namespace moejit::detail {

struct PreparedLayerImpl final : PreparedLayer {
  LayerSpec layer_spec;
  DeviceBuffer fc1_w, fc1_s, fc1_gs, fc1_bias;  // fc1_bias: [E][mats][I] fp32
  DeviceBuffer fc2_w, fc2_s, fc2_gs, fc2_bias;  // fc2_bias: [E][H] fp32
  const LayerSpec& spec() const override { return layer_spec; }
  size_t device_bytes() const override {
    return fc1_w.size() + fc1_s.size() + fc1_gs.size() + fc1_bias.size() + fc2_w.size() + fc2_s.size() + fc2_gs.size() +
           fc2_bias.size();
  }
};

}  // namespace moejit::detail
