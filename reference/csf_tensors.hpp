#pragma once
// The tensors of a CSF scale plane in a layer file (docs/CSF.md, "Layer file"), internal to the
// layer-file reader and writer.
#include <cstdint>
#include <string>
#include <vector>

#include "moejit/csf.hpp"
#include "moejit/safetensors.hpp"

namespace moejit::detail {

// __metadata__ field of a layer file holding CSF planes, and its value.
inline constexpr const char* kScaleStorageField = "scale_storage";
inline constexpr const char* kScaleStorageCsf = "csf";

// The five tensor names of plane `plane` (e.g. "w13_scale"): _csf_base, _csf_mode, _csf_offsets,
// _csf_exception_start, _csf_exceptions appended.
std::vector<std::string> csf_tensor_names(const std::string& plane);
// Whether the file holds any of them.
bool has_any_csf_tensor(const SafetensorsFile& f, const std::string& plane);

// Adds the plane's tensors; rows_per_expert * experts must equal p.rows.
void put_csf_plane(SafetensorsFile& f, const std::string& plane, int64_t experts, int64_t rows_per_expert,
                   const CsfPlane& p);
// Reads the plane's tensors (each with exactly its dtype and shape) and validates the plane; errors
// start with `what` and name the tensor and the rule.
CsfPlane read_csf_plane(const SafetensorsFile& f, const std::string& what, const std::string& plane, ScaleFormat format,
                        int64_t experts, int64_t rows_per_expert, int64_t scales_per_row);

}  // namespace moejit::detail
