// Soak run of the runtime on a GPU (docs/RELIABILITY.md): many forwards from several threads, each on its
// own stream, at random token counts, with random and skewed routing (hot experts, empty experts, ids of
// other ranks and -1), eagerly and through CUDA graphs, checked periodically against the fp64 CPU
// reference and graph replay against eager bits; device and host memory must be flat at the end.
//
//   gpu_soak [--forwards N] [--threads T] [--max-tokens M] [--check-every C] [--config NAME|PATH] [--seed S]
//
// Defaults: 100,000 forwards over 4 threads, M in [0, 256], every 500th forward of a thread checked, on a
// small swigluoai layer (E 16, H 512, I 384, top 4, biases, limit) whose CPU reference is quick; --config
// runs a real model's local layer instead (random FP4 codes; checks then cost seconds each, so raise
// --check-every). Exit 0: every forward succeeded, every check held, memory stayed flat; 1: a check failed
// (each failure printed); 77: no usable GPU (ctest reports it as skipped).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "moejit/codecs.hpp"
#include "moejit/error.hpp"
#include "moejit/model_config.hpp"
#include "moejit/reference.hpp"
#include "moejit/runtime.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/graph_capture.hpp"

using namespace moejit;
using detail::CapturedGraph;
using detail::check;
using detail::driver;

namespace {

struct Options {
  long forwards = 100000;
  int threads = 4;
  int max_tokens = 256;
  int check_every = 500;
  std::string config;  // empty: the small layer
  uint64_t seed = 1;
};

// The agreement a checked forward must reach (tests/gpu_support.hpp states the same numbers for the suite).
constexpr double kRelL2Tolerance = 4e-3;
// Memory growth accepted between the end of the warm-up and the end of the run: allocator rounding, not leaks.
constexpr double kDeviceSlackBytes = 16.0 * (1 << 20);
constexpr double kHostSlackBytes = 64.0 * (1 << 20);
// Token counts each thread replays through captured graphs (others run eagerly); M = 0 is a no-op forward.
const std::vector<int> kGraphTokens = {1, 2, 3, 4, 8, 16, 33, 64, 100, 256};

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error(fmt::format("{} needs a value", a));
      return argv[++i];
    };
    if (a == "--forwards") o.forwards = std::stol(value());
    else if (a == "--threads") o.threads = std::stoi(value());
    else if (a == "--max-tokens") o.max_tokens = std::stoi(value());
    else if (a == "--check-every") o.check_every = std::stoi(value());
    else if (a == "--config") o.config = value();
    else if (a == "--seed") o.seed = std::stoull(value());
    else throw Error(fmt::format("unknown argument {} (see the comment at the top of tests/gpu_soak.cpp)", a));
  }
  if (o.forwards < 1 || o.threads < 1 || o.max_tokens < 1 || o.max_tokens > 65536 || o.check_every < 1)
    throw Error("--forwards, --threads, --max-tokens (<= 65536) and --check-every must be positive");
  return o;
}

LayerSpec small_layer() {
  LayerSpec s;
  s.format = ScaleFormat::mxfp4;
  s.activation = Activation::swigluoai;
  s.gate_up_order = GateUpOrder::interleaved;
  s.experts = 16;
  s.hidden = 512;
  s.intermediate = 384;
  s.top_k = 4;
  s.expert_begin = 16;  // rank 1 of an expert-parallel layer: ids 0..15 and 32.. belong to other ranks
  s.has_bias = true;
  s.limit = 7.0f;
  return s;
}

double host_rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

double device_used_bytes() {
  size_t free_bytes = 0, total = 0;
  check(driver().cuMemGetInfo(&free_bytes, &total), "cuMemGetInfo");
  return static_cast<double>(total - free_bytes);
}

