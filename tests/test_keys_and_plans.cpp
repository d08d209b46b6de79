// Kernel keys (canonical strings that round-trip, normalization, errors), generator determinism and
// the planner's choices.
#include "catch_compat.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/sha256.hpp"
#include "moejit/error.hpp"
#include "moejit/generator.hpp"
#include "moejit/model_config.hpp"
#include "moejit/planner.hpp"
#include "moejit/tuning.hpp"
#include "generator/families/batch.hpp"
#include "generator/families/decode.hpp"
#include "generator/families/route.hpp"
#include "scoped_env.hpp"

using namespace moejit;
using namespace moejit::detail;
using moejit::test::ScopedEnv;

namespace {
// gpt-oss-120b's layer as the bundled config gives it (E128 H2880 I2880 top-4, MXFP4, swigluoai with its
// limit, biases, interleaved gate/up rows); the planner steps below are pinned on it.
LayerSpec gptoss() {
  LayerSpec s = load_model_config("gpt-oss-120b").local();
  REQUIRE(s.format == ScaleFormat::mxfp4);
  REQUIRE(s.activation == Activation::swigluoai);
  REQUIRE((s.experts == 128 && s.hidden == 2880 && s.intermediate == 2880 && s.top_k == 4 && s.has_bias));
  return s;
}

// A 3-expert toy layer (the GPU suite's small geometry).
LayerSpec tiny_layer() {
  LayerSpec s = gptoss();
  s.experts = 3;
  s.top_k = 2;
  s.hidden = 96;
  s.intermediate = 160;
  return s;
}

// make_plan under the overrides the environment holds now (a case sets them through a ScopedEnv), read
// as a Runtime or the CLI reads them: once per plan here, so each line sees the variables as set above it.
Plan tuned_plan(const LayerSpec& spec, Arch arch, int tokens, int sm_count, Family force = Family::automatic) {
  return make_plan(spec, arch, tokens, sm_count, force, TuningOverrides::from_environment());
}

std::vector<KernelKey> sample_keys() {
  std::vector<KernelKey> keys;
  for (Arch a : {Arch::sm_90a, Arch::sm_100a, Arch::sm_120a})
    for (KernelKind kind : {KernelKind::prepare, KernelKind::route, KernelKind::decode_fc1, KernelKind::decode_fc2,
                            KernelKind::decode_fused, KernelKind::decode_fc2_sum, KernelKind::decode_fc1_loop,
                            KernelKind::decode_fc1_stream, KernelKind::batch_fc1, KernelKind::batch_fc2})
      for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4})
        for (Activation act : {Activation::silu, Activation::gelu_tanh, Activation::relu2, Activation::swigluoai})
          for (int variant = 0; variant < 4; ++variant) {
            KernelKey k;
            k.kind = kind;
            k.arch = a;
            k.format = f;
            k.activation = act;
            k.experts = 3 + 61 * variant;
            k.hidden = 96 + 32 * variant;
            k.intermediate = 160 + 64 * variant;
            k.warps = 4;
            k.ntiles = 1 << variant;
            k.depth = 1 + variant % 2;
            k.min_blocks = variant * 2;
            k.bias = variant & 1;
            k.limit = (variant & 2) != 0;
            k.parts = 1 + variant;  // decode_fc2_sum and decode_fc1_stream only; normalization resets it elsewhere
            k.groups = variant == 1 ? 2 : 1;  // decode_fc2_sum only (4 warps, 2 parts); reset elsewhere
            k.columns = variant % 2 ? 4 : 8;
            k.l2_ahead = 2 * variant;  // 0 for decode_fc1_stream after normalization
            k.x_staged = variant == 0;   // decode_fc1 only; normalization resets it elsewhere
            k.inline_route = variant == 3 || kind == KernelKind::decode_fc2_sum || kind == KernelKind::decode_fc1_loop ||
                             kind == KernelKind::decode_fc1_stream;
            if (kind == KernelKind::batch_fc1 || kind == KernelKind::batch_fc2) {
              k.columns = 8;  // batch tiles fill every column behind the route kernel
              k.inline_route = 0;
              if (a == Arch::sm_90a && variant >= 2) {  // warpgroup MMA: whole warpgroups, one slab, depth >= 3
                k.wgmma = true;
                k.warps = 4 * (variant - 1);
                k.depth = 2 + variant;
                k.slabs = 1;
              }
            }
            keys.push_back(k.normalized());
          }
  return keys;
}
}  // namespace

TEST_CASE("every key's canonical string parses back to the same key", "[keys]") {
  for (const KernelKey& k : sample_keys()) {
    INFO(k.str());
    CHECK(KernelKey::parse(k.str()) == k);
    CHECK(KernelKey::parse(k.str()).str() == k.str());
    CHECK(k.normalized() == k);  // normalization is idempotent
  }
}

TEST_CASE("entry names are C identifiers derived from the key", "[keys]") {
  std::set<std::string> names;
  for (const KernelKey& k : sample_keys()) {
    const std::string e = k.entry_name();
    CHECK(e.rfind("moejit_", 0) == 0);
    for (char c : e) CHECK((std::isalnum(static_cast<unsigned char>(c)) || c == '_'));
    names.insert(e);
  }
  std::set<std::string> strs;
  for (const KernelKey& k : sample_keys()) strs.insert(k.str());
  CHECK(names.size() == strs.size());  // distinct keys, distinct entries
}

TEST_CASE("normalization resets fields a kind ignores and rejects impossible keys", "[keys]") {
  KernelKey r;
  r.kind = KernelKind::route;
  r.experts = 256;
  r.hidden = 7168;
  r.format = ScaleFormat::nvfp4;
  r.warps = 16;
  KernelKey r2 = r;
  r2.hidden = 2048;
  r2.format = ScaleFormat::mxfp4;
  CHECK(r.normalized() == r2.normalized());

  KernelKey k;
  k.kind = KernelKind::decode_fc1;
  k.experts = 8;
  k.hidden = 100;  // not a multiple of 32
  k.intermediate = 64;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("hidden must be a positive multiple of 32"));
  k.hidden = 128;
  k.ntiles = 9;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("ntiles"));
  k.ntiles = 1;
  k.precision = ActPrecision::a8;  // computed by the register-fed decode kernels
  CHECK(k.normalized().str().find(":a8:") != std::string::npos);
  CHECK(KernelKey::parse(k.normalized().str()) == k.normalized());
  k.precision = ActPrecision::a16;
  k.experts = 2000;
  k.inline_route = true;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("inline routing"));
  k.experts = 8;

  // K parts belong to decode_fc2_sum; the inline-only kinds refuse a route kernel's lists.
  k.parts = 3;
  CHECK(k.normalized().parts == 1);
  k.kind = KernelKind::decode_fc2_sum;
  CHECK(k.normalized().parts == 3);
  CHECK(k.normalized().str().find("w4n1d1o0p3") != std::string::npos);
  k.parts = 9;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("parts"));
  k.parts = 2;
  k.inline_route = false;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("routes inline only"));
  k.kind = KernelKind::decode_fc1_loop;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("routes inline only"));
  k.inline_route = true;
  CHECK(k.normalized().parts == 1);

  // The streaming FC1 keeps its chunks per stage in parts, needs room for its producer warp, and
  // columns are 8 or 4 (spelled c4 at the end of the tile).
  k.kind = KernelKind::decode_fc1_stream;
  k.parts = 4;
  CHECK(k.normalized().parts == 4);
  k.warps = 32;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("producer warp"));
  k.warps = 4;
  k.columns = 4;
  CHECK(k.normalized().str().find("w4n1d1o0p4c4") != std::string::npos);
  CHECK(KernelKey::parse(k.normalized().str()) == k.normalized());
  k.columns = 2;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("columns must be 8"));
  k.columns = 4;

  // The L2 prefetch distance is the tile's last field (f<chunks>, absent at 0), 0..16 chunks; the
  // streaming FC1 has no register ring to run ahead of.
  k.l2_ahead = 3;
  CHECK(k.normalized().l2_ahead == 0);
  k.kind = KernelKind::decode_fc2_sum;
  CHECK(k.normalized().str().find(":w4n1d1o0p4c4f3:") != std::string::npos);
  CHECK(KernelKey::parse(k.normalized().str()) == k.normalized());
  k.l2_ahead = 17;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("l2_ahead must be in [0, 16]"));
  k.l2_ahead = 0;
  CHECK(k.normalized().str().find(":w4n1d1o0p4c4:") != std::string::npos);
  // FC2-sum over several CTAs per slab (suffix g after p): a slot's parts must stay in one CTA.
  k.groups = 2;
  CHECK(k.normalized().str().find(":w4n1d1o0p4g2c4:") != std::string::npos);
  CHECK(KernelKey::parse(k.normalized().str()) == k.normalized());
  k.parts = 3;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("multiple of the parts"));
  k.parts = 4;
  k.groups = 9;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("groups must be in [1, 8]"));
  k.groups = 2;
  k.kind = KernelKind::decode_fc2;
  CHECK(k.normalized().groups == 1);
  k.kind = KernelKind::decode_fc2_sum;
  k.groups = 1;
  // FC2-sum over two slabs per CTA (suffix s after g): whole slabs in one CTA, H a multiple of 32 rows,
  // parts x slabs raw sums per pair within the shared-memory bound (8, or 4 over 128 pairs).
  k.slabs = 2;
  CHECK(k.normalized().str().find(":w4n1d1o0p4s2c4:") != std::string::npos);
  CHECK(KernelKey::parse(k.normalized().str()) == k.normalized());
  k.slabs = 3;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("slabs must be 1 or 2"));
  k.slabs = 2;
  k.groups = 2;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("groups 1"));
  k.groups = 1;
  k.parts = 5;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("parts x slabs must be at most 8"));
  k.inline_route = 2;
  k.parts = 3;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("parts x slabs must be at most 4"));
  k.parts = 4;
  k.inline_route = 1;
  const int rows = k.hidden;
  const ScaleFormat format = k.format;
  k.format = ScaleFormat::nvfp4;  // 16-element scale blocks: H = 112 is 7 slabs
  k.hidden = 32 * 3 + 16;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("multiple of 32 rows"));
  k.hidden = rows;
  k.format = format;
  k.kind = KernelKind::decode_fc2;
  CHECK(k.normalized().slabs == 1);
  k.kind = KernelKind::decode_fc2_sum;
  k.slabs = 1;

  // A staged x row (tile suffix x) is decode_fc1's, one token tile only.
  k.x_staged = true;
  CHECK(!k.normalized().x_staged);
  k.kind = KernelKind::decode_fc1;
  CHECK(k.normalized().str().find(":w4n1d1o0c4x:") != std::string::npos);
  CHECK(KernelKey::parse(k.normalized().str()) == k.normalized());
  k.ntiles = 2;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("ntiles 1"));
  k.ntiles = 1;
  // 4 warps of a gated FC1: 47 KiB less a 4 KiB reduction buffer leaves, after each warp's 256 bytes
  // of zero pieces, 336 chunks of 128 bytes (84 per warp); the generator refuses more, beside its check
  // of the streaming FC1's ring.
  const int hidden = k.hidden;
  k.hidden = 64 * 336;
  CHECK(k.normalized().x_staged);
  CHECK_NOTHROW(generate_source(k));
  k.hidden = 64 * 337;
  CHECK_THROWS_WITH(generate_source(k), Catch::Contains("more than the 44032 left"));
  k.hidden = hidden;
  k.x_staged = false;
}

