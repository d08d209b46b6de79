// The embedding contract of Runtime and DeviceBuffer around forward's kernels: the calling thread's
// current context is left as it was, copies outside a buffer are refused without wrapping, runtime
// activation overrides are checked against the layer, prepare refuses tensors the spec does not use, and
// forwards on several threads share their kernels' loads.
#include "catch_compat.hpp"
#include <dlfcn.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gpu_support.hpp"
#include "moejit/error.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/context.hpp"
#include "runtime/launch.hpp"
#include "runtime/prepared_layer.hpp"
#include "runtime/standalone_kernel.hpp"

using namespace moejit;
using namespace moejit::test;
using Catch::Contains;

namespace {
// The planner overrides a case sets (ScopedEnv) pick the Runtime (gpu_support.hpp: tuned_runtime).
Runtime& runtime() { return tuned_runtime(); }

CUcontext current_context() {
  CUcontext c = nullptr;
  detail::check(detail::driver().cuCtxGetCurrent(&c), "cuCtxGetCurrent");
  return c;
}

void set_current(CUcontext c) { detail::check(detail::driver().cuCtxSetCurrent(c), "cuCtxSetCurrent"); }

// A context of the runtime's device that is not its primary context: what an embedding server's own
// context looks like to moejit. moejit resolves no context-creation entry point, so the test takes them
// from the driver it already loaded. cuCtxCreate_v2 and cuCtxDestroy_v2 are the stable ABI names.
class OtherContext {
 public:
  explicit OtherContext(int device) {
    detail::driver();  // loads libcuda.so.1
    void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    REQUIRE(lib != nullptr);
    create_ = reinterpret_cast<Create>(::dlsym(lib, "cuCtxCreate_v2"));
    destroy_ = reinterpret_cast<Destroy>(::dlsym(lib, "cuCtxDestroy_v2"));
    ::dlclose(lib);  // the driver keeps its own reference
    REQUIRE(create_ != nullptr);
    REQUIRE(destroy_ != nullptr);
    CUdevice dev;
    detail::check(detail::driver().cuDeviceGet(&dev, device), "cuDeviceGet");
    const CUcontext before = current_context();
    // cuCtxCreate pushes the new context on the thread's context stack; setting no context pops it
    // again, which leaves the stack as it was.
    detail::check(create_(&ctx_, 0, dev), "cuCtxCreate");
    set_current(nullptr);
    REQUIRE(current_context() == before);
  }
  ~OtherContext() {
    if (ctx_) detail::report_cleanup(destroy_(ctx_), "cuCtxDestroy");
  }
  OtherContext(const OtherContext&) = delete;
  OtherContext& operator=(const OtherContext&) = delete;
  CUcontext get() const { return ctx_; }

 private:
  using Create = CUresult (*)(CUcontext*, unsigned int, CUdevice);
  using Destroy = CUresult (*)(CUcontext);
  Create create_ = nullptr;
  Destroy destroy_ = nullptr;
  CUcontext ctx_ = nullptr;
};

// Gives the thread the runtime's context back when a case ends, however it ends, so that the next case
// allocates its buffers there.
struct RestoreRuntimeContext {
  CUcontext ctx = current_context();
  ~RestoreRuntimeContext() { detail::report_cleanup(detail::driver().cuCtxSetCurrent(ctx), "cuCtxSetCurrent"); }
};
}  // namespace

TEST_CASE("prepare, prewarm, forward and ~Runtime leave the thread's current context as they found it",
          "[gpu][api]") {
  auto& rt = runtime();
  const RestoreRuntimeContext restore;
  const CUcontext ours = current_context();
  REQUIRE(ours != nullptr);
  const LayerSpec spec = small_spec(ScaleFormat::mxfp4, Activation::swigluoai, true, true);
  const HostLayer host = make_random_layer(spec, 7001);
  const int m = 5;
  HostInputs in = make_random_inputs(spec, m, 7002, true);

  OtherContext other(rt.device());
  REQUIRE(other.get() != ours);
  for (CUcontext theirs : {other.get(), static_cast<CUcontext>(nullptr)}) {
    INFO((theirs ? "another context of the device is current" : "no context is current"));
    set_current(ours);
    auto layer_first = rt.prepare(host);  // inputs and the reference output, in the runtime's context
    DeviceInputs d = upload_inputs(rt, *layer_first, in, m);
    const auto expected = run_poisoned(rt, *layer_first, d, m);

    set_current(theirs);  // replaces the runtime's context, or pops it off the thread's stack
    REQUIRE(current_context() == theirs);
    auto layer = rt.prepare(host);
    CHECK(current_context() == theirs);
    rt.prewarm(*layer, m);
    CHECK(current_context() == theirs);
    d.out.fill_bytes(0xFF);  // buffers copy in the context they were allocated in
    CHECK(current_context() == theirs);
    rt.forward(*layer, args_for(d, m));
    CHECK(current_context() == theirs);
    // forward ran in the runtime's context, on the runtime's buffers: the same bits as before.
    CHECK(d.out.to_vector<uint16_t>(static_cast<size_t>(m) * spec.hidden) == expected);
    CHECK(current_context() == theirs);
    layer.reset();  // frees the prepared buffers while another context (or none) is current
    CHECK(current_context() == theirs);
  }

  // A runtime destroyed while another context is current unloads its modules in its own and leaves the
  // other one current.
  set_current(ours);
  {
    Runtime fresh;
    auto layer = fresh.prepare(host);
    fresh.prewarm(*layer, 2);
    set_current(other.get());
  }
  CHECK(current_context() == other.get());
  set_current(ours);
}

