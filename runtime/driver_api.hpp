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
// Non-throwing probe: true when driver() would succeed and a device exists.
bool driver_available(std::string* why);

// Throws moejit::Error "<what>: <CUDA error name>: <description>" when r != CUDA_SUCCESS.
void check(CUresult r, const char* what);
std::string error_string(CUresult r);

}  // namespace moejit::detail

#define MOEJIT_CU(call) ::moejit::detail::check(::moejit::detail::driver().call, #call)
