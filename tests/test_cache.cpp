// The on-disk cubin cache (DESIGN §5): publish and reload, hashing, damage handling, degraded disks,
// trust, MOEJIT_NO_JIT, concurrency within and across processes, and maintenance. Each test uses a
// fresh temporary root. Runs without a GPU (NVRTC only).
#include "catch_compat.hpp"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cache/entry.hpp"
#include "moejit/compiler.hpp"
#include "moejit/error.hpp"
#include "moejit/generator.hpp"
#include "moejit/kernel_cache.hpp"
#include "moejit/key.hpp"
#include "cache_support.hpp"
#include "scoped_env.hpp"

namespace fs = std::filesystem;
using namespace moejit;
using nlohmann::json;
using moejit::test::ScopedEnv;
using namespace moejit::test;

namespace {

// The "read-only root" case for a process running as root, which ignores directory permissions. Run in a
// forked child (plain checks: its Catch2 results would be lost), it drops to nobody, seeds a cache at root
// (whose parent nobody owns), makes it read-only (chmod 0500) and checks that the existing entry still
// loads from disk, new kernels compile in memory, the cache degrades, and one warning says so. Failures go
// to stderr; returns 0 when every check held, kCannotDropRoot when the privileges could not be dropped,
// 1 otherwise.
constexpr uid_t kNobody = 65534;
constexpr int kCannotDropRoot = 100;

int read_only_root_as_nobody(const TempRoot& root) {
  // Group first (setgid needs root), then the user; afterwards root must be out of reach.
  if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) {
    std::fprintf(stderr, "cannot drop root to uid/gid %d: %s\n", static_cast<int>(kNobody), std::strerror(errno));
    return kCannotDropRoot;
  }
  if (::geteuid() != kNobody || ::getegid() != kNobody || ::setuid(0) == 0) {
    std::fprintf(stderr, "dropping root did not stick (euid %d, egid %d)\n", static_cast<int>(::geteuid()),
                 static_cast<int>(::getegid()));
    return kCannotDropRoot;
  }
  int failures = 0;
  const auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "FAILED: %s\n", what);
      ++failures;
    }
  };
  try {
    const KernelKey k = test_key();
    {
      KernelCache seed(opts(root));
      seed.get(k);
      expect(seed.compiles() == 1 && !seed.degraded(), "the cache is seeded on disk before it is made read-only");
    }
    // Make the whole cache read-only: existing entries still load, new kernels compile in memory.
    for (auto& e : fs::recursive_directory_iterator(root.path))
      if (e.is_directory()) ::chmod(e.path().c_str(), 0500);
    ::chmod(root.path.c_str(), 0500);
    expect(::access(root.path.c_str(), W_OK) != 0, "the root is not writable for nobody after chmod 0500");
    StderrCapture err;
    KernelCache cache(opts(root, false));
    const bool hit = cache.get(k)->from_disk;
    auto a = cache.get(test_key(Arch::sm_120a));
    auto b = cache.get(test_key(Arch::sm_100a));
    const std::string warnings = err.finish();
    expect(hit, "the existing entry loads from disk");
    expect(is_elf(a->cubin) && is_elf(b->cubin), "new kernels compile (cubins)");
    expect(!a->from_disk && !b->from_disk && cache.compiles() == 2, "new kernels compile in memory");
    expect(cache.degraded(), "the cache reports itself degraded");
    expect(count(warnings, "warning") == 1, "exactly one warning");
    if (failures) std::fprintf(stderr, "the cache's stderr:\n%s\n", warnings.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: exception: %s\n", e.what());
    ++failures;
  } catch (...) {
    std::fprintf(stderr, "FAILED: unknown exception\n");
    ++failures;
  }
  std::fflush(stderr);
  return failures == 0 ? 0 : 1;
}

}  // namespace

