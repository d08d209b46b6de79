// prepare: logical checkpoint-shaped FP4 weights and scale planes (DESIGN §3) -> the decode family's
// layout (see fp4_decode.cuh and docs/WEIGHT_LAYOUT.md). One thread per 16-byte weight run or per packed
// scale pair; K beyond the logical size is padded with zero codes.
#pragma once
#include "fp4_decode.cuh"
#include "prepare_repack_params.cuh"

// Logical row of output row r of matrix mat (0 gate / single, 1 up). order: 0 gate_up, 1 up_gate,
// 2 interleaved.
MOEJIT_DEVICE int repack_logical_row(const RepackParams& p, int mat, int r) {
  if (p.order == 2) return 2 * r + mat;
  if (p.order == 1) return (1 - mat) * p.rows_per_mat + r;
  return mat * p.rows_per_mat + r;
}

MOEJIT_DEVICE void repack_weights(const RepackParams& p) {
  const long long total = (long long)p.experts * p.slabs * p.chunks * p.mats * 32;
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  long long rest = idx;
  const int lane = (int)(rest % 32); rest /= 32;
  const int mat = (int)(rest % p.mats); rest /= p.mats;
  const int chunk = (int)(rest % p.chunks); rest /= p.chunks;
  const int slab = (int)(rest % p.slabs); rest /= p.slabs;
  const int e = (int)rest;
  const int g = lane >> 2, c4 = lane & 3;
  const u8* rows[2];
  for (int h = 0; h < 2; ++h) {
    const int r = slab * 16 + g + 8 * h;
    rows[h] = p.src + ((long long)e * p.logical_rows + repack_logical_row(p, mat, r)) * (p.k / 2);
  }
  u32 words[4];
  for (int s = 0; s < 4; ++s) {
    u32 w = 0;
    for (int part = 0; part < 4; ++part) {
      for (int high = 0; high < 2; ++high) {
        const int kk = chunk * 64 + 16 * s + 4 * c4 + (part >= 2 ? 2 : 0) + high;
        u32 code = 0;
        if (kk < p.k) code = (rows[part & 1][kk >> 1] >> ((kk & 1) * 4)) & 0xFu;
        for (int bit = 0; bit < 4; ++bit) w |= ((code >> bit) & 1u) << fp4_bit_source(part, high, bit);
      }
    }
    words[s] = w;
  }
  p.dst[idx] = u32x4{words[0], words[1], words[2], words[3]};
}

MOEJIT_DEVICE void repack_scales(const RepackParams& p) {
  const int per_chunk = 64 / p.block;
  const long long total = (long long)p.experts * p.slabs * p.chunks * p.mats * 16 * per_chunk;
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  long long rest = idx;
  const int h = (int)(rest % 2); rest /= 2;
  const int b = (int)(rest % per_chunk); rest /= per_chunk;
  const int g = (int)(rest % 8); rest /= 8;
  const int mat = (int)(rest % p.mats); rest /= p.mats;
  const int chunk = (int)(rest % p.chunks); rest /= p.chunks;
  const int slab = (int)(rest % p.slabs); rest /= p.slabs;
  const int e = (int)rest;
  const int kb = chunk * per_chunk + b, nblocks = p.k / p.block;
  const long long row = (long long)e * p.logical_rows + repack_logical_row(p, mat, slab * 16 + g + 8 * h);
  p.dst_scale[idx] = kb < nblocks ? p.src_scale[row * nblocks + kb] : (u8)0;
}
