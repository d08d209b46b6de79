// NVRTC compiles every kernel the default config needs (M = 1..64, 132 SMs) for sm_90a and sm_120a,
// straight through compile_source (no cache), and the sm_90a kernels spill at most a few words.
//
// The planner caps registers (64 or 80 per thread) so that a decode grid is one wave; at those caps
// ptxas parks a few prologue/epilogue values (routing, bias pointers) in local memory, while the main
// loop stays spill-free (checked on the SASS, docs/perf-log.md). A tile whose loop spills costs
// hundreds of bytes (a two-tile FC1 at 80 registers: 540), which this bound catches.
constexpr int kMaxSpillBytes = 192;
#include "catch_compat.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "moejit/compiler.hpp"
#include "moejit/generator.hpp"
#include "moejit/model_config.hpp"
#include "moejit/planner.hpp"

using namespace moejit;

namespace {

std::vector<KernelKey> default_keys(Arch arch) {
  const ModelConfig cfg = load_model_config(default_config_name());
  std::vector<KernelKey> keys = keys_for_range(cfg.local(), arch, 64, 132);
  KernelKey prep;  // Runtime::prepare launches the architecture's repack kernel too
  prep.kind = KernelKind::prepare;
  prep.arch = arch;
  keys.push_back(prep.normalized());
  return keys;
}

void compile_all(Arch arch, bool bound_spills) {
  const auto keys = default_keys(arch);
  REQUIRE(keys.size() >= 3);
  for (const auto& key : keys) {
    INFO("key " << key.str());
    REQUIRE(key.arch == arch);
    CompileOutput out;
    REQUIRE_NOTHROW(out = compile_source(generate_source(key), arch));
    CHECK(out.binary.size() > 0);
    INFO("registers " << out.registers << ", spill bytes " << out.spill_bytes << "\n" << out.log);
    CHECK(out.registers > 0);
    if (bound_spills) CHECK(out.spill_bytes <= kMaxSpillBytes);
  }
}

}  // namespace

TEST_CASE("every key of the default config compiles for sm_90a with at most a few spilled words", "[compile][sm_90a]") {
  compile_all(Arch::sm_90a, /*bound_spills=*/true);
}

TEST_CASE("every key of the default config compiles for sm_120a", "[compile][sm_120a]") {
  compile_all(Arch::sm_120a, /*bound_spills=*/false);
}

TEST_CASE("the cooperative single-launch variant compiles for both architectures", "[compile]") {
  const ModelConfig cfg = load_model_config(default_config_name());
  for (Arch arch : {Arch::sm_90a, Arch::sm_120a}) {
    KernelKey key = make_plan(cfg.local(), arch, 1, 132).kernels.front();
    key.kind = KernelKind::decode_fused;
    INFO("key " << key.normalized().str());
    CompileOutput out;
    REQUIRE_NOTHROW(out = compile_source(generate_source(key.normalized()), arch));
    CHECK(out.binary.size() > 0);
    if (arch == Arch::sm_90a) CHECK(out.spill_bytes <= kMaxSpillBytes);
  }
}

TEST_CASE("DeepSeek-V3's decode kernels (streaming FC1, even-column tiles) compile for both architectures",
          "[compile]") {
  // The default config plans no decode_fc1_stream: DeepSeek-V3 does at M = 2..8 (long slabs on several
  // waves), in NVFP4 and MXFP4, with even-column tiles at M <= 4.
  for (const char* name : {"deepseek-v3", "deepseek-v3-mxfp4"}) {
    const ModelConfig cfg = load_model_config(name);
    for (Arch arch : {Arch::sm_90a, Arch::sm_120a}) {
      bool streams = false;
      for (const auto& key : keys_for_range(cfg.local(), arch, 8, 132)) {
        INFO("key " << key.str());
        streams = streams || key.kind == KernelKind::decode_fc1_stream;
        CompileOutput out;
        REQUIRE_NOTHROW(out = compile_source(generate_source(key), arch));
        CHECK(out.binary.size() > 0);
        INFO("registers " << out.registers << ", spill bytes " << out.spill_bytes << "\n" << out.log);
        if (arch == Arch::sm_90a) CHECK(out.spill_bytes <= kMaxSpillBytes);
      }
      CHECK(streams);
    }
  }
}