TEST_CASE("miss compiles and publishes; a new cache instance hits from disk", "[cache]") {
  TempRoot root;
  const KernelKey k = test_key();
  std::string dir;
  std::vector<char> cubin;
  {
    KernelCache cache(opts(root));
    CHECK(cache.root() == root.path);
    CHECK(cache.schema_dir() == root.path + "/v" + std::to_string(kCacheSchemaVersion));
    CHECK_FALSE(cache.contains(k));
    CHECK(cache.compiles() == 0);  // contains never compiles
    auto a = cache.get(k);
    CHECK_FALSE(a->from_disk);
    CHECK(cache.compiles() == 1);
    CHECK(is_elf(a->cubin));
    CHECK(a->entry == k.entry_name());
    CHECK(a->key == k);
    CHECK(a->hash == cache.hash_of(k));
    CHECK_FALSE(cache.degraded());
    auto again = cache.get(k);
    CHECK(again == a);  // memory hit: same object, no compile
    CHECK(cache.compiles() == 1);
    dir = entry_dir(cache, k);
    cubin = a->cubin;

    // Layout, modes and manifest.
    CHECK(names_in(dir) == std::vector<std::string>{"kernel.cubin", "manifest.json"});
    CHECK(mode_of(root.path) == 0700);
    CHECK(mode_of(cache.schema_dir()) == 0700);
    CHECK(mode_of(cache.schema_dir() + "/sm_90a") == 0700);
    CHECK(mode_of(dir) == 0700);
    CHECK(mode_of(dir + "/kernel.cubin") == 0600);
    CHECK(names_in(cache.schema_dir() + "/tmp").empty());
    const json m = json::parse(read_text(dir + "/manifest.json"));
    CHECK(m == a->manifest);
    CHECK(m["schema"] == kCacheSchemaVersion);
    CHECK(m["key"] == k.str());
    CHECK(m["hash"] == a->hash);
    CHECK(m["arch"] == "sm_90a");
    CHECK(m["entry"] == k.entry_name());
    CHECK(m["nvrtc_version"] == nvrtc_version());
    CHECK(m["nvrtc_build"] == nvrtc_build_id());
    CHECK(m["options"] == json(compile_options(Arch::sm_90a)));
    CHECK(m["cubin"]["size"] == cubin.size());
    CHECK(m["cubin"]["sha256"].get<std::string>().size() == 64);
    CHECK(m["resources"]["registers"].get<int>() > 0);
    CHECK(m["resources"]["shared_bytes"] == 256);
    CHECK(m["resources"]["spill_bytes"] == 0);
    CHECK(m["compile_seconds"].get<double>() > 0);
    CHECK(m["created"].get<std::string>().size() == 20);
    CHECK(m["hash_inputs"] == cache.hash_inputs(k));
    CHECK(m["hash_inputs"]["source"] == hand_source(k).source);
  }
  KernelCache fresh(opts(root));
  CHECK(fresh.contains(k));
  auto b = fresh.get(k);
  CHECK(b->from_disk);
  CHECK(fresh.compiles() == 0);
  CHECK(b->cubin == cubin);
  CHECK(b->entry == k.entry_name());
  CHECK(b->manifest["key"] == k.str());
}

TEST_CASE("the hash covers architecture, source and every other input", "[cache]") {
  TempRoot root;
  KernelCache cache(opts(root));
  const KernelKey k90 = test_key(Arch::sm_90a), k100 = test_key(Arch::sm_100a), k120 = test_key(Arch::sm_120a);
  CHECK(cache.hash_of(k90) == cache.hash_of(k90));  // deterministic
  CHECK(cache.hash_of(k90).size() == 64);
  CHECK(cache.hash_of(k90) != cache.hash_of(k100));
  CHECK(cache.hash_of(k90) != cache.hash_of(k120));
  CHECK(cache.hash_of(k100) != cache.hash_of(k120));
  CHECK(cache.hash_of(k90) != cache.hash_of(test_key(Arch::sm_90a, 512)));

  CacheOptions other = opts(root);
  other.source = [](const KernelKey& k) {
    auto s = hand_source(k);
    s.source += "// one more comment changes the hash\n";
    return s;
  };
  KernelCache cache2(other);
  CHECK(cache2.hash_of(k90) != cache.hash_of(k90));

  const json in = cache.hash_inputs(k90);
  for (const char* field : {"schema", "key", "arch", "entry", "source", "templates_digest", "nvrtc_version",
                            "nvrtc_build", "options"})
    CHECK(in.contains(field));
  CHECK(in["templates_digest"] == templates_digest());
  CHECK(in["arch"] == "sm_90a");

  // The hash is detail::entry_hash of exactly these inputs, and every one of them changes it: a template
  // edit (templates_digest), another NVRTC (version or build), other options, another cache schema, ...
  const std::string h90 = cache.hash_of(k90);
  CHECK(detail::entry_hash(in) == h90);
  const auto altered = [&](const std::string& field) {
    json v = in;
    json& f = v[field];
    if (f.is_number_integer()) f = f.get<int>() + 1;
    else if (f.is_array()) f.push_back("-DMOEJIT_OTHER_OPTION");
    else f = f.get<std::string>() + "x";
    return v;
  };
  for (const char* field : {"templates_digest", "nvrtc_version", "nvrtc_build", "options", "schema"}) {
    INFO("altered " << field);
    CHECK(detail::entry_hash(altered(field)) != h90);
  }
  for (const auto& item : in.items()) {  // and the rest: key, arch, entry, source name, source
    INFO("altered " << item.key());
    CHECK(detail::entry_hash(altered(item.key())) != h90);
  }
  // ... and nothing else does: the cache root is not an input, so another root gives the same hash.
  CHECK(in.dump().find(root.path) == std::string::npos);
  TempRoot other_root;
  CHECK(KernelCache(opts(other_root)).hash_of(k90) == h90);
  CHECK(KernelCache(opts(other_root)).hash_inputs(k90) == in);

  // Both sources end up as separate entries.
  auto a = cache.get(k90);
  auto b = cache2.get(k90);
  CHECK(a->hash != b->hash);
  CHECK(cache.list().size() == 2);
}