TEST_CASE("malformed key strings are rejected with the field named", "[keys]") {
  const std::string good = sample_keys().at(40).str();
  CHECK_NOTHROW(KernelKey::parse(good));
  CHECK_THROWS_WITH(KernelKey::parse("decode_fc1:sm_90a"), Catch::Contains("expected 12"));
  CHECK_THROWS_WITH(KernelKey::parse("decode_fc1:sm_89:mxfp4:silu:a16:E8:H128:I64:w4n1d1o0:b0:l0:i0"),
                    Catch::Contains("sm_89"));
  CHECK_THROWS_WITH(KernelKey::parse("decode_fc1:sm_90a:mxfp4:silu:a16:X8:H128:I64:w4n1d1o0:b0:l0:i0"),
                    Catch::Contains("experts"));
  CHECK_THROWS_WITH(KernelKey::parse("decode_fc1:sm_90a:mxfp4:silu:a16:E8:H128:I64:w4n1:b0:l0:i0"),
                    Catch::Contains("w4n1d2o0"));
  CHECK_THROWS_WITH(KernelKey::parse("decode_fc1:sm_90a:mxfp4:silu:a16:E8:H128:I64:w4n1d1o0:b2:l0:i0"),
                    Catch::Contains("b0/b1"));
  CHECK_THROWS_AS(KernelKey::parse("gemm:sm_90a:mxfp4:silu:a16:E8:H128:I64:w4n1d1o0:b0:l0:i0"), Error);
  CHECK_THROWS_WITH(KernelKey::parse("decode_fc2_sum:sm_90a:mxfp4:silu:a16:E8:H128:I64:w4n1d1p2o0:b0:l0:i1"),
                    Catch::Contains("w8n1d8o2p2"));
  CHECK_THROWS_WITH(KernelKey::parse("decode_fc2_sum:sm_90a:mxfp4:silu:a16:E8:H128:I64:w4n1d1o0px:b0:l0:i1"),
                    Catch::Contains("parts"));
  const KernelKey sum = KernelKey::parse("decode_fc2_sum:sm_90a:mxfp4:silu:a16:E8:H128:I64:w16n1d4o1p2:b0:l0:i1");
  CHECK(sum.kind == KernelKind::decode_fc2_sum);
  CHECK(sum.parts == 2);
  CHECK(sum.min_blocks == 1);
  const KernelKey grouped = KernelKey::parse("decode_fc2_sum:sm_90a:mxfp4:silu:a16:E8:H128:I64:w8n1d1o3p2g2c4f2:b0:l0:i1");
  CHECK(grouped.groups == 2);
  CHECK(grouped.parts == 2);
  CHECK(grouped.columns == 4);
  CHECK(grouped.l2_ahead == 2);
  CHECK_THROWS_WITH(KernelKey::parse("decode_fc2_sum:sm_90a:mxfp4:silu:a16:E8:H128:I64:w8n1d1o3p2gx:b0:l0:i1"),
                    Catch::Contains("groups"));
  // i2: inline routing over up to 128 pairs; FC2-sum then keeps at most 4 parts of raw sums per pair.
  const KernelKey wide = KernelKey::parse("decode_fc2_sum:sm_90a:mxfp4:silu:a16:E8:H128:I64:w16n1d4o1p4:b0:l0:i2");
  CHECK(wide.inline_route == 2);
  CHECK(wide.str() == "decode_fc2_sum:sm_90a:mxfp4:silu:a16:E8:H128:I64:w16n1d4o1p4:b0:l0:i2");
  CHECK(wide.normalized() == wide);
  KernelKey too_many = wide;
  too_many.parts = 8;
  CHECK_THROWS_WITH(too_many.normalized(), Catch::Contains("at most 4 parts"));
  CHECK_THROWS_WITH(KernelKey::parse("decode_fc1:sm_90a:mxfp4:silu:a16:E8:H128:I64:w4n1d1o0:b0:l0:i3"),
                    Catch::Contains("i0/i1/i2"));
}

TEST_CASE("the generator is deterministic and specializes per key", "[generator]") {
  std::set<std::string> sources;
  std::set<KernelKey> keys;
  for (const KernelKey& k : sample_keys()) {
    if (k.arch != Arch::sm_90a) continue;
    keys.insert(k);
    const GeneratedSource a = generate_source(k), b = generate_source(k);
    CHECK(a.source == b.source);
    CHECK(a.entry == k.entry_name());
    CHECK(a.source.find(k.str()) != std::string::npos);        // the key is written into the source
    CHECK(a.source.find("#include <") == std::string::npos);   // no toolkit headers
    // The chunk loop's shape depends on the routing (templates/slab_mma.cuh): inline keys say so.
    CHECK((a.source.find("#define MOEJIT_INLINE_ROUTED 1") != std::string::npos) == (k.inline_route != 0));
    sources.insert(a.source);
  }
  CHECK(sources.size() == keys.size());  // distinct keys, distinct sources
  CHECK(keys.size() > 40);
  // templates_digest() is SHA-256 over every embedded template's name and content, each preceded by its
  // length as 8 little-endian bytes (generator.cpp): 64 lower-case hex digits, equal to the digest
  // recomputed here from template_headers(), so every template (and only them) feeds it.
  const auto digest_of = [](const std::vector<std::pair<std::string, std::string>>& headers) {
    detail::Sha256 h;
    const auto feed = [&](const std::string& v) {
      uint8_t len[8];
      for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(v.size()) >> (8 * i));
      h.update(len, sizeof(len));
      h.update(v);
    };
    for (const auto& [name, content] : headers) {
      feed(name);
      feed(content);
    }
    return h.hex();
  };
  const std::string digest = templates_digest();
  CHECK(digest.size() == 64);
  const auto lower_hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
  CHECK(std::all_of(digest.begin(), digest.end(), lower_hex));
  const auto headers = template_headers();
  REQUIRE(headers.size() >= 8);
  CHECK(digest_of(headers) == digest);
  // One changed byte of one template changes it, and so does moving a byte from a template's name into
  // its content (same concatenated bytes: the length prefixes tell the two apart).
  auto edited = headers;
  edited.back().second.back() ^= 1;
  CHECK(digest_of(edited) != digest);
  edited = headers;
  edited[0].second.insert(edited[0].second.begin(), edited[0].first.back());
  edited[0].first.pop_back();
  CHECK(digest_of(edited) != digest);
}

TEST_CASE("the planner routes inline for few pairs and sizes token tiles for the busiest expert", "[planner]") {
  const LayerSpec s = gptoss();
  const Plan one = make_plan(s, Arch::sm_90a, 1, 132);
  REQUIRE(one.kernels.size() == 2);  // FC1 + FC2, routing inside the CTAs
  CHECK(one.kernels[0].kind == KernelKind::decode_fc1);
  CHECK(one.kernels[0].inline_route);
  CHECK(one.kernels[1].kind == KernelKind::decode_fc2_sum);  // the top-k sum inside each FC2 CTA
  CHECK(one.kernels[1].inline_route);
  CHECK(one.kernels[0].ntiles == 1);

  const Plan sixteen = make_plan(s, Arch::sm_90a, 16, 132);  // 64 pairs: still inline
  REQUIRE(sixteen.kernels.size() == 2);
  // ~55 experts on gpt-oss's unevenly spread 180-CTA FC2-sum grid: the split FC2 instead.
  CHECK(sixteen.kernels[1].kind == KernelKind::decode_fc2);
  const Plan seventeen = make_plan(s, Arch::sm_90a, 17, 132);  // 68 pairs: route kernel
  REQUIRE(seventeen.kernels.size() == 3);
  CHECK(seventeen.kernels[0].kind == KernelKind::route);
  CHECK_FALSE(seventeen.kernels[1].inline_route);

  // ~2 tokens per expert at M=64 for gpt-oss: one 8-token tile; a 3-expert layer at M=64 sends ~43
  // tokens to each expert: the widest tile.
  CHECK(make_plan(s, Arch::sm_90a, 64, 132).kernels[1].ntiles == 1);
  const LayerSpec tiny = tiny_layer();
  CHECK(make_plan(tiny, Arch::sm_90a, 64, 132).kernels[1].ntiles == 8);
  CHECK(make_plan(tiny, Arch::sm_90a, 1, 132).kernels[0].ntiles == 1);

  // The route kernel's [warps][experts] table: 16 warps where it fits, fewer for very many experts;
  // a key whose table does not fit is refused by the generator.
  CHECK(seventeen.kernels[0].warps == 16);
  for (Arch arch : kArchs) {
    const int most = arch_limits(arch).max_dynamic_smem;
    for (int experts : {8, 128, 256, 1024, 3000, 4096, 8192, 16384}) {
      INFO(to_string(arch) << " experts " << experts);
      const int warps = route_warps(experts, arch);
      CHECK(warps >= 1);
      CHECK(warps <= 16);
      CHECK((experts > 1000 || warps == 16));
      if (route_dynamic_smem(experts, 1) <= most) CHECK(route_dynamic_smem(experts, warps) <= most);
    }
  }
  // 227 KiB hold 14 rows of 4096 4-byte counts (227 KiB / (4 * 4096) = 14.2): one row per warp and the
  // totals row, so 13 warps; one more would not fit. SM12x's 99 KiB hold 6 rows: 5 warps.
  CHECK(route_warps(4096, Arch::sm_90a) == 227 * 1024 / (4 * 4096) - 1);
  CHECK(route_dynamic_smem(4096, route_warps(4096, Arch::sm_90a) + 1) > 227 * 1024);
  CHECK(route_warps(4096, Arch::sm_120a) == 99 * 1024 / (4 * 4096) - 1);
  CHECK(route_warps(4096, Arch::sm_121a) == 5);
  CHECK_THROWS_WITH(generate_source(KernelKey::parse("route:sm_90a:mxfp4:silu:a16:E4096:H0:I0:w16n1d1o0:b0:l0:i0")),
                    Catch::Contains("fewer warps"));
  CHECK_NOTHROW(generate_source(KernelKey::parse("route:sm_90a:mxfp4:silu:a16:E4096:H0:I0:w13n1d1o0:b0:l0:i0")));

  CHECK_THROWS_WITH(make_plan(s, Arch::sm_90a, kDecodeMaxTokens + 1, 132, Family::decode),
                    Catch::Contains("at most"));
  CHECK_THROWS_WITH(make_plan(s, Arch::sm_90a, kMaxTokens + 1, 132), Catch::Contains("at most"));
  CHECK_THROWS_WITH(make_plan(s, Arch::sm_90a, -1, 132), Catch::Contains("tokens"));
  CHECK_THROWS_AS(parse_family("prefill-ish"), Error);
}