enum class Routing { uniform, skewed, empty_experts, out_of_range };
const char* to_string(Routing r) {
  switch (r) {
    case Routing::uniform: return "uniform";
    case Routing::skewed: return "skewed";
    case Routing::empty_experts: return "empty experts";
    case Routing::out_of_range: return "out of range";
  }
  return "?";
}

// Token inputs of one forward: x rows from a pool, ids and weights drawn by the routing mode.
HostInputs draw_inputs(const LayerSpec& s, const std::vector<uint16_t>& x_pool, int pool_rows, int tokens,
                       Routing routing, std::mt19937_64& rng) {
  HostInputs in;
  in.tokens = tokens;
  in.hidden = s.hidden;
  in.top_k = s.top_k;
  const int first_row = tokens < pool_rows ? std::uniform_int_distribution<int>(0, pool_rows - tokens)(rng) : 0;
  in.x.assign(x_pool.begin() + static_cast<long>(first_row) * s.hidden,
              x_pool.begin() + static_cast<long>(first_row + tokens) * s.hidden);
  const int e0 = s.expert_begin, E = s.experts;
  std::uniform_int_distribution<int> local(e0, e0 + E - 1), half(e0, e0 + std::max(1, E / 4) - 1);
  std::uniform_int_distribution<int> foreign(-1, e0 + 2 * E);  // -1, other ranks' ids and local ones
  std::uniform_real_distribution<float> weight(0.05f, 1.0f);
  const int hot = local(rng);
  for (int m = 0; m < tokens; ++m) {
    float sum = 0;
    for (int k = 0; k < s.top_k; ++k) {
      int id = 0;
      switch (routing) {
        case Routing::uniform: id = local(rng); break;
        case Routing::skewed: id = (rng() % 8 != 0) ? hot : local(rng); break;  // one expert takes ~90 %
        case Routing::empty_experts: id = half(rng); break;                       // 3/4 of the experts get nothing
        case Routing::out_of_range: id = foreign(rng); break;
      }
      const float w = weight(rng);
      in.topk_ids.push_back(id);
      in.topk_weights.push_back(w);
      sum += w;
    }
    for (int k = 0; k < s.top_k; ++k) in.topk_weights[static_cast<size_t>(m * s.top_k + k)] /= sum;
  }
  return in;
}

// One worker: its stream, its buffers (for the largest M), and the graphs of kGraphTokens over them.
struct Worker {
  detail::OwnedStream stream;
  DeviceBuffer x, ids, weights, out, workspace;
  size_t workspace_bytes = 0;
  std::map<int, std::unique_ptr<CapturedGraph>> graphs;

  ForwardArgs args(int tokens) const {
    ForwardArgs a;
    a.x = x.ptr();
    a.topk_ids = ids.ptr();
    a.topk_weights = weights.ptr();
    a.out = out.ptr();
    a.tokens = tokens;
    a.workspace = workspace.ptr();
    a.workspace_bytes = workspace_bytes;
    a.stream = stream.get();
    a.x_bytes = x.size();
    a.topk_ids_bytes = ids.size();
    a.topk_weights_bytes = weights.size();
    a.out_bytes = out.size();
    return a;
  }
};

struct Totals {
  std::atomic<long> forwards{0}, graph_forwards{0}, checks{0}, failures{0};
  std::mutex print_mu;
  void fail(const std::string& what) {
    ++failures;
    std::lock_guard lock(print_mu);
    std::fprintf(stderr, "gpu_soak: FAILED: %s\n", what.c_str());
  }
};

