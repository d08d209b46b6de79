// The `moejit` command-line tool, run as a separate process with a private cache directory.
#include "catch_compat.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_process.hpp"
#include "moejit/host_layer.hpp"
#include "moejit/model_config.hpp"
#include "moejit/planner.hpp"
#include "moejit/runtime.hpp"
#include "moejit/safetensors.hpp"

using namespace moejit;

namespace {

moejit_test::Sandbox& sandbox() {
  static moejit_test::Sandbox s;
  return s;
}

using Result = moejit_test::CliResult;

Result cli(const std::vector<std::string>& args) {
  (void)sandbox();
  return moejit_test::run_cli(args);
}

// The decode FC1 kernel the planner picks for qwen3-30b-a3b at M = 1 on sm_90a.
std::string fc1_key() {
  static const std::string key = [] {
    const auto plan = make_plan(load_model_config("qwen3-30b-a3b").local(), Arch::sm_90a, 1, 132);
    for (const auto& k : plan.kernels)
      if (k.kind == KernelKind::decode_fc1) return k.str();
    return std::string("no decode_fc1 kernel in the plan");
  }();
  return key;
}

}  // namespace

TEST_CASE("cli: help and version", "[cli]") {
  Result r = cli({"--help"});
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("prewarm") && Catch::Contains("inspect") && Catch::Contains("bench"));
  for (const char* c : {"prewarm", "inspect", "cache", "plan", "run", "bench", "demo", "version"}) {
    INFO(c);
    r = cli({c, "--help"});
    CHECK(r.rc == 0);
    CHECK_THAT(r.out, Catch::Contains(std::string("usage: moejit ") + c));
  }
  r = cli({"run", "--help"});
  CHECK_THAT(r.out, Catch::Contains("rel_l2 <= 0.01"));  // the --check tolerance is documented
  r = cli({"version"});
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("nvrtc") && Catch::Contains("gpt-oss-120b") && Catch::Contains("driver ") &&
                        Catch::Contains("gpu "));
}

TEST_CASE("cli: plan", "[cli]") {
  Result r = cli({"plan", "--arch", "sm_90a"});
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("gpt-oss-120b") && Catch::Contains("decode_fc1:sm_90a:mxfp4:swigluoai"));
  if (!gpu_available()) {
    // Without a GPU of the named architecture the SM count is an assumption, and the output says so.
    CHECK_THAT(r.out, Catch::Contains("132 SMs (the H100/H200 SXM's, assumed: no usable GPU here; pass --sm-count "
                                      "for the target GPU)"));
    // Each architecture's usual GPU: a GB10 for sm_121a.
    const Result spark = cli({"plan", "--arch", "sm_121a", "--tokens", "1"});
    INFO(spark.out);
    CHECK(spark.rc == 0);
    CHECK_THAT(spark.out, Catch::Contains("48 SMs (the GB10 (DGX Spark)'s, assumed") &&
                              Catch::Contains(":sm_121a:mxfp4:swigluoai:a16:E128:H2880:I2880:"));
  }

  r = cli({"plan", "--config", "qwen3-30b-a3b", "--arch", "sm_120a", "--tokens", "1,8,9", "--sm-count", "84"});
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("decode_fc1:sm_120a:nvfp4:silu:a16:E128:H2048:I768:") &&
                        Catch::Contains("84 SMs"));
  // Every key the planner picks appears.
  const auto cfg = load_model_config("qwen3-30b-a3b");
  for (int m : {1, 8, 9})
    for (const auto& k : make_plan(cfg.local(), Arch::sm_120a, m, 84).kernels) CHECK_THAT(r.out, Catch::Contains(k.str()));

  // Past the cutovers the automatic plan is the batch family, then on sm_90a the prefill family; --family
  // forces any where it can serve M.
  r = cli({"plan", "--config", "deepseek-v3", "--arch", "sm_90a", "--tokens", "64,1024,4096"});
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("decode_fc1:sm_90a:nvfp4") && Catch::Contains("batch_fc1:sm_90a:nvfp4") &&
                        Catch::Contains("batch_fc2:sm_90a:nvfp4") && Catch::Contains("prefill_fc1:sm_90a:nvfp4") &&
                        Catch::Contains("prefill_fc2:sm_90a:nvfp4"));
  r = cli({"plan", "--config", "deepseek-v3", "--arch", "sm_90a", "--tokens", "1", "--family", "batch"});
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("batch_fc1:sm_90a:nvfp4:silu:a16:E256:H7168:I2048:w4n1d3o0:b0:l0:i0"));
  // A forced family that cannot serve M: the row says why (the table goes on for the other M).
  r = cli({"plan", "--config", "deepseek-v3", "--arch", "sm_90a", "--tokens", "300", "--family", "decode"});
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("the decode family serves at most 256 tokens, asked for 300"));
  // --precision: the plan's FC1 and FC2 keys name it, the route kernel stays a16; a8 takes a16's families
  // and tiles (8 pairs per expert: register-fed batch tiles, whose a8 FC1 holds two slabs per warp; 16: a
  // warpgroup-MMA tile; 128: the prefill family); an unknown precision is a usage error.
  r = cli({"plan", "--config", "deepseek-v3", "--arch", "sm_90a", "--tokens", "1,256,512,4096", "--precision", "a8"});
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("gate_up a8)") && Catch::Contains("decode_fc1:sm_90a:nvfp4:silu:a8:") &&
                        Catch::Contains("route:sm_90a:mxfp4:silu:a16:") && Catch::Contains("batch_fc1:sm_90a:nvfp4:silu:a8:") &&
                        Catch::Contains("s2:b0") && Catch::Contains("m:b0") &&
                        Catch::Contains("prefill_fc1:sm_90a:nvfp4:silu:a8:"));
  r = cli({"plan", "--config", "deepseek-v3", "--arch", "sm_90a", "--tokens", "1", "--precision", "a2"});
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, Catch::Contains("--precision"));
}

