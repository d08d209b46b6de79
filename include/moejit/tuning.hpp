#pragma once
// Planner overrides for measurements and tuning sweeps (MOEJIT_DECODE_*, MOEJIT_BATCH_TILE_*,
// MOEJIT_PREFILL_TILE_*).
//
// The planner is a pure function of its arguments: it never reads the environment. The overrides are
// read once, into one TuningOverrides value, where a process decides its configuration (a Runtime at
// construction, the CLI at the start of a command), and passed to make_plan / keys_for_range. So an
// environment change between prewarm and a captured forward cannot change the keys forward asks for.
// A default-constructed value overrides nothing: the planner's measured choices.
#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "moejit/key.hpp"
#include "moejit/types.hpp"

namespace moejit {

// A tile written as letter-number fields in the order w, n, d, o, p, g, s, c, f, x, m (w and d
// required): warps, token tiles, depth, CTAs per SM, parts, groups, slabs, columns, L2 prefetch chunks,
// staged x (0|1), warpgroup MMA (0|1). parse throws moejit::Error naming `variable` and the accepted form.
struct TileOverride {
  std::string text;  // as given
  std::array<int, 11> value{};
  std::array<bool, 11> seen{};
  static TileOverride parse(std::string_view text, std::string_view variable);
  // Sets the key's tile fields the override names (KernelKey::normalized checks the result).
  void apply(KernelKey& key) const;
  bool operator==(const TileOverride&) const = default;
};

// FC1 of the decode family with inline routing: one CTA per item (grid), one wave walking the items
// (loop), or that wave with its weights streamed through shared memory (stream).
enum class DecodeFc1Variant { grid, loop, stream };

struct TuningOverrides {
  std::optional<DecodeLaunch> decode_launch;       // MOEJIT_DECODE_LAUNCH=pdl|plain|cooperative
  std::optional<bool> decode_fc2_sum;              // MOEJIT_DECODE_FC2=sum|split (where inline routing allows sum)
  std::optional<DecodeFc1Variant> decode_fc1;      // MOEJIT_DECODE_FC1=grid|loop|stream (inline-routed FC1)
  std::optional<int> decode_columns;               // MOEJIT_DECODE_COLUMNS=8|4 (both decode kernels)
  std::optional<int> decode_inline_pairs;          // MOEJIT_DECODE_INLINE_PAIRS=0..128: route inline up to N pairs
  // MOEJIT_DECODE_TILE: the tile of each of the four kernels below whose own variable is unset.
  std::optional<TileOverride> decode_tile;
  std::optional<TileOverride> decode_tile_fc1;     // MOEJIT_DECODE_TILE_FC1: the decode family's FC1
  std::optional<TileOverride> decode_tile_fc2;     // MOEJIT_DECODE_TILE_FC2: the decode family's FC2
  std::optional<TileOverride> batch_tile_fc1;      // MOEJIT_BATCH_TILE_FC1: the batch family's FC1
  std::optional<TileOverride> batch_tile_fc2;      // MOEJIT_BATCH_TILE_FC2: the batch family's FC2
  std::optional<TileOverride> prefill_tile_fc1;    // MOEJIT_PREFILL_TILE_FC1: the prefill family's FC1
  std::optional<TileOverride> prefill_tile_fc2;    // MOEJIT_PREFILL_TILE_FC2: the prefill family's FC2

  // Reads every variable above (unset or empty: no override). Throws moejit::Error naming the variable
  // and its accepted values for a malformed one. Reads the environment; not thread-safe against setenv.
  static TuningOverrides from_environment();
  // True when nothing is overridden.
  bool empty() const;
  // "none", or the overrides as VARIABLE=value pairs, for logs.
  std::string describe() const;
  bool operator==(const TuningOverrides&) const = default;
};

}  // namespace moejit
