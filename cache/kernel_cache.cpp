// The versioned on-disk cubin cache of DESIGN §5 (layout and guarantees are summarized in
// include/moejit/kernel_cache.hpp).
//
// get() resolves a key in three steps: the in-process map (one shared_future per key, so concurrent
// requests compile once), the disk entry (validated by cache/entry.cpp; damaged entries are
// quarantined), and finally NVRTC followed by an atomic publish. The disk is an optimization: any
// failure to write it degrades this cache to in-memory compiles with one warning, and nothing found
// on disk can make get() crash or load a cubin that does not match its key.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <strings.h>

#include <fmt/format.h>

#include "cache/entry.hpp"
#include "core/fs.hpp"
#include "moejit/compiler.hpp"
#include "moejit/error.hpp"
#include "moejit/kernel_cache.hpp"

namespace moejit {

using json = nlohmann::json;
using detail::EntryRead;
using detail::EntryStatus;
using detail::FsError;

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  return !(std::strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0 || strcasecmp(v, "no") == 0 ||
           strcasecmp(v, "off") == 0);
}

namespace {

using Ptr = std::shared_ptr<const CachedKernel>;

// Temp directories live only between mkdtemp and rename (milliseconds); anything older is a leftover of
// a crashed process. The margin keeps gc from pulling a directory out from under a slow publisher.
constexpr auto kTempMaxAge = std::chrono::minutes(10);

// Prints `message` once per process for `topic`: a server that cannot write its cache says so once,
// not once per kernel (nor once per KernelCache instance).
// A quiet instance does not use up the warning a later, non-quiet one owes its user.
void warn_once(const std::string& topic, const std::string& message, bool quiet) {
  static std::mutex mu;
  static std::set<std::string> seen;
  if (quiet) return;
  {
    std::lock_guard lock(mu);
    if (!seen.insert(topic).second) return;
  }
  std::fprintf(stderr, "moejit: warning: %s\n", message.c_str());
}

// NVRTC output for one entry hash, compiled once per process however many KernelCache instances ask at
// the same time (a server with a Runtime per GPU asks each for the same keys at startup). Only compiles
// in flight are shared: a later request reads the entry the first one published, or compiles again where
// it cannot (a cache in memory only), so a cache's own compile count and damage handling are unchanged.
// The hash covers the source text, options and compiler, so equal hashes are the same cubin.
CompileOutput compile_once(const std::string& hash, const GeneratedSource& src, Arch arch, bool& compiled_here) {
  static std::mutex mu;
  static std::map<std::string, std::shared_future<std::shared_ptr<const CompileOutput>>> in_flight;
  std::promise<std::shared_ptr<const CompileOutput>> promise;
  std::shared_future<std::shared_ptr<const CompileOutput>> pending;
  {
    std::lock_guard lock(mu);
    if (auto it = in_flight.find(hash); it != in_flight.end())
      pending = it->second;
    else
      in_flight.emplace(hash, promise.get_future().share());
  }
  compiled_here = !pending.valid();
  if (pending.valid()) return *pending.get();  // rethrows that compile's error
  try {
    auto out = std::make_shared<const CompileOutput>(compile_source(src, arch));
    {
      std::lock_guard lock(mu);
      in_flight.erase(hash);
    }
    promise.set_value(out);
    return *out;
  } catch (...) {
    {
      std::lock_guard lock(mu);
      in_flight.erase(hash);
    }
    promise.set_exception(std::current_exception());
    throw;
  }
}

void warn(const std::string& message, bool quiet) {
  if (!quiet) std::fprintf(stderr, "moejit: warning: %s\n", message.c_str());
}

// Names in a directory, excluding "." and ".."; empty when it cannot be read. Follows a symlink as reads
// do (list and verify see what get() would read); gc and clear list with detail::dir_names_nofollow.
std::vector<std::string> dir_names(const std::string& path) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(path.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool is_special_dir(const std::string& name) { return name == "tmp" || name == "quarantine"; }

}  // namespace

struct KernelCache::State {
  CacheOptions options;
  std::string root;        // "" when no location could be determined
  std::string schema_dir;  // <root>/v<schema>
  bool no_jit = false;

  std::mutex mu;
  std::map<std::string, std::shared_future<Ptr>> memory;  // canonical key -> kernel (or compile in flight)
  std::atomic<bool> degraded{false};
  std::atomic<std::uint64_t> compiles{0};

  GeneratedSource source_for(const KernelKey& k) const {
    GeneratedSource src = options.source ? options.source(k) : generate_source(k);
    if (src.entry.empty()) src.entry = k.entry_name();
    if (src.name.empty()) src.name = src.entry + ".cu";
    return src;
  }

