#pragma once
// A kernel key names everything that changes generated code (DESIGN §4). Runtime values (M, alpha,
// beta, limit value, pointers) are kernel arguments, never key fields.
#include <compare>
#include <string>
#include <string_view>

#include "moejit/types.hpp"

namespace moejit {

// Kernel kinds, each of one family (generator/families/: prepare, route, decode, batch). prepare repacks
// logical weights into the kernels' layout; route builds the routed pairs' lists; the decode family is
// decode_fc1 (or decode_fc1_loop, decode_fc1_stream) + decode_fc2 (or decode_fc2_sum), or decode_fused
// in one cooperative launch; the batch family is batch_fc1 + batch_fc2 (whose module holds the top-k
// combine); the prefill family is prefill_fc1 (whose module holds the gather) + prefill_fc2 (and the
// combine). generator/families/decode.hpp and batch.hpp describe each kind.
enum class KernelKind { prepare, route, decode_fc1, decode_fc2, decode_fused, decode_fc2_sum, decode_fc1_loop,
                        decode_fc1_stream, batch_fc1, batch_fc2, prefill_fc1, prefill_fc2, act_quant };
std::string_view to_string(KernelKind k);
KernelKind parse_kernel_kind(std::string_view s);

struct KernelKey {
  KernelKind kind = KernelKind::decode_fc1;
  Arch arch = Arch::sm_90a;
  ScaleFormat format = ScaleFormat::mxfp4;
  Activation activation = Activation::silu;
  ActPrecision precision = ActPrecision::a16;
  int experts = 0;
  int hidden = 0;
  int intermediate = 0;
  int warps = 4;     // warps per CTA
  int ntiles = 1;    // 8-token MMA column tiles held in registers per pass over the weights
  int depth = 1;     // 64-wide K chunks each warp keeps in flight ahead of the one it computes
  int min_blocks = 0;  // CTAs per SM the register allocation must allow (0: the generator's rule)
  int parts = 1;     // decode_fc2_sum: K parts per expert, each a unit of work for one warp; decode_fc1_stream:
                     // chunks per consumer warp in a stage (1 elsewhere)
  // decode_fc2_sum: CTAs per 16-row slab. Each takes every groups-th block of `warps` units (whole
  // expert slots), writes its pairs' rows to the fp32 partial buffer, and the last of them (a ticket)
  // sums each token's pairs in slot order; 1 sums inside the one CTA. Tile suffix g<n>, after p<n>.
  int groups = 1;
  // batch_fc1 / batch_fc2: 16-row slabs per warp, 1 or 2 (tile suffix s2).
  // decode_fc2_sum: 16-row slabs per CTA, 1 or 2. With 2, each warp carries two adjacent slabs of its
  // expert through every chunk (two weight runs in flight per lane for one set of activation pieces, as
  // FC1 carries its gate and up rows), so its chain of chunks is half as long for the same bytes.
  // Tile suffix s<n>, after g<n>.
  int slabs = 1;
  // Decode kernels: MMA columns per n-tile that carry a pair, 8, or 4 (even columns only: half the
  // block-scale FMAs, a pass covers 4 pairs per n-tile; planned where no expert serves more than 4 pairs).
  int columns = 8;
  // Register-fed decode kernels: chunks past its register ring each warp asks the L2 for ahead of its
  // loads (prefetch.global.L2, no register held), 0..16; 0 asks for nothing. Tile suffix f<n>.
  int l2_ahead = 0;
  // decode_fc1 at one token: each warp copies its K part of the token's x row, times 2^64, into shared
  // memory once and reads its MMA pieces from there (no per-step global load and multiply). Tile
  // suffix x.
  bool x_staged = false;
  // batch_fc1 / batch_fc2 on sm_90a: the product on warpgroup MMA (templates/moe_batch_wgmma.cuh: warps in
  // whole warpgroups, one slab each, the token tile of 8 * ntiles pairs, up to 256, as the shared-memory B
  // operand). FC1 and FC2 of a forward must agree (their activation layout differs). Tile suffix m.
  bool wgmma = false;
  bool bias = false;
  bool limit = false;
  // Decode kernels route inside each CTA (E <= 1024): no route launch. 0: the route kernel's lists; 1:
  // up to 64 pairs (M*K); 2: up to 128. Key field i<0|1|2>.
  int inline_route = 0;
  // Which prepared scale planes the kernel reads in the compressed scale format (docs/CSF.md §8) instead
  // of plain bytes, a bit mask: 1 FC1's plane, 2 FC2's. a16 FC1 kernels (decode_fc1*, batch_fc1,
  // prefill_fc1) keep bit 1, a16 FC2 kernels bit 2, decode_fused both; other kinds and a8/a4 keys 0. The
  // prepared layer decides (a CSF layer's planes), not the planner. Tile suffix z<mask>, last.
  int csf_scales = 0;

  // Canonical string, e.g. "decode_fc1:sm_90a:mxfp4:swigluoai:a16:E128:H2880:I2880:w4n1d2o0:b1:l1:i0"
  // (the tile ends in p<parts> when parts != 1: "w8n1d8o2p2", then in g<groups> when groups != 1:
  // "w8n1d1o3p2g2", then in s<slabs> when slabs != 1: "w16n1d1o1p4s2", then in c<columns> when columns != 8:
  // "w4n1d1o8c4", then in f<l2_ahead> when l2_ahead != 0: "w8n1d1o4c4f2", then in x when x_staged:
  // "w4n1d1o8c4x", or in m when wgmma: "w8n16d3o1m", then in z<csf_scales> when csf_scales != 0: "w4n1d1o8c4xz1").
  std::string str() const;
  // Parses str() output back; throws moejit::Error naming the bad field.
  static KernelKey parse(std::string_view s);
  // Fields a kind ignores are reset to defaults so one kernel has exactly one key; throws on
  // values the generator cannot build (sizes not multiples of the scale block, warps out of range).
  KernelKey normalized() const;
  // extern "C" entry name derived from the key ("moejit_" + str() with ':' -> '_').
  std::string entry_name() const;

  auto operator<=>(const KernelKey&) const = default;
};

}  // namespace moejit
