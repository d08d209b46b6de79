// Decode family in one launch, pipelined by expert slot (decode_pipe keys): FC1 and FC2 run side by
// side in every CTA of a co-resident grid (one CTA per SM), and FC2 waits for each expert slot's FC1
// rows, not for all of FC1.
//
// Why: at one or two tokens the two-launch plan reads FC2's weights only after FC1's last CTA, as a
// chain of dependent loads per warp (docs/PERFORMANCE.md v11-v14: 8-9 us of gpt-oss-120b's 24.8 at
// M = 1). Here FC2's weights are copied into shared memory by the copy engine while FC1 streams, FC1
// walks its items slot by slot, and FC2 computes slot j from shared memory as soon as every CTA has
// finished slot j's FC1 rows, while FC1 streams the later slots. What is left after FC1's last item is
// the last slot's FC2 from shared memory and the top-k sum inside the CTA.
//
// Warps of a CTA:
// - 0 .. kW1-1: FC1 consumers, as decode_fc1_stream (item = slot * I/16 + slab, CTA blockIdx.x takes
//   items blockIdx.x, + gridDim.x, ...: increasing slots). Warp 0 stores the activation rows and, once
//   the CTA has passed slot j, adds one to slot_done[j] (release).
// - kW1: the producer lane that streams FC1's slabs into the ring (templates/slab_stream.cuh).
// - kW1+1 .. kW1+kW2: FC2. The CTA owns the 16-row slabs s = blockIdx.x + i * gridDim.x of H, each cut
//   in fc2_parts contiguous K ranges; unit u = i * parts + h goes to FC2 warp u % kW2. A warp keeps its
//   units' weights and scales for `window` slots in shared memory (one bulk copy each, completing on its
//   own mbarrier per window slot), waits for slot_done[j] == gridDim.x, stages its units' activation
//   rows, computes, and adds w_q * y_q to its per-(unit, token, row) sums; after the last slot the CTA's
//   FC2 warps sum each slab's parts in part order and write out. Fixed-order sums: bit-identical runs.
//
// slot_done must be zero on entry: the module's clear kernel zeroes it, and this kernel is launched as
// its programmatic dependent, waiting (griddepcontrol.wait) only before its first use of the counters.
// Every CTA must be resident at once (FC2 warps wait for other CTAs): cooperative launch.
#pragma once
#include "moe_decode_fc1_stream.cuh"
#include "moe_decode_fc2.cuh"

struct DecodePipeParams {
  DecodeFc1Params fc1;
  DecodeFc2Params fc2;
  i32* slot_done;      // [slots][32] FC1 arrivals per expert slot (one per CTA), a 128-byte line each
  i32 slots;           // counters the clear kernel zeroes (active-slot capacity)
  i32 fc2_parts;       // contiguous K ranges per FC2 slab
  i32 part_chunks;     // 64-wide chunks of the longest range
  i32 window;          // expert slots an FC2 warp holds in shared memory at once
  i32 units_per_warp;  // most (slab, range) units an FC2 warp of any CTA takes
  i32 stage_pairs;     // pairs per FC2 pass
  i32 bar_offset, buf_offset, stage_offset, acc_offset;  // dynamic shared memory layout (bytes)
};

// Slot counters sit kSlotLine ints apart (one 128-byte line each): every CTA's poller and every CTA's
// arrivals meet on them, and one line per slot keeps the slots' traffic apart.
inline constexpr int kSlotLine = 32;

// Bytes of one FC2 block: a range of part_chunks chunks' weights, then their scales.
template <bool kNvfp4>
MOEJIT_DEVICE int pipe_block_bytes(int part_chunks) {
  return part_chunks * (512 + ScaleGeometry<kNvfp4>::kBytesPerChunk);
}

// Zeroes the slot counters, then lets the layer kernel (its programmatic dependent) start at once.
__device__ void moe_decode_pipe_clear(const DecodePipeParams& p) {
  pdl_launch_dependents();
  for (int i = threadIdx.x; i < p.slots; i += blockDim.x) p.slot_done[i * kSlotLine] = 0;
}

template <bool kNvfp4, int kAct, bool kLimit, bool kBias, int kE, int kH, int kI, int kW1, int kCols, int kStages,
          int kGroup, int kW2>
