// KernelKey: canonical string form, parsing and normalization.
#include "moejit/key.hpp"

#include <fmt/format.h>

#include <charconv>
#include <vector>

#include "generator/families/family.hpp"
#include "moejit/error.hpp"

namespace moejit {

std::string_view to_string(KernelKind k) {
  for (const auto& [kind, name] : detail::family_of(k).kinds)
    if (kind == k) return name;
  return "?";
}

KernelKind parse_kernel_kind(std::string_view s) {
  std::string names;
  for (const detail::KernelFamily* f : detail::kernel_families())
    for (const auto& [kind, name] : f->kinds) {
      if (name == s) return kind;
      names += fmt::format("{}{}", names.empty() ? "" : ", ", name);
    }
  throw Error(fmt::format("kernel kind '{}' is unknown (expected one of {})", s, names));
}

std::string KernelKey::str() const {
  const std::string p = (parts != 1 ? fmt::format("p{}", parts) : "") + (groups != 1 ? fmt::format("g{}", groups) : "") +
                        (slabs != 1 ? fmt::format("s{}", slabs) : "") +
                        (columns != 8 ? fmt::format("c{}", columns) : "") +
                        (l2_ahead != 0 ? fmt::format("f{}", l2_ahead) : "") + (x_staged ? "x" : "") +
                        (wgmma ? "m" : "") + (csf_scales != 0 ? fmt::format("z{}", csf_scales) : "");
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
  const auto zpos = tile.find('z');
  if (zpos != std::string_view::npos) {
    k.csf_scales = parse_int_field(tile.substr(zpos + 1), "csf_scales", s);
    tile = tile.substr(0, zpos);
  }
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
    throw Error(fmt::format("kernel key '{}': tile field '{}' must look like w4n1d2o0 (or w8n1d8o2p2, w8n1d1o3p2g2, w16n1d1o1p4s2, w4n1d1o8c4, w8n1d1o4c4f2, w4n1d1o8c4x, w8n16d3o1m, w4n1d1o8z1)",
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
  // The kind's family decides what its kernels ignore and cannot build (generator/families/).
  KernelKey k = *this;
  detail::family_of(kind).normalize(k, *this);
  // CSF scale planes are read by the decode, batch and prefill kernels: each keeps the bit of the plane it
  // reads (the route and prepare kernels read none).
  if (k.csf_scales < 0 || k.csf_scales > 3)
    throw Error(fmt::format("kernel key {}: csf_scales must be in [0, 3] (1 FC1's plane, 2 FC2's)", str()));
  switch (k.kind) {
    case KernelKind::decode_fc1:
    case KernelKind::decode_fc1_loop:
    case KernelKind::decode_fc1_stream:
    case KernelKind::batch_fc1:
    case KernelKind::prefill_fc1: k.csf_scales &= 1; break;
    case KernelKind::decode_fc2:
    case KernelKind::decode_fc2_sum:
    case KernelKind::batch_fc2:
    case KernelKind::prefill_fc2: k.csf_scales &= 2; break;
    case KernelKind::decode_fused: break;
    default: k.csf_scales = 0;
  }
  // The a8/a4 decode and batch kernels read the plain planes (an a8/a4 layer keeps them, docs/DECISIONS.md
  // "CSF").
  if (k.precision != ActPrecision::a16) k.csf_scales = 0;
  // DESIGN §1 defines the clamp for silu and swigluoai only.
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
