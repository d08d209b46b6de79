#pragma once
// safetensors files (8-byte little-endian header length, JSON header, raw data) and the layer,
// input and output files of DESIGN §3.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "moejit/host_layer.hpp"

namespace moejit {

// Every function here is host-only and thread-safe as long as two threads do not write the same path.
// Readers check every size and offset before touching a byte; every failure is a moejit::Error naming
// the file (or buffer) and the tensor or field.

struct Tensor {
  std::string dtype;             // "U8", "I32", "F32", "BF16", "F8_E4M3", ... (the safetensors names)
  std::vector<int64_t> shape;    // [] for a scalar
  std::vector<uint8_t> data;     // raw little-endian bytes, row-major, product(shape) * dtype size
};

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__" string fields
};

// Throws moejit::Error on malformed files: short file, header length past the end or above the
// format's 100,000,000-byte limit, bad or too deeply nested JSON, unknown dtype, shape/offset mismatch,
// tensors that do not fill the data section exactly (gaps, overlaps, trailing bytes), and (files) a
// path that is not a regular file. `what` names a buffer in messages. Accepted dtypes: U8, I8, U16, I16,
// BF16, F16, I32, U32, F32, I64, F64, F8_E4M3, F8_E5M2, BOOL.
SafetensorsFile read_safetensors(const std::string& path);
SafetensorsFile parse_safetensors(const std::vector<uint8_t>& bytes, const std::string& what = "buffer");
// Writes tensors back to back in name order after a space-padded header (data 8-byte aligned). Throws
// moejit::Error, before the file is touched, for an unknown dtype or a data size that does not match
// the shape; and when the file cannot be opened or written (a partial file may remain then).
void write_safetensors(const std::string& path, const SafetensorsFile& file);
std::vector<uint8_t> serialize_safetensors(const SafetensorsFile& file);

// A file's header without its data, for reading a few tensors of a large file (checkpoint shards).
// read_safetensors_header reads only the header (the same checks as read_safetensors); read_tensor_data
// opens the file again for each call, so headers can be shared between threads.
struct TensorInfo {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t file_offset = 0;  // first byte of the tensor's data, from the start of the file
  uint64_t bytes = 0;
};
struct SafetensorsHeader {
  std::string path;
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
};
// Reads and checks the header only (the same checks as read_safetensors).
SafetensorsHeader read_safetensors_header(const std::string& path);
// Reads one tensor's raw bytes; moejit::Error naming the file and tensor when it is missing or unreadable.
std::vector<uint8_t> read_tensor_data(const SafetensorsHeader& header, const std::string& name);
std::vector<uint8_t> serialize_safetensors(const SafetensorsFile& file);

// Layer files: tensors and metadata of DESIGN §3 (w13_global_scale F32 [E] or, for gate and up scaled
// apart, [E, 2]; docs/CHECKPOINTS.md). Read strictly: every tensor must have exactly its dtype and
// shape, and a tensor that does not belong to the layer is an error. Errors name the tensor or field.
HostLayer read_layer_file(const std::string& path);
// Validates the layer (HostLayer::validate) and writes it; throws moejit::Error naming the tensor.
void write_layer_file(const std::string& path, const HostLayer& layer);
// Input files: x BF16 [M, H], topk_ids I32 [M, K], topk_weights F32 [M, K]. write_input_file throws
// moejit::Error when a vector's length is not M*H or M*K.
HostInputs read_input_file(const std::string& path);
void write_input_file(const std::string& path, const HostInputs& in);
// Output file: "out" BF16 [M, H] (bf16 bits, row-major); *tokens and *hidden, when given, receive M
// and H. write_output_file throws moejit::Error when out.size() != tokens * hidden.
std::vector<uint16_t> read_output_file(const std::string& path, int* tokens = nullptr, int* hidden = nullptr);
void write_output_file(const std::string& path, const std::vector<uint16_t>& out, int tokens, int hidden);

}  // namespace moejit