TEST_CASE("DeviceBuffer refuses copies whose offset plus size would wrap around", "[gpu][api]") {
  runtime();
  DeviceBuffer b(64);
  std::vector<uint8_t> host(16, 0x5A);
  constexpr size_t kMax = std::numeric_limits<size_t>::max();
  // offset + bytes wraps to 7, which the buffer's 64 bytes would hold.
  CHECK_THROWS_WITH(b.upload(host.data(), 16, kMax - 8), Contains("exceed the buffer's 64"));
  CHECK_THROWS_WITH(b.download(host.data(), 16, kMax - 8), Contains("exceed the buffer's 64"));
  CHECK_THROWS_WITH(b.upload(host.data(), kMax, 2), Contains("exceed"));
  CHECK_THROWS_WITH(b.download(host.data(), 1, 64), Contains("exceed"));
  // The last bytes are still in range.
  CHECK_NOTHROW(b.upload(host.data(), 16, 48));
  std::vector<uint8_t> back(16);
  CHECK_NOTHROW(b.download(back.data(), 16, 48));
  CHECK(back == host);
  CHECK_NOTHROW(b.upload(host.data(), 0, 64));
}

TEST_CASE("forward checks the runtime activation overrides against the layer", "[gpu][api][errors]") {
  auto& rt = runtime();
  const int m = 4;

  SECTION("a layer without a limit and another activation than swigluoai takes no override") {
    const LayerSpec spec = small_spec(ScaleFormat::nvfp4, Activation::silu, false, false);
    auto layer = rt.prepare(make_random_layer(spec, 7101));
    HostInputs in = make_random_inputs(spec, m, 7102, false);
    DeviceInputs d = upload_inputs(rt, *layer, in, m);
    ForwardArgs a = args_for(d, m);
    a.limit = 5.f;
    CHECK_THROWS_WITH(rt.forward(*layer, a), Contains("limit is set but the layer was prepared without a limit"));
    a.tokens = 0;  // wrong for the layer whatever M is
    CHECK_THROWS_WITH(rt.forward(*layer, a), Contains("prepared without a limit"));
    a = args_for(d, m);
    a.swiglu_alpha = 1.f;
    CHECK_THROWS_WITH(rt.forward(*layer, a), Contains("swiglu_alpha is set") && Contains("swigluoai only"));
    a = args_for(d, m);
    a.swiglu_beta = 0.f;
    CHECK_THROWS_WITH(rt.forward(*layer, a), Contains("swiglu_beta is set") && Contains("activation is silu"));
  }

  SECTION("a swigluoai layer with a limit takes finite overrides and a positive limit") {
    const LayerSpec spec = small_spec(ScaleFormat::mxfp4, Activation::swigluoai, true, true);
    HostLayer host = make_random_layer(spec, 7201);
    auto layer = rt.prepare(host);
    HostInputs in = make_random_inputs(spec, m, 7202, true);
    DeviceInputs d = upload_inputs(rt, *layer, in, m);
    for (float bad : {0.f, -1.f, NAN, INFINITY}) {
      INFO(fmt::format("limit {}", bad));
      ForwardArgs a = args_for(d, m);
      a.limit = bad;
      CHECK_THROWS_WITH(rt.forward(*layer, a), Contains("limit must be finite and > 0"));
    }
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      INFO(fmt::format("alpha/beta {}", bad));
      ForwardArgs a = args_for(d, m);
      a.swiglu_alpha = bad;
      CHECK_THROWS_WITH(rt.forward(*layer, a), Contains("swiglu_alpha must be finite"));
      a = args_for(d, m);
      a.swiglu_beta = bad;
      CHECK_THROWS_WITH(rt.forward(*layer, a), Contains("swiglu_beta must be finite"));
    }

    // Valid overrides reach the kernels: the output follows the reference of a layer carrying them.
    HostLayer overridden = host;
    overridden.spec.limit = 0.75f;
    overridden.spec.swiglu_alpha = 1.25f;
    overridden.spec.swiglu_beta = 0.5f;
    const auto plain = run_poisoned(rt, *layer, d, m);
    d.out.fill_bytes(0xFF);
    ForwardArgs a = args_for(d, m);
    a.limit = overridden.spec.limit;
    a.swiglu_alpha = overridden.spec.swiglu_alpha;
    a.swiglu_beta = overridden.spec.swiglu_beta;
    rt.forward(*layer, a);
    const auto out = d.out.to_vector<uint16_t>(static_cast<size_t>(m) * spec.hidden);
    CHECK(out != plain);
    check_agreement(compare(to_float(out), reference_forward(overridden, in).out_f64), /*with_cosine=*/true);
  }
}

