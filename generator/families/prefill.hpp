#pragma once
// The prefill family's geometry the runtime reads (templates/moe_prefill.cuh, generator/families/prefill.cpp).
#include "moejit/key.hpp"

namespace moejit::detail {

// Chunks of the layer input each gather CTA moves (a tile's rows x this many 64-wide chunks): the gather's
// grid is (tiles, ceil(chunks / kPrefillGatherChunksPerCta)).
inline constexpr int kPrefillGatherChunksPerCta = 8;

// Experiment (perf-log v46; not a key option): whether MOEJIT_PREFILL_TMA=1 is set and `key` can take it (plain
// scales, one CTA per cluster), in which case its kernels move each chunk's weights and scales with one tensor
// copy each and the runtime passes the planes' tensor maps.
bool prefill_tensor_copies(const KernelKey& key);

}  // namespace moejit::detail
