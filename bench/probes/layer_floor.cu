// Lower bounds of a routed decode layer on this GPU, timed as `moejit bench` times a forward: a CUDA
// graph of (L2 flush: a read of 2x the L2 size, start event node, the kernels, stop event node), replayed,
// median of the replays. The kernels only read bytes; none decodes or multiplies anything, so each time
// is a floor for every layer that must do what the kernels do:
//
//   read        one kernel reads FC1 + FC2 bytes contiguously (the bench's "read" column)
//   ids+read    the same, but each CTA first loads a routing id from the flushed memory and derives its
//               read addresses from it: no weight address exists before the ids arrive
//   2k-serial   kernel 1: ids + the FC1 bytes, then a store per CTA (FC1's output); kernel 2, its
//               programmatic dependent (PDL, as moejit's decode launches FC2): ids + the FC2 bytes,
//               `griddepcontrol.wait`, one load of kernel 1's output and a store per CTA. Both kernels
//               take every SM's threads, so kernel 2 reads after kernel 1 drains (FC2 after FC1)
//   2k-overlap  the same with half the threads per kernel, so kernel 2's CTAs are resident from the
//               start and its FC2 bytes stream beside FC1's: a layer whose FC2 weights are all on chip
//               when FC1 ends and whose FC2 then costs one dependent load and a store
//   1k-barrier  one cooperative launch: ids, all bytes, a grid barrier (self-resetting, no memset
//               node), one load of another CTA's store, a store
//   slice+sum   FC2 cut at FC1's slices with no arithmetic: kernel 1 reads all bytes (ids first) and
//               stores one fp32 partial row of H x M outputs per CTA; kernel 2 (PDL) sums the rows of
//               every output in a fixed order and stores the outputs. The simplest such sum (each warp
//               walks its rows in turn), so this is that structure's cost with this sum, not a floor
//   slice/Nsm   the same structure with a batched sum (each warp issues all of its rows' loads before
//               adding them in row order; 32 warps per sum CTA) over N partial rows per SM: 4 (512-thread
//               CTAs, as slice+sum), 2 or 1 (1024-thread CTAs). One row per SM is the fewest a slice layer
//               can leave without a cross-CTA exchange inside kernel 1
//   1sm/w8, /w4 slice/1sm with 8 or 4 warps per sum CTA (17 or 34 rows per warp, fewer warp sums to add)
//   rows/1sm    slice/1sm's kernel 1 alone (the read at one 1024-thread CTA per SM and the partial rows)
//   slice+alu   slice/1sm whose kernel 1 also does the decode family's arithmetic on every byte (FP4
//               decode, MMA, block scales: decode_stream), a lower bound for a slice layer that computes
//   alu-rows    that kernel 1 alone
//
// Build and run on the GPU machine (the CUDA runtime, not part of the moejit binaries):
//   nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/layer_floor bench/probes/layer_floor.cu
//   /tmp/layer_floor                 # gpt-oss-120b M = 1 and 2, Qwen3-30B-A3B M = 1 (the open rows)
//   /tmp/layer_floor NAME FC1_BYTES FC2_BYTES OUTPUTS [REPLAYS]      (OUTPUTS = H x M)
#include "probe_timing.cuh"
#include "../../templates/fp4_decode.cuh"   // the decode family's FP4 decode and block scales

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>


