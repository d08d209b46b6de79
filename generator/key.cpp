// KernelKey: canonical string form, parsing and normalization.
#include "moejit/key.hpp"

#include <fmt/format.h>

#include <charconv>
#include <vector>

#include "moejit/error.hpp"

namespace moejit {

std::string_view to_string(KernelKind k) {
  switch (k) {
    case KernelKind::prepare: return "prepare";
    case KernelKind::route: return "route";
    case KernelKind::decode_fc1: return "decode_fc1";
    case KernelKind::decode_fc2: return "decode_fc2";
    case KernelKind::decode_fused: return "decode_fused";
    case KernelKind::decode_fc2_sum: return "decode_fc2_sum";
    case KernelKind::decode_fc1_loop: return "decode_fc1_loop";
    case KernelKind::decode_fc1_stream: return "decode_fc1_stream";
    case KernelKind::decode_pipe: return "decode_pipe";
    case KernelKind::batch_fc1: return "batch_fc1";
    case KernelKind::batch_fc2: return "batch_fc2";
  }
  return "?";
}

KernelKind parse_kernel_kind(std::string_view s) {
  for (auto k : {KernelKind::prepare, KernelKind::route, KernelKind::decode_fc1, KernelKind::decode_fc2,
                 KernelKind::decode_fused, KernelKind::decode_fc2_sum, KernelKind::decode_fc1_loop,
                 KernelKind::decode_fc1_stream, KernelKind::decode_pipe, KernelKind::batch_fc1, KernelKind::batch_fc2})
    if (to_string(k) == s) return k;
  throw Error(fmt::format(
      "kernel kind '{}' is unknown (expected prepare, route, decode_fc1, decode_fc1_loop, decode_fc1_stream, decode_fc2, "
      "decode_fc2_sum, decode_fused, decode_pipe, batch_fc1 or batch_fc2)",
      s));
}

std::string KernelKey::str() const {
  const std::string p = (parts != 1 ? fmt::format("p{}", parts) : "") + (groups != 1 ? fmt::format("g{}", groups) : "") +
                        (slabs != 1 ? fmt::format("s{}", slabs) : "") +
                        (columns != 8 ? fmt::format("c{}", columns) : "") +
                        (l2_ahead != 0 ? fmt::format("f{}", l2_ahead) : "") + (x_staged ? "x" : "") +
                        (wgmma ? "m" : "");
  return fmt::format("{}:{}:{}:{}:{}:E{}:H{}:I{}:w{}n{}d{}o{}{}:b{}:l{}:i{}", to_string(kind), to_string(arch),
                     to_string(format), to_string(activation), to_string(precision), experts, hidden,
                     intermediate, warps, ntiles, depth, min_blocks, p, bias ? 1 : 0, limit ? 1 : 0,
                     inline_route);
}

namespace {
std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (;;) {
    size_t p = s.find(sep, start);
    parts.push_back(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos) return parts;
    start = p + 1;
  }
}

int parse_int_field(std::string_view text, std::string_view field, std::string_view key) {
  int v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty())
    throw Error(fmt::format("kernel key '{}': field {} has '{}', expected an integer", key, field, text));
  return v;
}

int parse_prefixed(std::string_view part, char prefix, std::string_view field, std::string_view key) {
  if (part.empty() || part[0] != prefix)
    throw Error(fmt::format("kernel key '{}': field {} must start with '{}', got '{}'", key, field, prefix, part));
  return parse_int_field(part.substr(1), field, key);
}
}  // namespace

