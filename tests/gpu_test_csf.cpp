// Layers with scale planes in the compressed scale format (docs/CSF.md) on the GPU. The decode kernels
// read prepared CSF planes (docs/CSF.md §8: offsets, base bytes, exception records) and rebuild every
// scale byte into shared memory, so their outputs must equal the plain-scale kernels' bit for bit: every
// decode kernel variant the planner uses (grid, loop and streaming FC1; split FC2, FC2-sum over one and
// two slabs; the route kernel's lists and inline routing; the cooperative launch; even-column tiles),
// both formats, every activation, bias and limit, layers with forced exceptions, stages in dynamic shared
// memory, and the golden layers.
// The batch family (register-fed and warpgroup-MMA kernels) and the prefill family read the prepared CSF
// planes too (an a16 layer prepared with ScaleReads::csf or compact keeps no plain planes; by default they read the plain planes), and must agree the same way:
// every tile kind (one and two slabs per warp, FC2's slab pairs with an odd slab count), H and I tails,
// several M.
#include "catch_compat.hpp"

#include <fmt/format.h>

#include <random>
#include <string>
#include <vector>

#include "cli_process.hpp"
#include "golden_dir.hpp"
#include "gpu_support.hpp"
#include "moejit/csf_layer.hpp"
#include "moejit/error.hpp"
#include "moejit/generator.hpp"
#include "moejit/planner.hpp"

using namespace moejit;
using namespace moejit::test;

