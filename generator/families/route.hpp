#pragma once
// The route family's geometry (templates/moe_route.cuh): one CTA builds per-expert counts, offsets and a
// stable permutation of the routed pairs for the families that read the route kernel's lists.
#include "moejit/generator.hpp"
#include "moejit/key.hpp"
#include "moejit/types.hpp"

namespace moejit::detail {

// Dynamic shared memory of the route kernel: a [warps][experts] table of per-warp counts, then
// cursors, and the experts' totals. Pure.
inline constexpr int route_dynamic_smem(int experts, int warps) { return (warps + 1) * experts * 4; }
// Warps of the route kernel for `experts` local experts on `arch`: 16, fewer where its table would not fit
// the CTA's shared memory. Pure.
inline int route_warps(int experts, Arch arch) {
  const int fit = arch_limits(arch).max_dynamic_smem / (4 * experts) - 1;
  return fit < 1 ? 1 : fit > 16 ? 16 : fit;
}
// The route key of a layer's plan on `arch` (normalized).
KernelKey route_key(const LayerSpec& spec, Arch arch);

}  // namespace moejit::detail
