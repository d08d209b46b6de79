// The planner's overrides: read once from the environment into TuningOverrides, never by the planner.
#include "catch_compat.hpp"

#include <string>

#include "moejit/error.hpp"
#include "moejit/model_config.hpp"
#include "moejit/planner.hpp"
#include "moejit/tuning.hpp"
#include "scoped_env.hpp"

using namespace moejit;
using moejit::test::ScopedEnv;

namespace {
// Every variable TuningOverrides reads, so a case can set any of them and leave the process as it found it.
ScopedEnv guard_all() {
  return ScopedEnv{"MOEJIT_DECODE_LAUNCH",  "MOEJIT_DECODE_FC2",      "MOEJIT_DECODE_FC1",
                   "MOEJIT_DECODE_COLUMNS", "MOEJIT_DECODE_INLINE_PAIRS", "MOEJIT_DECODE_TILE",
                   "MOEJIT_DECODE_TILE_FC1", "MOEJIT_DECODE_TILE_FC2", "MOEJIT_BATCH_TILE_FC1",
                   "MOEJIT_BATCH_TILE_FC2"};
}

std::string all_keys(const std::vector<KernelKey>& keys) {
  std::string s;
  for (const auto& k : keys) s += k.str() + "\n";
  return s;
}
}  // namespace

TEST_CASE("the planner reads no environment: keys prewarmed before a change are the keys forward plans after it",
          "[planner][tuning]") {
  auto env = guard_all();
  for (const char* v : {"MOEJIT_DECODE_LAUNCH", "MOEJIT_DECODE_FC2", "MOEJIT_DECODE_FC1", "MOEJIT_DECODE_COLUMNS",
                        "MOEJIT_DECODE_INLINE_PAIRS", "MOEJIT_DECODE_TILE", "MOEJIT_DECODE_TILE_FC1",
                        "MOEJIT_DECODE_TILE_FC2", "MOEJIT_BATCH_TILE_FC1", "MOEJIT_BATCH_TILE_FC2"})
    env.unset(v);
  const LayerSpec spec = load_model_config("gpt-oss-120b").local();
  // What a server prewarms (the overrides as read at its start: none) ...
  const TuningOverrides at_start = TuningOverrides::from_environment();
  CHECK(at_start.empty());
  CHECK(at_start.describe() == "none");
  const std::string prewarmed = all_keys(keys_for_range(spec, Arch::sm_90a, 512, 132, Family::automatic, at_start));
  // ... then someone changes the environment, malformed values included: the plans with the overrides
  // read at the start do not move, and make_plan does not even notice a malformed variable.
  env.set("MOEJIT_DECODE_COLUMNS", "8");
  env.set("MOEJIT_DECODE_LAUNCH", "cooperative");
  env.set("MOEJIT_DECODE_TILE_FC1", "w8d2o3");
  env.set("MOEJIT_BATCH_TILE_FC2", "w4n8d3");
  CHECK(all_keys(keys_for_range(spec, Arch::sm_90a, 512, 132, Family::automatic, at_start)) == prewarmed);
  CHECK(all_keys(keys_for_range(spec, Arch::sm_90a, 512, 132)) == prewarmed);
  env.set("MOEJIT_DECODE_INLINE_PAIRS", "not a number");
  for (int m : {1, 2, 16, 64, 300, 4096}) CHECK_NOTHROW(make_plan(spec, Arch::sm_90a, m, 132));
  // Read again (a new Runtime or CLI command), the overrides say so at once, naming the variable.
  CHECK_THROWS_WITH(TuningOverrides::from_environment(), Catch::Contains("MOEJIT_DECODE_INLINE_PAIRS"));
  env.unset("MOEJIT_DECODE_INLINE_PAIRS");
  const TuningOverrides later = TuningOverrides::from_environment();
  CHECK_FALSE(later.empty());
  CHECK(later.describe() == "MOEJIT_DECODE_LAUNCH=cooperative MOEJIT_DECODE_COLUMNS=8 MOEJIT_DECODE_TILE_FC1=w8d2o3 "
                            "MOEJIT_BATCH_TILE_FC2=w4n8d3");
  CHECK(all_keys(keys_for_range(spec, Arch::sm_90a, 512, 132, Family::automatic, later)) != prewarmed);
}

TEST_CASE("each override variable is parsed once, with the accepted values in its error", "[tuning]") {
  auto env = guard_all();
  struct Bad {
    const char* variable;
    const char* value;
    const char* says;
  };
  for (const Bad& b : {Bad{"MOEJIT_DECODE_LAUNCH", "sometimes", "pdl, plain or cooperative"},
                       Bad{"MOEJIT_DECODE_FC2", "both", "split or sum"},
                       Bad{"MOEJIT_DECODE_FC1", "maybe", "grid, loop or stream"},
                       Bad{"MOEJIT_DECODE_COLUMNS", "6", "must be 8 or 4"},
                       Bad{"MOEJIT_DECODE_INLINE_PAIRS", "129", "[0, 128]"},
                       Bad{"MOEJIT_DECODE_INLINE_PAIRS", "-1", "[0, 128]"},
                       Bad{"MOEJIT_DECODE_TILE", "d1w4", "must look like"},
                       Bad{"MOEJIT_DECODE_TILE_FC1", "w4n3d1", "must look like"},
                       Bad{"MOEJIT_DECODE_TILE_FC2", "w8d1g2p2", "must look like"},
                       Bad{"MOEJIT_BATCH_TILE_FC1", "w4d1x2", "must look like"},
                       Bad{"MOEJIT_BATCH_TILE_FC2", "w4n33d2m1", "must look like"}}) {
    INFO(b.variable << "=" << b.value);
    env.set(b.variable, b.value);
    CHECK_THROWS_WITH(TuningOverrides::from_environment(), Catch::Contains(b.variable) && Catch::Contains(b.says));
    env.unset(b.variable);
  }
  // An empty variable is an unset one.
  env.set("MOEJIT_DECODE_COLUMNS", "");
  CHECK(TuningOverrides::from_environment().empty());
  env.set("MOEJIT_DECODE_COLUMNS", "4");
  env.set("MOEJIT_DECODE_FC2", "split");
  env.set("MOEJIT_DECODE_TILE_FC2", "w16d2o1p2s2");
  const TuningOverrides t = TuningOverrides::from_environment();
  CHECK(t.decode_columns == 4);
  CHECK(t.decode_fc2_sum == false);
  REQUIRE(t.decode_tile_fc2);
  KernelKey k;
  k.groups = 2;
  t.decode_tile_fc2->apply(k);
  CHECK(k.warps == 16);
  CHECK(k.depth == 2);
  CHECK(k.min_blocks == 1);
  CHECK(k.parts == 2);
  CHECK(k.slabs == 2);
  CHECK(k.groups == 1);  // two slabs per CTA keep each slab in one CTA
  CHECK_FALSE(k.wgmma);
}
