// The decode family's key rules, generated source and geometry (its plan: decode_plan.cpp).
#include "generator/families/decode.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "generator/families/family.hpp"
#include "moejit/error.hpp"

namespace moejit::detail {
namespace {

constexpr std::pair<KernelKind, std::string_view> kKinds[] = {
    {KernelKind::decode_fc1, "decode_fc1"},           {KernelKind::decode_fc2, "decode_fc2"},
    {KernelKind::decode_fused, "decode_fused"},       {KernelKind::decode_fc2_sum, "decode_fc2_sum"},
    {KernelKind::decode_fc1_loop, "decode_fc1_loop"}, {KernelKind::decode_fc1_stream, "decode_fc1_stream"}};

bool is_fc2(KernelKind kind) { return kind == KernelKind::decode_fc2 || kind == KernelKind::decode_fc2_sum; }

void normalize(KernelKey& k, const KernelKey& original) {
  auto fail = [&](std::string_view rule) { throw Error(fmt::format("kernel key {}: {}", original.str(), rule)); };
  k.wgmma = false;  // warpgroup MMA is the batch family's
  normalize_common(k, original, 8);  // the register-fed MMAs keep up to 8 n-tiles
  if (k.kind == KernelKind::decode_fc1_stream && k.warps > 31)
    fail("decode_fc1_stream adds a producer warp, so warps must be in [1, 31]");
  if (k.kind != KernelKind::decode_fc2_sum && k.kind != KernelKind::decode_fc1_stream) k.parts = 1;
  if (k.kind != KernelKind::decode_fc2_sum) k.groups = 1;
  if (k.kind != KernelKind::decode_fc2_sum) k.slabs = 1;
  if (k.kind == KernelKind::decode_fc2_sum) {
    if (k.slabs > 1) {
      if (k.groups != 1) fail("FC2-sum over 2 slabs per CTA keeps each slab in one CTA (groups 1)");
      if (k.hidden % (16 * k.slabs))
        fail(fmt::format("hidden must be a multiple of {} rows for {} slabs per CTA", 16 * k.slabs, k.slabs));
    }
    // FC2-sum keeps every pair's raw sums per K part and slab in static shared memory, 64 B each: 8 parts
    // x slabs over 64 pairs (i1), 4 over 128 (i2).
    const int raw_sums = k.inline_route == 2 ? 4 : 8;
    if (k.parts * k.slabs > raw_sums)
      fail(fmt::format("FC2-sum over {} pairs (i{}) takes at most {} parts of raw sums per slab: parts x slabs must be "
                       "at most {}",
                       k.inline_route == 2 ? 128 : 64, k.inline_route, raw_sums, raw_sums));
  }
  // A slot's K parts must stay in one CTA: its units then form whole blocks of `warps`.
  if (k.groups > 1 && k.warps % k.parts != 0) fail("with groups > 1 the warps must be a multiple of the parts");
  // Only the register-fed kernels walk a ring that can run ahead of (decode_fc1_stream copies whole
  // stages into shared memory instead).
  if (k.kind == KernelKind::decode_fc1_stream) k.l2_ahead = 0;
  // Only FC1's grid kernel stages x (one item per CTA; the layer input is complete at launch).
  if (k.kind != KernelKind::decode_fc1) k.x_staged = false;
  // docs/DECISIONS.md, "Precision": the streamed FC1 computes in a16 only; the planner keeps a8/a4 on the
  // register-fed FC1 kernels.
  if (k.kind == KernelKind::decode_fc1_stream && k.precision != ActPrecision::a16)
    fail(fmt::format("decode_fc1_stream computes in a16 only, not {} (use decode_fc1 or decode_fc1_loop)",
                     to_string(k.precision)));
  if (k.x_staged && k.ntiles != 1) fail("a staged x row serves one 8-column tile (ntiles 1)");
  // a8's FC1 CTA computes both slabs of a scale block with a group of warps each, within 1024 threads.
  if (decode_fc1_slab_groups(k) == 2 && k.warps > 16)
    fail("a8's decode FC1 CTA holds two slab groups of `warps` warps, so warps must be in [1, 16]");
  if ((k.kind == KernelKind::decode_fc2_sum || k.kind == KernelKind::decode_fc1_loop ||
       k.kind == KernelKind::decode_fc1_stream) &&
      !k.inline_route)
    fail(fmt::format("{} routes inline only (i1)", to_string(k.kind)));
  if (is_fc2(k.kind)) {
    // FC2 does not see the activation; the limit is an FC1 concern.
    k.activation = Activation::silu;
    k.limit = false;
  }
}

int threads(const KernelKey& key) {
  return (key.warps * decode_fc1_slab_groups(key) + (key.kind == KernelKind::decode_fc1_stream ? 1 : 0)) * 32;
}

// A staged x row: each warp's part at 128 bytes per chunk after 256 bytes of zeros (every slab group
// stages its own copy).
int staged_x_bytes(const KernelKey& key) {
  const int chunks = (key.hidden + 63) / 64;
  return decode_fc1_slab_groups(key) * key.warps * (256 + (chunks + key.warps - 1) / key.warps * 128);
}

// FC1's cross-warp reduction buffer (templates/moe_decode_fc1.cuh: red), an area per slab group.
int fc1_reduction_bytes(const KernelKey& key) {
  return key.warps > 1 ? decode_fc1_slab_groups(key) * key.warps * key.ntiles * fc1_mats(key) * 4 * 32 * 4 : 0;
}

// The streaming ring of decode_fc1_stream: barriers, then depth stages of warps x parts chunks
// (templates/slab_stream.cuh: SlabStreamRing::kBytes).
int stream_ring_bytes(const KernelKey& key) {
  const int barriers = (2 * key.depth * 8 + 127) / 128 * 128;
  // With CSF scales the consumers read their scale bytes from their CSF stages: the ring holds weights only.
  const int scale_bytes = (key.csf_scales & 1) ? 0 : chunk_scale_bytes(key);
  return barriers + key.depth * key.warps * key.parts * fc1_mats(key) * (512 + scale_bytes);
}

// One CSF stage array (templates/csf_scales.cuh CsfStage): `warps` areas of the plain scale bytes of a
// part's chunks (ceil(chunks / parts) of `mats` matrices each).
int csf_stage_array_bytes(const KernelKey& key, int k, int mats, int parts) {
  const int chunks = (k + 63) / 64;
  return key.warps * ((chunks + parts - 1) / parts) * mats * chunk_scale_bytes(key);
}
// The CSF stage of FC1's plane (every FC1 kind: K parts = warps) and of FC2's (decode_fc2 and the fused
// kernel's second phase: parts = warps, one slab; decode_fc2_sum: its parts and slabs per CTA); 0 where
// the key reads the plane plainly.
int fc1_csf_stage_bytes(const KernelKey& key) {
  return (key.csf_scales & 1) ? csf_stage_array_bytes(key, key.hidden, fc1_mats(key), key.warps) : 0;
}
int fc2_csf_stage_bytes(const KernelKey& key) {
  if (!(key.csf_scales & 2)) return 0;
  return key.kind == KernelKind::decode_fc2_sum ? csf_stage_array_bytes(key, key.intermediate, key.slabs, key.parts)
                                                : csf_stage_array_bytes(key, key.intermediate, 1, key.warps);
}

// Static shared memory of a decode CTA besides its CSF stages, at most (templates/moe_decode_*.cuh):
// the cross-warp reduction or raw-sum buffer, the routing state (the inline routing list's size bounds
// the per-CTA routing state too), a staged x row, and a few words.
int fc1_static_bytes(const KernelKey& key) {
  return fc1_reduction_bytes(key) + (key.x_staged ? staged_x_bytes(key) : 0) + inline_route_list_bytes(key) + 16;
}
int fc2_static_bytes(const KernelKey& key) {
  const int red = key.kind == KernelKind::decode_fc2_sum
                      ? std::max(inline_route_pairs(key), kInlineRoutePairsNarrow) * key.parts * 16 * key.slabs * 4
                      : (key.warps > 1 ? key.warps * key.ntiles * 4 * 32 * 4 : 4);
  return red + inline_route_list_bytes(key) + 16;
}
int other_static_bytes(const KernelKey& key) {
  switch (key.kind) {
    case KernelKind::decode_fc2:
    case KernelKind::decode_fc2_sum: return fc2_static_bytes(key);
    case KernelKind::decode_fused: return fc1_static_bytes(key) + fc2_static_bytes(key);
    default: return fc1_static_bytes(key);
  }
}

// The stages' bytes: static arrays (the fused kernel's two phases share one where their sizes agree), or in
// dynamic shared memory, where both phases start at the same byte.
int csf_stage_bytes(const KernelKey& key, bool dynamic) {
  const bool fc2_kind = key.kind == KernelKind::decode_fc2 || key.kind == KernelKind::decode_fc2_sum;
  const int fc1 = fc2_kind ? 0 : fc1_csf_stage_bytes(key);
  const int fc2 = fc2_kind || key.kind == KernelKind::decode_fused ? fc2_csf_stage_bytes(key) : 0;
  return dynamic || fc1 == fc2 ? std::max(fc1, fc2) : fc1 + fc2;
}

// Static shared memory a kernel may declare.
constexpr int kStaticSmemLimit = 48 * 1024;

// Whether the key's CSF stages go to dynamic shared memory (templates/csf_scales.cuh csf_stage_area):
// only where they do not fit in static shared memory beside the kernel's other arrays, so that a launch
// keeps the carveout the driver picks (a launch with dynamic shared memory asks for the largest).
bool csf_stage_dynamic(const KernelKey& key) {
  const int stage = csf_stage_bytes(key, false);
  return stage > 0 && other_static_bytes(key) + stage > kStaticSmemLimit;
}

int dynamic_smem(const KernelKey& key) {
  const int ring = key.kind == KernelKind::decode_fc1_stream ? stream_ring_bytes(key) : 0;
  return ring + (csf_stage_dynamic(key) ? csf_stage_bytes(key, true) : 0);
}

// The register-fed kinds, whose chunk loop is shaped by their register cap.
bool register_fed(KernelKind kind) { return kind != KernelKind::decode_fc1_stream; }

// decode_fc1, decode_fc1_loop and decode_fused (the fused kernel runs FC1's tile for both phases).
std::string fc1_source(const KernelKey& key, const std::string& entry) {
  // A staged x row is static shared memory beside the cross-warp reduction buffer and the routing state
  // (templates/moe_decode_fc1.cuh): each warp's part at 128 bytes per chunk after 256 bytes of zeros
  // (slab_mma.cuh: kStageZeros), all within the 48 KiB a kernel may declare statically (1 KiB kept for
  // the routing state).
  if (key.x_staged) {
    const int stage_bytes = staged_x_bytes(key), reduction_bytes = fc1_reduction_bytes(key);
    if (stage_bytes + reduction_bytes > 47 * 1024)
      throw Error(fmt::format("kernel key {}: a staged x row takes {} bytes of shared memory, more than the {} left "
                              "beside the reduction buffer",
                              key.str(), stage_bytes, 47 * 1024 - reduction_bytes));
  }
  const bool fused = key.kind == KernelKind::decode_fused;
  const char* function = fused                                      ? "moe_decode_fused"
                         : key.kind == KernelKind::decode_fc1_loop ? "moe_decode_fc1_loop"
                                                                    : "moe_decode_fc1";
  // The size check above counts kStageZeros' 256 bytes; the generated source holds the template to it.
  const char* stage_check =
      key.x_staged ? "static_assert(kStageZeros * 8 == 256, \"host and device staged-x sizes differ\");\n" : "";
  return fmt::format(
      "#include \"{header}.cuh\"\n{stage_check}"
      "extern \"C\" __global__ void __launch_bounds__({threads}, {min_blocks}) {entry}(const {params} p) {{\n"
      "  {function}<{nvfp4}, {act}, {limit}, {bias}, {experts}, {hidden}, {intermediate}, {warps}, {ntiles}, "
      "{columns}, {depth}, {inline_route}, {prefetch_x}>(p);\n}}\n",
      fmt::arg("header", fused ? "moe_decode_fused" : "moe_decode_fc1"), fmt::arg("stage_check", stage_check),
      fmt::arg("threads", threads(key)), fmt::arg("min_blocks", decode_ctas_per_sm(key)), fmt::arg("entry", entry),
      fmt::arg("params", fused ? "DecodeFusedParams" : "DecodeFc1Params"), fmt::arg("function", function),
      fmt::arg("nvfp4", cpp_bool(key.format == ScaleFormat::nvfp4)), fmt::arg("act", act_code(key.activation)),
      fmt::arg("limit", cpp_bool(key.limit)), fmt::arg("bias", cpp_bool(key.bias)), fmt::arg("experts", key.experts),
      fmt::arg("hidden", key.hidden), fmt::arg("intermediate", key.intermediate), fmt::arg("warps", key.warps),
      fmt::arg("ntiles", key.ntiles), fmt::arg("columns", key.columns), fmt::arg("depth", key.depth),
      fmt::arg("inline_route", cpp_bool(key.inline_route != 0)),
      fmt::arg("prefetch_x", cpp_bool(decode_activation_ring(key))));
}

std::string fc1_stream_source(const KernelKey& key, const std::string& entry) {
  const int smem = stream_ring_bytes(key);
  const int most = arch_limits(key.arch).max_dynamic_smem;
  if (smem > most)
    throw Error(fmt::format("kernel key {}: the ring needs {} bytes of shared memory, more than the {} a CTA has on {}",
                            key.str(), smem, most, to_string(key.arch)));
  // The generated source's check that the device's ring (SlabStreamRing::kBytes) has the size the host
  // launches with.
  const std::string ring_check = fmt::format(
      "static_assert(SlabStreamRing<{nvfp4}, {mats}, {warps}, {depth}, {parts}, 0, {csf}>::kBytes == {bytes}, \"host and "
      "device ring sizes differ\");\n",
      fmt::arg("csf", cpp_bool((key.csf_scales & 1) != 0)),
      fmt::arg("nvfp4", cpp_bool(key.format == ScaleFormat::nvfp4)), fmt::arg("mats", fc1_mats(key)),
      fmt::arg("warps", key.warps), fmt::arg("depth", key.depth), fmt::arg("parts", key.parts),
      fmt::arg("bytes", smem));
  return "#include \"moe_decode_fc1_stream.cuh\"\n" + ring_check +
         fmt::format(
             "extern \"C\" __global__ void __launch_bounds__({threads}, {min_blocks}) {entry}(const DecodeFc1Params p) "
             "{{\n"
             "  moe_decode_fc1_stream<{nvfp4}, {act}, {limit}, {bias}, {experts}, {hidden}, {intermediate}, {warps}, "
             "{ntiles}, {columns}, {depth}, {parts}>(p);\n}}\n",
             fmt::arg("threads", threads(key)), fmt::arg("min_blocks", decode_ctas_per_sm(key)),
             fmt::arg("entry", entry), fmt::arg("nvfp4", cpp_bool(key.format == ScaleFormat::nvfp4)),
             fmt::arg("act", act_code(key.activation)), fmt::arg("limit", cpp_bool(key.limit)),
             fmt::arg("bias", cpp_bool(key.bias)), fmt::arg("experts", key.experts), fmt::arg("hidden", key.hidden),
             fmt::arg("intermediate", key.intermediate), fmt::arg("warps", key.warps), fmt::arg("ntiles", key.ntiles),
             fmt::arg("columns", key.columns), fmt::arg("depth", key.depth), fmt::arg("parts", key.parts));
}

// decode_fc2 and decode_fc2_sum: the same parameters but one, inline routing (decode_fc2) or K parts and
// groups (decode_fc2_sum, which always routes inline), and FC2-sum's slabs per CTA where not 1.
std::string fc2_source(const KernelKey& key, const std::string& entry) {
  const bool sum = key.kind == KernelKind::decode_fc2_sum;
  const char* function = sum ? "moe_decode_fc2_sum" : "moe_decode_fc2";
  return fmt::format(
      "#include \"{function}.cuh\"\n"
      "extern \"C\" __global__ void __launch_bounds__({threads}, {min_blocks}) {entry}(const DecodeFc2Params p) {{\n"
      "  {function}<{nvfp4}, {bias}, {experts}, {hidden}, {intermediate}, {warps}, {ntiles}, {columns}, {depth}, "
      "{variant}, {prefetch_x}{slabs}>(p);\n}}\n",
      fmt::arg("function", function), fmt::arg("threads", threads(key)),
      fmt::arg("min_blocks", decode_ctas_per_sm(key)), fmt::arg("entry", entry),
      fmt::arg("nvfp4", cpp_bool(key.format == ScaleFormat::nvfp4)), fmt::arg("bias", cpp_bool(key.bias)),
      fmt::arg("experts", key.experts), fmt::arg("hidden", key.hidden), fmt::arg("intermediate", key.intermediate),
      fmt::arg("warps", key.warps), fmt::arg("ntiles", key.ntiles), fmt::arg("columns", key.columns),
      fmt::arg("depth", key.depth),
      fmt::arg("variant", sum ? fmt::format("{}, {}", key.parts, key.groups) : std::string(cpp_bool(key.inline_route != 0))),
      fmt::arg("prefetch_x", cpp_bool(decode_activation_ring(key))),
      fmt::arg("slabs", sum && key.slabs != 1 ? fmt::format(", {}", key.slabs) : ""));
}

std::string source(const KernelKey& key, const std::string& entry) {
  std::string header = kernel_header(key, register_fed(key.kind) ? decode_register_cap(key) : 0);
  if (csf_stage_bytes(key, false) > 0) {
    // The CSF stages and the kernel's other shared memory must fit one CTA (static and dynamic together).
    const int most = arch_limits(key.arch).max_dynamic_smem, bytes = decode_cta_smem(key);
    if (bytes > most)
      throw Error(fmt::format("kernel key {}: with its CSF scale stages a CTA takes {} bytes of shared memory, more "
                              "than the {} a CTA has on {}",
                              key.str(), bytes, most, to_string(key.arch)));
    if (csf_stage_dynamic(key)) header += "#define MOEJIT_CSF_STAGE_DYNAMIC 1\n";
  }
  switch (key.kind) {
    case KernelKind::decode_fc1_stream: return header + fc1_stream_source(key, entry);
    case KernelKind::decode_fc2:
    case KernelKind::decode_fc2_sum: return header + fc2_source(key, entry);
    default: return header + fc1_source(key, entry);
  }
}

}  // namespace

int decode_fc1_slab_groups(const KernelKey& key) {
  const bool fc1 = key.kind == KernelKind::decode_fc1 || key.kind == KernelKind::decode_fc1_loop;
  return fc1 && key.precision == ActPrecision::a8 ? 2 : 1;
}

int decode_fc1_items_per_slot(const KernelKey& key) {
  const int slabs = key.intermediate / 16, groups = decode_fc1_slab_groups(key);
  return (slabs + groups - 1) / groups;
}

int staged_x_cta_bytes(const KernelKey& key) {
  return staged_x_bytes(key) + fc1_reduction_bytes(key) + inline_route_list_bytes(key);
}

int decode_cta_smem(const KernelKey& raw) {
  const KernelKey key = raw.normalized();
  return other_static_bytes(key) + (csf_stage_dynamic(key) ? 0 : csf_stage_bytes(key, false)) + dynamic_smem(key);
}

bool decode_smem_fits(const KernelKey& key) {
  const ArchLimits& arch = arch_limits(key.arch);
  const int bytes = decode_cta_smem(key);
  return bytes <= arch.max_dynamic_smem && decode_ctas_per_sm(key) * (bytes + arch.smem_reserved) <= arch.smem_per_sm;
}

int inline_route_pairs(const KernelKey& key) {
  return key.inline_route == 0 ? 0 : key.inline_route == 1 ? kInlineRoutePairsNarrow : kInlineRouteMaxPairs;
}

int inline_route_list_bytes(const KernelKey& key) {
  return 16 * std::max(inline_route_pairs(key), kInlineRoutePairsNarrow) + 264;
}

int decode_ctas_per_sm(const KernelKey& key) {
  // Decode kernels hide latency with resident warps: cap registers so that at least 512 threads per SM
  // stay resident. Wide token tiles (4+) keep their accumulators instead. A streaming kernel runs as
  // many CTAs as its shared memory allows. Never more than the architecture keeps resident.
  const ArchLimits& arch = arch_limits(key.arch);
  const int block = threads(key);
  const int resident = std::max(1, std::min(arch.max_ctas_per_sm, arch.max_threads_per_sm / block));
  if (key.min_blocks > 0) return std::min(key.min_blocks, resident);
  int ctas = key.ntiles >= 4 ? 1 : std::max(1, 512 / block);
  if (key.kind == KernelKind::decode_fc1_stream) {
    // Shared memory per CTA (static and dynamic) and what the driver reserves per CTA, out of the SM's.
    const int per_cta = decode_cta_smem(key) + arch.smem_reserved;
    ctas = std::max(1, std::min(arch.max_threads_per_sm / block, arch.smem_per_sm / per_cta));  // as many as fit
  }
  return std::min(ctas, resident);
}

int decode_register_cap(const KernelKey& key) {
  return std::min(255, 65536 / (decode_ctas_per_sm(key) * threads(key)));
}

bool decode_activation_ring(const KernelKey& raw) {
  // The ring costs ~16 registers per thread: FC1 and FC2-sum over two slabs (two matrices in flight) take
  // it only when the register cap leaves 80; FC2 over one slab always. Wider token tiles load
  // activations step by step.
  const KernelKey key = raw.normalized();
  const bool one_matrix =
      key.kind == KernelKind::decode_fc2 || (key.kind == KernelKind::decode_fc2_sum && key.slabs == 1);
  return key.ntiles == 1 && (one_matrix || decode_register_cap(key) >= 80);
}

Plan plan_decode(const PlanRequest& request);  // decode_plan.cpp

const KernelFamily kDecodeFamily{"decode",           kKinds,      Family::decode, normalize,       threads,
                                 dynamic_smem,       decode_ctas_per_sm, source,  plan_decode, kDecodeMaxTokens};

}  // namespace moejit::detail
