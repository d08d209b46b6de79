#pragma once
// The primary context of a device, made current on the calling thread. moejit uses primary contexts so
// that it shares memory and modules with anything else in the process that uses the runtime API.
#include <cuda.h>

namespace moejit::detail {
// Retains (once per process) and makes current the primary context of `device`.
CUcontext ensure_context(int device = -1);  // -1: keep the current one if any, else device 0
}  // namespace moejit::detail
