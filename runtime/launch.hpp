#pragma once
// Kernel launches through the driver API: plain launches, launches with programmatic dependent launch,
// and cooperative launches whose grid is clamped to what can be co-resident.
#include <cuda.h>

#include <cstddef>

namespace moejit::detail {

struct LaunchShape {
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned block = 128;
  unsigned dynamic_smem = 0;
};

// Lets f launch with `bytes` of dynamic shared memory (and the largest shared-memory carveout). The
// limit only grows, under one lock, so concurrent launches of f with different sizes never fail.
void allow_dynamic_smem(CUfunction f, unsigned bytes);

// params: pointer to the kernel's single by-value parameter struct.
void launch(CUfunction f, const LaunchShape& shape, CUstream stream, void* params, bool programmatic_dependent = false);

// Largest grid of `block` threads with `dynamic_smem` bytes that can be co-resident on the device
// (occupancy x SM count); raises the function's dynamic shared memory limit first, without which the
// occupancy query answers 0.
unsigned cooperative_grid_limit(CUfunction f, unsigned block, unsigned dynamic_smem, int sm_count);
// Most clusters of `cluster` CTAs (a kernel compiled with those cluster dimensions) of `block` threads with
// `dynamic_smem` bytes that the device runs at once.
unsigned max_active_clusters(CUfunction f, unsigned cluster, unsigned block, unsigned dynamic_smem);
// Cooperative launch (grid barrier capable) of a 1-D grid of min(wanted, limit) CTAs; returns the grid
// used. The kernel must be correct for any grid size. programmatic_dependent: also a programmatic
// dependent of the previous kernel in the stream (it must call griddepcontrol.wait before reading that
// kernel's outputs).
unsigned launch_cooperative(CUfunction f, unsigned wanted_grid, unsigned block, unsigned dynamic_smem, int sm_count,
                            CUstream stream, void* params, bool programmatic_dependent = false);

}  // namespace moejit::detail