__device__ void moe_decode_pipe(const DecodePipeParams& p) {
  constexpr int kMats = kAct == kActRelu2 ? 1 : 2;
  constexpr int kSlabs1 = kI / 16;
  constexpr int kSlabs2 = kH / 16;
  constexpr int kChunks2 = (kI + 63) / 64;
  // Ring waits suspend up to 1 ms per try: consumers and the producer wake when the phase completes,
  // without retries taking issue slots from the warps that compute.
  using Ring = SlabStreamRing<kNvfp4, kMats, kW1, kStages, kGroup, 1000000>;
  using SG = ScaleGeometry<kNvfp4>;
  extern __shared__ __align__(128) u8 pipe_smem[];
  __shared__ InlineRouteList route;
  __shared__ float pipe_pair_w[kInlineMaxPairs];   // FC2: topk_weights[q]
  __shared__ float pipe_slot_gs[kInlineMaxPairs];  // FC2: output multiplier of slot j
  __shared__ int pipe_ready[2];                    // FC2: slots complete everywhere (FC2 warp 0 publishes)
  constexpr int kRedHalf = kW1 > 1 ? kW1 * kMats * 4 * 32 : 1;
  __shared__ float red[2 * kRedHalf];
  const int lane = lane_id(), warp = threadIdx.x >> 5;
  const Ring ring = Ring::make(pipe_smem);
  const u32 fc2_bar0 = shared_address(pipe_smem + p.bar_offset);
  if (threadIdx.x == 0) {
    for (int i = 0; i < kW2 * p.window; ++i) mbarrier_init(fc2_bar0 + 8 * i, 1);
    mbarrier_init_fence();
  }
  MOEJIT_TRACE_CTA(0);
  MOEJIT_TRACE_CTA_KIND(5);
  // Its closing CTA barrier also publishes the barriers' initialization.
  inline_route_list<kE>(p.fc1.route.topk_ids, p.fc1.route.pairs, p.fc1.route.expert_begin, route);
  MOEJIT_TRACE_CTA(1);
  const int num_active = route.num_active;
  const int items = kSlabs1 * num_active;

  if (warp == kW1) {  // FC1's producer: one lane copies every slab, in the consumers' order
    if (lane == 0) fill_fc1_items<kH, kI, kMats, 1, kCols>(ring, p.fc1, route, items);
    return;
  }

  if (warp < kW1) {  // FC1's consumers
    u32 n = 0;
    int signaled = 0;  // warp 0: slots this CTA has reported done
    bool waited = false;
    auto signal_upto = [&](int upto) {
      if (signaled >= upto) return;
      if (!waited) {  // the clear kernel's zeros must be visible before the first arrival
        pdl_wait_primary();
        waited = true;
      }
      // __syncwarp orders the lanes' activation stores before lane 0's release (cumulative).
      __syncwarp();
      if (lane == 0)
        for (int s = signaled; s < upto; ++s) red_add_release_gpu(p.slot_done + s * kSlotLine, 1);
#ifdef MOEJIT_TRACE
      for (int s = signaled; s < upto && s < 8; ++s) MOEJIT_TRACE_WARP(s, trace_now());
#endif
      signaled = upto;
    };
    int parity = 0;  // which half of red this pass reduces in
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
      const int slot = item / kSlabs1, slab = item % kSlabs1;
      if (warp == 0) signal_upto(slot);  // the previous items (earlier slots) are stored
      const int first = route.offset[slot];
      const ExpertWork work{num_active, route.expert[slot], route.offset[slot + 1] - first, route.pair + first};
      const float gs = kNvfp4 ? p.fc1.gscale[work.expert] * kAccScale : kAccScale;
      // Warp 0's biases for its rows (g, g + 8), loaded now so that the store pass does not wait.
      float bias[kMats][2];
      const size_t bias_row = (size_t)work.expert * kMats * kI + slab * 16 + (lane >> 2);
#pragma unroll
      for (int m = 0; m < kMats; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) bias[m][h] = kBias && warp == 0 ? p.fc1.bias[bias_row + m * kI + 8 * h] : 0.f;
      for (int pass = 0; pass < work.count; pass += kCols) {
        const u16* rows[1];
        const int live = pass_rows<1, kCols>(
            pass, work.count, [&](int t) { return p.fc1.x + (size_t)(work.pairs[t] / p.fc1.route.top_k) * kH; }, rows);
        float acc[1][kMats][4];
        ring.template mma_slab<kH, 1, kCols, true>(rows, live, acc, warp, n);
        // Two halves of red in turn: warp 0 reads this pass's half while the others go on to the next
        // pass, whose reduction writes the other half (no barrier after the store).
        reduce_over_warps<kMats, kW1, 1>(acc, red + parity * kRedHalf);
        parity ^= 1;
        if (warp == 0)
          for_each_pass_result<1, kCols>(pass, live, work.count, [&](int, int i, int t, int r) {
            const float gate = acc[0][0][i] * gs + bias[0][i >> 1];
            const float up = kMats == 2 ? acc[0][kMats - 1][i] * gs + bias[kMats - 1][i >> 1] : 0.f;
            const float a = apply_activation<kAct, kLimit>(gate, up, p.fc1.alpha, p.fc1.beta, p.fc1.limit);
            p.fc1.act[(size_t)work.pairs[t] * kI + slab * 16 + r] = f32_to_bf16(a * kActScale);
          });
      }
    }
    if (warp == 0) signal_upto(num_active);
    MOEJIT_TRACE_CTA(3);
    return;
  }

  // FC2 warp fw.
  const int fw = warp - kW1 - 1;
  const int parts = p.fc2_parts, window = p.window, tokens = p.fc2.tokens, top_k = p.fc2.route.top_k;
  const int my_slabs = static_cast<int>(blockIdx.x) < kSlabs2 ? (kSlabs2 - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int units = my_slabs * parts;
  const int my_units = fw < units ? (units - 1 - fw) / kW2 + 1 : 0;
  const int block_bytes = pipe_block_bytes<kNvfp4>(p.part_chunks);
  const u32 bar0 = fc2_bar0 + 8 * fw * window;
  const u32 buf0 = shared_address(pipe_smem + p.buf_offset) + fw * p.units_per_warp * window * block_bytes;
  const int pitch = p.part_chunks * 128;  // bytes per staged activation row
  const u32 stage = shared_address(pipe_smem + p.stage_offset) + fw * window * p.units_per_warp * p.stage_pairs * pitch;
  float* const sums = reinterpret_cast<float*>(pipe_smem + p.acc_offset);  // [warp][unit][token][16 rows]
  float* const my_sums = sums + fw * p.units_per_warp * tokens * 16;
  // Local unit lu: slab, K range [c0, c0 + nc) in chunks, and range index h.
  struct Unit {
    int slab, h, c0, nc;
  };
  auto unit_of = [&](int lu) {
    const int u = fw + lu * kW2, i = u / parts, h = u % parts;
    const int c0 = h * kChunks2 / parts;
    return Unit{static_cast<int>(blockIdx.x) + i * static_cast<int>(gridDim.x), h, c0, (h + 1) * kChunks2 / parts - c0};
  };
  // Everything that does not depend on FC1, before the first slot: each pair's routing weight and each
  // slot's output multiplier in shared memory, and the sums of the units of range 0 start at each
  // token's bias term, sum over its local pairs of w_q * b2[e_q] (pair order), the others at zero.
  if (fw == 0) {
    for (int q = lane; q < p.fc2.route.pairs; q += 32) pipe_pair_w[q] = p.fc2.topk_weights[q];
    for (int j = lane; j < num_active; j += 32)
      pipe_slot_gs[j] = kNvfp4 ? p.fc2.gscale[route.expert[j]] * kAccScale : kAccScale;
  }
  for (int idx = lane; idx < my_units * tokens * 16; idx += 32) {
    const int lu = idx / (tokens * 16), m = (idx / 16) % tokens, r = idx % 16;
    float b = 0.f;
    if (kBias && unit_of(lu).h == 0)
      for (int k = 0; k < top_k; ++k) {
        const int q = m * top_k + k, e = p.fc2.route.topk_ids[q] - p.fc2.route.expert_begin;
        if (e >= 0 && e < kE) b += p.fc2.topk_weights[q] * p.fc2.bias[(size_t)e * kH + unit_of(lu).slab * 16 + r];
      }
    my_sums[idx] = b;
  }
  asm volatile("bar.sync 2, %0;" ::"n"(kW2 * 32) : "memory");
  // Lane 0: every unit's block of slot j, on the window slot's barrier.
  auto issue = [&](int j) {
    const u64 policy = l2_evict_first_policy();
    const int e = route.expert[j];
    const u32 bar = bar0 + 8 * (j % window);
    u32 bytes = 0;
    for (int lu = 0; lu < my_units; ++lu) bytes += unit_of(lu).nc * (512 + SG::kBytesPerChunk);
    mbarrier_arrive_expect_tx(bar, bytes);
    for (int lu = 0; lu < my_units; ++lu) {
      const Unit un = unit_of(lu);
      const size_t slab_index = (size_t)e * kSlabs2 + un.slab;
      const u8* w = reinterpret_cast<const u8*>(p.fc2.w + slab_index * kChunks2 * 32) + un.c0 * 512;
      const u8* s = p.fc2.s + (slab_index * kChunks2 + un.c0) * SG::kBytesPerChunk;
      const u32 block = buf0 + (lu * window + j % window) * block_bytes;
      bulk_copy_to_shared(block, w, un.nc * 512, bar, policy);
      bulk_copy_to_shared(block + p.part_chunks * 512, s, un.nc * SG::kBytesPerChunk, bar, policy);
    }
  };
  // Activation rows of (resident slot j, unit lu, pair t of the pass): one stage area per window slot
  // and unit, so that the rows of every slot known complete are requested together (one round trip).
  const int unit_stage = p.stage_pairs * pitch;
  auto stage_at = [&](int j, int lu) { return stage + ((j % window) * p.units_per_warp + lu) * unit_stage; };
  // Requests (cp.async, 16 bytes per lane and step; zeros past I) for the pairs [pass, pass + live) of
  // slot j over every unit's K range.
  auto request_rows = [&](int j, int pass) {
    const int first = route.offset[j], live = min(p.stage_pairs, route.offset[j + 1] - first - pass);
    for (int lu = 0; lu < my_units; ++lu) {
      const Unit un = unit_of(lu);
      const int row_pieces = un.nc * 8, pieces = live * row_pieces;
      const u32 at = stage_at(j, lu);
      for (int idx = lane; idx < pieces; idx += 32) {
        const int t = idx / row_pieces, k = un.c0 * 64 + (idx % row_pieces) * 8;
        const bool inside = kI % 64 == 0 || k < kI;
        cp_async_16(at + t * pitch + (idx % row_pieces) * 16,
                    p.fc2.act + (size_t)route.pair[first + pass + t] * kI + (inside ? k : 0), inside ? 16 : 0);
      }
    }
    cp_async_commit();
  };
  if (my_units > 0) {
    if (lane == 0)
      for (int j = 0; j < window && j < num_active; ++j) issue(j);
    pdl_wait_primary();  // slot_done holds this forward's zeros from here on
    const int g = lane >> 2, c4 = lane & 3;
    // The pair (within a pass) whose activation row this lane supplies as MMA column g, or -1.
    const int col_pair = kCols == 8 ? g : (g & 1) ? -1 : g >> 1;
    int ready = 0;      // slots known complete everywhere
    int refreshes = 0;  // barrier rounds that published `ready` (the same count in every warp)
    int requested = 0;  // slots whose first pass's rows are requested
    for (int j = 0; j < num_active; ++j) {
      if (ready <= j) {
        // FC2 warp 0 (it always has a unit when any warp has) polls slots j .. j+31 at once, one per lane,
        // and publishes how many from j on are complete; the other warps with units wait at a named
        // barrier meanwhile (no issue slots taken from FC1), and read the count after it. Warp 0's
        // fence after the relaxed reads that saw the counts is the acquire; the barrier extends it to
        // the CTA.
        if (fw == 0) {
          const int mine = j + lane;
          for (;;) {
            const bool done =
                mine < num_active && ld_relaxed_gpu(p.slot_done + mine * kSlotLine) >= static_cast<int>(gridDim.x);
            const u32 complete = __ballot_sync(0xffffffffu, done);
            if (complete & 1u) {
              if (done) fence_acq_rel_gpu();
              if (lane == 0) pipe_ready[refreshes & 1] = j + (__ffs(~complete) == 0 ? 32 : __ffs(~complete) - 1);
              break;
            }
            __nanosleep(128);
          }
        }
        asm volatile("bar.sync 3, %0;" ::"r"(min(units, kW2) * 32) : "memory");
        // Two cells in turn: warp 0 writes this cell again two refreshes later, after the next barrier,
        // which every warp reaches only after this read.
        ready = *static_cast<volatile int*>(&pipe_ready[refreshes & 1]);
        ++refreshes;
      }
#ifdef MOEJIT_TRACE
      if (j < 8) MOEJIT_TRACE_WARP(j, trace_now());  // slot j known complete: FC2 starts on it
#endif
      // Every slot known complete and resident gets its rows requested now, together.
      for (; requested < ready && requested < j + window; ++requested) request_rows(requested, 0);
      const int first = route.offset[j], count = route.offset[j + 1] - first;
      const float gs = pipe_slot_gs[j];
      for (int pass = 0; pass < count; pass += p.stage_pairs) {
        const int live = min(p.stage_pairs, count - pass);
        if (pass > 0) request_rows(j, pass);  // a slot with more pairs than a pass: its later passes
        cp_async_wait_all();
        __syncwarp();
        if (pass == 0) mbarrier_wait<1000000>(bar0 + 8 * (j % window), (j / window) & 1);
        for (int lu = 0; lu < my_units; ++lu) {
          const Unit un = unit_of(lu);
          const u32 block = buf0 + (lu * window + j % window) * block_bytes;
          const bool has_pair = col_pair >= 0 && col_pair < live;
          const u32 xrow = stage_at(j, lu) + (has_pair ? col_pair : 0) * pitch + c4 * 8;
          float acc[1][1][4];
          zero_accumulators(acc);
#pragma unroll 2
          for (int c = 0; c < un.nc; ++c) {
            // Plain assignments: NVRTC 13.0 crashes on a brace-initialized array from a conditional of
            // two inline-asm loads (docs/PERFORMANCE.md v6.2).
            u32x4 wc[1];
            u32x2 sc[1];
            wc[0] = ld_shared_16(block + c * 512 + lane * 16);
            const u32 sa = block + p.part_chunks * 512 + c * SG::kBytesPerChunk + g * SG::kBytesPerLane;
            if (kNvfp4) {
              sc[0] = ld_shared_8(sa);
            } else {
              sc[0].x = ld_shared_4(sa);
              sc[0].y = 0u;
            }
            chunk_mma<kNvfp4, 1, 1, kCols, false>(wc, sc, 1, acc, [&](int, int st) {
              return has_pair ? ld_shared_8(xrow + c * 128 + st * 32) : u32x2{0u, 0u};
            });
          }
          // w_q * y_q into the unit's sums, pair by pair (two pairs of a pass may share a token).
          for (int tt = 0; tt < live; ++tt) {
            for_each_pass_result<1, kCols>(0, 1, live, [&](int, int i, int t, int r) {
              if (t != tt) return;
              const int q = route.pair[first + pass + t];
              my_sums[(lu * tokens + q / top_k) * 16 + r] += pipe_pair_w[q] * (acc[0][0][i] * gs);
            });
            __syncwarp();
          }
        }
        __syncwarp();  // the stage area is rewritten by a later pass or slot
      }
      if (j + window < num_active) {
        fence_proxy_async_shared();
        __syncwarp();
        if (lane == 0) issue(j + window);
      }
    }
  }
  // Every FC2 warp of the CTA (named barrier 2), then each slab's ranges summed in order.
  asm volatile("bar.sync 2, %0;" ::"n"(kW2 * 32) : "memory");
  const int tid = threadIdx.x - (kW1 + 1) * 32;
#ifdef MOEJIT_TRACE
  if (tid == 0 && trace_cta() < kTraceRecords) moejit_trace_cta[trace_cta()][4] = trace_now();
#endif
  for (int idx = tid; idx < my_slabs * tokens * 16; idx += kW2 * 32) {
    const int i = idx / (tokens * 16), m = (idx / 16) % tokens, r = idx % 16;
    float sum = 0.f;
    for (int h = 0; h < parts; ++h) {
      const int u = i * parts + h;
      sum += sums[(((u % kW2) * p.units_per_warp + u / kW2) * tokens + m) * 16 + r];
    }
    p.fc2.out[(size_t)m * kH + (blockIdx.x + i * gridDim.x) * 16 + r] = f32_to_bf16(sum);
  }
#ifdef MOEJIT_TRACE
  asm volatile("bar.sync 2, %0;" ::"n"(kW2 * 32) : "memory");
  if (tid == 0 && trace_cta() < kTraceRecords) moejit_trace_cta[trace_cta()][6] = trace_now();
#endif
}
