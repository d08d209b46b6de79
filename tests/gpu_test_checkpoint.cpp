// Layers loaded from synthetic checkpoints (tests/checkpoint_writer.hpp) through prepare and forward:
// ModelOpt NVFP4 and gpt-oss MXFP4 layers agree with the fp64 reference; TP and EP slices run on the
// GPU and their outputs sum to the unsliced layer's reference; an [E, 2] layer whose gate and up global
// scales differ is refused by prepare, naming why, and one whose halves agree runs as [E].
#include "catch_compat.hpp"

#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint_writer.hpp"
#include "gpu_support.hpp"
#include "moejit/checkpoint.hpp"

using namespace moejit;
using namespace moejit::test;
using Catch::Contains;

namespace {

Runtime& runtime() {
  static Runtime rt;
  return rt;
}


LayerSpec spec_of(ScaleFormat f) {
  LayerSpec s = small_spec(f, f == ScaleFormat::nvfp4 ? Activation::silu : Activation::swigluoai,
                           f == ScaleFormat::mxfp4, f == ScaleFormat::mxfp4);
  s.expert_begin = 0;
  s.experts = 4;
  s.hidden = 128;
  s.intermediate = 128;
  s.gate_up_order = f == ScaleFormat::nvfp4 ? GateUpOrder::gate_up : GateUpOrder::interleaved;
  return s;
}

// GPU output of one layer for `in`, as floats.
std::vector<float> gpu_forward(const HostLayer& layer, const HostInputs& in) {
  Runtime& rt = runtime();
  auto prepared = rt.prepare(layer);
  DeviceInputs d = upload_inputs(rt, *prepared, in, in.tokens);
  return to_float(run_poisoned(rt, *prepared, d, in.tokens));
}

}  // namespace

TEST_CASE("checkpoint layers run on the GPU and their TP/EP slices sum to the full layer", "[gpu][checkpoint]") {
  moejit_test::TempDir tmp;
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4}) {
    INFO(to_string(f));
    HostLayer L = make_random_layer(spec_of(f), 41);
    const std::string dir = tmp.path + "/" + std::string(to_string(f));
    if (f == ScaleFormat::nvfp4) {
      moejit_test::write_modelopt_checkpoint(dir, {{1, L}});
    } else {
      moejit_test::round_biases_to_bf16(L);
      moejit_test::write_gpt_oss_checkpoint(dir, {{1, L}});
    }
    const HostInputs in = make_random_inputs(L.spec, 7, 42);
    const ReferenceOutput want = reference_forward(L, in);
    check_agreement(compare(gpu_forward(load_checkpoint_layer(dir, 1), in), want.out_f64), true);

    // Ranks of TP 2 x EP 2: each rank's GPU output against its own reference, and their sum against the
    // full layer's (each rank's output is rounded to bf16 once, so the sum carries four roundings).
    std::vector<float> sum(want.out_f64.size(), 0.0f);
    for (int t = 0; t < 2; ++t)
      for (int e = 0; e < 2; ++e) {
        const HostLayer part = load_checkpoint_layer(dir, 1, {2, t, 2, e});
        const std::vector<float> got = gpu_forward(part, in);
        check_agreement(compare(got, reference_forward(part, in).out_f64), false);
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += got[i];
      }
    const Agreement total = compare(sum, want.out_f64);
    CHECK(total.nonfinite == 0);
    CHECK(total.rel_l2 < 2 * kRelL2Tolerance);
  }
}

TEST_CASE("prepare refuses distinct gate/up global scales and runs equal ones", "[gpu][checkpoint][errors]") {
  HostLayer L = make_random_layer(spec_of(ScaleFormat::nvfp4), 51);
  HostLayer split = L, equal = L;
  split.w13_global_scale.clear();
  equal.w13_global_scale.clear();
  for (float g : L.w13_global_scale) {
    split.w13_global_scale.insert(split.w13_global_scale.end(), {g, 2 * g});
    equal.w13_global_scale.insert(equal.w13_global_scale.end(), {g, g});
  }
  CHECK_THROWS_WITH(runtime().prepare(split),
                    Contains("w13_global_scale [E, 2]") && Contains("expert 0") && Contains("one FC1 global scale"));
  const HostInputs in = make_random_inputs(L.spec, 5, 52);
  check_agreement(compare(gpu_forward(equal, in), reference_forward(L, in).out_f64), true);
}
