// Which prepared scale plane a kernel reads: the plain plane, or, where its key's csf_scales names the
// plane, the prepared CSF plane (docs/CSF.md §8). Shared by every computing family.
#include <fmt/format.h>

#include "moejit/error.hpp"
#include "runtime/families/families.hpp"

namespace moejit::detail {

void select_scale_plane(const ForwardContext& ctx, const KernelKey& key, int plane, DevicePtr& s, DevicePtr& s_base,
                        DevicePtr& s_exc, CsfHeadFields heads) {
  const PreparedLayerImpl& L = ctx.layer;
  const bool fc1 = plane == 1;
  if (key.csf_scales & plane) {
    // The layer holds a prepared CSF plane for every plane its csf_scales names, which is where the
    // plan's csf_scales come from.
    if (!(fc1 ? L.fc1_csf : L.fc2_csf))
      throw Error(fmt::format("kernel {} reads CSF scales, but the layer holds none for its plane", key.str()));
    const PreparedLayerImpl::CsfBuffers& b = fc1 ? L.fc1_csf_s : L.fc2_csf_s;
    s = b.offsets.ptr();
    s_base = b.base.ptr();
    s_exc = b.exc.ptr();
    if (heads.head) *heads.head = b.head.ptr();
    if (heads.words) *heads.words = b.head_words;
    return;
  }
  const DeviceBuffer& plain = fc1 ? L.fc1_s : L.fc2_s;
  if (!plain.ptr())
    throw Error(fmt::format("kernel {} reads plain {} scales, but the layer was prepared with CSF scales only (its "
                            "plain planes dropped, docs/CSF.md §6)",
                            key.str(), fc1 ? "FC1" : "FC2"));
  s = plain.ptr();
  s_base = 0;
  s_exc = 0;
  if (heads.head) *heads.head = 0;
  if (heads.words) *heads.words = 0;
}

}  // namespace moejit::detail
