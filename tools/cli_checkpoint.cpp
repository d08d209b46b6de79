// `--checkpoint DIR` for plan, prewarm and run: the layer geometry (and, for run, the weights) come
// from a Hugging Face style checkpoint directory (include/moejit/checkpoint.hpp), sliced for one rank
// with --tp/--tp-rank/--ep/--ep-rank.
#include <fmt/format.h>

#include "moejit/checkpoint.hpp"
#include "moejit/error.hpp"
#include "tools/cli_common.hpp"

namespace moejit::cli {

CommandSpec with_checkpoint_options(CommandSpec spec, bool with_tp_rank, const std::string& checkpoint_form) {
  spec.synopsis += "\n   or: moejit " + spec.name + " --checkpoint DIR" + (checkpoint_form.empty() ? "" : " " + checkpoint_form) +
                   " [--tp N" + std::string(with_tp_rank ? " --tp-rank R" : "") + "] [--ep N --ep-rank R]";
  spec.description +=
      "\n--checkpoint DIR reads the layer from a checkpoint directory (config.json, the quantization config and\n"
      "the safetensors shards of a ModelOpt NVFP4 or gpt-oss MXFP4 checkpoint; docs/CHECKPOINTS.md), sliced for\n"
      "one rank by --tp and --ep.";
  spec.options.push_back({"checkpoint", "DIR", "checkpoint directory (instead of --config)"});
  spec.options.push_back({"tp", "N", "tensor-parallel degree: each rank holds I / N (default 1)"});
  if (with_tp_rank) spec.options.push_back({"tp-rank", "R", "tensor-parallel rank loaded, 0..tp-1 (default 0)"});
  spec.options.push_back({"ep", "N", "expert-parallel degree: each rank holds E / N experts (default 1)"});
  spec.options.push_back({"ep-rank", "R", "expert-parallel rank, 0..ep-1 (default 0)"});
  return spec;
}

CheckpointSlice slice_from_args(const Args& args) {
  CheckpointSlice s;
  s.tp = args.integer("tp", 1, 1, 1 << 16);
  s.ep = args.integer("ep", 1, 1, 1 << 16);
  s.tp_rank = args.integer("tp-rank", 0, 0, s.tp - 1);
  s.ep_rank = args.integer("ep-rank", 0, 0, s.ep - 1);
  return s;
}

std::optional<ModelConfig> checkpoint_config_from_args(const Args& args) {
  if (!args.has("checkpoint")) {
    for (const char* o : {"tp", "tp-rank", "ep", "ep-rank"})
      if (args.has(o)) throw UsageError(fmt::format("--{} applies to --checkpoint (a config carries its own slicing)", o));
    return std::nullopt;
  }
  if (args.has("config")) throw UsageError("--config and --checkpoint name two different models; give one");
  const std::string dir = args.str("checkpoint");
  try {
    return checkpoint_model_config(inspect_checkpoint(dir), slice_from_args(args));
  } catch (const Error& e) {
    throw UsageError(fmt::format("--checkpoint {}: {}", dir, e.what()));
  }
}

}  // namespace moejit::cli
