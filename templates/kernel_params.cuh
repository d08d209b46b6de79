// Kernel parameter structs are defined once, in templates/moe_*_params.cuh and prepare_repack_params.cuh,
// and compiled twice: by NVRTC into the kernels (typed device pointers) and by the host runtime
// (runtime/kernel_params.hpp: every pointer a 64-bit device address). Each field's size and alignment
// is 8 bytes for a pointer and 4 for an i32 or float on both sides, so the two layouts cannot drift.
//
// A parameter header declares pointers as MOEJIT_PTR(T) name and plain values with i32/float, and opens
// and closes with MOEJIT_PARAMS_BEGIN / MOEJIT_PARAMS_END (the host's namespace).
#pragma once

#if defined(__CUDACC__)
#include "device_core.cuh"
#define MOEJIT_PTR(T) T*
#define MOEJIT_PARAMS_BEGIN
#define MOEJIT_PARAMS_END
#else
#include <cstdint>
#define MOEJIT_PTR(T) ::moejit::detail::dptr
#define MOEJIT_PARAMS_BEGIN namespace moejit::detail {
#define MOEJIT_PARAMS_END }
namespace moejit::detail {
using dptr = std::uint64_t;  // a device address (CUdeviceptr)
using i32 = std::int32_t;
}  // namespace moejit::detail
#endif

// The batch and prefill families' parameter structs end with a plane's CSF side arrays (docs/CSF.md §8)
// only in kernels that read that plane as CSF (the key's csf_scales; csf_scales.cuh MOEJIT_FC1_CSF_ARRAYS
// reads them), so plain kernels keep their parameters; the host always has the fields and passes its whole
// struct (a launch copies the bytes the kernel declares).
// A TMA tensor map as the kernels take it: 128 opaque bytes, 128-byte aligned (CUtensorMap's size and
// alignment), encoded by the host (cuTensorMapEncodeTiled) and read by the copy engine from the kernel's
// __grid_constant__ parameters.
MOEJIT_PARAMS_BEGIN
struct alignas(128) TensorMapBytes {
  unsigned long long words[16];
};
MOEJIT_PARAMS_END

#if defined(__CUDACC__)
#define MOEJIT_CSF_PLANE_FIELDS(plane) (plane)
#else
#define MOEJIT_CSF_PLANE_FIELDS(plane) 1
#endif
