// safetensors container: 8-byte little-endian header length N, N bytes of JSON header, then the data
// section. Each tensor entry is {"dtype", "shape", "data_offsets": [begin, end]} with offsets relative
// to the start of the data section; "__metadata__" is an optional string -> string map.
//
// Files come from other programs (servers dumping layers, Python tools), so the reader trusts nothing:
// every size and offset is checked before any byte is touched, with overflow-safe arithmetic, and
// every failure is a moejit::Error that names the file (or buffer) and the offending tensor or field.
// The rules are those of the reference safetensors implementation: the header is at most 100,000,000
// bytes (checked before it is read), and the tensors fill the data section exactly, back to back in
// offset order: no gap, no overlap, no trailing bytes. A file that breaks them is refused, because a
// header length a few bytes off would otherwise shift every tensor silently.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "moejit/error.hpp"
#include "moejit/safetensors.hpp"
#include "core/regular_file.hpp"
#include "reference/json_limits.hpp"

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; this reader copies bytes as-is");

namespace moejit {
namespace {

using json = nlohmann::json;

// Bytes per element of the dtypes we read and write (the safetensors names).
int64_t dtype_size(const std::string& dtype) {
  static const std::pair<const char*, int64_t> kSizes[] = {
      {"U8", 1},  {"I8", 1},  {"U16", 2}, {"I16", 2}, {"BF16", 2}, {"F16", 2},
      {"I32", 4}, {"U32", 4}, {"F32", 4}, {"I64", 8}, {"F64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"BOOL", 1}};
  for (const auto& [name, size] : kSizes)
    if (dtype == name) return size;
  return -1;
}
const char* kDtypeList = "U8, I8, U16, I16, BF16, F16, I32, U32, F32, I64, F64, F8_E4M3, F8_E5M2, BOOL";

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Element count of a shape, or -1 when it overflows int64.
int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

struct Entry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

struct Header {
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;
};

// The reference implementation's limit on the JSON header: a larger length field is a damaged or hostile
// file, refused before the header is read (no gigabyte allocation for a file that only claims to be large).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// The header length n of a file (or buffer) of `size` bytes, checked against the cap and the size.
void check_header_length(uint64_t n, uint64_t size, const std::string& what) {
  if (n > kMaxHeaderBytes)
    throw Error("safetensors " + what + ": header length " + std::to_string(n) + " exceeds the safetensors limit of " +
                std::to_string(kMaxHeaderBytes) + " bytes");
  if (n > size - 8)
    throw Error("safetensors " + what + ": header length " + std::to_string(n) + " runs past the end (" +
                std::to_string(size) + " bytes)");
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses and checks the JSON header against a data section of data_size bytes.
Header parse_header(const char* text, size_t len, uint64_t data_size, const std::string& what) {
  auto fail = [&](const std::string& msg) -> void { throw Error("safetensors " + what + ": " + msg); };
  if (auto why = detail::json_depth_problem(std::string_view(text, len)); !why.empty()) fail("header " + why);
  json h;
  try {
    h = json::parse(text, text + len);
  } catch (const json::exception& e) {
    fail(std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (!h.is_object()) fail("header is not a JSON object");

  Header out;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("__metadata__ is not an object of string fields");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail("__metadata__ field '" + m.key() + "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string t = "tensor '" + name + "'";
    if (!v.is_object()) fail(t + ": entry is not an object");
    Entry e;
    e.name = name;
    if (!v.contains("dtype") || !v["dtype"].is_string()) fail(t + ": missing string field 'dtype'");
    e.dtype = v["dtype"].get<std::string>();
    const int64_t item = dtype_size(e.dtype);
    if (item < 0) fail(t + ": unknown dtype '" + e.dtype + "' (accepted: " + kDtypeList + ")");
    if (!v.contains("shape") || !v["shape"].is_array()) fail(t + ": missing array field 'shape'");
    for (const json& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) fail(t + ": shape entries must be non-negative integers");
      e.shape.push_back(d.get<int64_t>());
    }
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      fail(t + ": 'data_offsets' must be an array [begin, end]");
    for (const json& d : v["data_offsets"])
      if (!d.is_number_unsigned()) fail(t + ": data_offsets must be non-negative integers");
    e.begin = v["data_offsets"][0].get<uint64_t>();
    e.end = v["data_offsets"][1].get<uint64_t>();
    if (e.begin > e.end)
      fail(t + ": data_offsets begin " + std::to_string(e.begin) + " > end " + std::to_string(e.end));
    if (e.end > data_size)
      fail(t + ": data_offsets end " + std::to_string(e.end) + " is past the end of the data section (" +
           std::to_string(data_size) + " bytes)");
    const int64_t count = element_count(e.shape);
    if (count < 0 || count > std::numeric_limits<int64_t>::max() / item)
      fail(t + ": shape " + shape_str(e.shape) + " is too large");
    if (static_cast<uint64_t>(count * item) != e.end - e.begin)
      fail(t + ": shape " + shape_str(e.shape) + " of " + e.dtype + " needs " + std::to_string(count * item) +
           " bytes but data_offsets span " + std::to_string(e.end - e.begin));
    out.entries.push_back(std::move(e));
  }

  // The tensors fill the data section exactly: in offset order each starts where the previous one ended
  // (an empty tensor too, as the reference implementation requires), and the last one ends at its end.
  std::vector<const Entry*> sorted;
  for (const Entry& e : out.entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(),
            [](const Entry* a, const Entry* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
  uint64_t filled = 0;
  const Entry* previous = nullptr;
  for (const Entry* e : sorted) {
    if (e->begin < filled)
      fail("tensors '" + previous->name + "' and '" + e->name + "' have overlapping data_offsets");
    if (e->begin > filled)
      fail("tensor '" + e->name + "' starts at byte " + std::to_string(e->begin) + " of the data section but " +
           (previous ? "tensor '" + previous->name + "' ends at byte " + std::to_string(filled)
                     : std::string("no tensor starts at byte 0")) +
           ": the tensors must fill the data section without gaps");
    filled = e->end;
    previous = e;
  }
  if (filled != data_size)
    fail("the tensors end at byte " + std::to_string(filled) + " but the data section has " + std::to_string(data_size) +
         " bytes: the tensors must fill it exactly, with no trailing bytes (is the header length " +
         "at the start of the file right?)");
  return out;
}

// The 8-byte length and the JSON header (space-padded so the data section starts 8-byte aligned),
// with tensors laid out back to back in name order.
std::string build_header(const SafetensorsFile& file) {
  json h = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : file.tensors) {
    if (name == "__metadata__") throw Error("safetensors: '__metadata__' cannot be a tensor name");
    const int64_t item = dtype_size(t.dtype);
    if (item < 0) throw Error("safetensors: tensor '" + name + "' has unknown dtype '" + t.dtype + "' (accepted: " + kDtypeList + ")");
    const int64_t count = element_count(t.shape);
    if (count < 0 || static_cast<uint64_t>(count) * static_cast<uint64_t>(item) != t.data.size())
      throw Error("safetensors: tensor '" + name + "' has " + std::to_string(t.data.size()) + " bytes but shape " +
                  shape_str(t.shape) + " of " + t.dtype + " needs " + std::to_string(count * item));
    h[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  if (!file.metadata.empty()) h["__metadata__"] = file.metadata;
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + text;
}

}  // namespace

SafetensorsFile parse_safetensors(const std::vector<uint8_t>& bytes, const std::string& what) {
  if (bytes.size() < 8)
    throw Error("safetensors " + what + ": " + std::to_string(bytes.size()) + " bytes is shorter than the 8-byte header length");
  const uint64_t n = read_u64_le(bytes.data());
  check_header_length(n, bytes.size(), what);
  const Header h = parse_header(reinterpret_cast<const char*>(bytes.data()) + 8, n, bytes.size() - 8 - n, what);
  SafetensorsFile f;
  f.metadata = h.metadata;
  const uint8_t* data = bytes.data() + 8 + n;
  for (const Entry& e : h.entries) {
    Tensor t;
    t.dtype = e.dtype;
    t.shape = e.shape;
    t.data.assign(data + e.begin, data + e.end);
    f.tensors.emplace(e.name, std::move(t));
  }
  return f;
}

namespace {

// A file opened without blocking (it must be a regular file: a FIFO named as a layer is an error, not a
// hang), its header length checked against the cap and the size before the header is read.
struct OpenedFile {
  detail::Fd fd;
  uint64_t header_bytes = 0;  // N
  Header header;
};

OpenedFile open_safetensors(const std::string& path) {
  OpenedFile f;
  struct stat st;
  f.fd = detail::open_regular_file(AT_FDCWD, path, /*follow_symlinks=*/true, &st);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8)
    throw Error("safetensors " + path + ": " + std::to_string(size) + " bytes is shorter than the 8-byte header length");
  uint8_t len[8];
  detail::read_exact_at(f.fd.get(), 0, len, 8, path);
  const uint64_t n = read_u64_le(len);
  check_header_length(n, size, path);
  std::string text(n, '\0');
  detail::read_exact_at(f.fd.get(), 8, text.data(), text.size(), path);
  f.header_bytes = n;
  f.header = parse_header(text.data(), text.size(), size - 8 - n, path);
  return f;
}

// Runs body, reporting the file system's errors as moejit::Error naming the file.
template <class Body>
auto with_file_errors(const std::string& path, Body body) {
  try {
    return body();
  } catch (const detail::FsError& e) {
    throw Error("safetensors " + path + ": " + e.what());
  }
}

}  // namespace

SafetensorsFile read_safetensors(const std::string& path) {
  // Read the header, then each tensor straight into its own buffer: a 1.5 GB layer is not held twice.
  return with_file_errors(path, [&] {
    const OpenedFile o = open_safetensors(path);
    SafetensorsFile f;
    f.metadata = o.header.metadata;
    for (const Entry& e : o.header.entries) {
      Tensor t;
      t.dtype = e.dtype;
      t.shape = e.shape;
      t.data.resize(e.end - e.begin);
      detail::read_exact_at(o.fd.get(), 8 + o.header_bytes + e.begin, t.data.data(), t.data.size(), path);
      f.tensors.emplace(e.name, std::move(t));
    }
    return f;
  });
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  return with_file_errors(path, [&] {
    const OpenedFile o = open_safetensors(path);
    SafetensorsHeader h;
    h.path = path;
    h.metadata = o.header.metadata;
    for (const Entry& e : o.header.entries)
      h.tensors.emplace(e.name, TensorInfo{e.dtype, e.shape, 8 + o.header_bytes + e.begin, e.end - e.begin});
    return h;
  });
}

std::vector<uint8_t> read_tensor_data(const SafetensorsHeader& header, const std::string& name) {
  auto it = header.tensors.find(name);
  if (it == header.tensors.end()) throw Error("safetensors " + header.path + ": tensor '" + name + "' is missing");
  return with_file_errors(header.path, [&] {
    struct stat st;
    const detail::Fd fd = detail::open_regular_file(AT_FDCWD, header.path, /*follow_symlinks=*/true, &st);
    std::vector<uint8_t> data(it->second.bytes);
    detail::read_exact_at(fd.get(), it->second.file_offset, data.data(), data.size(), header.path);
    return data;
  });
}

std::vector<uint8_t> serialize_safetensors(const SafetensorsFile& file) {
  const std::string header = build_header(file);
  std::vector<uint8_t> out(header.begin(), header.end());
  for (const auto& [name, t] : file.tensors) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

void write_safetensors(const std::string& path, const SafetensorsFile& file) {
  const std::string header = build_header(file);  // validates every tensor before the file is touched
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("safetensors " + path + ": cannot open for writing");
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& [name, t] : file.tensors)
    out.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
  out.flush();
  if (!out) throw Error("safetensors " + path + ": write failed");
}

}  // namespace moejit