TEST_CASE("cli: inspect source and ptx", "[cli]") {
  Result r = cli({"inspect", fc1_key(), "--emit", "source"});
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("extern \"C\"") && Catch::Contains(KernelKey::parse(fc1_key()).entry_name()));

  r = cli({"inspect", fc1_key()});  // source is the default
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("extern \"C\""));

  r = cli({"inspect", fc1_key(), "--emit", "ptx", "--arch", "sm_90a"});
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains(".target sm_90a") && Catch::Contains(".entry"));

  r = cli({"inspect", fc1_key(), "--emit", "ptx", "--arch", "sm_120a"});  // --arch overrides the key's
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains(".target sm_120a"));
}

TEST_CASE("cli: inspect resources; sass fails clearly or disassembles", "[cli]") {
  Result r = cli({"inspect", fc1_key(), "--emit", "resources"});
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("registers") && Catch::Contains("spills") && Catch::Contains("cubin"));
  r = cli({"inspect", fc1_key(), "--emit", "sass"});
  INFO(r.out);
  if (r.rc == 0)
    CHECK_THAT(r.out, Catch::Contains("moejit_decode_fc1"));
  else
    CHECK_THAT(r.out, Catch::Contains("cuobjdump") && Catch::Contains("nvdisasm"));
  // The loop report of the same listing: FC1's chunk loop holds its MMAs.
  const bool disassembled = r.rc == 0;
  r = cli({"inspect", fc1_key(), "--emit", "loops"});
  INFO(r.out);
  CHECK((r.rc == 0) == disassembled);
  if (r.rc == 0)
    CHECK_THAT(r.out, Catch::Contains("moejit_decode_fc1") && Catch::Contains("loop 0x") && Catch::Contains("HMMA@"));
  else
    CHECK_THAT(r.out, Catch::Contains("--emit loops") && Catch::Contains("cuobjdump"));
}

