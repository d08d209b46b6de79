// `moejit plan|prewarm|run --checkpoint DIR` on small synthetic checkpoints (tests/checkpoint_writer.hpp),
// run as a separate process with a private cache directory.
#include "catch_compat.hpp"

#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint_writer.hpp"
#include "cli_process.hpp"
#include "moejit/host_layer.hpp"
#include "moejit/runtime.hpp"

using namespace moejit;
using Catch::Contains;

namespace {

moejit_test::Sandbox& sandbox() {
  static moejit_test::Sandbox s;
  return s;
}

moejit_test::CliResult cli(const std::vector<std::string>& args) {
  (void)sandbox();
  return moejit_test::run_cli(args);
}

LayerSpec small_nvfp4() {
  LayerSpec s;
  s.format = ScaleFormat::nvfp4;
  s.activation = Activation::silu;
  s.experts = 8;
  s.hidden = 128;
  s.intermediate = 64;
  s.top_k = 2;
  return s;
}

// DeepSeek-style ModelOpt checkpoint, MoE layers 1 and 2; split: up's weight_scale_2 differs from gate's.
std::string modelopt_checkpoint(bool split) {
  const std::string dir = sandbox().dir + (split ? "/ckpt-split" : "/ckpt");
  if (!std::filesystem::exists(dir)) {
    HostLayer L = make_random_layer(small_nvfp4(), 3);
    if (split) {
      std::vector<float> gs;
      for (float g : L.w13_global_scale) gs.insert(gs.end(), {g, 2 * g});
      L.w13_global_scale = gs;
    }
    moejit_test::write_modelopt_checkpoint(dir, {{1, L}, {2, L}});
  }
  return dir;
}

}  // namespace

TEST_CASE("cli checkpoint: plan reads the geometry and slices it", "[cli][checkpoint]") {
  const std::string dir = modelopt_checkpoint(false);
  auto r = cli({"plan", "--checkpoint", dir, "--arch", "sm_90a", "--tokens", "1,2"});
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("plan deepseek_v3") && Contains("tp=1 ep=1 ep_rank=0") && Contains("decode_fc1:sm_90a:nvfp4:silu"));
  CHECK_THAT(r.out, Contains("E8:H128:I64"));

  r = cli({"plan", "--checkpoint", dir, "--arch", "sm_90a", "--tokens", "1", "--tp", "2", "--ep", "2", "--ep-rank", "1"});
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("tp=2 ep=2 ep_rank=1") && Contains("E4:H128:I32"));

  // Usage errors name the option.
  r = cli({"plan", "--checkpoint", dir, "--config", "gpt-oss-120b"});
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, Contains("--config and --checkpoint"));
  r = cli({"plan", "--tp", "2"});
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, Contains("--tp applies to --checkpoint"));
  r = cli({"plan", "--checkpoint", dir, "--tp", "3"});
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, Contains("--checkpoint " + dir) && Contains("not divisible by tp = 3"));
  r = cli({"plan", "--checkpoint", sandbox().dir + "/nothing-here"});
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, Contains("not a directory"));
}

TEST_CASE("cli checkpoint: prewarm compiles what the checkpoint's layer needs", "[cli][checkpoint]") {
  const std::string dir = modelopt_checkpoint(false);
  auto r = cli({"prewarm", "--checkpoint", dir, "--arch", "sm_90a", "--max-tokens", "1", "--jobs", "2", "--quiet"});
  INFO(r.out);
  CHECK(r.rc == 0);
  r = cli({"plan", "--checkpoint", dir, "--arch", "sm_90a", "--tokens", "1"});
  // Everything the plan names is now cached.
  auto ls = cli({"cache", "ls"});
  INFO(ls.out);
  CHECK_THAT(ls.out, Contains("E8:H128:I64"));
}

TEST_CASE("cli checkpoint: run loads layer N (fails clearly without a GPU, checks with one)", "[cli][checkpoint]") {
  const std::string dir = modelopt_checkpoint(false);
  std::string why;
  const bool gpu = gpu_available(&why);
  auto r = cli({"run", "--checkpoint", dir, "--layer", "0"});
  INFO(r.out);
  CHECK(r.rc == 2);
  // The checkpoint's headers and the slice are checked before the GPU, the layer's weights after.
  CHECK_THAT(r.out, Contains(gpu ? "layer 0 has no routed experts (MoE layers: 1,2)" : "no usable GPU"));
  r = cli({"run", "--checkpoint", dir, "--layer", "1", "--ep", "3"});
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, Contains("experts = 8 is not divisible by ep = 3"));
  r = cli({"run", "--layer", "x.safetensors", "--input", "i", "--output", "o", "--tokens", "3"});
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, Contains("--tokens applies to --checkpoint"));

  r = cli({"run", "--checkpoint", dir, "--layer", "2", "--tokens", "5", "--ep", "2", "--ep-rank", "1", "--check"});
  INFO(r.out);
  auto split = cli({"run", "--checkpoint", modelopt_checkpoint(true), "--layer", "1", "--check"});
  INFO(split.out);
  if (!gpu) {
    CHECK(r.rc == 2);
    CHECK_THAT(r.out, Contains("no usable GPU"));
    CHECK(split.rc == 2);
    CHECK_THAT(split.out, Contains("no usable GPU"));
  } else {
    CHECK(r.rc == 0);
    CHECK_THAT(r.out, Contains("PASS"));
    // Distinct gate/up global scales: loaded exactly, refused by the kernels with the reason.
    CHECK(split.rc == 2);
    CHECK_THAT(split.out, Contains("w13_global_scale [E, 2]") && Contains("one FC1 global scale per expert"));
  }
}