TEST_CASE("the planner picks tiles from the grid and the launch structure from MOEJIT_DECODE_LAUNCH", "[planner]") {
  // The planner overrides this case sets, restored however it ends.
  ScopedEnv env{"MOEJIT_DECODE_FC1",      "MOEJIT_DECODE_FC2",          "MOEJIT_DECODE_TILE_FC1",
                "MOEJIT_DECODE_TILE_FC2", "MOEJIT_DECODE_INLINE_PAIRS", "MOEJIT_DECODE_COLUMNS",
                "MOEJIT_DECODE_LAUNCH"};
  const LayerSpec s = gptoss();
  const LayerSpec ds = load_model_config("deepseek-v3").local();
  // DeepSeek M=1: FC1 grid 128 x 8 = 1024 CTAs fits one wave only at 8 CTAs of 4 warps per SM;
  // FC2-sum: 448 slab CTAs share 132 SMs 4 to an SM, so 8 warps, one per expert (one K part).
  const Plan d1 = tuned_plan(ds, Arch::sm_90a, 1, 132);
  REQUIRE(d1.kernels.size() == 2);
  CHECK(d1.kernels[0].warps == 4);
  CHECK(d1.kernels[0].min_blocks == 8);
  CHECK(d1.kernels[1].kind == KernelKind::decode_fc2_sum);
  CHECK(d1.kernels[1].warps == 8);
  CHECK(d1.kernels[1].min_blocks == 4);
  CHECK(d1.kernels[1].parts == 1);
  // gpt-oss M=1: 720-CTA FC1 grid fits one wave at 6 CTAs per SM (80 registers); FC2-sum: 180 slab
  // CTAs, 16 warps = 4 experts x 4 K parts.
  const Plan g1 = tuned_plan(s, Arch::sm_90a, 1, 132);
  CHECK(g1.kernels[0].kind == KernelKind::decode_fc1);
  CHECK(g1.kernels[0].min_blocks == 6);
  CHECK(g1.kernels[1].kind == KernelKind::decode_fc2_sum);
  CHECK(g1.kernels[1].warps == 16);
  CHECK(g1.kernels[1].parts == 4);
  CHECK(g1.launch == DecodeLaunch::pdl);
  // gpt-oss M=4: ~15 experts x 180 slabs = 2700 FC1 CTAs of 12-chunk warps: one wave of 7 CTAs per
  // SM (4 columns, 72 registers) walks the items; at M=16 (8 columns) 6 CTAs per SM (80 registers,
  // the activation ring). DeepSeek M=4 (28 chunks per warp) streams its weights through shared memory
  // (3 stages of 16 chunks, 3 CTAs per SM); its M=1 grid is one wave and stays a grid. M <= 4 puts pairs
  // in even MMA columns only, except in NVFP4's register-fed FC1 with long warps.
  const Plan g4 = tuned_plan(s, Arch::sm_90a, 4, 132);
  CHECK(g4.kernels[0].kind == KernelKind::decode_fc1_loop);
  CHECK(g4.kernels[0].warps == 4);
  CHECK(g4.kernels[0].columns == 4);
  CHECK(g4.kernels[0].min_blocks == 7);
  const Plan g8 = tuned_plan(s, Arch::sm_90a, 8, 132);  // 4 columns up to 8 tokens, so 7 CTAs per SM
  CHECK(g8.kernels[0].kind == KernelKind::decode_fc1_loop);
  CHECK(g8.kernels[0].columns == 4);
  CHECK(g8.kernels[0].min_blocks == 7);
  const Plan g16 = tuned_plan(s, Arch::sm_90a, 16, 132);
  CHECK(g16.kernels[0].kind == KernelKind::decode_fc1_loop);
  CHECK(g16.kernels[0].columns == 8);
  CHECK(g16.kernels[0].min_blocks == 6);
  CHECK(decode_activation_ring(g16.kernels[0]));
  const Plan d4 = tuned_plan(ds, Arch::sm_90a, 4, 132);
  CHECK(d4.kernels[0].kind == KernelKind::decode_fc1_stream);
  CHECK(d4.kernels[0].str().find(":w4n1d3o3p4c4:") != std::string::npos);
  CHECK(kernel_dynamic_smem(d4.kernels[0]) == 128 + 3 * 16 * 2 * (512 + 64));
  CHECK(kernel_threads(d4.kernels[0]) == 160);
  CHECK(d4.kernels[0].columns == 4);  // streaming FC1, both formats
  // NVFP4's register-fed FC1 keeps 8 columns on DeepSeek's 28-chunk warps unless x is staged (M = 1),
  // takes 4 on short ones (Qwen3-30B-A3B: H = 2048 is 32 chunks, 4/8/16 per warp at M = 1/2/4).
  CHECK(tuned_plan(ds, Arch::sm_90a, 1, 132).kernels[0].columns == 4);
  env.set("MOEJIT_DECODE_FC1", "grid");
  CHECK(tuned_plan(ds, Arch::sm_90a, 2, 132).kernels[0].columns == 8);
  env.unset("MOEJIT_DECODE_FC1");
  const LayerSpec qw = load_model_config("qwen3-30b-a3b").local();
  for (int m : {1, 2, 4}) {
    const KernelKey q_fc1 = tuned_plan(qw, Arch::sm_90a, m, 132).kernels[0];
    INFO(q_fc1.str());
    CHECK(q_fc1.kind == KernelKind::decode_fc1);
    CHECK(q_fc1.columns == 4);
  }
  CHECK(tuned_plan(qw, Arch::sm_90a, 8, 132).kernels[0].columns == 4);
  CHECK(tuned_plan(qw, Arch::sm_90a, 9, 132).kernels[0].columns == 8);
  // ... and its 8-column loop gets 96 registers (5 CTAs per SM), where its chunk loop runs without
  // bound checks (the generated source passes the register cap to the template); the 4-column loop at
  // M = 8 keeps 6, the one-matrix loop (Nemotron) 8.
  for (int m : {9, 12, 16}) {
    const KernelKey q_loop = tuned_plan(qw, Arch::sm_90a, m, 132).kernels[0];
    INFO(q_loop.str());
    CHECK(q_loop.kind == KernelKind::decode_fc1_loop);
    CHECK(q_loop.min_blocks == 5);
    // The cap is the register file over the SM's threads, 65536 / (5 CTAs x 128 threads) = 102; ptxas
    // allocates in steps of 8 below it, hence the 96 a thread gets.
    CHECK(decode_register_cap(q_loop) == 65536 / (5 * 128));
    CHECK(generate_source(q_loop).source.find("#define MOEJIT_REGISTER_CAP 102\n") != std::string::npos);
  }
  CHECK(tuned_plan(qw, Arch::sm_90a, 8, 132).kernels[0].min_blocks == 6);
  CHECK(tuned_plan(ds, Arch::sm_90a, 8, 132).kernels[0].columns == 4);  // streaming FC1
  const LayerSpec nemotron = load_model_config("nemotron-3-nano-30b-a3b").local();  // relu2: one matrix
  CHECK(tuned_plan(nemotron, Arch::sm_90a, 6, 132).kernels[0].columns == 8);
  CHECK(tuned_plan(nemotron, Arch::sm_90a, 6, 132).kernels[0].min_blocks == 8);
  // Qwen3's FC2-sum has one 16-warp CTA per slab and SM (128 slabs): up to 4 tokens capped at 64
  // registers so that it fits beside FC1's last CTA (depth 1), above that the whole register file; 4
  // columns up to 8 tokens.
  for (int m : {1, 2, 4, 5, 8}) {
    const KernelKey q_fc2 = tuned_plan(qw, Arch::sm_90a, m, 132).kernels.back();
    INFO(q_fc2.str());
    CHECK(q_fc2.kind == KernelKind::decode_fc2_sum);
    CHECK(q_fc2.warps == 16);
    CHECK(q_fc2.min_blocks == (m <= 4 ? 2 : 1));
    CHECK(q_fc2.depth == (m <= 4 ? 1 : 4));
    CHECK(q_fc2.slabs == 1);  // an even grid: whole slabs, one per CTA, even where 8 experts x 2 parts fill it
    CHECK(q_fc2.columns == 4);
  }
  // Behind the route kernel every bundled layer keeps one token tile up to 256 tokens (the busiest
  // expert's ~29 pairs at Qwen3 M = 256 take passes): FC1 in 2-warp CTAs at 12 per SM, the split FC2 in
  // 1-warp CTAs at 32 per SM up to 32 tokens and 2-warp CTAs at 16 per SM beyond, with L2 requests 2
  // chunks ahead over a K of at most 16 chunks (Qwen3's 12) only.
  for (const LayerSpec* layer : {&s, &ds, &qw}) {
    for (int m : {17, 32, 33, 64, 128, 256}) {
      const Plan p = make_plan(*layer, Arch::sm_90a, m, 132, Family::decode);  // automatic: batch from the cutover
      INFO(p.describe());
      REQUIRE(p.kernels.size() == 3);
      CHECK(p.kernels[1].ntiles == 1);
      CHECK(p.kernels[1].warps == 2);
      CHECK(p.kernels[1].min_blocks == 12);
      CHECK(p.kernels[2].kind == KernelKind::decode_fc2);
      CHECK(p.kernels[2].ntiles == 1);
      CHECK(p.kernels[2].warps == (m <= 32 ? 1 : 2));
      CHECK(p.kernels[2].min_blocks == (m <= 32 ? 32 : 16));
      CHECK(p.kernels[2].l2_ahead == (layer == &qw ? 2 : 0));
    }
  }
  // Inline routing: two pairs per lane up to 64 pairs (i1); four up to 128 (i2) where FC2 sums the top-k
  // in one CTA per SM (Qwen3 M = 9-16; not DeepSeek-V3's 448 slabs, nor gpt-oss's uneven 180).
  for (int m : {9, 16}) {
    const Plan p = tuned_plan(qw, Arch::sm_90a, m, 132);
    REQUIRE(p.kernels.size() == 2);
    CHECK(p.kernels[0].inline_route == 2);
    CHECK(p.kernels[1].kind == KernelKind::decode_fc2_sum);
    CHECK(p.kernels[1].inline_route == 2);
    CHECK(tuned_plan(ds, Arch::sm_90a, m, 132).kernels.size() == 3);
  }
  CHECK(tuned_plan(ds, Arch::sm_90a, 8, 132).kernels[0].inline_route == 1);
  CHECK(tuned_plan(qw, Arch::sm_90a, 17, 132).kernels.size() == 3);
  CHECK(tuned_plan(s, Arch::sm_90a, 17, 132).kernels.size() == 3);
  // MOEJIT_DECODE_INLINE_PAIRS lowers the inline-routing threshold (for measuring the cutover).
  env.set("MOEJIT_DECODE_INLINE_PAIRS", "32");
  CHECK(tuned_plan(s, Arch::sm_90a, 8, 132).kernels.size() == 2);   // 32 pairs: inline
  CHECK(tuned_plan(s, Arch::sm_90a, 9, 132).kernels.size() == 3);   // 36 pairs: the route kernel
  env.set("MOEJIT_DECODE_INLINE_PAIRS", "128");
  CHECK(tuned_plan(s, Arch::sm_90a, 32, 132).kernels[0].inline_route == 2);
  env.set("MOEJIT_DECODE_INLINE_PAIRS", "129");
  CHECK_THROWS_WITH(tuned_plan(s, Arch::sm_90a, 1, 132), Catch::Contains("MOEJIT_DECODE_INLINE_PAIRS"));
  env.unset("MOEJIT_DECODE_INLINE_PAIRS");
  CHECK(tuned_plan(s, Arch::sm_90a, 16, 132).kernels.size() == 2);
  // A layer whose busiest expert exceeds 32 pairs sizes its tiles for it (3 experts at M = 64).
  CHECK(tuned_plan(tiny_layer(), Arch::sm_90a, 64, 132).kernels.back().ntiles == 8);
  CHECK(d4.kernels[1].columns == 4);
  CHECK(tuned_plan(ds, Arch::sm_90a, 1, 132).kernels[0].kind == KernelKind::decode_fc1);
  CHECK(g4.kernels[0].columns == 4);  // MXFP4 FC1
  CHECK(tuned_plan(s, Arch::sm_90a, 5, 132).kernels[0].columns == 4);  // FC1 and FC2-sum in 4 columns
  CHECK(tuned_plan(s, Arch::sm_90a, 5, 132).kernels[1].columns == 4);  // up to 8 tokens
  CHECK(tuned_plan(s, Arch::sm_90a, 8, 132).kernels[1].columns == 4);
  CHECK(tuned_plan(s, Arch::sm_90a, 9, 132).kernels[1].columns == 8);
  env.set("MOEJIT_DECODE_FC1", "grid");
  env.set("MOEJIT_DECODE_FC2", "split");
  const Plan g4_grid = tuned_plan(s, Arch::sm_90a, 4, 132);
  env.set("MOEJIT_DECODE_FC1", "loop");
  env.set("MOEJIT_DECODE_FC2", "sum");
  const Plan g16_forced = tuned_plan(s, Arch::sm_90a, 16, 132);
  const Plan g17_forced = tuned_plan(s, Arch::sm_90a, 17, 132);  // beyond inline routing: not applicable
  env.set("MOEJIT_DECODE_FC2", "both");
  CHECK_THROWS_WITH(tuned_plan(s, Arch::sm_90a, 1, 132), Catch::Contains("split or sum"));
  env.unset("MOEJIT_DECODE_FC2");
  env.set("MOEJIT_DECODE_FC1", "maybe");
  CHECK_THROWS_WITH(tuned_plan(s, Arch::sm_90a, 1, 132), Catch::Contains("grid, loop or stream"));
  env.unset("MOEJIT_DECODE_FC1");
  env.unset("MOEJIT_DECODE_FC2");
  CHECK(g4_grid.kernels[0].kind == KernelKind::decode_fc1);
  CHECK(g4_grid.kernels[1].kind == KernelKind::decode_fc2);
  CHECK(g16_forced.kernels[0].kind == KernelKind::decode_fc1_loop);
  CHECK(g16_forced.kernels[1].kind == KernelKind::decode_fc2_sum);
  REQUIRE(g17_forced.kernels.size() == 3);
  CHECK(g17_forced.kernels[1].kind == KernelKind::decode_fc1);
  CHECK(g17_forced.kernels[2].kind == KernelKind::decode_fc2);
  // gpt-oss M=2: ~7 experts x 180 slabs = 1260 FC1 CTAs: one wave only as 2-warp CTAs.
  CHECK(tuned_plan(s, Arch::sm_90a, 2, 132).kernels[0].warps == 2);
  // A 3-expert toy layer: a grid small enough for 8-warp FC1 CTAs.
  CHECK(tuned_plan(tiny_layer(), Arch::sm_90a, 1, 132).kernels[0].warps == 8);

  // Tile overrides: fields w, n, d, o, p, c in that order; a streaming FC1 sizes its CTAs per SM from
  // shared memory when o is absent; columns are 8 or 4, and MOEJIT_DECODE_COLUMNS sets both kernels.
  env.set("MOEJIT_DECODE_FC1", "stream");
  env.set("MOEJIT_DECODE_TILE_FC1", "w8d3p2c4");
  const KernelKey st = tuned_plan(ds, Arch::sm_90a, 2, 132).kernels[0];
  CHECK(st.kind == KernelKind::decode_fc1_stream);
  CHECK(st.warps == 8);
  CHECK(st.depth == 3);
  CHECK(st.parts == 2);
  CHECK(st.columns == 4);
  // 8 consumer warps and the producer warp. Without o, as many CTAs per SM as fit in 228 KiB (generator.cpp:
  // decode_ctas_per_sm): the ring (128 B of barriers, then 3 stages x 8 warps x 2 parts x 2 matrices x
  // (512 B of weights + 64 B of NVFP4 scales)), the FC1 reduction buffer (8 warps x 1 tile x 2 matrices x
  // 512 B), the 64-pair inline routing list (16 x 64 + 264 B) and the 1 KiB the driver reserves per CTA:
  // 3, below the 2048 / 288 = 7 the threads allow.
  const int st_ring = 128 + 3 * 8 * 2 * 2 * (512 + 64);
  CHECK(kernel_dynamic_smem(st) == st_ring);
  CHECK(kernel_threads(st) == (8 + 1) * 32);
  CHECK(decode_ctas_per_sm(st) ==
        std::min(2048 / ((8 + 1) * 32), 228 * 1024 / (st_ring + 8 * 1 * 2 * 512 + (16 * 64 + 264) + 1024)));
  // The FC2-sum kernels ask the L2 for their chunks 2 past the ring; f overrides it (f0: off).
  CHECK(tuned_plan(s, Arch::sm_90a, 1, 132).kernels[1].l2_ahead == 2);
  CHECK(tuned_plan(s, Arch::sm_90a, 1, 132).kernels[0].l2_ahead == 0);
  CHECK(tuned_plan(s, Arch::sm_90a, 32, 132).kernels.back().l2_ahead == 0);  // split FC2
  env.set("MOEJIT_DECODE_TILE_FC2", "w16d1o2p4c4f0");
  CHECK(tuned_plan(s, Arch::sm_90a, 1, 132).kernels[1].l2_ahead == 0);
  env.set("MOEJIT_DECODE_TILE_FC2", "w16d1");
  CHECK(tuned_plan(s, Arch::sm_90a, 1, 132).kernels[1].l2_ahead == 2);
  // FC2-sum over gpt-oss's uneven grid (180 slabs on 132 SMs): from M = 3, 2 CTAs of 8 warps per slab
  // (3 per SM); one token, two tokens (8 experts x 2 parts fill 16 warps exactly), and DeepSeek-V3's 448
  // slabs keep whole slabs.
  env.unset("MOEJIT_DECODE_TILE_FC2");
  CHECK(tuned_plan(s, Arch::sm_90a, 1, 132).kernels[1].groups == 1);
  const KernelKey two = tuned_plan(s, Arch::sm_90a, 2, 132).kernels.back();
  CHECK(two.kind == KernelKind::decode_fc2_sum);
  CHECK(two.groups == 1);
  CHECK(two.warps == 16);
  CHECK(two.parts == 2);
  // ... in CTAs of two slabs (90 on 132 SMs, one per SM, depth 2 at 128 registers); one token keeps one.
  CHECK(two.slabs == 2);
  CHECK(two.min_blocks == 1);
  CHECK(two.depth == 2);
  CHECK(tuned_plan(s, Arch::sm_90a, 1, 132).kernels[1].slabs == 1);
  // A tile override restates the grid: without s it has one slab per CTA, s2 asks for two.
  env.set("MOEJIT_DECODE_TILE_FC2", "w16d2o1p2c4f2");
  CHECK(tuned_plan(s, Arch::sm_90a, 2, 132).kernels.back().slabs == 1);
  env.set("MOEJIT_DECODE_TILE_FC2", "w16d2o1p4s2");
  CHECK(tuned_plan(s, Arch::sm_90a, 1, 132).kernels.back().slabs == 2);
  env.set("MOEJIT_DECODE_TILE_FC2", "w16d2o1p2g2");
  CHECK(tuned_plan(s, Arch::sm_90a, 2, 132).kernels.back().groups == 2);
  // s2 without g at M = 4, where the planner splits slabs over 2 CTAs: one CTA per slab pair.
  env.unset("MOEJIT_DECODE_TILE_FC2");
  REQUIRE(tuned_plan(s, Arch::sm_90a, 4, 132).kernels.back().groups == 2);
  env.set("MOEJIT_DECODE_TILE_FC2", "w16d2o1p2s2");
  CHECK(tuned_plan(s, Arch::sm_90a, 4, 132).kernels.back().groups == 1);
  CHECK(tuned_plan(s, Arch::sm_90a, 4, 132).kernels.back().slabs == 2);
  env.set("MOEJIT_DECODE_TILE_FC2", "w8d2o3p2g2s2");
  CHECK_THROWS_WITH(tuned_plan(s, Arch::sm_90a, 4, 132), Catch::Contains("groups 1"));
  env.set("MOEJIT_DECODE_TILE_FC2", "w16d2o1p2s3");
  CHECK_THROWS_WITH(tuned_plan(s, Arch::sm_90a, 2, 132), Catch::Contains("must look like"));
  env.unset("MOEJIT_DECODE_TILE_FC2");
  for (int m = 3; m <= 16; ++m) CHECK(tuned_plan(s, Arch::sm_90a, m, 132).kernels.back().slabs == 1);
  for (int m = 1; m <= 16; ++m) CHECK(tuned_plan(ds, Arch::sm_90a, m, 132).kernels.back().slabs == 1);
  int grouped_plans = 0;
  for (int m : {3, 4, 8}) {
    const KernelKey fc2 = tuned_plan(s, Arch::sm_90a, m, 132).kernels.back();
    CHECK(fc2.kind == KernelKind::decode_fc2_sum);
    CHECK(fc2.groups == 2);
    CHECK(fc2.warps == 8);
    CHECK(fc2.min_blocks == 3);
    grouped_plans += fc2.groups == 2;
  }
  CHECK(grouped_plans == 3);
  CHECK(tuned_plan(ds, Arch::sm_90a, 4, 132).kernels.back().groups == 1);
  env.set("MOEJIT_DECODE_TILE_FC2", "w8d1o3p2g2");
  const KernelKey grouped = tuned_plan(s, Arch::sm_90a, 1, 132).kernels[1];
  CHECK(grouped.groups == 2);
  CHECK(grouped.parts == 2);
  CHECK(grouped.warps == 8);
  env.set("MOEJIT_DECODE_TILE_FC2", "w8d1g2p2");
  CHECK_THROWS_WITH(tuned_plan(s, Arch::sm_90a, 1, 132), Catch::Contains("must look like"));
  env.set("MOEJIT_DECODE_TILE_FC2", "w8d1p3g2");
  CHECK_THROWS_WITH(tuned_plan(s, Arch::sm_90a, 1, 132), Catch::Contains("multiple of the parts"));
  env.unset("MOEJIT_DECODE_TILE_FC2");
  // n sets the token tiles (1, 2, 4 or 8), right after w.
  env.set("MOEJIT_DECODE_TILE_FC1", "w4n2d1o4");
  env.set("MOEJIT_DECODE_TILE_FC2", "w4n2d1o6");
  const Plan two_tiles = tuned_plan(s, Arch::sm_90a, 64, 132);
  CHECK(two_tiles.kernels[1].ntiles == 2);
  CHECK(two_tiles.kernels[1].min_blocks == 4);
  CHECK(two_tiles.kernels[2].ntiles == 2);
  env.unset("MOEJIT_DECODE_TILE_FC2");
  for (const char* bad : {"w4d1c3", "w4p2d1", "w4d1o2x", "d1w4", "w4d1f17", "w4d1f2c4", "w4d1x2", "w4d1x1f2", "w4n3d1",
                          "w4d1n2", "w4n0d1"}) {
    env.set("MOEJIT_DECODE_TILE_FC1", bad);
    CHECK_THROWS_WITH(tuned_plan(ds, Arch::sm_90a, 2, 132), Catch::Contains("must look like"));
  }
  env.unset("MOEJIT_DECODE_TILE_FC1");
  env.unset("MOEJIT_DECODE_FC1");
  // At one token an FC1 grid stages x where it has no activation ring (DeepSeek-V3 at 8 CTAs per SM,
  // both formats); gpt-oss's and Qwen3's rings keep their loads; x0/x1 override.
  LayerSpec ds_mx = ds;
  ds_mx.format = ScaleFormat::mxfp4;
  const KernelKey ds_mx_fc1 = tuned_plan(ds_mx, Arch::sm_90a, 1, 132).kernels[0];
  CHECK(ds_mx_fc1.x_staged);
  CHECK(ds_mx_fc1.str().find(":w4n1d1o8c4x:") != std::string::npos);
  CHECK(!decode_activation_ring(ds_mx_fc1));
  CHECK(!tuned_plan(ds_mx, Arch::sm_90a, 2, 132).kernels[0].x_staged);
  CHECK(!tuned_plan(s, Arch::sm_90a, 1, 132).kernels[0].x_staged);
  CHECK(decode_activation_ring(tuned_plan(s, Arch::sm_90a, 1, 132).kernels[0]));
  const KernelKey ds_fc1 = tuned_plan(ds, Arch::sm_90a, 1, 132).kernels[0];
  CHECK(ds_fc1.str().find(":w4n1d1o8c4x:") != std::string::npos);
  CHECK(!tuned_plan(qw, Arch::sm_90a, 1, 132).kernels[0].x_staged);
  env.set("MOEJIT_DECODE_TILE_FC1", "w4d1o6c4x1");
  CHECK(tuned_plan(s, Arch::sm_90a, 1, 132).kernels[0].x_staged);
  env.set("MOEJIT_DECODE_TILE_FC1", "w4d1o8c4x0");
  CHECK(!tuned_plan(ds_mx, Arch::sm_90a, 1, 132).kernels[0].x_staged);
  env.unset("MOEJIT_DECODE_TILE_FC1");
  env.set("MOEJIT_DECODE_COLUMNS", "8");
  CHECK(tuned_plan(s, Arch::sm_90a, 1, 132).kernels[1].columns == 8);
  env.set("MOEJIT_DECODE_COLUMNS", "4");
  CHECK(tuned_plan(ds, Arch::sm_90a, 16, 132).kernels[1].columns == 4);
  env.set("MOEJIT_DECODE_COLUMNS", "6");
  CHECK_THROWS_WITH(tuned_plan(s, Arch::sm_90a, 1, 132), Catch::Contains("must be 8 or 4"));
  env.unset("MOEJIT_DECODE_COLUMNS");

  env.set("MOEJIT_DECODE_LAUNCH", "cooperative");
  const Plan coop = tuned_plan(s, Arch::sm_90a, 1, 132);
  const Plan coop_routed = tuned_plan(s, Arch::sm_90a, 32, 132);
  env.set("MOEJIT_DECODE_LAUNCH", "plain");
  const Plan plain = tuned_plan(s, Arch::sm_90a, 1, 132);
  env.set("MOEJIT_DECODE_LAUNCH", "sometimes");
  CHECK_THROWS_WITH(tuned_plan(s, Arch::sm_90a, 1, 132), Catch::Contains("pdl, plain or cooperative"));
  env.unset("MOEJIT_DECODE_LAUNCH");
  CHECK(coop.launch == DecodeLaunch::cooperative);
  REQUIRE(coop.kernels.size() == 1);
  CHECK(coop.kernels[0].kind == KernelKind::decode_fused);
  CHECK(coop.kernels[0].warps == g1.kernels[0].warps);
  REQUIRE(coop_routed.kernels.size() == 2);
  CHECK(coop_routed.kernels[0].kind == KernelKind::route);
  CHECK(coop_routed.kernels[1].kind == KernelKind::decode_fused);
  CHECK(plain.launch == DecodeLaunch::plain);
  CHECK(plain.kernels == g1.kernels);
}

