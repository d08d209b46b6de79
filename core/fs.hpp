#pragma once
// POSIX file-system helpers for the cubin cache: private directories, durable writes, trust checks.
// Everything reports failures as FsError carrying errno, because the cache decides between
// "degrade to memory" (ENOSPC, EROFS, EACCES, ...), "lost a race" (EEXIST, ENOENT) and "damaged entry"
// from the error number, never from message text.
#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace moejit::detail {

class FsError : public std::runtime_error {
 public:
  FsError(const std::string& what, int err);  // what() is "<what>: <strerror(err)>"
  struct Plain {};
  FsError(const std::string& what, int err, Plain) : std::runtime_error(what), err_(err) {}  // what() is <what>
  int err() const { return err_; }

 private:
  int err_;
};

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() { int f = fd_; fd_ = -1; return f; }

 private:
  int fd_ = -1;
};

// mkdir -p with mode 0700 for every directory it creates (existing ones are left as they are).
// Throws FsError (ENOTDIR when a path component is not a directory).
void make_private_dirs(const std::string& path);
// Creates dir/name exclusively (0600), writes data, fsyncs and closes, checking every step.
void write_file_durable(int dir_fd, const std::string& name, const void* data, std::size_t size);
// fsync of a directory, so a rename or a new file inside it survives a crash.
void fsync_dir(const std::string& path);
// Reads a whole regular file opened relative to dir_fd without following symlinks and without blocking
// on a FIFO or device (EINVAL: not a regular file); max_size guards against absurd files (EFBIG). st
// receives the file's stat. Throws FsError.
std::vector<char> read_file_at(int dir_fd, const std::string& name, std::size_t max_size, struct stat* st);
// Opens a directory without following a symlink at its last component. Throws FsError.
Fd open_dir(const std::string& path);

// Other users cannot modify it: owned by us (or by root, who can write anything anyway) and neither
// group- nor world-writable. An empty string means trusted; otherwise the reason.
std::string untrusted_reason(const struct stat& st);

// rm -rf that never follows symlinks (not even at path itself: a symlink is unlinked, its target left
// alone) and ignores entries that vanish concurrently; returns false when something could not be removed.
bool remove_tree(const std::string& path);
// Sorted names in a directory (no "." and ".."), opened without following a symlink at path itself;
// empty when it cannot be opened (missing, a symlink, not a directory).
std::vector<std::string> dir_names_nofollow(const std::string& path);

// "20250131T235959.123456789Z": sortable UTC time stamp for quarantine names and manifests.
std::string utc_stamp(bool with_nanos);

}  // namespace moejit::detail
