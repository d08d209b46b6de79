#pragma once
// The prefill family's geometry the runtime reads (templates/moe_prefill.cuh, generator/families/prefill.cpp).

namespace moejit::detail {

// Chunks of the layer input each gather CTA moves (a tile's rows x this many 64-wide chunks): the gather's
// grid is (tiles, ceil(chunks / kPrefillGatherChunksPerCta)).
inline constexpr int kPrefillGatherChunksPerCta = 8;

}  // namespace moejit::detail
