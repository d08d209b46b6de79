// make_random_code_layer: a valid random layer of any size in about a second (see host_layer.hpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "moejit/error.hpp"
#include "moejit/host_layer.hpp"

namespace moejit {

namespace {

// xorshift64* (Vigna): fast, and plenty for benchmark data.
struct XorShift {
  uint64_t s;
  explicit XorShift(uint64_t seed) : s(seed ? seed : 0x9E3779B97F4A7C15ull) {
    for (int i = 0; i < 4; ++i) next();
  }
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
};

uint64_t mix(uint64_t seed, uint64_t tensor, uint64_t expert) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + tensor * 0xBF58476D1CE4E5B9ull + expert * 0x94D049BB133111EBull + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void fill_bytes(uint8_t* p, size_t n, XorShift& g) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = g.next();
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(g.next() >> 56);
}

// RMS of e2m1 values when all 16 codes are equally likely: sqrt(mean of 0,.25,1,2.25,4,9,16,36).
const double kE2m1Rms = std::sqrt(68.5 / 8.0);

// Block scale codes for weights of RMS ~ target: e8m0 2^(b-127) around target/rms, or e4m3 in
// [0.5, 3.75] (exponent 6..8, random mantissa) with the rest in the per-expert global scale.
void fill_scales(ScaleFormat f, uint8_t* p, size_t n, double target, XorShift& g) {
  if (f == ScaleFormat::mxfp4) {
    const int base = 127 + static_cast<int>(std::lround(std::log2(target / kE2m1Rms)));
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(std::clamp(base + static_cast<int>(g.next() % 3) - 1, 1, 254));
  } else {
    for (size_t i = 0; i < n; ++i) {
      const uint64_t r = g.next();
      const int exp = 6 + static_cast<int>(r % 3);
      const int man = static_cast<int>((r >> 8) & 7);
      p[i] = static_cast<uint8_t>((exp << 3) | man);
    }
  }
}

}  // namespace

HostLayer make_random_code_layer(const LayerSpec& spec, uint64_t seed) {
  spec.validate();
  const size_t E = static_cast<size_t>(spec.experts), H = static_cast<size_t>(spec.hidden),
               I = static_cast<size_t>(spec.intermediate), rows = static_cast<size_t>(spec.fc1_rows());
  const size_t block = static_cast<size_t>(scale_block(spec.format));
  const bool nv = spec.format == ScaleFormat::nvfp4;
  HostLayer L = allocate_layer(spec);
  if (spec.has_bias) {
    L.w13_bias.resize(E * rows);
    L.w2_bias.resize(E * H);
  }
  const double t1 = 1.0 / std::sqrt(static_cast<double>(H)), t2 = 1.0 / std::sqrt(static_cast<double>(I));
  // Mean e4m3 block scale of fill_scales is ~1.4; the global scale carries the rest.
  const double mean_e4m3 = 1.4;
  auto expert = [&](size_t e) {
    XorShift g1(mix(seed, 1, e)), g2(mix(seed, 2, e)), g3(mix(seed, 3, e));
    fill_bytes(L.w13.data() + e * rows * H / 2, rows * H / 2, g1);
    fill_bytes(L.w2.data() + e * H * I / 2, H * I / 2, g2);
    if (nv) {
      fill_scales(spec.format, L.w13_scale.data() + e * rows * H / block, rows * H / block, t1, g3);
      fill_scales(spec.format, L.w2_scale.data() + e * H * I / block, H * I / block, t2, g3);
      L.w13_global_scale[e] = static_cast<float>(t1 / kE2m1Rms / mean_e4m3 * (0.75 + 0.5 * g3.uniform()));
      L.w2_global_scale[e] = static_cast<float>(t2 / kE2m1Rms / mean_e4m3 * (0.75 + 0.5 * g3.uniform()));
    } else {
      fill_scales(spec.format, L.w13_scale.data() + e * rows * H / block, rows * H / block, t1, g3);
      fill_scales(spec.format, L.w2_scale.data() + e * H * I / block, H * I / block, t2, g3);
    }
    if (spec.has_bias) {
      for (size_t r = 0; r < rows; ++r) L.w13_bias[e * rows + r] = static_cast<float>(0.2 * g3.uniform() - 0.1);
      for (size_t r = 0; r < H; ++r) L.w2_bias[e * H + r] = static_cast<float>(0.2 * g3.uniform() - 0.1);
    }
  };
  // Each expert has its own streams, so the data does not depend on the thread count.
  const size_t threads = std::min<size_t>(E, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (size_t e = t; e < E; e += threads) expert(e);
    });
  for (auto& th : pool) th.join();
  L.validate();
  return L;
}

}  // namespace moejit
