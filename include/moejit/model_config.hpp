#pragma once
// Model configs: JSON files describing one MoE layer of a real model and its TP/EP slicing.
//
// {"name": "gpt-oss-120b", "format": "mxfp4", "activation": "swigluoai", "experts": 128,
//  "hidden": 2880, "intermediate": 2880, "top_k": 4, "bias": true, "gate_up_order": "interleaved",
//  "swiglu_alpha": 1.702, "swiglu_beta": 1.0, "swiglu_limit": 7.0, "tp": 1, "ep": 1, "ep_rank": 0}
#include <string>
#include <vector>

#include "moejit/types.hpp"

namespace moejit {

struct ModelConfig {
  std::string name;
  LayerSpec global;   // geometry before slicing
  int tp = 1;         // tensor parallel degree: I is split tp ways
  int ep = 1;         // expert parallel degree: E is split ep ways
  int ep_rank = 0;    // which expert slice this rank holds
  // The layer one rank holds: E/ep local experts from expert_begin, I/tp intermediate.
  LayerSpec local() const;
};

// Throws moejit::Error naming the file and field on malformed configs.
ModelConfig parse_model_config(const std::string& json_text, const std::string& origin = "config");
ModelConfig load_model_config(const std::string& path_or_name);  // a path, or the name of a bundled config
std::vector<std::string> bundled_config_names();
std::string default_config_name();  // "gpt-oss-120b"

}  // namespace moejit