TEST_CASE("keys_for_range covers every plan in the range exactly once", "[planner]") {
  const LayerSpec s = gptoss();
  const auto keys = keys_for_range(s, Arch::sm_90a, 64, 132);
  std::set<KernelKey> set(keys.begin(), keys.end());
  CHECK(set.size() == keys.size());
  for (int m = 1; m <= 64; ++m)
    for (const KernelKey& k : make_plan(s, Arch::sm_90a, m, 132).kernels) CHECK(set.count(k) == 1);
}

TEST_CASE("the batch family: planned past the cutover, forced anywhere, keys normalized", "[planner][keys][batch]") {
  ScopedEnv env{"MOEJIT_BATCH_TILE_FC1", "MOEJIT_BATCH_TILE_FC2"};
  const LayerSpec s = gptoss();
  const int from = batch_from_tokens(s);
  CHECK(tuned_plan(s, Arch::sm_90a, from - 1, 132).family == Family::decode);
  CHECK(from == 192);  // about 6 pairs per expert for gpt-oss-120b's 12.4 MB experts (measured cutover)
  for (int m : {from, 4096, kMaxTokens}) {
    INFO("M=" << m);
    // Forced past prefill_from_tokens, where the automatic plan on sm_90a is the prefill family.
    const Plan p = tuned_plan(s, Arch::sm_90a, m, 132, m == from ? Family::automatic : Family::batch);
    CHECK(p.family == Family::batch);
    REQUIRE(p.kernels.size() == 3);
    CHECK(p.kernels[0].kind == KernelKind::route);
    CHECK(p.kernels[1].kind == KernelKind::batch_fc1);
    CHECK(p.kernels[2].kind == KernelKind::batch_fc2);
    // 6 pairs per expert: one 8-column tile of register MMAs; 64+ (here 128+): warpgroup MMA, 2 warpgroups x
    // 64 pairs, one slab per warp, FC1 and FC2 alike (their activation layout depends on it).
    CHECK(p.kernels[1].ntiles == (m == from ? 1 : 8));
    CHECK(p.kernels[1].wgmma == (m != from));
    CHECK(p.kernels[1].warps == (m == from ? 4 : 8));
    CHECK(p.kernels[1].slabs == 1);
    CHECK(p.kernels[2].wgmma == p.kernels[1].wgmma);
    CHECK(p.kernels[2].slabs == p.kernels[1].slabs);
    // sm_120a has no warpgroup MMA: the widest register tile, two slabs per warp.
    const Plan q = tuned_plan(s, Arch::sm_120a, m, 84);
    CHECK_FALSE(q.kernels.at(1).wgmma);
    CHECK(q.kernels.at(1).slabs == (m == from ? 1 : 2));
  }
  // Token tiles by pairs per expert (gpt-oss-120b: 4 of 128 experts per token, p = M / 32): register MMAs
  // 1/2 column tiles to 8 / below 14, on sm_90a warpgroup MMA from 14 pairs, 32/48/56/64 pairs per tile
  // below 26 / below 40 / below 48 / from 48. sm_120a keeps register tiles: 4 (two slabs) below 40, then 8.
  const auto tile = [&](Arch arch, int m) {
    const KernelKey k = make_plan(s, arch, m, 132, Family::batch).kernels.at(1);
    return std::to_string(k.ntiles) + (k.wgmma ? "m" : "");
  };
  CHECK(tile(Arch::sm_90a, 256) == "1");
  CHECK(tile(Arch::sm_90a, 257) == "2");
  CHECK(tile(Arch::sm_90a, 447) == "2");
  CHECK(tile(Arch::sm_90a, 448) == "4m");
  CHECK(tile(Arch::sm_90a, 831) == "4m");
  CHECK(tile(Arch::sm_90a, 832) == "6m");
  CHECK(tile(Arch::sm_90a, 1279) == "6m");
  CHECK(tile(Arch::sm_90a, 1280) == "7m");
  CHECK(tile(Arch::sm_90a, 1535) == "7m");
  CHECK(tile(Arch::sm_90a, 1536) == "8m");
  CHECK(tile(Arch::sm_120a, 447) == "2");
  CHECK(tile(Arch::sm_120a, 448) == "4");
  CHECK(tile(Arch::sm_120a, 1279) == "4");
  CHECK(tile(Arch::sm_120a, 1280) == "8");
  for (int m : {448, 832, 1280, 1536}) {  // the automatic plan; from 1792 (56 pairs per expert) it is the prefill family
    const Plan w = tuned_plan(s, Arch::sm_90a, m, 132);
    CHECK(w.kernels.at(1).warps == 8);
    CHECK(w.kernels.at(1).min_blocks == 2);
    CHECK(w.kernels.at(2).wgmma);
    CHECK(w.kernels.at(2).ntiles == w.kernels.at(1).ntiles);
  }
  CHECK(tuned_plan(s, Arch::sm_120a, 448, 84).kernels.at(1).slabs == 2);  // 4 column tiles: two slabs per warp
  // Never while the decode family routes inside its CTAs (a 3-expert layer gets 42 pairs per expert at
  // M = 64, all 128 pairs routed inline), and never past the decode family's last token count.
  CHECK(batch_from_tokens(tiny_layer()) == kInlineRouteMaxPairs / tiny_layer().top_k + 1);
  LayerSpec one_expert = s;
  one_expert.experts = 1024;
  one_expert.top_k = 1;
  CHECK(batch_from_tokens(one_expert) == kDecodeMaxTokens + 1);
  // Forced at one token: the narrowest tile (one pair per expert on average).
  const Plan one = make_plan(s, Arch::sm_90a, 1, 132, Family::batch);
  CHECK(one.family == Family::batch);
  CHECK(one.kernels.at(1).ntiles == 1);
  CHECK(parse_family("batch") == Family::batch);
  CHECK(to_string(Family::batch) == "batch");

  KernelKey k = one.kernels.at(1);
  k.l2_ahead = 4;
  CHECK(k.normalized().l2_ahead == 0);  // the copy ring runs ahead, not L2 requests
  k.depth = 8;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("1..7 chunks"));
  k = one.kernels.at(1);
  k.inline_route = 1;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("route kernel"));
  k = one.kernels.at(1);
  k.columns = 4;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("columns 8"));
  k = one.kernels.at(1);
  k.warps = 17;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("at most 16 warps"));
  KernelKey fc2 = one.kernels.at(2);
  CHECK(fc2.activation == Activation::silu);  // FC2 ignores the activation and limit
  CHECK_FALSE(fc2.limit);

  // The tile override: MOEJIT_BATCH_TILE_FC1 / _FC2.
  env.set("MOEJIT_BATCH_TILE_FC1", "w8n4d1o2");
  const Plan over = tuned_plan(s, Arch::sm_120a, 600, 84);  // FC2 planned: 4 register column tiles, 2 slabs
  env.unset("MOEJIT_BATCH_TILE_FC1");
  env.set("MOEJIT_BATCH_TILE_FC2", "w4n32d2o1m1");
  const Plan wide = tuned_plan(s, Arch::sm_90a, 4096, 132, Family::batch);
  env.set("MOEJIT_BATCH_TILE_FC2", "w4n8d3");
  const Plan narrow = tuned_plan(s, Arch::sm_90a, 4096, 132, Family::batch);
  env.unset("MOEJIT_BATCH_TILE_FC2");
  CHECK(wide.kernels.at(2).wgmma);
  CHECK(wide.kernels.at(2).ntiles == 32);  // 256 pairs per warpgroup MMA
  CHECK_FALSE(narrow.kernels.at(2).wgmma);  // an override without m1 asks for register MMAs
  CHECK(narrow.kernels.at(1).wgmma);
  CHECK(over.kernels.at(1).warps == 8);
  CHECK(over.kernels.at(1).ntiles == 4);
  CHECK(over.kernels.at(1).min_blocks == 2);
  CHECK(over.kernels.at(1).slabs == 1);  // an override without s keeps one slab per warp
  CHECK(over.kernels.at(2).warps == 4);
  CHECK(over.kernels.at(2).slabs == 2);

  // Warpgroup-MMA keys: sm_90a only, whole warpgroups, one slab per warp, depth >= 2, up to 256 pairs.
  KernelKey w = wide.kernels.at(2);
  CHECK(KernelKey::parse(w.str()) == w);
  CHECK_THAT(w.str(), Catch::Contains(":w4n32d2o1m:"));  // the tile field ends in m
  w.ntiles = 33;
  CHECK_THROWS_WITH(w.normalized(), Catch::Contains("ntiles must be in [1, 32]"));
  w = wide.kernels.at(2);
  w.arch = Arch::sm_120a;
  CHECK_THROWS_WITH(w.normalized(), Catch::Contains("sm_90a only"));
  w = wide.kernels.at(2);
  w.warps = 6;
  CHECK_THROWS_WITH(w.normalized(), Catch::Contains("whole warpgroups"));
  w = wide.kernels.at(2);
  w.slabs = 2;
  CHECK_THROWS_WITH(w.normalized(), Catch::Contains("one slab"));
  w = wide.kernels.at(2);
  w.depth = 1;
  CHECK_THROWS_WITH(w.normalized(), Catch::Contains("depth >= 2"));
  KernelKey w1 = wide.kernels.at(1);  // FC1 stores the layer input a step after loading it: one stage more
  w1.depth = 2;
  CHECK_THROWS_WITH(w1.normalized(), Catch::Contains("depth >= 3"));
  w = wide.kernels.at(2);
  w.wgmma = false;
  CHECK_THROWS_WITH(w.normalized(), Catch::Contains("ntiles must be in [1, 8]"));  // register MMAs: 64 pairs at most
  KernelKey d = tuned_plan(s, Arch::sm_90a, 1, 132).kernels.at(0);
  d.wgmma = true;
  CHECK_FALSE(d.normalized().wgmma);  // other kinds ignore it
}

