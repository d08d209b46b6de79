#pragma once
// The batch family's geometry (templates/moe_batch.cuh, moe_batch_wgmma.cuh): a CTA multiplies `warps`
// 16-row slabs of one expert by a tile of 8 * ntiles of its pairs staged in shared memory, one FP4
// decode per tile; on sm_90a from 14 pairs per expert on warpgroup MMA (tile suffix m). Behind the
// route kernel; batch_fc2's module also holds the top-k combine.
#include "moejit/key.hpp"

namespace moejit::detail {

// Dynamic shared memory in bytes of a batch kernel (batch_fc1, batch_fc2): depth + 1 stages of its copy
// ring, each the token tile and every warp's weight runs and scale bytes (templates/moe_batch.cuh:
// BatchStage; moe_batch_wgmma.cuh: WgmmaStage, 1 KiB aligned); 0 for other kinds. Throws moejit::Error
// when the key does not normalize. Thread-safe.
int batch_dynamic_smem(const KernelKey& key);

}  // namespace moejit::detail
