#pragma once
// The versioned on-disk cubin cache of DESIGN §5.
//
// Layout: <root>/v<schema>/<arch>/<hash>/{kernel.cubin, manifest.json}. The hash covers the schema
// version, generated source, template contents, NVRTC version, options and architecture. Entries are
// published atomically (private temp dir, fsync, rename) and verified (size + checksum) on every read;
// damaged entries are moved to <root>/v<schema>/quarantine and rebuilt. A read-only or full disk
// degrades to in-memory compiles with one warning on stderr. Thread-safe: concurrent requests for one
// key compile once per process, across KernelCache instances too (each publishes to its own root).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "moejit/generator.hpp"
#include "moejit/key.hpp"

namespace moejit {

inline constexpr int kCacheSchemaVersion = 1;

// True when environment variable `name` is set to anything other than empty, 0, false, no or off (any
// case): how MOEJIT_NO_JIT is read.
bool env_flag(const char* name);

struct CacheOptions {
  std::string root;      // empty: $MOEJIT_CACHE_DIR, else $XDG_CACHE_HOME/moejit, else ~/.cache/moejit
  bool no_jit = false;   // also forced by MOEJIT_NO_JIT=1: a miss throws instead of compiling
  bool quiet = false;    // suppress the one-time degradation warning (and other cache warnings)
  // Source for a (normalized) key; empty: generate_source. Lets tests and tools cache hand-written
  // kernels; the source is hashed like any other, so entries never mix.
  std::function<GeneratedSource(const KernelKey&)> source;
};

// One kernel as get() returns it: immutable and shared (the cache keeps it in memory for the life of
// the KernelCache, so the pointer stays valid as long as any holder keeps it).
struct CachedKernel {
  KernelKey key;
  std::string entry;             // extern "C" name inside the cubin
  std::string hash;              // cache hash (hex)
  std::vector<char> cubin;
  nlohmann::json manifest;
  bool from_disk = false;        // true when read from disk rather than compiled in this call
};

// One on-disk entry as list() and verify() report it.
struct CacheEntryInfo {
  std::string path;         // the entry's directory
  nlohmann::json manifest;  // empty when unreadable
  bool valid = false;
  bool trusted = true;      // false: left in place because its directory chain or files may be written by others
  std::string problem;      // why not valid
};

class KernelCache {
 public:
  // Resolves the root (resolve_root) and reads MOEJIT_NO_JIT now; creates nothing on disk until the
  // first publish (directories 0700). Never throws for an unusable disk: the cache degrades instead.
  explicit KernelCache(CacheOptions options = {});

  // Returns the kernel for key (normalized first): from memory, from disk, or compiled and published.
  // Throws moejit::Error on compile failure or on a miss with no_jit.
  std::shared_ptr<const CachedKernel> get(const KernelKey& key);
  // True when get(key) would not compile: the kernel is in memory, or a valid entry is on disk (which is
  // then loaded into memory; a damaged one is quarantined). Never compiles: the runtime uses it to fail
  // fast instead of compiling during CUDA graph capture. A compile in flight in another thread is false.
  bool contains(const KernelKey& key);
  // Hash inputs (JSON: schema, key, source digest, templates digest, NVRTC build, options, arch) and
  // their hash (hex) for a key (normalized first); no compile. Throws moejit::Error for a key the
  // generator cannot build.
  nlohmann::json hash_inputs(const KernelKey& key) const;
  std::string hash_of(const KernelKey& key) const;

  std::string root() const;                      // the resolved cache root
  std::string schema_dir() const;                // <root>/v<schema>
  bool degraded() const;                         // disk unusable; compiling to memory only
  std::uint64_t compiles() const;                // NVRTC compiles run by this instance (misses)

  std::vector<CacheEntryInfo> list() const;    // every entry of this schema, all architectures
  std::vector<CacheEntryInfo> verify();        // checks every entry; quarantines damaged ones
  // Why get() reads nothing from and writes nothing to this cache at all ("" when it does): no root, or
  // the root, v<schema> or its tmp is not a directory or is writable by other users. list/verify mark
  // every entry untrusted with this reason then.
  std::string refused_reason() const;
  // Creates the cache directories when missing and publishes nothing, but proves a publish could happen
  // (a private temporary directory is made and removed). "" when it can, else why not: a root that is a
  // dangling symlink or a file, read-only, untrusted, ... `moejit prewarm` refuses to start on it.
  std::string check_writable();
  // clear and gc never follow a symlink below the root and apply the trust rules of reads and writes:
  // where the root, v<schema> or its tmp is refused (or is a symlink), they throw moejit::Error and
  // remove nothing; an architecture, quarantine or old-schema directory that is a symlink or others
  // can write is skipped with a warning.
  int clear();                                 // removes this schema's entries; returns the count
                                               // (kernels already in memory stay usable)
  int gc();                                    // removes quarantine, temp leftovers older than
                                               // 10 minutes and old schemas; returns the count

  // Resolves the cache root from options and the environment (as described on CacheOptions::root).
  // Returns an absolute path, or "" when nothing names a root (no HOME either: the cache then keeps
  // kernels in memory). Never throws.
  static std::string resolve_root(const std::string& configured);

 private:
  struct State;                  // defined in cache/kernel_cache.cpp
  std::shared_ptr<State> state_;
};

}  // namespace moejit