TEST_CASE("the prefill plan gives FC2 two slabs per warp at the 128-token tile where H >= 4096",
          "[planner][keys][prefill]") {
  ScopedEnv env{"MOEJIT_PREFILL_TILE_FC1", "MOEJIT_PREFILL_TILE_FC2"};
  // Measured to pay at DeepSeek-V3's H = 7168 and not at gpt-oss-120b's 2880 or Qwen3-30B-A3B's 2048
  // (perf-log v49); FC1 keeps one slab (its two matrices already make two A operands).
  const auto kernel = [](const Plan& p, KernelKind kind) {
    for (const KernelKey& k : p.kernels)
      if (k.kind == kind) return k;
    FAIL("the plan has no " << to_string(kind) << " kernel");
    return KernelKey{};
  };
  const struct {
    const char* config;
    int slabs;
  } cases[] = {{"deepseek-v3", 2}, {"deepseek-v3-mxfp4", 2}, {"gpt-oss-120b", 1}, {"qwen3-30b-a3b", 1}};
  for (const auto& c : cases) {
    const LayerSpec spec = load_model_config(c.config).local();
    for (ActPrecision precision : {ActPrecision::a16, ActPrecision::a8, ActPrecision::a4}) {
      LayerSpec sp = spec;
      sp.precision = precision;
      for (int m : {4096, 16384}) {
        INFO(c.config << " " << to_string(precision) << " M=" << m);
        const Plan p = tuned_plan(sp, Arch::sm_90a, m, 132);
        REQUIRE(p.family == Family::prefill);
        const KernelKey fc1 = kernel(p, KernelKind::prefill_fc1), fc2 = kernel(p, KernelKind::prefill_fc2);
        CHECK(fc1.slabs == 1);
        CHECK(fc2.ntiles == 16);
        CHECK(fc2.slabs == c.slabs);
        // Two slabs double FC2's A operands: 128 accumulators per consumer thread, a ring that fits.
        CHECK(kernel_dynamic_smem(fc2) <= 200 * 1024 + 1024);
        CHECK(KernelKey::parse(fc2.str()) == fc2);
      }
    }
    // Below 96 pairs per expert (the 96-token tile) FC2 keeps one slab everywhere.
    const int m = 64 * spec.experts / spec.top_k;
    INFO(c.config << " M=" << m);
    const Plan p = tuned_plan(spec, Arch::sm_90a, m, 132);
    REQUIRE(p.family == Family::prefill);
    CHECK(kernel(p, KernelKind::prefill_fc2).ntiles == 12);
    CHECK(kernel(p, KernelKind::prefill_fc2).slabs == 1);
  }
}

