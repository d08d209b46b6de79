// `moejit prewarm`: compile every kernel a config needs into the on-disk cache, in parallel worker
// processes. NVRTC serializes compiles inside one process, so one process per core is what scales.
//
// Protocol: the parent holds two pipes per worker. It writes one key index per line; the worker
// compiles (or finds) that key with its own KernelCache and answers one line:
//   "ok <index> <compiled 0|1> <degraded 0|1> <seconds>"  or  "err <index> <message>".
// When the parent closes a worker's request pipe the worker exits. A worker that dies mid-key is a
// failure of that key, never a hang.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "moejit/error.hpp"
#include "moejit/kernel_cache.hpp"
#include "tools/cli_common.hpp"

namespace moejit::cli {

namespace {

bool write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  if (s.size() > 2000) s.resize(2000);
  return s;
}

[[noreturn]] void worker_main(const std::vector<KernelKey>& keys, int in_fd, int out_fd) {
  CacheOptions opts;
  opts.quiet = true;  // the parent reports degradation once
  std::string line_buf;
  try {
    KernelCache cache(opts);
    char buf[256];
    for (;;) {
      size_t nl;
      while ((nl = line_buf.find('\n')) == std::string::npos) {
        ssize_t n = ::read(in_fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) ::_exit(0);  // parent closed the pipe: no more work
        line_buf.append(buf, static_cast<size_t>(n));
      }
      const int index = std::stoi(line_buf.substr(0, nl));
      line_buf.erase(0, nl + 1);
      std::string reply;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        const auto before = cache.compiles();
        (void)cache.get(keys.at(static_cast<size_t>(index)));
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        reply = fmt::format("ok {} {} {} {:.3f}\n", index, cache.compiles() > before ? 1 : 0, cache.degraded() ? 1 : 0, s);
      } catch (const std::exception& e) {
        reply = fmt::format("err {} {}\n", index, one_line(e.what()));
      }
      if (!write_all(out_fd, reply)) ::_exit(3);
    }
  } catch (const std::exception& e) {
    (void)write_all(out_fd, fmt::format("fatal {}\n", one_line(e.what())));
    ::_exit(4);
  }
}

struct Worker {
  pid_t pid = -1;
  int to = -1;    // parent writes key indices
  int from = -1;  // parent reads replies
  int current = -1;  // key index in flight, -1 when idle
  std::string buf;
};

}  // namespace

std::vector<KernelKey> prewarm_keys(const LayerSpec& spec, Arch arch, int max_tokens, int sm_count, Family force,
                                    const TuningOverrides& tuning) {
  std::vector<KernelKey> keys = keys_for_range(spec, arch, max_tokens, sm_count, force, tuning);
  KernelKey prep;
  prep.kind = KernelKind::prepare;
  prep.arch = arch;
  prep = prep.normalized();
  if (std::find(keys.begin(), keys.end(), prep) == keys.end()) keys.insert(keys.begin(), prep);
  return keys;
}

