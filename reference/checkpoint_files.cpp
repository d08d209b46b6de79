// Checkpoint directories: config.json, quantization config, sharded safetensors (see checkpoint_files.hpp).
#include "reference/checkpoint_files.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fcntl.h>
#include <sys/stat.h>

#include "core/regular_file.hpp"
#include "moejit/error.hpp"
#include "reference/json_limits.hpp"

namespace moejit::detail {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The JSON files of a checkpoint (config.json, the shard index, the quantization config) are small: more
// than this is not one of them.
constexpr std::size_t kMaxCheckpointJson = 64u << 20;

json read_json(const fs::path& path, const std::string& what) {
  const std::string dir = path.parent_path().string();
  // A regular file (no FIFO blocks the reader), of bounded size and nesting, like every file moejit reads.
  std::vector<char> bytes;
  try {
    struct stat st;
    bytes = read_regular_file(AT_FDCWD, path.string(), kMaxCheckpointJson, /*follow_symlinks=*/true, &st);
  } catch (const FsError& e) {
    throw Error(fmt::format("checkpoint {}: cannot read {}: {}", dir, what, e.what()));
  }
  const std::string text(bytes.begin(), bytes.end());
  if (auto why = json_depth_problem(text); !why.empty())
    throw Error(fmt::format("checkpoint {}: {} is not usable: the JSON {}", dir, what, why));
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(fmt::format("checkpoint {}: {} is not valid JSON: {}", dir, what, e.what()));
  }
  if (!j.is_object()) throw Error(fmt::format("checkpoint {}: {} is not a JSON object", dir, what));
  return j;
}

}  // namespace

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

CheckpointFiles::CheckpointFiles(const std::string& dir) : dir_(dir) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) throw Error(fmt::format("checkpoint {}: not a directory", dir));
  config_ = read_json(root / "config.json", "config.json");
  if (fs::exists(root / "hf_quant_config.json")) hf_quant_ = read_json(root / "hf_quant_config.json", "hf_quant_config.json");

  // Sharded: the index maps every tensor to its shard; unsharded: one model.safetensors.
  std::map<std::string, std::string> wanted;  // tensor -> shard file, from the index
  if (fs::exists(root / "model.safetensors.index.json")) {
    const json index = read_json(root / "model.safetensors.index.json", "model.safetensors.index.json");
    const auto map = index.find("weight_map");
    if (map == index.end() || !map->is_object())
      throw Error(fmt::format("checkpoint {}: model.safetensors.index.json has no object 'weight_map'", dir));
    for (const auto& [tensor, file] : map->items()) {
      if (!file.is_string())
        throw Error(fmt::format("checkpoint {}: model.safetensors.index.json: weight_map['{}'] is not a file name", dir,
                                tensor));
      const std::string f = file.get<std::string>();
      // Shards live in the checkpoint directory itself; a path elsewhere is not part of it.
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
        throw Error(fmt::format("checkpoint {}: model.safetensors.index.json: weight_map['{}'] = '{}' is not a file "
                                "name in the checkpoint directory",
                                dir, tensor, f));
      wanted[tensor] = f;
      shards_.emplace(f, nullptr);
    }
  } else if (fs::exists(root / "model.safetensors")) {
    shards_.emplace("model.safetensors", nullptr);
  } else {
    throw Error(fmt::format("checkpoint {}: neither model.safetensors.index.json nor model.safetensors is present", dir));
  }
  for (auto& [file, header] : shards_) {
    const fs::path p = root / file;
    if (!fs::exists(p))
      throw Error(fmt::format("checkpoint {}: shard {} named by model.safetensors.index.json does not exist", dir, file));
    header = std::make_shared<SafetensorsHeader>(read_safetensors_header(p.string()));
  }
  if (wanted.empty()) {
    for (const auto& [name, info] : shards_.begin()->second->tensors) where_[name] = shards_.begin()->second.get();
    return;
  }
  for (const auto& [tensor, file] : wanted) {
    const SafetensorsHeader* h = shards_.at(file).get();
    if (!h->tensors.count(tensor))
      throw Error(fmt::format("checkpoint {}: model.safetensors.index.json puts tensor '{}' in {}, which does not hold it",
                              dir, tensor, file));
    where_[tensor] = h;
  }
}

