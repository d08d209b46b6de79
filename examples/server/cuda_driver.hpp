#pragma once
// The few CUDA driver calls the server makes itself (streams, graph capture and replay, async copies),
// resolved from libcuda.so.1 with dlopen as moejit does, so the server links no CUDA library and starts
// (and explains itself) on a machine without a GPU. cuda.h is included for its types and for the
// versioned entry point names its macros give (cuStreamDestroy -> cuStreamDestroy_v2, ...).
#include <cuda.h>

#include <string>

namespace server {

struct Driver {
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuStreamCreate)(CUstream*, unsigned) = nullptr;
  CUresult (*cuStreamDestroy)(CUstream) = nullptr;
  CUresult (*cuStreamSynchronize)(CUstream) = nullptr;
  CUresult (*cuStreamBeginCapture)(CUstream, CUstreamCaptureMode) = nullptr;
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*) = nullptr;
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long) = nullptr;
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream) = nullptr;
  CUresult (*cuGraphExecDestroy)(CUgraphExec) = nullptr;
  CUresult (*cuGraphDestroy)(CUgraph) = nullptr;
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream) = nullptr;
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream) = nullptr;
};

// Loads the driver once (moejit's Runtime has initialized it by then). Throws std::runtime_error.
const Driver& driver();
// Throws std::runtime_error "<what>: <driver message>" unless r is CUDA_SUCCESS.
void check(CUresult r, const char* what);

}  // namespace server
