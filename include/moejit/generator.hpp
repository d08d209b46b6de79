#pragma once
// The generator turns a key into a short CUDA source that instantiates device code from templates/.
// Generated source includes only the embedded templates (no toolkit headers). Each kernel family's rules,
// source and geometry live in generator/families/; these functions dispatch to the key's family.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moejit/key.hpp"

namespace moejit {

struct GeneratedSource {
  std::string name;    // file name given to NVRTC, e.g. "<entry>.cu"
  std::string entry;   // extern "C" kernel name
  std::string source;  // the generated translation unit
};

// Deterministic: the same key always yields byte-identical source. Throws moejit::Error for keys
// the generator cannot build.
GeneratedSource generate_source(const KernelKey& key);

// Threads per CTA of a key's kernel. Pure; throws moejit::Error for a key that does not normalize.
int kernel_threads(const KernelKey& key);
// Dynamic shared memory, in bytes, a key's kernel is launched with (0 for kernels without). Pure; throws
// moejit::Error for a key that does not normalize.
int kernel_dynamic_smem(const KernelKey& key);
// CTAs per SM a key's kernel is built for: its launch bounds cap registers so that this many fit. Pure;
// throws moejit::Error for a key that does not normalize.
int kernel_ctas_per_sm(const KernelKey& key);

// `moejit bench`'s read floor: a kernel (no key, never cached) that only streams n16 x 16 contiguous
// bytes, moejit_read_floor(const char* p, unsigned long long n16, unsigned* sink), 512 threads per CTA.
GeneratedSource read_floor_source();

// Embedded template headers as (file name, content) pairs, in a fixed order.
std::vector<std::pair<std::string, std::string>> template_headers();
// Hash (hex) of all template contents; part of every cache hash.
std::string templates_digest();

}  // namespace moejit
