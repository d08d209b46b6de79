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

// Every function here is thread-safe (no shared mutable state) and host-only; the format and the slicing
// rules are in docs/CONFIGS.md.
struct ModelConfig {
  std::string name;
  LayerSpec global;   // geometry before slicing (experts = all experts, intermediate = unsliced I)
  int tp = 1;         // tensor parallel degree: I is split tp ways
  int ep = 1;         // expert parallel degree: E is split ep ways
  int ep_rank = 0;    // which expert slice this rank holds, 0 <= ep_rank < ep
  // The layer one rank holds: E/ep local experts from expert_begin = ep_rank * E/ep, I/tp intermediate
  // (the same I slice shape on every TP rank). Throws moejit::Error naming the config when ep or tp
  // do not divide E or I, when I/tp is not a multiple of the scale block, or a degree or rank is out of
  // range.
  LayerSpec local() const;
};

// Parses a config's JSON text. origin names it in messages ("config" by default; a file path or
// "bundled config <name>.json"). Throws moejit::Error "<origin>: field '<field>': <rule>" for invalid
// JSON, unknown fields, wrong types and values that break a rule of docs/CONFIGS.md.
ModelConfig parse_model_config(const std::string& json_text, const std::string& origin = "config");
// A JSON file path, or the name of a bundled config (configs/*.json, embedded in the library); an
// existing file of that path wins. Throws moejit::Error when neither exists (listing the bundled
// names), the file cannot be read, or it does not parse.
ModelConfig load_model_config(const std::string& path_or_name);
// Names of the bundled configs, sorted ("deepseek-v3", "gpt-oss-120b", ...). Never throws.
std::vector<std::string> bundled_config_names();
std::string default_config_name();  // "gpt-oss-120b"

}  // namespace moejit
