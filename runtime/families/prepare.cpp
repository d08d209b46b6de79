// prepare: logical weights in device memory -> PreparedLayerImpl, repacked on the GPU by the
// `prepare` kernels (templates/prepare_repack.cuh).
#include "runtime/families/families.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include "moejit/error.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/kernel_params.hpp"
#include "runtime/launch.hpp"

namespace moejit::detail {

namespace {
int order_code(GateUpOrder o) {
  switch (o) {
    case GateUpOrder::gate_up: return 0;
    case GateUpOrder::up_gate: return 1;
    case GateUpOrder::interleaved: return 2;
  }
  return 0;
}

void repack_plane(ModuleRegistry& modules, Arch arch, CUstream stream, const PlaneGeometry& geo, DevicePtr src,
                  DevicePtr src_scale, int logical_rows, int order, DeviceBuffer& w, DeviceBuffer& s) {
  w = DeviceBuffer(geo.weight_bytes());
  s = DeviceBuffer(geo.scale_bytes());
  KernelKey key;
  key.kind = KernelKind::prepare;
  key.arch = arch;
  key = key.normalized();
  RepackParams p{};
  p.src = src;
  p.src_scale = src_scale;
  p.dst = w.ptr();
  p.dst_scale = s.ptr();
  p.experts = geo.experts;
  p.slabs = geo.slabs;
  p.mats = geo.mats;
  p.k = geo.k;
  p.chunks = geo.chunks;
  p.logical_rows = logical_rows;
  p.rows_per_mat = geo.slabs * 16;
  p.block = geo.block;
  p.order = order;
  const unsigned block = static_cast<unsigned>(key.warps * 32);
  auto grid_for = [&](size_t n) { return static_cast<unsigned>((n + block - 1) / block); };
  launch(modules.function(key, stream, "_weights"), LaunchShape{grid_for(geo.runs()), 1, 1, block, 0}, stream, &p);
  launch(modules.function(key, stream, "_scales"), LaunchShape{grid_for(geo.scale_bytes()), 1, 1, block, 0}, stream, &p);
}

DeviceBuffer copy_device(DevicePtr src, size_t bytes, CUstream stream) {
  DeviceBuffer b(bytes);
  check(driver().cuMemcpyDtoDAsync(b.ptr(), src, bytes, stream), "cuMemcpyDtoDAsync");
  return b;
}
}  // namespace

std::shared_ptr<PreparedLayerImpl> prepare_layer(ModuleRegistry& modules, Arch arch, const DeviceLayerView& v,
                                                 CUstream stream) {
  const LayerSpec& spec = v.spec;
  spec.validate();
  const bool nv = spec.format == ScaleFormat::nvfp4;
  auto require = [&](DevicePtr p, const char* name) {
    if (!p) throw Error(fmt::format("prepare: tensor {} is required for this layer but its pointer is null", name));
  };
  require(v.w13, "w13");
  require(v.w13_scale, "w13_scale");
  require(v.w2, "w2");
  require(v.w2_scale, "w2_scale");
  if (nv) {
    require(v.w13_global_scale, "w13_global_scale");
    require(v.w2_global_scale, "w2_global_scale");
  }
  if (spec.has_bias) {
    require(v.w13_bias, "w13_bias");
    require(v.w2_bias, "w2_bias");
  }
  // A tensor the spec does not use would be dropped, and the layer would compute something other than
  // what the caller's checkpoint holds: refuse it (DESIGN §3), as HostLayer::validate does for host layers.
  // relu2 layers keep W1 in the w13 fields, but messages call it w1.
  const char* fc1 = is_gated(spec.activation) ? "w13" : "w1";
  auto refuse = [&](DevicePtr p, std::string_view tensor, const char* why) {
    if (p) throw Error(fmt::format("prepare: tensor {} is given (its pointer is not null), but {}", tensor, why));
  };
  if (!nv) {
    refuse(v.w13_global_scale, fmt::format("{}_global_scale", fc1), "mxfp4 has no global scales");
    refuse(v.w2_global_scale, "w2_global_scale", "mxfp4 has no global scales");
  }
  if (v.w13_global_scale_gate_up && !is_gated(spec.activation))
    throw Error(fmt::format("prepare: w13_global_scale_gate_up is set, but a {} layer has one FC1 matrix: its global "
                            "scale is [E]",
                            to_string(spec.activation)));
  if (!spec.has_bias) {
    refuse(v.w13_bias, fmt::format("{}_bias", fc1), "spec.has_bias is false");
    refuse(v.w2_bias, "w2_bias", "spec.has_bias is false");
  }
  auto layer = std::make_shared<PreparedLayerImpl>();
  layer->layer_spec = spec;
  layer->x_quant_per_token = spec.precision == ActPrecision::a8;  // a4: below, from its a1_gs
  const PlaneGeometry g1 = fc1_geometry(spec), g2 = fc2_geometry(spec);
  const int rows1 = spec.fc1_rows();
  const int order = is_gated(spec.activation) ? order_code(spec.gate_up_order) : 0;
  repack_plane(modules, arch, stream, g1, v.w13, v.w13_scale, rows1, order, layer->fc1_w, layer->fc1_s);
  repack_plane(modules, arch, stream, g2, v.w2, v.w2_scale, spec.hidden, 0, layer->fc2_w, layer->fc2_s);
  const size_t E = spec.experts;
  if (nv) {
    // The FC1 kernels of a gated layer read a gate and an up scale per expert ([E][2]): an [E] view's
    // value goes to both.
    if (is_gated(spec.activation) && !v.w13_global_scale_gate_up) {
      std::vector<float> one(E), pairs(2 * E);
      check(driver().cuStreamSynchronize(stream), "cuStreamSynchronize");
      check(driver().cuMemcpyDtoH(one.data(), v.w13_global_scale, E * sizeof(float)), "cuMemcpyDtoH(w13_global_scale)");
      for (size_t e = 0; e < E; ++e) pairs[2 * e] = pairs[2 * e + 1] = one[e];
      layer->fc1_gs = DeviceBuffer::from(pairs);
    } else {
      layer->fc1_gs = copy_device(v.w13_global_scale, (v.w13_global_scale_gate_up ? 2 : 1) * E * sizeof(float), stream);
    }
    layer->fc2_gs = copy_device(v.w2_global_scale, E * sizeof(float), stream);
  }
  if (spec.precision == ActPrecision::a4) {
    // The kernels read one scale per local expert: a [1] view is broadcast. Checked here (E values):
    // a scale that is not finite and > 0 would turn whole experts into NaN or zeros.
    if (!v.a1_gs || !v.a2_gs)
      throw Error("prepare: an a4 layer needs its global input scales a1_gs and a2_gs (a null pointer was given)");
    if (v.a_gs_count != 1 && v.a_gs_count != spec.experts)
      throw Error(fmt::format("prepare: a_gs_count must be 1 or E = {} for an a4 layer, got {}", spec.experts,
                              v.a_gs_count));
    std::vector<float> a[2];
    for (int i = 0; i < 2; ++i) {
      const char* name = i == 0 ? "a1_gs" : "a2_gs";
      std::vector<float> given(v.a_gs_count);
      check(driver().cuStreamSynchronize(stream), "cuStreamSynchronize");
      check(driver().cuMemcpyDtoH(given.data(), i == 0 ? v.a1_gs : v.a2_gs, given.size() * sizeof(float)),
            "cuMemcpyDtoH(a_gs)");
      for (size_t j = 0; j < given.size(); ++j)
        if (!(given[j] > 0 && std::isfinite(given[j])))
          throw Error(fmt::format("prepare: {}[{}] must be finite and > 0, got {}", name, j, given[j]));
      a[i] = given.size() == E ? given : std::vector<float>(E, given[0]);
    }
    // The kernels read them from the FCs' scale planes, after the weights' global scales (ones for MXFP4).
    const size_t mats1 = is_gated(spec.activation) ? 2 : 1;
    std::vector<float> p1(mats1 * E, 1.0f), p2(E, 1.0f);
    if (nv) {
      check(driver().cuStreamSynchronize(stream), "cuStreamSynchronize");
      check(driver().cuMemcpyDtoH(p1.data(), layer->fc1_gs.ptr(), p1.size() * sizeof(float)), "cuMemcpyDtoH(fc1_gs)");
      check(driver().cuMemcpyDtoH(p2.data(), layer->fc2_gs.ptr(), p2.size() * sizeof(float)), "cuMemcpyDtoH(fc2_gs)");
    }
    p1.insert(p1.end(), a[0].begin(), a[0].end());
    p1.insert(p1.end(), a[1].begin(), a[1].end());
    p2.insert(p2.end(), a[1].begin(), a[1].end());
    layer->fc1_gs = DeviceBuffer::from(p1);
    layer->fc2_gs = DeviceBuffer::from(p2);
    layer->x_quant_per_token = std::all_of(a[0].begin(), a[0].end(), [&](float g) { return g == a[0][0]; });
  } else {
    refuse(v.a1_gs, "a1_gs", "only the a4 precision has input scales");
    refuse(v.a2_gs, "a2_gs", "only the a4 precision has input scales");
  }
  if (spec.has_bias) {
    // Biases are small: reorder FC1's into [E][mats][I] on the host.
    std::vector<float> b1(E * rows1);
    check(driver().cuStreamSynchronize(stream), "cuStreamSynchronize");
    check(driver().cuMemcpyDtoH(b1.data(), v.w13_bias, b1.size() * sizeof(float)), "cuMemcpyDtoH(w13_bias)");
    std::vector<float> r1(b1.size());
    const int I = spec.intermediate, mats = g1.mats;
    for (size_t e = 0; e < E; ++e)
      for (int m = 0; m < mats; ++m)
        for (int i = 0; i < I; ++i) {
          int row = i;
          if (mats == 2) row = fc1_row_of(spec, m == 1, i);
          r1[(e * mats + m) * I + i] = b1[e * rows1 + row];
        }
    layer->fc1_bias = DeviceBuffer::from(r1);
    layer->fc2_bias = copy_device(v.w2_bias, E * spec.hidden * sizeof(float), stream);
  }
  check(driver().cuStreamSynchronize(stream), "cuStreamSynchronize(prepare)");
  return layer;
}

}  // namespace moejit::detail