  std::string arch_dir(Arch arch) const { return schema_dir + "/" + std::string(to_string(arch)); }

  void degrade(const std::string& why) {
    degraded = true;
    warn_once("degraded:" + root,
              fmt::format("the kernel cache at {} cannot be used ({}); kernels are compiled in memory only",
                          root.empty() ? std::string("<none>") : root, why),
              options.quiet);
  }

  // The directories above an entry must be private too, or whoever can write them can swap entries.
  // Returns "" when usable; the reason otherwise. Missing directories are fine (nothing to trust yet).
  // Reads, writes and `verify` all decide through this one function, so they agree on what is refused.
  static std::string chain_problem(const std::vector<std::string>& dirs) {
    for (const std::string& d : dirs) {
      struct stat st;
      if (::stat(d.c_str(), &st) != 0) {
        if (errno == ENOENT) continue;
        return fmt::format("cannot stat {}: {}", d, std::strerror(errno));
      }
      if (!S_ISDIR(st.st_mode)) return fmt::format("{} is not a directory", d);
      if (auto why = detail::untrusted_reason(st); !why.empty()) return fmt::format("{} is {}", d, why);
    }
    return {};
  }
  // The directories every entry depends on (root, schema, tmp), then one architecture's.
  std::string shared_dirs_problem() const { return chain_problem({root, schema_dir, schema_dir + "/tmp"}); }
  std::string untrusted_dirs(const std::string& adir) const {
    if (auto why = shared_dirs_problem(); !why.empty()) return why;
    return chain_problem({adir});
  }

  // Before gc and clear delete anything below the root: the same trust as reads and writes, and no
  // symlink followed (a link in the cache pointing elsewhere must not make clear empty its target).
  // The root itself may be a link (a cache moved to another volume); everything under it may not.
  static std::string maintained_dir_problem(const std::string& d) {
    struct stat st;
    if (::lstat(d.c_str(), &st) != 0) return errno == ENOENT ? std::string() : fmt::format("cannot stat {}: {}", d, std::strerror(errno));
    if (S_ISLNK(st.st_mode)) return fmt::format("{} is a symbolic link (cache maintenance never follows links)", d);
    if (!S_ISDIR(st.st_mode)) return fmt::format("{} is not a directory", d);
    if (auto why = detail::untrusted_reason(st); !why.empty()) return fmt::format("{} is {}", d, why);
    return {};
  }
  // gc and clear refuse to start where reads and writes refuse the cache.
  void check_maintainable(const char* action) const {
    std::string why = chain_problem({root});
    for (const std::string& d : {schema_dir, schema_dir + "/tmp"})
      if (why.empty()) why = maintained_dir_problem(d);
    if (!why.empty())
      throw Error(fmt::format("kernel cache {}: {} removes nothing: {} (reads and writes refuse this cache too)", root,
                              action, why));
  }

