// Layers with scale planes in the compressed scale format (docs/CSF.md) on the GPU. The decode kernels
// read prepared CSF planes (docs/CSF.md §8: offsets, base bytes, exception records) and rebuild every
// scale byte in registers, so their outputs must equal the plain-scale kernels' bit for bit: every
// decode kernel variant the planner uses (grid, loop and streaming FC1; split FC2, FC2-sum over one and
// two slabs; the route kernel's lists and inline routing; the cooperative launch; even-column tiles),
// both formats, every activation, bias and limit, layers with forced exceptions, and the golden layers.
// The batch family reads the plain prepared planes a CSF layer keeps, and must agree too.
#include "catch_compat.hpp"

#include <fmt/format.h>

#include <random>
#include <string>
#include <vector>

#include "golden_dir.hpp"
#include "gpu_support.hpp"
#include "moejit/csf_layer.hpp"
#include "moejit/error.hpp"

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
