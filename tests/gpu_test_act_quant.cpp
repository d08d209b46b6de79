// The kernels' activation quantization arithmetic (templates/act_quant.cuh) on the GPU against the same
// functions compiled for the host, bit for bit. The device form uses the e4m3 conversion instructions
// where the host form does the arithmetic (tests/test_act_quant_device.cpp holds the host form equal to
// the fp64 reference), so this is what ties the device's operands to the reference's: every element of
// random rows, hand-made ties of both grids and of the block scales, and every bf16 value under several
// block maxima and global scales, through a8 and a4 with and without the kernels' 2^64 operand scaling.
#include "catch_compat.hpp"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "moejit/codecs.hpp"
#include "moejit/runtime.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/launch.hpp"
#include "runtime/standalone_kernel.hpp"
#include "templates/act_quant.cuh"

using namespace moejit;
using namespace moejit::detail;

namespace {

struct ProbeParams {
  uint64_t v, amax, gs, out;
  int32_t n;
};

const char* kSource = R"(
#include "act_quant.cuh"
struct ProbeParams { const float* v; const unsigned* amax; const float* gs; float* out; int n; };
extern "C" __global__ void act_quant_probe(const ProbeParams p) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.n) return;
  const float v = p.v[i], gs = p.gs[i];
  const unsigned m = p.amax[i];
  p.out[i] = act_quant_value<kActA8, 0>(v, m, gs);
  p.out[p.n + i] = act_quant_value<kActA8, 64>(v, m, gs);
  p.out[2 * p.n + i] = act_quant_value<kActA4, 0>(v, m, gs);
  p.out[3 * p.n + i] = act_quant_value<kActA4, 64>(v, m, gs);
  p.out[4 * p.n + i] = a4_block_scale(m, gs);
}
)";

constexpr int kOutputs = 5;

// One element the probe quantizes: its value, its block's |v| maximum (fp32 bits) and the global scale.
struct Cases {
  std::vector<float> v, gs;
  std::vector<uint32_t> amax;
  void add(float value, float block_max, float global) {
    uint32_t bits;
    std::memcpy(&bits, &block_max, 4);
    v.push_back(value);
    amax.push_back(bits & 0x7FFFFFFFu);
    gs.push_back(global);
  }
  // A block: its elements under its own maximum.
  void add_block(const std::vector<float>& block, float global) {
    float m = 0.f;
    for (float x : block) m = std::isnan(x) || std::isnan(m) ? NAN : std::max(m, std::fabs(x));
    for (float x : block) add(x, m, global);
  }
};

float host_output(int which, float v, uint32_t m, float gs) {
  namespace aq = act_quant;
  switch (which) {
    case 0: return aq::act_quant_value<aq::kActA8, 0>(v, m, gs);
    case 1: return aq::act_quant_value<aq::kActA8, 64>(v, m, gs);
    case 2: return aq::act_quant_value<aq::kActA4, 0>(v, m, gs);
    case 3: return aq::act_quant_value<aq::kActA4, 64>(v, m, gs);
    default: return aq::a4_block_scale(m, gs);
  }
}

bool same_bits(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

// Runs the probe over every case and counts the elements whose device result differs from the host's.
int64_t mismatches(const StandaloneKernel& probe, const Cases& c) {
  const int n = static_cast<int>(c.v.size());
  DeviceBuffer v = DeviceBuffer::from(c.v), amax = DeviceBuffer::from(c.amax), gs = DeviceBuffer::from(c.gs);
  DeviceBuffer out(static_cast<size_t>(n) * kOutputs * sizeof(float));
  out.fill_bytes(0xFF);
  ProbeParams p{v.ptr(), amax.ptr(), gs.ptr(), out.ptr(), n};
  launch(probe.function(), LaunchShape{static_cast<unsigned>((n + 255) / 256), 1, 1, 256, 0}, nullptr, &p);
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
  const auto got = out.to_vector<float>(static_cast<size_t>(n) * kOutputs);
  int64_t bad = 0;
  for (int which = 0; which < kOutputs; ++which)
    for (int i = 0; i < n; ++i) {
      const float want = host_output(which, c.v[i], c.amax[i], c.gs[i]);
      const float have = got[static_cast<size_t>(which) * n + i];
      if (same_bits(want, have)) continue;
      if (bad < 8)
        UNSCOPED_INFO("output " << which << " v " << c.v[i] << " amax bits " << c.amax[i] << " gs " << c.gs[i]
                                << ": device " << have << " host " << want);
      ++bad;
    }
  return bad;
}

// The e4m3 grid's positive values, codes 1 .. 0x7E.
std::vector<float> e4m3_values() {
  std::vector<float> out;
  for (int code = 1; code <= 0x7E; ++code) out.push_back(e4m3_to_float(static_cast<uint8_t>(code)));
  return out;
}

}  // namespace

