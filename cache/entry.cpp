// Cache entry format and validation (see entry.hpp). A read trusts nothing it finds on disk: every
// field it relies on is type-checked, and any inconsistency makes the entry "damaged" (quarantined and
// rebuilt by the caller) rather than an exception or a loaded-but-wrong cubin.
#include "cache/entry.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "core/fs.hpp"
#include "core/sha256.hpp"
#include "moejit/error.hpp"
#include "moejit/kernel_cache.hpp"
#include "reference/json_limits.hpp"

namespace moejit::detail {
namespace {

using json = nlohmann::json;

constexpr std::size_t kMaxManifestBytes = std::size_t(64) << 20;
constexpr std::size_t kMaxCubinBytes = std::size_t(1) << 30;

std::string iso8601_now() {
  std::time_t t = std::time(nullptr);
  struct tm tm;
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

EntryRead fail(EntryRead r, EntryStatus status, std::string problem) {
  r.status = status;
  r.problem = std::move(problem);
  r.cubin.clear();
  return r;
}

// Validates the manifest against the directory it was found in; returns the problem or "".
std::string manifest_problem(const json& m, const std::string& expected_hash, const std::string& expected_key,
                             std::string_view expected_arch) {
  if (!m.is_object()) return "manifest.json is not a JSON object";
  auto schema = m.find("schema");
  if (schema == m.end() || !schema->is_number_integer()) return "manifest.json has no integer schema";
  if (schema->get<long long>() != kCacheSchemaVersion)
    return fmt::format("entry of cache schema {}, this build uses schema {}", schema->get<long long>(),
                       kCacheSchemaVersion);
  auto hash = m.find("hash");
  if (hash == m.end() || !hash->is_string()) return "manifest.json has no hash";
  if (hash->get<std::string>() != expected_hash)
    return fmt::format("manifest hash {} does not match the entry directory {}", hash->get<std::string>(),
                       expected_hash);
  auto inputs = m.find("hash_inputs");
  if (inputs == m.end() || !inputs->is_object()) return "manifest.json has no hash_inputs";
  std::string recomputed;
  try {
    recomputed = entry_hash(*inputs);
  } catch (const Error&) {
    return "manifest hash_inputs cannot be hashed";
  }
  if (recomputed != expected_hash) return "manifest hash_inputs do not hash to the entry's hash";
  auto key = m.find("key");
  if (key == m.end() || !key->is_string()) return "manifest.json has no key";
  if (!expected_key.empty() && key->get<std::string>() != expected_key)
    return fmt::format("manifest key {} is not the requested key {}", key->get<std::string>(), expected_key);
  if (inputs->value("key", json()) != *key) return "manifest key differs from its hash inputs";
  auto arch = m.find("arch");
  if (arch == m.end() || !arch->is_string()) return "manifest.json has no arch";
  if (!expected_arch.empty() && arch->get<std::string>() != expected_arch)
    return fmt::format("manifest arch {} is not the directory's architecture {}", arch->get<std::string>(),
                       expected_arch);
  if (inputs->value("arch", json()) != *arch) return "manifest arch differs from its hash inputs";
  auto entry = m.find("entry");
  if (entry == m.end() || !entry->is_string()) return "manifest.json has no entry name";
  if (inputs->value("entry", json()) != *entry) return "manifest entry differs from its hash inputs";
  auto cubin = m.find("cubin");
  if (cubin == m.end() || !cubin->is_object() || !cubin->contains("size") || !(*cubin)["size"].is_number_unsigned() ||
      !cubin->contains("sha256") || !(*cubin)["sha256"].is_string())
    return "manifest.json has no cubin size/sha256";
  return {};
}

}  // namespace

json entry_hash_inputs(const KernelKey& key, const GeneratedSource& src) {
  return json{
      {"schema", kCacheSchemaVersion},
      {"key", key.str()},
      {"arch", std::string(to_string(key.arch))},
      {"entry", src.entry},
      {"source_name", src.name},
      {"source", src.source},
      {"templates_digest", templates_digest()},
      {"nvrtc_version", nvrtc_version()},
      {"nvrtc_build", nvrtc_build_id()},
      {"options", compile_options(key.arch)},
  };
}

std::string entry_hash(const json& inputs) {
  try {
    return sha256_hex(inputs.dump());
  } catch (const json::exception& e) {
    throw Error(fmt::format("kernel cache: cannot hash the inputs of a kernel (is the source valid UTF-8?): {}",
                            e.what()));
  }
}

json entry_manifest(const json& inputs, const std::string& hash, const CompileOutput& out) {
  return json{
      {"schema", kCacheSchemaVersion},
      {"key", inputs.at("key")},
      {"hash", hash},
      {"arch", inputs.at("arch")},
      {"entry", inputs.at("entry")},
      {"hash_inputs", inputs},
      {"nvrtc_version", inputs.at("nvrtc_version")},
      {"nvrtc_build", inputs.at("nvrtc_build")},
      {"options", out.options},
      {"cubin",
       {{"file", kCubinFile}, {"size", out.binary.size()}, {"sha256", sha256_hex(out.binary.data(), out.binary.size())}}},
      {"resources",
       {{"registers", out.registers},
        {"shared_bytes", out.shared_bytes},
        {"spill_bytes", out.spill_bytes},
        {"wgmma_serialized", out.wgmma_serialized}}},
      {"compile_seconds", out.seconds},
      {"compile_log", out.log},
      {"created", iso8601_now()},
  };
}

EntryRead read_entry(const std::string& dir, const std::string& expected_hash, const std::string& expected_key,
                     std::string_view expected_arch) {
  EntryRead r;
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return fail(std::move(r), EntryStatus::missing, "no entry");
    return fail(std::move(r), EntryStatus::untrusted, fmt::format("cannot stat {}: {}", dir, std::strerror(errno)));
  }
  r.have_id = true;
  r.dev = st.st_dev;
  r.ino = st.st_ino;
  if (!S_ISDIR(st.st_mode)) return fail(std::move(r), EntryStatus::damaged, "entry is not a directory");
  Fd fd;
  try {
    fd = open_dir(dir);
  } catch (const FsError& e) {
    if (e.err() == ENOENT) return fail(std::move(r), EntryStatus::missing, "no entry");
    return fail(std::move(r), EntryStatus::untrusted, e.what());
  }
  if (::fstat(fd.get(), &st) != 0) return fail(std::move(r), EntryStatus::untrusted, "cannot stat entry directory");
  r.dev = st.st_dev;
  r.ino = st.st_ino;
  if (auto why = untrusted_reason(st); !why.empty())
    return fail(std::move(r), EntryStatus::untrusted, fmt::format("entry directory is {}", why));

