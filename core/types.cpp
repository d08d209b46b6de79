// Canonical names of the vocabulary enums and the geometry rules of one layer (DESIGN §1, §3).
//
// The names are part of the file formats (layer-file metadata), kernel keys and the CLI, so each
// enum has exactly one spelling, and a bad spelling is reported with the list of accepted ones
// instead of silently falling back to a default.
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "moejit/error.hpp"
#include "moejit/types.hpp"

namespace moejit {
namespace {

template <typename E, size_t N>
using NameTable = std::array<std::pair<E, std::string_view>, N>;

constexpr NameTable<ScaleFormat, 2> kScaleFormats{{{ScaleFormat::nvfp4, "nvfp4"}, {ScaleFormat::mxfp4, "mxfp4"}}};
constexpr NameTable<Activation, 4> kActivations{{{Activation::silu, "silu"},
                                                 {Activation::gelu_tanh, "gelu_tanh"},
                                                 {Activation::relu2, "relu2"},
                                                 {Activation::swigluoai, "swigluoai"}}};
constexpr NameTable<ActPrecision, 3> kPrecisions{
    {{ActPrecision::a16, "a16"}, {ActPrecision::a8, "a8"}, {ActPrecision::a4, "a4"}}};
constexpr NameTable<GateUpOrder, 3> kGateUpOrders{{{GateUpOrder::gate_up, "gate_up"},
                                                   {GateUpOrder::up_gate, "up_gate"},
                                                   {GateUpOrder::interleaved, "interleaved"}}};
constexpr NameTable<Arch, 4> kArchNames{
    {{Arch::sm_90a, "sm_90a"}, {Arch::sm_100a, "sm_100a"}, {Arch::sm_120a, "sm_120a"}, {Arch::sm_121a, "sm_121a"}}};
constexpr NameTable<Family, 4> kFamilies{
    {{Family::automatic, "auto"}, {Family::decode, "decode"}, {Family::batch, "batch"}, {Family::prefill, "prefill"}}};
constexpr NameTable<DecodeLaunch, 3> kDecodeLaunches{
    {{DecodeLaunch::pdl, "pdl"}, {DecodeLaunch::plain, "plain"}, {DecodeLaunch::cooperative, "cooperative"}}};

template <typename E, size_t N>
std::string_view name_of(const NameTable<E, N>& table, E v, std::string_view field) {
  for (const auto& [value, name] : table)
    if (value == v) return name;
  // Only reachable with a value cast from an out-of-range integer.
  throw Error(std::string(field) + ": invalid enum value " + std::to_string(static_cast<int>(v)));
}

template <typename E, size_t N>
E parse_name(const NameTable<E, N>& table, std::string_view s, std::string_view field) {
  for (const auto& [value, name] : table)
    if (name == s) return value;
  std::string msg = std::string(field) + ": unknown value \"" + std::string(s) + "\" (accepted: ";
  for (size_t i = 0; i < N; ++i) {
    if (i) msg += ", ";
    msg += table[i].second;
  }
  throw Error(msg + ")");
}

// Upper bounds on the geometry, checked once here so that every consumer (plan, prewarm, prepare, the
// kernels) sees sizes whose products fit the 32-bit integers kernels index with: one expert's FC1 matrix
// (fc1_rows x H elements) below 2^31, global expert ids in int32, and an expert count whose route table
// ([warps][experts] int32 counts) fits in shared memory with 13 warps. Real models sit far inside them
// (E <= 512, H <= 8192, I <= 29568 per shard, K <= 10).
constexpr int kMaxExperts = 4096;
constexpr int kMaxHidden = 65536;
constexpr int kMaxIntermediate = 65536;
constexpr int kMaxTopK = 256;
constexpr long long kMaxExpertMatrixElements = (1LL << 31) - 1;

void check_geometry_bounds(const LayerSpec& s) {
  auto at_most = [](const char* field, long long v, long long limit, const char* why) {
    if (v > limit)
      throw Error(std::string("layer spec: ") + field + " = " + std::to_string(v) + " exceeds " +
                  std::to_string(limit) + " (" + why + ")");
  };
  at_most("experts", s.experts, kMaxExperts, "the route kernel's per-expert table must fit in shared memory");
  at_most("hidden", s.hidden, kMaxHidden, "the largest hidden size moejit builds kernels for");
  at_most("intermediate", s.intermediate, kMaxIntermediate, "the largest intermediate size moejit builds kernels for");
  at_most("top_k", s.top_k, kMaxTopK, "the largest top-k moejit routes");
  at_most("expert_begin + experts", static_cast<long long>(s.expert_begin) + s.experts,
          std::numeric_limits<int32_t>::max(), "expert ids are int32");
  const long long rows = is_gated(s.activation) ? 2LL * s.intermediate : s.intermediate;
  at_most("FC1 rows x hidden (elements of one expert's FC1 matrix)", rows * s.hidden, kMaxExpertMatrixElements,
          "kernels index one expert's matrix with 32-bit integers");
}

}  // namespace

std::string_view to_string(ScaleFormat v) { return name_of(kScaleFormats, v, "format"); }
std::string_view to_string(Activation v) { return name_of(kActivations, v, "activation"); }
std::string_view to_string(ActPrecision v) { return name_of(kPrecisions, v, "precision"); }
std::string_view to_string(GateUpOrder v) { return name_of(kGateUpOrders, v, "gate_up_order"); }
std::string_view to_string(Arch v) { return name_of(kArchNames, v, "arch"); }
std::string_view to_string(Family v) { return name_of(kFamilies, v, "family"); }
std::string_view to_string(DecodeLaunch v) { return name_of(kDecodeLaunches, v, "decode launch"); }

ScaleFormat parse_scale_format(std::string_view s) { return parse_name(kScaleFormats, s, "format"); }
Activation parse_activation(std::string_view s) { return parse_name(kActivations, s, "activation"); }
ActPrecision parse_act_precision(std::string_view s) { return parse_name(kPrecisions, s, "precision"); }
GateUpOrder parse_gate_up_order(std::string_view s) { return parse_name(kGateUpOrders, s, "gate_up_order"); }
Arch parse_arch(std::string_view s) { return parse_name(kArchNames, s, "arch"); }
Family parse_family(std::string_view s) { return parse_name(kFamilies, s, "family"); }
DecodeLaunch parse_decode_launch(std::string_view s) { return parse_name(kDecodeLaunches, s, "decode launch"); }

int arch_cc(Arch a) {
  switch (a) {
    case Arch::sm_90a: return 90;
    case Arch::sm_100a: return 100;
    case Arch::sm_120a: return 120;
    case Arch::sm_121a: return 121;
  }
  throw Error("arch: invalid enum value " + std::to_string(static_cast<int>(a)));
}

std::string arch_names() {
  std::string s;
  for (size_t i = 0; i < kArchNames.size(); ++i)
    s += std::string(i == 0 ? "" : i + 1 == kArchNames.size() ? " or " : ", ") + std::string(kArchNames[i].second);
  return s;
}

const ArchLimits& arch_limits(Arch a) {
  // Hopper and datacenter Blackwell: 227 KiB per CTA of 228 per SM, 2048 threads and 32 CTAs per SM.
  // Blackwell desktop (SM12x): 99 KiB per CTA of 100 per SM, 1536 threads and 24 CTAs per SM.
  static constexpr ArchLimits kHopper{227 * 1024, 228 * 1024, 1024, 2048, 32, 65536, 132, "H100/H200 SXM"};
  static constexpr ArchLimits kBlackwell{227 * 1024, 228 * 1024, 1024, 2048, 32, 65536, 148, "B200"};
  static constexpr ArchLimits kRtxPro{99 * 1024, 100 * 1024, 1024, 1536, 24, 65536, 188, "RTX PRO 6000"};
  static constexpr ArchLimits kSpark{99 * 1024, 100 * 1024, 1024, 1536, 24, 65536, 48, "GB10 (DGX Spark)"};
  switch (a) {
    case Arch::sm_90a: return kHopper;
    case Arch::sm_100a: return kBlackwell;
    case Arch::sm_120a: return kRtxPro;
    case Arch::sm_121a: return kSpark;
  }
  throw Error("arch: invalid enum value " + std::to_string(static_cast<int>(a)));
}

void LayerSpec::validate() const {
  // Every check names the field, its value and the rule, so a bad config or layer file is fixable
  // from the message alone.
  auto positive = [](const char* field, int v) {
    if (v <= 0) throw Error(std::string("layer spec: ") + field + " must be > 0 (got " + std::to_string(v) + ")");
  };
  positive("experts", experts);
  positive("hidden", hidden);
  positive("intermediate", intermediate);
  // top_k may exceed experts: under expert parallelism a rank holds fewer experts than a token picks.
  positive("top_k", top_k);
  if (expert_begin < 0)
    throw Error("layer spec: expert_begin must be >= 0 (got " + std::to_string(expert_begin) + ")");

  check_geometry_bounds(*this);

  const int block = scale_block(format);
  auto multiple = [&](const char* field, int v) {
    if (v % block != 0)
      throw Error(std::string("layer spec: ") + field + " = " + std::to_string(v) + " must be a multiple of " +
                  std::to_string(block) + " (the " + std::string(to_string(format)) + " scale block)");
  };
  multiple("hidden", hidden);
  multiple("intermediate", intermediate);

  if (!std::isfinite(swiglu_alpha) || !std::isfinite(swiglu_beta))
    throw Error("layer spec: swiglu_alpha and swiglu_beta must be finite");
  if (limit) {
    // DESIGN §1 defines the clamp only for silu and swigluoai. Accepting a limit elsewhere would give a
    // key field that changes nothing (or, worse, a kernel that clamps where the reference does not).
    if (activation != Activation::silu && activation != Activation::swigluoai)
      throw Error("layer spec: limit is only defined for silu and swigluoai (activation is " +
                  std::string(to_string(activation)) + ")");
    // clamp(u, -L, L) needs L > 0; NaN or infinity is a corrupted field, not "no limit".
    if (!std::isfinite(*limit) || !(*limit > 0))
      throw Error("layer spec: limit must be finite and > 0 (got " + std::to_string(*limit) + ")");
  }
}

}  // namespace moejit
