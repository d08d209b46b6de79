#pragma once
// The generator turns a key into a short CUDA source that instantiates device code from templates/.
// Generated source includes only the embedded templates (no toolkit headers).
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

// Dynamic shared memory in bytes of a batch kernel (batch_fc1, batch_fc2): depth + 1 stages of its copy
// ring, each the token tile (8 * ntiles rows of 160 bytes) and every warp's weight runs and scale bytes
// (templates/moe_batch.cuh: BatchStage); 0 for other kinds. Throws moejit::Error when the key does not
// normalize. Thread-safe.
int batch_dynamic_smem(const KernelKey& key);
// CTAs per SM a decode kernel's register cap is built for (__launch_bounds__' second argument): the
// key's min_blocks, else at least 512 resident threads per SM (1 for wide token tiles).
int decode_ctas_per_sm(const KernelKey& key);
// Threads per CTA of a key's kernel (decode_fc1_stream: its warps plus the producer warp; decode_pipe:
// its FC1 consumer warps, the producer warp and its `groups` FC2 warps). Pure.
int kernel_threads(const KernelKey& key);
// Registers per thread a decode kernel's launch bounds leave ptxas: 65536 / (threads x
// decode_ctas_per_sm), at most 255 (ptxas then rounds down to its allocation step). The generated
// source passes it to the templates (MOEJIT_REGISTER_CAP), whose chunk loop depends on it. Pure.
int decode_register_cap(const KernelKey& key);
// Dynamic shared memory, in bytes, a key's kernel is launched with: decode_fc1_stream's ring of depth
// stages, each warps x parts chunks of weights and scales, after its barriers
// (templates/slab_stream.cuh); decode_pipe's ring only (the rest depends on the forward:
// decode_pipe_layout); a batch kernel's ring (batch_dynamic_smem); the route kernel's table
// (route_dynamic_smem); 0 for every other kind. Pure;
// throws moejit::Error for a key that does not normalize.
int decode_dynamic_smem(const KernelKey& key);
// Whether a register-fed decode kernel keeps its activation pieces one chunk ahead in registers (a
// ring of ~16 registers): FC2 always with one token tile, FC1 only where its register cap leaves 80
// (the generator builds it so; the planner stages x only where it is absent). Pure; throws
// moejit::Error for a key that does not normalize.
bool decode_activation_ring(const KernelKey& key);
// decode_pipe's run-time geometry for one forward (templates/moe_decode_pipe.cuh: DecodePipeParams):
// how each CTA's FC2 slabs are cut into K ranges for its FC2 warps, how many expert slots each FC2 warp
// keeps in shared memory, and the dynamic shared memory layout (bytes; the FC1 ring first). window is
// 0 where not even one slot fits (the planner does not pick the kernel then). tokens: M; top_k: the
// layer's K; grid: CTAs launched (one per SM). Pure and thread-safe; throws moejit::Error for a key of
// another kind or non-positive sizes.
struct DecodePipeLayout {
  int slots = 0, fc2_parts = 0, part_chunks = 0, window = 0, units_per_warp = 0, stage_pairs = 0;
  int bar_offset = 0, buf_offset = 0, stage_offset = 0, acc_offset = 0, bytes = 0;
};
DecodePipeLayout decode_pipe_layout(const KernelKey& key, int tokens, int top_k, int grid);
// The most dynamic shared memory a CTA may use on the architectures moejit builds for (227 KiB).
inline constexpr int kMaxDynamicSmem = 227 * 1024;
// Dynamic shared memory of the route kernel (templates/moe_route.cuh): a [warps][experts] table of
// per-warp counts, then cursors, and the experts' totals. Pure.
inline constexpr int route_dynamic_smem(int experts, int warps) { return (warps + 1) * experts * 4; }
// Warps of the route kernel for `experts` local experts: 16, fewer where its table would not fit. Pure.
inline constexpr int route_warps(int experts) {
  const int fit = kMaxDynamicSmem / (4 * experts) - 1;
  return fit < 1 ? 1 : fit > 16 ? 16 : fit;
}
// Bytes of shared memory the inline routing list takes in a CTA of this key: sizeof(InlineRouteList) in
// templates/inline_route.cuh (checked there by a static_assert), for inline_route 1 (64 pairs) or 2
// (128); a key without inline routing gets the 64-pair size. Pure, thread-safe, does not throw.
int inline_route_list_bytes(const KernelKey& key);
// The most (token, slot) pairs a key's inline routing covers: 64 (i1) or 128 (i2); 0 without. Pure,
// thread-safe, does not throw.
int inline_route_pairs(const KernelKey& key);

// `moejit bench`'s read floor: a kernel (no key, never cached) that only streams n16 x 16 contiguous
// bytes, moejit_read_floor(const char* p, unsigned long long n16, unsigned* sink), 512 threads per CTA.
GeneratedSource read_floor_source();

// Embedded template headers as (file name, content) pairs, in a fixed order.
std::vector<std::pair<std::string, std::string>> template_headers();
// Hash (hex) of all template contents; part of every cache hash.
std::string templates_digest();

}  // namespace moejit