  // Moves the object read as `r` at path into <schema>/quarantine/<name>-<timestamp>. Only that object:
  // if another process already replaced it (different inode), theirs is left alone.
  std::string quarantine(const std::string& path, const std::string& name, const EntryRead& r) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return {};
    if (r.have_id && (st.st_dev != r.dev || st.st_ino != r.ino)) return {};
    try {
      detail::make_private_dirs(schema_dir + "/quarantine");
    } catch (const FsError&) {
      return {};
    }
    const std::string base = fmt::format("{}/quarantine/{}-{}", schema_dir, name, detail::utc_stamp(true));
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::string dest = attempt == 0 ? base : fmt::format("{}-{}", base, attempt);
      if (::rename(path.c_str(), dest.c_str()) == 0) return dest;
      if (errno != EEXIST && errno != ENOTEMPTY) return {};  // vanished, or read-only: nothing more to do
    }
    return {};
  }

  // Atomic publish: private temp dir, fsync'ed files and dir, rename to the final name. Losing the
  // rename to another process is fine: both cubins come from identical inputs.
  void publish(Arch arch, const std::string& hash, const std::vector<char>& cubin, const json& manifest) {
    if (root.empty()) {
      degrade("no cache directory: set MOEJIT_CACHE_DIR, XDG_CACHE_HOME or HOME");
      return;
    }
    std::string tmp;
    try {
      detail::make_private_dirs(schema_dir + "/tmp");
      detail::make_private_dirs(arch_dir(arch));
      if (auto why = untrusted_dirs(arch_dir(arch)); !why.empty()) {
        degrade(why);
        return;
      }
      std::string tmpl = fmt::format("{}/tmp/{}.{}.XXXXXX", schema_dir, hash, ::getpid());
      if (!::mkdtemp(tmpl.data())) throw FsError("cannot create a temporary directory in " + schema_dir + "/tmp", errno);
      tmp = tmpl;
      {
        detail::Fd dir = detail::open_dir(tmp);
        detail::write_file_durable(dir.get(), detail::kCubinFile, cubin.data(), cubin.size());
        const std::string text = manifest.dump(2) + "\n";
        detail::write_file_durable(dir.get(), detail::kManifestFile, text.data(), text.size());
        if (::fsync(dir.get()) != 0 && errno != EINVAL) throw FsError("cannot fsync " + tmp, errno);
      }
      const std::string final_dir = arch_dir(arch) + "/" + hash;
      if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
        const int err = errno;
        detail::remove_tree(tmp);
        tmp.clear();
        if (err == EEXIST || err == ENOTEMPTY) return;  // lost the race: keep our in-memory cubin
        throw FsError("cannot rename into " + final_dir, err);
      }
      tmp.clear();
      detail::fsync_dir(arch_dir(arch));
    } catch (const FsError& e) {
      if (!tmp.empty()) detail::remove_tree(tmp);
      // ENOENT: gc/clear removed our temp dir (or a parent) concurrently; this kernel stays in memory.
      if (e.err() != ENOENT) degrade(e.what());
    }
  }

  // Memory miss: disk, then (allow_compile) NVRTC. Returns null on a miss when !allow_compile.
  Ptr resolve(const KernelKey& k, const std::string& ks, bool allow_compile) {
    const GeneratedSource src = source_for(k);
    const json inputs = detail::entry_hash_inputs(k, src);
    const std::string hash = detail::entry_hash(inputs);
    const std::string arch(to_string(k.arch));
    // Why the disk had nothing usable when something was there: the warnings below may be quiet, and a
    // no-JIT server's operator must learn from the error itself that the entry exists but was refused.
    std::string rejected;

    if (!root.empty()) {
      if (auto why = untrusted_dirs(arch_dir(k.arch)); !why.empty()) {
        degrade(why);  // never read from (or write to) directories other users control
        rejected = fmt::format("the cache directories cannot be used ({}), so no entry is read from them", why);
      } else {
        const std::string dir = arch_dir(k.arch) + "/" + hash;
        EntryRead r = detail::read_entry(dir, hash, ks, arch);
        switch (r.status) {
          case EntryStatus::ok: {
            auto ck = std::make_shared<CachedKernel>();
            ck->key = k;
            ck->entry = src.entry;  // the verified hash covers it; top-level manifest fields are informational
            ck->hash = hash;
            ck->cubin = std::move(r.cubin);
            ck->manifest = std::move(r.manifest);
            ck->from_disk = true;
            return ck;
          }
          case EntryStatus::missing:
            break;
          case EntryStatus::damaged: {
            std::string dest = quarantine(dir, hash, r);
            const std::string moved = dest.empty() ? std::string() : ", moved to " + dest;
            rejected = fmt::format("the cached entry {} was rejected as damaged ({}){}", dir, r.problem, moved);
            warn(fmt::format("damaged kernel cache entry {} for {} ({}){}; rebuilding", dir, ks, r.problem, moved),
                 options.quiet);
            break;
          }
          case EntryStatus::untrusted:
            rejected = fmt::format("the cached entry {} is not trusted ({})", dir, r.problem);
            warn_once("untrusted:" + dir,
                      fmt::format("kernel cache entry {} for {} is not trusted ({}); not loading it", dir, ks,
                                  r.problem),
                      options.quiet);
            break;
        }
      }
    }
    if (!allow_compile) return nullptr;
    if (no_jit) {
      const std::string where = root.empty() ? std::string("<no cache directory>") : schema_dir;
      const std::string what =
          rejected.empty()
              ? fmt::format("kernel {} is not in the kernel cache ({}, hash {}) and JIT compilation is disabled",
                            ks, where, hash)
              : fmt::format("kernel {} has no usable entry in the kernel cache ({}, hash {}): {}; JIT compilation "
                            "is disabled, so it is not rebuilt",
                            ks, where, hash, rejected);
      throw Error(fmt::format(
          "{} (MOEJIT_NO_JIT); prewarm the cache for this model and architecture first (`moejit prewarm`)", what));
    }
    bool compiled_here = false;
    CompileOutput out = compile_once(hash, src, k.arch, compiled_here);
    if (compiled_here) ++compiles;
    auto ck = std::make_shared<CachedKernel>();
    ck->key = k;
    ck->entry = src.entry;
    ck->hash = hash;
    ck->manifest = detail::entry_manifest(inputs, hash, out);
    ck->cubin = std::move(out.binary);
    ck->from_disk = false;
    if (!degraded) publish(k.arch, hash, ck->cubin, ck->manifest);
    return ck;
  }

  struct Scanned {
    CacheEntryInfo info;
    EntryRead read;
    std::string name;
  };

  // Every object under <schema>/<arch>/, validated against its own directory name.
  std::vector<Scanned> scan() const {
    std::vector<Scanned> out;
    if (root.empty()) return out;
    for (const auto& arch : dir_names(schema_dir)) {
      if (is_special_dir(arch)) continue;
      const std::string adir = schema_dir + "/" + arch;
      struct stat st;
      if (::stat(adir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
      // Exactly what resolve() checks before it reads an entry: where it would refuse, so does this.
      const std::string chain = untrusted_dirs(adir);
      for (const auto& name : dir_names(adir)) {
        Scanned s;
        s.name = name;
        s.info.path = adir + "/" + name;
        if (!chain.empty()) {
          s.read.status = EntryStatus::untrusted;
          s.read.problem = chain;
        } else {
          s.read = detail::read_entry(s.info.path, name, "", arch);
        }
        s.info.manifest = s.read.manifest.is_object() ? s.read.manifest : json();
        s.info.valid = s.read.status == EntryStatus::ok;
        s.info.trusted = s.read.status != EntryStatus::untrusted;
        // "not trusted: ..." marks entries left in place (only damaged ones are quarantined by verify).
        s.info.problem = s.info.valid                                 ? std::string()
                         : s.read.status == EntryStatus::untrusted ? "not trusted: " + s.read.problem
                                                                   : s.read.problem;
        s.read.cubin.clear();
        s.read.cubin.shrink_to_fit();
        out.push_back(std::move(s));
      }
    }
    return out;
  }
};

KernelCache::KernelCache(CacheOptions options) : state_(std::make_shared<State>()) {
  state_->root = resolve_root(options.root);
  state_->schema_dir = state_->root.empty() ? std::string() : fmt::format("{}/v{}", state_->root, kCacheSchemaVersion);
  state_->no_jit = options.no_jit || env_flag("MOEJIT_NO_JIT");
  state_->options = std::move(options);
}

std::shared_ptr<const CachedKernel> KernelCache::get(const KernelKey& key) {
  const KernelKey k = key.normalized();
  const std::string ks = k.str();
  std::promise<Ptr> promise;
  std::shared_future<Ptr> future;
  bool owner = false;
  {
    std::lock_guard lock(state_->mu);
    auto it = state_->memory.find(ks);
    if (it != state_->memory.end()) {
      future = it->second;
    } else {
      future = promise.get_future().share();
      state_->memory.emplace(ks, future);
      owner = true;
    }
  }
  if (!owner) return future.get();  // rethrows the owner's error
  try {
    Ptr p = state_->resolve(k, ks, /*allow_compile=*/true);
    promise.set_value(p);
    return p;
  } catch (...) {
    // Forget failures so a later call retries (e.g. after a prewarm); current waiters get this error.
    {
      std::lock_guard lock(state_->mu);
      state_->memory.erase(ks);
    }
    promise.set_exception(std::current_exception());
    throw;
  }
}

bool KernelCache::contains(const KernelKey& key) {
  const KernelKey k = key.normalized();
  const std::string ks = k.str();
  {
    std::lock_guard lock(state_->mu);
    auto it = state_->memory.find(ks);
    if (it != state_->memory.end()) {
      if (it->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
      try {
        return it->second.get() != nullptr;
      } catch (...) {
        return false;
      }
    }
  }
  Ptr p = state_->resolve(k, ks, /*allow_compile=*/false);
  if (!p) return false;
  std::promise<Ptr> ready;
  ready.set_value(p);
  std::lock_guard lock(state_->mu);
  state_->memory.emplace(ks, ready.get_future().share());  // keeps an entry a concurrent get() added
  return true;
}

json KernelCache::hash_inputs(const KernelKey& key) const {
  const KernelKey k = key.normalized();
  return detail::entry_hash_inputs(k, state_->source_for(k));
}

std::string KernelCache::hash_of(const KernelKey& key) const { return detail::entry_hash(hash_inputs(key)); }

std::string KernelCache::root() const { return state_->root; }
std::string KernelCache::schema_dir() const { return state_->schema_dir; }
bool KernelCache::degraded() const { return state_->degraded; }
std::uint64_t KernelCache::compiles() const { return state_->compiles; }

std::vector<CacheEntryInfo> KernelCache::list() const {
  std::vector<CacheEntryInfo> out;
  for (auto& s : state_->scan()) out.push_back(std::move(s.info));
  return out;
}

std::vector<CacheEntryInfo> KernelCache::verify() {
  std::vector<CacheEntryInfo> out;
  for (auto& s : state_->scan()) {
    if (s.read.status == EntryStatus::damaged) {
      std::string dest = state_->quarantine(s.info.path, s.name, s.read);
      if (!dest.empty()) s.info.problem += "; moved to " + dest;
    }
    out.push_back(std::move(s.info));
  }
  return out;
}

int KernelCache::clear() {
  int removed = 0;
  if (state_->root.empty()) return 0;
  state_->check_maintainable("clear");
  const std::string& sd = state_->schema_dir;
  for (const auto& arch : detail::dir_names_nofollow(sd)) {
    if (is_special_dir(arch)) continue;
    const std::string adir = sd + "/" + arch;
    if (auto why = State::maintained_dir_problem(adir); !why.empty()) {
      warn(fmt::format("cache clear: skipping {}: {}", adir, why), state_->options.quiet);
      continue;
    }
    for (const auto& name : detail::dir_names_nofollow(adir)) {
      const std::string path = adir + "/" + name;
      // Rename first so readers see a whole entry or none, then delete at leisure (a symlinked entry
      // moves as the link; remove_tree unlinks it without touching its target).
      std::string trash = fmt::format("{}/tmp/clear-{}-{}-{}", sd, name, ::getpid(), detail::utc_stamp(true));
      bool moved = false;
      try {
        detail::make_private_dirs(sd + "/tmp");
        moved = ::rename(path.c_str(), trash.c_str()) == 0;
      } catch (const FsError&) {
      }
      if (detail::remove_tree(moved ? trash : path)) ++removed;
    }
  }
  return removed;
}

int KernelCache::gc() {
  int removed = 0;
  const std::string& root = state_->root;
  if (root.empty()) return 0;
  state_->check_maintainable("gc");
  const std::string& sd = state_->schema_dir;
  const std::string quarantine = sd + "/quarantine";
  if (auto why = State::maintained_dir_problem(quarantine); !why.empty()) {
    warn(fmt::format("cache gc: skipping {}: {}", quarantine, why), state_->options.quiet);
  } else {
    for (const auto& name : detail::dir_names_nofollow(quarantine))
      if (detail::remove_tree(quarantine + "/" + name)) ++removed;
  }
  const auto cutoff = std::chrono::system_clock::now() - kTempMaxAge;
  for (const auto& name : detail::dir_names_nofollow(sd + "/tmp")) {
    const std::string path = sd + "/tmp/" + name;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) continue;
    const auto mtime = std::chrono::system_clock::from_time_t(st.st_mtim.tv_sec);
    if (mtime < cutoff && detail::remove_tree(path)) ++removed;
  }
  // Directories of older cache schemas (v0, ...): unreadable by this build, so dead weight. Newer
  // schemas are left alone: a newer moejit may share this root. Links and directories of other users
  // are left alone too.
  for (const auto& name : detail::dir_names_nofollow(root)) {
    if (name.size() < 2 || name.size() > 9 || name[0] != 'v') continue;
    if (name.find_first_not_of("0123456789", 1) != std::string::npos) continue;
    if (std::stoi(name.substr(1)) >= kCacheSchemaVersion) continue;
    const std::string path = root + "/" + name;
    if (auto why = State::maintained_dir_problem(path); !why.empty()) {
      warn(fmt::format("cache gc: skipping {}: {}", path, why), state_->options.quiet);
      continue;
    }
    if (detail::remove_tree(path)) ++removed;
  }
  return removed;
}

std::string KernelCache::refused_reason() const {
  if (state_->root.empty()) return "no cache directory: set MOEJIT_CACHE_DIR, XDG_CACHE_HOME or HOME";
  return state_->shared_dirs_problem();
}

std::string KernelCache::check_writable() {
  if (state_->root.empty()) return "no cache directory: set MOEJIT_CACHE_DIR, XDG_CACHE_HOME or HOME";
  try {
    detail::make_private_dirs(state_->schema_dir + "/tmp");
    if (auto why = state_->shared_dirs_problem(); !why.empty()) return why;
    // A real write: permissions, read-only mounts and root's exemption from both are all settled by it.
    std::string probe = fmt::format("{}/tmp/probe.{}.XXXXXX", state_->schema_dir, ::getpid());
    if (!::mkdtemp(probe.data())) throw FsError("cannot create a directory in " + state_->schema_dir + "/tmp", errno);
    detail::remove_tree(probe);
  } catch (const FsError& e) {
    return e.what();
  }
  return {};
}

}  // namespace moejit