namespace {
using namespace probe;


// The CTA's routing id, loaded by one thread and shared, as a decode CTA routes: the ids are 0 at run
// time, but the read addresses depend on them, so no load of the weights can leave before they arrive.
__device__ __forceinline__ unsigned long long routed_offset(const int* ids) {
  __shared__ int id;
  if (threadIdx.x == 0) id = *(volatile const int*)(ids + (blockIdx.x & 7));
  __syncthreads();
  return static_cast<unsigned long long>(id);
}



__global__ void __launch_bounds__(kThreads, 4) k_ids_read(const int* ids, const char* p, unsigned long long n16,
                                                       unsigned* sink) {
  const unsigned long long off = routed_offset(ids);
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  sink_if(read_stream(p + 16 * off, n16, (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x, stride), sink);
}

// Kernel 1 of the two-launch forms: FC1's bytes, then its output (one word per CTA).
__global__ void __launch_bounds__(kThreads, 4) k_phase1(const int* ids, const char* p, unsigned long long n16,
                                                     unsigned* out1) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const unsigned long long off = routed_offset(ids);
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned acc = read_stream(p + 16 * off, n16, (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x, stride);
  __shared__ unsigned red;
  if (threadIdx.x == 0) red = 0;
  __syncthreads();
  atomicXor(&red, acc);
  __syncthreads();
  if (threadIdx.x == 0) out1[blockIdx.x] = red;
}

// Kernel 2: FC2's bytes (independent of kernel 1), the wait, one load of kernel 1's output, a store.
__global__ void __launch_bounds__(kThreads, 4) k_phase2(const int* ids, const char* p, unsigned long long n16,
                                                     const unsigned* out1, int n1, unsigned* out2) {
  const unsigned long long off = routed_offset(ids);
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned acc = read_stream(p + 16 * off, n16, (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x, stride);
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0) out2[blockIdx.x] = out1[blockIdx.x % n1] ^ (acc == kNeverProduced ? 1u : 0u);
}

struct GridBarrier {
  unsigned count;
  unsigned generation;
};

// One launch: all bytes, a grid barrier whose last arriver resets the count (so replays need no memset),
// then a load of another CTA's word and a store.
__global__ void __launch_bounds__(kThreads, 4) k_one(const int* ids, const char* p, unsigned long long n16, unsigned* out1,
                                                  unsigned* out2, GridBarrier* bar) {
  const unsigned long long off = routed_offset(ids);
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned acc = read_stream(p + 16 * off, n16, (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x, stride);
  if (threadIdx.x == 0) out1[blockIdx.x] = acc == kNeverProduced ? 1u : 0u;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned gen;
    asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(gen) : "l"(&bar->generation) : "memory");
    __threadfence();
    if (atomicAdd(&bar->count, 1u) == gridDim.x - 1) {
      bar->count = 0;
      __threadfence();
      atomicAdd(&bar->generation, 1u);
    } else {
      unsigned now;
      do {
        asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(now) : "l"(&bar->generation) : "memory");
      } while (now == gen);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) out2[blockIdx.x] = out1[(blockIdx.x + 1) % gridDim.x];
}

// The decode family's arithmetic on the runs read_stream would read (slice+alu): each 16-byte run goes
// through the MXFP4 loop's operations, four words decoded (fp4_decode_word) into four k16 MMA steps
// against activation pieces held in registers and each 32-wide block's MMA result scaled by its e8m0
// scale in fp32 (block_scales, fed from the run's last word so the conversion stays in the loop), about
// as many instructions per run and lane as FC1's and FC2's loops issue (v16, v22). No activation or scale
// loads. warp_first: the first run of the calling thread's warp; the loop is warp-uniform (MMAs need the
// whole warp) and lanes past the end multiply zeros. x_piece: the activation pieces (bf16x2). Returns
// kNeverProduced only if the accumulators hit a value the data never gives, so nothing is dropped.
__device__ __forceinline__ unsigned decode_stream(const char* p, unsigned long long n16, unsigned long long warp_first,
                                                  unsigned long long stride, u32 x_piece) {
  const unsigned lane = threadIdx.x & 31;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (unsigned long long i = warp_first; i < n16; i += 4 * stride) {
    u32x4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const unsigned long long k = i + u * stride + lane;
      v[u] = k < n16 ? ld_stream_16(p + 16 * k) : u32x4{0u, 0u, 0u, 0u};
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const u32 words[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
#pragma unroll
      for (int block = 0; block < 2; ++block) {
        float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int st = 2 * block; st < 2 * block + 2; ++st) {
          u32 a[4];
          fp4_decode_word(words[st], a);
          mma_bf16_16816(d, a, x_piece, x_piece);
        }
        float sg, sg8;
        block_scales<false>(u32x2{v[u].w, 0u}, block, sg, sg8);
        acc[0] = fmaf(d[0], sg, acc[0]);
        acc[2] = fmaf(d[2], sg8, acc[2]);
      }
    }
  }
  return acc[0] + acc[2] == 1234.5f ? kNeverProduced : 0u;
}

