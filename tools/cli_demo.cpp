// `moejit demo`: the whole pipeline on one config (default gpt-oss-120b).
//   with a GPU:    parallel prewarm for the GPU's arch; a random layer run at M = 1, 4, 16, 64 and
//                  checked against the fp64 CPU reference; the CUDA-graph benchmark for M = 1..64.
//   without a GPU: says why; prewarms the cache for sm_90a (as an operator would before a server
//                  starts); prints the plan for M = 1..64 and what the cache now holds.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "moejit/codecs.hpp"
#include "moejit/error.hpp"
#include "moejit/kernel_cache.hpp"
#include "moejit/reference.hpp"
#include "moejit/runtime.hpp"
#include "tools/cli_common.hpp"

namespace moejit::cli {

namespace {

int demo_without_gpu(const ModelConfig& cfg, const LayerSpec& local, const std::string& why, int jobs, int max_m) {
  const Arch arch = Arch::sm_90a;
  const int sms = 132;  // H200
  const TuningOverrides tuning = TuningOverrides::from_environment();  // read once for every plan below
  fmt::print("no usable GPU: {}\n", why);
  fmt::print("=> prewarming the kernel cache for {} (H200, {} SMs) as an operator would before starting a server,\n"
             "   then showing the plan; run the demo on a machine with a GPU to execute, check and time the layer.\n\n",
             to_string(arch), sms);
  fmt::print("[1/3] prewarm {} ({}) for {}, M 1..{}\n", cfg.name, describe_spec(local), to_string(arch), max_m);
  std::fflush(stdout);
  const PrewarmSummary s = parallel_prewarm(prewarm_keys(local, arch, max_m, sms, Family::automatic, tuning), jobs);
  print_prewarm_summary(s, fmt::format("{} {}", cfg.name, to_string(arch)));
  fmt::print("\n[2/3] plan for M = 1..{} on {}\n", max_m, to_string(arch));
  std::vector<int> tokens;
  for (int m = 1; m <= max_m; ++m) tokens.push_back(m);
  print_plan_table(local, arch, sms, tokens, Family::automatic, tuning);
  fmt::print("\n[3/3] cache contents\n");
  CacheOptions opts;
  opts.no_jit = true;
  KernelCache cache(opts);
  print_cache_summary(cache);
  return s.failed || s.degraded ? kExitFailed : kExitOk;
}

int demo_with_gpu(const ModelConfig& cfg, const LayerSpec& local, int jobs, int max_m, int replays, uint64_t seed) {
  // From the child-process probe: the prewarm workers are forked before this process initializes CUDA.
  const GpuProbe& gpu = gpu_probe();
  const Arch arch = *gpu.info.arch;
  const int sms = gpu.info.sm_count;
  const std::string device = gpu.info.name;
  const TuningOverrides tuning = TuningOverrides::from_environment();  // read once for every plan below
  fmt::print("GPU: {} ({}, {} SMs)\n\n[1/3] prewarm {} ({}) for {}, M 1..{}\n", device, to_string(arch), sms, cfg.name,
             describe_spec(local), to_string(arch), max_m);
  std::fflush(stdout);
  const PrewarmSummary pw = parallel_prewarm(prewarm_keys(local, arch, max_m, sms, Family::automatic, tuning), jobs);
  print_prewarm_summary(pw, fmt::format("{} {}", cfg.name, to_string(arch)));
  if (pw.failed) return kExitFailed;

  RuntimeOptions options;
  options.tuning = tuning;  // the plans prewarmed above
  Runtime rt(options);
  std::shared_ptr<PreparedLayer> prepared;
  HostLayer layer;
  {
    const auto t0 = std::chrono::steady_clock::now();
    layer = make_random_code_layer(local, seed);
    const auto t1 = std::chrono::steady_clock::now();
    prepared = rt.prepare(layer);
    const auto t2 = std::chrono::steady_clock::now();
    fmt::print("\nrandom layer: {} of FP4 weights and scales generated in {:.1f} s, prepared on the GPU in {:.1f} ms\n",
               human_bytes(static_cast<double>(layer.w13.size() + layer.w13_scale.size() + layer.w2.size() +
                                               layer.w2_scale.size())),
               std::chrono::duration<double>(t1 - t0).count(),
               std::chrono::duration<double, std::milli>(t2 - t1).count());
  }

  fmt::print("\n[2/3] GPU vs fp64 CPU reference (pass: rel_l2 <= {:g}, all finite)\n", kCheckRelL2);
  fmt::print("{:>5} {:>8} {:>12} {:>12} {:>12}  {}\n", "M", "family", "rel_l2", "cosine", "max_abs", "");
  bool all_ok = true;
  for (int m : {1, 4, 16, 64}) {
    if (m > max_m) continue;
    const HostInputs in = make_random_inputs(local, m, seed + 100 + static_cast<uint64_t>(m));
    const std::vector<uint16_t> out = forward_once(rt, *prepared, in);
    const ReferenceOutput ref = reference_forward(layer, in);
    std::vector<float> actual(out.size());
    for (size_t i = 0; i < out.size(); ++i) actual[i] = bf16_to_float(out[i]);
    const Agreement a = compare(actual, ref.out_f64);
    const bool ok = a.nonfinite == 0 && a.rel_l2 <= kCheckRelL2;
    all_ok = all_ok && ok;
    fmt::print("{:>5} {:>8} {:>12.3e} {:>12.7f} {:>12.3e}  {}\n", m, to_string(rt.plan(*prepared, m).family), a.rel_l2,
               a.cosine, a.max_abs, ok ? "PASS" : "FAIL");
    std::fflush(stdout);
  }
  layer = HostLayer{};  // free the host copy before timing

  fmt::print("\n[3/3] CUDA-graph timing, cold L2\n");
  std::vector<int> tokens;
  for (int m = 1; m <= max_m; m *= 2) tokens.push_back(m);
  if (tokens.back() != max_m) tokens.push_back(max_m);
  const BenchReport rep = run_bench(rt, *prepared, cfg.name, tokens, replays, seed, BenchFlush::read);
  print_bench_table(rep);
  if (!all_ok) fmt::print("demo: a GPU result was outside the tolerance of the CPU reference\n");
  return all_ok ? kExitOk : kExitFailed;
}

}  // namespace

int cmd_demo(int argc, char** argv) {
  static const CommandSpec spec{
      "demo",
      "[--config NAME|PATH] [--jobs N] [--max-tokens N] [--replays N] [--seed N]",
      "the whole pipeline on one config",
      "With a GPU: prewarms the config's kernels in parallel processes, runs a random layer at M = 1, 4, 16, 64\n"
      "and checks each against the fp64 CPU reference (rel_l2, cosine), then times M = 1, 2, 4, ... up to\n"
      "--max-tokens (default 64) inside CUDA graphs with a cold L2 (as `moejit bench`). Without a GPU: says why,\n"
      "prewarms the cache for sm_90a, prints the plan for M = 1 up to --max-tokens and the cache contents.\n"
      "Exits 1 when a check or a compile fails.",
      {{"config", "NAME|PATH", "bundled config name or JSON file (default: " + default_config_name() + ")"},
       {"jobs", "N", "prewarm worker processes (default: number of CPUs)"},
       {"max-tokens", "N", "largest M (default 64)"},
       {"replays", "N", "timed graph replays per M (default 100)"},
       {"seed", "N", "random seed (default 1)"}},
      {}};
  Args args(spec, argc, argv, 2);
  if (args.help()) {
    std::fputs(help_text(spec).c_str(), stdout);
    return kExitOk;
  }
  const ModelConfig cfg = config_from_args(args);
  const int jobs = args.integer("jobs", static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), 1, 1024);
  const int max_m = args.integer("max-tokens", 64, 1, kMaxTokens);
  const int replays = args.integer("replays", 100, 1, 1000000);
  const int seed = args.integer("seed", 1, 0);
  const LayerSpec local = cfg.local();
  fmt::print("moejit demo: {} — {}\n", cfg.name, describe_spec(local));
  if (!gpu_probe().usable()) return demo_without_gpu(cfg, local, gpu_probe().why, jobs, max_m);
  return demo_with_gpu(cfg, local, jobs, max_m, replays, static_cast<uint64_t>(seed));
}

}  // namespace moejit::cli