TEST_CASE("damaged entries are quarantined and rebuilt, never loaded", "[cache]") {
  TempRoot root;
  const KernelKey k = test_key();
  const KernelKey other = test_key(Arch::sm_90a, 512);
  std::string dir, hash, schema;
  std::vector<char> good;
  {
    KernelCache seed(opts(root));
    auto a = seed.get(k);
    schema = seed.schema_dir();
    dir = entry_dir(seed, k);
    hash = a->hash;
    good = a->cubin;
  }
  const std::string cubin = dir + "/kernel.cubin", manifest = dir + "/manifest.json";

  auto damage = [&](const std::string& name) {
    if (name == "truncated cubin") {
      fs::resize_file(cubin, good.size() / 2);
    } else if (name == "empty cubin") {
      fs::resize_file(cubin, 0);
    } else if (name == "wrong checksum") {
      std::string c = read_text(cubin);
      c[c.size() / 2] ^= 0x5a;  // same size, different bytes
      write_text(cubin, c);
    } else if (name == "bad manifest JSON") {
      std::string m = read_text(manifest);
      write_text(manifest, m.substr(0, m.size() / 3));
    } else if (name == "manifest of the wrong shape") {
      write_text(manifest, "[1, 2, 3]");
    } else if (name == "manifest of another schema") {
      json m = json::parse(read_text(manifest));
      m["schema"] = 0;
      write_text(manifest, m.dump());
    } else if (name == "manifest with another key") {
      json m = json::parse(read_text(manifest));
      m["key"] = other.str();
      write_text(manifest, m.dump());
    } else if (name == "manifest with a wrong size") {
      json m = json::parse(read_text(manifest));
      m["cubin"]["size"] = good.size() + 1;
      write_text(manifest, m.dump());
    } else if (name == "missing cubin") {
      fs::remove(cubin);
    } else if (name == "missing manifest") {
      fs::remove(manifest);
    } else if (name == "entry is a file") {
      fs::remove_all(dir);
      write_text(dir, "not a directory");
      ::chmod(dir.c_str(), 0600);
    } else if (name == "entry of another key moved here") {
      // A complete, self-consistent entry of a different key sitting at this key's hash.
      KernelCache c(opts(root));
      c.get(other);
      fs::remove_all(dir);
      fs::rename(entry_dir(c, other), dir);
    } else if (name == "entry of another schema moved here") {
      // What an older moejit would have written: manifest and hash inputs both say schema 0.
      json m = json::parse(read_text(manifest));
      m["schema"] = 0;
      m["hash_inputs"]["schema"] = 0;
      write_text(manifest, m.dump());
    } else {
      FAIL("unknown damage " << name);
    }
  };

  // Each damage and the diagnosis it must get.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"truncated cubin", "bytes, manifest says"},
      {"empty cubin", "bytes, manifest says"},
      {"wrong checksum", "checksum mismatch"},
      {"bad manifest JSON", "not valid JSON"},
      {"manifest of the wrong shape", "not a JSON object"},
      {"manifest of another schema", "schema 0"},
      {"manifest with another key", "is not the requested key"},
      {"manifest with a wrong size", "bytes, manifest says"},
      {"missing cubin", "kernel.cubin"},
      {"missing manifest", "manifest.json"},
      {"entry is a file", "not a directory"},
      {"entry of another key moved here", "does not match the entry directory"},
      {"entry of another schema moved here", "schema 0"},
  };
  for (const auto& [name, diagnosis] : cases) {
    DYNAMIC_SECTION(name) {
      // Start every section from a good entry.
      fs::remove_all(dir);
      fs::remove_all(schema + "/quarantine");
      {
        KernelCache c(opts(root));
        c.get(k);
      }
      damage(name);

      StderrCapture err;
      KernelCache cache(opts(root, /*quiet=*/false));
      auto r = cache.get(k);
      const std::string warnings = err.finish();
      INFO(warnings);
      CHECK_FALSE(r->from_disk);      // never loaded
      CHECK(cache.compiles() == 1);   // rebuilt
      CHECK(r->cubin == good);
      CHECK(warnings.find("damaged kernel cache entry") != std::string::npos);
      CHECK(warnings.find(diagnosis) != std::string::npos);
      CHECK(count(warnings, "warning") == 1);
      CHECK_FALSE(cache.degraded());

      // Set aside under quarantine/<hash>-<timestamp>.
      const auto q = names_in(schema + "/quarantine");
      REQUIRE(q.size() == 1);
      CHECK(q[0].rfind(hash + "-", 0) == 0);
      // And replaced by a good entry that the next instance loads.
      KernelCache next(opts(root));
      auto n = next.get(k);
      CHECK(n->from_disk);
      CHECK(n->cubin == good);
      CHECK(next.compiles() == 0);
    }
  }
}

