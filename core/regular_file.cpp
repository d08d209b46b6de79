// Non-blocking, type-checked opening of files (see regular_file.hpp).
#include "core/regular_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

namespace moejit::detail {

const char* file_type_name(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

Fd open_regular_file(int dir_fd, const std::string& name, bool follow_symlinks, struct stat* st) {
  const int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (follow_symlinks ? 0 : O_NOFOLLOW);
  Fd fd(::openat(dir_fd, name.c_str(), flags));
  if (!fd) {
    if (errno == ELOOP && !follow_symlinks)
      throw FsError(fmt::format("{} is a symbolic link, not a regular file", name), ELOOP, FsError::Plain{});
    throw FsError(fmt::format("cannot open {}", name), errno);
  }
  if (::fstat(fd.get(), st) != 0) throw FsError(fmt::format("cannot stat {}", name), errno);
  if (!S_ISREG(st->st_mode))
    throw FsError(fmt::format("{} is {}, not a regular file", name, file_type_name(st->st_mode)), EINVAL,
                  FsError::Plain{});
  // A regular file never blocks, but clear the flag anyway: reads then behave as everywhere else.
  const int fl = ::fcntl(fd.get(), F_GETFL);
  if (fl < 0 || ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK) != 0)
    throw FsError(fmt::format("cannot set {} to blocking reads", name), errno);
  return fd;
}

void read_exact_at(int fd, std::uint64_t offset, void* dst, std::size_t size, const std::string& name) {
  char* p = static_cast<char*>(dst);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw FsError(fmt::format("cannot read {}", name), errno);
    }
    if (n == 0) throw FsError(fmt::format("{} ended early (was it truncated while being read?)", name), EIO, FsError::Plain{});
    p += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
}

std::vector<char> read_regular_file(int dir_fd, const std::string& name, std::size_t max_size, bool follow_symlinks,
                                    struct stat* st) {
  Fd fd = open_regular_file(dir_fd, name, follow_symlinks, st);
  if (static_cast<std::uint64_t>(st->st_size) > max_size)
    throw FsError(fmt::format("{} has {} bytes, more than the {} accepted", name, st->st_size, max_size), EFBIG,
                  FsError::Plain{});
  std::vector<char> data(static_cast<std::size_t>(st->st_size));
  std::size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = ::read(fd.get(), data.data() + got, data.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw FsError(fmt::format("cannot read {}", name), errno);
    }
    if (n == 0) break;  // shrank underneath us; callers check sizes and checksums
    got += static_cast<std::size_t>(n);
  }
  data.resize(got);
  return data;
}

}  // namespace moejit::detail