namespace {

const char* const kDecodeVariables[] = {"MOEJIT_DECODE_FC1",      "MOEJIT_DECODE_FC2",      "MOEJIT_DECODE_LAUNCH",
                                        "MOEJIT_DECODE_TILE_FC1", "MOEJIT_DECODE_TILE_FC2", "MOEJIT_DECODE_INLINE_PAIRS",
                                        "MOEJIT_DECODE_COLUMNS"};

// One planner variant: the decode overrides it sets (nullptr: unset).
struct Variant {
  const char* fc1 = nullptr;
  const char* fc2 = nullptr;
  const char* launch = nullptr;
  const char* tile_fc1 = nullptr;
  const char* tile_fc2 = nullptr;
  const char* inline_pairs = nullptr;
  const char* columns = nullptr;
  std::string describe() const {
    std::string s;
    const char* values[] = {fc1, fc2, launch, tile_fc1, tile_fc2, inline_pairs, columns};
    for (size_t i = 0; i < std::size(values); ++i)
      if (values[i]) s += fmt::format("{}={} ", kDecodeVariables[i], values[i]);
    return s.empty() ? "planner defaults" : s;
  }
  void apply() const {
    const char* values[] = {fc1, fc2, launch, tile_fc1, tile_fc2, inline_pairs, columns};
    for (size_t i = 0; i < std::size(values); ++i) {
      if (values[i]) ::setenv(kDecodeVariables[i], values[i], 1);
      else ::unsetenv(kDecodeVariables[i]);
    }
  }
};

// The variants of the decode family's kernels: every FC1 and FC2 kind, the launches, FC2-sum's groups
// and slab pairs, even columns, and routing by the route kernel (no inline pairs).
const Variant kVariants[] = {
    {},
    {.fc1 = "grid", .fc2 = "split"},
    {.fc1 = "loop", .fc2 = "sum"},
    {.fc1 = "stream", .fc2 = "sum"},
    {.fc1 = "stream", .fc2 = "split", .tile_fc1 = "w4d3p2"},
    {.fc1 = "loop", .fc2 = "sum", .tile_fc2 = "w16d2o1p2s2"},
    {.fc1 = "grid", .fc2 = "sum", .tile_fc2 = "w8d1p2g2"},
    {.fc1 = "grid", .fc2 = "sum", .tile_fc2 = "w8d1o2p2c4f2"},
    {.fc1 = "loop", .fc2 = "sum", .columns = "4"},
    {.launch = "cooperative"},
    {.launch = "plain", .inline_pairs = "0"},
    {.tile_fc1 = "w2d2f2", .inline_pairs = "0"},
};

// A realistic layer with exceptions forced into both planes: scattered bytes far from their rows'
// bytes (finite scales, so outputs stay finite), whole rows of spread bytes, and one row all equal.
HostLayer with_forced_exceptions(HostLayer h, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const bool nv = h.spec.format == ScaleFormat::nvfp4;
  auto far_byte = [&] { return static_cast<uint8_t>(nv ? 0x10 + rng() % 0x60 : 110 + rng() % 25); };
  const size_t block = static_cast<size_t>(scale_block(h.spec.format));
  for (auto [plane, row] : {std::pair{&h.w13_scale, h.spec.hidden / block}, std::pair{&h.w2_scale, h.spec.intermediate / block}}) {
    REQUIRE(!plane->empty());
    for (size_t n = 0; n < plane->size() / 20 + 1; ++n) (*plane)[rng() % plane->size()] = far_byte();
    for (size_t j = 0; j < row; ++j) (*plane)[j] = far_byte();      // row 0: spread bytes
    for (size_t j = 0; j < row; ++j) (*plane)[row + j] = (*plane)[row];  // row 1: all equal
  }
  return h;
}

// Outputs of `plain` prepared with plain scale reads and with CSF scale reads, compared exactly for
// each variant and M, decode family (and the batch family at the last M).
void expect_identical(const HostLayer& plain, const std::vector<int>& tokens, const std::vector<Variant>& variants) {
  const ScopedEnv guard{kDecodeVariables[0], kDecodeVariables[1], kDecodeVariables[2], kDecodeVariables[3],
                        kDecodeVariables[4], kDecodeVariables[5], kDecodeVariables[6]};
  Variant{}.apply();
  Runtime& base = tuned_runtime();
  const auto p_plain = base.prepare(plain, PrepareOptions{ScaleReads::plain});
  const auto p_csf = base.prepare(plain, PrepareOptions{ScaleReads::csf});
  REQUIRE(p_plain->csf_scales() == 0);
  REQUIRE(p_csf->csf_scales() == 3);
  int compared = 0;
  for (const Variant& v : variants) {
    v.apply();
    Runtime& rt = tuned_runtime();
    for (int m : tokens) {
      INFO(fmt::format("M {} {}", m, v.describe()));
      const HostInputs in = make_random_inputs(plain.spec, m, 100 + m, true);
      DeviceInputs d = upload_inputs(rt, *p_plain, in, m);
      Plan plan;
      try {
        plan = rt.plan(*p_csf, m, Family::decode);
      } catch (const Error&) {
        continue;  // a tile override this layer's geometry cannot take (its normalize rule says why)
      }
      for (const KernelKey& k : plan.kernels)
        if (k.kind != KernelKind::route) CHECK(k.csf_scales != 0);
      const auto a = run_poisoned(rt, *p_plain, d, m, Family::decode);
      const auto b = run_poisoned(rt, *p_csf, d, m, Family::decode);
      CHECK(a == b);
      ++compared;
    }
  }
  REQUIRE(compared > 0);
  Variant{}.apply();
  const int m = tokens.back();
  const HostInputs in = make_random_inputs(plain.spec, m, 7, true);
  DeviceInputs d = upload_inputs(base, *p_plain, in, m);
  INFO("batch family, M " << m);
  CHECK(run_poisoned(base, *p_plain, d, m, Family::batch) == run_poisoned(base, *p_csf, d, m, Family::batch));
}

// Tile overrides of the batch and prefill families, and the family each forces.
const char* const kTokenTileVariables[] = {"MOEJIT_BATCH_TILE_FC1", "MOEJIT_BATCH_TILE_FC2", "MOEJIT_PREFILL_TILE_FC1",
                                           "MOEJIT_PREFILL_TILE_FC2"};
struct TokenTileVariant {
  Family family;
  const char* fc1 = nullptr;  // the family's tile overrides (nullptr: the planner's tiles)
  const char* fc2 = nullptr;
  bool sm90 = false;  // warpgroup MMA: sm_90a only
  std::string describe() const {
    return fmt::format("{} {} {}", to_string(family), fc1 ? fc1 : "planned", fc2 ? fc2 : "planned");
  }
  void apply() const {
    const bool batch = family == Family::batch;
    const char* values[] = {batch ? fc1 : nullptr, batch ? fc2 : nullptr, batch ? nullptr : fc1, batch ? nullptr : fc2};
    for (size_t i = 0; i < std::size(values); ++i) {
      if (values[i]) ::setenv(kTokenTileVariables[i], values[i], 1);
      else ::unsetenv(kTokenTileVariables[i]);
    }
  }
};

// Register-fed batch kernels with block scales on the fp32 results (1-2 column tiles) and on the weights
// (4-8), one and two slabs per warp; warpgroup-MMA batch kernels; prefill with FC2 over slab pairs and
// single slabs, one to three consumer warpgroups, narrow and wide tiles, two teams, clusters of two CTAs.
const TokenTileVariant kTokenTileVariants[] = {
    {Family::batch},
    {Family::batch, "w4n1d3", "w4n1d3"},
    {Family::batch, "w2n2d1s2", "w2n1d3s2"},
    {Family::batch, "w4n8d3s2", "w4n8d3s2"},
    {Family::batch, "w4n4d2", "w8n8d2"},
    {Family::batch, "w8n8d3o2m1", "w8n8d3o2m1", true},
    {Family::batch, "w4n4d3m1", "w16n1d4o1m1", true},
    {Family::prefill, nullptr, nullptr, true},
    {Family::prefill, "w8n16d3", "w8n16d3s2", true},
    {Family::prefill, "w4n2d1", "w4n2d1", true},
    {Family::prefill, "w12n8d2", "w12n8d2s2", true},
    {Family::prefill, "w8n16d6g2", "w8n16d7g2s2", true},
    {Family::prefill, "w8n16d6p2", "w8n16d7p2", true},
};

// Outputs of `plain` prepared with plain scale reads and with CSF scale reads, compared exactly for each
// batch or prefill variant and M.
void expect_identical_token_tiles(const HostLayer& plain, const std::vector<int>& tokens,
                                  const std::vector<TokenTileVariant>& variants) {
  const ScopedEnv guard{kTokenTileVariables[0], kTokenTileVariables[1], kTokenTileVariables[2], kTokenTileVariables[3]};
  TokenTileVariant{Family::batch}.apply();
  Runtime& base = tuned_runtime();
  const auto p_plain = base.prepare(plain, PrepareOptions{ScaleReads::plain});
  const auto p_csf = base.prepare(plain, PrepareOptions{ScaleReads::csf});
  REQUIRE(p_csf->csf_scales() == 3);
  // With ScaleReads::csf every kernel an a16 layer plans reads CSF, so the CSF layer keeps no plain planes.
  const PreparedScaleBytes b = p_csf->scale_bytes();
  CHECK(p_csf->device_bytes() == p_plain->device_bytes() - b.fc1_plain - b.fc2_plain + b.fc1_csf + b.fc2_csf);
  // Every variant's kernels, plain and CSF, compiled first in parallel processes (NVRTC serializes compiles
  // within one), then found in the cache by the forwards below.
  std::vector<Plan> plans;
  for (const TokenTileVariant& v : variants) {
    if (v.sm90 && base.arch() != Arch::sm_90a) continue;
    v.apply();
    Runtime& rt = tuned_runtime();
    for (int m : tokens)
      for (const PreparedLayer* layer : {p_plain.get(), p_csf.get()}) try {
          plans.push_back(rt.plan(*layer, m, v.family));
        } catch (const Error&) {
        }
  }
  moejit_test::compile_plans(plans);
  int compared = 0;
  for (const TokenTileVariant& v : variants) {
    if (v.sm90 && base.arch() != Arch::sm_90a) continue;
    v.apply();
    Runtime& rt = tuned_runtime();
    for (int m : tokens) {
      INFO(fmt::format("M {} {}", m, v.describe()));
      const HostInputs in = make_random_inputs(plain.spec, m, 300 + m, true);
      DeviceInputs d = upload_inputs(rt, *p_plain, in, m);
      Plan plan;
      try {
        plan = rt.plan(*p_csf, m, v.family);
      } catch (const Error&) {
        continue;  // a tile this layer's geometry cannot take (its normalize rule says why)
      }
      for (const KernelKey& k : plan.kernels)
        if (k.kind != KernelKind::route) CHECK(k.csf_scales != 0);
      const auto a = run_poisoned(rt, *p_plain, d, m, v.family);
      const auto c = run_poisoned(rt, *p_csf, d, m, v.family);
      CHECK(a == c);
      ++compared;
    }
  }
  REQUIRE(compared > 0);
}

LayerSpec mid_spec(ScaleFormat f, Activation a, int hidden, int intermediate) {
  const bool oai = a == Activation::swigluoai;
  LayerSpec spec = small_spec(f, a, oai, oai);
  spec.experts = 16;
  spec.top_k = 4;
  spec.hidden = hidden;
  spec.intermediate = intermediate;
  return spec;
}

}  // namespace