TEST_CASE("the kernels' a8/a4 quantization gives the host's bits on the GPU", "[gpu][precision][actquant]") {
  Runtime rt;  // selects the device and makes its context current
  const StandaloneKernel probe(GeneratedSource{"act_quant_probe.cu", "act_quant_probe", kSource}, rt.arch());

  SECTION("random rows: bf16 inputs and fp32 intermediates over many decades, three kinds of global scale") {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::uniform_real_distribution<float> spread(-30.f, 30.f), log_gs(-6.f, 14.f);
    Cases c;
    for (int row = 0; row < 3000; ++row) {
      std::vector<float> block(16);
      const float scale = std::exp2(spread(rng));
      for (float& x : block) {
        x = nd(rng) * scale;
        if (row % 2 == 0) x = bf16_to_float(float_to_bf16(x));
      }
      float amax = 0.f;
      for (float x : block) amax = std::max(amax, std::fabs(x));
      const float gs = row % 3 == 0   ? 2688.f / amax
                       : row % 3 == 1 ? std::exp2(log_gs(rng))
                                      : std::exp2(std::round(log_gs(rng)));
      c.add_block(block, gs);
    }
    CHECK(mismatches(probe, c) == 0);
  }

  SECTION("ties: e2m1 midpoints under every e4m3 block scale, e4m3 midpoints for a8 and for the block scale") {
    Cases c;
    const std::vector<float> grid = e4m3_values();
    const float e2m1_points[] = {0.f, 0.25f, 0.5f, 0.75f, 1.f, 1.25f, 1.5f, 1.75f, 2.f, 2.5f, 3.f, 3.5f, 4.f, 5.f, 6.f, 7.f};
    for (float s : grid)
      for (float gs : {0.125f, 1.f, 32.f}) {
        const float amax = 6.f * s / gs;  // exact: amax * gs / 6 is the block scale s itself
        for (float m : e2m1_points) {
          c.add(m * s / gs, amax, gs);
          c.add(-m * s / gs, amax, gs);
        }
      }
    for (size_t i = 0; i + 1 < grid.size(); ++i) {
      const float mid = 0.5f * (grid[i] + grid[i + 1]);
      for (int x : {-20, 0, 9}) {  // a8: v / 2^X on an e4m3 midpoint, X = floor(log2 amax) - 8
        const float p = std::ldexp(1.f, x);
        c.add(mid * p, 300.f * p, 1.f);
        c.add(-mid * p, 300.f * p, 1.f);
      }
      for (float gs : {1.f, 0.25f, 64.f}) c.add(1.f, 6.f * mid / gs, gs);  // a4: amax * gs / 6 on a midpoint
    }
    // Saturation and the subnormal ends of both grids.
    for (float amax : {6.f * 448.f, 6.f * 460.f, 6.f * 470.f, 1e30f, 6.f * 0.00146484375f, 6.f * 0.0009765625f, 1e-30f})
      for (float frac : {1.f, 0.5f, 0.26f, 0.01f}) c.add(amax * frac, amax, 1.f);
    CHECK(mismatches(probe, c) == 0);
  }

  SECTION("every bf16 value under several block maxima and global scales") {
    Cases c;
    for (float amax : {1.f, 3.7e-3f, 250.f, 1e-30f})
      for (float gs : {2688.f / amax, 1.f, 4096.f})
        for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
          const float v = bf16_to_float(static_cast<uint16_t>(bits));
          if (std::isnan(v) || std::isinf(v)) continue;
          c.add(v, amax, gs);
        }
    CHECK(mismatches(probe, c) == 0);
  }

  SECTION("non-finite blocks become NaN on both sides") {
    Cases c;
    c.add_block({1.f, NAN, -2.f, 0.f}, 3.f);
    c.add_block({1.f, -INFINITY, -2.f, 0.f}, 3.f);
    CHECK(mismatches(probe, c) == 0);
  }
}

