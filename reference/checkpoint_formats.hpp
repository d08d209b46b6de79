#pragma once
// The per-layout halves of checkpoint loading (include/moejit/checkpoint.hpp): each layout reads its
// geometry from config.json and its tensor names, and loads one layer's slice. reference/checkpoint.cpp
// picks the layout and checks the slice.
#include <cstdint>
#include <regex>
#include <string>
#include <vector>

#include "moejit/checkpoint.hpp"
#include "reference/checkpoint_files.hpp"

namespace moejit::detail {

// What one rank loads of a layer: the local spec (ModelConfig::local()'s rules) and where its slice starts.
struct LayerSlice {
  LayerSpec local;
  int64_t expert0 = 0;  // first global expert loaded (= local.expert_begin)
  int64_t i0 = 0;       // first intermediate index loaded (tp_rank · I / tp)
  bool fc2_bias = true; // this rank adds the FC2 bias (rank 0 of tp only)
};

// Layer indices whose tensor names match `pattern` (group 1: the prefix before "layers.", group 2: the
// layer index), ascending; sets *prefix. Throws moejit::Error when no name matches (saying that no
// tensor is named `expected`) or when two different prefixes do.
std::vector<int> find_layers(const CheckpointFiles& files, const std::regex& pattern, const std::string& expected,
                             std::string* prefix);

// Appends rows [row0, row0 + rows) and bytes [col0, col0 + cols) of each of a row-major byte matrix
// whose rows are row_bytes long.
void append_block(std::vector<uint8_t>& dst, const std::vector<uint8_t>& src, int64_t row_bytes, int64_t row0,
                  int64_t rows, int64_t col0, int64_t cols);

// The activation a config.json hidden_act names (silu, gelu_pytorch_tanh / gelu_tanh).
Activation activation_from_hidden_act(const CheckpointFiles& files);

CheckpointInfo inspect_modelopt(const CheckpointFiles& files);
HostLayer load_modelopt(const CheckpointFiles& files, const CheckpointInfo& info, int layer, const LayerSlice& s);

CheckpointInfo inspect_gpt_oss(const CheckpointFiles& files);
HostLayer load_gpt_oss(const CheckpointFiles& files, const CheckpointInfo& info, int layer, const LayerSlice& s);

}  // namespace moejit::detail
