// Generator: a key becomes a short translation unit that instantiates one template of templates/.
#include "moejit/generator.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "cache/sha256.hpp"
#include "generator/embedded_files.hpp"
#include "moejit/error.hpp"
#include "moejit/planner.hpp"

namespace moejit {

namespace {
int act_code(Activation a) {
  switch (a) {
    case Activation::silu: return 0;
    case Activation::gelu_tanh: return 1;
    case Activation::relu2: return 2;
    case Activation::swigluoai: return 3;
  }
  return 0;
}
const char* cpp_bool(bool b) { return b ? "true" : "false"; }
// Matrices per FC1 slab chunk: gate and up, or one for relu2.
int fc1_mats(const KernelKey& key) { return key.activation == Activation::relu2 ? 1 : 2; }

// wgmma_rs for an n-column tile: one m64nNk16 warpgroup MMA, bf16 A from four registers per thread, B by
// shared-memory descriptor, fp32 accumulators d[0..n/2) added to (templates/wgmma.cuh). Generated because
// the operand list is as long as the accumulator.
std::string wgmma_rs_source(int n) {
  const int regs = n / 2;  // operands: d[0..regs), a[0..3] at regs.., desc at regs + 4, the constant 1 at regs + 5
  std::string d, outs;
  for (int i = 0; i < regs; ++i) {
    d += fmt::format("{}%{}", i ? ", " : "", i);
    outs += fmt::format("{}\"+f\"(d[{}])", i ? ", " : "", i);
  }
  return fmt::format(
      "MOEJIT_DEVICE void wgmma_rs(float (&d)[{0}], const u32 (&a)[4], u64 desc) {{\n"
      "  asm volatile(\"{{ .reg .pred p; setp.ne.b32 p, %{9}, 0; \"\n"
      "               \"wgmma.mma_async.sync.aligned.m64n{1}k16.f32.bf16.bf16 {{{2}}}, {{%{3}, %{4}, %{5}, %{6}}}, \"\n"
      "               \"%{7}, p, 1, 1, 0; }}\"\n"
      "               : {8}\n"
      "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(desc), \"r\"(1));\n}}\n",
      regs, n, d, regs, regs + 1, regs + 2, regs + 3, regs + 4, outs, regs + 5);
}
}  // namespace

int kernel_threads(const KernelKey& key) {
  if (key.kind == KernelKind::decode_pipe) return (key.warps + 1 + key.groups) * 32;
  return (key.warps + (key.kind == KernelKind::decode_fc1_stream ? 1 : 0)) * 32;
}

namespace {
// Scale bytes per 64-wide chunk and matrix (templates/slab_mma.cuh: ScaleGeometry).
int chunk_scale_bytes(const KernelKey& key) { return key.format == ScaleFormat::nvfp4 ? 64 : 32; }
// The streaming ring of decode_fc1_stream and decode_pipe: barriers, then depth stages of warps x parts
// chunks (templates/slab_stream.cuh: SlabStreamRing::kBytes).
int stream_ring_bytes(const KernelKey& key) {
  const int barriers = (2 * key.depth * 8 + 127) / 128 * 128;
  return barriers + key.depth * key.warps * key.parts * fc1_mats(key) * (512 + chunk_scale_bytes(key));
}
// The generated source's check that the device's ring (SlabStreamRing::kBytes) has the size the host
// launches with.
std::string stream_ring_check(const KernelKey& key) {
  return fmt::format("static_assert(SlabStreamRing<{}, {}, {}, {}, {}>::kBytes == {}, \"host and device ring sizes differ\");\n",
                     cpp_bool(key.format == ScaleFormat::nvfp4), fc1_mats(key), key.warps, key.depth, key.parts,
                     stream_ring_bytes(key));
}
// Static shared memory of a decode_pipe CTA: the routing list, FC1's cross-warp reduction buffer (two
// halves), FC2's per-pair weights and per-slot multipliers and its ready flag.
int pipe_static_smem(const KernelKey& key) {
  return inline_route_list_bytes(key) + 2 * (key.warps > 1 ? key.warps * fc1_mats(key) * 4 * 32 * 4 : 4) +
         2 * 4 * std::max(inline_route_pairs(key), kInlineRoutePairsNarrow) + 16;
}
}  // namespace

int batch_dynamic_smem(const KernelKey& raw) {
  const KernelKey key = raw.normalized();
  if (key.kind != KernelKind::batch_fc1 && key.kind != KernelKind::batch_fc2) return 0;
  const int mats = key.kind == KernelKind::batch_fc1 ? fc1_mats(key) : 1;
  if (key.wgmma) {
    // templates/moe_batch_wgmma.cuh: WgmmaStage::kBytes (1024-byte multiples) per stage, depth + 1 stages,
    // and 1024 bytes to align the ring.
    const int used = 8 * key.ntiles * 128 + key.warps * mats * (512 + chunk_scale_bytes(key));
    return (key.depth + 1) * ((used + 1023) / 1024 * 1024) + 1024;
  }
  // templates/moe_batch.cuh: BatchStage::kBytes per stage, depth + 1 stages.
  const int stage = 8 * key.ntiles * 160 + key.warps * key.slabs * mats * (512 + chunk_scale_bytes(key));
  return (key.depth + 1) * stage;
}

int decode_dynamic_smem(const KernelKey& raw) {
  const KernelKey key = raw.normalized();
  if (key.kind == KernelKind::batch_fc1 || key.kind == KernelKind::batch_fc2) return batch_dynamic_smem(key);
  if (key.kind == KernelKind::decode_pipe) return stream_ring_bytes(key);
  if (key.kind == KernelKind::route) return route_dynamic_smem(key.experts, key.warps);
  if (key.kind != KernelKind::decode_fc1_stream) return 0;
  return stream_ring_bytes(key);
}

DecodePipeLayout decode_pipe_layout(const KernelKey& raw, int tokens, int top_k, int grid) {
  const KernelKey key = raw.normalized();
  if (key.kind != KernelKind::decode_pipe)
    throw Error(fmt::format("decode_pipe_layout: kernel key {} is not a decode_pipe key", key.str()));
  if (tokens < 1 || top_k < 1 || grid < 1)
    throw Error(fmt::format("decode_pipe_layout: tokens ({}), top_k ({}) and grid ({}) must be positive", tokens, top_k,
                            grid));
  DecodePipeLayout l;
  const int slabs = key.hidden / 16, chunks = (key.intermediate + 63) / 64;
  const int slabs_per_cta = (slabs + grid - 1) / grid;
  l.slots = std::min(tokens * top_k, key.experts);
  // Each CTA's slabs cut in K ranges so that its units fill the FC2 warps (at least one chunk each).
  l.fc2_parts = std::clamp(key.groups / slabs_per_cta, 1, chunks);
  l.units_per_warp = (slabs_per_cta * l.fc2_parts + key.groups - 1) / key.groups;
  l.part_chunks = (chunks + l.fc2_parts - 1) / l.fc2_parts;
  l.stage_pairs = std::min(key.columns, tokens);
  // Per resident slot and unit: the weights and scales of a K range, and the pass's activation rows.
  const int block = l.part_chunks * (512 + chunk_scale_bytes(key));
  const int unit_stage = l.stage_pairs * l.part_chunks * 128;
  const int sums = key.groups * l.units_per_warp * tokens * 16 * 4;
  const int fixed = stream_ring_bytes(key) + sums + 16 * 8 * key.groups + 3 * 128;
  // As many slots in shared memory per FC2 warp as fit beside the rest (each with its barrier).
  const int room = kMaxDynamicSmem - pipe_static_smem(key) - fixed - 512;  // 512: static alignment slack
  const int per_slot = key.groups * l.units_per_warp * (block + unit_stage);
  l.window = std::min({room > 0 ? room / per_slot : 0, l.slots, 16});
  auto align = [](int v) { return (v + 127) / 128 * 128; };
  l.bar_offset = stream_ring_bytes(key);
  const int slots_held = std::max(l.window, 1);
  l.buf_offset = align(l.bar_offset + 8 * key.groups * slots_held);
  l.stage_offset = align(l.buf_offset + slots_held * key.groups * l.units_per_warp * block);
  l.acc_offset = align(l.stage_offset + slots_held * key.groups * l.units_per_warp * unit_stage);
  l.bytes = align(l.acc_offset + sums);
  return l;
}

int inline_route_pairs(const KernelKey& key) {
  return key.inline_route == 0 ? 0 : key.inline_route == 1 ? kInlineRoutePairsNarrow : kInlineRouteMaxPairs;
}

int inline_route_list_bytes(const KernelKey& key) {
  return 16 * std::max(inline_route_pairs(key), kInlineRoutePairsNarrow) + 264;
}

int decode_ctas_per_sm(const KernelKey& key) {
  // Decode kernels hide latency with resident warps: cap registers so that at least 512 threads per
  // SM stay resident. Wide token tiles (4+) keep their accumulators instead. A streaming kernel runs
  // as many CTAs as its shared memory allows.
  const int threads = kernel_threads(key);
  if (key.kind == KernelKind::decode_pipe) return 1;  // one co-resident CTA per SM
  if (key.min_blocks > 0) return key.min_blocks;
  int ctas = key.ntiles >= 4 ? 1 : std::max(1, 512 / threads);
  if (key.kind == KernelKind::decode_fc1_stream) {
    // Shared memory per CTA: the ring, the static reduction buffer and routing list, and the 1 KiB the
    // driver reserves per CTA, out of 228 KiB per SM.
    const int per_cta = decode_dynamic_smem(key) + key.warps * key.ntiles * fc1_mats(key) * 4 * 32 * 4 +
                        inline_route_list_bytes(key) + 1024;
    ctas = std::max(1, std::min(2048 / threads, 228 * 1024 / per_cta));  // as many as fit
  }
  return ctas;
}

int decode_register_cap(const KernelKey& key) {
  return std::min(255, 65536 / (decode_ctas_per_sm(key) * kernel_threads(key)));
}

bool decode_activation_ring(const KernelKey& raw) {
  // The ring costs ~16 registers per thread: FC1 and FC2-sum over two slabs (two matrices in flight)
  // take it only when the register cap leaves 80; FC2 over one slab always. Wider token tiles load
  // activations step by step.
  const KernelKey key = raw.normalized();
  const bool one_matrix = key.kind == KernelKind::decode_fc2 || (key.kind == KernelKind::decode_fc2_sum && key.slabs == 1);
  return key.ntiles == 1 && (one_matrix || decode_register_cap(key) >= 80);
}

GeneratedSource generate_source(const KernelKey& raw) {
  const KernelKey key = raw.normalized();
  GeneratedSource out;
  out.entry = key.entry_name();
  out.name = out.entry + ".cu";
  const int threads = kernel_threads(key);
  const int min_blocks = decode_ctas_per_sm(key);
  const bool prefetch_x = decode_activation_ring(key);
  std::string header = fmt::format("// moejit generated kernel\n// key: {}\n", key.str());
  if (key.inline_route) {
    header += fmt::format("#define MOEJIT_INLINE_ROUTE_MAX_PAIRS {}\n", inline_route_pairs(key));
    header += "#define MOEJIT_INLINE_ROUTED 1\n";
  }
  if (key.l2_ahead > 0) header += fmt::format("#define MOEJIT_L2_AHEAD_CHUNKS {}\n", key.l2_ahead);
  if (key.x_staged) header += "#define MOEJIT_X_STAGED 1\n";
  // The chunk loop's shape depends on the registers the launch bounds leave (templates/slab_mma.cuh).
  if (key.kind == KernelKind::decode_fc1 || key.kind == KernelKind::decode_fc1_loop ||
      key.kind == KernelKind::decode_fused || key.kind == KernelKind::decode_fc2 ||
      key.kind == KernelKind::decode_fc2_sum)
    header += fmt::format("#define MOEJIT_REGISTER_CAP {}\n", decode_register_cap(key));
#ifdef MOEJIT_TRACE_BUILD
  header += "#define MOEJIT_TRACE 1\n";  // a -DMOEJIT_TRACE=ON build (templates/trace.cuh)
#endif
  switch (key.kind) {
    case KernelKind::prepare:
      out.source = header + fmt::format(
          "#include \"prepare_repack.cuh\"\n"
          "extern \"C\" __global__ void __launch_bounds__({0}) {1}_weights(const RepackParams p) {{\n"
          "  repack_weights(p);\n}}\n"
          "extern \"C\" __global__ void __launch_bounds__({0}) {1}_scales(const RepackParams p) {{\n"
          "  repack_scales(p);\n}}\n",
          threads, out.entry);
      break;
    case KernelKind::route:
      if (route_dynamic_smem(key.experts, key.warps) > kMaxDynamicSmem)
        throw Error(fmt::format("kernel key {}: the route kernel's [warps][experts] table needs {} bytes of shared "
                                "memory, more than {}; use fewer warps",
                                key.str(), route_dynamic_smem(key.experts, key.warps), kMaxDynamicSmem));
      out.source = header + fmt::format(
          "#include \"moe_route.cuh\"\n"
          "extern \"C\" __global__ void __launch_bounds__({0}) {1}(const RouteParams p) {{\n"
          "  moe_route<{2}, {0}>(p);\n}}\n",
          threads, out.entry, key.experts);
      break;
    case KernelKind::decode_fc1:
    case KernelKind::decode_fc1_loop:
    case KernelKind::decode_fused: {
      // A staged x row is static shared memory beside the cross-warp reduction buffer and the routing
      // state (templates/moe_decode_fc1.cuh): each warp's part at 128 bytes per chunk after 256 bytes of
      // zeros (slab_mma.cuh: kStageZeros), all within the
      // 48 KiB a kernel may declare statically (1 KiB kept for the routing state).
      if (key.x_staged) {
        const int chunks = (key.hidden + 63) / 64;
        const int stage_bytes = key.warps * (256 + (chunks + key.warps - 1) / key.warps * 128);
        const int reduction_bytes = key.warps > 1 ? key.warps * fc1_mats(key) * 4 * 32 * 4 : 0;
        if (stage_bytes + reduction_bytes > 47 * 1024)
          throw Error(fmt::format("kernel key {}: a staged x row takes {} bytes of shared memory, more than the {} "
                                  "left beside the reduction buffer",
                                  key.str(), stage_bytes, 47 * 1024 - reduction_bytes));
      }
      // Same template parameters: the fused kernel runs FC1's tile for both phases.
      const bool fused = key.kind == KernelKind::decode_fused;
      const char* function = fused ? "moe_decode_fused"
                             : key.kind == KernelKind::decode_fc1_loop ? "moe_decode_fc1_loop"
                                                                        : "moe_decode_fc1";
      // The size check above counts kStageZeros' 256 bytes; the generated source holds the template to it.
      const char* stage_check =
          key.x_staged ? "static_assert(kStageZeros * 8 == 256, \"host and device staged-x sizes differ\");\n" : "";
      out.source = header + fmt::format(
          "#include \"{17}.cuh\"\n{19}"
          "extern \"C\" __global__ void __launch_bounds__({0}, {13}) {1}(const {16} p) {{\n"
          "  {15}<{2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {18}, {11}, {12}, {14}>(p);\n}}\n",
          threads, out.entry, cpp_bool(key.format == ScaleFormat::nvfp4), act_code(key.activation),
          cpp_bool(key.limit), cpp_bool(key.bias), key.experts, key.hidden, key.intermediate, key.warps, key.ntiles,
          key.depth, cpp_bool(key.inline_route != 0), min_blocks, cpp_bool(prefetch_x),
          function, fused ? "DecodeFusedParams" : "DecodeFc1Params", fused ? "moe_decode_fused" : "moe_decode_fc1",
          key.columns, stage_check);
      break;
    }
    case KernelKind::decode_fc1_stream: {
      const int smem = decode_dynamic_smem(key);
      if (smem > kMaxDynamicSmem)
        throw Error(fmt::format("kernel key {}: the ring needs {} bytes of shared memory, more than {}", key.str(), smem,
                                kMaxDynamicSmem));
      out.source = header + "#include \"moe_decode_fc1_stream.cuh\"\n" + stream_ring_check(key) + fmt::format(
          "extern \"C\" __global__ void __launch_bounds__({0}, {13}) {1}(const DecodeFc1Params p) {{\n"
          "  moe_decode_fc1_stream<{2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {14}, {11}, {12}>(p);\n}}\n",
          threads, out.entry, cpp_bool(key.format == ScaleFormat::nvfp4), act_code(key.activation),
          cpp_bool(key.limit), cpp_bool(key.bias), key.experts, key.hidden, key.intermediate, key.warps, key.ntiles,
          key.depth, key.parts, min_blocks, key.columns);
      break;
    }
    case KernelKind::decode_pipe: {
      out.source = header + "#include \"moe_decode_pipe.cuh\"\n" + stream_ring_check(key) + fmt::format(
          "extern \"C\" __global__ void __launch_bounds__({0}, 1) {1}(const DecodePipeParams p) {{\n"
          "  moe_decode_pipe<{2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}>(p);\n}}\n"
          "extern \"C\" __global__ void __launch_bounds__(128) {1}_clear(const DecodePipeParams p) {{\n"
          "  moe_decode_pipe_clear(p);\n}}\n",
          threads, out.entry, cpp_bool(key.format == ScaleFormat::nvfp4), act_code(key.activation),
          cpp_bool(key.limit), cpp_bool(key.bias), key.experts, key.hidden, key.intermediate, key.warps, key.columns,
          key.depth, key.parts, key.groups);
      break;
    }
    case KernelKind::decode_fc2:
    case KernelKind::decode_fc2_sum: {
      // Same parameters but the ninth: inline routing (decode_fc2) or K parts and groups (decode_fc2_sum,
      // which always routes inline).
      const bool sum = key.kind == KernelKind::decode_fc2_sum;
      const char* function = sum ? "moe_decode_fc2_sum" : "moe_decode_fc2";
      out.source = header + fmt::format(
          "#include \"{13}.cuh\"\n"
          "extern \"C\" __global__ void __launch_bounds__({0}, {11}) {1}(const DecodeFc2Params p) {{\n"
          "  {13}<{2}, {3}, {4}, {5}, {6}, {7}, {8}, {14}, {9}, {10}, {12}{15}>(p);\n}}\n",
          threads, out.entry, cpp_bool(key.format == ScaleFormat::nvfp4), cpp_bool(key.bias), key.experts,
          key.hidden, key.intermediate, key.warps, key.ntiles, key.depth,
          sum ? fmt::format("{}, {}", key.parts, key.groups) : std::string(cpp_bool(key.inline_route != 0)), min_blocks,
          cpp_bool(prefetch_x), function, key.columns, sum && key.slabs != 1 ? fmt::format(", {}", key.slabs) : "");
      break;
    }
    case KernelKind::batch_fc1:
    case KernelKind::batch_fc2: {
      const bool fc1 = key.kind == KernelKind::batch_fc1;
      const int smem = batch_dynamic_smem(key);
      if (smem > kMaxDynamicSmem)
        throw Error(fmt::format("kernel key {}: the copy ring needs {} bytes of shared memory, more than {}", key.str(),
                                smem, kMaxDynamicSmem));
      const bool nvfp4 = key.format == ScaleFormat::nvfp4;
      const int mats = fc1 ? fc1_mats(key) : 1;
      std::string check, call, includes;
      if (key.wgmma) {
        check = fmt::format(
            "static_assert({} * WgmmaStage<{}, {}, {}, {}>::kBytes + 1024 == {}, \"host and device ring sizes differ\");\n",
            key.depth + 1, cpp_bool(nvfp4), mats, key.warps, key.ntiles, smem);
        call = fc1 ? fmt::format("moe_batch_wgmma_fc1<{}, {}, {}, {}, {}, {}, {}, {}, {}>", cpp_bool(nvfp4),
                                 act_code(key.activation), cpp_bool(key.limit), cpp_bool(key.bias), key.hidden,
                                 key.intermediate, key.warps, key.ntiles, key.depth + 1)
                   : fmt::format("moe_batch_wgmma_fc2<{}, {}, {}, {}, {}, {}, {}>", cpp_bool(nvfp4), cpp_bool(key.bias),
                                 key.hidden, key.intermediate, key.warps, key.ntiles, key.depth + 1);
        includes = "#include \"wgmma.cuh\"\n" + wgmma_rs_source(8 * key.ntiles) + "#include \"moe_batch_wgmma.cuh\"\n";
      } else {
        check = fmt::format(
            "static_assert({} * BatchStage<{}, {}, {}, {}, {}>::kBytes == {}, \"host and device ring sizes differ\");\n",
            key.depth + 1, cpp_bool(nvfp4), mats, key.warps, key.ntiles, key.slabs, smem);
        call = fc1 ? fmt::format("moe_batch_fc1<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}>", cpp_bool(nvfp4),
                                 act_code(key.activation), cpp_bool(key.limit), cpp_bool(key.bias), key.hidden,
                                 key.intermediate, key.warps, key.ntiles, key.depth + 1, key.slabs)
                   : fmt::format("moe_batch_fc2<{}, {}, {}, {}, {}, {}, {}, {}>", cpp_bool(nvfp4), cpp_bool(key.bias),
                                 key.hidden, key.intermediate, key.warps, key.ntiles, key.depth + 1, key.slabs);
        includes = "#include \"moe_batch.cuh\"\n";
      }
      out.source = header + includes + check + fmt::format(
          "extern \"C\" __global__ void __launch_bounds__({0}, {1}) {2}(const {3} p) {{\n  {4}(p);\n}}\n",
          threads, std::max(key.min_blocks, 1), out.entry, fc1 ? "DecodeFc1Params" : "DecodeFc2Params", call);
      // FC2's module also holds the top-k combine, launched after FC2 (suffix _combine).
      if (!fc1)
        out.source += fmt::format(
            "extern \"C\" __global__ void __launch_bounds__(256) {0}_combine(const DecodeFc2Params p) {{\n"
            "  moe_batch_combine<{1}, {2}>(p);\n}}\n",
            out.entry, key.experts, key.hidden);
      break;
    }
  }
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
