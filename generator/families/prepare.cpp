// The prepare family: the weight-repack kernels (templates/prepare_repack.cuh) that turn checkpoint-shaped
// FP4 weights and scales into the computing families' layout. One module per architecture: the layer's
// geometry is passed at run time.
#include <fmt/format.h>

#include "generator/families/family.hpp"

namespace moejit::detail {
namespace {

constexpr std::pair<KernelKind, std::string_view> kKinds[] = {{KernelKind::prepare, "prepare"}};

void normalize(KernelKey& k, const KernelKey&) {
  KernelKey r;
  r.kind = KernelKind::prepare;
  r.arch = k.arch;
  r.experts = 1;
  r.warps = 8;
  r.hidden = 0;
  r.intermediate = 0;
  k = r;
}

std::string source(const KernelKey& key, const std::string& entry) {
  return kernel_header(key, 0) +
         fmt::format("#include \"prepare_repack.cuh\"\n"
                     "extern \"C\" __global__ void __launch_bounds__({threads}) {entry}_weights(const RepackParams p) {{\n"
                     "  repack_weights(p);\n}}\n"
                     "extern \"C\" __global__ void __launch_bounds__({threads}) {entry}_scales(const RepackParams p) {{\n"
                     "  repack_scales(p);\n}}\n",
                     fmt::arg("threads", warps_threads(key)), fmt::arg("entry", entry));
}

}  // namespace

const KernelFamily kPrepareFamily{"prepare",       kKinds, Family::automatic, normalize, warps_threads,
                                  no_dynamic_smem, one_cta_per_sm, source,         nullptr, 0};

}  // namespace moejit::detail