TEST_CASE("prepare refuses biases and global scales the layer's spec does not have", "[gpu][api][errors]") {
  auto& rt = runtime();

  SECTION("host layers") {
    const LayerSpec spec = small_spec(ScaleFormat::mxfp4, Activation::silu, false, false);
    HostLayer host = make_random_layer(spec, 7301);
    host.w2_bias.assign(static_cast<size_t>(spec.experts) * spec.hidden, 0.f);
    CHECK_THROWS_WITH(rt.prepare(host), Contains("w2_bias given") && Contains("has_bias is false"));
    host.w2_bias.clear();
    host.w13_global_scale.assign(spec.experts, 1.f);
    CHECK_THROWS_WITH(rt.prepare(host), Contains("w13_global_scale given") && Contains("mxfp4"));
  }

  SECTION("device-resident layers") {
    for (Activation act : {Activation::silu, Activation::relu2}) {
      const LayerSpec spec = small_spec(ScaleFormat::mxfp4, act, false, false);
      const char* fc1 = act == Activation::relu2 ? "w1" : "w13";
      INFO(std::string(to_string(act)));
      const HostLayer host = make_random_layer(spec, 7401);
      DeviceBuffer w13 = DeviceBuffer::from(host.w13), w13_scale = DeviceBuffer::from(host.w13_scale);
      DeviceBuffer w2 = DeviceBuffer::from(host.w2), w2_scale = DeviceBuffer::from(host.w2_scale);
      DeviceBuffer extra(static_cast<size_t>(spec.experts) * spec.fc1_rows() * sizeof(float));
      DeviceLayerView v;
      v.spec = spec;
      v.w13 = w13.ptr();
      v.w13_scale = w13_scale.ptr();
      v.w2 = w2.ptr();
      v.w2_scale = w2_scale.ptr();
      CHECK_NOTHROW(rt.prepare(v));

      DeviceLayerView bad = v;
      bad.w13_bias = extra.ptr();
      CHECK_THROWS_WITH(rt.prepare(bad), Contains(fmt::format("{}_bias is given", fc1)) && Contains("has_bias is false"));
      bad = v;
      bad.w2_bias = extra.ptr();
      CHECK_THROWS_WITH(rt.prepare(bad), Contains("w2_bias is given") && Contains("has_bias is false"));
      bad = v;
      bad.w13_global_scale = extra.ptr();
      CHECK_THROWS_WITH(rt.prepare(bad),
                        Contains(fmt::format("{}_global_scale is given", fc1)) && Contains("mxfp4 has no global scales"));
      bad = v;
      bad.w2_global_scale = extra.ptr();
      CHECK_THROWS_WITH(rt.prepare(bad), Contains("w2_global_scale is given") && Contains("mxfp4"));
    }
  }
}

