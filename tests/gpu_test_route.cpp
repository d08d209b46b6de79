// The route kernel alone against a CPU bucketing: counts, active slots in expert order, offsets, and a
// placement that keeps every expert's pairs in increasing pair order (the later reductions rely on it),
// for pair counts around its batch and segment edges, ids outside the local range, and the largest
// forward (65,536 tokens x top-8).
#include "catch_compat.hpp"

#include <fmt/format.h>

#include <random>
#include <vector>

#include "generator/families/route.hpp"
#include "moejit/generator.hpp"
#include "moejit/runtime.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/kernel_params.hpp"
#include "runtime/launch.hpp"
#include "runtime/standalone_kernel.hpp"

using namespace moejit;
using namespace moejit::detail;

namespace {
struct Routing {
  std::vector<int32_t> active_expert, active_offset, pair_index;
};

// Stable bucketing of the pairs by local expert; ids outside [begin, begin + experts) are dropped.
Routing reference_routing(const std::vector<int32_t>& ids, int experts, int begin) {
  std::vector<std::vector<int32_t>> bucket(experts);
  for (size_t q = 0; q < ids.size(); ++q) {
    const int e = ids[q] - begin;
    if (e >= 0 && e < experts) bucket[e].push_back(static_cast<int32_t>(q));
  }
  Routing r;
  int pos = 0;
  for (int e = 0; e < experts; ++e) {
    if (bucket[e].empty()) continue;
    r.active_expert.push_back(e);
    r.active_offset.push_back(pos);
    for (int32_t q : bucket[e]) r.pair_index.push_back(q);
    pos += static_cast<int>(bucket[e].size());
  }
  r.active_offset.push_back(pos);
  return r;
}

void check_route(Runtime& rt, int experts, int begin, int pairs, double outside, uint32_t seed) {
  INFO(fmt::format("experts {} begin {} pairs {} outside {} seed {}", experts, begin, pairs, outside, seed));
  KernelKey key = KernelKey::parse(fmt::format("route:{}:mxfp4:silu:a16:E{}:H0:I0:w{}n1d1o0:b0:l0:i0", to_string(rt.arch()),
                                               experts, route_warps(experts, rt.arch())));
  const GeneratedSource src = generate_source(key);
  const StandaloneKernel kernel(src, rt.arch());

  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> local(begin, begin + experts - 1), any(-3, begin + 2 * experts + 3);
  std::bernoulli_distribution out(outside);
  // Skewed routing (a few hot experts) so some experts' pairs span many warp segments.
  std::uniform_int_distribution<int> hot(begin, begin + std::min(experts, 4) - 1);
  std::bernoulli_distribution is_hot(0.3);
  std::vector<int32_t> ids(pairs);
  for (auto& id : ids) id = out(rng) ? any(rng) : is_hot(rng) ? hot(rng) : local(rng);
  const Routing want = reference_routing(ids, experts, begin);

  const int num_counters = 37;
  DeviceBuffer d_ids = DeviceBuffer::from(ids);
  DeviceBuffer d_num(sizeof(int32_t)), d_expert((experts + 1) * sizeof(int32_t)),
      d_offset((experts + 2) * sizeof(int32_t)), d_pairs((pairs + 1) * sizeof(int32_t)),
      d_counters(num_counters * sizeof(int32_t));
  for (DeviceBuffer* b : {&d_num, &d_expert, &d_offset, &d_pairs, &d_counters}) b->fill_bytes(0xA5);  // poison
  RouteParams p{};
  p.topk_ids = d_ids.ptr();
  p.pairs = pairs;
  p.expert_begin = begin;
  p.num_active = d_num.ptr();
  p.active_expert = d_expert.ptr();
  p.active_offset = d_offset.ptr();
  p.pair_index = d_pairs.ptr();
  p.counters = d_counters.ptr();
  p.num_counters = num_counters;
  LaunchShape shape;
  shape.block = static_cast<unsigned>(key.warps * 32);
  shape.dynamic_smem = static_cast<unsigned>(kernel_dynamic_smem(key));
  launch(kernel.function(), shape, nullptr, &p);
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize");

  const int n = d_num.to_vector<int32_t>(1)[0];
  REQUIRE(n == static_cast<int>(want.active_expert.size()));
  CHECK(d_expert.to_vector<int32_t>(n) == want.active_expert);
  CHECK(d_offset.to_vector<int32_t>(n + 1) == want.active_offset);
  CHECK(d_pairs.to_vector<int32_t>(want.pair_index.size()) == want.pair_index);
  CHECK(d_counters.to_vector<int32_t>(num_counters) == std::vector<int32_t>(num_counters, 0));
}
}  // namespace

TEST_CASE("the route kernel buckets pairs stably by local expert", "[gpu][route]") {
  Runtime rt;
  uint32_t seed = 1;
  for (int experts : {8, 128, 256}) {
    for (int pairs : {1, 31, 32, 33, 136, 511, 512, 513, 8192 + 7, 16 * 512, 16 * 512 + 1, 32768}) {
      check_route(rt, experts, 0, pairs, 0.0, seed++);
      check_route(rt, experts, 2 * experts, pairs, 0.2, seed++);  // an expert-parallel rank
    }
  }
  check_route(rt, 256, 0, 65536 * 8, 0.01, seed++);  // the largest forward
  check_route(rt, 4096, 0, 40000, 0.05, seed++);     // a table that limits the warps
}
