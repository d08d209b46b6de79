// An example inference server embedding moejit: how a C++ server is meant to use the runtime.
//
//   1. Prewarm at start: a Runtime compiles (or finds in the on-disk cache) every kernel the layer needs
//      for up to --max-tokens tokens, as `moejit prewarm` would.
//   2. Serve with MOEJIT_NO_JIT=1: a second Runtime, made after the variable is set, can only load
//      cached kernels, so a request never waits on a compile (a miss would be an error, not a stall).
//   3. Several worker threads, each with its own CUDA stream, buffers and one CUDA graph per token
//      bucket (1, 2, 4, ... --max-tokens) captured once at start; a request of M tokens runs the graph
//      of the smallest bucket >= M, its padding rows routed nowhere (expert id -1 contributes nothing,
//      DESIGN §1). forward allocates nothing and never synchronizes, so capturing it is legal.
//   4. Every --check-every-th request of each thread is checked against the fp64 CPU reference
//      (rel_l2 <= 1e-2, every value finite, padding rows exactly zero).
//
// The layer is a bundled model config's geometry with random weights (--config), or a layer of a
// checkpoint directory (--checkpoint DIR --layer N). Without a GPU the server says so and exits 77.
//
// Exit status: 0 all requests served and every check passed; 1 a check failed; 2 an error; 77 no GPU.
#include <moejit/checkpoint.hpp>
#include <moejit/codecs.hpp>
#include <moejit/error.hpp>
#include <moejit/host_layer.hpp>
#include <moejit/model_config.hpp>
#include <moejit/reference.hpp>
#include <moejit/runtime.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cuda_driver.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string config = "qwen3-30b-a3b";
  std::string checkpoint;
  int layer = -1;
  int threads = 4;
  int requests = 100;  // per thread
  int max_tokens = 64;
  int check_every = 25;
  uint64_t seed = 1;
};

const char* kUsage =
    "usage: moejit_server [--config NAME|PATH | --checkpoint DIR --layer N] [--threads T] [--requests R]\n"
    "                     [--max-tokens B] [--check-every C] [--seed S]\n"
    "Serves R requests per thread (random batch sizes 1..B) on T threads, each with its own CUDA stream and\n"
    "CUDA graphs per token bucket, after prewarming; checks every C-th request against the CPU reference.\n"
    "Defaults: --config qwen3-30b-a3b (random weights), --threads 4, --requests 100, --max-tokens 64,\n"
    "--check-every 25. Needs a GPU (exits 77 without one).\n";

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    static const char* kOptions[] = {"--config", "--checkpoint", "--layer", "--threads",
                                     "--requests", "--max-tokens", "--check-every", "--seed"};
    if (std::find(std::begin(kOptions), std::end(kOptions), a) == std::end(kOptions))
      throw std::invalid_argument("unknown option " + a + " (--help)");
    if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value (--help)");
    const std::string v = argv[++i];
    auto number = [&](int lo, int hi) {
      const long n = std::strtol(v.c_str(), nullptr, 10);
      if (n < lo || n > hi) throw std::invalid_argument(a + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      return static_cast<int>(n);
    };
    if (a == "--config") o.config = v;
    else if (a == "--checkpoint") o.checkpoint = v;
    else if (a == "--layer") o.layer = number(0, 1 << 20);
    else if (a == "--threads") o.threads = number(1, 64);
    else if (a == "--requests") o.requests = number(1, 1 << 24);
    else if (a == "--max-tokens") o.max_tokens = number(1, 4096);
    else if (a == "--check-every") o.check_every = number(1, 1 << 24);
    else o.seed = static_cast<uint64_t>(number(0, 1 << 30));  // --seed
  }
  if (!o.checkpoint.empty() && o.layer < 0) throw std::invalid_argument("--checkpoint needs --layer N");
  return o;
}

// Token buckets 1, 2, 4, ... up to max_tokens (which is always the last).
std::vector<int> buckets(int max_tokens) {
  std::vector<int> b;
  for (int m = 1; m < max_tokens; m *= 2) b.push_back(m);
  b.push_back(max_tokens);
  return b;
}

struct Stats {
  std::mutex mu;
  std::vector<double> latency_us;
  long tokens = 0;
  int checks = 0, failures = 0;
};

// One worker: its stream, its buffers (sized for the largest bucket) and a graph per bucket.
class Worker {
 public:
  Worker(moejit::Runtime& rt, const moejit::PreparedLayer& layer, const moejit::HostLayer& host, CUcontext ctx,
         const Options& o, int id, Stats& stats)
      : rt_(rt), layer_(layer), host_(host), ctx_(ctx), o_(o), id_(id), stats_(stats) {}