TEST_CASE("forwards on several threads of a fresh runtime load their kernels concurrently and agree with a rerun",
          "[gpu][api]") {
  // Half the threads run each family, so several threads ask for one kernel at once while others load
  // different ones: each load happens once, its waiters share it, and every output is the same bits as
  // the same forward run again afterwards on one thread, with every kernel loaded.
  runtime();  // the shared runtime's context is current, and stays so after this case
  const RestoreRuntimeContext restore;
  const LayerSpec spec = small_spec(ScaleFormat::mxfp4, Activation::swigluoai, true, true);
  const HostLayer host = make_random_layer(spec, 7501);
  const int m = 3;
  const HostInputs in = make_random_inputs(spec, m, 7502, true);
  Runtime fresh;  // its own module registry: only the repack kernel is loaded once the layer is prepared
  auto layer = fresh.prepare(host);
  constexpr int kThreads = 8;
  auto family_of = [](int t) { return t % 2 ? Family::decode : Family::batch; };
  std::vector<DeviceInputs> inputs;
  for (int t = 0; t < kThreads; ++t) inputs.push_back(upload_inputs(fresh, *layer, in, m));
  std::vector<std::vector<uint16_t>> outs(kThreads);
  std::vector<std::string> errors(kThreads);
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        // Catch's assertions are not thread-safe: results and errors are checked after the join.
        try {
          outs[t] = run_poisoned(fresh, *layer, inputs[t], m, family_of(t));
        } catch (const std::exception& e) {
          errors[t] = e.what();
        }
      });
    for (auto& th : threads) th.join();
  }
  const std::vector<double> want = reference_forward(host, in).out_f64;
  for (int t = 0; t < kThreads; ++t) {
    INFO(fmt::format("thread {} ({})", t, family_of(t) == Family::decode ? "decode" : "batch"));
    CHECK(errors[t].empty());
    CHECK(outs[t] == run_poisoned(fresh, *layer, inputs[t], m, family_of(t)));
    check_agreement(compare(to_float(outs[t]), want), /*with_cosine=*/true);  // right, not only repeatable
  }
}

TEST_CASE("concurrent launches of one function with different shared memory sizes all launch", "[gpu][api]") {
  // A function's dynamic shared memory limit only grows (runtime/launch.cpp: allow_dynamic_smem): threads
  // launching one function with different sizes at once must never see the limit lowered between another
  // thread's raise and its launch. Each CTA fills its shared memory and reports the last word it wrote.
  static constexpr const char* kSource = R"(
struct SmemProbeParams { unsigned* out; unsigned words; };
extern "C" __global__ void smem_probe(const SmemProbeParams p) {
  extern __shared__ unsigned s[];
  for (unsigned i = threadIdx.x; i < p.words; i += blockDim.x) s[i] = i * 2654435761u;
  __syncthreads();
  if (threadIdx.x == 0) p.out[blockIdx.x] = s[p.words - 1];
}
)";
  struct SmemProbeParams {
    uint64_t out;
    uint32_t words;
  };
  auto& rt = runtime();
  const RestoreRuntimeContext restore;
  const CUcontext ctx = current_context();
  const detail::StandaloneKernel probe(GeneratedSource{"smem_probe.cu", "smem_probe", kSource}, rt.arch());
  constexpr int kThreads = 6, kRounds = 40, kGrid = 8;
  auto bytes_of = [](int t, int r) { return (t + r) % 2 ? 100u * 1024 : 1024u; };
  std::vector<std::string> errors(kThreads);
  std::vector<int> wrong(kThreads, 0);
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        try {
          detail::ScopedContext in(ctx);
          DeviceBuffer out(kGrid * sizeof(uint32_t));
          for (int r = 0; r < kRounds; ++r) {
            const unsigned bytes = bytes_of(t, r);
            SmemProbeParams p{out.ptr(), bytes / 4};
            out.fill_bytes(0);
            detail::launch(probe.function(), detail::LaunchShape{kGrid, 1, 1, 256, bytes}, nullptr, &p);
            detail::check(detail::driver().cuStreamSynchronize(nullptr), "cuStreamSynchronize");
            for (uint32_t v : out.to_vector<uint32_t>(kGrid)) wrong[t] += v != (bytes / 4 - 1) * 2654435761u;
          }
          in.restore();
        } catch (const std::exception& e) {
          errors[t] = e.what();
        }
      });
    for (auto& th : threads) th.join();
  }
  for (int t = 0; t < kThreads; ++t) {
    INFO("thread " << t);
    CHECK(errors[t].empty());
    CHECK(wrong[t] == 0);
  }
}

TEST_CASE("forward refuses a layer prepared in another context", "[gpu][api]") {
  // A layer's weights are the memory of the device whose Runtime prepared it. A single-GPU machine has no
  // second device, so the layer is marked as another context's (what a Runtime of another device
  // records), and forward must refuse it before launching.
  auto& rt = runtime();
  const RestoreRuntimeContext restore;
  const LayerSpec spec = small_spec(ScaleFormat::nvfp4, Activation::silu, false, false);
  auto layer = rt.prepare(make_random_layer(spec, 7101));
  const int m = 2;
  DeviceInputs d = upload_inputs(rt, *layer, make_random_inputs(spec, m, 7102, true), m);
  CHECK_NOTHROW(run_poisoned(rt, *layer, d, m));
  OtherContext other(rt.device());
  auto& impl = dynamic_cast<detail::PreparedLayerImpl&>(*layer);
  const CUcontext own = impl.context;
  impl.context = other.get();
  CHECK_THROWS_WITH(rt.forward(*layer, args_for(d, m)), Catch::Contains("another device or context"));
  impl.context = own;
  CHECK_NOTHROW(run_poisoned(rt, *layer, d, m));
}

