// The route family: the route kernel (templates/moe_route.cuh), the routed pairs' lists for the
// families that do not route inside their CTAs. Its code depends only on the expert count and its CTA.
#include "generator/families/route.hpp"

#include <fmt/format.h>

#include "generator/families/family.hpp"
#include "moejit/error.hpp"

namespace moejit::detail {
namespace {

constexpr std::pair<KernelKind, std::string_view> kKinds[] = {{KernelKind::route, "route"}};

void normalize(KernelKey& k, const KernelKey& original) {
  if (k.experts <= 0) throw Error(fmt::format("kernel key {}: experts must be positive", original.str()));
  if (k.warps < 1 || k.warps > 32) throw Error(fmt::format("kernel key {}: warps must be in [1, 32]", original.str()));
  KernelKey r;
  r.kind = KernelKind::route;
  r.arch = k.arch;
  r.experts = k.experts;
  r.warps = k.warps;
  r.ntiles = 1;
  r.depth = 1;
  r.hidden = 0;
  r.intermediate = 0;
  k = r;
}

int dynamic_smem(const KernelKey& key) { return route_dynamic_smem(key.experts, key.warps); }

std::string source(const KernelKey& key, const std::string& entry) {
  const int most = arch_limits(key.arch).max_dynamic_smem;
  if (dynamic_smem(key) > most)
    throw Error(fmt::format("kernel key {}: the route kernel's [warps][experts] table needs {} bytes of shared "
                            "memory, more than the {} a CTA has on {}; use fewer warps",
                            key.str(), dynamic_smem(key), most, to_string(key.arch)));
  return kernel_header(key, 0) +
         fmt::format("#include \"moe_route.cuh\"\n"
                     "extern \"C\" __global__ void __launch_bounds__({threads}) {entry}(const RouteParams p) {{\n"
                     "  moe_route<{experts}, {threads}>(p);\n}}\n",
                     fmt::arg("threads", warps_threads(key)), fmt::arg("entry", entry),
                     fmt::arg("experts", key.experts));
}

}  // namespace

KernelKey route_key(const LayerSpec& spec, Arch arch) {
  KernelKey k = layer_key(spec, arch);
  k.kind = KernelKind::route;
  k.warps = route_warps(spec.experts, arch);
  return k.normalized();
}

const KernelFamily kRouteFamily{"route",      kKinds, Family::automatic, normalize, warps_threads, dynamic_smem,
                                one_cta_per_sm, source, nullptr,           0};

}  // namespace moejit::detail
