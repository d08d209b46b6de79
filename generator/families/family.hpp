#pragma once
// The kernel families, one row each in one table (family_of): everything the generator and the planner
// know about a family lives in its own files, generator/families/<family>.cpp, behind this interface.
// The central KernelKey::normalized, generate_source and make_plan only dispatch through the table.
//
// Adding a family (checklist; docs/LAYOUT.md shows the tree):
//   1. Vocabulary: its KernelKind values (include/moejit/key.hpp) and, if the planner may pick it, a
//      Family value (include/moejit/types.hpp, with its name in core/types.cpp).
//   2. templates/moe_<family>_params.cuh: its kernel parameter structs, written once for the device and
//      the host (templates/kernel_params.cuh); templates/moe_<family>*.cuh: its device code, including
//      no other family's kernel header (shared pieces live in headers of their own).
//   3. generator/families/<family>.cpp: a KernelFamily row's functions (key rules, source, geometry,
//      and for a planned family its plan), and a declaration of that row in this header; add the row to
//      kFamilies in generator/families/table.cpp.
//   4. runtime/families/<family>.cpp: its launches, and a row in runtime/families/table.cpp.
//   5. tests/gpu_test_<family>.cpp: the family against the fp64 reference (small and real geometry,
//      every activation x format x bias x limit, tail shapes, skewed routing), and its keys and plans in
//      the CPU suite.
#include <fmt/args.h>

#include <span>
#include <string>
#include <string_view>

#include "moejit/generator.hpp"
#include "moejit/key.hpp"
#include "moejit/planner.hpp"
#include "moejit/tuning.hpp"

namespace moejit::detail {

// What the planner gives a family's plan function.
struct PlanRequest {
  const LayerSpec& spec;
  Arch arch;
  int tokens;    // M, 0..kMaxTokens
  int sm_count;  // > 0
  const TuningOverrides& tuning;
};

struct KernelFamily {
  std::string_view name;
  // The kernel kinds of the family, each with its canonical name (the key's first field).
  std::span<const std::pair<KernelKind, std::string_view>> kinds;
  // The Family value the planner knows it by; automatic for families no plan is made of (prepare, route).
  Family family;
  // The key rules: on a copy of the key, after the checks every kind shares (normalize_common, which the
  // family calls itself, so that it decides the limits), reset the fields the kind ignores and throw
  // moejit::Error naming `original` for values it cannot build.
  void (*normalize)(KernelKey& key, const KernelKey& original);
  // Threads per CTA of the key's kernel.
  int (*threads)(const KernelKey& key);
  // Dynamic shared memory, in bytes, the key's kernel is launched with.
  int (*dynamic_smem)(const KernelKey& key);
  // CTAs per SM the kernel's launch bounds are built for (registers are capped so that they fit).
  int (*ctas_per_sm)(const KernelKey& key);
  // The generated translation unit of a normalized key (entry: its extern "C" name).
  std::string (*source)(const KernelKey& key, const std::string& entry);
  // The kernels of a forward of request.tokens tokens, in launch order (planned families only).
  Plan (*plan)(const PlanRequest& request);
  // The largest M the family serves.
  int max_tokens;
};

// The row of a kind's family. Throws moejit::Error for a kind value no row holds.
const KernelFamily& family_of(KernelKind kind);
// The row the planner uses for a Family (not automatic). Throws moejit::Error for one no row holds.
const KernelFamily& planned_family(Family family);
// Every row, in table order.
std::span<const KernelFamily* const> kernel_families();

// The rows (generator/families/<family>.cpp).
extern const KernelFamily kPrepareFamily;
extern const KernelFamily kRouteFamily;
extern const KernelFamily kDecodeFamily;
extern const KernelFamily kBatchFamily;
extern const KernelFamily kPrefillFamily;
extern const KernelFamily kActQuantFamily;

// Shared pieces of the rows (generator/families/common.cpp).

// The checks every computing kind shares: experts, warps, hidden and intermediate against the scale
// block, ntiles in [1, max_ntiles], depth, min_blocks, inline routing's expert limit, the a16 precision,
// parts, groups, slabs, l2_ahead and columns in range.
void normalize_common(const KernelKey& k, const KernelKey& original, int max_ntiles);
// A layer's key fields for `arch` (kind and tile left at their defaults).
KernelKey layer_key(const LayerSpec& spec, Arch arch);
// The generated source's first lines: the key, the defines its key fields ask for, the register cap
// (when register_cap > 0: the chunk loop's shape depends on it) and the trace switch of a trace build.
std::string kernel_header(const KernelKey& key, int register_cap);
// The layer's template arguments by name, for a family's source formats: {nvfp4}, {act}, {limit}, {bias}
// (spelled as cpp_bool / act_code give them), {experts}, {hidden}, {intermediate}.
void push_layer_args(fmt::dynamic_format_arg_store<fmt::format_context>& args, const KernelKey& key);
// Template argument spellings.
const char* cpp_bool(bool b);
int act_code(Activation a);
// Matrices per FC1 slab chunk: gate and up, or one for relu2.
int fc1_mats(const KernelKey& key);
// Static shared memory of the a8 FC1 kernels with one slab per warp (the batch family's warpgroup-MMA
// tiles, prefill): the exchange area of the warp pairs that share a scale block of the intermediate
// (templates/slab_pair_max.cuh: one u32 per warp and token column). 0 for every other key.
int slab_pair_exchange_bytes(const KernelKey& key);
// Scale bytes per 64-wide chunk and matrix (templates/slab_mma.cuh: ScaleGeometry).
int chunk_scale_bytes(const KernelKey& key);
// Threads of a kernel whose CTA is the key's warps.
int warps_threads(const KernelKey& key);
// No dynamic shared memory.
int no_dynamic_smem(const KernelKey& key);
// Launch bounds without a CTAs-per-SM promise.
int one_cta_per_sm(const KernelKey& key);
// The source of wgmma_rs for an n-column tile (templates/wgmma.cuh): one m64nNk16 warpgroup MMA, bf16 A
// from four registers per thread, B by shared-memory descriptor, fp32 accumulators added to. Generated
// because the operand list is as long as the accumulator; overloads of different n may coexist.
std::string wgmma_rs_source(int n);

}  // namespace moejit::detail
