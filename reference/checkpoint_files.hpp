#pragma once
// The files of a Hugging Face style checkpoint directory: config.json, an optional quantization
// config, and the safetensors shards (model.safetensors.index.json's weight_map, or one
// model.safetensors). Only shard headers are read up front; tensor data is read on demand, by range,
// so loading one layer of a 600 GB checkpoint touches only that layer's bytes.
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moejit/safetensors.hpp"

namespace moejit::detail {

class CheckpointFiles {
 public:
  // Reads config.json, the shard index (or the single shard) and every shard's header. Throws
  // moejit::Error naming the file and the rule (a missing file, invalid JSON, an index naming a shard
  // that does not exist or a tensor the shard does not hold).
  explicit CheckpointFiles(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  // hf_quant_config.json when present (null otherwise).
  const nlohmann::json& hf_quant_config() const { return hf_quant_; }
  // Every tensor name, sorted.
  std::vector<std::string> names() const;
  const TensorInfo* find(const std::string& name) const;

  // Checks that `name` exists with this dtype and shape, naming the tensor, its shard and the rule.
  const TensorInfo& expect(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                           const std::string& rule) const;
  // A scalar F32 tensor (shape [] or [1]) that must be finite and > 0.
  float positive_scalar(const std::string& name, const std::string& rule) const;
  // Bytes [offset, offset + bytes) of a tensor's data.
  std::vector<uint8_t> read(const std::string& name, uint64_t offset, uint64_t bytes) const;
  std::vector<uint8_t> read(const std::string& name) const;

  // "config.json" field helpers: the error names the file and the field.
  int config_int(const std::vector<std::string>& fields, int min_value) const;  // first present field
  bool config_has(const std::string& field) const;

 private:
  std::string dir_;
  nlohmann::json config_;
  nlohmann::json hf_quant_;
  std::map<std::string, std::shared_ptr<SafetensorsHeader>> shards_;  // file name -> header
  std::map<std::string, const SafetensorsHeader*> where_;             // tensor name -> its shard
};

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace moejit::detail