PrewarmSummary parallel_prewarm(const std::vector<KernelKey>& keys, int jobs, bool progress) {
  PrewarmSummary sum;
  sum.total = static_cast<int>(keys.size());
  const auto t0 = std::chrono::steady_clock::now();
  if (keys.empty()) return sum;
  const int n_workers = std::max(1, std::min<int>(jobs, static_cast<int>(keys.size())));
  sum.workers = n_workers;

  // A worker that died must not kill us with SIGPIPE when we hand it the next key.
  struct sigaction ignore {}, old_pipe {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old_pipe);

  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<Worker> workers;
  for (int w = 0; w < n_workers; ++w) {
    int req[2], rep[2];
    if (::pipe2(req, O_CLOEXEC) != 0 || ::pipe2(rep, O_CLOEXEC) != 0)
      throw Error(fmt::format("prewarm: pipe failed: {}", std::strerror(errno)));
    pid_t pid = ::fork();
    if (pid < 0) throw Error(fmt::format("prewarm: fork failed: {}", std::strerror(errno)));
    if (pid == 0) {
      // Close every parent-side end, including earlier workers', so each worker sees EOF when the
      // parent closes its request pipe.
      for (auto& o : workers) {
        ::close(o.to);
        ::close(o.from);
      }
      ::close(req[1]);
      ::close(rep[0]);
      worker_main(keys, req[0], rep[1]);
    }
    ::close(req[0]);
    ::close(rep[1]);
    Worker wk;
    wk.pid = pid;
    wk.to = req[1];
    wk.from = rep[0];
    workers.push_back(wk);
  }

  size_t next = 0;
  int done = 0;
  size_t last_len = 0;
  auto draw = [&](const std::string& key) {
    if (!progress) return;
    std::string line = fmt::format("\r[{}/{}] {}", done, keys.size(), key);
    const size_t len = line.size();
    if (len < last_len) line += std::string(last_len - len, ' ');
    last_len = len;
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  };
  auto hand_out = [&](Worker& w) {
    if (next < keys.size()) {
      const int idx = static_cast<int>(next++);
      if (write_all(w.to, fmt::format("{}\n", idx))) {
        w.current = idx;
        return;
      }
      --next;  // the worker is gone; another one will take this key
    }
    if (w.to >= 0) ::close(w.to);
    w.to = -1;
    w.current = -1;
  };
  auto fail = [&](int idx, const std::string& why) {
    ++sum.failed;
    ++done;
    sum.failures.push_back(fmt::format("{}: {}", keys[static_cast<size_t>(idx)].str(), why));
  };

  for (auto& w : workers) hand_out(w);
  draw("");
  int open = n_workers;
  while (open > 0) {
    std::vector<pollfd> fds;
    std::vector<Worker*> who;
    for (auto& w : workers)
      if (w.from >= 0) {
        fds.push_back({w.from, POLLIN, 0});
        who.push_back(&w);
      }
    int r = ::poll(fds.data(), fds.size(), -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("prewarm: poll failed: {}", std::strerror(errno)));
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Worker& w = *who[i];
      char buf[4096];
      ssize_t n = ::read(w.from, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        // EOF: the worker exited. A key still in flight failed with it.
        if (w.current >= 0) {
          int status = 0;
          ::waitpid(w.pid, &status, 0);
          w.pid = -1;
          fail(w.current, WIFSIGNALED(status) ? fmt::format("worker crashed (signal {})", WTERMSIG(status))
                                              : fmt::format("worker exited ({})", WEXITSTATUS(status)));
          w.current = -1;
        }
        if (w.to >= 0) ::close(w.to);
        w.to = -1;
        ::close(w.from);
        w.from = -1;
        --open;
        continue;
      }
      w.buf.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = w.buf.find('\n')) != std::string::npos) {
        std::string line = w.buf.substr(0, nl);
        w.buf.erase(0, nl + 1);
        int idx = -1, compiled = 0, degraded = 0;
        double secs = 0;
        char word[8] = {};
        if (std::sscanf(line.c_str(), "%7s %d", word, &idx) < 1) continue;
        if (std::strcmp(word, "ok") == 0 &&
            std::sscanf(line.c_str(), "ok %d %d %d %lf", &idx, &compiled, &degraded, &secs) == 4) {
          ++done;
          (compiled ? sum.compiled : sum.cached)++;
          sum.degraded = sum.degraded || degraded;
        } else if (std::strcmp(word, "err") == 0) {
          auto sp = line.find(' ', 4);
          fail(idx, sp == std::string::npos ? "failed" : line.substr(sp + 1));
        } else if (std::strcmp(word, "fatal") == 0) {
          // The worker could not even open its cache and exits; its key fails with that message.
          if (w.current >= 0) fail(w.current, "worker: " + line.substr(std::min<size_t>(6, line.size())));
          w.current = -1;
          continue;
        }
        if (idx >= 0 && static_cast<size_t>(idx) < keys.size()) draw(keys[static_cast<size_t>(idx)].str());
        hand_out(w);
      }
    }
  }
  // Keys never handed out (every worker died) are failures too.
  while (next < keys.size()) fail(static_cast<int>(next++), "no worker left to compile it");
  for (auto& w : workers)
    if (w.pid > 0) {
      int status = 0;
      ::waitpid(w.pid, &status, 0);
    }
  ::sigaction(SIGPIPE, &old_pipe, nullptr);
  if (progress) {
    draw("");
    std::fputs("\n", stderr);
  }
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

void print_prewarm_summary(const PrewarmSummary& s, const std::string& what) {
  fmt::print("prewarm {}: {} kernels: {} compiled, {} already cached{} in {:.1f} s ({} worker process{})\n", what,
             s.total, s.compiled, s.cached, s.failed ? fmt::format(", {} FAILED", s.failed) : "", s.seconds,
             s.workers, s.workers == 1 ? "" : "es");
  for (const auto& f : s.failures) fmt::print(stderr, "  failed: {}\n", f);
  if (s.degraded)
    fmt::print(stderr,
               "moejit prewarm: the cache directory could not be written; kernels were compiled in memory only and "
               "nothing was persisted (check permissions and free space of the cache root)\n");
  std::fflush(stdout);
}

