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
  static const CommandSpec spec{
      "run",
      "--layer L.safetensors --input I.safetensors --output O.safetensors [--check] [--family auto|decode|batch]",
      "run one layer",
      fmt::format(
          "Runs one MoE layer on the GPU: the layer file holds the logical weights (DESIGN §3: w13/w1, w2, scales,\n"
          "global scales, biases and metadata), the input file x (BF16 [M,H]), topk_ids (I32 [M,K]) and\n"
          "topk_weights (F32 [M,K]); the output file gets out (BF16 [M,H]).\n"
          "--check also computes the fp64 CPU reference (DESIGN §1) and prints rel_l2 = ||gpu - ref|| / ||ref||,\n"
          "cosine and max_abs, where ref is the unrounded fp64 output. The check passes when rel_l2 <= {:g} and\n"
          "every output is finite (the final bf16 rounding alone gives rel_l2 ~ 1e-3); otherwise run exits 1.\n"
          "The output may not be one of the input files. Needs a GPU (`moejit validate` checks the files without one).",
          kCheckRelL2),
      {{"layer", "PATH", "layer file (.safetensors)"},
       {"input", "PATH", "input file (.safetensors)"},
       {"output", "PATH", "output file to write (.safetensors)"},
       {"check", "", "compare with the CPU reference (tolerance above); exit 1 when outside it"},
       {"family", "F", "auto (default), decode or batch: force a kernel family (fails if it cannot serve M)"}},
      {}};
  Args args(spec, argc, argv, 2);
  if (args.help()) {
    std::fputs(help_text(spec).c_str(), stdout);
    return kExitOk;
  }
  for (const char* need : {"layer", "input", "output"})
    if (!args.has(need) || args.str(need).empty()) throw UsageError(fmt::format("--{} PATH is required", need));
  Family force = Family::automatic;
  try {
    force = parse_family(args.str("family", "auto"));
  } catch (const Error& e) {
    throw UsageError(fmt::format("--family: {}", e.what()));
  }
  // Files first (the rules `moejit validate` applies without a GPU), then the GPU.
  const std::string layer_path = args.str("layer"), input_path = args.str("input"), output_path = args.str("output");
  RunFiles files = read_run_files(layer_path, input_path, output_path);
  const HostLayer& layer = files.layer;
  const HostInputs& in = *files.inputs;
  std::string why;
  if (!gpu_available(&why))
    throw Error(fmt::format("no usable GPU ({}); run executes kernels and needs a CUDA device "
                            "(plan, inspect, prewarm --arch and validate work without one)",
                            why));

  Runtime rt;
  const auto t0 = std::chrono::steady_clock::now();
  auto prepared = rt.prepare(layer);
  const auto t1 = std::chrono::steady_clock::now();
  const std::vector<uint16_t> out = forward_once(rt, *prepared, in, force);
  const auto t2 = std::chrono::steady_clock::now();
  write_output_file(output_path, out, in.tokens, layer.spec.hidden);
  const std::string plan = in.tokens > 0 ? rt.plan(*prepared, in.tokens, force).describe() : "M=0 (nothing to do)";
  fmt::print("run: {} on {} ({})\n  {}\n  prepare {:.1f} ms, first forward (includes kernel loading) {:.1f} ms; wrote {}\n",
             describe_spec(layer.spec), rt.device_name(), to_string(rt.arch()), plan,
             std::chrono::duration<double, std::milli>(t1 - t0).count(),
             std::chrono::duration<double, std::milli>(t2 - t1).count(), output_path);
  if (!args.has("check")) return kExitOk;

  const ReferenceOutput ref = reference_forward(layer, in);
  std::vector<float> actual(out.size());
  for (size_t i = 0; i < out.size(); ++i) actual[i] = bf16_to_float(out[i]);
  const Agreement a = compare(actual, ref.out_f64);
  const bool ok = a.nonfinite == 0 && a.rel_l2 <= kCheckRelL2;
  fmt::print("check vs CPU reference: rel_l2 {:.3e}  cosine {:.6f}  max_abs {:.3e}  nonfinite {}  -> {} (rel_l2 <= {:g})\n",
             a.rel_l2, a.cosine, a.max_abs, a.nonfinite, ok ? "PASS" : "FAIL", kCheckRelL2);
  return ok ? kExitOk : kExitFailed;
}

}  // namespace moejit::cli
