// The workspace layout (runtime/workspace.hpp): every region 256-byte aligned, in order, none overlapping
// the next, each as large as its readers need for max_tokens tokens of every bundled config in every
// precision. The GPU suites check what the kernels write; this checks the sizes they are given.
#include "catch_compat.hpp"

#include <cstddef>
#include <string>
#include <vector>

#include "moejit/model_config.hpp"
#include "runtime/workspace.hpp"

using namespace moejit;
using namespace moejit::detail;

namespace {
struct Region {
  const char* name;
  size_t at;
};

// The regions in the order WorkspaceLayout::make takes them, then the end.
std::vector<Region> regions(const WorkspaceLayout& w) {
  return {{"num_active", w.num_active}, {"active_expert", w.active_expert}, {"active_offset", w.active_offset},
          {"pair_index", w.pair_index}, {"counters", w.counters},           {"act", w.act},
          {"partial", w.partial},       {"tiles", w.tiles},                 {"row_pair", w.row_pair},
          {"xq", w.xq},                 {"barrier", w.barrier},             {"end", w.total}};
}

// Bytes from region `name` to the next one.
size_t room(const WorkspaceLayout& w, const std::string& name) {
  const std::vector<Region> r = regions(w);
  for (size_t i = 0; i + 1 < r.size(); ++i)
    if (name == r[i].name) return r[i + 1].at - r[i].at;
  FAIL("no region " << name);
  return 0;
}
}  // namespace

TEST_CASE("workspace regions are aligned, ordered and as large as their readers need", "[workspace]") {
  for (const std::string& name : bundled_config_names()) {
    const LayerSpec base = load_model_config(name).local();
    for (ActPrecision p : {ActPrecision::a16, ActPrecision::a8, ActPrecision::a4})
      for (int tokens : {1, 17, 1000, 4096}) {
        LayerSpec spec = base;
        spec.precision = p;
        INFO(name << " " << to_string(p) << " max_tokens=" << tokens);
        const WorkspaceLayout w = WorkspaceLayout::make(spec, tokens);
        const std::vector<Region> r = regions(w);
        CHECK(r.front().at == 0);
        for (size_t i = 0; i < r.size(); ++i) {
          INFO(r[i].name);
          CHECK(r[i].at % 256 == 0);
          if (i > 0) CHECK(r[i].at >= r[i - 1].at);
        }
        const size_t pairs = static_cast<size_t>(tokens) * spec.top_k;
        const size_t h = static_cast<size_t>(spec.hidden);
        // FC2's fp32 rows per pair; per pair, the act_quant pre-pass's bf16 rows share the region.
        CHECK(room(w, "partial") >= pairs * h * 4);
        CHECK(room(w, "pair_index") >= pairs * 4);
        // x quantized once per token (a8/a4 only): one bf16 row per token, apart from the prefill family's
        // blocks of the layer input (partial) that its gather writes from them.
        if (p == ActPrecision::a16)
          CHECK(room(w, "xq") == 0);
        else
          CHECK(room(w, "xq") >= static_cast<size_t>(tokens) * h * 2);
      }
  }
}

TEST_CASE("a workspace for fewer tokens is never larger", "[workspace]") {
  for (const std::string& name : bundled_config_names()) {
    LayerSpec spec = load_model_config(name).local();
    for (ActPrecision p : {ActPrecision::a16, ActPrecision::a4}) {
      spec.precision = p;
      INFO(name << " " << to_string(p));
      size_t previous = 0;
      for (int tokens : {1, 2, 64, 65, 1024, 16384}) {
        const size_t total = WorkspaceLayout::make(spec, tokens).total;
        CHECK(total >= previous);
        previous = total;
      }
    }
  }
}