int cmd_prewarm(int argc, char** argv) {
  static const CommandSpec spec = with_checkpoint_options(CommandSpec{
      "prewarm",
      "--config NAME|PATH [--arch ARCH] [--max-tokens N] [--jobs N] [--sm-count N] [--scales plain|csf|both]\n"
      "      [--precision P]",
      "compile and cache every kernel a model config needs",
      "Compiles every kernel a layer of the config (its local TP/EP slice) needs for 1..max-tokens tokens, plus\n"
      "the architecture's weight-repack kernel, into the on-disk cache ($MOEJIT_CACHE_DIR, else\n"
      "$XDG_CACHE_HOME/moejit, else ~/.cache/moejit), in parallel worker processes. Kernels already cached are\n"
      "verified and kept. Works without a GPU when --arch is given; without --arch the GPU's architecture is used.\n"
      "Exits 1 if any kernel fails to compile or the cache could not be written; 2, before compiling anything,\n"
      "when the cache root cannot be written at all (missing volume behind a symlink, read-only, untrusted).",
      {{"config", "NAME|PATH", "bundled config name or JSON file (default: " + default_config_name() + ")"},
       {"arch", "ARCH", "sm_90a, sm_100a, sm_120a or sm_121a (default: the GPU's; required without a GPU)"},
       {"max-tokens", "N", "largest token count M to cover (default 64)"},
       {"precision", "P", "activation precision a16, a8 or a4 (default: the config's, else a16)"},
       {"jobs", "N", "worker processes (default: number of CPUs)"},
       {"sm-count", "N", "SM count the planner assumes (default: the GPU's, else the architecture's usual GPU: 132 sm_90a, 148 sm_100a, 188 sm_120a, 48 sm_121a)"},
       {"scales", "S", "plain (default): the kernels of plain scale reads; csf: the kernels of layers prepared from CSF "
                       "layer files (docs/CSF.md): decode kernels reading CSF, batch and prefill kernels reading "
                       "plain (the default) or CSF scale planes (ScaleReads::compact); both: both sets"},
       {"quiet", "", "no progress line"}},
      {}}, false, "[--arch ARCH] [--max-tokens N] [--jobs N]");
  Args args(spec, argc, argv, 2);
  if (args.help()) {
    std::fputs(help_text(spec).c_str(), stdout);
    return kExitOk;
  }
  const ModelConfig cfg = config_from_args(args);
  const int max_tokens = args.integer("max-tokens", 64, 1, kMaxTokens);
  const std::string scales = args.str("scales", "plain");
  if (scales != "plain" && scales != "csf" && scales != "both")
    throw UsageError(fmt::format("--scales must be plain, csf or both, got '{}'", scales));
  const int ncpu = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int jobs = args.integer("jobs", ncpu, 1, 1024);
  std::string note;
  const Arch arch = arch_from_args(args, std::nullopt, &note);
  std::string sm_note;
  const int sms = sm_count_from_args(args, arch, &sm_note);
  if (!sm_note.empty()) fmt::print(stderr, "moejit prewarm: note: planning for {} SMs, {}\n", sms, sm_note);
  LayerSpec local = cfg.local();
  local.precision = precision_from_args(args, local.precision);
  const std::vector<KernelKey> plain_keys =
      prewarm_keys(local, arch, max_tokens, sms, Family::automatic, TuningOverrides::from_environment());
  // A layer reads either plane or both as CSF (PreparedLayer::csf_scales), which only the cooperative
  // kernel's key tells apart: every mask, without duplicates; its batch and prefill kernels read the plain
  // planes (prepare's default) or the same CSF planes (ScaleReads::compact): both.
  std::vector<KernelKey> keys = scales == "csf" ? std::vector<KernelKey>{} : plain_keys;
  if (scales != "plain")
    for (int mask : {1, 2, 3})
      for (int batched : {0, mask})
        for (const KernelKey& k : with_csf_scales(plain_keys, mask, batched))
          if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  if (env_flag("MOEJIT_NO_JIT")) {
    // Servers run with MOEJIT_NO_JIT=1 so that they never compile; prewarm is how their cache gets filled.
    fmt::print(stderr, "moejit prewarm: note: ignoring MOEJIT_NO_JIT={} (prewarm compiles what is missing)\n",
               std::getenv("MOEJIT_NO_JIT"));
    ::unsetenv("MOEJIT_NO_JIT");
  }
  {
    // Prewarm exists to fill the cache: one it cannot write (a root that is a dangling symlink to an
    // unmounted volume, a file, read-only, untrusted) is an error up front, not kernels compiled for nothing.
    KernelCache probe;
    if (auto why = probe.check_writable(); !why.empty())
      throw Error(fmt::format("the kernel cache at {} cannot be written: {}", probe.root().empty() ? "<none>" : probe.root(), why));
  }
  fmt::print("prewarm {} ({}) for {}, M 1..{}: {} kernels, cache {}\n", cfg.name, describe_spec(local),
             note.empty() ? std::string(to_string(arch)) : note, max_tokens, keys.size(), KernelCache::resolve_root(""));
  std::fflush(stdout);
  const PrewarmSummary s = parallel_prewarm(keys, jobs, !args.has("quiet"));
  print_prewarm_summary(s, fmt::format("{} {}", cfg.name, to_string(arch)));
  return s.failed || s.degraded ? kExitFailed : kExitOk;
}

}  // namespace moejit::cli