KernelKey KernelKey::parse(std::string_view s) {
  auto p = split(s, ':');
  if (p.size() != 12)
    throw Error(fmt::format(
        "kernel key '{}' has {} fields; expected 12: "
        "kind:arch:format:activation:precision:E<n>:H<n>:I<n>:w<n>n<n>d<n>o<n>:b<0|1>:l<0|1>:i<0|1|2>",
        s, p.size()));
  KernelKey k;
  k.kind = parse_kernel_kind(p[0]);
  k.arch = parse_arch(p[1]);
  k.format = parse_scale_format(p[2]);
  k.activation = parse_activation(p[3]);
  k.precision = parse_act_precision(p[4]);
  k.experts = parse_prefixed(p[5], 'E', "experts", s);
  k.hidden = parse_prefixed(p[6], 'H', "hidden", s);
  k.intermediate = parse_prefixed(p[7], 'I', "intermediate", s);
  auto tile = p[8];
  if (!tile.empty() && tile.back() == 'm') {
    k.wgmma = true;
    tile.remove_suffix(1);
  }
  if (!tile.empty() && tile.back() == 'x') {
    k.x_staged = true;
    tile.remove_suffix(1);
  }
  const auto fpos = tile.find('f');
  if (fpos != std::string_view::npos) {
    k.l2_ahead = parse_int_field(tile.substr(fpos + 1), "l2_ahead", s);
    tile = tile.substr(0, fpos);
  }
  const auto cpos = tile.find('c');
  if (cpos != std::string_view::npos) {
    k.columns = parse_int_field(tile.substr(cpos + 1), "columns", s);
    tile = tile.substr(0, cpos);
  }
  const auto spos = tile.find('s');
  if (spos != std::string_view::npos) {
    k.slabs = parse_int_field(tile.substr(spos + 1), "slabs", s);
    tile = tile.substr(0, spos);
  }
  const auto gpos = tile.find('g');
  if (gpos != std::string_view::npos) {
    k.groups = parse_int_field(tile.substr(gpos + 1), "groups", s);
    tile = tile.substr(0, gpos);
  }
  const auto npos = tile.find('n'), dpos = tile.find('d'), opos = tile.find('o'), ppos = tile.find('p');
  if (tile.empty() || tile[0] != 'w' || npos == std::string_view::npos || dpos == std::string_view::npos ||
      opos == std::string_view::npos || !(npos < dpos && dpos < opos) ||
      (ppos != std::string_view::npos && ppos < opos))
    throw Error(fmt::format("kernel key '{}': tile field '{}' must look like w4n1d2o0 (or w8n1d8o2p2, w8n1d1o3p2g2, w16n1d1o1p4s2, w4n1d1o8c4, w8n1d1o4c4f2, w4n1d1o8c4x, w8n16d3o1m)",
                            s, p[8]));
  k.warps = parse_int_field(tile.substr(1, npos - 1), "warps", s);
  k.ntiles = parse_int_field(tile.substr(npos + 1, dpos - npos - 1), "ntiles", s);
  k.depth = parse_int_field(tile.substr(dpos + 1, opos - dpos - 1), "depth", s);
  const auto oend = ppos == std::string_view::npos ? std::string_view::npos : ppos - opos - 1;
  k.min_blocks = parse_int_field(tile.substr(opos + 1, oend), "min_blocks", s);
  k.parts = ppos == std::string_view::npos ? 1 : parse_int_field(tile.substr(ppos + 1), "parts", s);
  int b = parse_prefixed(p[9], 'b', "bias", s), l = parse_prefixed(p[10], 'l', "limit", s),
      in = parse_prefixed(p[11], 'i', "inline_route", s);
  if ((b != 0 && b != 1) || (l != 0 && l != 1) || in < 0 || in > 2)
    throw Error(fmt::format("kernel key '{}': bias, limit and inline-route fields must be b0/b1, l0/l1 and i0/i1/i2", s));
  k.bias = b == 1;
  k.limit = l == 1;
  k.inline_route = in;
  return k;
}