// slice+sum, slice/N and slice+alu, kernel 1: all bytes (read, or decoded and multiplied with kDecode),
// then the CTA's partial row of `outputs` floats. Its CTAs of kSliceThreads threads, kMinBlocks per SM,
// leave that many partial rows per SM (one at 1024 threads).
template <int kSliceThreads, int kMinBlocks, bool kDecode = false>
__global__ void __launch_bounds__(kSliceThreads, kMinBlocks) k_slice(const int* ids, const char* p,
                                                                     unsigned long long n16, float* partial,
                                                                     int outputs) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const unsigned long long off = routed_offset(ids);
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  // The routing id (0) keeps the activation pieces, bf16x2 (1, 1), from being a compile-time constant.
  const unsigned acc = kDecode ? decode_stream(p + 16 * off, n16, first & ~31ull, stride, 0x3F803F80u ^ static_cast<u32>(off))
                               : read_stream(p + 16 * off, n16, first, stride);
  const float v = acc == kNeverProduced ? 1.f : 0.f;
  for (int i = threadIdx.x; i < outputs; i += blockDim.x) partial[(size_t)blockIdx.x * outputs + i] = v + i;
}

// slice+sum, kernel 2: 32 outputs per CTA; warp w sums rows w, w + 16, ... for its lane's output, then the
// 16 warp sums are added in warp order (a fixed order: the result does not depend on timing).
__global__ void __launch_bounds__(kThreads, 4) k_slice_sum(const float* partial, int rows, int outputs, float* out) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  __shared__ float sums[kThreads / 32][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int o = blockIdx.x * 32 + lane;
  float acc = 0.f;
  if (o < outputs)
    for (int r = warp; r < rows; r += kThreads / 32) acc += partial[(size_t)r * outputs + o];
  sums[warp][lane] = acc;
  __syncthreads();
  if (warp == 0) {
    float total = 0.f;
    for (int w = 0; w < kThreads / 32; ++w) total += sums[w][lane];
    if (o < outputs) out[o] = total;
  }
}

// The batched sum: 32 outputs per CTA of kSumWarps warps; warp w takes a contiguous block of at most
// kRowsPerWarp rows and issues all their loads before adding them in row order (one L2 round trip per
// warp); the warp sums are then added in warp order (fixed: bit-identical from run to run).
template <int kSumWarps, int kRowsPerWarp>
__global__ void __launch_bounds__(kSumWarps * 32) k_slice_sum_batched(const float* partial, int rows, int outputs,
                                                                      float* out) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  __shared__ float sums[kSumWarps][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int o = blockIdx.x * 32 + lane;
  const int r0 = warp * kRowsPerWarp, r1 = min(rows, r0 + kRowsPerWarp);
  float v[kRowsPerWarp];
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j)
    v[j] = r0 + j < r1 && o < outputs ? __ldcg(partial + (size_t)(r0 + j) * outputs + o) : 0.f;
  float acc = 0.f;
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) acc += v[j];
  sums[warp][lane] = acc;
  __syncthreads();
  if (warp == 0) {
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < kSumWarps; ++w) total += sums[w][lane];
    if (o < outputs) out[o] = total;
  }
}

// A batched sum's shape, named once: kWarps warps per CTA, each over at most kRows partial rows.
template <int kWarps, int kRows>
struct SumShape {
  static constexpr int warps = kWarps, rows = kRows;
  static constexpr auto kernel = k_slice_sum_batched<kWarps, kRows>;
};

struct Case {
  std::string name;
  size_t fc1, fc2;  // bytes
  int outputs;      // H x M: the layer's output values
};

}  // namespace

