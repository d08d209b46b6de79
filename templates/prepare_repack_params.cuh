// Parameters of the weight-repack kernels (prepare_repack.cuh).
#pragma once
#include "kernel_params.cuh"

MOEJIT_PARAMS_BEGIN

struct RepackParams {
  MOEJIT_PTR(const u8) src;        // [E][logical rows][K/2] packed e2m1
  MOEJIT_PTR(const u8) src_scale;  // [E][logical rows][K/block] scale codes
  MOEJIT_PTR(u32x4) dst;           // [E][slabs][chunks][mats][32] runs
  MOEJIT_PTR(u8) dst_scale;        // [E][slabs][chunks][mats][8 row groups][64/block blocks][2 rows]
  i32 experts, slabs, mats, k, chunks, logical_rows, rows_per_mat, block, order;
};

MOEJIT_PARAMS_END
