// CSF scale planes in layer files: five tensors per plane, shapes fixed by the layer's geometry
// except the exception stream's length (docs/CSF.md).
#include "reference/csf_tensors.hpp"

#include <cstring>

#include "moejit/error.hpp"

namespace moejit::detail {
namespace {

const char* const kSuffixes[] = {"_csf_base", "_csf_mode", "_csf_offsets", "_csf_exception_start", "_csf_exceptions"};

std::string dims(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

const Tensor& csf_tensor(const SafetensorsFile& f, const std::string& what, const std::string& name,
                         const std::string& dtype, const std::vector<int64_t>& shape) {
  auto it = f.tensors.find(name);
  if (it == f.tensors.end())
    throw Error(what + ": tensor '" + name + "' is missing (a CSF scale plane needs all five _csf_ tensors)");
  const Tensor& t = it->second;
  if (t.dtype != dtype) throw Error(what + ": tensor '" + name + "' has dtype " + t.dtype + ", expected " + dtype);
  if (t.shape != shape)
    throw Error(what + ": tensor '" + name + "' has shape " + dims(t.shape) + ", expected " + dims(shape));
  return t;
}

Tensor bytes_tensor(std::vector<int64_t> shape, const std::vector<uint8_t>& data) {
  return Tensor{"U8", std::move(shape), data};
}

}  // namespace

std::vector<std::string> csf_tensor_names(const std::string& plane) {
  std::vector<std::string> names;
  for (const char* s : kSuffixes) names.push_back(plane + s);
  return names;
}

bool has_any_csf_tensor(const SafetensorsFile& f, const std::string& plane) {
  for (const auto& n : csf_tensor_names(plane))
    if (f.tensors.count(n)) return true;
  return false;
}

void put_csf_plane(SafetensorsFile& f, const std::string& plane, int64_t experts, int64_t rows_per_expert,
                   const CsfPlane& p) {
  if (experts * rows_per_expert != p.rows)
    throw Error("CSF plane " + plane + ": " + std::to_string(p.rows) + " rows, expected experts " +
                std::to_string(experts) + " x " + std::to_string(rows_per_expert));
  const auto names = csf_tensor_names(plane);
  f.tensors[names[0]] = bytes_tensor({experts, rows_per_expert}, p.base);
  f.tensors[names[1]] = bytes_tensor({experts, rows_per_expert}, p.mode);
  f.tensors[names[2]] = bytes_tensor({experts, rows_per_expert, p.offset_stride()}, p.offsets);
  Tensor start{"U32", {p.rows + 1}, std::vector<uint8_t>(p.exception_start.size() * sizeof(uint32_t))};
  if (!start.data.empty()) std::memcpy(start.data.data(), p.exception_start.data(), start.data.size());
  f.tensors[names[3]] = std::move(start);
  f.tensors[names[4]] = bytes_tensor({static_cast<int64_t>(p.exceptions.size())}, p.exceptions);
}

CsfPlane read_csf_plane(const SafetensorsFile& f, const std::string& what, const std::string& plane, ScaleFormat format,
                        int64_t experts, int64_t rows_per_expert, int64_t scales_per_row) {
  const auto names = csf_tensor_names(plane);
  CsfPlane p;
  p.format = format;
  p.rows = experts * rows_per_expert;
  p.scales_per_row = scales_per_row;
  p.base = csf_tensor(f, what, names[0], "U8", {experts, rows_per_expert}).data;
  p.mode = csf_tensor(f, what, names[1], "U8", {experts, rows_per_expert}).data;
  p.offsets = csf_tensor(f, what, names[2], "U8", {experts, rows_per_expert, p.offset_stride()}).data;
  const Tensor& start = csf_tensor(f, what, names[3], "U32", {p.rows + 1});
  p.exception_start.resize(static_cast<size_t>(p.rows + 1));
  std::memcpy(p.exception_start.data(), start.data.data(), start.data.size());
  // The exception stream's length is the encoding's own; only its rank is fixed.
  auto it = f.tensors.find(names[4]);
  if (it != f.tensors.end() && it->second.shape.size() != 1)
    throw Error(what + ": tensor '" + names[4] + "' has shape " + dims(it->second.shape) + ", expected one dimension");
  const int64_t length = it == f.tensors.end() ? 0 : it->second.shape[0];
  p.exceptions = csf_tensor(f, what, names[4], "U8", {length}).data;
  try {
    p.validate(plane);
  } catch (const Error& e) {
    throw Error(what + ": " + e.what());
  }
  return p;
}

}  // namespace moejit::detail
