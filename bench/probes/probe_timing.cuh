// What the standalone probes in this folder share: error checks, and timing as `moejit bench` times a
// forward (a CUDA graph of an L2 flush by a read of 2x the L2 size, a start event node, the kernels, a stop
// event node; replayed, median of the replays). CUDA runtime; built with nvcc, not part of moejit.
#pragma once
#include <cuda_runtime.h>

#include "../../templates/read_stream.cuh"  // the bench read floor's own loop

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

namespace probe {

constexpr int kThreads = 512;
// A folded word the all-0x01 data never produces: results are stored only when they equal it, so the
// loads behind them cannot be dropped and nothing is written in practice.
constexpr unsigned kNeverProduced = 0x9E3779B9u;

__device__ __forceinline__ void sink_if(unsigned acc, unsigned* sink) {
  if (acc == kNeverProduced) *sink = acc;
}

// The flush (and the layer_floor probe's read column): reads n16 16-byte words of p, four in flight per thread.
__global__ void __launch_bounds__(kThreads, 4) k_read(const char* p, unsigned long long n16, unsigned* sink) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  sink_if(read_stream(p, n16, (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x, stride), sink);
}

struct Device {
  int sms = 0;
  size_t l2 = 0;
};

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times `body` as the bench times a forward: flush, start event, body, stop event, all in one graph.
template <class Body>
float time_us(cudaStream_t s, const char* flush, unsigned long long flush16, unsigned* sink, int sms, int replays,
              Body&& body) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  k_read<<<4 * sms, kThreads, 0, s>>>(flush, flush16, sink);
  CHECK(cudaEventRecordWithFlags(a, s, cudaEventRecordExternal));
  body();
  CHECK(cudaEventRecordWithFlags(b, s, cudaEventRecordExternal));
  CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t ge;
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  std::vector<float> us;
  for (int r = 0; r < replays + 1; ++r) {
    CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaStreamSynchronize(s));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    if (r > 0) us.push_back(ms * 1000.f);
  }
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return median(us);
}

// Launches kernel k with one launch attribute: programmatic (a dependent of the previous kernel, PDL) or
// cooperative (its grid co-resident).
enum class Launch { programmatic, cooperative };

template <class... Params, class... Args>
void launch_ex(cudaStream_t s, Launch how, int blocks, int threads, void (*k)(Params...), Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(threads);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  if (how == Launch::programmatic) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
  } else {
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
  }
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&cfg, k, args...));
}

}  // namespace probe