int main(int argc, char** argv) {
  int replays = 40;
  std::vector<Case> cases;
  if (argc >= 5) {
    cases.push_back({argv[1], std::strtoull(argv[2], nullptr, 10), std::strtoull(argv[3], nullptr, 10), std::atoi(argv[4])});
    if (argc >= 6) replays = std::atoi(argv[5]);
  } else if (argc > 1) {
    std::fprintf(stderr, "usage: %s [NAME FC1_BYTES FC2_BYTES OUTPUTS [REPLAYS]]\n", argv[0]);
    return 2;
  } else {
    // Prepared FP4 + scale bytes per expert (docs/PERFORMANCE.md "Floors") times the distinct experts
    // the bench's routing touches.
    cases = {{"gpt-oss-120b M=1 (4 experts)", 4 * 8812800ull, 4 * 4406400ull, 2880},
             {"gpt-oss-120b M=2 (7 experts)", 7 * 8812800ull, 7 * 4406400ull, 2 * 2880},
             {"qwen3-30b-a3b M=1 (8 experts)", 8 * 1769472ull, 8 * 884736ull, 2048},
             {"almost no bytes (110 KB)", 73728ull, 36864ull, 256}};
  }
  Device dev;
  CHECK(cudaDeviceGetAttribute(&dev.sms, cudaDevAttrMultiProcessorCount, 0));
  int l2 = 0;
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  dev.l2 = static_cast<size_t>(l2);
  size_t most = 0;
  for (const Case& c : cases) most = std::max(most, c.fc1 + c.fc2);
  const size_t flush_bytes = 2 * dev.l2;
  char *w, *flush;
  int* ids;
  unsigned *sink, *out1, *out2;
  GridBarrier* bar;
  CHECK(cudaMalloc(&w, most + 4096));
  CHECK(cudaMalloc(&flush, flush_bytes));
  CHECK(cudaMalloc(&ids, 4096));
  CHECK(cudaMalloc(&sink, 16));
  CHECK(cudaMalloc(&out1, 64 * 1024));
  CHECK(cudaMalloc(&out2, 64 * 1024));
  CHECK(cudaMalloc(&bar, sizeof(GridBarrier)));
  int most_outputs = 0;
  for (const Case& c : cases) most_outputs = std::max(most_outputs, c.outputs);
  float *partial, *out;
  CHECK(cudaMalloc(&partial, sizeof(float) * 4 * dev.sms * (size_t)most_outputs));
  CHECK(cudaMalloc(&out, sizeof(float) * (size_t)most_outputs));
  CHECK(cudaMemset(w, 1, most + 4096));
  CHECK(cudaMemset(flush, 1, flush_bytes));
  CHECK(cudaMemset(ids, 0, 4096));
  CHECK(cudaMemset(bar, 0, sizeof(GridBarrier)));
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_one, kThreads, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const unsigned long long flush16 = flush_bytes / 16;
  const int full = 4 * dev.sms, half = 2 * dev.sms;
  const int coop = std::min(full, per_sm * dev.sms);
  std::printf("layer floors on %d SMs, L2 %.1f MB flushed by a read of %.1f MB before each of %d replays (median, us)\n",
              dev.sms, dev.l2 / 1e6, flush_bytes / 1e6, replays);
  std::printf("%-32s %9s %9s %9s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s\n", "case", "MB", "read",
              "ids+read", "2k-serial", "2k-overlap", "1k-barrier", "slice+sum", "slice/4sm", "slice/2sm", "slice/1sm", "1sm/w8",
              "1sm/w4", "rows/1sm", "slice+alu", "alu-rows");
  for (const Case& c : cases) {
    const unsigned long long n1 = c.fc1 / 16, n2 = c.fc2 / 16, nall = (c.fc1 + c.fc2) / 16;
    const char* w2 = w + c.fc1;
    const float t_read = time_us(s, flush, flush16, sink, dev.sms, replays, [&] { k_read<<<full, kThreads, 0, s>>>(w, nall, sink); });
    const float t_ids = time_us(s, flush, flush16, sink, dev.sms, replays, [&] { k_ids_read<<<full, kThreads, 0, s>>>(ids, w, nall, sink); });
    const float t_serial = time_us(s, flush, flush16, sink, dev.sms, replays, [&] {
      k_phase1<<<full, kThreads, 0, s>>>(ids, w, n1, out1);
      launch_ex(s, Launch::programmatic, full, kThreads, k_phase2, ids, w2, n2, (const unsigned*)out1, full, out2);
    });
    const float t_overlap = time_us(s, flush, flush16, sink, dev.sms, replays, [&] {
      k_phase1<<<half, kThreads, 0, s>>>(ids, w, n1, out1);
      launch_ex(s, Launch::programmatic, half, kThreads, k_phase2, ids, w2, n2, (const unsigned*)out1, half, out2);
    });
    const float t_one = time_us(s, flush, flush16, sink, dev.sms, replays,
                                [&] { launch_ex(s, Launch::cooperative, coop, kThreads, k_one, ids, (const char*)w, nall, out1, out2, bar); });
    const float t_slice = time_us(s, flush, flush16, sink, dev.sms, replays, [&] {
      k_slice<kThreads, 4><<<full, kThreads, 0, s>>>(ids, w, nall, partial, c.outputs);
      launch_ex(s, Launch::programmatic, (c.outputs + 31) / 32, kThreads, k_slice_sum, (const float*)partial, full, c.outputs, out);
    });
    // FC2 cut at FC1's slices with the batched sum: kernel 1 at `per_sm` CTAs per SM (4 at 512 threads, as
    // slice+sum; 2 or 1 at 1024), reading or (decode) decoding and multiplying its bytes, then the sum of
    // its rows in `shape`, which must cover them; with_sum false times kernel 1 alone.
    auto slice_batched = [&](int per_sm, auto shape, bool with_sum, bool decode) {
      using Shape = decltype(shape);
      const int rows = per_sm * dev.sms;
      if (decode && per_sm != 1) {
        std::fprintf(stderr, "the decoding kernel 1 runs one 1024-thread CTA per SM, asked for %d\n", per_sm);
        std::exit(1);
      }
      if (with_sum && Shape::warps * Shape::rows < rows) {
        std::fprintf(stderr, "the batched sum covers %d x %d partial rows, fewer than the %d of %d per SM on %d SMs\n",
                     Shape::warps, Shape::rows, rows, per_sm, dev.sms);
        std::exit(1);
      }
      return time_us(s, flush, flush16, sink, dev.sms, replays, [&] {
        if (decode) k_slice<1024, 1, true><<<rows, 1024, 0, s>>>(ids, w, nall, partial, c.outputs);
        else if (per_sm == 4) k_slice<512, 4><<<rows, 512, 0, s>>>(ids, w, nall, partial, c.outputs);
        else if (per_sm == 2) k_slice<1024, 2><<<rows, 1024, 0, s>>>(ids, w, nall, partial, c.outputs);
        else k_slice<1024, 1><<<rows, 1024, 0, s>>>(ids, w, nall, partial, c.outputs);
        if (with_sum)
          launch_ex(s, Launch::programmatic, (c.outputs + 31) / 32, Shape::warps * 32, Shape::kernel,
                    (const float*)partial, rows, c.outputs, out);
      });
    };
    // Shapes for up to 136-160 SMs: 4 rows per SM over 32 warps of 17, 2 over 16 of 17, 1 over 32 of 5, 8 of 17
    // or 4 of 34. slice+alu: one CTA per SM (decode takes 1024 threads, one per SM).
    const float t_b4 = slice_batched(4, SumShape<32, 17>{}, true, false),
                t_b2 = slice_batched(2, SumShape<16, 17>{}, true, false),
                t_b1 = slice_batched(1, SumShape<32, 5>{}, true, false),
                t_b1w8 = slice_batched(1, SumShape<8, 17>{}, true, false),
                t_b1w4 = slice_batched(1, SumShape<4, 34>{}, true, false),
                t_k1 = slice_batched(1, SumShape<32, 5>{}, false, false),
                t_alu = slice_batched(1, SumShape<32, 5>{}, true, true),
                t_alu_rows = slice_batched(1, SumShape<32, 5>{}, false, true);
    CHECK(cudaGetLastError());
    std::printf("%-32s %9.2f %9.1f %9.1f %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f\n",
                c.name.c_str(), (c.fc1 + c.fc2) / 1e6, t_read, t_ids, t_serial, t_overlap, t_one, t_slice, t_b4, t_b2,
                t_b1, t_b1w8, t_b1w4, t_k1, t_alu, t_alu_rows);
  }
  CHECK(cudaDeviceSynchronize());
  return 0;
}
