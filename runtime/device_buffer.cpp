// DeviceBuffer: owning device allocation for tools and tests.
#include <fmt/format.h>

#include "moejit/error.hpp"
#include "moejit/runtime.hpp"
#include "runtime/context.hpp"
#include "runtime/driver_api.hpp"

namespace moejit {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  detail::ensure_context();
  CUdeviceptr p = 0;
  detail::check(detail::driver().cuMemAlloc(&p, bytes ? bytes : 1), "cuMemAlloc");
  ptr_ = p;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) detail::driver().cuMemFree(static_cast<CUdeviceptr>(ptr_));
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = 0;
  o.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) detail::driver().cuMemFree(static_cast<CUdeviceptr>(ptr_));
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = 0;
    o.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::upload(const void* src, size_t bytes, size_t offset) {
  if (offset + bytes > bytes_)
    throw Error(fmt::format("DeviceBuffer::upload: {} bytes at offset {} exceed the buffer's {}", bytes, offset, bytes_));
  detail::ensure_context();
  detail::check(detail::driver().cuMemcpyHtoD(ptr_ + offset, src, bytes), "cuMemcpyHtoD");
}

void DeviceBuffer::download(void* dst, size_t bytes, size_t offset) const {
  if (offset + bytes > bytes_)
    throw Error(fmt::format("DeviceBuffer::download: {} bytes at offset {} exceed the buffer's {}", bytes, offset, bytes_));
  detail::ensure_context();
  detail::check(detail::driver().cuMemcpyDtoH(dst, ptr_ + offset, bytes), "cuMemcpyDtoH");
}

void DeviceBuffer::fill_bytes(uint8_t value) {
  detail::ensure_context();
  detail::check(detail::driver().cuMemsetD8(ptr_, value, bytes_), "cuMemsetD8");
}

bool gpu_available(std::string* why) { return detail::driver_available(why); }

}  // namespace moejit
