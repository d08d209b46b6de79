#pragma once
// Deterministic random numbers for test layers and inputs.
//
// std::normal_distribution is implementation-defined (libstdc++ and libc++ give different numbers for
// the same engine state), so a layer "of seed 7" would differ between toolchains. The samplers here
// are written out, so a seed names the same data everywhere. Any engine returning uniform 64-bit
// words works (std::mt19937_64 for small tensors, SplitMix64 streams for bulk weights).
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>

namespace moejit::detail {

// SplitMix64 (Steele, Lea, Flood 2014): one add and a mixing function per draw. Fast enough to fill a
// gpt-oss-size layer (3e9 weights) in seconds, and seedable with any 64-bit key, so each
// (tensor, expert) pair gets an independent stream and experts can be generated in parallel.
inline uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct SplitMix64 {
  uint64_t state;
  explicit SplitMix64(uint64_t seed) : state(seed) {}
  uint64_t operator()() { return splitmix64_mix(state += 0x9E3779B97F4A7C15ull); }
};

// Key of an independent stream derived from a user seed and a few small integers.
inline uint64_t stream_key(uint64_t seed, uint64_t a, uint64_t b = 0) {
  return splitmix64_mix(splitmix64_mix(splitmix64_mix(seed) ^ (a + 0x632BE59BD9B4E019ull)) ^ (b + 0x8CB92BA72F3D8DD7ull));
}

// Uniform double in (0, 1): 53 random bits, offset by half a step so log() never sees 0.
template <typename Engine>
double uniform_open01(Engine& g) {
  return (static_cast<double>(static_cast<uint64_t>(g()) >> 11) + 0.5) * 0x1p-53;
}

// Standard normal by the Ziggurat method (Marsaglia & Tsang 2000, 128 layers). The fast path costs one
// 64-bit draw, a table look-up and a compare; the layer index comes from bits that the magnitude does
// not use (the original's reuse of the same bits is a known flaw).
class Ziggurat {
 public:
  static const Ziggurat& instance() {
    static const Ziggurat z;
    return z;
  }

  template <typename Engine>
  double operator()(Engine& g) const {
    for (;;) {
      const uint64_t r = g();
      const int32_t hz = static_cast<int32_t>(r >> 32);
      const int iz = static_cast<int>(r & 127);
      if (std::llabs(static_cast<int64_t>(hz)) < kn_[iz]) return hz * wn_[iz];  // ~99% of draws
      const double x = hz * wn_[iz];
      if (iz == 0) {
        // Tail beyond r: Marsaglia's exponential rejection.
        double tx, ty;
        do {
          tx = -std::log(uniform_open01(g)) / kR;
          ty = -std::log(uniform_open01(g));
        } while (ty + ty < tx * tx);
        return hz > 0 ? kR + tx : -kR - tx;
      }
      // Wedge between layers: accept under the density, else draw again.
      if (fn_[iz] + uniform_open01(g) * (fn_[iz - 1] - fn_[iz]) < std::exp(-0.5 * x * x)) return x;
    }
  }

 private:
  static constexpr double kR = 3.442619855899;  // start of the tail
  static constexpr double kV = 9.91256303526217e-3;  // area of each layer

  Ziggurat() {
    const double m1 = 2147483648.0;  // 2^31: magnitudes are signed 32-bit
    double dn = kR, tn = kR;
    const double q = kV / std::exp(-0.5 * dn * dn);
    kn_[0] = static_cast<int64_t>((dn / q) * m1);
    kn_[1] = 0;
    wn_[0] = q / m1;
    wn_[127] = dn / m1;
    fn_[0] = 1.0;
    fn_[127] = std::exp(-0.5 * dn * dn);
    for (int i = 126; i >= 1; --i) {
      dn = std::sqrt(-2.0 * std::log(kV / dn + std::exp(-0.5 * dn * dn)));
      kn_[i + 1] = static_cast<int64_t>((dn / tn) * m1);
      tn = dn;
      fn_[i] = std::exp(-0.5 * dn * dn);
      wn_[i] = dn / m1;
    }
  }

  std::array<int64_t, 128> kn_{};
  std::array<double, 128> wn_{}, fn_{};
};

template <typename Engine>
double normal(Engine& g) {
  return Ziggurat::instance()(g);
}

}  // namespace moejit::detail