TEST_CASE("the prefill family: planned on sm_90a from 56 pairs per expert, forced anywhere, keys normalized",
          "[planner][keys][prefill]") {
  ScopedEnv env{"MOEJIT_PREFILL_TILE_FC1", "MOEJIT_PREFILL_TILE_FC2"};
  const LayerSpec s = gptoss();  // 4 of 128 experts per token: p = M / 32
  const int from = prefill_from_tokens(s, Arch::sm_90a);
  CHECK(from == 1792);
  CHECK(prefill_from_tokens(s, Arch::sm_120a) == kMaxTokens + 1);
  CHECK(prefill_from_tokens(s, Arch::sm_121a) == kMaxTokens + 1);
  CHECK(tuned_plan(s, Arch::sm_90a, from - 1, 132).family == Family::batch);
  for (int m : {from, 3071, 3072, 16384, kMaxTokens}) {
    INFO("M=" << m);
    const Plan p = tuned_plan(s, Arch::sm_90a, m, 132);
    CHECK(p.family == Family::prefill);
    REQUIRE(p.kernels.size() == 3);
    CHECK(p.kernels[0].kind == KernelKind::route);
    CHECK(p.kernels[1].kind == KernelKind::prefill_fc1);
    CHECK(p.kernels[2].kind == KernelKind::prefill_fc2);
    // 96-pair tiles below 96 pairs per expert, 128-pair ones from there; two consumer warpgroups, one
    // persistent CTA per SM, rings as deep as 200 KiB allow.
    CHECK(p.kernels[1].ntiles == (m < 3072 ? 12 : 16));
    CHECK(p.kernels[2].ntiles == p.kernels[1].ntiles);
    CHECK(p.kernels[1].warps == 8);
    CHECK(p.kernels[1].min_blocks == 1);
    CHECK(kernel_threads(p.kernels[1]) == 8 * 32 + 128);
    CHECK(kernel_dynamic_smem(p.kernels[1]) <= 200 * 1024 + 1024);
    CHECK(kernel_dynamic_smem(p.kernels[2]) <= 200 * 1024 + 1024);
    CHECK(p.kernels[1].depth >= 3);
    // Each key survives its string form.
    for (const KernelKey& k : p.kernels) CHECK(KernelKey::parse(k.str()) == k);
    CHECK(tuned_plan(s, Arch::sm_120a, m, 188).family == Family::batch);
  }
  // Forced below the cutover: narrower tiles for fewer pairs per expert.
  CHECK(make_plan(s, Arch::sm_90a, 64, 132, Family::prefill).kernels.at(1).ntiles == 4);
  CHECK(make_plan(s, Arch::sm_90a, 1500, 132, Family::prefill).kernels.at(1).ntiles == 8);
  // sm_120a has no warpgroup MMA: forcing the family there fails with the reason.
  CHECK_THROWS_WITH(make_plan(s, Arch::sm_120a, 4096, 188, Family::prefill),
                    Catch::Contains("sm_90a's warpgroup MMA only"));
  // Key rules: whole consumer warpgroups, even tiles, one CTA per SM, a ring that fits.
  KernelKey k = make_plan(s, Arch::sm_90a, 4096, 132).kernels.at(1);
  k.warps = 6;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("consumer warpgroups"));
  k.warps = 8;
  k.ntiles = 15;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("even number of n8 blocks"));
  k.warps = 16;
  k.ntiles = 16;
  k.depth = 8;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("exceed"));
  k.warps = 8;
  k.depth = 3;
  // At most 160 accumulators per consumer thread: FC1's two matrices on 160 tokens, not on 176 or 256.
  k.ntiles = 32;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("accumulator registers"));
  k.ntiles = 22;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("at most 160"));
  k.ntiles = 20;
  k.depth = 4;
  CHECK(k.normalized().ntiles == 20);
  k.depth = 3;
  k.ntiles = 8;
  k.slabs = 2;
  CHECK_THROWS_WITH(k.normalized(), Catch::Contains("one slab per consumer warp"));
  k.slabs = 1;
  k.ntiles = 16;
  k.min_blocks = 2;
  CHECK(k.normalized().min_blocks == 1);
  // Two teams of consumer warpgroups (g2) take the units in turn: each team's warps share a stage, so the
  // stages shrink; teams are whole warpgroups, at most two.
  {
    KernelKey teams = make_plan(s, Arch::sm_90a, 4096, 132).kernels.at(2);
    teams.ntiles = 16;
    teams.depth = 7;
    const int one_team = kernel_dynamic_smem(teams);
    teams.groups = 2;
    CHECK(teams.normalized().groups == 2);
    CHECK(KernelKey::parse(teams.normalized().str()) == teams.normalized());
    CHECK(kernel_dynamic_smem(teams) < one_team);
    CHECK(generate_source(teams.normalized()).source.find(", 8, 2, 1, 128, ") != std::string::npos);
    teams.warps = 12;  // two teams of six warps
    CHECK_THROWS_WITH(teams.normalized(), Catch::Contains("two (g2) of whole warpgroups"));
    teams.warps = 8;
    teams.groups = 4;
    CHECK_THROWS_WITH(teams.normalized(), Catch::Contains("two (g2) of whole warpgroups"));
  }
  // 160-token tiles: FC1 (160 accumulators) runs 160, 128 and 40 columns; FC2 (80) 160, 128, 96, 80 and 40.
  // A 128-token tile runs neither 96 nor 160.
  {
    const Plan planned = make_plan(s, Arch::sm_90a, 4096, 132);
    for (int kernel : {1, 2}) {
      KernelKey wide = planned.kernels.at(kernel);
      wide.ntiles = 20;
      wide.depth = 4;
      const std::string src = generate_source(wide.normalized()).source;
      for (int n : {160, 128, 40}) CHECK(src.find(".m64n" + std::to_string(n) + "k16.") != std::string::npos);
      for (int n : {96, 80})
        CHECK((src.find(".m64n" + std::to_string(n) + "k16.") != std::string::npos) == (kernel == 2));
      KernelKey narrow = planned.kernels.at(kernel);
      narrow.ntiles = 16;
      narrow.depth = 4;
      CHECK(generate_source(narrow.normalized()).source.find(".m64n96k16.") == std::string::npos);
    }
  }
  // Clusters of two CTAs (p2) share each B block: the kernel is compiled with its cluster dimensions and
  // the template's cluster size; one team only; no other cluster size.
  {
    KernelKey pair = make_plan(s, Arch::sm_90a, 4096, 132).kernels.at(1);
    pair.ntiles = 16;
    pair.depth = 6;
    CHECK(pair.normalized().parts == 1);
    CHECK(generate_source(pair.normalized()).source.find("__cluster_dims__") == std::string::npos);
    const int alone = kernel_dynamic_smem(pair.normalized());
    pair.parts = 2;
    const KernelKey n = pair.normalized();
    CHECK(n.parts == 2);
    CHECK(n.str().find(":w8n16d6o1p2:") != std::string::npos);
    CHECK(KernelKey::parse(n.str()) == n);
    const std::string src = generate_source(n).source;
    CHECK(src.find("__cluster_dims__(2, 1, 1)") != std::string::npos);
    CHECK(src.find(", 8, 1, 128, 7, 2>(p)") != std::string::npos);  // warps, teams, N, stages, cluster
    CHECK(kernel_dynamic_smem(n) == alone);  // the same stages, in each CTA
    pair.parts = 4;
    CHECK_THROWS_WITH(pair.normalized(), Catch::Contains("clusters of two CTAs (p2)"));
    pair.parts = 2;
    pair.groups = 2;
    CHECK_THROWS_WITH(pair.normalized(), Catch::Contains("one team of consumer warpgroups (g1)"));
    ::setenv("MOEJIT_PREFILL_TILE_FC1", "w8n16d6p2", 1);
    ::setenv("MOEJIT_PREFILL_TILE_FC2", "w8n16d7p2", 1);
    const Plan forced = tuned_plan(s, Arch::sm_90a, 4096, 132);
    CHECK(forced.kernels.at(1).parts == 2);
    CHECK(forced.kernels.at(2).parts == 2);
    ::unsetenv("MOEJIT_PREFILL_TILE_FC1");
    ::unsetenv("MOEJIT_PREFILL_TILE_FC2");
  }
  // One slab per consumer warp in both planned kernels; FC2 takes two (s2) where its accumulators fit.
  const Plan planned = make_plan(s, Arch::sm_90a, 4096, 132);
  CHECK(planned.kernels.at(1).slabs == 1);
  CHECK(planned.kernels.at(2).slabs == 1);
  KernelKey fc2 = planned.kernels.at(2);
  fc2.slabs = 2;
  CHECK(fc2.normalized().slabs == 2);
  fc2.ntiles = 32;  // 2 x 128 accumulators
  CHECK_THROWS_WITH(fc2.normalized(), Catch::Contains("accumulator registers"));
  fc2.slabs = 3;
  CHECK_THROWS_WITH(fc2.normalized(), Catch::Contains("slabs must be 1 or 2"));
  // Overrides: tiles up to 32 n8 blocks without the warpgroup-MMA flag, FC1 and FC2 sharing one width.
  ::setenv("MOEJIT_PREFILL_TILE_FC1", "w4n8d2", 1);
  ::setenv("MOEJIT_PREFILL_TILE_FC2", "w4n32d3", 1);
  CHECK_THROWS_WITH(make_plan(s, Arch::sm_90a, 4096, 132, Family::automatic, TuningOverrides::from_environment()),
                    Catch::Contains("share one token tile"));
  ::setenv("MOEJIT_PREFILL_TILE_FC2", "w4n8d3s2", 1);
  const Plan o = make_plan(s, Arch::sm_90a, 4096, 132, Family::automatic, TuningOverrides::from_environment());
  CHECK(o.kernels.at(1).ntiles == 8);
  CHECK(o.kernels.at(1).warps == 4);
  CHECK(o.kernels.at(2).depth == 3);
  CHECK(o.kernels.at(2).slabs == 2);
  ::setenv("MOEJIT_PREFILL_TILE_FC2", "w4n16d3", 1);
  CHECK_THROWS_WITH(make_plan(s, Arch::sm_90a, 4096, 132, Family::automatic, TuningOverrides::from_environment()),
                    Catch::Contains("share one token tile"));
  // One override alone: the other kernel keeps its plan at the override's token tile, at every M (M = 512
  // plans 4-wide tiles), its ring refitted to the wider stages.
  ::unsetenv("MOEJIT_PREFILL_TILE_FC2");
  ::setenv("MOEJIT_PREFILL_TILE_FC1", "w8n16d6g2", 1);
  const Plan fc1_only = make_plan(s, Arch::sm_90a, 512, 132, Family::prefill, TuningOverrides::from_environment());
  CHECK(fc1_only.kernels.at(1).groups == 2);
  CHECK(fc1_only.kernels.at(2).ntiles == 16);
  CHECK(fc1_only.kernels.at(2).groups == 1);
  CHECK(fc1_only.kernels.at(2).depth == make_plan(s, Arch::sm_90a, 4096, 132).kernels.at(2).depth);
  ::unsetenv("MOEJIT_PREFILL_TILE_FC1");
  ::setenv("MOEJIT_PREFILL_TILE_FC2", "w8n8d7", 1);
  const Plan fc2_only = make_plan(s, Arch::sm_90a, 4096, 132, Family::automatic, TuningOverrides::from_environment());
  CHECK(fc2_only.kernels.at(1).ntiles == 8);
  CHECK(fc2_only.kernels.at(2).ntiles == 8);
  ::unsetenv("MOEJIT_PREFILL_TILE_FC2");
}