TEST_CASE("contains() quarantines a damaged entry and reports a miss", "[cache]") {
  TempRoot root;
  const KernelKey k = test_key();
  const std::string dir = published_entry(root, k);
  fs::resize_file(dir + "/kernel.cubin", 10);
  KernelCache cache(opts(root));
  CHECK_FALSE(cache.contains(k));
  CHECK(cache.compiles() == 0);
  CHECK(names_in(cache.schema_dir() + "/quarantine").size() == 1);
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("an unusable cache root degrades to in-memory compiles with one warning", "[cache]") {
  SECTION("root is a regular file") {
    TempRoot root;
    fs::create_directories(fs::path(root.path).parent_path());
    write_text(root.path, "not a directory");
    StderrCapture err;
    KernelCache cache(opts(root, false));
    auto a = cache.get(test_key(Arch::sm_90a));
    auto b = cache.get(test_key(Arch::sm_120a));
    auto c = cache.get(test_key(Arch::sm_90a, 512));
    const std::string warnings = err.finish();
    INFO(warnings);
    CHECK(is_elf(a->cubin));
    CHECK(is_elf(b->cubin));
    CHECK(is_elf(c->cubin));
    CHECK_FALSE(a->from_disk);
    CHECK(a->manifest["key"] == test_key().str());  // manifest still describes the kernel
    CHECK(cache.degraded());
    CHECK(cache.compiles() == 3);
    CHECK(count(warnings, "warning") == 1);
    CHECK(warnings.find(root.path) != std::string::npos);
    CHECK(read_text(root.path) == "not a directory");
    CHECK(cache.list().empty());
  }
  SECTION("read-only root (chmod 0500)") {
    if (::geteuid() == 0) {
      // Root ignores directory permissions (and CI runs as root): the case runs in a child that drops to
      // nobody, in a temporary root that nobody owns (/tmp/moejit-cache-test-XXXXXX, under /tmp (1777),
      // chowned to it), and reports by its exit status; what it wrote to stderr comes back in a file.
      TempRoot root;
      const fs::path base = fs::path(root.path).parent_path();
      REQUIRE(::chown(base.c_str(), kNobody, kNobody) == 0);
      for (auto& e : fs::recursive_directory_iterator(base)) REQUIRE(::lchown(e.path().c_str(), kNobody, kNobody) == 0);
      char log_tmpl[] = "/tmp/moejit-child-stderr-XXXXXX";
      const int log_fd = ::mkstemp(log_tmpl);
      REQUIRE(log_fd >= 0);
      const std::string log = log_tmpl;
      std::fflush(stdout);
      std::fflush(stderr);
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::dup2(log_fd, 2);
        ::_exit(read_only_root_as_nobody(root));
      }
      ::close(log_fd);
      int status = 0;
      const bool waited = pid > 0 && ::waitpid(pid, &status, 0) == pid;
      const std::string child_stderr = read_text(log);
      ::unlink(log.c_str());
      REQUIRE(pid > 0);
      REQUIRE(waited);
      INFO("stderr of the child running as uid " << kNobody << ":\n" << child_stderr);
      REQUIRE(WIFEXITED(status));
      if (WEXITSTATUS(status) == kCannotDropRoot)
        FAIL("running as root, and the read-only-root case cannot drop to uid/gid 65534 (nobody): it did not run");
      CHECK(WEXITSTATUS(status) == 0);
      return;
    }
    TempRoot root;
    const KernelKey k = test_key();
    {
      KernelCache seed(opts(root));
      seed.get(k);
    }
    // Make the whole cache read-only: existing entries still load, new kernels compile in memory.
    for (auto& e : fs::recursive_directory_iterator(root.path))
      if (e.is_directory()) ::chmod(e.path().c_str(), 0500);
    ::chmod(root.path.c_str(), 0500);
    StderrCapture err;
    KernelCache cache(opts(root, false));
    CHECK(cache.get(k)->from_disk);
    auto a = cache.get(test_key(Arch::sm_120a));
    auto b = cache.get(test_key(Arch::sm_100a));
    const std::string warnings = err.finish();
    INFO(warnings);
    CHECK(is_elf(a->cubin));
    CHECK(is_elf(b->cubin));
    CHECK(cache.degraded());
    CHECK(count(warnings, "warning") == 1);
  }
}

