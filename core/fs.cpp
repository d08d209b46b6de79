// POSIX helpers for the cubin cache (see fs.hpp). Raw syscalls rather than std::filesystem because the
// cache needs O_NOFOLLOW/O_EXCL, fsync of files and directories, and the exact errno of each failure.
#include "core/fs.hpp"

#include "core/regular_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

namespace moejit::detail {

FsError::FsError(const std::string& what, int err)
    : std::runtime_error(fmt::format("{}: {}", what, std::strerror(err))), err_(err) {}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

void make_private_dirs(const std::string& path) {
  if (path.empty()) throw FsError("empty cache path", ENOENT);
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) throw FsError(fmt::format("{} is not a directory", path), ENOTDIR);
    return;
  }
  if (errno == ENOTDIR) {
    // Some component above is a file: name it ("<root> is not a directory") rather than the leaf.
    const int err = errno;
    auto slash = path.find_last_of('/');
    if (slash != std::string::npos && slash > 0) make_private_dirs(path.substr(0, slash));
    throw FsError(fmt::format("cannot stat {}", path), err);
  }
  if (errno != ENOENT) throw FsError(fmt::format("cannot stat {}", path), errno);
  // A symlink to nothing (an unmounted volume): mkdir would fail with EEXIST and stat with ENOENT, which
  // reads like a directory removed concurrently. Say what it is instead, so the cache degrades loudly.
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
    throw FsError(fmt::format("{} is a symbolic link whose target does not exist", path), ENOTDIR, FsError::Plain{});
  auto slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) make_private_dirs(path.substr(0, slash));
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
    throw FsError(fmt::format("cannot create directory {}", path), errno);
  // EEXIST: created concurrently by another thread or process; it must still be a directory.
  if (::stat(path.c_str(), &st) != 0) throw FsError(fmt::format("cannot stat {}", path), errno);
  if (!S_ISDIR(st.st_mode)) throw FsError(fmt::format("{} is not a directory", path), ENOTDIR);
}

void write_file_durable(int dir_fd, const std::string& name, const void* data, std::size_t size) {
  Fd fd(::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) throw FsError(fmt::format("cannot create {}", name), errno);
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd.get(), p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw FsError(fmt::format("cannot write {}", name), errno);
    }
    p += n;
    size -= std::size_t(n);
  }
  if (::fsync(fd.get()) != 0) throw FsError(fmt::format("cannot fsync {}", name), errno);
  // close() can report a deferred write error (NFS, quota): check it instead of letting ~Fd drop it.
  if (::close(fd.release()) != 0) throw FsError(fmt::format("cannot close {}", name), errno);
}

void fsync_dir(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) throw FsError(fmt::format("cannot open directory {}", path), errno);
  // Some file systems refuse fsync on directories (EINVAL); the data is as durable as it gets there.
  if (::fsync(fd.get()) != 0 && errno != EINVAL)
    throw FsError(fmt::format("cannot fsync directory {}", path), errno);
}

std::vector<char> read_file_at(int dir_fd, const std::string& name, std::size_t max_size, struct stat* st) {
  // Never follows a symlink, never blocks on a FIFO or device (regular_file.cpp).
  return read_regular_file(dir_fd, name, max_size, /*follow_symlinks=*/false, st);
}

Fd open_dir(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) throw FsError(fmt::format("cannot open directory {}", path), errno);
  return fd;
}

std::string untrusted_reason(const struct stat& st) {
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    return fmt::format("owned by another user (uid {})", st.st_uid);
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return fmt::format("writable by {} (mode {:04o})", (st.st_mode & S_IWOTH) ? "all users" : "its group",
                       st.st_mode & 07777);
  return {};
}

std::vector<std::string> dir_names_nofollow(const std::string& path) {
  std::vector<std::string> names;
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return names;
  DIR* d = ::fdopendir(fd.get());
  if (!d) return names;
  fd.release();  // closedir closes it
  while (struct dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

// rm -rf of parent_fd/name. Every step is relative to a descriptor of the directory already opened
// without following a link, so a directory swapped for a symlink midway is unlinked, never entered.
bool remove_tree_at(int parent_fd, const std::string& name) {
  struct stat st;
  if (::fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT;
  if (!S_ISDIR(st.st_mode)) return ::unlinkat(parent_fd, name.c_str(), 0) == 0 || errno == ENOENT;
  Fd fd(::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    if (errno == ENOENT) return true;
    if (errno == ENOTDIR || errno == ELOOP) return ::unlinkat(parent_fd, name.c_str(), 0) == 0 || errno == ENOENT;
    return false;
  }
  bool ok = true;
  std::vector<std::string> names;
  const int list_fd = ::dup(fd.get());
  DIR* d = list_fd >= 0 ? ::fdopendir(list_fd) : nullptr;
  if (d) {
    while (struct dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
    }
    ::closedir(d);
  } else {
    if (list_fd >= 0) ::close(list_fd);
    ok = false;
  }
  for (const auto& n : names) ok = remove_tree_at(fd.get(), n) && ok;
  return (::unlinkat(parent_fd, name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) && ok;
}

}  // namespace

bool remove_tree(const std::string& path) { return remove_tree_at(AT_FDCWD, path); }

std::string utc_stamp(bool with_nanos) {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  ::gmtime_r(&ts.tv_sec, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%S", &tm);
  return with_nanos ? fmt::format("{}.{:09d}Z", buf, ts.tv_nsec) : fmt::format("{}Z", buf);
}

}  // namespace moejit::detail
