// The logical (checkpoint-shaped) layer of DESIGN §3: FC1 row order, size rules, exact dequantization.
//
// Everything that reads a layer (the CPU reference, `prepare`, the layer-file reader) goes through
// these rules, so a gate/up mix-up or a wrong scale plane size is caught in one place.
#include <cmath>
#include <string>

#include "moejit/codecs.hpp"
#include "moejit/error.hpp"
#include "moejit/host_layer.hpp"

namespace moejit {

int fc1_row_of(const LayerSpec& spec, bool up, int i) {
  const int I = spec.intermediate;
  if (i < 0 || i >= I)
    throw Error("fc1_row_of: index " + std::to_string(i) + " outside [0, intermediate = " + std::to_string(I) + ")");
  if (!is_gated(spec.activation)) {
    if (up) throw Error("fc1_row_of: relu2 has no up projection (its W1 holds I rows)");
    return i;
  }
  switch (spec.gate_up_order) {
    case GateUpOrder::gate_up: return up ? I + i : i;
    case GateUpOrder::up_gate: return up ? i : I + i;
    case GateUpOrder::interleaved: return 2 * i + (up ? 1 : 0);
  }
  throw Error("fc1_row_of: invalid gate_up_order");
}

Fc1RowRole fc1_row_role(const LayerSpec& spec, int row) {
  const int I = spec.intermediate;
  if (row < 0 || row >= spec.fc1_rows())
    throw Error("fc1_row_role: row " + std::to_string(row) + " outside [0, " + std::to_string(spec.fc1_rows()) + ")");
  if (!is_gated(spec.activation)) return {false, row};
  switch (spec.gate_up_order) {
    case GateUpOrder::gate_up: return row < I ? Fc1RowRole{false, row} : Fc1RowRole{true, row - I};
    case GateUpOrder::up_gate: return row < I ? Fc1RowRole{true, row} : Fc1RowRole{false, row - I};
    case GateUpOrder::interleaved: return {(row & 1) != 0, row / 2};
  }
  throw Error("fc1_row_role: invalid gate_up_order");
}

void HostLayer::validate() const {
  spec.validate();
  const int64_t E = spec.experts, H = spec.hidden, I = spec.intermediate, rows = spec.fc1_rows();
  const int64_t block = scale_block(spec.format);
  // relu2 layers keep W1 in the w13 fields, but files and messages call it w1 (DESIGN §3).
  const std::string fc1 = is_gated(spec.activation) ? "w13" : "w1";
  const std::string rows_name = is_gated(spec.activation) ? "2I" : "I";
  const std::string blk = std::to_string(block);

  auto expect = [](const std::string& name, size_t got, int64_t want, const std::string& shape) {
    if (got != static_cast<size_t>(want))
      throw Error("layer tensor " + name + " has " + std::to_string(got) + " elements, expected " + std::to_string(want) +
                  " (shape " + shape + ")");
  };
  // A scale plane is held plainly or in CSF (docs/CSF.md), never both.
  auto expect_scales = [&](const std::string& name, const std::vector<uint8_t>& plain,
                           const std::optional<CsfPlane>& csf, int64_t plane_rows, int64_t per_row,
                           const std::string& shape) {
    if (!csf) return expect(name, plain.size(), plane_rows * per_row, shape);
    if (!plain.empty()) throw Error("layer tensor " + name + " is held both plainly and in CSF (keep one form)");
    if (csf->format != spec.format || csf->rows != plane_rows || csf->scales_per_row != per_row)
      throw Error("layer tensor " + name + " (CSF) is a " + std::string(to_string(csf->format)) + " plane of " +
                  std::to_string(csf->rows) + " rows x " + std::to_string(csf->scales_per_row) + " scales, expected " +
                  std::string(to_string(spec.format)) + " " + std::to_string(plane_rows) + " x " +
                  std::to_string(per_row) + " (shape " + shape + ")");
    csf->validate(name);
  };
  expect(fc1, w13.size(), E * rows * H / 2, "[E, " + rows_name + ", H/2]");
  expect_scales(fc1 + "_scale", w13_scale, w13_scale_csf, E * rows, H / block, "[E, " + rows_name + ", H/" + blk + "]");
  expect("w2", w2.size(), E * H * I / 2, "[E, H, I/2]");
  expect_scales("w2_scale", w2_scale, w2_scale_csf, E * H, I / block, "[E, H, I/" + blk + "]");

  if (spec.format == ScaleFormat::nvfp4) {
    // [E, 2] (gate, up) only where there is an up projection to scale apart.
    if (!(is_gated(spec.activation) && w13_global_scale.size() == static_cast<size_t>(2 * E)))
      expect(fc1 + "_global_scale", w13_global_scale.size(), E,
             is_gated(spec.activation) ? "[E] or [E, 2] (nvfp4 needs per-expert global scales)"
                                       : "[E] (nvfp4 needs per-expert global scales)");
    expect("w2_global_scale", w2_global_scale.size(), E, "[E] (nvfp4 needs per-expert global scales)");
    // Only E (or 2E) values each: cheap to check, and a NaN here would poison a whole expert silently.
    for (size_t i = 0; i < w13_global_scale.size(); ++i)
      if (!std::isfinite(w13_global_scale[i]))
        throw Error("layer tensor " + fc1 + "_global_scale[" + std::to_string(i) + "] is not finite");
    for (int64_t e = 0; e < E; ++e) {
      if (!std::isfinite(w2_global_scale[e]))
        throw Error("layer tensor w2_global_scale[" + std::to_string(e) + "] is not finite");
    }
  } else {
    if (!w13_global_scale.empty() || !w2_global_scale.empty())
      throw Error("layer tensor " + std::string(w13_global_scale.empty() ? "w2" : fc1) +
                  "_global_scale given, but mxfp4 has no global scales");
  }

  for (const auto& [name, v] : {std::pair{"a1_gs", &a1_gs}, std::pair{"a2_gs", &a2_gs}}) {
    if (spec.precision != ActPrecision::a4) {
      if (!v->empty())
        throw Error(std::string("layer tensor ") + name + " given, but only the a4 precision has input scales (the layer is " +
                    std::string(to_string(spec.precision)) + ")");
      continue;
    }
    if (v->size() != 1 && v->size() != static_cast<size_t>(E))
      throw Error(std::string("layer tensor ") + name + " has " + std::to_string(v->size()) +
                  " values, expected [1] or [E] = [" + std::to_string(E) + "] (a4 needs the global input scales)");
    for (size_t i = 0; i < v->size(); ++i)
      if (!((*v)[i] > 0 && std::isfinite((*v)[i])))
        throw Error(std::string("layer tensor ") + name + "[" + std::to_string(i) + "] must be finite and > 0, got " +
                    std::to_string((*v)[i]));
  }

  if (spec.has_bias) {
    expect(fc1 + "_bias", w13_bias.size(), E * rows, "[E, " + rows_name + "] (spec.has_bias is true)");
    expect("w2_bias", w2_bias.size(), E * H, "[E, H] (spec.has_bias is true)");
  } else if (!w13_bias.empty() || !w2_bias.empty()) {
    throw Error("layer tensor " + std::string(w13_bias.empty() ? "w2" : fc1) +
                "_bias given, but spec.has_bias is false");
  }
}

namespace {

// Element (row, k) of a packed FP4 matrix [rows, cols] of one expert, with its block scale applied.
// e2m1 * e4m3 has at most 6 significant bits and e2m1 * e8m0 is a power-of-two multiple, so this
// product is exact in float; only NVFP4's extra global factor can round (once).
// `global` is the expert's NVFP4 global scale for this row (unused for MXFP4).
float dequant(const HostLayer& L, const std::vector<uint8_t>& q, const std::vector<uint8_t>& scales,
              const std::optional<CsfPlane>& csf, float global, int e, int row, int k, int rows, int cols,
              const char* name) {
  if (e < 0 || e >= L.spec.experts || row < 0 || row >= rows || k < 0 || k >= cols)
    throw Error(std::string(name) + ": element (expert " + std::to_string(e) + ", row " + std::to_string(row) + ", k " +
                std::to_string(k) + ") outside [" + std::to_string(L.spec.experts) + ", " + std::to_string(rows) + ", " +
                std::to_string(cols) + "]");
  const int block = scale_block(L.spec.format);
  const int64_t r = static_cast<int64_t>(e) * rows + row;
  const float v = e2m1_to_float(fp4_nibble(q.data() + r * (cols / 2), k));
  // A CSF plane decodes one scale in O(1) plus a search of the row's exception records.
  const uint8_t s = csf ? csf->scale(r, k / block) : scales[r * (cols / block) + k / block];
  if (L.spec.format == ScaleFormat::nvfp4) return v * e4m3_to_float(s) * global;
  return v * e8m0_to_float(s);
}

}  // namespace

bool HostLayer::has_split_fc1_global_scale() const {
  return spec.format == ScaleFormat::nvfp4 && is_gated(spec.activation) &&
         w13_global_scale.size() == 2 * static_cast<size_t>(spec.experts);
}

float HostLayer::fc1_global_scale(int e, int row) const {
  if (spec.format != ScaleFormat::nvfp4) return 1.0f;
  if (e < 0 || e >= spec.experts)
    throw Error("fc1_global_scale: expert " + std::to_string(e) + " outside [0, " + std::to_string(spec.experts) + ")");
  if (!has_split_fc1_global_scale()) return w13_global_scale.at(e);
  return w13_global_scale.at(2 * static_cast<size_t>(e) + (fc1_row_role(spec, row).up ? 1 : 0));
}

float HostLayer::fc1_weight(int e, int row, int k) const {
  const float g = (e >= 0 && e < spec.experts && row >= 0 && row < spec.fc1_rows()) ? fc1_global_scale(e, row) : 0.0f;
  return dequant(*this, w13, w13_scale, w13_scale_csf, g, e, row, k, spec.fc1_rows(), spec.hidden, "fc1_weight");
}

float HostLayer::fc2_weight(int e, int row, int k) const {
  const float g = (spec.format == ScaleFormat::nvfp4 && e >= 0 && e < spec.experts) ? w2_global_scale[e] : 1.0f;
  return dequant(*this, w2, w2_scale, w2_scale_csf, g, e, row, k, spec.hidden, spec.intermediate, "fc2_weight");
}

HostLayer allocate_layer(const LayerSpec& spec) {
  const int64_t E = spec.experts, H = spec.hidden, I = spec.intermediate, rows = spec.fc1_rows();
  const int block = scale_block(spec.format);
  HostLayer layer;
  layer.spec = spec;
  layer.w13.assign(E * rows * H / 2, 0);
  layer.w13_scale.assign(E * rows * H / block, 0);
  layer.w2.assign(E * H * I / 2, 0);
  layer.w2_scale.assign(E * H * I / block, 0);
  if (spec.format == ScaleFormat::nvfp4) {
    layer.w13_global_scale.assign(E, 0.0f);
    layer.w2_global_scale.assign(E, 0.0f);
  }
  return layer;
}

std::vector<float> kernel_fc1_global_scale(const HostLayer& layer) {
  if (layer.spec.format != ScaleFormat::nvfp4 || !is_gated(layer.spec.activation) || layer.has_split_fc1_global_scale())
    return layer.w13_global_scale;
  std::vector<float> pairs(2 * layer.w13_global_scale.size());
  for (size_t e = 0; e < layer.w13_global_scale.size(); ++e) pairs[2 * e] = pairs[2 * e + 1] = layer.w13_global_scale[e];
  return pairs;
}

}  // namespace moejit
