// `moejit plan`: which family and kernels the planner picks for each token count of a config.
#include <fmt/format.h>

#include <cstdio>
#include <set>
#include <string>

#include "moejit/error.hpp"
#include "tools/cli_common.hpp"

namespace moejit::cli {

void print_plan_table(const LayerSpec& spec, Arch arch, int sm_count, const std::vector<int>& tokens, Family force,
                      const TuningOverrides& tuning) {
  struct Row {
    int first = 0, last = 0;
    std::string family;
    std::vector<std::string> kernels;
    std::string error;
  };
  std::vector<Row> rows;
  std::set<KernelKey> distinct;
  for (int m : tokens) {
    Row r;
    r.first = r.last = m;
    try {
      const Plan p = make_plan(spec, arch, m, sm_count, force, tuning);
      r.family = std::string(to_string(p.family));
      for (const auto& k : p.kernels) {
        r.kernels.push_back(k.str());
        distinct.insert(k);
      }
    } catch (const Error& e) {
      r.error = e.what();
    }
    // Merge with the previous row when M is consecutive and the plan is the same.
    if (!rows.empty() && rows.back().last + 1 == m && rows.back().family == r.family &&
        rows.back().kernels == r.kernels && rows.back().error == r.error) {
      rows.back().last = m;
      continue;
    }
    rows.push_back(std::move(r));
  }
  fmt::print("{:>9}  {:<7} {}\n", "M", "family", "kernels (launch order)");
  for (const auto& r : rows) {
    const std::string ms = r.first == r.last ? std::to_string(r.first) : fmt::format("{}-{}", r.first, r.last);
    if (!r.error.empty()) {
      fmt::print("{:>9}  {:<7} {}\n", ms, "-", r.error);
      continue;
    }
    for (size_t i = 0; i < r.kernels.size(); ++i)
      fmt::print("{:>9}  {:<7} {}\n", i == 0 ? ms : "", i == 0 ? r.family : "", r.kernels[i]);
  }
  fmt::print("{} distinct kernels for these token counts (prewarm also builds the {} weight-repack kernel)\n",
             distinct.size(), to_string(arch));
}

int cmd_plan(int argc, char** argv) {
  static const CommandSpec spec = with_checkpoint_options(CommandSpec{
      "plan",
      "--config NAME|PATH [--arch ARCH] [--sm-count N] [--max-tokens N] [--tokens LIST] [--family auto|decode|batch|prefill]",
      "show the planner's choice for each M",
      "Prints, for each token count M, the kernel family and the kernel keys (in launch order) the planner picks\n"
      "for the config's local layer; consecutive M with the same plan are merged into a range. Pure host code:\n"
      "works without a GPU (then --arch defaults to sm_90a).",
      {{"config", "NAME|PATH", "bundled config name or JSON file (default: " + default_config_name() + ")"},
       {"arch", "ARCH", "sm_90a, sm_100a, sm_120a or sm_121a (default: the GPU's, else sm_90a)"},
       {"sm-count", "N", "SM count (default: the GPU's, else the architecture's usual GPU: 132 sm_90a, 148 sm_100a, 188 sm_120a, 48 sm_121a)"},
       {"max-tokens", "N", "show M = 1..N (default 64)"},
       {"tokens", "LIST", "show these M instead, e.g. 1,2,4 or 1-8,16"},
       {"family", "F", "force a family: auto (default), decode, batch or prefill"},
       {"precision", "P", "activation precision a16, a8 or a4 (default: the config's, else a16)"}},
      {}}, false, "[--arch ARCH] [--sm-count N] [--max-tokens N] [--tokens LIST] [--precision P]");
  Args args(spec, argc, argv, 2);
  if (args.help()) {
    std::fputs(help_text(spec).c_str(), stdout);
    return kExitOk;
  }
  const ModelConfig cfg = config_from_args(args);
  const int max_tokens = args.integer("max-tokens", 64, 1, 1 << 20);
  std::vector<int> all;
  for (int m = 1; m <= max_tokens; ++m) all.push_back(m);
  const std::vector<int> tokens = args.int_list("tokens", all, 1, 1 << 20);
  Family force = Family::automatic;
  try {
    force = parse_family(args.str("family", "auto"));
  } catch (const Error& e) {
    throw UsageError(fmt::format("--family: {}", e.what()));
  }
  std::string note;
  const Arch arch = arch_from_args(args, Arch::sm_90a, &note);
  std::string sm_note;
  const int sms = sm_count_from_args(args, arch, &sm_note);
  LayerSpec local = cfg.local();
  local.precision = precision_from_args(args, local.precision);
  fmt::print("plan {} ({})\n  arch {}, {} SMs{}, tp={} ep={} ep_rank={}\n", cfg.name, describe_spec(local),
             note.empty() ? std::string(to_string(arch)) : note, sms, sm_note.empty() ? "" : " (" + sm_note + ")",
             cfg.tp, cfg.ep, cfg.ep_rank);
  print_plan_table(local, arch, sms, tokens, force, TuningOverrides::from_environment());
  return kExitOk;
}

}  // namespace moejit::cli