TEST_CASE("cli: prewarm, cache ls, verify, damage, gc, clear", "[cli]") {
  Result r = cli({"cache", "clear"});
  REQUIRE(r.rc == 0);
  const auto cfg = load_model_config("qwen3-30b-a3b");
  std::vector<KernelKey> keys = keys_for_range(cfg.local(), Arch::sm_90a, 8, 132);
  KernelKey prep;
  prep.kind = KernelKind::prepare;
  prep.arch = Arch::sm_90a;
  keys.push_back(prep.normalized());

  r = cli({"prewarm", "--config", "qwen3-30b-a3b", "--arch", "sm_90a", "--max-tokens", "8", "--jobs", "2"});
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains(std::to_string(keys.size()) + " kernels") &&
                        Catch::Contains(std::to_string(keys.size()) + " compiled") && Catch::Contains("2 worker processes"));
  CHECK_THAT(r.out, Catch::Contains("[" + std::to_string(keys.size()) + "/" + std::to_string(keys.size()) + "]"));

  r = cli({"cache", "ls"});
  INFO(r.out);
  CHECK(r.rc == 0);
  for (const auto& k : keys) CHECK_THAT(r.out, Catch::Contains(k.str()));
  CHECK_THAT(r.out, Catch::Contains(std::to_string(keys.size()) + " entries"));

  r = cli({"cache", "verify"});
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains(std::to_string(keys.size()) + " valid, 0 damaged, 0 untrusted"));

  // A second prewarm finds everything cached.
  r = cli({"prewarm", "--config", "qwen3-30b-a3b", "--arch", "sm_90a", "--max-tokens", "8", "--jobs", "3"});
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("0 compiled, " + std::to_string(keys.size()) + " already cached"));

  r = cli({"cache", "path"});
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains(sandbox().dir + "/cache"));

  // Damage one cubin: verify reports it, exits 1 and quarantines it; a later prewarm rebuilds it.
  std::string victim;
  for (const auto& e : std::filesystem::recursive_directory_iterator(sandbox().dir + "/cache"))
    if (e.path().filename() == "kernel.cubin") {
      victim = e.path().string();
      break;
    }
  REQUIRE_FALSE(victim.empty());
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    const char junk[8] = {'d', 'a', 'm', 'a', 'g', 'e', 'd', '!'};
    f.write(junk, sizeof junk);
  }
  r = cli({"cache", "verify"});
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, Catch::Contains("1 damaged, 0 untrusted") && Catch::Contains("moved to quarantine"));
  r = cli({"cache", "verify"});
  CHECK(r.rc == 0);

  // An entry others can write is reported as untrusted and left where it is (never quarantined).
  std::string shared_entry;
  for (const auto& e : std::filesystem::recursive_directory_iterator(sandbox().dir + "/cache"))
    if (e.path().filename() == "kernel.cubin" && e.path().string() != victim) {
      shared_entry = e.path().parent_path().string();
      break;
    }
  REQUIRE_FALSE(shared_entry.empty());
  REQUIRE(::chmod(shared_entry.c_str(), 0777) == 0);
  r = cli({"cache", "verify"});
  {
    INFO(r.out);
    CHECK(r.rc == 1);
    CHECK_THAT(r.out, Catch::Contains("0 damaged, 1 untrusted") && Catch::Contains("untrusted  ") &&
                          Catch::Contains("left in place") && !Catch::Contains("moved to quarantine"));
    CHECK(std::filesystem::exists(shared_entry + "/kernel.cubin"));
  }
  REQUIRE(::chmod(shared_entry.c_str(), 0700) == 0);
  r = cli({"cache", "verify"});
  CHECK(r.rc == 0);
  r = cli({"prewarm", "--config", "qwen3-30b-a3b", "--arch", "sm_90a", "--max-tokens", "8", "--jobs", "2"});
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("1 compiled, " + std::to_string(keys.size() - 1) + " already cached"));
  r = cli({"cache", "gc"});
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("removed"));

  r = cli({"cache", "clear"});
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("removed " + std::to_string(keys.size())));
  r = cli({"cache", "ls"});
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("empty"));
}