void run_worker(int id, const Options& o, Runtime& rt, const PreparedLayer& layer, const HostLayer& host, Worker& w,
                const std::vector<uint16_t>& x_pool, int pool_rows, long forwards, CUcontext ctx, Totals& totals) {
  check(driver().cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  const LayerSpec& s = layer.spec();
  std::mt19937_64 rng(o.seed * 1000003 + static_cast<uint64_t>(id));
  std::uniform_int_distribution<int> any_tokens(0, o.max_tokens);
  for (long i = 0; i < forwards; ++i) {
    const Routing routing = static_cast<Routing>(rng() % 4);
    const bool use_graph = rng() % 2 == 0;
    const int tokens = use_graph ? kGraphTokens[rng() % kGraphTokens.size()] : any_tokens(rng);
    const bool checked = i % o.check_every == o.check_every - 1;
    const HostInputs in = draw_inputs(s, x_pool, pool_rows, tokens, routing, rng);
    const std::string what =
        fmt::format("thread {} forward {} (M = {}, {} routing, {})", id, i, tokens, to_string(routing),
                    use_graph && w.graphs.count(tokens) ? "graph" : "eager");
    try {
      // Synchronous uploads on the legacy stream, then a sync of it: the copies have landed before the
      // forward on this worker's (non-blocking) stream reads them.
      if (tokens > 0) {
        w.x.upload(in.x.data(), in.x.size() * 2);
        w.ids.upload(in.topk_ids.data(), in.topk_ids.size() * 4);
        w.weights.upload(in.topk_weights.data(), in.topk_weights.size() * 4);
      }
      if (checked) w.out.fill_bytes(0xFF);  // poison: every element of the checked output must be written
      check(driver().cuStreamSynchronize(nullptr), "cuStreamSynchronize(legacy stream)");
      auto graph = w.graphs.find(tokens);
      if (use_graph && graph != w.graphs.end()) {
        graph->second->launch(w.stream.get());
        ++totals.graph_forwards;
      } else {
        rt.forward(layer, w.args(tokens));
      }
      check(driver().cuStreamSynchronize(w.stream.get()), "cuStreamSynchronize");
      ++totals.forwards;
      if (!checked || tokens == 0) continue;
      ++totals.checks;
      const std::vector<uint16_t> got = w.out.to_vector<uint16_t>(static_cast<size_t>(tokens) * s.hidden);
      std::vector<float> f(got.size());
      for (size_t j = 0; j < got.size(); ++j) f[j] = bf16_to_float(got[j]);
      const Agreement ag = compare(f, reference_forward(host, in).out_f64);
      bool all_foreign = true;
      for (int32_t e : in.topk_ids) all_foreign = all_foreign && (e < s.expert_begin || e >= s.expert_begin + s.experts);
      // With no local expert routed the output is exactly zero (and rel_l2 undefined).
      const bool ok = ag.nonfinite == 0 &&
                      (all_foreign ? std::all_of(got.begin(), got.end(), [](uint16_t b) { return (b & 0x7FFF) == 0; })
                                   : ag.rel_l2 <= kRelL2Tolerance);
      if (!ok) totals.fail(fmt::format("{}: rel_l2 {:.3e}, nonfinite {}", what, ag.rel_l2, ag.nonfinite));
      // Graph replay equals eager execution bit for bit (DESIGN §8).
      if (use_graph && graph != w.graphs.end()) {
        w.out.fill_bytes(0xFF);  // on the legacy stream, asynchronous to the host: wait for it
        check(driver().cuStreamSynchronize(nullptr), "cuStreamSynchronize(legacy stream)");
        rt.forward(layer, w.args(tokens));
        check(driver().cuStreamSynchronize(w.stream.get()), "cuStreamSynchronize");
        if (w.out.to_vector<uint16_t>(got.size()) != got) totals.fail(what + ": graph replay and eager forward differ");
      }
    } catch (const std::exception& e) {
      totals.fail(fmt::format("{}: {}", what, e.what()));
      if (totals.failures > 20) return;
    }
  }
}

int soak(const Options& o) {
  Runtime rt;
  CUcontext ctx = nullptr;
  check(driver().cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  const LayerSpec spec = o.config.empty() ? small_layer() : load_model_config(o.config).local();
  const HostLayer host = o.config.empty() ? make_random_layer(spec, o.seed) : make_random_code_layer(spec, o.seed);
  auto layer = rt.prepare(host);
  rt.prewarm(*layer, o.max_tokens);

  // A pool of x rows the forwards draw from (drawing M x H normals per forward would dominate the run).
  const int pool_rows = std::max(o.max_tokens, 512);
  const std::vector<uint16_t> x_pool = make_random_inputs(spec, pool_rows, o.seed + 1).x;

  std::vector<std::unique_ptr<Worker>> workers;
  for (int t = 0; t < o.threads; ++t) {
    auto w = std::make_unique<Worker>();
    const size_t m = static_cast<size_t>(o.max_tokens);
    w->x = DeviceBuffer(m * spec.hidden * 2);
    w->ids = DeviceBuffer(m * spec.top_k * 4);
    w->weights = DeviceBuffer(m * spec.top_k * 4);
    w->out = DeviceBuffer(m * spec.hidden * 2);
    w->workspace_bytes = rt.workspace_size(*layer, o.max_tokens);
    w->workspace = DeviceBuffer(w->workspace_bytes);
    w->workspace.fill_bytes(0xA5);
    // Captured here, before any worker runs, so no capture overlaps another thread's legacy-stream copies.
    for (int tokens : kGraphTokens) {
      if (tokens > o.max_tokens) continue;
      const ForwardArgs a = w->args(tokens);
      w->graphs[tokens] = std::make_unique<CapturedGraph>(w->stream.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                                          [&] { rt.forward(*layer, a); });
    }
    workers.push_back(std::move(w));
  }

  Totals totals;
  auto run_all = [&](long total) {
    std::vector<std::thread> threads;
    for (int t = 0; t < o.threads; ++t) {
      const long share = total / o.threads + (t < total % o.threads ? 1 : 0);
      threads.emplace_back([&, t, share] {
        try {
          run_worker(t, o, rt, *layer, host, *workers[static_cast<size_t>(t)], x_pool, pool_rows, share, ctx, totals);
        } catch (const std::exception& e) {
          totals.fail(fmt::format("thread {}: {}", t, e.what()));
        }
      });
    }
    for (auto& th : threads) th.join();
  };

  // Warm-up (every allocator and module settled), then the measured run between two memory readings.
  run_all(std::min<long>(o.forwards, 200L * o.threads));
  const double device_before = device_used_bytes(), host_before = host_rss_bytes();
  const auto t0 = std::chrono::steady_clock::now();
  totals.forwards = 0;
  totals.graph_forwards = 0;
  totals.checks = 0;
  run_all(o.forwards);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
  const double device_after = device_used_bytes(), host_after = host_rss_bytes();

  fmt::print("gpu_soak: {} on {}: {} forwards ({} through graphs), {} checked against the CPU reference, {} threads, "
             "M 0..{}, {:.1f} s\n",
             o.config.empty() ? "small layer" : o.config, rt.device_name(), totals.forwards.load(),
             totals.graph_forwards.load(), totals.checks.load(), o.threads, o.max_tokens, seconds);
  fmt::print("gpu_soak: device memory used {:.1f} -> {:.1f} MiB, host RSS {:.1f} -> {:.1f} MiB\n", device_before / 1048576,
             device_after / 1048576, host_before / 1048576, host_after / 1048576);
  if (device_after - device_before > kDeviceSlackBytes) totals.fail("device memory grew during the run");
  if (host_after - host_before > kHostSlackBytes) totals.fail("host memory grew during the run");
  if (totals.forwards < o.forwards && totals.failures == 0) totals.fail("not every forward ran");
  fmt::print("gpu_soak: {}\n", totals.failures ? fmt::format("{} FAILURES", totals.failures.load()) : std::string("PASS"));
  return totals.failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse_options(argc, argv);
    std::string why;
    if (!gpu_available(&why)) {
      std::printf("gpu_soak: skipped: no usable GPU (%s)\n", why.c_str());
      return 77;
    }
    return soak(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_soak: error: %s\n", e.what());
    return 2;
  }
}
