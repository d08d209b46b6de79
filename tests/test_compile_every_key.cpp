// NVRTC compiles every kernel key a layer can need (DESIGN §8), for sm_90a, sm_120a and sm_121a: every bundled
// model config over the whole token range the planner serves (M = 1..kMaxTokens: decode, the route kernel,
// the batch family and its warpgroup-MMA tiles, the prefill family, the repack kernel), plus layers no bundled config has
// (gelu_tanh; silu with a clamp; up/gate row order; expert parallelism). Compiled through `moejit
// prewarm`, the path operators use, with two worker processes into a private cache; the planner's own key
// count is the expected one, so a key that fails to compile, or one the CLI would skip, fails the test.
// Every SM12x kernel then fits the architecture's limits (arch_limits) by its ptxas resource report.
// test_compile_default.cpp checks the default config's kernels one by one (registers and spills).
#include "catch_compat.hpp"

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "cli_process.hpp"
#include "moejit/generator.hpp"
#include "moejit/kernel_cache.hpp"
#include "moejit/model_config.hpp"
#include "moejit/planner.hpp"

using namespace moejit;

namespace {

moejit_test::Sandbox& sandbox() {
  static moejit_test::Sandbox s;
  return s;
}

// Layers outside the bundled configs, as config files (activation, format, bias, clamp and row order
// change the generated code; the geometry picks different tiles).
struct ExtraConfig {
  const char* name;
  const char* json;
};
const ExtraConfig kExtraConfigs[] = {
    {"gelu-tanh-mxfp4-bias",
     R"({"name": "gelu-tanh-mxfp4-bias", "format": "mxfp4", "activation": "gelu_tanh", "experts": 32,
         "hidden": 2048, "intermediate": 1024, "top_k": 4, "bias": true, "gate_up_order": "up_gate"})"},
    {"silu-limit-nvfp4-ep",
     R"({"name": "silu-limit-nvfp4-ep", "format": "nvfp4", "activation": "silu", "experts": 64,
         "hidden": 4096, "intermediate": 1408, "top_k": 6, "swiglu_limit": 10.0, "ep": 4, "ep_rank": 1})"},
    // The activation precisions (x and the intermediate quantized inside the kernels, in every family:
    // decode, batch with its warpgroup-MMA tiles, prefill): gpt-oss-120b's layer in a8 and Qwen3-30B-A3B's
    // in a4, and NVFP4 relu2 (one FC1 matrix: a4's scales sit elsewhere in the scale plane) in a8 and a4
    // with I / 16 odd (an a8 block of one slab: a decode CTA or warpgroup-MMA warp without a partner).
    {"gpt-oss-120b-a8",
     R"({"name": "gpt-oss-120b-a8", "format": "mxfp4", "activation": "swigluoai", "experts": 128, "hidden": 2880,
         "intermediate": 2880, "top_k": 4, "bias": true, "gate_up_order": "interleaved", "swiglu_limit": 7.0,
         "precision": "a8"})"},
    {"qwen3-30b-a3b-a4",
     R"({"name": "qwen3-30b-a3b-a4", "format": "nvfp4", "activation": "silu", "experts": 128, "hidden": 2048,
         "intermediate": 768, "top_k": 8, "precision": "a4"})"},
    {"relu2-nvfp4-a8",
     R"({"name": "relu2-nvfp4-a8", "format": "nvfp4", "activation": "relu2", "experts": 64, "hidden": 1040,
         "intermediate": 1872, "top_k": 6, "precision": "a8"})"},
    {"relu2-nvfp4-a4",
     R"({"name": "relu2-nvfp4-a4", "format": "nvfp4", "activation": "relu2", "experts": 64, "hidden": 1040,
         "intermediate": 1872, "top_k": 6, "precision": "a4"})"},
};

// Every key of a config's local layer for 1..kMaxTokens tokens, and the repack kernel.
std::set<KernelKey> expected_keys(const ModelConfig& cfg, Arch arch) {
  const std::vector<KernelKey> planned = keys_for_range(cfg.local(), arch, kMaxTokens, 132);
  std::set<KernelKey> keys(planned.begin(), planned.end());
  KernelKey prep;
  prep.kind = KernelKind::prepare;
  prep.arch = arch;
  keys.insert(prep.normalized());
  return keys;
}

// What a kernel's launch bounds promise must be what the architecture can hold: its registers for the
// CTAs per SM it is built for, its static and dynamic shared memory per CTA and per SM (with what the
// driver reserves per CTA), its threads and CTAs per SM. Resources from the ptxas report of the entry.
void check_fits(const KernelKey& key, const nlohmann::json& resources) {
  const ArchLimits& a = arch_limits(key.arch);
  const int registers = resources.at("registers").get<int>(), shared = resources.at("shared_bytes").get<int>();
  const int threads = kernel_threads(key), dynamic = kernel_dynamic_smem(key), ctas = kernel_ctas_per_sm(key);
  INFO(key.str() << ": " << registers << " registers, " << shared << " + " << dynamic << " bytes of shared memory, "
                 << threads << " threads, " << ctas << " CTAs per SM");
  REQUIRE(registers > 0);
  REQUIRE(shared >= 0);
  CHECK(static_cast<long>(registers) * threads * ctas <= a.registers_per_sm);
  CHECK(shared + dynamic <= a.max_dynamic_smem);
  CHECK(ctas * (shared + dynamic + a.smem_reserved) <= a.smem_per_sm);
  CHECK(threads * ctas <= a.max_threads_per_sm);
  CHECK(ctas <= a.max_ctas_per_sm);
}

void prewarm_everything(const std::string& config_arg, const ModelConfig& cfg) {
  for (Arch arch : {Arch::sm_90a, Arch::sm_120a, Arch::sm_121a}) {
    const size_t n = expected_keys(cfg, arch).size();
    INFO(config_arg << " " << to_string(arch) << ": " << n << " keys");
    const moejit_test::CliResult r = moejit_test::run_cli({"prewarm", "--config", config_arg, "--arch", std::string(to_string(arch)),
                                                           "--max-tokens", std::to_string(kMaxTokens), "--sm-count", "132",
                                                           "--jobs", "2", "--quiet"});
    INFO(r.out);
    CHECK(r.rc == 0);
    CHECK_THAT(r.out, Catch::Contains(": " + std::to_string(n) + " kernels:"));
    if (arch == Arch::sm_90a) continue;
    CacheOptions options;
    options.no_jit = true;  // what prewarm stored, never a compile here
    KernelCache cache(options);
    for (const KernelKey& key : expected_keys(cfg, arch)) check_fits(key, cache.get(key)->manifest.at("resources"));
  }
}

}  // namespace

TEST_CASE("every key of every bundled config compiles for sm_90a, sm_120a and sm_121a, and SM12x kernels fit",
          "[compile][every]") {
  (void)sandbox();
  const std::vector<std::string> names = bundled_config_names();
  REQUIRE(names.size() >= 6);
  for (const std::string& name : names) prewarm_everything(name, load_model_config(name));
}

TEST_CASE("every key of layers no bundled config covers compiles for sm_90a, sm_120a and sm_121a", "[compile][every]") {
  for (const ExtraConfig& c : kExtraConfigs) {
    const std::string path = sandbox().dir + "/" + c.name + ".json";
    std::ofstream(path) << c.json;
    prewarm_everything(path, load_model_config(path));
  }
}