TEST_CASE("CSF scale reads: every format x activation x bias x limit, realistic and forced exceptions",
          "[gpu][csf]") {
  const std::vector<Variant> few = {Variant{}, Variant{.fc1 = "grid", .fc2 = "split"},
                                    Variant{.fc1 = "loop", .fc2 = "sum"}, Variant{.fc1 = "stream", .fc2 = "sum"}};
  for (const LayerSpec& spec : small_spec_variants()) {
    INFO(to_string(spec.format) << " " << to_string(spec.activation) << " bias " << spec.has_bias << " limit "
                                << spec.limit.has_value());
    expect_identical(make_realistic_layer(spec, 21), {1, 5, 40}, few);
    expect_identical(with_forced_exceptions(make_realistic_layer(spec, 22), 5), {1, 3}, few);
    expect_identical(make_random_layer(spec, 23), {2}, few);  // random scales: records everywhere
  }
}

TEST_CASE("CSF scale reads: every decode kernel variant, both formats, multi-chunk slabs", "[gpu][csf][variants]") {
  struct Shape {
    ScaleFormat format;
    Activation act;
    int hidden, intermediate;
  };
  // Streaming stages that end mid-slab (H = 2880), one FC1 matrix (relu2), K with a half chunk at the
  // end (I = 480), FC2 slab pairs (H / 16 even).
  const Shape shapes[] = {{ScaleFormat::mxfp4, Activation::swigluoai, 2880, 256},
                          {ScaleFormat::nvfp4, Activation::silu, 1024, 480},
                          {ScaleFormat::nvfp4, Activation::relu2, 256, 512},
                          {ScaleFormat::mxfp4, Activation::gelu_tanh, 512, 480}};
  uint64_t seed = 31;
  for (const Shape& sh : shapes) {
    const LayerSpec spec = mid_spec(sh.format, sh.act, sh.hidden, sh.intermediate);
    INFO(fmt::format("{} {} H={} I={}", to_string(sh.format), to_string(sh.act), sh.hidden, sh.intermediate));
    const std::vector<Variant> all(std::begin(kVariants), std::end(kVariants));
    expect_identical(make_realistic_layer(spec, ++seed), {1, 3, 16, 32}, all);
    expect_identical(with_forced_exceptions(make_realistic_layer(spec, ++seed), seed), {1, 8, 32}, all);
  }
}