std::vector<std::string> CheckpointFiles::names() const {
  std::vector<std::string> v;
  v.reserve(where_.size());
  for (const auto& [name, h] : where_) v.push_back(name);
  return v;
}

const TensorInfo* CheckpointFiles::find(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : &it->second->tensors.at(name);
}

const TensorInfo& CheckpointFiles::expect(const std::string& name, const std::string& dtype,
                                          const std::vector<int64_t>& shape, const std::string& rule) const {
  const TensorInfo* t = find(name);
  if (!t) throw Error(fmt::format("checkpoint {}: tensor '{}' is missing ({})", dir_, name, rule));
  const std::string shard = fs::path(where_.at(name)->path).filename().string();
  if (t->dtype != dtype)
    throw Error(fmt::format("checkpoint {}: tensor '{}' ({}) has dtype {}, expected {} ({})", dir_, name, shard, t->dtype,
                            dtype, rule));
  if (t->shape != shape)
    throw Error(fmt::format("checkpoint {}: tensor '{}' ({}) has shape {}, expected {} ({})", dir_, name, shard,
                            shape_string(t->shape), shape_string(shape), rule));
  return *t;
}

float CheckpointFiles::positive_scalar(const std::string& name, const std::string& rule) const {
  const TensorInfo* t = find(name);
  const bool one = t && t->shape.size() == 1 && t->shape[0] == 1;
  expect(name, "F32", one ? std::vector<int64_t>{1} : std::vector<int64_t>{}, rule + "; a scalar, shape [] or [1]");
  const std::vector<uint8_t> bytes = read(name);
  float v = 0;
  std::memcpy(&v, bytes.data(), sizeof v);
  if (!std::isfinite(v) || !(v > 0))
    throw Error(fmt::format("checkpoint {}: tensor '{}' = {} must be finite and > 0 ({})", dir_, name, v, rule));
  return v;
}

std::vector<uint8_t> CheckpointFiles::read(const std::string& name, uint64_t offset, uint64_t bytes) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw Error(fmt::format("checkpoint {}: tensor '{}' is missing", dir_, name));
  const TensorInfo& t = it->second->tensors.at(name);
  if (offset > t.bytes || bytes > t.bytes - offset)
    throw Error(fmt::format("checkpoint {}: bytes [{}, {}) of tensor '{}' are outside its {} bytes", dir_, offset,
                            offset + bytes, name, t.bytes));
  SafetensorsHeader one;
  one.path = it->second->path;
  one.tensors[name] = TensorInfo{t.dtype, t.shape, t.file_offset + offset, bytes};
  return read_tensor_data(one, name);
}

std::vector<uint8_t> CheckpointFiles::read(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) throw Error(fmt::format("checkpoint {}: tensor '{}' is missing", dir_, name));
  return read(name, 0, t->bytes);
}

bool CheckpointFiles::config_has(const std::string& field) const {
  return config_.contains(field) && !config_[field].is_null();
}

int CheckpointFiles::config_int(const std::vector<std::string>& fields, int min_value) const {
  for (const std::string& f : fields) {
    if (!config_has(f)) continue;
    const json& v = config_[f];
    if (!v.is_number_integer() || v.get<int64_t>() < min_value || v.get<int64_t>() > (1 << 30))
      throw Error(fmt::format("checkpoint {}: config.json field '{}' = {} must be an integer >= {}", dir_, f, v.dump(),
                              min_value));
    return static_cast<int>(v.get<int64_t>());
  }
  std::string names;
  for (const std::string& f : fields) names += (names.empty() ? "'" : " or '") + f + "'";
  throw Error(fmt::format("checkpoint {}: config.json has no field {}", dir_, names));
}

}  // namespace moejit::detail
