// The act_quant family: the a8/a4 pre-pass (templates/moe_act_quant.cuh). Its code depends on the
// precision, the expert count (a4's scale plane and the local-expert check), H and FC1's matrices (where
// a1_gs sits in FC1's scale plane).
#include "generator/families/act_quant.hpp"

#include <fmt/format.h>

#include "generator/families/family.hpp"
#include "moejit/error.hpp"

namespace moejit::detail {
namespace {

constexpr std::pair<KernelKind, std::string_view> kKinds[] = {{KernelKind::act_quant, "act_quant"}};
constexpr int kThreads = 256;

void normalize(KernelKey& k, const KernelKey& original) {
  auto fail = [&](std::string_view rule) { throw Error(fmt::format("kernel key {}: {}", original.str(), rule)); };
  if (k.precision == ActPrecision::a16) fail("the act_quant pre-pass serves a8 and a4 layers only");
  if (k.experts <= 0) fail("experts must be positive");
  if (k.hidden <= 0 || k.hidden % 16) fail("hidden must be a positive multiple of 16");
  KernelKey r;
  r.kind = KernelKind::act_quant;
  r.arch = k.arch;
  r.format = k.format;
  // Only FC1's matrix count matters (where a1_gs sits): gated activations share one key.
  r.activation = k.activation == Activation::relu2 ? Activation::relu2 : Activation::silu;
  r.precision = k.precision;
  r.experts = k.experts;
  r.hidden = k.hidden;
  r.intermediate = 0;
  r.warps = kThreads / 32;
  r.ntiles = 1;
  r.depth = 1;
  k = r;
}

std::string source(const KernelKey& key, const std::string& entry) {
  return kernel_header(key, 0) +
         fmt::format("#include \"moe_act_quant.cuh\"\n"
                     "extern \"C\" __global__ void __launch_bounds__({threads}) {entry}(const ActQuantParams p) {{\n"
                     "  moe_act_quant<{experts}, {hidden}, {mats}>(p);\n}}\n",
                     fmt::arg("threads", kThreads), fmt::arg("entry", entry), fmt::arg("experts", key.experts),
                     fmt::arg("hidden", key.hidden), fmt::arg("mats", fc1_mats(key)));
}

}  // namespace

KernelKey act_quant_key(const LayerSpec& spec, Arch arch) {
  KernelKey k = layer_key(spec, arch);
  k.kind = KernelKind::act_quant;
  return k.normalized();
}

unsigned act_quant_ctas(const KernelKey& key, long long pairs) {
  // templates/moe_act_quant.cuh kActQuantRowBlocks, four threads per block.
  const long long row_blocks = key.precision == ActPrecision::a8 ? (key.hidden / 16 + 1) / 2 * 2 : key.hidden / 16;
  const long long ctas = (4 * pairs * row_blocks + kThreads - 1) / kThreads;
  return static_cast<unsigned>(ctas < 1 ? 1 : ctas);
}

const KernelFamily kActQuantFamily{"act_quant", kKinds,  Family::automatic, normalize, warps_threads, no_dynamic_smem,
                                   one_cta_per_sm, source, nullptr,          0};

}  // namespace moejit::detail
