#pragma once
// Loading MoE layers straight from Hugging Face style checkpoints: a directory with `config.json` and
// safetensors shards (`model.safetensors.index.json` mapping tensor names to shard files, or a single
// `model.safetensors`). Two layouts are understood (docs/CHECKPOINTS.md has every name, dtype and rule):
//
// - ModelOpt NVFP4 (DeepSeek-V3/R1, Qwen3-MoE, Kimi-K2 style), announced by `hf_quant_config.json`
//   (`quantization.quant_algo` "NVFP4") or config.json's `quantization_config` (`quant_method`
//   "modelopt", `quant_algo` "NVFP4"): per expert j of layer N,
//   `<prefix>layers.N.mlp.experts.j.{gate_proj,up_proj,down_proj}.{weight, weight_scale,
//   weight_scale_2, input_scale}` (U8 packed e2m1 [out, in/2], F8_E4M3 [out, in/16], F32 scalar, F32
//   scalar). The weight is e2m1 · weight_scale · weight_scale_2; gate and up may carry different
//   weight_scale_2, which load exactly as an [E, 2] w13_global_scale.
// - gpt-oss MXFP4 (config.json `model_type` "gpt_oss", `quantization_config.quant_method` "mxfp4"):
//   `<prefix>layers.N.mlp.experts.{gate_up_proj,down_proj}_{blocks,scales,bias}` with gate and up
//   interleaved by row, the low nibble holding the even element, e8m0 scales, BF16 biases; swigluoai
//   with α = 1.702, β = 1 and config.json's `swiglu_limit`.
//
// Slicing happens at load time: rank tp_rank of tp holds an I / tp slice of every expert (the FC2 bias
// on rank 0 only, so that the ranks' outputs sum to the unsliced layer's), rank ep_rank of ep holds
// E / ep consecutive experts from expert_begin = ep_rank · E / ep (routing ids stay global).
//
// Everything here is host code (no GPU), reads only the tensors of the layer asked for, and is
// thread-safe (no shared state). Every error is a moejit::Error naming the file or tensor and the rule
// it broke.
#include <string>
#include <vector>

#include "moejit/host_layer.hpp"
#include "moejit/model_config.hpp"

namespace moejit {

enum class CheckpointFormat { modelopt_nvfp4, gpt_oss_mxfp4 };
// "modelopt-nvfp4", "gpt-oss-mxfp4".
std::string checkpoint_format_name(CheckpointFormat f);

// Which slice of a layer one rank loads. tp >= 1, 0 <= tp_rank < tp, ep >= 1, 0 <= ep_rank < ep;
// experts must divide by ep and I by tp into multiples of the scale block (16 nvfp4, 32 mxfp4).
struct CheckpointSlice {
  int tp = 1, tp_rank = 0;
  int ep = 1, ep_rank = 0;
  // The activation precision the rank runs the layer in (LayerSpec::precision). a4 loads a ModelOpt
  // checkpoint's input scales as the layer's global scales (a1_gs = 1 / max(gate, up input_scale), a2_gs =
  // 1 / down_proj input_scale, per expert: docs/CHECKPOINTS.md); a checkpoint without them cannot run a4.
  ActPrecision precision = ActPrecision::a16;
};

// What a checkpoint holds, read from config.json, the quantization config and the shard headers
// (no tensor data).
struct CheckpointInfo {
  std::string dir;
  std::string model_type;          // config.json model_type ("deepseek_v3", "qwen3_moe", "gpt_oss", ...)
  CheckpointFormat format = CheckpointFormat::modelopt_nvfp4;
  LayerSpec global;                // one MoE layer before slicing (experts = all routed experts)
  std::vector<int> moe_layers;     // indices N of the layers that hold routed experts, ascending
  std::string tensor_prefix;       // what precedes "layers.N." in tensor names, e.g. "model."
};

// Reads config.json, the quantization config and every shard header under dir; checks that the
// first MoE layer's expert tensors have the dtypes and shapes config.json implies. Throws moejit::Error.
CheckpointInfo inspect_checkpoint(const std::string& dir);

// The model config a rank of this checkpoint runs (geometry from the checkpoint; tp, ep, ep_rank from
// slice), for planning and prewarming. Throws moejit::Error as inspect_checkpoint and for a bad slice.
ModelConfig checkpoint_model_config(const CheckpointInfo& info, const CheckpointSlice& slice = {});

// Loads MoE layer `layer` (one of info.moe_layers) into the logical layout of DESIGN §3, sliced.
// ModelOpt: w13 rows in gate_up order, w13_global_scale [E] when every expert's gate and up
// weight_scale_2 are equal, else [E, 2]. gpt-oss: w13 rows interleaved (gate even, up odd), biases
// converted from BF16 to F32 exactly. Every tensor is checked (presence, dtype, shape, finite positive
// global scales) before use. Throws moejit::Error naming the tensor and the rule.
HostLayer load_checkpoint_layer(const CheckpointInfo& info, int layer, const CheckpointSlice& slice = {});
HostLayer load_checkpoint_layer(const std::string& dir, int layer, const CheckpointSlice& slice = {});

}  // namespace moejit
