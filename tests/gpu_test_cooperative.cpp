// The cooperative launch helper: occupancy clamp (with the dynamic shared memory limit raised first)
// and a grid barrier that holds across every CTA of the clamped grid.
#include "catch_compat.hpp"

#include <vector>

#include "moejit/runtime.hpp"
#include "runtime/context.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/launch.hpp"
#include "runtime/standalone_kernel.hpp"

using namespace moejit;
using namespace moejit::detail;

namespace {
struct BarrierParams {
  uint64_t counter, out;
  uint32_t rounds;
};

// Each round every CTA arrives, waits at the grid barrier and records how many arrivals it saw:
// with a working barrier that is exactly round * gridDim.x for every CTA.
const char* kSource = R"(
#include "grid_barrier.cuh"
struct BarrierParams { u32* counter; u32* out; u32 rounds; };
extern "C" __global__ void barrier_probe(const BarrierParams p) {
  extern __shared__ u32 scratch[];
  for (u32 r = 1; r <= p.rounds; ++r) {
    grid_barrier(p.counter, r);
    if (threadIdx.x == 0) {
      u32 seen;
      asm volatile("ld.global.acquire.gpu.u32 %0, [%1];" : "=r"(seen) : "l"(p.counter) : "memory");
      scratch[0] = seen;
      p.out[blockIdx.x * p.rounds + (r - 1)] = scratch[0];
    }
    // Nobody may arrive at the next barrier before every CTA has read this round's count.
    grid_barrier(p.counter + 1, r);
  }
}
)";
}  // namespace

TEST_CASE("cooperative launches are clamped to co-resident CTAs and their grid barrier holds", "[gpu][cooperative]") {
  Runtime rt;  // selects the device and makes its context current
  const StandaloneKernel probe(GeneratedSource{"barrier_probe.cu", "barrier_probe", kSource}, rt.arch());
  const CUfunction f = probe.function();

  const unsigned block = 256, smem = 64 * 1024;  // above the 48 KB default: the limit must be raised
  const unsigned limit = cooperative_grid_limit(f, block, smem, rt.sm_count());
  CHECK(limit >= static_cast<unsigned>(rt.sm_count()));
  CHECK(limit % rt.sm_count() == 0);

  const uint32_t rounds = 3;
  DeviceBuffer counter(2 * sizeof(uint32_t));
  counter.fill_bytes(0);
  DeviceBuffer results(static_cast<size_t>(limit) * rounds * sizeof(uint32_t));
  results.fill_bytes(0xFF);
  BarrierParams p{counter.ptr(), results.ptr(), rounds};
  // Ask for far more CTAs than fit: a plain launch of that grid would never finish its barrier.
  const unsigned grid = launch_cooperative(f, 1u << 20, block, smem, rt.sm_count(), nullptr, &p);
  CHECK(grid == limit);
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
  auto seen = results.to_vector<uint32_t>(static_cast<size_t>(grid) * rounds);
  for (unsigned b = 0; b < grid; ++b)
    for (uint32_t r = 1; r <= rounds; ++r) REQUIRE(seen[b * rounds + (r - 1)] == r * grid);

  // A grid smaller than the limit is launched as asked, and its barrier counts exactly its own CTAs
  // (a barrier that only held at the full co-resident grid would fail here).
  counter.fill_bytes(0);
  results.fill_bytes(0xFF);
  const unsigned small = 7;
  CHECK(launch_cooperative(f, small, block, smem, rt.sm_count(), nullptr, &p) == small);
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
  seen = results.to_vector<uint32_t>(static_cast<size_t>(limit) * rounds);
  for (unsigned b = 0; b < small; ++b)
    for (uint32_t r = 1; r <= rounds; ++r) REQUIRE(seen[b * rounds + (r - 1)] == r * small);
  for (size_t i = static_cast<size_t>(small) * rounds; i < seen.size(); ++i) REQUIRE(seen[i] == 0xFFFFFFFFu);
}
