#pragma once
// Opening files that something else may have replaced: a FIFO, a device or a directory where a regular
// file is expected must be an error, never a reader blocked forever in open() or read().
//
// open() of a FIFO without a writer blocks, so files are opened with O_NONBLOCK, checked with fstat (on
// the descriptor: no window between check and use), and switched back to blocking reads only once they
// are known to be regular files. Used for cache entries (never following a symlink), and for the files a
// user names (layers, inputs, model configs; a symlink to a regular file is fine there).
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/fs.hpp"

namespace moejit::detail {

// "a FIFO", "a directory", "a character device", ...: what a non-regular file is, for messages.
const char* file_type_name(mode_t mode);

// Opens name (relative to dir_fd; AT_FDCWD for a plain path) read-only; st receives its fstat. Throws
// FsError: ELOOP for a symlink when !follow_symlinks, EINVAL "<name> is a FIFO, not a regular file" for
// anything but a regular file, or open's own errno.
Fd open_regular_file(int dir_fd, const std::string& name, bool follow_symlinks, struct stat* st);

// Reads exactly size bytes at offset; throws FsError (EIO) when the file ends first (it shrank).
void read_exact_at(int fd, std::uint64_t offset, void* dst, std::size_t size, const std::string& name);

// A whole regular file, at most max_size bytes (EFBIG beyond: read nothing). Throws FsError.
std::vector<char> read_regular_file(int dir_fd, const std::string& name, std::size_t max_size, bool follow_symlinks,
                                    struct stat* st);

}  // namespace moejit::detail
