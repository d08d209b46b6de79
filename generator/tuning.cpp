// TuningOverrides: the planner's MOEJIT_* overrides, read from the environment once.
#include "moejit/tuning.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>

#include "moejit/error.hpp"

namespace moejit {

TileOverride TileOverride::parse(std::string_view text, std::string_view variable) {
  // Letter-number fields in the order w, n, d, o, p, g, s, c, f, x, m; w and d required.
  constexpr std::string_view order("wndopgscfxm");
  TileOverride t;
  t.text = std::string(text);
  t.value = {0, 1, 0, 0, 1, 1, 1, 8, 0, 0, 0};
  size_t at = 0, last = 0;
  bool ok = true;
  while (ok && at < text.size()) {
    const size_t field = order.find(text[at]);
    ok = field != std::string_view::npos && (at == 0 ? field == 0 : field > last) && !t.seen[field];
    if (!ok) break;
    const char* begin = text.data() + at + 1;
    auto [ptr, ec] = std::from_chars(begin, text.data() + text.size(), t.value[field]);
    ok = ec == std::errc() && ptr != begin;
    t.seen[field] = true;
    last = field;
    at = static_cast<size_t>(ptr - text.data());
  }
  const auto& v = t.value;
  // Token tiles: 1, 2, 4 or 8 for register-fed MMAs, 1..32 with warpgroup MMA (m1, or a prefill tile,
  // always on it; the key checks the rest).
  const bool wide = v[10] == 1 || variable.starts_with("MOEJIT_PREFILL_");
  ok = ok && t.seen[0] && t.seen[2] && v[0] >= 1 && v[0] <= 32 &&
       (wide ? v[1] >= 1 && v[1] <= 32 : v[1] == 1 || v[1] == 2 || v[1] == 4 || v[1] == 8) && v[2] >= 1 &&
       v[2] <= 8 && v[3] >= 0 && v[3] <= 32 && v[4] >= 1 && v[4] <= 8 && v[5] >= 1 && v[5] <= 8 &&
       (v[6] == 1 || v[6] == 2) && (v[7] == 8 || v[7] == 4) && v[8] >= 0 && v[8] <= 16 && (v[9] == 0 || v[9] == 1) &&
       (v[10] == 0 || v[10] == 1);
  if (!ok)
    throw Error(fmt::format("{}='{}' must look like w4d2, w4d2o6, w4n1d1o6, w8d4o2p2, w8d1o3p2g2, w4d4p4, w16d1o1p4s2, "
                            "w4d1o8c4, w8d1o4c4f2, w4d1o8c4x1 or w8n16d3o1m1 (warps 1..32, token tiles 1, 2, 4 or 8 (1..32 "
                            "with m1 or for a prefill kernel), depth 1..8, CTAs per SM 0..32, parts 1..8, CTAs per slab 1..8, slabs per CTA 1 "
                            "or 2, columns 8 or 4, L2 prefetch 0..16 chunks, staged x 0 or 1, warpgroup MMA 0 or 1)",
                            variable, text));
  return t;
}

void TileOverride::apply(KernelKey& k) const {
  k.warps = value[0];
  if (seen[1]) k.ntiles = value[1];
  k.depth = value[2];
  k.min_blocks = value[3];
  if (seen[4]) k.parts = value[4];
  if (seen[5]) k.groups = value[5];
  // Slabs per CTA set the grid's shape, as the warps do: a tile without s has one (even where the
  // planner chose two), so that an override never meets a planned field it cannot combine with (g).
  k.slabs = seen[6] ? value[6] : 1;
  if (k.slabs == 2 && !seen[5]) k.groups = 1;  // two slabs per CTA keep each slab in one CTA
  if (seen[7]) k.columns = value[7];
  if (seen[8]) k.l2_ahead = value[8];
  if (seen[9]) k.x_staged = value[9] == 1;
  // Likewise the MMA kind: an override without m1 asks for the register-fed MMAs.
  k.wgmma = seen[10] && value[10] == 1;
}

namespace {
// The variable's value, or nothing when it is unset or empty.
std::optional<std::string_view> variable(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string_view(v);
}

std::optional<TileOverride> tile_variable(const char* name) {
  const auto v = variable(name);
  if (!v) return std::nullopt;
  return TileOverride::parse(*v, name);
}

template <class T>
void describe_one(std::string& s, const char* name, const std::optional<T>& v, std::string_view text) {
  if (!v) return;
  s += fmt::format("{}{}={}", s.empty() ? "" : " ", name, text);
}
}  // namespace

TuningOverrides TuningOverrides::from_environment() {
  TuningOverrides t;
  if (const auto v = variable("MOEJIT_DECODE_LAUNCH")) {
    if (*v == "pdl") t.decode_launch = DecodeLaunch::pdl;
    else if (*v == "plain") t.decode_launch = DecodeLaunch::plain;
    else if (*v == "cooperative") t.decode_launch = DecodeLaunch::cooperative;
    else throw Error(fmt::format("MOEJIT_DECODE_LAUNCH='{}' must be pdl, plain or cooperative", *v));
  }
  if (const auto v = variable("MOEJIT_DECODE_FC2")) {
    if (*v != "sum" && *v != "split") throw Error(fmt::format("MOEJIT_DECODE_FC2='{}' must be split or sum", *v));
    t.decode_fc2_sum = *v == "sum";
  }
  if (const auto v = variable("MOEJIT_DECODE_FC1")) {
    if (*v == "grid") t.decode_fc1 = DecodeFc1Variant::grid;
    else if (*v == "loop") t.decode_fc1 = DecodeFc1Variant::loop;
    else if (*v == "stream") t.decode_fc1 = DecodeFc1Variant::stream;
    else throw Error(fmt::format("MOEJIT_DECODE_FC1='{}' must be grid, loop or stream", *v));
  }
  if (const auto v = variable("MOEJIT_DECODE_COLUMNS")) {
    if (*v != "8" && *v != "4") throw Error(fmt::format("MOEJIT_DECODE_COLUMNS='{}' must be 8 or 4", *v));
    t.decode_columns = *v == "8" ? 8 : 4;
  }
  if (const auto v = variable("MOEJIT_DECODE_INLINE_PAIRS")) {
    int n = -1;
    auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
    if (ec != std::errc() || ptr != v->data() + v->size() || n < 0 || n > 128)
      throw Error(fmt::format("MOEJIT_DECODE_INLINE_PAIRS='{}' must be an integer in [0, 128]", *v));
    t.decode_inline_pairs = n;
  }
  t.decode_tile = tile_variable("MOEJIT_DECODE_TILE");
  t.decode_tile_fc1 = tile_variable("MOEJIT_DECODE_TILE_FC1");
  t.decode_tile_fc2 = tile_variable("MOEJIT_DECODE_TILE_FC2");
  t.batch_tile_fc1 = tile_variable("MOEJIT_BATCH_TILE_FC1");
  t.batch_tile_fc2 = tile_variable("MOEJIT_BATCH_TILE_FC2");
  t.prefill_tile_fc1 = tile_variable("MOEJIT_PREFILL_TILE_FC1");
  t.prefill_tile_fc2 = tile_variable("MOEJIT_PREFILL_TILE_FC2");
  return t;
}

bool TuningOverrides::empty() const { return *this == TuningOverrides{}; }

std::string TuningOverrides::describe() const {
  std::string s;
  describe_one(s, "MOEJIT_DECODE_LAUNCH", decode_launch, decode_launch ? to_string(*decode_launch) : "");
  describe_one(s, "MOEJIT_DECODE_FC2", decode_fc2_sum, decode_fc2_sum.value_or(false) ? "sum" : "split");
  static constexpr std::string_view kFc1[] = {"grid", "loop", "stream"};
  describe_one(s, "MOEJIT_DECODE_FC1", decode_fc1, decode_fc1 ? kFc1[static_cast<int>(*decode_fc1)] : "");
  const std::string columns = decode_columns ? std::to_string(*decode_columns) : "";
  describe_one(s, "MOEJIT_DECODE_COLUMNS", decode_columns, columns);
  const std::string pairs = decode_inline_pairs ? std::to_string(*decode_inline_pairs) : "";
  describe_one(s, "MOEJIT_DECODE_INLINE_PAIRS", decode_inline_pairs, pairs);
  auto tile = [&](const char* name, const std::optional<TileOverride>& t) { describe_one(s, name, t, t ? t->text : ""); };
  tile("MOEJIT_DECODE_TILE", decode_tile);
  tile("MOEJIT_DECODE_TILE_FC1", decode_tile_fc1);
  tile("MOEJIT_DECODE_TILE_FC2", decode_tile_fc2);
  tile("MOEJIT_BATCH_TILE_FC1", batch_tile_fc1);
  tile("MOEJIT_BATCH_TILE_FC2", batch_tile_fc2);
  tile("MOEJIT_PREFILL_TILE_FC1", prefill_tile_fc1);
  tile("MOEJIT_PREFILL_TILE_FC2", prefill_tile_fc2);
  return s.empty() ? "none" : s;
}

}  // namespace moejit
