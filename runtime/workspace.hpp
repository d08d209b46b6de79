#pragma once
// Layout of the caller-owned workspace for up to max_tokens tokens. Every region is 256-byte aligned.
#include <cstddef>
#include <cstdint>

#include "generator/families/prefill.hpp"
#include "moejit/types.hpp"

namespace moejit::detail {

struct WorkspaceLayout {
  // act: FC1's output (decode and batch: one row per pair; prefill: token-tile blocks, at most pairs + 7 x
  // slots rows). partial: FC2's fp32 rows per pair, and the prefill family's blocks of the layer input
  // (written by its gather and read by its FC1 before FC2 writes partial rows). tiles, row_pair:
  // the prefill family's tile table and each block row's pair. xq (a8/a4 layers only): the layer input
  // quantized once per token by the act_quant pre-pass (max_tokens rows of H; templates/moe_act_quant.cuh).
  size_t num_active = 0, active_expert = 0, active_offset = 0, pair_index = 0, counters = 0, act = 0, partial = 0;
  size_t tiles = 0, row_pair = 0, xq = 0;
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
    // The prefill family's blocks hold whole 64-wide chunks of K.
    const size_t block_rows = pairs + 7 * slots;
    const size_t h_chunked = (static_cast<size_t>(spec.hidden) + 63) / 64 * 64;
    const size_t i_chunked = (static_cast<size_t>(spec.intermediate) + 63) / 64 * 64;
    w.act = take(block_rows * i_chunked * sizeof(uint16_t));
    const size_t partial_bytes = pairs * spec.hidden * sizeof(float), x_block_bytes = block_rows * h_chunked * sizeof(uint16_t);
    w.partial = take(partial_bytes > x_block_bytes ? partial_bytes : x_block_bytes);
    w.tiles = take((kPrefillTileTableHeader + 3 * pairs) * sizeof(int32_t));
    w.row_pair = take(block_rows * sizeof(int32_t));
    const size_t tokens = static_cast<size_t>(max_tokens < 1 ? 1 : max_tokens);
    w.xq = take(spec.precision == ActPrecision::a16 ? 0 : tokens * spec.hidden * sizeof(uint16_t));
    w.barrier = take(2 * sizeof(uint32_t));
    w.total = at;
    return w;
  }
};

}  // namespace moejit::detail
