// Pieces every family row shares: the common key checks, the layer's key fields, the generated
// source's header and template argument spellings.
#include <fmt/format.h>

#include "generator/families/decode.hpp"
#include "generator/families/family.hpp"
#include "moejit/error.hpp"

namespace moejit::detail {

void normalize_common(const KernelKey& k, const KernelKey& original, int max_ntiles) {
  auto fail = [&](std::string_view rule) { throw Error(fmt::format("kernel key {}: {}", original.str(), rule)); };
  if (k.experts <= 0) fail("experts must be positive");
  if (k.warps < 1 || k.warps > 32) fail("warps must be in [1, 32]");
  const int block = scale_block(k.format);
  if (k.hidden <= 0 || k.hidden % block) fail(fmt::format("hidden must be a positive multiple of {}", block));
  if (k.intermediate <= 0 || k.intermediate % block)
    fail(fmt::format("intermediate must be a positive multiple of {}", block));
  if (k.ntiles < 1 || k.ntiles > max_ntiles) fail(fmt::format("ntiles must be in [1, {}]", max_ntiles));
  if (k.depth < 1 || k.depth > 8) fail("depth must be in [1, 8]");
  if (k.min_blocks < 0 || k.min_blocks > 32) fail("min_blocks must be in [0, 32]");
  if (k.inline_route && k.experts > 1024) fail("inline routing covers at most 1024 experts");
  if (k.parts < 1 || k.parts > 8) fail("parts must be in [1, 8]");
  if (k.groups < 1 || k.groups > 8) fail("groups must be in [1, 8]");
  if (k.slabs != 1 && k.slabs != 2) fail("slabs must be 1 or 2");
  if (k.l2_ahead < 0 || k.l2_ahead > 16) fail("l2_ahead must be in [0, 16] chunks");
  if (k.columns != 8 && k.columns != 4) fail("columns must be 8 (a pair in every MMA column) or 4 (even columns)");
}

KernelKey layer_key(const LayerSpec& spec, Arch arch) {
  KernelKey k;
  k.arch = arch;
  k.format = spec.format;
  k.activation = spec.activation;
  k.precision = spec.precision;
  k.experts = spec.experts;
  k.hidden = spec.hidden;
  k.intermediate = spec.intermediate;
  k.bias = spec.has_bias;
  k.limit = spec.limit.has_value();
  return k;
}

std::string kernel_header(const KernelKey& key, int register_cap) {
  std::string header = fmt::format("// moejit generated kernel\n// key: {}\n", key.str());
  if (key.inline_route) {
    header += fmt::format("#define MOEJIT_INLINE_ROUTE_MAX_PAIRS {}\n", inline_route_pairs(key));
    header += "#define MOEJIT_INLINE_ROUTED 1\n";
  }
  if (key.l2_ahead > 0) header += fmt::format("#define MOEJIT_L2_AHEAD_CHUNKS {}\n", key.l2_ahead);
  if (key.x_staged) header += "#define MOEJIT_X_STAGED 1\n";
  // The cooperative kernel nests both phases' parameter structs: their CSF fields always exist there
  // (templates/moe_decode_params.cuh).
  if (key.kind == KernelKind::decode_fused) header += "#define MOEJIT_CSF_FIELDS 1\n";
  if (key.csf_scales & 1) header += "#define MOEJIT_CSF_FC1 1\n";
  if (key.csf_scales & 2) header += "#define MOEJIT_CSF_FC2 1\n";
  // templates/act_quant.cuh: 0 a16, 1 a8, 2 a4.
  if (key.precision != ActPrecision::a16)
    header += fmt::format("#define MOEJIT_ACT_PRECISION {}\n", key.precision == ActPrecision::a8 ? 1 : 2);
  // a4: where the activation scales sit in the FCs' scale planes (templates/act_quant.cuh).
  if (key.precision == ActPrecision::a4) header += fmt::format("#define MOEJIT_ACT_EXPERTS {}\n", key.experts);
  if (register_cap > 0) header += fmt::format("#define MOEJIT_REGISTER_CAP {}\n", register_cap);
#ifdef MOEJIT_TRACE_BUILD
  header += "#define MOEJIT_TRACE 1\n";  // a -DMOEJIT_TRACE=ON build (templates/trace.cuh)
#endif
  return header;
}

const char* cpp_bool(bool b) { return b ? "true" : "false"; }

int act_code(Activation a) {
  switch (a) {
    case Activation::silu: return 0;
    case Activation::gelu_tanh: return 1;
    case Activation::relu2: return 2;
    case Activation::swigluoai: return 3;
  }
  return 0;
}

int fc1_mats(const KernelKey& key) { return key.activation == Activation::relu2 ? 1 : 2; }

int slab_pair_exchange_bytes(const KernelKey& key) {
  const bool one_slab_per_warp =
      (key.kind == KernelKind::batch_fc1 && key.wgmma) || key.kind == KernelKind::prefill_fc1;
  return key.precision == ActPrecision::a8 && one_slab_per_warp ? 4 * key.warps * 8 * key.ntiles : 0;
}

int chunk_scale_bytes(const KernelKey& key) { return key.format == ScaleFormat::nvfp4 ? 64 : 32; }

int warps_threads(const KernelKey& key) { return key.warps * 32; }

int no_dynamic_smem(const KernelKey&) { return 0; }

int one_cta_per_sm(const KernelKey&) { return 1; }

// wgmma_rs for an n-column tile: one m64nNk16 warpgroup MMA, bf16 A from four registers per thread, B by
// shared-memory descriptor, fp32 accumulators d[0..n/2) added to (templates/wgmma.cuh). Generated because
// the operand list is as long as the accumulator.
std::string wgmma_rs_source(int n) {
  const int regs = n / 2;  // operands: d[0..regs), a[0..3] at regs.., desc at regs + 4, the constant 1 at regs + 5
  std::string d, outs;
  for (int i = 0; i < regs; ++i) {
    d += fmt::format("{}%{}", i ? ", " : "", i);
    outs += fmt::format("{}\"+f\"(d[{}])", i ? ", " : "", i);
  }
  return fmt::format(
      "MOEJIT_DEVICE void wgmma_rs(float (&d)[{regs}], const u32 (&a)[4], u64 desc) {{\n"
      "  asm volatile(\"{{ .reg .pred p; setp.ne.b32 p, %{one}, 0; \"\n"
      "               \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{d}}}, {{%{a0}, %{a1}, %{a2}, %{a3}}}, \"\n"
      "               \"%{desc}, p, 1, 1, 0; }}\"\n"
      "               : {outs}\n"
      "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(desc), \"r\"(1));\n}}\n",
      fmt::arg("regs", regs), fmt::arg("n", n), fmt::arg("d", d), fmt::arg("a0", regs), fmt::arg("a1", regs + 1),
      fmt::arg("a2", regs + 2), fmt::arg("a3", regs + 3), fmt::arg("desc", regs + 4), fmt::arg("outs", outs),
      fmt::arg("one", regs + 5));
}

void push_layer_args(fmt::dynamic_format_arg_store<fmt::format_context>& a, const KernelKey& key) {
  a.push_back(fmt::arg("nvfp4", cpp_bool(key.format == ScaleFormat::nvfp4)));
  a.push_back(fmt::arg("act", act_code(key.activation)));
  a.push_back(fmt::arg("limit", cpp_bool(key.limit)));
  a.push_back(fmt::arg("bias", cpp_bool(key.bias)));
  a.push_back(fmt::arg("experts", key.experts));
  a.push_back(fmt::arg("hidden", key.hidden));
  a.push_back(fmt::arg("intermediate", key.intermediate));
}

}  // namespace moejit::detail