TEST_CASE("forward refuses buffers whose given sizes are too small for M tokens", "[gpu][api]") {
  auto& rt = runtime();
  const LayerSpec spec = small_spec(ScaleFormat::mxfp4, Activation::silu, false, false);
  auto layer = rt.prepare(make_random_layer(spec, 7201));
  const int m = 3;
  DeviceInputs d = upload_inputs(rt, *layer, make_random_inputs(spec, m, 7202, true), m);
  const size_t row = static_cast<size_t>(spec.hidden) * 2, pairs = static_cast<size_t>(m) * spec.top_k;
  ForwardArgs a = args_for(d, m);
  a.x_bytes = m * row;
  a.out_bytes = m * row;
  a.topk_ids_bytes = pairs * 4;
  a.topk_weights_bytes = pairs * 4;
  CHECK_NOTHROW(rt.forward(*layer, a));  // exact sizes are enough
  ForwardArgs b = a;
  b.out_bytes = m * row - 2;
  CHECK_THROWS_WITH(rt.forward(*layer, b), Catch::Contains("out has") && Catch::Contains("3 tokens need"));
  b = a;
  b.x_bytes = row;
  CHECK_THROWS_WITH(rt.forward(*layer, b), Catch::Contains("x has"));
  b = a;
  b.topk_ids_bytes = pairs * 4 - 4;
  CHECK_THROWS_WITH(rt.forward(*layer, b), Catch::Contains("topk_ids has"));
  b = a;
  b.topk_weights_bytes = 4;
  CHECK_THROWS_WITH(rt.forward(*layer, b), Catch::Contains("topk_weights has"));
  detail::check(detail::driver().cuCtxSynchronize(), "cuCtxSynchronize");
}

TEST_CASE("a Runtime plans with the overrides it was constructed with, whatever the environment does later",
          "[gpu][api][tuning]") {
  const RestoreRuntimeContext restore;
  const ScopedEnv env{"MOEJIT_DECODE_COLUMNS", "MOEJIT_DECODE_LAUNCH", "MOEJIT_DECODE_FC2"};
  ::unsetenv("MOEJIT_DECODE_COLUMNS");
  ::unsetenv("MOEJIT_DECODE_LAUNCH");
  ::unsetenv("MOEJIT_DECODE_FC2");
  Runtime rt;  // reads the overrides now: none
  CHECK(rt.tuning().empty());
  const LayerSpec spec = small_spec(ScaleFormat::mxfp4, Activation::swigluoai, true, true);
  const HostLayer host = make_random_layer(spec, 7701);
  auto layer = rt.prepare(host);
  const int m = 2;
  rt.prewarm(*layer, m);
  const std::string planned = rt.plan(*layer, m).describe();
  // Changed after construction (a server's operator experimenting, a library setting its own): the plans,
  // hence the keys forward asks for, stay the prewarmed ones.
  ::setenv("MOEJIT_DECODE_COLUMNS", "8", 1);
  ::setenv("MOEJIT_DECODE_LAUNCH", "cooperative", 1);
  ::setenv("MOEJIT_DECODE_FC2", "split", 1);
  CHECK(rt.plan(*layer, m).describe() == planned);
  HostInputs in = make_random_inputs(spec, m, 7702, true);
  DeviceInputs d = upload_inputs(rt, *layer, in, m);
  check_agreement(compare(to_float(run_poisoned(rt, *layer, d, m)), reference_forward(host, in).out_f64), true);
  // A Runtime constructed now reads the new values; RuntimeOptions::tuning replaces the environment.
  Runtime later;
  CHECK(later.plan(*layer, m).launch == DecodeLaunch::cooperative);
  CHECK(later.plan(*layer, m).describe() != planned);
  RuntimeOptions options;
  options.tuning = TuningOverrides{};
  Runtime given(options);
  CHECK(given.plan(*layer, m).describe() == planned);
  check_agreement(compare(to_float(run_poisoned(later, *layer, d, m)), reference_forward(host, in).out_f64), true);
  // A malformed variable fails the construction, naming it.
  ::setenv("MOEJIT_DECODE_COLUMNS", "5", 1);
  CHECK_THROWS_WITH(Runtime(), Contains("MOEJIT_DECODE_COLUMNS"));
}
