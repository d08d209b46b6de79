#pragma once
// The primary context of a device, made current on the calling thread. moejit uses primary contexts so
// that it shares memory and modules with anything else in the process that uses the runtime API.
#include <cuda.h>

#include <new>

namespace moejit::detail {
// Retains (once per process) and makes current the primary context of `device`.
CUcontext ensure_context(int device = -1);  // -1: keep the current one if any, else device 0

// Makes ctx current on the calling thread for one scope and gives the thread back the context it had
// (none included). The current context is per-thread state of the embedding process: a server that
// drives another device from the same thread must find it unchanged after every moejit call. When ctx
// is already current nothing is switched, so the common case costs one cuCtxGetCurrent.
class ScopedContext {
 public:
  // Throws moejit::Error naming the driver call that failed.
  explicit ScopedContext(CUcontext ctx);
  // For destructors and cleanup: a failure is reported (report_cleanup) and the scope runs in whatever
  // context is current.
  ScopedContext(CUcontext ctx, std::nothrow_t) noexcept;
  // Restores now, throwing moejit::Error when that fails; the normal exit of a scope that may throw.
  void restore();
  // Restores if restore() did not; a failure is reported, never thrown.
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  CUcontext saved_ = nullptr;
  bool switched_ = false;
};
}  // namespace moejit::detail
