// `moejit compress`: a layer file into a CSF layer file (docs/CSF.md), and the bytes plain vs CSF of
// each bundled config's geometry on layers made the way real ones are.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "moejit/csf_layer.hpp"
#include "moejit/csf_prepared.hpp"
#include "moejit/error.hpp"
#include "moejit/safetensors.hpp"
#include "tools/cli_common.hpp"

namespace moejit::cli {
namespace {

void print_plane_lines(const LayerStorageReport& r) {
  for (const ScalePlaneReport& p : r.planes)
    fmt::print("  {:<9}  plain {:>10}  CSF {:>10}  {:5.2f}x  {}  ({} packed rows, {} plain rows, {} exceptions)\n",
               p.name, human_bytes(static_cast<double>(p.plain_bytes)), human_bytes(static_cast<double>(p.csf_bytes)),
               p.stats.ratio(), p.stored_as_csf ? "stored as CSF" : "kept plain   ", p.stats.packed_rows,
               p.stats.plain_rows, p.stats.exceptions);
}

void print_totals(const LayerStorageReport& r) {
  const double plain = static_cast<double>(r.plain_total()), stored = static_cast<double>(r.stored_total());
  fmt::print("  scales     plain {:>10}  stored {:>10}  {:5.2f}x\n", human_bytes(static_cast<double>(r.plain_scale_bytes())),
             human_bytes(static_cast<double>(r.stored_scale_bytes())),
             static_cast<double>(r.plain_scale_bytes()) / static_cast<double>(std::max<size_t>(r.stored_scale_bytes(), 1)));
  const double saved = plain > 0 ? 100.0 * (plain - stored) / plain : 0.0;
  fmt::print("  layer      plain {:>10}  stored {:>10}  {:.2f} % {} bytes\n", human_bytes(plain), human_bytes(stored),
             saved < 0 ? -saved : saved, saved < 0 ? "more" : "fewer");
}

int compress_file(const Args& args) {
  const std::string in = args.str("layer"), out = args.str("output");
  if (in.empty()) throw UsageError("--layer PATH is required (or --config for the geometry report)");
  if (out.empty() && !args.has("report")) throw UsageError("--output PATH is required (or --report alone)");
  HostLayer layer;
  try {
    layer = read_layer_file(in);
  } catch (const Error& e) {
    throw Error(fmt::format("--layer {}: {}", in, e.what()));
  }
  const LayerStorageReport r = compress_scales(layer, args.has("always") ? CsfPolicy::always : CsfPolicy::when_smaller);
  if (!out.empty()) write_layer_file(out, layer);
  fmt::print("compress: {}\n", describe_spec(layer.spec));
  if (args.has("report")) print_plane_lines(r);
  print_totals(r);
  if (!out.empty()) fmt::print("  wrote {}{}\n", out, has_csf_scales(layer) ? "" : " (no plane shrinks: every plane plain)");
  return kExitOk;
}

// One config's geometry with `experts` experts (CSF works per row, so the ratio does not depend on E;
// per-layer bytes are scaled to the config's E).
int geometry_report(const Args& args) {
  std::vector<std::string> names;
  if (args.str("config") == "all") names = bundled_config_names();
  else names.push_back(args.str("config"));
  std::vector<ModelConfig> configs;  // all loaded before anything is printed
  for (const std::string& name : names) {
    try {
      configs.push_back(load_model_config(name));
    } catch (const Error& e) {
      throw UsageError(fmt::format("--config {}: {}", name, e.what()));
    }
  }
  const int experts = args.integer("experts", 2, 1, 1 << 16);
  const uint64_t seed = static_cast<uint64_t>(args.integer("seed", 1, 0));
  const std::string spread_text = args.str("row-spread", "0.5");
  double spread = 0;
  const auto [end, ec] = std::from_chars(spread_text.data(), spread_text.data() + spread_text.size(), spread);
  if (ec != std::errc() || end != spread_text.data() + spread_text.size() || !(spread >= 0 && spread <= 4))
    throw UsageError(fmt::format("--row-spread: '{}' is not a number in [0, 4]", spread_text));
  fmt::print("CSF on generated layers (docs/CSF.md): realistic = normal weights, per-row spread {} (ln), quantized by\n"
             "moejit's quantizers; random = random FP4 codes and scales. Ratios from {} expert(s) per config, bytes\n"
             "per layer scaled to the config's E.\n\n",
             spread, experts);
  fmt::print("{:<24} {:<6} {:>7} {:>7}  {:>12} {:>12} {:>7} {:>9}  {:>14}\n", "config", "format", "C fc1", "C fc2",
             "scales plain", "scales CSF", "ratio", "layer -%", "random scales");
  for (const ModelConfig& c : configs) {
    LayerSpec spec = c.local();
    const double scale_to_layer = static_cast<double>(spec.experts) / std::min(spec.experts, experts);
    spec.experts = std::min(spec.experts, experts);
    HostLayer real = make_realistic_layer(spec, seed, spread);
    const LayerStorageReport r = compress_scales(real);
    HostLayer noise = make_random_code_layer(spec, seed);
    const LayerStorageReport n = compress_scales(noise);
    const double plain = static_cast<double>(r.plain_total()), stored = static_cast<double>(r.stored_total());
    const int block = scale_block(spec.format);
    fmt::print("{:<24} {:<6} {:>7} {:>7}  {:>12} {:>12} {:>6.2f}x {:>8.2f}%  {:>14}\n", c.name, to_string(spec.format),
               spec.hidden / block, spec.intermediate / block,
               human_bytes(static_cast<double>(r.plain_scale_bytes()) * scale_to_layer),
               human_bytes(static_cast<double>(r.stored_scale_bytes()) * scale_to_layer),
               static_cast<double>(r.plain_scale_bytes()) / static_cast<double>(r.stored_scale_bytes()),
               100.0 * (plain - stored) / plain,
               has_csf_scales(noise) ? fmt::format("{:.2f}x", static_cast<double>(n.plain_scale_bytes()) /
                                                                  static_cast<double>(n.stored_scale_bytes()))
                                     : std::string("kept plain"));
    if (args.has("report")) {
      fmt::print("  the generated {} expert(s), realistic:\n", spec.experts);
      print_plane_lines(r);
      // What the decode kernels read (docs/CSF.md §8): the prepared planes, plain and CSF, per layer.
      std::vector<uint8_t> s1, s2;
      const std::vector<uint8_t>& l1 = plain_scale_plane(real.w13_scale, real.w13_scale_csf, s1);
      const std::vector<uint8_t>& l2 = plain_scale_plane(real.w2_scale, real.w2_scale_csf, s2);
      for (const auto& [name, g, plane] : {std::tuple{"FC1", fc1_prepared_geometry(spec), &l1},
                                           std::tuple{"FC2", fc2_prepared_geometry(spec), &l2}}) {
        const PreparedCsfPlane p = build_prepared_csf(g, plane->data());
        fmt::print("  prepared {}: plain {:>10}  CSF {:>10}  {:5.2f}x  ({:.2f} records per row)\n", name,
                   human_bytes(static_cast<double>(g.plain_bytes()) * scale_to_layer),
                   human_bytes(static_cast<double>(p.bytes()) * scale_to_layer),
                   static_cast<double>(g.plain_bytes()) / static_cast<double>(p.bytes()),
                   static_cast<double>(p.records(g)) / (static_cast<double>(g.experts) * g.slabs * g.mats * 16));
      }
    }
  }
  return kExitOk;
}

}  // namespace

int cmd_compress(int argc, char** argv) {
  static const CommandSpec spec{
      "compress",
      "--layer IN.safetensors --output OUT.safetensors [--report] [--always] | --config NAME|all [--experts N] [--report]",
      "turn a layer file's scale planes into the compressed scale format (CSF); bytes plain vs CSF",
      "With --layer: reads a layer file (DESIGN §3) and writes it with each scale plane in the compressed scale\n"
      "format of docs/CSF.md (FP4 codes and everything else unchanged; __metadata__ scale_storage = csf). A\n"
      "plane whose CSF form is not smaller stays plain. Prints the bytes of the scales and of the whole layer\n"
      "plain vs stored; --report adds one line per plane (rows stored packed or plain, exception records).\n"
      "`moejit run` reads the output like the input and computes bit-identical outputs.\n"
      "With --config: measures CSF on layers of the config's geometry (all: every bundled config), made the way\n"
      "real ones are (normal weights with per-row spread, quantized by moejit's quantizers), next to random\n"
      "scales (which do not compress and stay plain). No GPU needed.",
      {{"layer", "PATH", "layer file to compress"},
       {"output", "PATH", "CSF layer file to write"},
       {"report", "", "one line per scale plane"},
       {"always", "", "store every plane as CSF even where it is larger (tests)"},
       {"config", "NAME|all", "geometry report instead: a config path or bundled name, or all"},
       {"experts", "N", "experts per generated layer in the geometry report (default 2)"},
       {"seed", "S", "seed of the generated layers (default 1)"},
       {"row-spread", "X", "standard deviation of ln(row norm) of the realistic layers (default 0.5)"}},
      {}};
  Args args(spec, argc, argv, 2);
  if (args.help()) {
    std::fputs(help_text(spec).c_str(), stdout);
    return kExitOk;
  }
  if (args.has("config") && args.has("layer")) throw UsageError("--layer and --config exclude each other");
  return args.has("config") ? geometry_report(args) : compress_file(args);
}

}  // namespace moejit::cli
