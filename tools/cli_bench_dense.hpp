#pragma once
// The bench's compute ceiling: the dense bf16 tensor-core rate of this GPU, measured in the same run
// as the layers (tools/cli_bench_dense.cpp says how and why with the vendor's GEMM).
#include <cuda.h>

#include <string>

namespace moejit::cli {

struct DenseCeiling {
  double tflops = 0;   // best median rate over the shapes and algorithms tried; 0 when not measured
  std::string what;    // how it was measured, or why it was not (library missing, no algorithm, ...)
};

// Times bf16 x bf16 -> bf16 GEMMs (fp32 accumulation) of n x n x n on stream s (3 n^2 bf16 + 64 MB of
// device memory while it runs). Never throws for a missing or failing GEMM library or a failed
// allocation or driver call: the bench then prints no compute ceiling and says why.
DenseCeiling measure_dense_bf16(CUstream s, int n = 8192);

}  // namespace moejit::cli
