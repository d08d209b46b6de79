// DeviceBuffer: owning device allocation for tools and tests.
#include <fmt/format.h>

#include <new>

#include "moejit/error.hpp"
#include "moejit/runtime.hpp"
#include "runtime/context.hpp"
#include "runtime/driver_api.hpp"

namespace moejit {

namespace {
CUcontext ctx_of(void* p) { return static_cast<CUcontext>(p); }

// The allocation belongs to the context it was made in; a layer's buffers are often released by a
// thread that has another context current, or none.
void release(DevicePtr ptr, void* ctx) noexcept {
  if (!ptr) return;
  detail::ScopedContext in(ctx_of(ctx), std::nothrow);
  detail::report_cleanup(detail::driver().cuMemFree(static_cast<CUdeviceptr>(ptr)), "cuMemFree");
}

// The range [offset, offset + bytes) lies inside a buffer of `size` bytes; written so that no sum can wrap.
bool in_range(size_t offset, size_t bytes, size_t size) { return bytes <= size && offset <= size - bytes; }
}  // namespace

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  CUcontext ctx = detail::ensure_context();
  CUdeviceptr p = 0;
  detail::check(detail::driver().cuMemAlloc(&p, bytes ? bytes : 1), "cuMemAlloc");
  ptr_ = p;
  ctx_ = ctx;
}

DeviceBuffer::~DeviceBuffer() { release(ptr_, ctx_); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_), ctx_(o.ctx_) {
  o.ptr_ = 0;
  o.bytes_ = 0;
  o.ctx_ = nullptr;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release(ptr_, ctx_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    ctx_ = o.ctx_;
    o.ptr_ = 0;
    o.bytes_ = 0;
    o.ctx_ = nullptr;
  }
  return *this;
}

void DeviceBuffer::upload(const void* src, size_t bytes, size_t offset) {
  if (!in_range(offset, bytes, bytes_))
    throw Error(fmt::format("DeviceBuffer::upload: {} bytes at offset {} exceed the buffer's {}", bytes, offset, bytes_));
  if (!bytes) return;
  detail::ScopedContext in(ctx_of(ctx_));
  detail::check(detail::driver().cuMemcpyHtoD(ptr_ + offset, src, bytes), "cuMemcpyHtoD");
  in.restore();
}

void DeviceBuffer::download(void* dst, size_t bytes, size_t offset) const {
  if (!in_range(offset, bytes, bytes_))
    throw Error(fmt::format("DeviceBuffer::download: {} bytes at offset {} exceed the buffer's {}", bytes, offset, bytes_));
  if (!bytes) return;
  detail::ScopedContext in(ctx_of(ctx_));
  detail::check(detail::driver().cuMemcpyDtoH(dst, ptr_ + offset, bytes), "cuMemcpyDtoH");
  in.restore();
}

void DeviceBuffer::fill_bytes(uint8_t value) {
  if (!ptr_) return;
  detail::ScopedContext in(ctx_of(ctx_));
  detail::check(detail::driver().cuMemsetD8(ptr_, value, bytes_), "cuMemsetD8");
  in.restore();
}

bool gpu_available(std::string* why) { return detail::driver_available(why); }

}  // namespace moejit