namespace {
// A kernel key with the layer's fields (kind and tile left at the defaults).
KernelKey layer_key_for_test(const LayerSpec& s) {
  KernelKey k;
  k.format = s.format;
  k.activation = s.activation;
  k.precision = s.precision;
  k.experts = s.experts;
  k.hidden = s.hidden;
  k.intermediate = s.intermediate;
  k.bias = s.has_bias;
  k.limit = s.limit.has_value();
  return k;
}
}  // namespace

TEST_CASE("a8/a4 prefill FC1 runs two teams at the 128-token tile where H <= 4096", "[planner][prefill][precision]") {
  ScopedEnv env{"MOEJIT_PREFILL_TILE_FC1", "MOEJIT_PREFILL_TILE_FC2"};
  for (const char* name : {"gpt-oss-120b", "qwen3-30b-a3b", "deepseek-v3"}) {
    LayerSpec s = load_model_config(name).local();
    for (ActPrecision p : {ActPrecision::a16, ActPrecision::a8, ActPrecision::a4}) {
      s.precision = p;
      INFO(name << " " << to_string(p));
      const Plan plan = tuned_plan(s, Arch::sm_90a, 8192, 132);
      REQUIRE(plan.family == Family::prefill);
      // a8/a4 plans start with the act_quant pre-pass.
      const size_t fc1_at = p == ActPrecision::a16 ? 1 : 2;
      REQUIRE(plan.kernels.size() == fc1_at + 2);
      const KernelKey& fc1 = plan.kernels.at(fc1_at);
      const KernelKey& fc2 = plan.kernels.at(fc1_at + 1);
      REQUIRE(fc1.kind == KernelKind::prefill_fc1);
      REQUIRE(fc2.kind == KernelKind::prefill_fc2);
      CHECK(fc1.ntiles == 16);
      CHECK(fc1.groups == (p != ActPrecision::a16 && s.hidden <= 4096 ? 2 : 1));
      CHECK(fc2.groups == 1);
      CHECK(kernel_dynamic_smem(fc1) <= 200 * 1024);
      CHECK(fc1.depth >= 3);
    }
  }
}

