#pragma once
// Layers whose scale planes are held in the compressed scale format (docs/CSF.md): compress a layer's
// planes, expand them back, and report bytes plain vs CSF.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "moejit/csf.hpp"
#include "moejit/host_layer.hpp"

namespace moejit {

enum class CsfPolicy {
  when_smaller,  // a plane becomes CSF only when that takes fewer bytes (incompressible scales stay plain)
  always,        // every plane becomes CSF, even when larger (tests of the CSF paths)
};

// One scale plane of a layer, plain vs CSF.
struct ScalePlaneReport {
  std::string name;            // w13_scale, w1_scale or w2_scale
  bool stored_as_csf = false;  // how the layer holds it now
  size_t plain_bytes = 0;      // rows * C
  size_t csf_bytes = 0;        // its CSF encoding (also when it was kept plain because that is smaller)
  CsfPlaneStats stats;         // of the CSF encoding
  size_t stored_bytes() const { return stored_as_csf ? csf_bytes : plain_bytes; }
};

struct LayerStorageReport {
  std::vector<ScalePlaneReport> planes;  // FC1's, then FC2's
  size_t other_bytes = 0;                // FP4 codes, global scales and biases (the same either way)
  size_t plain_scale_bytes() const;
  size_t stored_scale_bytes() const;
  size_t plain_total() const { return other_bytes + plain_scale_bytes(); }
  size_t stored_total() const { return other_bytes + stored_scale_bytes(); }
};

// Encodes each plain scale plane of `layer` per `policy` and returns what each plane takes both ways.
// Planes already in CSF stay as they are. The layer computes exactly the same afterwards.
LayerStorageReport compress_scales(HostLayer& layer, CsfPolicy policy = CsfPolicy::when_smaller);
// Replaces every CSF plane by its plain bytes (exact).
void expand_scales(HostLayer& layer);
bool has_csf_scales(const HostLayer& layer);

// The plain bytes of one plane: `plain` itself, or `csf` decoded into `storage` (the host-side
// fallback that `prepare` and the CPU reference use until kernels read CSF planes directly).
const std::vector<uint8_t>& plain_scale_plane(const std::vector<uint8_t>& plain, const std::optional<CsfPlane>& csf,
                                              std::vector<uint8_t>& storage);

}  // namespace moejit
