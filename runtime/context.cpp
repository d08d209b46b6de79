#include "runtime/context.hpp"

#include <map>
#include <mutex>

#include "runtime/driver_api.hpp"

namespace moejit::detail {

CUcontext ensure_context(int device) {
  const DriverApi& d = driver();
  if (device < 0) {
    CUcontext cur = nullptr;
    check(d.cuCtxGetCurrent(&cur), "cuCtxGetCurrent");
    if (cur) return cur;
    device = 0;
  }
  static std::mutex mu;
  static std::map<int, CUcontext> retained;  // primary contexts stay retained for the process
  CUcontext ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = retained.find(device);
    if (it == retained.end()) {
      CUdevice dev;
      check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
      check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
      retained[device] = ctx;
    } else {
      ctx = it->second;
    }
  }
  check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return ctx;
}

ScopedContext::ScopedContext(CUcontext ctx) {
  const DriverApi& d = driver();
  check(d.cuCtxGetCurrent(&saved_), "cuCtxGetCurrent");
  if (saved_ == ctx) return;
  check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  switched_ = true;
}

ScopedContext::ScopedContext(CUcontext ctx, std::nothrow_t) noexcept {
  const DriverApi& d = driver();  // loaded: ctx came from it
  if (!report_cleanup(d.cuCtxGetCurrent(&saved_), "cuCtxGetCurrent")) return;
  if (saved_ == ctx) return;
  switched_ = report_cleanup(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

void ScopedContext::restore() {
  if (!switched_) return;
  switched_ = false;
  check(driver().cuCtxSetCurrent(saved_), "cuCtxSetCurrent(restoring the caller's context)");
}

ScopedContext::~ScopedContext() {
  if (switched_) report_cleanup(driver().cuCtxSetCurrent(saved_), "cuCtxSetCurrent(restoring the caller's context)");
}

}  // namespace moejit::detail