KernelKey KernelKey::normalized() const {
  KernelKey k = *this;
  if (k.kind == KernelKind::prepare) {
    // One generic repack module per architecture: geometry is passed at run time.
    KernelKey r;
    r.kind = KernelKind::prepare;
    r.arch = k.arch;
    r.experts = 1;
    r.warps = 8;
    r.hidden = 0;
    r.intermediate = 0;
    return r;
  }
  if (k.experts <= 0) throw Error(fmt::format("kernel key {}: experts must be positive", str()));
  if (k.warps < 1 || k.warps > 32) throw Error(fmt::format("kernel key {}: warps must be in [1, 32]", str()));
  if (k.kind == KernelKind::decode_fc1_stream && k.warps > 31)
    throw Error(fmt::format("kernel key {}: decode_fc1_stream adds a producer warp, so warps must be in [1, 31]", str()));
  if (k.kind == KernelKind::decode_pipe) {
    // FC1 consumer warps + the producer warp + `groups` FC2 warps, one CTA per SM, one token tile.
    if (k.groups < 1 || k.groups > 16)
      throw Error(fmt::format("kernel key {}: decode_pipe's FC2 warps (groups) must be in [1, 16]", str()));
    if (k.warps + 1 + k.groups > 32)
      throw Error(fmt::format("kernel key {}: decode_pipe's {} FC1 warps, producer warp and {} FC2 warps exceed 32 warps",
                              str(), k.warps, k.groups));
    if (k.ntiles != 1) throw Error(fmt::format("kernel key {}: decode_pipe serves one token tile (ntiles 1)", str()));
    k.min_blocks = 1;
  }
  if (k.kind == KernelKind::route) {
    // Routing depends only on the expert count and its block size.
    KernelKey r;
    r.kind = KernelKind::route;
    r.arch = k.arch;
    r.experts = k.experts;
    r.warps = k.warps;
    r.ntiles = 1;
    r.depth = 1;
    r.hidden = 0;
    r.intermediate = 0;
    return r;
  }
  int block = scale_block(k.format);
  if (k.hidden <= 0 || k.hidden % block)
    throw Error(fmt::format("kernel key {}: hidden must be a positive multiple of {}", str(), block));
  if (k.intermediate <= 0 || k.intermediate % block)
    throw Error(fmt::format("kernel key {}: intermediate must be a positive multiple of {}", str(), block));
  const bool batch_kind = k.kind == KernelKind::batch_fc1 || k.kind == KernelKind::batch_fc2;
  if (!batch_kind) k.wgmma = false;
  // A warpgroup MMA takes up to 256 columns (32 n-tiles); the register-fed MMAs keep up to 8 n-tiles.
  const int max_ntiles = k.wgmma ? 32 : 8;
  if (k.ntiles < 1 || k.ntiles > max_ntiles)
    throw Error(fmt::format("kernel key {}: ntiles must be in [1, {}]", str(), max_ntiles));
  if (k.depth < 1 || k.depth > 8) throw Error(fmt::format("kernel key {}: depth must be in [1, 8]", str()));
  if (k.min_blocks < 0 || k.min_blocks > 32)
    throw Error(fmt::format("kernel key {}: min_blocks must be in [0, 32]", str()));
  if (k.inline_route && k.experts > 1024)
    throw Error(fmt::format("kernel key {}: inline routing covers at most 1024 experts", str()));
  if (k.precision != ActPrecision::a16)
    throw Error(fmt::format("kernel key {}: the kernels compute in a16 only (a8 and a4 exist in the CPU reference)", str()));
  if (k.parts < 1 || k.parts > 8) throw Error(fmt::format("kernel key {}: parts must be in [1, 8]", str()));
  if (k.kind != KernelKind::decode_fc2_sum && k.kind != KernelKind::decode_fc1_stream && k.kind != KernelKind::decode_pipe)
    k.parts = 1;
  if (k.kind != KernelKind::decode_pipe && (k.groups < 1 || k.groups > 8))
    throw Error(fmt::format("kernel key {}: groups must be in [1, 8]", str()));
  if (k.kind != KernelKind::decode_fc2_sum && k.kind != KernelKind::decode_pipe) k.groups = 1;
  if (k.slabs != 1 && k.slabs != 2) throw Error(fmt::format("kernel key {}: slabs must be 1 or 2", str()));
  if (k.kind != KernelKind::decode_fc2_sum && k.kind != KernelKind::batch_fc1 && k.kind != KernelKind::batch_fc2)
    k.slabs = 1;
  if (k.slabs > 1 && k.kind == KernelKind::decode_fc2_sum) {
    if (k.groups != 1)
      throw Error(fmt::format("kernel key {}: FC2-sum over 2 slabs per CTA keeps each slab in one CTA (groups 1)", str()));
    if (k.hidden % (16 * k.slabs))
      throw Error(fmt::format("kernel key {}: hidden must be a multiple of {} rows for {} slabs per CTA", str(),
                              16 * k.slabs, k.slabs));
  }
  // FC2-sum keeps every pair's raw sums per K part and slab in static shared memory, 64 B each: 8 parts x
  // slabs over 64 pairs (i1), 4 over 128 (i2).
  if (k.kind == KernelKind::decode_fc2_sum) {
    const int raw_sums = k.inline_route == 2 ? 4 : 8;
    if (k.parts * k.slabs > raw_sums)
      throw Error(fmt::format("kernel key {}: FC2-sum over {} pairs (i{}) takes at most {} parts of raw sums per slab: "
                              "parts x slabs must be at most {}",
                              str(), k.inline_route == 2 ? 128 : 64, k.inline_route, raw_sums, raw_sums));
  }
  // A slot's K parts must stay in one CTA: its units then form whole blocks of `warps`.
  if (k.groups > 1 && k.warps % k.parts != 0)
    throw Error(fmt::format("kernel key {}: with groups > 1 the warps must be a multiple of the parts", str()));
  if (k.l2_ahead < 0 || k.l2_ahead > 16)
    throw Error(fmt::format("kernel key {}: l2_ahead must be in [0, 16] chunks", str()));
  // Only the register-fed kernels walk a ring that can run ahead of (decode_fc1_stream copies whole
  // stages into shared memory instead).
  if (k.kind == KernelKind::decode_fc1_stream || k.kind == KernelKind::decode_pipe) k.l2_ahead = 0;
  // Only FC1's grid kernel stages x (one item per CTA; the layer input is complete at launch).
  if (k.kind != KernelKind::decode_fc1) k.x_staged = false;
  if (k.x_staged && k.ntiles != 1)
    throw Error(fmt::format("kernel key {}: a staged x row serves one 8-column tile (ntiles 1)", str()));
  if (k.columns != 8 && k.columns != 4)
    throw Error(fmt::format("kernel key {}: columns must be 8 (a pair in every MMA column) or 4 (even columns)", str()));
  if ((k.kind == KernelKind::decode_fc2_sum || k.kind == KernelKind::decode_fc1_loop ||
       k.kind == KernelKind::decode_fc1_stream || k.kind == KernelKind::decode_pipe) &&
      !k.inline_route)
    throw Error(fmt::format("kernel key {}: {} routes inline only (i1)", str(), to_string(k.kind)));
  if (k.kind == KernelKind::batch_fc1 || k.kind == KernelKind::batch_fc2) {
    // One tile shape: warps x 16 rows by 8 * ntiles pairs, `depth` chunks in flight through shared memory,
    // behind the route kernel; the decode family's loop variants do not apply.
    if (k.inline_route)
      throw Error(fmt::format("kernel key {}: {} reads the route kernel's lists (i0)", str(), to_string(k.kind)));
    if (k.warps > 16) throw Error(fmt::format("kernel key {}: batch kernels take at most 16 warps", str()));
    if (k.columns != 8)
      throw Error(fmt::format("kernel key {}: batch kernels fill every MMA column (columns 8)", str()));
    if (k.depth < 1 || k.depth > 7)
      throw Error(fmt::format("kernel key {}: batch kernels keep 1..7 chunks in flight (depth)", str()));
    k.l2_ahead = 0;
    if (k.wgmma) {
      if (k.arch != Arch::sm_90a)
        throw Error(fmt::format("kernel key {}: warpgroup MMA (m) exists on sm_90a only", str()));
      if (k.warps % 4)
        throw Error(fmt::format("kernel key {}: warpgroup MMA kernels take whole warpgroups (warps 4, 8, 12, 16)", str()));
      if (k.slabs != 1)
        throw Error(fmt::format("kernel key {}: warpgroup MMA kernels give each warp one slab (no s suffix)", str()));
      // Stages: one multiplied, one decoded, one or more copied; FC1 stores the layer input a step after
      // loading it into registers, so one more.
      const int min_depth = k.kind == KernelKind::batch_fc1 ? 3 : 2;
      if (k.depth < min_depth)
        throw Error(fmt::format("kernel key {}: warpgroup MMA {} kernels need depth >= {}", str(), to_string(k.kind),
                                min_depth));
    }
  }
  if (k.kind == KernelKind::decode_fc2 || k.kind == KernelKind::decode_fc2_sum || k.kind == KernelKind::batch_fc2) {
    // FC2 does not see the activation; the limit is an FC1 concern.
    k.activation = Activation::silu;
    k.limit = false;
  }
  if (k.activation != Activation::silu && k.activation != Activation::swigluoai) k.limit = false;
  return k;
}

std::string KernelKey::entry_name() const {
  std::string s = "moejit_" + str();
  for (char& c : s)
    if (c == ':') c = '_';
  return s;
}

}  // namespace moejit
