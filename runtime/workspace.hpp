#pragma once
// Layout of the caller-owned workspace for up to max_tokens tokens. Every region is 256-byte aligned.
#include <cstddef>
#include <cstdint>

#include "moejit/types.hpp"

namespace moejit::detail {

struct WorkspaceLayout {
  size_t num_active = 0, active_expert = 0, active_offset = 0, pair_index = 0, counters = 0, act = 0, partial = 0;
  size_t barrier = 0;  // cooperative launch: [arrivals, generation]
  size_t total = 0;

  static WorkspaceLayout make(const LayerSpec& spec, int max_tokens) {
    WorkspaceLayout w;
    const size_t pairs = static_cast<size_t>(max_tokens < 1 ? 1 : max_tokens) * spec.top_k;
    const size_t slots = pairs < static_cast<size_t>(spec.experts) ? pairs : spec.experts;
    size_t at = 0;
    auto take = [&](size_t bytes) {
      size_t here = at;
      at += (bytes + 255) / 256 * 256;
      return here;
    };
    w.num_active = take(sizeof(int32_t));
    w.active_expert = take(slots * sizeof(int32_t));
    w.active_offset = take((slots + 1) * sizeof(int32_t));
    w.pair_index = take(pairs * sizeof(int32_t));
    w.counters = take(static_cast<size_t>(spec.hidden / 16) * sizeof(int32_t));
    w.act = take(pairs * spec.intermediate * sizeof(uint16_t));
    w.partial = take(pairs * spec.hidden * sizeof(float));
    w.barrier = take(2 * sizeof(uint32_t));
    w.total = at;
    return w;
  }
};

}  // namespace moejit::detail
