#include "runtime/launch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "moejit/error.hpp"
#include "runtime/driver_api.hpp"

namespace moejit::detail {

void allow_dynamic_smem(CUfunction f, unsigned bytes) {
  if (bytes == 0) return;
  // One lock for every function: forwards on several threads launch the same function with sizes that
  // depend on M, and a limit lowered by one thread between another's raise and its launch fails that
  // launch. So the limit only ever grows (it is a ceiling, not a reservation). The current value is read
  // back from the driver rather than remembered, which stays right when a function handle is reused
  // by a module loaded later.
  static std::mutex mu;
  const std::lock_guard<std::mutex> lock(mu);
  int current = 0;
  check(driver().cuFuncGetAttribute(&current, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f),
        "cuFuncGetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  if (current < static_cast<int>(bytes))  // static + dynamic above 48 KiB needs this opt-in
    check(driver().cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(bytes)),
          "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  // Kernels that ask for dynamic shared memory size their grids by it: give them the largest
  // carveout, or fewer CTAs fit per SM than the planner counted on.
  check(driver().cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100),
        "cuFuncSetAttribute(PREFERRED_SHARED_MEMORY_CARVEOUT)");
}

namespace {
// A 1-D block of `block` threads over the grid, with its attributes (owned by the caller).
CUlaunchConfig launch_config(unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block, unsigned dynamic_smem,
                             CUstream stream, CUlaunchAttribute* attrs, unsigned num_attrs) {
  CUlaunchConfig cfg{};
  cfg.gridDimX = grid_x;
  cfg.gridDimY = grid_y;
  cfg.gridDimZ = grid_z;
  cfg.blockDimX = block;
  cfg.blockDimY = 1;
  cfg.blockDimZ = 1;
  cfg.sharedMemBytes = dynamic_smem;
  cfg.hStream = stream;
  cfg.attrs = attrs;
  cfg.numAttrs = num_attrs;
  return cfg;
}
}  // namespace

void launch(CUfunction f, const LaunchShape& s, CUstream stream, void* params, bool programmatic_dependent) {
  void* args[] = {params};
  allow_dynamic_smem(f, s.dynamic_smem);
  if (!programmatic_dependent) {
    check(driver().cuLaunchKernel(f, s.grid_x, s.grid_y, s.grid_z, s.block, 1, 1, s.dynamic_smem, stream, args, nullptr),
          "cuLaunchKernel");
    return;
  }
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  const CUlaunchConfig cfg = launch_config(s.grid_x, s.grid_y, s.grid_z, s.block, s.dynamic_smem, stream, &attr, 1);
  check(driver().cuLaunchKernelEx(&cfg, f, args, nullptr), "cuLaunchKernelEx(programmatic)");
}

unsigned cooperative_grid_limit(CUfunction f, unsigned block, unsigned dynamic_smem, int sm_count) {
  allow_dynamic_smem(f, dynamic_smem);  // the occupancy query answers 0 until the limit covers the size
  int per_sm = 0;
  check(driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, static_cast<int>(block), dynamic_smem),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  if (per_sm <= 0)
    throw Error(fmt::format("cooperative launch: a CTA of {} threads with {} bytes of dynamic shared memory does not fit "
                            "on a multiprocessor",
                            block, dynamic_smem));
  return static_cast<unsigned>(per_sm) * static_cast<unsigned>(sm_count);
}

unsigned max_active_clusters(CUfunction f, unsigned cluster, unsigned block, unsigned dynamic_smem) {
  allow_dynamic_smem(f, dynamic_smem);
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = cluster;
  attr.value.clusterDim.y = 1;
  attr.value.clusterDim.z = 1;
  const CUlaunchConfig cfg = launch_config(cluster, 1, 1, block, dynamic_smem, nullptr, &attr, 1);
  int clusters = 0;
  check(driver().cuOccupancyMaxActiveClusters(&clusters, f, &cfg), "cuOccupancyMaxActiveClusters");
  if (clusters <= 0)
    throw Error(fmt::format("cluster launch: no cluster of {} CTAs of {} threads with {} bytes of dynamic shared memory "
                            "fits on the device",
                            cluster, block, dynamic_smem));
  return static_cast<unsigned>(clusters);
}

unsigned launch_cooperative(CUfunction f, unsigned wanted_grid, unsigned block, unsigned dynamic_smem, int sm_count,
                            CUstream stream, void* params, bool programmatic_dependent) {
  const unsigned grid = std::max(1u, std::min(wanted_grid, cooperative_grid_limit(f, block, dynamic_smem, sm_count)));
  void* args[] = {params};
  CUlaunchAttribute attrs[2]{};
  attrs[0].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  attrs[0].value.cooperative = 1;
  attrs[1].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attrs[1].value.programmaticStreamSerializationAllowed = 1;
  const CUlaunchConfig cfg =
      launch_config(grid, 1, 1, block, dynamic_smem, stream, attrs, programmatic_dependent ? 2u : 1u);
  check(driver().cuLaunchKernelEx(&cfg, f, args, nullptr),
        programmatic_dependent ? "cuLaunchKernelEx(cooperative, programmatic)" : "cuLaunchKernelEx(cooperative)");
  return grid;
}

}  // namespace moejit::detail
