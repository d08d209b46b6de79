#pragma once
// The CUDA driver API, loaded with dlopen("libcuda.so.1") at first use so that every binary starts, and
// every CPU test runs, on machines without a GPU. Only the entry points moejit needs are resolved.
#include <cuda.h>

#include <string>

namespace moejit::detail {

struct DriverApi {
#define MOEJIT_DRIVER_FN(name) decltype(&::name) name = nullptr;
#include "runtime/driver_functions.inc"
#undef MOEJIT_DRIVER_FN
};

// Loads libcuda.so.1 and calls cuInit(0) once. Throws moejit::Error (with dlerror / the CUresult)
// when the library or a device is missing.
const DriverApi& driver();
// Non-throwing probes. driver_state tells a machine without a GPU (no libcuda.so.1, or no device)
// from a GPU machine whose driver fails (a missing entry point, cuInit or cuDeviceGetCount failing
// otherwise); driver_available is true when driver() would succeed and a device exists.
enum class DriverState { usable, no_driver, no_device, broken };
DriverState driver_state(std::string* why);
bool driver_available(std::string* why);

// Throws moejit::Error "<what>: <CUDA error name>: <description>" when r != CUDA_SUCCESS.
void check(CUresult r, const char* what);
std::string error_string(CUresult r);

}  // namespace moejit::detail

#define MOEJIT_CU(call) ::moejit::detail::check(::moejit::detail::driver().call, #call)

namespace moejit::detail {
// For destructors and cleanup paths, which cannot throw: a failed call r is reported as one line on
// stderr, "moejit: <what> failed during cleanup: <CUDA error name>", and otherwise ignored (a leak is
// better than terminating the host process). CUDA_ERROR_DEINITIALIZED is not reported: at process exit
// the driver may already be torn down, and it has released everything with it. Returns r == CUDA_SUCCESS.
bool report_cleanup(CUresult r, const char* what) noexcept;
}  // namespace moejit::detail
