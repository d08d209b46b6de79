#pragma once
// One on-disk cache entry, <root>/v<schema>/<arch>/<hash>/{kernel.cubin, manifest.json}: how its hash
// is computed, what its manifest holds, and how a read is validated. Shared by KernelCache::get (which
// knows the expected key) and list/verify (which only have the directory).
#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "moejit/compiler.hpp"
#include "moejit/key.hpp"

namespace moejit::detail {

inline constexpr const char* kCubinFile = "kernel.cubin";
inline constexpr const char* kManifestFile = "manifest.json";

// Every input that changes the cubin (DESIGN §5): schema version, key, generated source, template
// digest, NVRTC version and build, options, architecture.
nlohmann::json entry_hash_inputs(const KernelKey& key, const GeneratedSource& src);
// SHA-256 (hex) of the canonical JSON of the inputs (nlohmann objects are key-sorted, so the dump is
// deterministic). Throws moejit::Error when the source is not valid UTF-8.
std::string entry_hash(const nlohmann::json& inputs);

nlohmann::json entry_manifest(const nlohmann::json& inputs, const std::string& hash, const CompileOutput& out);

enum class EntryStatus {
  ok,
  missing,    // nothing at the path: a plain miss
  damaged,    // present but unusable: quarantine and rebuild
  untrusted,  // other users could have written it: never loaded, left in place, warned about
};

struct EntryRead {
  EntryStatus status = EntryStatus::missing;
  std::string problem;
  nlohmann::json manifest;  // parsed manifest when it could be parsed (also for some damaged entries)
  std::vector<char> cubin;  // only when ok
  bool have_id = false;     // dev/ino of what was read, so only that object is ever quarantined
  dev_t dev = 0;
  ino_t ino = 0;
};

// Reads and validates the entry at dir: trust of the entry directory and its files, manifest JSON and
// schema, manifest hash == expected_hash == SHA-256 of its hash inputs, key (when expected_key is not
// empty), architecture (when expected_arch is not empty), cubin size and checksum. Never throws for
// anything found on disk.
EntryRead read_entry(const std::string& dir, const std::string& expected_hash, const std::string& expected_key,
                     std::string_view expected_arch);

}  // namespace moejit::detail
