// Layers with scale planes in the compressed scale format (docs/CSF.md) on the GPU: Runtime::prepare
// expands them on the host (the documented fallback), so every family's output equals the plain layer's
// bit for bit, on every format x activation x bias x limit and on the golden layers.
#include "catch_compat.hpp"

#include <string>
#include <vector>

#include "golden_dir.hpp"
#include "gpu_support.hpp"
#include "moejit/csf_layer.hpp"

using namespace moejit;
using namespace moejit::test;

namespace {

// Outputs of the plain and the CSF form of `plain` for each M, per family, compared exactly.
void expect_identical(const HostLayer& plain, const std::vector<int>& tokens) {
  Runtime& rt = tuned_runtime();
  HostLayer csf = plain;
  compress_scales(csf, CsfPolicy::always);  // also the planes of random scales, which would stay plain
  REQUIRE(has_csf_scales(csf));
  const auto p_plain = rt.prepare(plain);
  const auto p_csf = rt.prepare(csf);
  for (int m : tokens) {
    const HostInputs in = make_random_inputs(plain.spec, m, 100 + m, true);
    DeviceInputs d = upload_inputs(rt, *p_plain, in, m);
    for (Family f : {Family::decode, Family::batch}) {
      if (f == Family::decode && m > 256) continue;
      INFO("M " << m << " family " << to_string(f));
      const auto a = run_poisoned(rt, *p_plain, d, m, f);
      const auto b = run_poisoned(rt, *p_csf, d, m, f);
      CHECK(a == b);
    }
  }
}

}  // namespace

TEST_CASE("CSF scale planes: outputs bit-identical to the plain layer, every variant", "[gpu][csf]") {
  for (const LayerSpec& spec : small_spec_variants()) {
    INFO(to_string(spec.format) << " " << to_string(spec.activation) << " bias " << spec.has_bias << " limit "
                                << spec.limit.has_value());
    expect_identical(make_realistic_layer(spec, 21), {1, 5, 40});
  }
}

TEST_CASE("CSF scale planes: golden layers compressed give the plain golden outputs", "[gpu][csf][golden]") {
  for (const char* name : kGoldenLayers) {
    INFO(name);
    const std::string dir = golden_dir() + "/" + name;
    expect_identical(read_layer_file(dir + "/layer.safetensors"), {1, 3, 17});
  }
}
