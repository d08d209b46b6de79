// A layer's scale planes in and out of the compressed scale format (docs/CSF.md), and the byte
// report `moejit compress --report` prints.
#include "moejit/csf_layer.hpp"

#include <utility>

#include "moejit/error.hpp"

namespace moejit {
namespace {

// The two planes of a layer with their names (relu2 layers call FC1's plane w1_scale, DESIGN §3).
struct PlaneRef {
  std::string name;
  std::vector<uint8_t>* plain;
  std::optional<CsfPlane>* csf;
  int64_t rows;
  int64_t per_row;
};

std::vector<PlaneRef> planes_of(HostLayer& L) {
  const LayerSpec& s = L.spec;
  const int64_t block = scale_block(s.format);
  const std::string fc1 = is_gated(s.activation) ? "w13_scale" : "w1_scale";
  return {{fc1, &L.w13_scale, &L.w13_scale_csf, int64_t{s.experts} * s.fc1_rows(), s.hidden / block},
          {"w2_scale", &L.w2_scale, &L.w2_scale_csf, int64_t{s.experts} * s.hidden, s.intermediate / block}};
}

size_t other_bytes(const HostLayer& L) {
  return L.w13.size() + L.w2.size() +
         (L.w13_global_scale.size() + L.w2_global_scale.size() + L.w13_bias.size() + L.w2_bias.size()) * sizeof(float);
}

ScalePlaneReport report_of(const std::string& name, const CsfPlane& encoded, bool stored_as_csf) {
  ScalePlaneReport r;
  r.name = name;
  r.stored_as_csf = stored_as_csf;
  r.stats = csf_stats(encoded);
  r.plain_bytes = r.stats.plain_bytes;
  r.csf_bytes = r.stats.csf_bytes;
  return r;
}

}  // namespace

size_t LayerStorageReport::plain_scale_bytes() const {
  size_t n = 0;
  for (const auto& p : planes) n += p.plain_bytes;
  return n;
}

size_t LayerStorageReport::stored_scale_bytes() const {
  size_t n = 0;
  for (const auto& p : planes) n += p.stored_bytes();
  return n;
}

LayerStorageReport compress_scales(HostLayer& layer, CsfPolicy policy) {
  layer.validate();
  LayerStorageReport report;
  report.other_bytes = other_bytes(layer);
  for (const auto& p : planes_of(layer)) {
    if (*p.csf) {
      report.planes.push_back(report_of(p.name, **p.csf, true));
      continue;
    }
    CsfPlane encoded = csf_encode(layer.spec.format, p.plain->data(), p.rows, p.per_row);
    const bool keep = policy == CsfPolicy::always || encoded.bytes() < p.plain->size();
    report.planes.push_back(report_of(p.name, encoded, keep));
    if (keep) {
      *p.csf = std::move(encoded);
      std::vector<uint8_t>().swap(*p.plain);
    }
  }
  return report;
}

void expand_scales(HostLayer& layer) {
  for (const auto& p : planes_of(layer)) {
    if (!*p.csf) continue;
    *p.plain = csf_decode(**p.csf);
    p.csf->reset();
  }
}

bool has_csf_scales(const HostLayer& layer) { return layer.w13_scale_csf.has_value() || layer.w2_scale_csf.has_value(); }

const std::vector<uint8_t>& plain_scale_plane(const std::vector<uint8_t>& plain, const std::optional<CsfPlane>& csf,
                                              std::vector<uint8_t>& storage) {
  if (!csf) return plain;
  if (!plain.empty()) throw Error("plain_scale_plane: the plane is held both plainly and in CSF");
  storage = csf_decode(*csf);
  return storage;
}

}  // namespace moejit