  void run() {
    const server::Driver& d = server::driver();
    server::check(d.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");  // buffers and streams of the runtime's device
    CUstream stream = nullptr;
    server::check(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    const moejit::LayerSpec& spec = layer_.spec();
    const size_t B = static_cast<size_t>(o_.max_tokens), H = spec.hidden, K = spec.top_k;
    x_ = moejit::DeviceBuffer(B * H * 2);
    ids_ = moejit::DeviceBuffer(B * K * 4);
    weights_ = moejit::DeviceBuffer(B * K * 4);
    out_ = moejit::DeviceBuffer(B * H * 2);
    ws_bytes_ = rt_.workspace_size(layer_, o_.max_tokens);
    ws_ = moejit::DeviceBuffer(ws_bytes_);

    // One graph per bucket, captured once: each replays forward for that many tokens on these buffers.
    std::vector<std::pair<int, CUgraphExec>> graphs;
    for (int m : buckets(o_.max_tokens)) {
      server::check(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
      try {
        rt_.forward(layer_, args(m, stream));
      } catch (...) {
        CUgraph partial = nullptr;
        d.cuStreamEndCapture(stream, &partial);
        if (partial) d.cuGraphDestroy(partial);
        throw;
      }
      CUgraph g = nullptr;
      server::check(d.cuStreamEndCapture(stream, &g), "cuStreamEndCapture");
      CUgraphExec exec = nullptr;
      server::check(d.cuGraphInstantiateWithFlags(&exec, g, 0), "cuGraphInstantiate");
      server::check(d.cuGraphDestroy(g), "cuGraphDestroy");
      graphs.emplace_back(m, exec);
    }

    std::mt19937_64 rng(o_.seed * 1000003 + static_cast<uint64_t>(id_));
    std::vector<double> latencies;
    long tokens = 0;
    int checks = 0, failures = 0;
    std::vector<uint16_t> x(B * H), out(B * H);
    std::vector<int32_t> ids(B * K);
    std::vector<float> w(B * K);
    for (int r = 0; r < o_.requests; ++r) {
      const int m = 1 + static_cast<int>(rng() % static_cast<uint64_t>(o_.max_tokens));
      const auto& [bucket, exec] = *std::find_if(graphs.begin(), graphs.end(), [&](auto& g) { return g.first >= m; });
      const moejit::HostInputs in = moejit::make_random_inputs(spec, m, rng(), /*include_invalid=*/true);
      // Rows m..bucket-1 are padding: zero activations routed to no expert.
      std::fill(x.begin(), x.end(), 0);
      std::fill(ids.begin(), ids.end(), -1);
      std::fill(w.begin(), w.end(), 0.0f);
      std::copy(in.x.begin(), in.x.end(), x.begin());
      std::copy(in.topk_ids.begin(), in.topk_ids.end(), ids.begin());
      std::copy(in.topk_weights.begin(), in.topk_weights.end(), w.begin());

      const auto t0 = Clock::now();
      const size_t nb = static_cast<size_t>(bucket);
      server::check(d.cuMemcpyHtoDAsync(x_.ptr(), x.data(), nb * H * 2, stream), "upload x");
      server::check(d.cuMemcpyHtoDAsync(ids_.ptr(), ids.data(), nb * K * 4, stream), "upload topk_ids");
      server::check(d.cuMemcpyHtoDAsync(weights_.ptr(), w.data(), nb * K * 4, stream), "upload topk_weights");
      server::check(d.cuGraphLaunch(exec, stream), "cuGraphLaunch");
      server::check(d.cuMemcpyDtoHAsync(out.data(), out_.ptr(), nb * H * 2, stream), "download out");
      server::check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
      latencies.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      tokens += m;

      if (r % o_.check_every == 0) {
        ++checks;
        const moejit::ReferenceOutput ref = moejit::reference_forward(host_, in);
        std::vector<float> got(static_cast<size_t>(m) * H);
        for (size_t i = 0; i < got.size(); ++i) got[i] = moejit::bf16_to_float(out[i]);
        bool padding_zero = true;
        for (size_t i = got.size(); i < nb * H; ++i) padding_zero = padding_zero && (out[i] & 0x7FFF) == 0;
        const moejit::Agreement a = moejit::compare(got, ref.out_f64);
        const bool ok = a.nonfinite == 0 && a.rel_l2 <= 1e-2 && padding_zero;
        if (!ok) {
          ++failures;
          std::fprintf(stderr, "thread %d request %d (M=%d, bucket %d): rel_l2 %.3e nonfinite %lld padding %s: FAIL\n",
                       id_, r, m, bucket, a.rel_l2, static_cast<long long>(a.nonfinite),
                       padding_zero ? "zero" : "NOT zero");
        }
      }
    }
    for (auto& [m, exec] : graphs) d.cuGraphExecDestroy(exec);
    d.cuStreamDestroy(stream);
    std::lock_guard<std::mutex> lock(stats_.mu);
    stats_.latency_us.insert(stats_.latency_us.end(), latencies.begin(), latencies.end());
    stats_.tokens += tokens;
    stats_.checks += checks;
    stats_.failures += failures;
  }

 private:
  moejit::ForwardArgs args(int tokens, CUstream stream) const {
    moejit::ForwardArgs a;
    a.x = x_.ptr();
    a.topk_ids = ids_.ptr();
    a.topk_weights = weights_.ptr();
    a.out = out_.ptr();
    a.tokens = tokens;
    a.workspace = ws_.ptr();
    a.workspace_bytes = ws_bytes_;
    a.stream = stream;
    // Sizes let forward refuse a bucket larger than the buffers instead of running past them.
    a.x_bytes = x_.size();
    a.topk_ids_bytes = ids_.size();
    a.topk_weights_bytes = weights_.size();
    a.out_bytes = out_.size();
    return a;
  }

  moejit::Runtime& rt_;
  const moejit::PreparedLayer& layer_;
  const moejit::HostLayer& host_;
  CUcontext ctx_;
  const Options& o_;
  int id_;
  Stats& stats_;
  moejit::DeviceBuffer x_, ids_, weights_, out_, ws_;
  size_t ws_bytes_ = 0;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int serve(const Options& o) {
  std::string why;
  if (!moejit::gpu_available(&why)) {
    std::fprintf(stderr, "moejit_server: no usable GPU (%s); this example serves on a CUDA device\n", why.c_str());
    return 77;
  }
  // The layer's weights in host memory (a server would load them from its checkpoint).
  auto t = Clock::now();
  moejit::HostLayer host;
  std::string name;
  if (!o.checkpoint.empty()) {
    host = moejit::load_checkpoint_layer(o.checkpoint, o.layer);
    name = o.checkpoint + " layer " + std::to_string(o.layer);
  } else {
    const moejit::ModelConfig cfg = moejit::load_model_config(o.config);
    host = moejit::make_random_code_layer(cfg.local(), o.seed);
    name = cfg.name + " (random weights)";
  }
  std::printf("layer: %s, E=%d H=%d I=%d top_k=%d (%.1f s)\n", name.c_str(), host.spec.experts, host.spec.hidden,
              host.spec.intermediate, host.spec.top_k, seconds_since(t));

  // 1. Prewarm: compile or load every kernel forward may need, into the on-disk cache.
  t = Clock::now();
  ::unsetenv("MOEJIT_NO_JIT");
  {
    moejit::Runtime warm;
    auto prepared = warm.prepare(host);
    warm.prewarm(*prepared, o.max_tokens);
    std::printf("prewarm: %s, %llu kernels compiled, the rest from the cache %s (%.1f s)\n", warm.device_name().c_str(),
                static_cast<unsigned long long>(warm.cache().compiles()), warm.cache().root().c_str(), seconds_since(t));
  }

  // 2. Serve with MOEJIT_NO_JIT=1 (read when a Runtime is made): kernels only come from the cache.
  ::setenv("MOEJIT_NO_JIT", "1", 1);
  moejit::Runtime rt;
  auto layer = rt.prepare(host);
  rt.prewarm(*layer, o.max_tokens);  // loads the cached modules before any graph is captured
  CUcontext ctx = nullptr;
  server::check(server::driver().cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");

  // 3. Worker threads with their own streams and graphs.
  Stats stats;
  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < o.threads; ++i) workers.push_back(std::make_unique<Worker>(rt, *layer, host, ctx, o, i, stats));
  std::vector<std::thread> threads;
  std::mutex err_mu;
  std::string first_error;
  t = Clock::now();
  for (auto& w : workers)
    threads.emplace_back([&, w = w.get()] {
      try {
        w->run();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (first_error.empty()) first_error = e.what();
      }
    });
  for (auto& th : threads) th.join();
  const double wall = seconds_since(t);
  if (!first_error.empty()) throw std::runtime_error(first_error);

  std::sort(stats.latency_us.begin(), stats.latency_us.end());
  auto pct = [&](double p) { return stats.latency_us[static_cast<size_t>(p * (stats.latency_us.size() - 1))]; };
  std::printf("served %zu requests (%ld tokens) on %d threads in %.2f s: %.0f tokens/s; latency p50 %.0f us, p99 %.0f us\n",
              stats.latency_us.size(), stats.tokens, o.threads, wall, stats.tokens / wall, pct(0.5), pct(0.99));
  std::printf("checked %d requests against the CPU reference: %d failed -> %s\n", stats.checks, stats.failures,
              stats.failures == 0 ? "PASS" : "FAIL");
  return stats.failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return serve(parse(argc, argv));
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "moejit_server: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moejit_server: error: %s\n", e.what());
    return 2;
  }
}
