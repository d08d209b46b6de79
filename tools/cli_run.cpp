// `moejit run`: one layer from a layer file and an input file into an output file, optionally checked
// against the fp64 CPU reference.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "moejit/codecs.hpp"
#include "moejit/error.hpp"
#include "moejit/reference.hpp"
#include "moejit/runtime.hpp"
#include "moejit/safetensors.hpp"
#include "tools/cli_common.hpp"

namespace moejit::cli {

std::vector<uint16_t> forward_once(Runtime& rt, const PreparedLayer& layer, const HostInputs& in, Family force) {
  const LayerSpec& spec = layer.spec();
  const size_t M = static_cast<size_t>(in.tokens);
  std::vector<uint16_t> out(M * static_cast<size_t>(spec.hidden));
  if (M == 0) return out;
  DeviceBuffer x = DeviceBuffer::from(in.x);
  DeviceBuffer ids = DeviceBuffer::from(in.topk_ids);
  DeviceBuffer w = DeviceBuffer::from(in.topk_weights);
  DeviceBuffer y(out.size() * sizeof(uint16_t));
  y.fill_bytes(0xFF);  // poison: every element must be written
  const size_t ws_bytes = rt.workspace_size(layer, in.tokens);
  DeviceBuffer ws(ws_bytes);
  ForwardArgs a;
  a.x = x.ptr();
  a.topk_ids = ids.ptr();
  a.topk_weights = w.ptr();
  a.out = y.ptr();
  a.tokens = in.tokens;
  a.workspace = ws.ptr();
  a.workspace_bytes = ws_bytes;
  a.stream = nullptr;
  a.force = force;
  rt.forward(layer, a);
  y.download(out.data(), out.size() * sizeof(uint16_t));  // synchronous on the legacy default stream
  return out;
}

int cmd_run(int argc, char** argv) {
  static const CommandSpec spec = with_checkpoint_options(
      CommandSpec{
          "run",
          "--layer L.safetensors --input I.safetensors --output O.safetensors [--check] [--family auto|decode|batch|prefill]",
          "run one layer",
          fmt::format(
              "Runs one MoE layer on the GPU: the layer file holds the logical weights (DESIGN §3: w13/w1, w2, scales,\n"
              "global scales, biases and metadata), the input file x (BF16 [M,H]), topk_ids (I32 [M,K]) and\n"
              "topk_weights (F32 [M,K]); the output file gets out (BF16 [M,H]).\n"
              "With --checkpoint DIR, --layer N is the index of a MoE layer of the checkpoint, loaded (and sliced)\n"
              "from its shards; --input is then optional (default: --tokens random tokens, --seed) and so is --output.\n"
              "--check also computes the fp64 CPU reference (DESIGN §1) and prints rel_l2 = ||gpu - ref|| / ||ref||,\n"
              "cosine and max_abs, where ref is the unrounded fp64 output. The check passes when rel_l2 <= {:g} and\n"
              "every output is finite (the final bf16 rounding alone gives rel_l2 ~ 1e-3); otherwise run exits 1.\n"
              "The output may not be one of the input files. Needs a GPU (`moejit validate` checks layer and input\n"
              "files without one).",
              kCheckRelL2),
          {{"layer", "PATH|N", "layer file (.safetensors), or with --checkpoint the MoE layer index"},
           {"input", "PATH", "input file (.safetensors)"},
           {"output", "PATH", "output file to write (.safetensors)"},
           {"tokens", "M", "with --checkpoint and no --input: random tokens to run (default 4)"},
           {"seed", "S", "with --checkpoint and no --input: seed of the random tokens (default 1)"},
           {"check", "", "compare with the CPU reference (tolerance above); exit 1 when outside it"},
           {"family", "F", "auto (default), decode, batch or prefill: force a kernel family (fails if it cannot serve M)"}},
          {}},
      true, "--layer N [--input I.safetensors | --tokens M --seed S] [--output O.safetensors] [--check]");
  Args args(spec, argc, argv, 2);
  if (args.help()) {
    std::fputs(help_text(spec).c_str(), stdout);
    return kExitOk;
  }
  const bool checkpoint = args.has("checkpoint");
  for (const char* need : {"layer", "input", "output"}) {
    if (checkpoint && std::string(need) != "layer") continue;
    if (!args.has(need) || args.str(need).empty()) throw UsageError(fmt::format("--{} PATH is required", need));
  }
  Family force = Family::automatic;
  try {
    force = parse_family(args.str("family", "auto"));
  } catch (const Error& e) {
    throw UsageError(fmt::format("--family: {}", e.what()));
  }
  // Usage errors first (--config with --checkpoint, slicing options, an unreadable checkpoint or a slice
  // that does not divide: the checkpoint's headers only); then a layer file and its input by the rules
  // `moejit validate` applies without a GPU, and the GPU question (a checkpoint's weights after it).
  (void)checkpoint_config_from_args(args);
  const int layer_index = checkpoint ? args.integer("layer", 0, 0) : -1;
  if (!checkpoint)
    for (const char* o : {"tokens", "seed"})
      if (args.has(o)) throw UsageError(fmt::format("--{} applies to --checkpoint without --input", o));

  auto require_gpu = [] {
    std::string why;
    if (!gpu_available(&why))
      throw Error(fmt::format("no usable GPU ({}); run executes kernels and needs a CUDA device "
                              "(plan, inspect, prewarm --arch and validate work without one)",
                              why));
  };
  const std::string input_path = args.str("input"), output_path = args.str("output");
  std::string layer_path = args.str("layer");
  HostLayer layer;
  HostInputs in;
  if (checkpoint) {
    const std::string dir = args.str("checkpoint");
    if (!output_path.empty()) check_run_output(output_path, {{"--input", input_path}});
    require_gpu();  // before reading a layer's weights out of the shards
    try {
      layer = load_checkpoint_layer(dir, layer_index, slice_from_args(args));
    } catch (const Error& e) {
      throw Error(fmt::format("--checkpoint {}: {}", dir, e.what()));
    }
    layer_path = fmt::format("{} layer {}", dir, layer_index);
    if (input_path.empty()) {
      in = make_random_inputs(layer.spec, args.integer("tokens", 4, 0, kMaxTokens),
                              static_cast<uint64_t>(args.integer("seed", 1, 0)));
    } else {
      try {
        in = read_input_file(input_path);
      } catch (const Error& e) {
        throw Error(fmt::format("--input {}: {}", input_path, e.what()));
      }
      check_inputs_match(layer.spec, in, layer_path, input_path);
    }
  } else {
    // The files by run's rules, which `moejit validate` applies without a GPU.
    if (input_path.empty()) throw UsageError("--input is required with a layer file (--layer PATH)");
    RunFiles files = read_run_files(layer_path, input_path, output_path);
    layer = std::move(files.layer);
    in = std::move(*files.inputs);
    require_gpu();
  }

  Runtime rt;
  const auto t0 = std::chrono::steady_clock::now();
  auto prepared = rt.prepare(layer);
  const auto t1 = std::chrono::steady_clock::now();
  const std::vector<uint16_t> out = forward_once(rt, *prepared, in, force);
  const auto t2 = std::chrono::steady_clock::now();
  if (!output_path.empty()) write_output_file(output_path, out, in.tokens, layer.spec.hidden);
  const std::string plan = in.tokens > 0 ? rt.plan(*prepared, in.tokens, force).describe() : "M=0 (nothing to do)";
  fmt::print("run: {} on {} ({})\n  {}\n  prepare {:.1f} ms, first forward (includes kernel loading) {:.1f} ms; wrote {}\n",
             describe_spec(layer.spec), rt.device_name(), to_string(rt.arch()), plan,
             std::chrono::duration<double, std::milli>(t1 - t0).count(),
             std::chrono::duration<double, std::milli>(t2 - t1).count(), output_path.empty() ? "nothing" : output_path);
  if (!args.has("check")) return kExitOk;

  // In the layer's precision, under its a4 scales (the kernels' quantization of x and the intermediate).
  const ReferenceOutput ref = reference_forward(layer, in, layer.spec.precision, layer_activation_scales(layer));
  std::vector<float> actual(out.size());
  for (size_t i = 0; i < out.size(); ++i) actual[i] = bf16_to_float(out[i]);
  const Agreement a = compare(actual, ref.out_f64);
  const bool ok = a.nonfinite == 0 && a.rel_l2 <= kCheckRelL2;
  fmt::print("check vs CPU reference: rel_l2 {:.3e}  cosine {:.6f}  max_abs {:.3e}  nonfinite {}  -> {} (rel_l2 <= {:g})\n",
             a.rel_l2, a.cosine, a.max_abs, a.nonfinite, ok ? "PASS" : "FAIL", kCheckRelL2);
  return ok ? kExitOk : kExitFailed;
}

}  // namespace moejit::cli
