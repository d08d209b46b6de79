#pragma once
// Vocabulary shared by every layer of moejit: number formats, activations, layer geometry.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace moejit {

enum class ScaleFormat { nvfp4, mxfp4 };
enum class Activation { silu, gelu_tanh, relu2, swigluoai };
enum class ActPrecision { a16, a8, a4 };
enum class GateUpOrder { gate_up, up_gate, interleaved };
// sm_120a: compute capability 12.0 (RTX PRO 6000, RTX 5090); sm_121a: 12.1 (DGX Spark's GB10), whose
// driver loads no sm_120a cubin.
enum class Arch { sm_90a, sm_100a, sm_120a, sm_121a };
// Kernel families a forward can run (automatic: the planner's choice by M).
enum class Family { automatic, decode, batch, prefill };
// How the decode family's FC1 and FC2 are launched: FC2 as a programmatic dependent of FC1 (default,
// measured fastest), two plain launches, or one cooperative launch with a grid barrier (decode_fused).
enum class DecodeLaunch { pdl, plain, cooperative };

// Canonical names ("nvfp4", "swigluoai", "a16", "interleaved", "sm_90a", "auto", "pdl"). parse_* throw moejit::Error
// naming the field and the accepted values.
std::string_view to_string(ScaleFormat v);
std::string_view to_string(Activation v);
std::string_view to_string(ActPrecision v);
std::string_view to_string(GateUpOrder v);
std::string_view to_string(Arch v);
std::string_view to_string(Family v);  // "auto", "decode", "batch", "prefill"
std::string_view to_string(DecodeLaunch v);
ScaleFormat parse_scale_format(std::string_view s);
Activation parse_activation(std::string_view s);
ActPrecision parse_act_precision(std::string_view s);
GateUpOrder parse_gate_up_order(std::string_view s);
Arch parse_arch(std::string_view s);
Family parse_family(std::string_view s);
DecodeLaunch parse_decode_launch(std::string_view s);

inline bool is_gated(Activation a) { return a != Activation::relu2; }
// Elements per scale along K: 16 (NVFP4, e4m3 scales) or 32 (MXFP4, e8m0 scales).
inline int scale_block(ScaleFormat f) { return f == ScaleFormat::nvfp4 ? 16 : 32; }
// Compute capability major*10+minor of an architecture (90, 100, 120, 121).
int arch_cc(Arch a);
// Every architecture moejit builds for, in enum order.
inline constexpr Arch kArchs[] = {Arch::sm_90a, Arch::sm_100a, Arch::sm_120a, Arch::sm_121a};
// "sm_90a, sm_100a, sm_120a or sm_121a", for messages.
std::string arch_names();

// What the planner and the generator size kernels by, per architecture (the CUDA programming guide's
// table of compute capabilities), in one place.
struct ArchLimits {
  int max_dynamic_smem;    // bytes of dynamic shared memory one CTA may opt into
  int smem_per_sm;         // bytes of shared memory per SM (CTAs on an SM share it)
  int smem_reserved;       // bytes the driver reserves per resident CTA
  int max_threads_per_sm;  // resident threads per SM
  int max_ctas_per_sm;     // resident CTAs per SM
  int registers_per_sm;    // 32-bit registers per SM
  int default_sm_count;    // SMs of the GPU plans assume when none is given
  const char* default_gpu; // that GPU
};
// The limits of an architecture: a reference to a constant table entry, safe from any thread. Throws
// moejit::Error only for a value outside the enum.
const ArchLimits& arch_limits(Arch a);

// Geometry and numerics of one MoE layer (DESIGN §1, §3). Runtime-only values (alpha, beta, limit)
// live here too because a layer carries them; kernels take them as arguments.
struct LayerSpec {
  ScaleFormat format = ScaleFormat::mxfp4;
  Activation activation = Activation::silu;
  GateUpOrder gate_up_order = GateUpOrder::gate_up;  // order of the logical w13 rows
  int experts = 0;       // E, local experts
  int hidden = 0;        // H
  int intermediate = 0;  // I (per TP shard)
  int top_k = 0;         // K
  int expert_begin = 0;  // global id of local expert 0 (expert parallelism)
  bool has_bias = false;
  float swiglu_alpha = 1.702f;
  float swiglu_beta = 1.0f;
  std::optional<float> limit;  // clamp limit L (silu, swigluoai); none means no clamp
  // Activation precision of FC1's and FC2's operands (DESIGN §1): a16, a8 (MXFP8) or a4 (NVFP4 under the
  // layer's global input scales, HostLayer::a1_gs / a2_gs).
  ActPrecision precision = ActPrecision::a16;

  // Rows of the FC1 matrix: 2I for gated activations, I for relu2.
  int fc1_rows() const { return is_gated(activation) ? 2 * intermediate : intermediate; }
  // Throws moejit::Error when a size is non-positive or not a multiple of the scale block.
  void validate() const;
};

}  // namespace moejit