TEST_CASE("a write failure mid-publish (full disk) degrades and leaves nothing behind", "[cache]") {
  // RLIMIT_FSIZE makes writes past 1 KiB fail with EFBIG, the way ENOSPC fails them: the cubin write
  // breaks after the temp directory exists. Done in a child so the limit does not leak into the tests.
  TempRoot root;
  {
    KernelCache c(opts(root));
    c.get(test_key(Arch::sm_120a));  // the cache directories exist and work
  }
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {1024, 1024};
    ::setrlimit(RLIMIT_FSIZE, &rl);
    int code = 0;
    try {
      KernelCache cache(opts(root));
      auto a = cache.get(test_key(Arch::sm_90a));
      auto b = cache.get(test_key(Arch::sm_100a));
      if (!is_elf(a->cubin) || !is_elf(b->cubin)) code |= 1;
      if (!cache.degraded()) code |= 2;
      if (cache.compiles() != 2) code |= 4;
    } catch (...) {
      code |= 8;
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  KernelCache cache(opts(root));
  CHECK(names_in(cache.schema_dir() + "/tmp").empty());  // the partial temp entry was removed
  const auto entries = cache.list();
  REQUIRE(entries.size() == 1);  // only the entry from before
  CHECK(entries[0].valid);
  CHECK(entries[0].manifest["arch"] == "sm_120a");
}

TEST_CASE("entries that other users can write are not trusted", "[cache]") {
  TempRoot root;
  const KernelKey k = test_key();
  const std::string dir = published_entry(root, k);
  SECTION("group-writable entry directory") {
    ::chmod(dir.c_str(), 0770);
    StderrCapture err;
    KernelCache cache(opts(root, false));
    CHECK_FALSE(cache.contains(k));
    auto r = cache.get(k);
    const std::string warnings = err.finish();
    INFO(warnings);
    CHECK_FALSE(r->from_disk);
    CHECK(cache.compiles() == 1);
    CHECK(is_elf(r->cubin));
    CHECK(count(warnings, "not trusted") == 1);
    CHECK(fs::exists(dir + "/kernel.cubin"));  // left in place, not quarantined
    CHECK_FALSE(fs::exists(cache.schema_dir() + "/quarantine"));
    const auto listed = cache.list();
    REQUIRE(listed.size() == 1);
    CHECK_FALSE(listed[0].valid);
    CHECK(listed[0].problem.rfind("not trusted: ", 0) == 0);
    CHECK(listed[0].problem.find("writable") != std::string::npos);
    const auto verified = cache.verify();  // reported, never moved
    REQUIRE(verified.size() == 1);
    CHECK_FALSE(verified[0].valid);
    CHECK_FALSE(verified[0].trusted);
    CHECK(fs::exists(dir + "/kernel.cubin"));
  }
  SECTION("world-writable cubin file") {
    ::chmod((dir + "/kernel.cubin").c_str(), 0666);
    KernelCache cache(opts(root));
    CHECK_FALSE(cache.get(k)->from_disk);
    CHECK(cache.compiles() == 1);
  }
  SECTION("group-writable cache root") {
    ::chmod(root.path.c_str(), 0770);
    StderrCapture err;
    KernelCache cache(opts(root, false));
    auto r = cache.get(k);
    const std::string warnings = err.finish();
    INFO(warnings);
    CHECK_FALSE(r->from_disk);
    CHECK(cache.degraded());
    CHECK(count(warnings, "warning") == 1);
  }
}

TEST_CASE("MOEJIT_NO_JIT turns a miss into an error", "[cache]") {
  TempRoot root;
  const KernelKey k = test_key();
  const KernelKey missing = test_key(Arch::sm_120a);
  {
    KernelCache prewarm(opts(root));
    prewarm.get(k);
  }
  ScopedEnv env{"MOEJIT_NO_JIT"};
  SECTION("environment") {
    env.set("MOEJIT_NO_JIT", "1");
    KernelCache cache(opts(root));
    CHECK(cache.get(k)->from_disk);  // prewarmed keys load
    CHECK_FALSE(cache.contains(missing));
    try {
      cache.get(missing);
      FAIL("expected moejit::Error");
    } catch (const Error& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK(msg.find(missing.str()) != std::string::npos);
      CHECK(msg.find("prewarm") != std::string::npos);
      CHECK(msg.find("MOEJIT_NO_JIT") != std::string::npos);
    }
    CHECK(cache.compiles() == 0);
    CHECK_THROWS_AS(cache.get(missing), Error);  // failures are not remembered as successes
  }
  SECTION("option") {
    env.unset("MOEJIT_NO_JIT");
    CacheOptions o = opts(root);
    o.no_jit = true;
    KernelCache cache(o);
    CHECK_THROWS_WITH(cache.get(missing), Catch::Contains("prewarm"));
    CHECK(cache.compiles() == 0);
  }
  SECTION("MOEJIT_NO_JIT=0 allows compiles") {
    env.set("MOEJIT_NO_JIT", "0");
    KernelCache cache(opts(root));
    CHECK_FALSE(cache.get(missing)->from_disk);
  }
}

TEST_CASE("MOEJIT_NO_JIT says why an entry on disk was not used", "[cache]") {
  // The caches here are quiet, as a server's may be: the error alone must tell the operator that the
  // kernel was prewarmed but its entry refused, and why.
  TempRoot root;
  const KernelKey k = test_key();
  const std::string dir = published_entry(root, k);
  ScopedEnv env{"MOEJIT_NO_JIT"};
  env.set("MOEJIT_NO_JIT", "1");
  auto no_jit_error = [&](KernelCache& cache) -> std::string {
    try {
      cache.get(k);
    } catch (const Error& e) {
      return e.what();
    }
    FAIL("expected moejit::Error");
    return {};
  };

  SECTION("damaged entry") {
    fs::resize_file(dir + "/kernel.cubin", 10);
    KernelCache cache(opts(root));
    const std::string msg = no_jit_error(cache);
    INFO(msg);
    CHECK(msg.find(k.str()) != std::string::npos);
    CHECK(msg.find("rejected as damaged") != std::string::npos);
    CHECK(msg.find("bytes, manifest says") != std::string::npos);  // the damage itself
    CHECK(msg.find(dir) != std::string::npos);
    CHECK(msg.find("moved to " + cache.schema_dir() + "/quarantine/") != std::string::npos);
    CHECK(msg.find("MOEJIT_NO_JIT") != std::string::npos);
    CHECK(msg.find("prewarm") != std::string::npos);
    CHECK(msg.find("is not in the kernel cache") == std::string::npos);
    CHECK(cache.compiles() == 0);
    CHECK(names_in(cache.schema_dir() + "/quarantine").size() == 1);
    // Set aside by the first call, so the next one finds a plain miss.
    CHECK_THROWS_WITH(cache.get(k), Catch::Contains("is not in the kernel cache"));
  }
  SECTION("entry other users can write") {
    ::chmod(dir.c_str(), 0770);
    KernelCache cache(opts(root));
    const std::string msg = no_jit_error(cache);
    INFO(msg);
    CHECK(msg.find("is not trusted") != std::string::npos);
    CHECK(msg.find("writable by its group") != std::string::npos);
    CHECK(msg.find(dir) != std::string::npos);
    CHECK(msg.find("MOEJIT_NO_JIT") != std::string::npos);
    CHECK(cache.compiles() == 0);
    CHECK(fs::exists(dir + "/kernel.cubin"));  // left in place
  }
  SECTION("cache root other users can write (the cache degrades)") {
    ::chmod(root.path.c_str(), 0770);
    KernelCache cache(opts(root));
    const std::string msg = no_jit_error(cache);
    INFO(msg);
    CHECK(cache.degraded());
    CHECK(msg.find("cannot be used") != std::string::npos);
    CHECK(msg.find(root.path + " is writable by its group") != std::string::npos);
    CHECK(msg.find("MOEJIT_NO_JIT") != std::string::npos);
    CHECK(cache.compiles() == 0);
  }
}

TEST_CASE("a failed compile throws and is retried by the next get", "[cache]") {
  TempRoot root;
  const KernelKey seeded = test_key(Arch::sm_120a);
  {
    // The cache directories exist, so that "nothing left in tmp" below looks at a real directory.
    KernelCache c(opts(root));
    c.get(seeded);
  }
  CacheOptions o = opts(root);
  std::atomic<int> calls{0};
  o.source = [&calls](const KernelKey& k) {
    ++calls;
    auto s = hand_source(k);
    s.source += "this is not C++\n";
    return s;
  };
  KernelCache cache(o);
  const KernelKey k = test_key();
  CHECK_THROWS_WITH(cache.get(k), Catch::Contains("NVRTC"));
  CHECK_THROWS_AS(cache.get(k), Error);
  CHECK(calls == 2);
  const auto entries = cache.list();
  REQUIRE(entries.size() == 1);  // only the seeded entry
  CHECK(entries[0].manifest["key"] == seeded.str());
  CHECK(names_in(cache.schema_dir() + "/tmp").empty());
}

TEST_CASE("concurrent get() of one key compiles once", "[cache]") {
  TempRoot root;
  KernelCache cache(opts(root));
  const KernelKey k = test_key();
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<const CachedKernel>> got(8);
  std::atomic<bool> go{false};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      while (!go) std::this_thread::yield();
      got[t] = cache.get(k);
    });
  }
  go = true;
  for (auto& th : threads) th.join();
  CHECK(cache.compiles() == 1);
  for (const auto& g : got) {
    REQUIRE(g);
    CHECK(g == got[0]);
  }
  CHECK(is_elf(got[0]->cubin));
  CHECK(cache.list().size() == 1);
}

