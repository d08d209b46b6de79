// Generator: a key becomes a short translation unit that instantiates one template of templates/.
#include "moejit/generator.hpp"

#include <fmt/format.h>

#include "core/sha256.hpp"
#include "generator/embedded_files.hpp"
#include "generator/families/family.hpp"

namespace moejit {

int kernel_threads(const KernelKey& raw) {
  const KernelKey key = raw.normalized();
  return detail::family_of(key.kind).threads(key);
}

int kernel_dynamic_smem(const KernelKey& raw) {
  const KernelKey key = raw.normalized();
  return detail::family_of(key.kind).dynamic_smem(key);
}

int kernel_ctas_per_sm(const KernelKey& raw) {
  const KernelKey key = raw.normalized();
  return detail::family_of(key.kind).ctas_per_sm(key);
}

GeneratedSource generate_source(const KernelKey& raw) {
  const KernelKey key = raw.normalized();
  GeneratedSource out;
  out.entry = key.entry_name();
  out.name = out.entry + ".cu";
  out.source = detail::family_of(key.kind).source(key, out.entry);
  return out;
}

GeneratedSource read_floor_source() {
  // Every thread keeps four 16-byte streaming loads in flight (templates/read_stream.cuh) and folds them
  // into one word, written only if it matches a value the data never produces (so the loads cannot be
  // dropped).
  static constexpr const char* kSource = R"(// moejit bench read floor
#include "read_stream.cuh"
extern "C" __global__ void __launch_bounds__(512) moejit_read_floor(const char* p, unsigned long long n16,
                                                                    unsigned* sink) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned acc = read_stream(p, n16, (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x, stride);
  if (acc == 0x9E3779B9u) *sink = acc;
}
)";
  return GeneratedSource{"moejit_read_floor.cu", "moejit_read_floor", kSource};
}

std::vector<std::pair<std::string, std::string>> template_headers() {
  std::vector<std::pair<std::string, std::string>> v;
  for (const auto& f : detail::embedded_templates()) v.emplace_back(std::string(f.name), std::string(f.content));
  return v;
}

std::string templates_digest() {
  // SHA-256, like the cache hash it feeds: a template edit must change every key's cache directory, and
  // a collision would hand the driver a cubin built from other sources. Each name and content is
  // preceded by its length so that no two template sets feed the same bytes. The embedded templates
  // never change while the process runs, so the digest is computed once.
  static const std::string digest = [] {
    detail::Sha256 h;
    auto feed = [&](std::string_view s) {
      uint8_t len[8];
      for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(s.size()) >> (8 * i));
      h.update(len, sizeof(len));
      h.update(s);
    };
    for (const auto& f : detail::embedded_templates()) {
      feed(f.name);
      feed(f.content);
    }
    return h.hex();
  }();
  return digest;
}

}  // namespace moejit
