#pragma once
// The planner picks kernel family and tile from (M, K, E, H, I, SM count): a pure function of its
// arguments (it reads no environment; TuningOverrides carries the measurement overrides). Pure host
// code: the CLI's `plan` and `prewarm` use it without a GPU. Each family's tile choice lives in
// generator/families/; make_plan picks the family and dispatches.
#include <string>
#include <vector>

#include "moejit/key.hpp"
#include "moejit/tuning.hpp"
#include "moejit/types.hpp"

namespace moejit {

struct Plan {
  Family family = Family::decode;
  DecodeLaunch launch = DecodeLaunch::pdl;
  std::vector<KernelKey> kernels;  // in launch order
  int tokens = 0;
  std::string describe() const;    // one line for logs and the CLI
};

// Largest M the decode family serves.
inline constexpr int kDecodeMaxTokens = 256;
// Largest M one forward serves (the batch family's grids and the workspace's indices stay in range).
inline constexpr int kMaxTokens = 65536;
// From this many tokens on, the automatic plan is the batch family: the measured cutover in pairs per
// expert for the layer's expert size (perf-log v24), never while the decode family routes inline (M *
// top_k <= 128), and at most kDecodeMaxTokens + 1. Pure function of a valid spec's geometry (experts,
// top_k, hidden, intermediate, activation); thread-safe; does not throw.
int batch_from_tokens(const LayerSpec& spec);
// From this many tokens on, the automatic plan on `arch` is the prefill family: sm_90a only (its kernels
// run on warpgroup MMA), every activation precision, from 56 pairs per expert on average (perf-log v42: faster than the batch family
// at 64 and above, about 10 % slower at 48), and never before batch_from_tokens. kMaxTokens + 1 where the
// family is never planned. Pure and thread-safe; does not throw for a valid spec.
int prefill_from_tokens(const LayerSpec& spec, Arch arch);

// The kernels of a forward of `tokens` tokens. Pure and thread-safe: the same arguments always give the
// same plan. Throws moejit::Error for an invalid spec, tokens outside [0, kMaxTokens], or a forced family
// that cannot serve M.
Plan make_plan(const LayerSpec& spec, Arch arch, int tokens, int sm_count, Family force = Family::automatic,
               const TuningOverrides& tuning = {});
// The plan's kernels read the scale planes of `csf_scales` (PreparedLayer::csf_scales: bit 1 FC1's,
// 2 FC2's) in CSF, the batch and prefill families' those of `batched_csf_scales`
// (PreparedLayer::batched_csf_scales): sets each key's csf_scales, normalized per kind. Pure.
Plan with_csf_scales(Plan plan, int csf_scales, int batched_csf_scales);
// Every family the same planes.
Plan with_csf_scales(Plan plan, int csf_scales);
// The same for a key list, without duplicates (keys_for_range's).
std::vector<KernelKey> with_csf_scales(std::vector<KernelKey> keys, int csf_scales, int batched_csf_scales);
std::vector<KernelKey> with_csf_scales(std::vector<KernelKey> keys, int csf_scales);

// Every distinct key forward may need for 1..max_tokens tokens, with the same arguments.
std::vector<KernelKey> keys_for_range(const LayerSpec& spec, Arch arch, int max_tokens, int sm_count,
                                      Family force = Family::automatic, const TuningOverrides& tuning = {});

}  // namespace moejit
