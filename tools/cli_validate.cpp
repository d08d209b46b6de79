// `moejit validate`: checks a layer file (and an input file, an output path, a model config) by the rules
// `moejit run` applies, on any machine: it calls run's own file reader (cli_layer_files.cpp), so a file
// validate accepts is one run reads, and one it refuses, run refuses with the same message.
#include <fmt/format.h>

#include <cstdio>
#include <string>

#include "moejit/error.hpp"
#include "tools/cli_common.hpp"

namespace moejit::cli {

int cmd_validate(int argc, char** argv) {
  static const CommandSpec spec{
      "validate",
      "--layer L.safetensors [--input I.safetensors] [--output O.safetensors] [--config NAME|PATH]",
      "check layer and input files with run's rules (no GPU needed)",
      "Reads the layer file (and the input file) exactly as `moejit run` does, without a GPU: the safetensors\n"
      "container (header size, JSON, dtypes, shapes, tensors filling the data section exactly), the layer's\n"
      "metadata, tensor names, dtypes and shapes, geometry bounds, and that the input's H and top_k match the\n"
      "layer. --output checks that the path run would write is not one of the input files. --config checks that\n"
      "the layer is the config's local slice (format, activation, E, H, I, top_k, bias, ...). Exits 0 when\n"
      "everything holds, 2 naming the file and the rule otherwise.",
      {{"layer", "PATH", "layer file (.safetensors)"},
       {"input", "PATH", "input file (.safetensors)"},
       {"output", "PATH", "output path `run` would write"},
       {"config", "NAME|PATH", "bundled config name or JSON file the layer must belong to"}},
      {}};
  Args args(spec, argc, argv, 2);
  if (args.help()) {
    std::fputs(help_text(spec).c_str(), stdout);
    return kExitOk;
  }
  if (!args.has("layer") || args.str("layer").empty()) throw UsageError("--layer PATH is required");
  const std::string layer_path = args.str("layer");
  const RunFiles files = read_run_files(layer_path, args.str("input"), args.str("output"));
  if (args.has("config")) check_layer_matches_config(files.layer.spec, config_from_args(args), layer_path);
  fmt::print("valid: layer {} ({})\n", layer_path, describe_spec(files.layer.spec));
  if (files.inputs)
    fmt::print("valid: input {} (M = {}, H = {}, top_k = {})\n", args.str("input"), files.inputs->tokens,
               files.inputs->hidden, files.inputs->top_k);
  if (args.has("config")) fmt::print("valid: the layer is the local slice of --config {}\n", args.str("config"));
  return kExitOk;
}

}  // namespace moejit::cli