TEST_CASE("cli: bad arguments exit 2 naming the argument", "[cli]") {
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{"prewarm", "--jobs", "x", "--arch", "sm_90a"}, "--jobs"},
      {{"prewarm", "--jobs", "0", "--arch", "sm_90a"}, "--jobs"},
      {{"prewarm", "--frobnicate"}, "--frobnicate"},
      {{"prewarm", "--arch", "sm_75"}, "--arch"},
      {{"prewarm", "--arch"}, "--arch"},
      {{"prewarm", "--config", "no-such-model", "--arch", "sm_90a"}, "no-such-model"},
      {{"plan", "--config", "no-such-model"}, "--config"},
      {{"plan", "--tokens", "1,x"}, "--tokens"},
      {{"plan", "--max-tokens", "-3"}, "--max-tokens"},
      {{"plan", "--family", "fused"}, "--family"},
      {{"inspect"}, "KEY"},
      {{"inspect", "not-a-key"}, "KEY"},
      {{"inspect", fc1_key(), "--emit", "cubin"}, "--emit"},
      {{"inspect", fc1_key(), "--arch", "sm_80"}, "--arch"},
      {{"cache"}, "ACTION"},
      {{"cache", "shred"}, "ACTION"},
      {{"cache", "ls", "extra"}, "extra"},
      {{"run", "--input", "i", "--output", "o"}, "--layer"},
      {{"bench", "--tokens", "0"}, "--tokens"},
      {{"bench", "--scales", "lossy"}, "--scales"},
      {{"bench", "--precision", "a4", "--a4-scales", "mixed"}, "--a4-scales"},
      {{"bench", "--a4-scales", "per-expert"}, "--a4-scales"},
      {{"prewarm", "--arch", "sm_90a", "--scales", "lossy"}, "--scales"},
      {{"frobnicate"}, "frobnicate"},
  };
  for (const auto& c : cases) {
    Result r = cli(c.args);
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    INFO("moejit " << joined << "\n" << r.out);
    CHECK(r.rc == 2);
    CHECK_THAT(r.out, Catch::Contains(c.needle));
    CHECK_THAT(r.out, Catch::Contains("error"));
    // One line.
    CHECK(std::count(r.out.begin(), r.out.end(), '\n') <= 1);
  }
}

TEST_CASE("cli: run (fails clearly without a GPU, checks with one)", "[cli]") {
  LayerSpec s;
  s.format = ScaleFormat::nvfp4;
  s.activation = Activation::silu;
  s.experts = 4;
  s.hidden = 64;
  s.intermediate = 32;
  s.top_k = 2;
  const std::string dir = sandbox().dir;
  const std::string layer = dir + "/layer.safetensors", input = dir + "/input.safetensors",
                    output = dir + "/output.safetensors";
  write_layer_file(layer, make_random_layer(s, 7));
  write_input_file(input, make_random_inputs(s, 5, 8));
  Result r = cli({"run", "--layer", layer, "--input", input, "--output", output, "--check"});
  INFO(r.out);
  std::string why;
  if (!gpu_available(&why)) {
    CHECK(r.rc != 0);
    CHECK_THAT(r.out, Catch::Contains("GPU"));
    CHECK_FALSE(std::filesystem::exists(output));
  } else {
    CHECK(r.rc == 0);
    CHECK_THAT(r.out, Catch::Contains("PASS") && Catch::Contains("rel_l2") && Catch::Contains("cosine"));
    int m = 0, h = 0;
    const auto out = read_output_file(output, &m, &h);
    CHECK(m == 5);
    CHECK(h == 64);
    CHECK(out.size() == 5u * 64u);
  }
}

TEST_CASE("cli: demo on a small config", "[cli]") {
  Result r = cli({"demo", "--config", "qwen3-30b-a3b", "--max-tokens", "4", "--jobs", "2", "--replays", "5"});
  INFO(r.out);
  CHECK(r.rc == 0);
  std::string why;
  if (!gpu_available(&why))
    CHECK_THAT(r.out, Catch::Contains("no usable GPU") && Catch::Contains("prewarm") &&
                          Catch::Contains("decode_fc1:sm_90a") && Catch::Contains("cache contents"));
  else
    CHECK_THAT(r.out, Catch::Contains("PASS") && Catch::Contains("TB/s"));
}
