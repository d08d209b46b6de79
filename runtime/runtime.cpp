// Runtime: device selection, prepare, workspace, prewarm and forward.
#include "moejit/runtime.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <new>

#include "moejit/csf_layer.hpp"
#include "moejit/csf_prepared.hpp"
#include "moejit/error.hpp"
#include "runtime/context.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/families/families.hpp"

namespace moejit {

using namespace detail;

struct Runtime::Impl {
  RuntimeOptions options;
  TuningOverrides tuning;  // read once, at construction
  CUcontext ctx = nullptr;
  int sms = 0;
  Arch arch = Arch::sm_90a;
  std::string name;
  KernelCache cache;
  ModuleRegistry modules;
  std::mutex prepare_mu;

  explicit Impl(RuntimeOptions o)
      : options(std::move(o)),
        tuning(options.tuning ? *options.tuning : TuningOverrides::from_environment()),
        cache(options.cache),
        modules(cache) {}
};

std::optional<Arch> arch_for_capability(int major, int minor) {
  if (major == 9 && minor == 0) return Arch::sm_90a;
  if (major == 10 && minor == 0) return Arch::sm_100a;
  if (major == 12 && minor == 0) return Arch::sm_120a;
  if (major == 12 && minor == 1) return Arch::sm_121a;
  return std::nullopt;
}

DeviceInfo query_device(int device) {
  const DriverApi& d = driver();
  int count = 0;
  check(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (device < 0 || device >= count)
    throw Error(fmt::format("device {} does not exist ({} CUDA device(s) present)", device, count));
  DeviceInfo info;
  info.ordinal = device;
  CUdevice dev;
  check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  char name[256] = {};
  check(d.cuDeviceGetName(name, sizeof(name), dev), "cuDeviceGetName");
  info.name = name;
  check(d.cuDeviceGetAttribute(&info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
        "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
  check(d.cuDeviceGetAttribute(&info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
        "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)");
  check(d.cuDeviceGetAttribute(&info.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
        "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  check(d.cuDriverGetVersion(&info.driver_version), "cuDriverGetVersion");
  info.arch = arch_for_capability(info.cc_major, info.cc_minor);
  return info;
}

namespace {
Arch arch_of(int major, int minor, const std::string& name) {
  if (auto a = arch_for_capability(major, minor)) return *a;
  throw Error(fmt::format("device {} has compute capability {}.{}; moejit builds for {}", name, major, minor,
                          arch_names()));
}

const PreparedLayerImpl& impl_of(const PreparedLayer& layer) {
  auto* p = dynamic_cast<const PreparedLayerImpl*>(&layer);
  if (!p) throw Error("layer: not a layer prepared by moejit::Runtime::prepare");
  return *p;
}

// The repack kernel prepare launches (runtime/families/prepare.cpp).
KernelKey prepare_key(Arch arch) {
  KernelKey key;
  key.kind = KernelKind::prepare;
  key.arch = arch;
  return key.normalized();
}

// Runtime overrides of the activation parameters. The layer's kernels were generated for its spec: a
// clamp exists only when the spec has a limit, and alpha/beta are read by swigluoai only, so an override
// the kernels would ignore is a caller's mistake, reported rather than dropped.
float swiglu_arg(const std::optional<float>& given, float layer_value, const char* name, const LayerSpec& spec) {
  if (!given) return layer_value;
  if (spec.activation != Activation::swigluoai)
    throw Error(fmt::format("forward: {} is set but the layer's activation is {}; swiglu_alpha and swiglu_beta apply "
                            "to swigluoai only",
                            name, to_string(spec.activation)));
  if (!std::isfinite(*given)) throw Error(fmt::format("forward: {} must be finite, got {}", name, *given));
  return *given;
}

float limit_arg(const std::optional<float>& given, const LayerSpec& spec) {
  if (!given) return spec.limit.value_or(0.f);
  if (!spec.limit)
    throw Error("forward: limit is set but the layer was prepared without a limit, so its kernels have no clamp "
                "(prepare the layer with LayerSpec::limit set to use one)");
  if (!std::isfinite(*given) || !(*given > 0))
    throw Error(fmt::format("forward: limit must be finite and > 0, got {}", *given));
  return *given;
}

}  // namespace

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  const DeviceInfo info = query_device(impl_->options.device);
  impl_->name = info.name;
  impl_->sms = info.sm_count;
  impl_->arch = arch_of(info.cc_major, info.cc_minor, info.name);  // refused before a context is made
  impl_->ctx = ensure_context(impl_->options.device);
}

Runtime::~Runtime() {
  // Unloading modules (and dumping trace records) needs the context they were loaded into.
  if (!impl_) return;
  ScopedContext in(impl_->ctx, std::nothrow);
  impl_.reset();
}

int Runtime::device() const { return impl_->options.device; }
int Runtime::sm_count() const { return impl_->sms; }
Arch Runtime::arch() const { return impl_->arch; }
std::string Runtime::device_name() const { return impl_->name; }
KernelCache& Runtime::cache() { return impl_->cache; }
const TuningOverrides& Runtime::tuning() const { return impl_->tuning; }

std::shared_ptr<PreparedLayer> Runtime::prepare(const DeviceLayerView& layer, StreamHandle stream) {
  std::lock_guard<std::mutex> lock(impl_->prepare_mu);
  ScopedContext in(impl_->ctx);
  std::shared_ptr<PreparedLayerImpl> prepared =
      prepare_layer(impl_->modules, impl_->arch, layer, static_cast<CUstream>(stream));
  prepared->context = impl_->ctx;
  in.restore();
  return prepared;
}

std::shared_ptr<PreparedLayer> Runtime::prepare(const HostLayer& layer) { return prepare(layer, PrepareOptions{}); }

std::shared_ptr<PreparedLayer> Runtime::prepare(const HostLayer& layer, const PrepareOptions& options) {
  layer.validate();
  ScopedContext in(impl_->ctx);
  // Upload the logical tensors as they are, then repack on the GPU like a device-resident layer.
  DeviceLayerView v;
  v.spec = layer.spec;
  std::vector<DeviceBuffer> keep;
  auto up = [&](const auto& vec) -> DevicePtr {
    if (vec.empty()) return 0;
    keep.push_back(DeviceBuffer::from(vec));
    return keep.back().ptr();
  };
  v.w13 = up(layer.w13);
  // The plain prepared planes are repacked on the GPU from plain logical bytes (CSF planes expanded on
  // the host), for planes the kernels read plainly (and for a8/a4 layers' kernels); the prepared CSF
  // planes are built on the host from the same bytes (docs/CSF.md §8).
  std::vector<uint8_t> fc1_expanded, fc2_expanded;
  const std::vector<uint8_t>& fc1_plain = plain_scale_plane(layer.w13_scale, layer.w13_scale_csf, fc1_expanded);
  const std::vector<uint8_t>& fc2_plain = plain_scale_plane(layer.w2_scale, layer.w2_scale_csf, fc2_expanded);
  v.w13_scale = up(fc1_plain);
  v.w13_global_scale = up(kernel_fc1_global_scale(layer));  // [E, 2] (gate, up) for gated layers
  v.w13_global_scale_gate_up = !v.w13_global_scale ? false : is_gated(layer.spec.activation);
  v.w13_bias = up(layer.w13_bias);
  v.w2 = up(layer.w2);
  v.w2_scale = up(fc2_plain);
  v.w2_global_scale = up(layer.w2_global_scale);
  v.w2_bias = up(layer.w2_bias);
  if (layer.spec.precision == ActPrecision::a4) {
    // The view takes one count for both: broadcast a [1] scale where the other is [E].
    const size_t n = std::max(layer.a1_gs.size(), layer.a2_gs.size());
    auto widen = [&](const std::vector<float>& s) { return s.size() == n ? s : std::vector<float>(n, s.at(0)); };
    v.a1_gs = up(widen(layer.a1_gs));
    v.a2_gs = up(widen(layer.a2_gs));
    v.a_gs_count = static_cast<int>(n);
  }
  std::shared_ptr<PreparedLayer> prepared = prepare(v, nullptr);
  PreparedLayerImpl& impl = const_cast<PreparedLayerImpl&>(impl_of(*prepared));
  const LayerSpec& spec = layer.spec;
  auto csf_plane = [&](bool held_as_csf, const std::vector<uint8_t>& plain, const PreparedScaleGeometry& g,
                       PreparedLayerImpl::CsfBuffers& out) {
    const bool chosen = options.scales == ScaleReads::automatic || options.scales == ScaleReads::compact;
    if (options.scales == ScaleReads::plain || (chosen && !held_as_csf)) return false;
    PreparedCsfPlane p = build_prepared_csf(g, plain.data());
    // Incompressible planes stay plain: the kernels would read more, and more records.
    if (chosen && p.bytes() >= g.plain_bytes()) return false;
    out.offsets = DeviceBuffer::from(p.offsets);
    out.base = DeviceBuffer::from(p.base);
    out.exc = DeviceBuffer::from(p.exc);
    out.head = DeviceBuffer::from(p.head);
    out.head_words = p.head_words;
    return true;
  };
  impl.fc1_csf = csf_plane(layer.w13_scale_csf.has_value(), fc1_plain, fc1_prepared_geometry(spec), impl.fc1_csf_s);
  impl.fc2_csf = csf_plane(layer.w2_scale_csf.has_value(), fc2_plain, fc2_prepared_geometry(spec), impl.fc2_csf_s);
  // automatic: the batch and prefill families read the plain planes, which the layer keeps. compact and
  // csf: every kernel an a16 layer can plan (decode, batch, prefill) reads a CSF plane as CSF, so its plain
  // prepared plane is dropped; the a8/a4 kernels read plain planes, so those layers keep both forms.
  impl.batched_csf = options.scales == ScaleReads::compact || options.scales == ScaleReads::csf;
  if (spec.precision == ActPrecision::a16 && impl.batched_csf) {
    if (impl.fc1_csf) impl.fc1_s = DeviceBuffer{};
    if (impl.fc2_csf) impl.fc2_s = DeviceBuffer{};
  }
  in.restore();
  return prepared;
}

namespace {
// Both sizing calls take the largest M a caller will forward, which forward bounds to [1, kMaxTokens].
void check_max_tokens(const char* fn, int max_tokens) {
  if (max_tokens < 1 || max_tokens > kMaxTokens)
    throw Error(fmt::format("{}: max_tokens must be in [1, {}] (the tokens one forward serves), got {}", fn,
                            kMaxTokens, max_tokens));
}
}  // namespace

size_t Runtime::workspace_size(const PreparedLayer& layer, int max_tokens) const {
  check_max_tokens("workspace_size", max_tokens);
  return WorkspaceLayout::make(layer.spec(), max_tokens).total;
}

Plan Runtime::plan(const PreparedLayer& layer, int tokens, Family force) const {
  return with_csf_scales(make_plan(layer.spec(), impl_->arch, tokens, impl_->sms, force, impl_->tuning),
                         layer.csf_scales(), layer.batched_csf_scales());
}

void Runtime::prewarm(const PreparedLayer& layer, int max_tokens, Family force) {
  check_max_tokens("prewarm", max_tokens);
  // The repack kernel too, as `moejit prewarm` does, so that prewarm covers every kernel of the layer's
  // spec; preparing the layer on this runtime has loaded it already, and then it is a lookup.
  std::vector<KernelKey> keys = with_csf_scales(
      keys_for_range(layer.spec(), impl_->arch, max_tokens, impl_->sms, force, impl_->tuning), layer.csf_scales(),
      layer.batched_csf_scales());
  const KernelKey prep = prepare_key(impl_->arch);
  if (std::find(keys.begin(), keys.end(), prep) == keys.end()) keys.insert(keys.begin(), prep);
  ScopedContext in(impl_->ctx);
  for (const auto& key : keys) impl_->modules.preload(key);
  in.restore();
}

void Runtime::forward(const PreparedLayer& layer_base, const ForwardArgs& a) {
  const PreparedLayerImpl& layer = impl_of(layer_base);
  if (layer.context != impl_->ctx)
    throw Error(fmt::format("forward: layer was prepared by a Runtime of another device or context, and its weights "
                            "are that device's memory; prepare it with the Runtime of device {} that runs it",
                            impl_->options.device));
  const LayerSpec& spec = layer.spec();
  if (a.tokens < 0) throw Error(fmt::format("forward: tokens must be >= 0, got {}", a.tokens));
  // Checked whatever M is: they are wrong for the layer, not for this step.
  const float alpha = swiglu_arg(a.swiglu_alpha, spec.swiglu_alpha, "swiglu_alpha", spec);
  const float beta = swiglu_arg(a.swiglu_beta, spec.swiglu_beta, "swiglu_beta", spec);
  const float limit = limit_arg(a.limit, spec);
  if (a.tokens == 0) return;
  auto need = [](DevicePtr p, const char* name, int align) {
    if (!p) throw Error(fmt::format("forward: {} is null", name));
    if (p % align) throw Error(fmt::format("forward: {} must be {}-byte aligned", name, align));
  };
  need(a.x, "x", 16);
  need(a.out, "out", 16);
  need(a.topk_ids, "topk_ids", 4);
  need(a.topk_weights, "topk_weights", 4);
  need(a.workspace, "workspace", 256);
  auto fits = [&](size_t given, size_t per_token, const char* name) {
    const size_t want = static_cast<size_t>(a.tokens) * per_token;
    if (given && given < want)
      throw Error(fmt::format("forward: {} has {} bytes but {} tokens need {}", name, given, a.tokens, want));
  };
  fits(a.x_bytes, static_cast<size_t>(spec.hidden) * 2, "x");
  fits(a.out_bytes, static_cast<size_t>(spec.hidden) * 2, "out");
  fits(a.topk_ids_bytes, static_cast<size_t>(spec.top_k) * 4, "topk_ids");
  fits(a.topk_weights_bytes, static_cast<size_t>(spec.top_k) * 4, "topk_weights");
  const WorkspaceLayout ws = WorkspaceLayout::make(spec, a.tokens);
  if (a.workspace_bytes < ws.total)
    throw Error(fmt::format("forward: workspace has {} bytes but {} tokens need {} (size it with workspace_size)",
                            a.workspace_bytes, a.tokens, ws.total));
  const Plan plan =
      with_csf_scales(make_plan(spec, impl_->arch, a.tokens, impl_->sms, a.force, impl_->tuning), layer.csf_scales(),
                      layer.batched_csf_scales());
  const ForwardContext ctx{layer, a, ws, plan, impl_->modules, static_cast<CUstream>(a.stream), alpha, beta, limit,
                           impl_->sms};
  ScopedContext in(impl_->ctx);
  launch_plan(ctx);
  in.restore();
}

}  // namespace moejit
