// The files `moejit run` reads and writes, checked by one set of rules that `run` and `validate` share
// (validate is run's checks without a GPU, so the two can never disagree about a file).
#include <sys/stat.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "core/regular_file.hpp"
#include "moejit/error.hpp"
#include "moejit/safetensors.hpp"
#include "tools/cli_common.hpp"

namespace moejit::cli {

void check_inputs_match(const LayerSpec& spec, const HostInputs& in, const std::string& layer_path,
                        const std::string& input_path) {
  if (in.hidden != spec.hidden)
    throw Error(fmt::format("--input {}: x has hidden size {} but the layer in {} has H = {}", input_path, in.hidden,
                            layer_path, spec.hidden));
  if (in.top_k != spec.top_k)
    throw Error(fmt::format("--input {}: topk_ids has {} columns but the layer in {} has top_k = {}", input_path,
                            in.top_k, layer_path, spec.top_k));
}

// The output must not be one of the files read (compared as files, by device and inode: another
// spelling of the path, a symlink or a hard link is still that file), and must be a regular file if it
// exists (opening a FIFO for writing would block until someone reads it).
void check_run_output(const std::string& output, const std::vector<std::pair<std::string, std::string>>& inputs) {
  struct stat out;
  if (::stat(output.c_str(), &out) != 0) {
    if (errno == ENOENT) return;  // a new file cannot be an input
    throw Error(fmt::format("--output {}: cannot stat it: {}", output, std::strerror(errno)));
  }
  if (!S_ISREG(out.st_mode))
    throw Error(fmt::format("--output {}: it is {}, not a regular file", output, detail::file_type_name(out.st_mode)));
  for (const auto& [option, path] : inputs) {
    struct stat in;
    if (path.empty() || ::stat(path.c_str(), &in) != 0) continue;
    if (in.st_dev == out.st_dev && in.st_ino == out.st_ino)
      throw Error(fmt::format("--output {} is the same file as {} {}; refusing to overwrite an input", output, option,
                              path));
  }
}

RunFiles read_run_files(const std::string& layer_path, const std::string& input_path, const std::string& output_path) {
  if (!output_path.empty()) check_run_output(output_path, {{"--layer", layer_path}, {"--input", input_path}});
  RunFiles f;
  try {
    f.layer = read_layer_file(layer_path);
  } catch (const Error& e) {
    throw Error(fmt::format("--layer {}: {}", layer_path, e.what()));
  }
  if (input_path.empty()) return f;
  try {
    f.inputs = read_input_file(input_path);
  } catch (const Error& e) {
    throw Error(fmt::format("--input {}: {}", input_path, e.what()));
  }
  check_inputs_match(f.layer.spec, *f.inputs, layer_path, input_path);
  return f;
}

void check_layer_matches_config(const LayerSpec& layer, const ModelConfig& cfg, const std::string& layer_path) {
  const LayerSpec want = cfg.local();
  std::vector<std::string> diffs;
  auto field = [&](const char* name, const auto& got, const auto& expected) {
    if (got != expected) diffs.push_back(fmt::format("{} {} (config: {})", name, got, expected));
  };
  field("format", to_string(layer.format), to_string(want.format));
  field("activation", to_string(layer.activation), to_string(want.activation));
  field("experts", layer.experts, want.experts);
  field("hidden", layer.hidden, want.hidden);
  field("intermediate", layer.intermediate, want.intermediate);
  field("top_k", layer.top_k, want.top_k);
  field("expert_begin", layer.expert_begin, want.expert_begin);
  field("bias", layer.has_bias, want.has_bias);
  if (is_gated(want.activation)) field("gate_up_order", to_string(layer.gate_up_order), to_string(want.gate_up_order));
  if (want.activation == Activation::swigluoai) {
    field("swiglu_alpha", layer.swiglu_alpha, want.swiglu_alpha);
    field("swiglu_beta", layer.swiglu_beta, want.swiglu_beta);
  }
  const auto limit = [](const std::optional<float>& l) { return l ? fmt::format("{}", *l) : std::string("none"); };
  field("swiglu_limit", limit(layer.limit), limit(want.limit));
  field("precision", to_string(layer.precision), to_string(want.precision));
  if (diffs.empty()) return;
  std::string joined;
  for (const auto& d : diffs) joined += (joined.empty() ? "" : ", ") + d;
  throw Error(fmt::format("--layer {} is not a layer of --config {} (local slice tp {} ep {} rank {}): {}", layer_path,
                          cfg.name, cfg.tp, cfg.ep, cfg.ep_rank, joined));
}

}  // namespace moejit::cli
