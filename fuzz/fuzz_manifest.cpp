// libFuzzer target: the cache-entry reader (detail::read_entry: manifest.json, then kernel.cubin) on a
// real entry directory. Whatever the manifest holds, the read classifies the entry (ok, damaged,
// untrusted) and never throws, crashes or hangs. The expected hash is taken from the manifest's own
// "hash" field when it looks like one, so mutations of a valid seed get past the first checks.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "cache/entry.hpp"
#include "core/fs.hpp"
#include "reference/json_limits.hpp"

namespace {

void write_file(const std::string& path, const void* data, size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n <= 0) std::abort();
    p += n;
    size -= static_cast<size_t>(n);
  }
  ::close(fd);
}

// A private entry directory for this process, with a small ELF-looking cubin. In /dev/shm where there is
// one: rewriting a file on a disk-backed /tmp costs milliseconds per run, on tmpfs microseconds. libFuzzer
// may end with _Exit (no cleanup runs), so the directory is named after the process and a start removes
// those of processes that are gone.
const std::string& entry_dir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    const std::string base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (tmp && *tmp ? tmp : "/tmp");
    const std::string prefix = "moejit-fuzz-entry-";
    for (const std::string& name : moejit::detail::dir_names_nofollow(base)) {
      if (name.rfind(prefix, 0) != 0) continue;
      const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
        moejit::detail::remove_tree(base + "/" + name);
    }
    const std::string t = base + "/" + prefix + std::to_string(::getpid());
    moejit::detail::remove_tree(t);
    if (::mkdir(t.c_str(), 0700) != 0) std::abort();
    const std::string cubin = "\x7f" "ELF fuzz cubin";
    write_file(t + "/kernel.cubin", cubin.data(), cubin.size());
    std::atexit([] { moejit::detail::remove_tree(entry_dir()); });
    return t;
  }();
  return dir;
}

std::string expected_hash(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (!moejit::detail::json_depth_problem(text).empty()) return std::string(64, '0');
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("hash") && j["hash"].is_string()) {
    const std::string h = j["hash"].get<std::string>();
    if (h.size() == 64 && h.find_first_not_of("0123456789abcdef") == std::string::npos) return h;
  }
  return std::string(64, '0');
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = entry_dir();
  write_file(dir + "/manifest.json", data, size);
  const moejit::detail::EntryRead r = moejit::detail::read_entry(dir, expected_hash(data, size), "", "sm_90a");
  if (r.status == moejit::detail::EntryStatus::ok && r.cubin.empty()) std::abort();
  if (r.status != moejit::detail::EntryStatus::ok && r.problem.empty()) std::abort();
  return 0;
}
