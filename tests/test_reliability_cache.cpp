// Fault classes of the on-disk cache (docs/RELIABILITY.md): a manifest nested deeper than any stack, a
// FIFO in place of an entry's files, a root that is a dangling symlink, symlinks and untrusted
// directories under gc and clear, and `verify` agreeing with the runtime about a cache it refuses.
#include "catch_compat.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cache_support.hpp"
#include "cli_process.hpp"
#include "moejit/error.hpp"
#include "moejit/kernel_cache.hpp"
#include "scoped_env.hpp"

namespace fs = std::filesystem;
using namespace moejit;
using namespace moejit::test;
using Catch::Contains;

namespace {

constexpr uid_t kNobodyForTests = 65534;

// A reader that blocks would hang the test binary; SIGALRM ends it with a clear failure instead.
struct Watchdog {
  explicit Watchdog(unsigned seconds) { ::alarm(seconds); }
  ~Watchdog() { ::alarm(0); }
};

// A directory outside the cache with contents that gc and clear must never touch.
struct Victim {
  std::string dir;
  explicit Victim(const TempRoot& root) : dir(fs::path(root.path).parent_path().string() + "/victim") {
    fs::create_directories(dir + "/sub");
    write_text(dir + "/precious", "keep me");
    write_text(dir + "/sub/precious", "keep me too");
  }
  bool intact() const {
    return read_text(dir + "/precious") == "keep me" && read_text(dir + "/sub/precious") == "keep me too";
  }
};

}  // namespace

TEST_CASE("a manifest nested deeper than any stack is set aside as damaged and rebuilt", "[reliability][cache]") {
  TempRoot root;
  const KernelKey k = test_key();
  const std::string dir = published_entry(root, k);
  write_text(dir + "/manifest.json", std::string(300000, '[') + std::string(300000, ']'));
  KernelCache cache(opts(root));
  const auto listed = cache.list();
  REQUIRE(listed.size() == 1);
  CHECK_FALSE(listed[0].valid);
  CHECK_THAT(listed[0].problem, Contains("manifest.json nests arrays and objects deeper than 64"));
  auto got = cache.get(k);
  CHECK_FALSE(got->from_disk);
  CHECK(cache.compiles() == 1);
  CHECK(names_in(cache.schema_dir() + "/quarantine").size() == 1);
  KernelCache again(opts(root));
  CHECK(again.get(k)->from_disk);
}

TEST_CASE("a FIFO or a symlink in place of an entry's cubin or manifest never blocks or redirects a reader",
          "[reliability][cache][fifo]") {
  Watchdog watchdog(120);
  for (const char* kind : {"FIFO", "symbolic link"}) {
    for (const char* file : {"kernel.cubin", "manifest.json"}) {
      INFO(kind << " as " << file);
      TempRoot root;
      const KernelKey k = test_key();
      const std::string dir = published_entry(root, k);
      const std::string path = dir + "/" + file;
      if (std::string(kind) == "FIFO") {
        REQUIRE(::unlink(path.c_str()) == 0);
        REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
      } else {
        // The link points at the entry's own file, moved aside: the content would pass every check.
        const std::string moved = fs::path(root.path).parent_path().string() + "/moved-" + file;
        fs::rename(path, moved);
        fs::create_symlink(moved, path);
      }
      KernelCache cache(opts(root));
      const auto listed = cache.list();
      REQUIRE(listed.size() == 1);
      CHECK_THAT(listed[0].problem, Contains(std::string(file) + " is a " + kind + ", not a regular file"));
      CHECK_FALSE(cache.contains(k));  // reads, finds it damaged, quarantines it
      CHECK(names_in(cache.schema_dir() + "/quarantine").size() == 1);
      CHECK_FALSE(cache.get(k)->from_disk);
      KernelCache again(opts(root));
      CHECK(again.get(k)->from_disk);
    }
  }
}

TEST_CASE("a cache root that is a dangling symlink or a file is an error for prewarm, a loud degrade for get",
          "[reliability][cache]") {
  TempRoot base;
  const std::string missing = fs::path(base.path).parent_path().string() + "/unmounted/volume";
  fs::create_symlink(missing, base.path);  // base.path: the root, a link to a volume that is not there
  {
    StderrCapture err;
    KernelCache cache(opts(base, /*quiet=*/false));
    CHECK_THAT(cache.check_writable(), Contains("symbolic link whose target does not exist"));
    auto got = cache.get(test_key());
    CHECK(is_elf(got->cubin));
    CHECK(cache.degraded());
    CHECK_THAT(err.finish(), Contains("cannot be used") && Contains("symbolic link whose target does not exist"));
  }
  CHECK_FALSE(fs::exists(missing));

  ScopedEnv env{"MOEJIT_CACHE_DIR", "MOEJIT_NO_JIT"};
  env.set("MOEJIT_CACHE_DIR", base.path);
  env.unset("MOEJIT_NO_JIT");
  auto r = moejit_test::run_cli({"prewarm", "--config", "qwen3-30b-a3b", "--arch", "sm_90a", "--max-tokens", "1", "--quiet"});
  {
    INFO(r.out);
    CHECK(r.rc == 2);
    CHECK_THAT(r.out, Contains("cannot be written") && Contains("symbolic link whose target does not exist"));
    CHECK_THAT(r.out, !Contains("compiled"));
  }
  fs::remove(base.path);
  write_text(base.path, "a file where the cache root should be");
  r = moejit_test::run_cli({"prewarm", "--config", "qwen3-30b-a3b", "--arch", "sm_90a", "--max-tokens", "1", "--quiet"});
  INFO(r.out);
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, Contains("is not a directory"));
}