TEST_CASE("CSF scale reads: scale stages in dynamic shared memory (K past static shared memory)", "[gpu][csf]") {
  // H = 24576: FC1's stages (every FC1 kind and the cooperative kernel's first phase) take 48 KB; I = 24576:
  // FC2's (FC2-sum, split FC2, the second phase). Both past what static shared memory holds beside the
  // kernels' other arrays, so the launches carry them as dynamic shared memory.
  const std::vector<Variant> variants = {Variant{}, Variant{.fc1 = "grid", .fc2 = "split"},
                                         Variant{.fc1 = "stream", .fc2 = "sum"}, Variant{.launch = "cooperative"}};
  for (auto [hidden, intermediate] : {std::pair{24576, 256}, std::pair{256, 24576}}) {
    LayerSpec spec = mid_spec(ScaleFormat::nvfp4, Activation::silu, hidden, intermediate);
    spec.experts = 4;
    spec.top_k = 2;
    INFO(fmt::format("H={} I={}", hidden, intermediate));
    const Plan plan = with_csf_scales(make_plan(spec, Arch::sm_90a, 1, 132), 3);
    bool dynamic = false;
    for (const KernelKey& k : plan.kernels) dynamic = dynamic || kernel_dynamic_smem(k) > 0;
    CHECK(dynamic);
    expect_identical(make_realistic_layer(spec, 41), {1, 4}, variants);
  }
}