namespace {

// The FC1 epilogues' a4 quantization of a warp's accumulator columns (slab_pair_max.cuh
// quantize_slab_columns: with 4 or more n-tiles one block scale per lane, traded by shuffles; below, every
// lane computes its own), against the host's per-element quantization of each 16-row column block.
const char* kColumnsSource = R"(
#define MOEJIT_ACT_PRECISION 2
#define MOEJIT_ACT_EXPERTS 1
#include "slab_pair_max.cuh"
struct ColumnsParams { const float* in; float* out; float gs; };
template <int kNT>
__device__ void columns(const float* in, float* out, float gs) {
  const int lane = threadIdx.x, g = lane >> 2, c4 = lane & 3;
  float v[kNT * 4];
  for (int nt = 0; nt < kNT; ++nt)
    for (int i = 0; i < 4; ++i) v[nt * 4 + i] = in[(nt * 8 + 2 * c4 + (i & 1)) * 16 + g + 8 * (i >> 1)];
  quantize_slab_columns<kNT>(v, gs, SingleWarpBlock{});
  for (int nt = 0; nt < kNT; ++nt)
    for (int i = 0; i < 4; ++i) out[(nt * 8 + 2 * c4 + (i & 1)) * 16 + g + 8 * (i >> 1)] = v[nt * 4 + i];
}
extern "C" __global__ void columns16(const ColumnsParams p) { columns<16>(p.in, p.out, p.gs); }
extern "C" __global__ void columns4(const ColumnsParams p) { columns<4>(p.in, p.out, p.gs); }
extern "C" __global__ void columns2(const ColumnsParams p) { columns<2>(p.in, p.out, p.gs); }
)";

struct ColumnsParams {
  uint64_t in, out;
  float gs;
};

// Columns of 16 values whose device quantization differs from the host's (bits; NaN for NaN).
int64_t column_mismatches(const char* entry, int cols, const std::vector<float>& in, float gs, Arch arch) {
  const StandaloneKernel k(GeneratedSource{std::string(entry) + ".cu", entry, kColumnsSource}, arch);
  DeviceBuffer din = DeviceBuffer::from(in);
  DeviceBuffer dout(in.size() * sizeof(float));
  dout.fill_bytes(0xFF);
  ColumnsParams p{din.ptr(), dout.ptr(), gs};
  launch(k.function(), LaunchShape{1, 1, 1, 32, 0}, nullptr, &p);
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
  const auto got = dout.to_vector<float>(in.size());
  int64_t bad = 0;
  for (int c = 0; c < cols; ++c) {
    uint32_t amax = 0;
    for (int r = 0; r < 16; ++r) {
      uint32_t b;
      std::memcpy(&b, &in[c * 16 + r], 4);
      amax = std::max(amax, b & 0x7FFFFFFFu);
    }
    for (int r = 0; r < 16; ++r) {
      const float want = act_quant::act_quant_value<act_quant::kActA4, 64>(in[c * 16 + r], amax, gs);
      if (same_bits(want, got[c * 16 + r])) continue;
      if (bad < 8) UNSCOPED_INFO(entry << " column " << c << " row " << r << ": device " << got[c * 16 + r] << " host " << want);
      ++bad;
    }
  }
  return bad;
}

}  // namespace

TEST_CASE("the FC1 epilogues' a4 column quantization gives the host's bits on the GPU", "[gpu][precision][actquant]") {
  Runtime rt;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> spread(-20.f, 20.f);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> in(128 * 16);
    for (int c = 0; c < 128; ++c) {
      const float scale = std::exp2(spread(rng));
      for (int r = 0; r < 16; ++r) in[c * 16 + r] = nd(rng) * scale;
    }
    // Blocks that must not shrink to one scale per lane's neighbours: zeros, a NaN, an infinity, exact ties.
    for (int r = 0; r < 16; ++r) in[3 * 16 + r] = 0.f;
    in[17 * 16 + 5] = NAN;
    in[40 * 16 + 9] = -INFINITY;
    for (int r = 0; r < 16; ++r) in[77 * 16 + r] = (r % 8) * 0.75f - 2.f;  // amax 3.25: midpoints under gs 1
    const float gs = trial % 2 ? 1.f : std::exp2(spread(rng) / 4);
    CHECK(column_mismatches("columns16", 128, in, gs, rt.arch()) == 0);
    CHECK(column_mismatches("columns4", 32, in, gs, rt.arch()) == 0);
    CHECK(column_mismatches("columns2", 16, in, gs, rt.arch()) == 0);
  }
}