TEST_CASE("gc and clear never follow symlinks inside the cache", "[reliability][cache][gc]") {
  TempRoot root;
  const KernelKey k = test_key();
  published_entry(root, k);
  KernelCache cache(opts(root));
  const std::string sd = cache.schema_dir();
  Victim victim(root);

  // A symlinked architecture directory, a symlinked entry, a symlinked quarantine, a symlink inside the
  // quarantine and a symlinked old schema: each points at the victim.
  fs::create_symlink(victim.dir, sd + "/sm_99a");
  fs::create_symlink(victim.dir, sd + "/sm_90a/0123456789abcdef");
  fs::create_directories(sd + "/quarantine");
  fs::create_symlink(victim.dir, sd + "/quarantine/old-entry");
  fs::create_symlink(victim.dir, root.path + "/v0");
  CHECK(cache.clear() == 2);  // the real entry and the symlinked one (the link itself is removed)
  CHECK(victim.intact());
  CHECK(fs::is_symlink(sd + "/sm_99a"));
  CHECK(cache.gc() == 1);  // the link inside the quarantine
  CHECK(victim.intact());
  CHECK(fs::is_symlink(root.path + "/v0"));

  fs::remove_all(sd + "/quarantine");
  fs::create_symlink(victim.dir, sd + "/quarantine");
  CHECK(cache.gc() == 0);
  CHECK(victim.intact());

  // A symlinked tmp (where clear moves entries) or schema directory: nothing is removed at all.
  fs::remove(sd + "/quarantine");
  fs::remove_all(sd + "/tmp");
  fs::create_symlink(victim.dir, sd + "/tmp");
  CHECK_THROWS_WITH(cache.clear(), Contains("tmp is a symbolic link") && Contains("removes nothing"));
  CHECK_THROWS_WITH(cache.gc(), Contains("tmp is a symbolic link"));
  CHECK(victim.intact());
}

TEST_CASE("gc and clear apply the trust rules of reads and writes", "[reliability][cache][gc]") {
  TempRoot root;
  const KernelKey k = test_key();
  const std::string entry = published_entry(root, k);
  KernelCache cache(opts(root));
  REQUIRE(::chmod(root.path.c_str(), 0777) == 0);
  CHECK_THROWS_WITH(cache.clear(), Contains("writable by all users") && Contains("removes nothing"));
  CHECK_THROWS_WITH(cache.gc(), Contains("writable by all users"));
  CHECK(fs::exists(entry + "/kernel.cubin"));
  REQUIRE(::chmod(root.path.c_str(), 0700) == 0);
  if (::geteuid() == 0) {
    // Owned by another user (only root can hand a directory to someone else).
    REQUIRE(::chown(root.path.c_str(), kNobodyForTests, kNobodyForTests) == 0);
    CHECK_THROWS_WITH(cache.clear(), Contains("owned by another user"));
    CHECK(fs::exists(entry + "/kernel.cubin"));
    REQUIRE(::chown(root.path.c_str(), 0, 0) == 0);
  }
  // An architecture directory others can write is skipped, the rest cleared.
  const std::string other = cache.schema_dir() + "/sm_120a";
  fs::create_directories(other + "/feedface");
  REQUIRE(::chmod(other.c_str(), 0777) == 0);
  CHECK(cache.clear() == 1);
  CHECK(fs::exists(other + "/feedface"));
  CHECK_FALSE(fs::exists(entry));
}

TEST_CASE("verify agrees with the runtime where the runtime refuses the whole cache", "[reliability][cache][verify]") {
  for (const char* how : {"tmp is a file", "tmp is world-writable", "root is world-writable"}) {
    INFO(how);
    TempRoot root;
    const KernelKey k = test_key();
    published_entry(root, k);
    KernelCache cache(opts(root));
    const std::string tmp = cache.schema_dir() + "/tmp";
    if (std::string(how) == "tmp is a file") {
      fs::remove_all(tmp);
      write_text(tmp, "");
    } else if (std::string(how) == "tmp is world-writable") {
      fs::create_directories(tmp);
      REQUIRE(::chmod(tmp.c_str(), 0777) == 0);
    } else {
      REQUIRE(::chmod(root.path.c_str(), 0777) == 0);
    }
    const std::string refused = cache.refused_reason();
    CHECK_FALSE(refused.empty());
    // The runtime's side: nothing is read from disk.
    CHECK_FALSE(cache.get(k)->from_disk);
    // verify's side: the entry is not valid, for that same reason, and is left in place.
    const auto verified = cache.verify();
    REQUIRE(verified.size() == 1);
    CHECK_FALSE(verified[0].valid);
    CHECK_FALSE(verified[0].trusted);
    CHECK_THAT(verified[0].problem, Contains(refused));
    CHECK(fs::exists(verified[0].path));

    ScopedEnv env{"MOEJIT_CACHE_DIR"};
    env.set("MOEJIT_CACHE_DIR", root.path);
    const auto r = moejit_test::run_cli({"cache", "verify"});
    INFO(r.out);
    CHECK(r.rc == 1);
    CHECK_THAT(r.out, Contains("refused") && Contains(refused) && Contains("0 valid"));
    REQUIRE(::chmod(root.path.c_str(), 0700) == 0);
  }
}
