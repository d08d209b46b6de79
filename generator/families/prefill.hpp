#pragma once
// The prefill family's geometry the runtime reads (templates/moe_prefill.cuh, generator/families/prefill.cpp).
#include "moejit/key.hpp"

namespace moejit::detail {

// Chunks of the layer input each gather CTA moves (a tile's rows x this many 64-wide chunks): the gather's
// grid is (tiles, ceil(chunks / kPrefillGatherChunksPerCta)).
inline constexpr int kPrefillGatherChunksPerCta = 8;

// Words before the tile table's entries: the tile count, FC1's and FC2's work counters (zeroed by the
// gather; each persistent kernel takes its units from its counter) and one of padding
// (templates/moe_prefill.cuh kTileTableHeader; the generated source checks that both agree).
inline constexpr int kPrefillTileTableHeader = 4;

// Whether `key`'s producer moves each chunk's weights and scales with one tensor copy each, from tensor maps
// over the prepared planes that the runtime encodes and passes (plain scales, one CTA per cluster). CSF
// offsets (a list cursor per slab) and cluster pairs (each CTA copies half of a B block into both) keep the
// producer lanes' 16-byte copies (docs/DECISIONS.md, prefill).
bool prefill_tensor_copies(const KernelKey& key);

}  // namespace moejit::detail
