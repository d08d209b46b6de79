// What the CLI knows of this machine's GPU, asked in a short-lived child process.
//
// Why a child: initializing the CUDA driver starts its threads, and prewarm forks its NVRTC workers
// afterwards; a fork of a multithreaded process may leave a lock held by a thread that does not exist
// in the child. So the CLI process itself touches the driver only after its workers are running.
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <string>

#include "cli_common.hpp"
#include "moejit/error.hpp"
#include "moejit/runtime.hpp"

namespace moejit::cli {

namespace {

// One answer per line: "ok" then name, major, minor, SMs, driver version; or "none" then why.
std::string answer_here() {
  std::string why;
  try {
    if (!gpu_available(&why)) return "none\n" + why;
    const DeviceInfo d = query_device(0);
    return fmt::format("ok\n{}\n{}\n{}\n{}\n{}\n", d.name, d.cc_major, d.cc_minor, d.sm_count, d.driver_version);
  } catch (const std::exception& e) {
    return std::string("none\n") + e.what();
  }
}

GpuProbe parse_answer(const std::string& text) {
  GpuProbe p;
  std::istringstream in(text);
  std::string status;
  std::getline(in, status);
  if (status != "ok") {
    std::getline(in, p.why);
    if (p.why.empty()) p.why = "the GPU probe gave no answer";
    return p;
  }
  std::getline(in, p.info.name);
  if (!(in >> p.info.cc_major >> p.info.cc_minor >> p.info.sm_count >> p.info.driver_version)) {
    p.why = "the GPU probe's answer was malformed";
    return p;
  }
  p.present = true;
  p.info.arch = arch_for_capability(p.info.cc_major, p.info.cc_minor);
  if (!p.info.arch)
    p.why = fmt::format("GPU {} has compute capability {}.{}, which moejit does not build for ({})",
                        p.info.name, p.info.cc_major, p.info.cc_minor, arch_names());
  return p;
}

GpuProbe probe_in_child() {
  int fds[2];
  if (::pipe(fds) != 0) return parse_answer(answer_here());
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return parse_answer(answer_here());
  }
  if (pid == 0) {
    ::close(fds[0]);
    const std::string a = answer_here();
    size_t off = 0;
    while (off < a.size()) {
      const ssize_t n = ::write(fds[1], a.data() + off, a.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buf[512];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) {
      text.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    GpuProbe p;
    p.why = fmt::format("the GPU probe process died with signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
    return p;
  }
  return parse_answer(text);
}

}  // namespace

const GpuProbe& gpu_probe() {
  static const GpuProbe probe = probe_in_child();
  return probe;
}

}  // namespace moejit::cli
