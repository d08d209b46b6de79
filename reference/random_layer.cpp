// Random layers and inputs for tests and benchmarks, deterministic per seed.
//
// Weights are N(0, 1/sqrt(K)) (K the reduction length: H for FC1, I for FC2), so FC1 and FC2 outputs
// stay O(1) and every FP4 code (both signs) occurs. Each (tensor, expert) pair has its own SplitMix64
// stream keyed by the seed, so experts are generated and quantized in parallel without changing a
// single bit, and a gpt-oss-size layer (3e9 weights) never needs a full fp32 copy in memory.
// Small tensors (biases, inputs) use std::mt19937_64 seeded with the seed. Normal samples come from our
// own Ziggurat, not std::normal_distribution, so the data is the same with every standard library.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "moejit/codecs.hpp"
#include "moejit/error.hpp"
#include "moejit/host_layer.hpp"
#include "reference/parallel.hpp"
#include "reference/quantize_matrix.hpp"
#include "reference/random.hpp"

namespace moejit {
namespace {

enum StreamId : uint64_t { kFc1 = 1, kFc2 = 2, kBias = 3, kInputs = 4, kFc1Rows = 5, kFc2Rows = 6 };

void fill_normal(std::vector<float>& buf, uint64_t key, double stddev) {
  detail::SplitMix64 g(key);
  for (float& v : buf) v = static_cast<float>(detail::normal(g) * stddev);
}

// Multiplies each row of buf [rows, cols] by exp(row_spread * z), z ~ N(0, 1) from its own stream, so
// the weights themselves keep the bits they have without the spread.
void spread_rows(std::vector<float>& buf, int64_t cols, uint64_t key, double row_spread) {
  if (row_spread == 0) return;
  detail::SplitMix64 g(key);
  const int64_t rows = static_cast<int64_t>(buf.size()) / cols;
  for (int64_t r = 0; r < rows; ++r) {
    const float f = static_cast<float>(std::exp(row_spread * detail::normal(g)));
    for (int64_t c = 0; c < cols; ++c) buf[r * cols + c] *= f;
  }
}

HostLayer quantized_normal_layer(const LayerSpec& spec, uint64_t seed, double row_spread) {
  spec.validate();
  const int64_t E = spec.experts, H = spec.hidden, I = spec.intermediate, rows = spec.fc1_rows();
  const int block = scale_block(spec.format);

  HostLayer layer = allocate_layer(spec);

  // Same quantizer as quantize_layer, one expert at a time (fp32 buffers of one expert per thread).
  const double cost = static_cast<double>(rows * H + H * I) * 8;
  detail::parallel_for(E, detail::worker_count(E, cost), [&](int64_t e0, int64_t e1) {
    std::vector<float> buf;
    float dummy = 0;
    for (int64_t e = e0; e < e1; ++e) {
      buf.resize(rows * H);
      fill_normal(buf, detail::stream_key(seed, kFc1, e), 1.0 / std::sqrt(static_cast<double>(H)));
      spread_rows(buf, H, detail::stream_key(seed, kFc1Rows, e), row_spread);
      detail::quantize_matrix(spec.format, buf.data(), rows, H, layer.w13.data() + e * rows * H / 2,
                              layer.w13_scale.data() + e * rows * H / block,
                              layer.w13_global_scale.empty() ? &dummy : &layer.w13_global_scale[e], "fc1",
                              static_cast<int>(e));
      buf.resize(H * I);
      fill_normal(buf, detail::stream_key(seed, kFc2, e), 1.0 / std::sqrt(static_cast<double>(I)));
      spread_rows(buf, I, detail::stream_key(seed, kFc2Rows, e), row_spread);
      detail::quantize_matrix(spec.format, buf.data(), H, I, layer.w2.data() + e * H * I / 2,
                              layer.w2_scale.data() + e * H * I / block,
                              layer.w2_global_scale.empty() ? &dummy : &layer.w2_global_scale[e], "fc2",
                              static_cast<int>(e));
    }
  });

  if (spec.has_bias) {
    std::mt19937_64 g(detail::stream_key(seed, kBias));
    layer.w13_bias.resize(E * rows);
    layer.w2_bias.resize(E * H);
    for (float& v : layer.w13_bias) v = static_cast<float>(0.1 * detail::normal(g));
    for (float& v : layer.w2_bias) v = static_cast<float>(0.1 * detail::normal(g));
  }
  return layer;
}

}  // namespace

HostLayer make_random_layer(const LayerSpec& spec, uint64_t seed) { return quantized_normal_layer(spec, seed, 0.0); }

HostLayer make_realistic_layer(const LayerSpec& spec, uint64_t seed, double row_spread) {
  if (!(row_spread >= 0 && row_spread <= 4))
    throw Error("make_realistic_layer: row_spread must be in [0, 4] (got " + std::to_string(row_spread) + ")");
  return quantized_normal_layer(spec, seed, row_spread);
}

HostInputs make_random_inputs(const LayerSpec& spec, int tokens, uint64_t seed, bool include_invalid) {
  spec.validate();
  if (tokens < 0) throw Error("make_random_inputs: tokens must be >= 0 (got " + std::to_string(tokens) + ")");
  const int H = spec.hidden, K = spec.top_k;
  HostInputs in;
  in.tokens = tokens;
  in.top_k = K;
  in.hidden = H;
  in.x.resize(static_cast<size_t>(tokens) * H);
  in.topk_ids.resize(static_cast<size_t>(tokens) * K);
  in.topk_weights.resize(static_cast<size_t>(tokens) * K);

  std::mt19937_64 g(detail::stream_key(seed, kInputs));
  for (auto& v : in.x) v = float_to_bf16(static_cast<float>(detail::normal(g)));

  // Candidate ids: the local range, widened by one on each side when asked for invalid ids (below:
  // another rank's expert or -1 when expert_begin == 0; above: another rank's expert).
  const int64_t lo = include_invalid ? int64_t{spec.expert_begin} - 1 : spec.expert_begin;
  const int64_t count = spec.experts + (include_invalid ? 2 : 0);
  auto draw = [&](int64_t n) { return static_cast<int64_t>((static_cast<unsigned __int128>(g()) * n) >> 64); };
  for (int m = 0; m < tokens; ++m) {
    int32_t* ids = &in.topk_ids[static_cast<size_t>(m) * K];
    float* w = &in.topk_weights[static_cast<size_t>(m) * K];
    // A real router picks K distinct experts; when the range is smaller than K (expert parallelism
    // with few local experts), repeats are allowed and exercise the accumulation of equal ids.
    const bool distinct = count >= K;
    for (int k = 0; k < K; ++k) {
      int64_t id;
      do {
        id = lo + draw(count);
      } while (distinct && std::find(ids, ids + k, static_cast<int32_t>(id)) != ids + k);
      ids[k] = static_cast<int32_t>(id);
    }
    double sum = 0;
    for (int k = 0; k < K; ++k) sum += (w[k] = static_cast<float>(0.1 + 0.9 * detail::uniform_open01(g)));
    for (int k = 0; k < K; ++k) w[k] = static_cast<float>(w[k] / sum);
  }
  return in;
}

}  // namespace moejit
