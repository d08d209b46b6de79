// The table of kernel families (generator/families/family.hpp: the checklist for adding one).
#include <fmt/format.h>

#include "generator/families/family.hpp"
#include "moejit/error.hpp"

namespace moejit::detail {
namespace {
constexpr const KernelFamily* kFamilies[] = {&kPrepareFamily, &kRouteFamily, &kDecodeFamily, &kBatchFamily,
                                               &kPrefillFamily, &kActQuantFamily};
}  // namespace

std::span<const KernelFamily* const> kernel_families() { return kFamilies; }

const KernelFamily& family_of(KernelKind kind) {
  for (const KernelFamily* f : kFamilies)
    for (const auto& [k, name] : f->kinds)
      if (k == kind) return *f;
  throw Error(fmt::format("kernel kind {} belongs to no family", static_cast<int>(kind)));
}

const KernelFamily& planned_family(Family family) {
  for (const KernelFamily* f : kFamilies)
    if (f->plan && f->family == family) return *f;
  throw Error(fmt::format("no kernel family is planned as '{}'", to_string(family)));
}

}  // namespace moejit::detail