TEST_CASE("concurrent get() of one key from several caches compiles once per process", "[cache]") {
  // A server with a Runtime per GPU has a KernelCache per Runtime, all asking for the same keys at once.
  // Every cache waits in its source callback until all have asked, so the requests overlap; the first
  // to reach NVRTC compiles, the others take its cubin, and each cache publishes to its own root.
  constexpr int kCaches = 4;
  std::vector<std::unique_ptr<TempRoot>> roots;
  std::vector<std::unique_ptr<KernelCache>> caches;
  std::atomic<int> asked{0};
  for (int c = 0; c < kCaches; ++c) {
    roots.push_back(std::make_unique<TempRoot>());
    CacheOptions o = opts(*roots.back());
    o.source = [&asked](const KernelKey& k) {
      ++asked;
      while (asked < kCaches) std::this_thread::yield();
      return hand_source(k);
    };
    caches.push_back(std::make_unique<KernelCache>(o));
  }
  const KernelKey k = test_key(Arch::sm_90a, 320);  // a key no other case compiles
  std::vector<std::shared_ptr<const CachedKernel>> got(kCaches);
  std::vector<std::thread> threads;
  for (int c = 0; c < kCaches; ++c) threads.emplace_back([&, c] { got[c] = caches[c]->get(k); });
  for (auto& th : threads) th.join();
  std::uint64_t compiles = 0;
  for (int c = 0; c < kCaches; ++c) {
    REQUIRE(got[c]);
    CHECK(got[c]->cubin == got[0]->cubin);
    CHECK(got[c]->hash == got[0]->hash);
    CHECK(caches[c]->list().size() == 1);  // published to every root
    compiles += caches[c]->compiles();
  }
  CHECK(compiles == 1);
}