  // Manifest first: it says how large the cubin must be.
  std::vector<char> text;
  try {
    text = read_file_at(fd.get(), kManifestFile, kMaxManifestBytes, &st);
  } catch (const FsError& e) {
    return fail(std::move(r), e.err() == EACCES ? EntryStatus::untrusted : EntryStatus::damaged, e.what());
  }
  if (auto why = untrusted_reason(st); !why.empty())
    return fail(std::move(r), EntryStatus::untrusted, fmt::format("manifest.json is {}", why));
  // Depth first: a manifest of "[[[[..." must be set aside like any other damage, not overflow the stack
  // of whatever touches the parsed value (json_limits.hpp).
  if (auto why = json_depth_problem(std::string_view(text.data(), text.size())); !why.empty())
    return fail(std::move(r), EntryStatus::damaged, "manifest.json " + why);
  r.manifest = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (r.manifest.is_discarded()) {
    r.manifest = json();
    return fail(std::move(r), EntryStatus::damaged, "manifest.json is not valid JSON");
  }
  if (auto why = manifest_problem(r.manifest, expected_hash, expected_key, expected_arch); !why.empty())
    return fail(std::move(r), EntryStatus::damaged, why);

  const auto& c = r.manifest["cubin"];
  const auto want_size = c["size"].get<std::uint64_t>();
  if (want_size == 0 || want_size > kMaxCubinBytes)
    return fail(std::move(r), EntryStatus::damaged, fmt::format("implausible cubin size {}", want_size));
  try {
    r.cubin = read_file_at(fd.get(), kCubinFile, kMaxCubinBytes, &st);
  } catch (const FsError& e) {
    return fail(std::move(r), e.err() == EACCES ? EntryStatus::untrusted : EntryStatus::damaged, e.what());
  }
  if (auto why = untrusted_reason(st); !why.empty())
    return fail(std::move(r), EntryStatus::untrusted, fmt::format("kernel.cubin is {}", why));
  if (r.cubin.size() != want_size)
    return fail(std::move(r), EntryStatus::damaged,
                fmt::format("kernel.cubin has {} bytes, manifest says {}", r.cubin.size(), want_size));
  if (sha256_hex(r.cubin.data(), r.cubin.size()) != c["sha256"].get<std::string>())
    return fail(std::move(r), EntryStatus::damaged, "kernel.cubin checksum mismatch");
  if (r.cubin.size() < 4 || r.cubin[0] != 0x7f || r.cubin[1] != 'E' || r.cubin[2] != 'L' || r.cubin[3] != 'F')
    return fail(std::move(r), EntryStatus::damaged, "kernel.cubin is not an ELF file");
  r.status = EntryStatus::ok;
  return r;
}

}  // namespace moejit::detail
