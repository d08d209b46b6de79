#pragma once
// safetensors files (8-byte little-endian header length, JSON header, raw data) and the layer,
// input and output files of DESIGN §3.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "moejit/host_layer.hpp"

namespace moejit {

struct Tensor {
  std::string dtype;             // "U8", "I32", "F32", "BF16", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;     // raw little-endian bytes
};

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__" string fields
};

// Throws moejit::Error on malformed files: short file, header length past the end or above the
// format's 100,000,000-byte limit, bad or too deeply nested JSON, unknown dtype, shape/offset mismatch,
// tensors that do not fill the data section exactly (gaps, overlaps, trailing bytes), and (files) a
// path that is not a regular file.
SafetensorsFile read_safetensors(const std::string& path);
SafetensorsFile parse_safetensors(const std::vector<uint8_t>& bytes, const std::string& what = "buffer");
void write_safetensors(const std::string& path, const SafetensorsFile& file);
std::vector<uint8_t> serialize_safetensors(const SafetensorsFile& file);

// Layer files: tensors and metadata of DESIGN §3. Errors name the tensor or field.
HostLayer read_layer_file(const std::string& path);
void write_layer_file(const std::string& path, const HostLayer& layer);
HostInputs read_input_file(const std::string& path);
void write_input_file(const std::string& path, const HostInputs& in);
// Output file: "out" BF16 [M, H].
std::vector<uint16_t> read_output_file(const std::string& path, int* tokens = nullptr, int* hidden = nullptr);
void write_output_file(const std::string& path, const std::vector<uint16_t>& out, int tokens, int hidden);

}  // namespace moejit