TEST_CASE("concurrent get() from several processes leaves one valid entry", "[cache]") {
  TempRoot root;
  const KernelKey k = test_key();
  {
    // Directories exist, the entry does not: the children race on the publish itself.
    KernelCache c(opts(root));
    c.get(test_key(Arch::sm_120a));
  }
  int gate[2];
  REQUIRE(::pipe(gate) == 0);
  std::vector<pid_t> children;
  for (int i = 0; i < 4; ++i) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(gate[1]);
      char c;
      while (::read(gate[0], &c, 1) < 0 && errno == EINTR) {
      }  // released together when the parent closes the pipe
      int code = 0;
      try {
        KernelCache cache(opts(root));
        auto r = cache.get(k);
        if (!is_elf(r->cubin)) code = 1;
        if (r->manifest["key"] != k.str()) code = 2;
      } catch (...) {
        code = 3;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  ::close(gate[0]);
  ::close(gate[1]);
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  KernelCache cache(opts(root));
  int valid_for_key = 0;
  for (const auto& e : cache.list()) {
    CHECK(e.valid);
    if (e.manifest.value("key", "") == k.str()) ++valid_for_key;
  }
  CHECK(valid_for_key == 1);
  CHECK(names_in(cache.schema_dir() + "/tmp").empty());
  CHECK_FALSE(fs::exists(cache.schema_dir() + "/quarantine"));
  CHECK(cache.get(k)->from_disk);
}

TEST_CASE("list, verify, gc and clear", "[cache]") {
  TempRoot root;
  KernelCache cache(opts(root));
  const KernelKey a = test_key(Arch::sm_90a), b = test_key(Arch::sm_120a), c = test_key(Arch::sm_90a, 512);
  cache.get(a);
  cache.get(b);
  cache.get(c);
  auto entries = cache.list();
  REQUIRE(entries.size() == 3);
  for (const auto& e : entries) {
    CHECK(e.valid);
    CHECK(e.problem.empty());
    CHECK(e.manifest.contains("key"));
  }
  CHECK(std::is_sorted(entries.begin(), entries.end(),
                       [](const CacheEntryInfo& x, const CacheEntryInfo& y) { return x.path < y.path; }));

  // Damage one: list reports it, verify quarantines it.
  const std::string damaged = entry_dir(cache, c);
  fs::resize_file(damaged + "/kernel.cubin", 100);
  entries = cache.list();
  REQUIRE(entries.size() == 3);
  int invalid = 0;
  for (const auto& e : entries) {
    if (!e.valid) {
      ++invalid;
      CHECK(e.path == damaged);
      CHECK(e.trusted);  // damaged, not someone else's: verify may move it
      CHECK(e.problem.find("bytes") != std::string::npos);
    }
  }
  CHECK(invalid == 1);
  CHECK(fs::exists(damaged));  // list() only looks
  const auto verified = cache.verify();
  REQUIRE(verified.size() == 3);
  CHECK_FALSE(fs::exists(damaged));
  const std::string schema = cache.schema_dir();
  CHECK(names_in(schema + "/quarantine").size() == 1);
  CHECK(cache.list().size() == 2);

  // gc: quarantine, stale temp leftovers and old schemas go; a fresh temp dir (a publish in flight) stays.
  static_assert(kCacheSchemaVersion >= 1, "an older schema directory needs a version below this one");
  const std::string older = root.path + "/v" + std::to_string(kCacheSchemaVersion - 1);
  const std::string newer = root.path + "/v" + std::to_string(kCacheSchemaVersion + 1);
  fs::create_directories(older + "/sm_90a/deadbeef");
  fs::create_directories(schema + "/tmp/stale.123.abcdef");
  fs::create_directories(schema + "/tmp/fresh.456.abcdef");
  fs::create_directories(newer + "/sm_90a");  // a newer moejit may share the root
  fs::create_directories(root.path + "/unrelated");
  const struct timespec old_times[2] = {{std::time(nullptr) - 3600, 0}, {std::time(nullptr) - 3600, 0}};
  REQUIRE(::utimensat(AT_FDCWD, (schema + "/tmp/stale.123.abcdef").c_str(), old_times, 0) == 0);
  CHECK(cache.gc() == 3);
  CHECK_FALSE(fs::exists(older));
  CHECK(names_in(schema + "/quarantine").empty());
  CHECK(names_in(schema + "/tmp") == std::vector<std::string>{"fresh.456.abcdef"});
  CHECK(fs::exists(newer));
  CHECK(fs::exists(root.path + "/unrelated"));
  CHECK(cache.list().size() == 2);

  // clear removes every entry of this schema; kernels in memory stay usable, the disk refills on demand.
  CHECK(cache.clear() == 2);
  CHECK(cache.list().empty());
  CHECK(is_elf(cache.get(a)->cubin));
  KernelCache fresh(opts(root));
  CHECK_FALSE(fresh.contains(a));
  CHECK_FALSE(fresh.get(a)->from_disk);
  CHECK(fresh.list().size() == 1);
}

TEST_CASE("cache root resolution", "[cache]") {
  ScopedEnv env{"HOME", "MOEJIT_CACHE_DIR", "XDG_CACHE_HOME"};
  env.set("HOME", "/home/someone");
  SECTION("explicit root wins") {
    env.set("MOEJIT_CACHE_DIR", "/from/env");
    CHECK(KernelCache::resolve_root("/explicit/") == "/explicit");
  }
  SECTION("MOEJIT_CACHE_DIR") {
    env.set("MOEJIT_CACHE_DIR", "/from/env");
    env.set("XDG_CACHE_HOME", "/xdg");
    CHECK(KernelCache::resolve_root("") == "/from/env");
  }
  SECTION("XDG_CACHE_HOME") {
    env.unset("MOEJIT_CACHE_DIR");
    env.set("XDG_CACHE_HOME", "/xdg");
    CHECK(KernelCache::resolve_root("") == "/xdg/moejit");
  }
  SECTION("relative XDG_CACHE_HOME is ignored") {
    env.unset("MOEJIT_CACHE_DIR");
    env.set("XDG_CACHE_HOME", "relative");
    CHECK(KernelCache::resolve_root("") == "/home/someone/.cache/moejit");
  }
  SECTION("home") {
    env.set("MOEJIT_CACHE_DIR", "");
    env.unset("XDG_CACHE_HOME");
    CHECK(KernelCache::resolve_root("") == "/home/someone/.cache/moejit");
    CHECK(KernelCache::resolve_root("~/c") == "/home/someone/c");
  }
  SECTION("relative roots become absolute") {
    const std::string r = KernelCache::resolve_root("rel/cache");
    CHECK(r == (fs::current_path() / "rel/cache").string());
  }
  SECTION("the constructor uses the environment") {
    TempRoot root;
    env.set("MOEJIT_CACHE_DIR", root.path.c_str());
    KernelCache cache;
    CHECK(cache.root() == root.path);
  }
}

TEST_CASE("generated route kernels go through the cache", "[cache]") {
  TempRoot root;
  CacheOptions o;
  o.root = root.path;
  o.quiet = true;
  KernelCache cache(o);  // default source: the generator
  for (Arch arch : {Arch::sm_90a, Arch::sm_120a}) {
    KernelKey k;
    k.kind = KernelKind::route;
    k.arch = arch;
    k.experts = 8;
    k.hidden = 4096;  // ignored by route: normalization maps it away
    auto r = cache.get(k);
    CHECK(is_elf(r->cubin));
    CHECK(r->key == k.normalized());
    CHECK(r->entry == k.normalized().entry_name());
    CHECK(r->manifest["hash_inputs"]["source"] == generate_source(k.normalized()).source);
    CHECK(cache.get(k.normalized()) == r);  // one key per kernel
  }
  CHECK(cache.compiles() == 2);
  KernelCache again(o);
  KernelKey k;
  k.kind = KernelKind::route;
  k.experts = 8;
  CHECK(again.contains(k));
  CHECK(again.get(k)->from_disk);
}