TEST_CASE("CSF scale reads: a compressed layer file's planes read as CSF where they shrink", "[gpu][csf]") {
  // prepare's automatic choice: planes held as CSF are read as CSF when the prepared CSF plane is
  // smaller (realistic scales at a real row length); incompressible planes stay plain.
  LayerSpec spec = gptoss_120b_spec();
  spec.experts = 4;
  spec.top_k = 2;
  spec.expert_begin = 0;
  HostLayer real = make_realistic_layer(spec, 3);
  compress_scales(real, CsfPolicy::always);
  Runtime& rt = tuned_runtime();
  const auto p = rt.prepare(real);
  CHECK(p->csf_scales() == 3);
  const PreparedScaleBytes b = p->scale_bytes();
  CHECK(b.fc1_csf < b.fc1_plain);
  CHECK(b.fc2_csf < b.fc2_plain);
  // By default the batch and prefill families read the plain planes, which the layer keeps; compact drops
  // them and every family reads CSF. Either way the outputs are the plain layer's, bit for bit.
  CHECK(p->batched_csf_scales() == 0);
  const auto compact = rt.prepare(real, PrepareOptions{ScaleReads::compact});
  CHECK(compact->csf_scales() == 3);
  CHECK(compact->batched_csf_scales() == 3);
  CHECK(p->device_bytes() == compact->device_bytes() + b.fc1_plain + b.fc2_plain);
  const auto plain = rt.prepare(real, PrepareOptions{ScaleReads::plain});
  const bool sm90 = rt.arch() == Arch::sm_90a;
  for (auto [family, m] : {std::pair{Family::decode, 3}, std::pair{Family::batch, 96}, std::pair{Family::prefill, 256}}) {
    if (family == Family::prefill && !sm90) continue;
    INFO(fmt::format("{} M {}", to_string(family), m));
    const bool batched = family != Family::decode;
    for (const KernelKey& k : rt.plan(*p, m, family).kernels)
      if (k.kind != KernelKind::route) CHECK((k.csf_scales != 0) == !batched);
    for (const KernelKey& k : rt.plan(*compact, m, family).kernels)
      if (k.kind != KernelKind::route) CHECK(k.csf_scales != 0);
    const HostInputs in = make_random_inputs(spec, m, 500 + m, true);
    DeviceInputs d = upload_inputs(rt, *plain, in, m);
    const auto want = run_poisoned(rt, *plain, d, m, family);
    CHECK(run_poisoned(rt, *p, d, m, family) == want);
    CHECK(run_poisoned(rt, *compact, d, m, family) == want);
  }
  HostLayer noise = make_random_code_layer(spec, 3);
  compress_scales(noise, CsfPolicy::always);
  CHECK(rt.prepare(noise)->csf_scales() == 0);
}

TEST_CASE("CSF scale reads: golden layers give the plain golden outputs", "[gpu][csf][golden]") {
  const std::vector<Variant> v = {Variant{}, Variant{.fc1 = "stream", .fc2 = "sum"}, Variant{.launch = "cooperative"}};
  for (const char* name : kGoldenLayers) {
    INFO(name);
    const std::string dir = golden_dir() + "/" + name;
    HostLayer golden = read_layer_file(dir + "/layer.safetensors");
    expect_identical(golden, {1, 3, 17}, v);
    // The compressed file form reads the same (its planes expanded for the plain prepared planes).
    HostLayer compressed = golden;
    compress_scales(compressed, CsfPolicy::always);
    expect_identical(compressed, {1, 3}, {Variant{}});
  }
}