TEST_CASE("kernels with the trace records of a -DMOEJIT_TRACE=ON build compile", "[compile][trace]") {
  // CI builds without the option, so the traced template code is checked here: with the define a trace
  // build adds, the generated source of every kernel the default config plans for M = 1..64 (route,
  // FC1 grid and loop, FC2-sum and split) and of DeepSeek-V3's streaming FC1 compiles for sm_90a and
  // holds the record arrays the runtime copies out.
  std::vector<KernelKey> keys = keys_for_range(load_model_config(default_config_name()).local(), Arch::sm_90a, 64, 132);
  for (const auto& key : keys_for_range(load_model_config("deepseek-v3").local(), Arch::sm_90a, 8, 132))
    if (key.kind == KernelKind::decode_fc1_stream) keys.push_back(key);
  REQUIRE(std::any_of(keys.begin(), keys.end(), [](const KernelKey& k) { return k.kind == KernelKind::route; }));
  REQUIRE(std::any_of(keys.begin(), keys.end(), [](const KernelKey& k) { return k.kind == KernelKind::decode_fc1_stream; }));
  for (const auto& key : keys) {
    INFO("key " << key.str());
    GeneratedSource src = generate_source(key);
    if (src.source.find("#define MOEJIT_TRACE 1") == std::string::npos)  // a trace build has it already
      src.source = "#define MOEJIT_TRACE 1\n" + src.source;
    CompileOutput out;
    REQUIRE_NOTHROW(out = compile_source(src, Arch::sm_90a, /*want_ptx=*/true));
    const std::string ptx(out.binary.begin(), out.binary.end());
    CHECK(ptx.find("moejit_trace_cta") != std::string::npos);
    CHECK(ptx.find("%globaltimer") != std::string::npos);
  }
}

TEST_CASE("the batch family's kernels of every bundled model compile for both architectures", "[compile][batch]") {
  // Every token tile the planner uses (register MMAs of 8 to 64 pairs; on sm_90a warpgroup MMA of 32 to 64
  // pairs from 14 pairs per expert), per bundled config and architecture; sm_90a without spills (the
  // 64-pair register tile holds 128 accumulators per thread and still fits 255 registers) and without
  // wgmmas that ptxas had to serialize (v26 measured that at 1-11 % of a forward).
  const std::vector<std::string> names = bundled_config_names();
  REQUIRE(names.size() >= 2);
  for (const std::string& name : names) {
    const ModelConfig cfg = load_model_config(name);
    const LayerSpec spec = cfg.local();
    for (Arch arch : {Arch::sm_90a, Arch::sm_120a}) {
      std::set<KernelKey> keys;
      // Pairs per expert at every step of the planner's tile choice, and far past the last one.
      for (double pairs_per_expert : {0.01, 4.0, 12.0, 16.0, 32.0, 44.0, 128.0, 512.0}) {
        const int m = std::clamp(static_cast<int>(std::ceil(pairs_per_expert * spec.experts / spec.top_k)), 1, kMaxTokens);
        for (const auto& k : make_plan(spec, arch, m, 132, Family::batch).kernels)
          if (k.kind != KernelKind::route) keys.insert(k);
      }
      // At least FC1 and FC2 for each of the 4 token tiles (8, 16, 32 and 64 pairs; measured: 8 keys on
      // sm_120a, 12 on sm_90a with its warpgroup-MMA tiles), so the loop below compiles something.
      INFO(name << " on " << to_string(arch) << ": " << keys.size() << " keys");
      REQUIRE(keys.size() >= 2 * 4);
      if (arch == Arch::sm_90a) CHECK(std::any_of(keys.begin(), keys.end(), [](const KernelKey& k) { return k.wgmma; }));
      for (const KernelKey& key : keys) {
        INFO(name << " key " << key.str());
        CompileOutput out;
        REQUIRE_NOTHROW(out = compile_source(generate_source(key), arch));
        CHECK(out.binary.size() > 0);
        INFO("registers " << out.registers << ", spill bytes " << out.spill_bytes << "\n" << out.log);
        if (arch == Arch::sm_90a) CHECK(out.spill_bytes == 0);
        CHECK_FALSE(out.wgmma_serialized);
      }
    }
  }
}