TEST_CASE("a8 and a4: keys, the kernel that refuses them, and plans with a16's families and tiles",
          "[planner][keys][precision]") {
  ScopedEnv env{"MOEJIT_DECODE_FC1", "MOEJIT_BATCH_TILE_FC1", "MOEJIT_BATCH_TILE_FC2"};
  for (ActPrecision p : {ActPrecision::a8, ActPrecision::a4}) {
    INFO(to_string(p));
    LayerSpec s = gptoss();
    s.precision = p;
    LayerSpec s16 = s;
    s16.precision = ActPrecision::a16;
    // Every plan over the range names the precision in its FC1 and FC2 keys, never the streamed FC1; the
    // batch and prefill families run a16's tiles (warpgroup-MMA ones included), except a8's register-fed
    // batch FC1, which holds two slabs per warp; the route kernel stays a16. Every family's plan starts with
    // the act_quant pre-pass (once per token or per pair; a prefill forward skips a per-pair pass, whose work
    // its gather does).
    CHECK(prefill_from_tokens(s, Arch::sm_90a) == prefill_from_tokens(s16, Arch::sm_90a));
    for (int m = 1; m <= kMaxTokens; m = m < 64 ? m + 1 : m * 2) {
      Plan plan = tuned_plan(s, Arch::sm_90a, m, 132);
      const Plan plan16 = tuned_plan(s16, Arch::sm_90a, m, 132);
      CHECK(plan.family == plan16.family);
      {
        REQUIRE(!plan.kernels.empty());
        const KernelKey& pre = plan.kernels.front();
        CHECK(pre.kind == KernelKind::act_quant);
        CHECK(pre.precision == p);
        CHECK(pre.hidden == s.hidden);
        CHECK(pre.intermediate == 0);
        CHECK(KernelKey::parse(pre.str()) == pre);
        plan.kernels.erase(plan.kernels.begin());
      }
      REQUIRE(plan.kernels.size() == plan16.kernels.size());
      for (size_t i = 0; i < plan.kernels.size(); ++i) {
        const KernelKey& k = plan.kernels[i];
        CHECK(k.kind != KernelKind::act_quant);
        INFO("M=" << m << " " << k.str());
        if (k.kind == KernelKind::route) {
          CHECK(k.precision == ActPrecision::a16);
          continue;
        }
        CHECK(k.precision == p);
        CHECK(k.kind != KernelKind::decode_fc1_stream);
        if (k.kind == KernelKind::batch_fc1 || k.kind == KernelKind::batch_fc2 || k.kind == KernelKind::prefill_fc1 ||
            k.kind == KernelKind::prefill_fc2) {
          KernelKey same = k;
          same.precision = ActPrecision::a16;
          if (k.kind == KernelKind::batch_fc1 && p == ActPrecision::a8 && !k.wgmma) {
            CHECK(k.slabs == 2);
            same.slabs = plan16.kernels[i].slabs;
          }
          if (k.kind == KernelKind::prefill_fc1) {
            // a8/a4's prefill FC1 at the 128-token tile runs two teams of one warpgroup each (its epilogue
            // beside the other team's products) where H <= 4096, as gpt-oss-120b's is.
            CHECK(k.groups == (k.ntiles == 16 ? 2 : 1));
            same.groups = plan16.kernels[i].groups;
            same.depth = plan16.kernels[i].depth;
          }
          CHECK(same.normalized() == plan16.kernels[i]);
        }
        if (k.kind == KernelKind::decode_fc1 || k.kind == KernelKind::decode_fc1_loop) {
          // a8's CTAs hold two slab groups of a16's warps (one 32-row scale block), at half a16's CTAs per
          // SM rounded up, so that the grid of half as many CTAs keeps a16's waves; a4's are a16's.
          const KernelKey& k16 = plan16.kernels[i];
          const bool pairs = p == ActPrecision::a8;
          KernelKey same = k;
          same.precision = ActPrecision::a16;
          same.min_blocks = k16.min_blocks;
          CHECK(same.normalized() == k16);
          CHECK(k.min_blocks == (pairs ? (k16.min_blocks + 1) / 2 : k16.min_blocks));
          CHECK(kernel_threads(k) == (pairs ? 2 : 1) * kernel_threads(k16));
          CHECK(decode_fc1_items_per_slot(k) == (pairs ? (s.intermediate / 16 + 1) / 2 : s.intermediate / 16));
          CHECK(decode_register_cap(k) >= (pairs ? 64 : decode_register_cap(k16)));
        }
      }
    }
    for (const KernelKey& k : tuned_plan(s16, Arch::sm_90a, 16, 132).kernels) CHECK(k.kind != KernelKind::act_quant);
    KernelKey pre16 = tuned_plan(s, Arch::sm_90a, 16, 132).kernels.front();
    pre16.precision = ActPrecision::a16;
    CHECK_THROWS_WITH(pre16.normalized(), Catch::Contains("a8 and a4 layers only"));
    // Forcing the kernel that computes in a16 only is an error naming the precision, not a fallback.
    KernelKey stream = layer_key_for_test(s);
    stream.kind = KernelKind::decode_fc1_stream;
    stream.inline_route = true;
    CHECK_THROWS_WITH(stream.normalized(), Catch::Contains("decode_fc1_stream computes in a16 only"));
    ::setenv("MOEJIT_DECODE_FC1", "stream", 1);
    CHECK_THROWS_WITH(tuned_plan(s, Arch::sm_90a, 16, 132), Catch::Contains("a16 only"));
    ::unsetenv("MOEJIT_DECODE_FC1");
    // a8's decode_fc1 / decode_fc1_loop CTAs hold two slab groups of `warps` warps (at most 16 per group);
    // the cooperative kernel keeps one group, and a16's tile and CTAs per SM.
    const bool pairs = p == ActPrecision::a8;
    for (KernelKind kind : {KernelKind::decode_fc1, KernelKind::decode_fc1_loop, KernelKind::decode_fused}) {
      KernelKey fc1 = layer_key_for_test(s);
      fc1.kind = kind;
      fc1.inline_route = true;
      fc1.warps = 16;
      const bool grouped = pairs && kind != KernelKind::decode_fused;
      CHECK(kernel_threads(fc1) == (grouped ? 1024 : 512));
      CHECK(decode_fc1_items_per_slot(fc1.normalized()) ==
            (grouped ? (s.intermediate + 31) / 32 : s.intermediate / 16));
      fc1.warps = 17;
      if (grouped)
        CHECK_THROWS_WITH(fc1.normalized(), Catch::Contains("two slab groups"));
      else
        CHECK(kernel_threads(fc1) == 17 * 32);
    }
    {
      ScopedEnv launch{"MOEJIT_DECODE_LAUNCH"};
      ::setenv("MOEJIT_DECODE_LAUNCH", "cooperative", 1);
      // SM12x: fewer threads per SM bound the CTAs per SM (gpt-oss at M = 2 on 188 SMs: 8 CTAs of 4 warps).
      for (const auto& [arch, sms] :
           {std::pair{Arch::sm_90a, 132}, std::pair{Arch::sm_120a, 188}, std::pair{Arch::sm_121a, 48}})
        for (int m : {1, 2, 4, 16}) {
          KernelKey fused = tuned_plan(s, arch, m, sms).kernels.back();
          const KernelKey fused16 = tuned_plan(s16, arch, m, sms).kernels.back();
          REQUIRE(fused.kind == KernelKind::decode_fused);
          fused.precision = ActPrecision::a16;
          CHECK(fused.normalized() == fused16);
        }
    }
    // The warpgroup-MMA batch tiles and the prefill family take both precisions, with one slab per warp.
    KernelKey wg = layer_key_for_test(s);
    wg.kind = KernelKind::batch_fc1;
    wg.wgmma = true;
    wg.warps = 8;
    wg.depth = 3;
    CHECK(wg.normalized().precision == p);
    CHECK(wg.normalized().slabs == 1);
    KernelKey pf = layer_key_for_test(s);
    pf.kind = KernelKind::prefill_fc1;
    pf.warps = 8;
    pf.ntiles = 16;
    pf.depth = 3;
    CHECK(pf.normalized().precision == p);
    const std::string gather = generate_source(pf.normalized()).source;
    CHECK(gather.find("moe_prefill_gather<" + std::to_string(s.hidden) + ", 128, 8, 2>") != std::string::npos);
  }
  // a8's FC1 of one slab per warp adds the warp pairs' exchange area (one u32 per warp and token column)
  // to its shared memory: a prefill ring that fits alone but not with it is refused for a8 only.
  {
    const int most = arch_limits(Arch::sm_90a).max_dynamic_smem;
    bool found = false;
    for (int warps : {4, 8, 12, 16})
      for (int ntiles = 2; ntiles <= 32 && !found; ntiles += 2)
        for (int depth = 1; depth <= 14 && !found; ++depth) {
          KernelKey pf = layer_key_for_test(gptoss());
          pf.kind = KernelKind::prefill_fc1;
          pf.warps = warps;
          pf.ntiles = ntiles;
          pf.depth = depth;
          int dynamic = 0;
          try {
            dynamic = kernel_dynamic_smem(pf);  // a ring past the limit throws
          } catch (const Error&) {
            continue;
          }
          if (dynamic + 4 * warps * 8 * ntiles <= most) continue;
          found = true;
          INFO(pf.str());
          CHECK(pf.normalized().precision == ActPrecision::a16);
          pf.precision = ActPrecision::a8;
          CHECK_THROWS_WITH(pf.normalized(), Catch::Contains("exceed"));
          pf.precision = ActPrecision::a4;
          CHECK(pf.normalized().precision == ActPrecision::a4);
        }
    CHECK(found);
  }
  KernelKey a8fc1 = layer_key_for_test(gptoss());
  a8fc1.precision = ActPrecision::a8;
  a8fc1.kind = KernelKind::batch_fc1;
  a8fc1.slabs = 1;
  CHECK_THROWS_WITH(a8fc1.normalized(), Catch::Contains("two slabs per warp"));
  a8fc1.slabs = 2;
  CHECK(a8fc1.normalized().slabs == 2);
  // The generated source passes the precision to the templates.
  CHECK(generate_source(a8fc1.normalized()).source.find("#define MOEJIT_ACT_PRECISION 1") != std::string::npos);
  a8fc1.precision = ActPrecision::a16;
  CHECK(generate_source(a8fc1.normalized()).source.find("MOEJIT_ACT_PRECISION") == std::string::npos);
}
