#pragma once
// Shared by the libFuzzer targets: hands an input to the file-reading APIs as a real file.
//
// The layer, input and manifest readers take paths (they open, fstat and pread the file themselves), so
// each input is written to a memfd and read back through /proc/self/fd/N: the real code path, with no
// disk writes per run.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace moejit_fuzz {

class MemFile {
 public:
  MemFile() : fd_(::memfd_create("moejit-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) std::abort();
  }
  ~MemFile() { ::close(fd_); }
  // Replaces the contents with data and returns a path that opens this file.
  std::string hold(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
    return "/proc/self/fd/" + std::to_string(fd_);
  }

 private:
  int fd_;
};

}  // namespace moejit_fuzz