TEST_CASE("the warpgroup-MMA batch tiles and the prefill family compile in a8 and a4 without spills",
          "[compile][precision]") {
  // x quantized once per pair (the act_quant pre-pass before the batch FC1, the prefill gather) and the
  // intermediate in FC1's epilogue (a8's blocks exchanged between warp pairs): per layer
  // kind (MXFP4 swigluoai with bias and limit, NVFP4 silu, NVFP4 relu2: one FC1 matrix) the planner's
  // warpgroup-MMA batch tiles (32 and 64 pairs) and prefill tiles (64 and 128 pairs), on sm_90a with at
  // most a few spilled words and no wgmma that ptxas had to serialize. Most have none; the 64-pair batch
  // FC1 of NVFP4 silu, whose a16 form takes all 128 registers its two CTAs per SM leave, parks a few
  // loop-invariant addresses (about 20 bytes, reloaded once per chunk). The prefill keys spill nothing: when
  // their consumer loops lost track of the warp's uniformity (the a8/a4 epilogue, two teams) they spilled
  // 4-36 bytes and ran 20 more instructions per chunk (perf-log v49), which this guards against.
  for (const std::string& name : {"gpt-oss-120b", "qwen3-30b-a3b", "nemotron-3-nano-30b-a3b"})
    for (ActPrecision p : {ActPrecision::a8, ActPrecision::a4}) {
      LayerSpec spec = load_model_config(name).local();
      spec.precision = p;
      std::set<KernelKey> keys, pre_passes;
      auto add = [&](Family f, double pairs_per_expert) {
        const int m = std::clamp(static_cast<int>(std::ceil(pairs_per_expert * spec.experts / spec.top_k)), 1, kMaxTokens);
        for (const auto& k : make_plan(spec, Arch::sm_90a, m, 132, f).kernels)
          if (k.kind == KernelKind::act_quant)
            pre_passes.insert(k);
          else if (k.kind != KernelKind::route)
            keys.insert(k);
      };
      add(Family::batch, 16.0);
      add(Family::batch, 64.0);
      add(Family::prefill, 48.0);
      add(Family::prefill, 128.0);
      INFO(name << " " << to_string(p) << ": " << keys.size() << " keys");
      REQUIRE(keys.size() == 8);
      // The batch plans' pre-pass (one key for the layer; the prefill plans have none), without spills.
      REQUIRE(pre_passes.size() == 1);
      const CompileOutput pre = compile_source(generate_source(*pre_passes.begin()), Arch::sm_90a);
      CHECK(pre.binary.size() > 0);
      CHECK(pre.spill_bytes == 0);
      for (const KernelKey& key : keys) {
        INFO(name << " key " << key.str());
        CHECK((key.wgmma || key.kind == KernelKind::prefill_fc1 || key.kind == KernelKind::prefill_fc2));
        CHECK(key.precision == p);
        CompileOutput out;
        REQUIRE_NOTHROW(out = compile_source(generate_source(key), Arch::sm_90a));
        CHECK(out.binary.size() > 0);
        INFO("registers " << out.registers << ", spill bytes " << out.spill_bytes << "\n" << out.log);
        CHECK(out.spill_bytes <= kMaxSpillBytes);
        if (key.kind == KernelKind::prefill_fc1 || key.kind == KernelKind::prefill_fc2) CHECK(out.spill_bytes == 0);
        CHECK_FALSE(out.wgmma_serialized);
      }
    }
}

TEST_CASE("prefill kernels with two teams of consumer warpgroups compile without spills", "[compile][prefill]") {
  // g2: the teams take the CTA's units in turn, each walking the ring past the other's stages; FC1 and FC2
  // of the default config at its 128-pair tile, on sm_90a (the family's only architecture), no spill and
  // no serialized wgmma.
  const ModelConfig cfg = load_model_config(default_config_name());
  for (KernelKey key : make_plan(cfg.local(), Arch::sm_90a, 4096, 132, Family::prefill).kernels) {
    if (key.kind == KernelKind::route) continue;
    key.groups = 2;
    key = key.normalized();
    INFO("key " << key.str());
    CompileOutput out;
    REQUIRE_NOTHROW(out = compile_source(generate_source(key), Arch::sm_90a));
    CHECK(out.binary.size() > 0);
    INFO("registers " << out.registers << ", spill bytes " << out.spill_bytes << "\n" << out.log);
    CHECK(out.spill_bytes == 0);
    CHECK_FALSE(out.wgmma_serialized);
  }
}