TEST_CASE("CSF scale reads, batch and prefill: every format x activation x bias x limit, H and I tails",
          "[gpu][csf][token_tiles]") {
  // H and I not multiples of 64 (NVFP4: 13 and 11 slabs, odd, so FC2's last slab pair and FC1's last
  // two-slab warp are half outside the plane; MXFP4: half chunks).
  const std::vector<TokenTileVariant> few = {
      {Family::batch}, {Family::batch, "w4n8d3s2", "w4n8d3s2"}, {Family::batch, "w8n8d3o2m1", "w8n8d3o2m1", true},
      {Family::prefill, nullptr, nullptr, true}, {Family::prefill, "w4n2d1", "w4n2d1", true}};
  uint64_t seed = 40;
  for (LayerSpec spec : small_spec_variants()) {
    const bool nv = spec.format == ScaleFormat::nvfp4;
    spec.experts = 8;
    spec.top_k = 2;
    spec.hidden = nv ? 208 : 224;
    spec.intermediate = nv ? 176 : 160;
    INFO(to_string(spec.format) << " " << to_string(spec.activation) << " bias " << spec.has_bias << " limit "
                                << spec.limit.has_value());
    expect_identical_token_tiles(make_realistic_layer(spec, ++seed), {65, 300}, few);
    expect_identical_token_tiles(with_forced_exceptions(make_realistic_layer(spec, ++seed), seed), {127, 1000}, few);
  }
}

TEST_CASE("CSF scale reads, batch and prefill: every tile variant, multi-chunk slabs, several M",
          "[gpu][csf][token_tiles][variants]") {
  struct Shape {
    ScaleFormat format;
    Activation act;
    int hidden, intermediate;
  };
  // Real gpt-oss geometry (H = 2880: 45 chunks, 180 slabs), odd slab counts with tails (H = 720: 45 slabs,
  // I = 592: 37 slabs), one FC1 matrix (relu2), MXFP4 half chunks.
  const Shape shapes[] = {{ScaleFormat::mxfp4, Activation::swigluoai, 2880, 256},
                          {ScaleFormat::nvfp4, Activation::silu, 720, 592},
                          {ScaleFormat::nvfp4, Activation::relu2, 720, 592},
                          {ScaleFormat::mxfp4, Activation::gelu_tanh, 352, 480}};
  uint64_t seed = 131;
  for (const Shape& sh : shapes) {
    const LayerSpec spec = mid_spec(sh.format, sh.act, sh.hidden, sh.intermediate);
    INFO(fmt::format("{} {} H={} I={}", to_string(sh.format), to_string(sh.act), sh.hidden, sh.intermediate));
    const std::vector<TokenTileVariant> all(std::begin(kTokenTileVariants), std::end(kTokenTileVariants));
    expect_identical_token_tiles(make_realistic_layer(spec, ++seed), {65, 127, 300, 1000}, all);
    expect_identical_token_tiles(with_forced_exceptions(make_realistic_layer(spec, ++seed), seed), {65, 127, 300, 1000},
                                 all);
  }
}

TEST_CASE("CSF scale reads, batch and prefill: golden layers give the plain outputs", "[gpu][csf][golden][token_tiles]") {
  const std::vector<TokenTileVariant> v = {{Family::batch},
                                           {Family::batch, "w4n1d3", "w4n1d3"},
                                           {Family::batch, "w8n8d3o2m1", "w8n8d3o2m1", true},
                                           {Family::prefill, nullptr, nullptr, true}};
  for (const char* name : kGoldenLayers) {
    INFO(name);
    HostLayer golden = read_layer_file(golden_dir() + "/" + name + "/layer.safetensors");
    expect_identical_token_tiles(golden, {65, 300}, v);
  }
}
