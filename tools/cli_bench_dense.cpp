// `moejit bench`'s compute ceiling: the dense bf16 rate of this GPU, from the vendor's GEMM
// (cuBLASLt), measured in the same run as the layers.
//
// Why the vendor's GEMM: a ceiling has to be the best any code reaches on this chip at this moment
// (clocks and power move between machines and runs), and for a dense bf16 product that is cuBLASLt's
// tuned kernels. A GEMM of our own would measure our GEMM, and any shortfall in it would flatter every
// ratio printed next to it. cuBLASLt is opened with dlopen (as the driver is), only by the bench: the
// library and the runtime never need it, and a machine without it prints no compute ceiling and says
// why. The header is needed at build time only for the types; without it the bench is built without
// this ceiling.
//
// Method: D = A^T B with A, B, D bf16 (n x n, random values in [-1, 1): realistic toggling, so the
// tensor cores draw realistic power), fp32 accumulation, the "TN" layout cuBLASLt is fastest in. The
// heuristic's first 4 algorithms each run 2 warm-up and 10 timed GEMMs (events around each, median);
// the best median is the ceiling. A GEMM of n = 8192 is 1.1 TFLOP (~1.5 ms on an H200), long enough
// that launch costs vanish.
#include "tools/cli_bench_dense.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "moejit/error.hpp"
#include "moejit/runtime.hpp"
#include "runtime/driver_api.hpp"

#if __has_include(<cublasLt.h>)
#include <cublasLt.h>
#define MOEJIT_HAVE_CUBLASLT_HEADER 1
#else
#define MOEJIT_HAVE_CUBLASLT_HEADER 0
#endif

namespace moejit::cli {

using detail::check;
using detail::driver;
using detail::report_cleanup;

#if MOEJIT_HAVE_CUBLASLT_HEADER
namespace {

// The cuBLASLt entry points the measurement needs, resolved from the shared library.
#define MOEJIT_CUBLASLT_FUNCTIONS(X)                                                                          \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetStatusString) X(cublasLtMatmulDescCreate)               \
  X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)             \
  X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

struct CublasLt {
#define MOEJIT_DECLARE(name) decltype(&::name) name = nullptr;
  MOEJIT_CUBLASLT_FUNCTIONS(MOEJIT_DECLARE)
#undef MOEJIT_DECLARE
};

// Failures of the GEMM library: the bench reports them instead of failing.
struct LtFailure {
  std::string what;
};

// Loads the library once per process (it stays loaded: the CUDA runtime inside it keeps state).
const CublasLt& cublaslt() {
  static const auto loaded = []() -> std::pair<CublasLt, std::string> {
    CublasLt lt;
    void* h = nullptr;
    std::string tried;
    for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}) {
      h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (h) break;
      const char* e = dlerror();
      tried += fmt::format("{}{}: {}", tried.empty() ? "" : "; ", name, e ? e : "not found");
    }
    if (!h) return {lt, "cannot load cuBLASLt (" + tried + ")"};
#define MOEJIT_RESOLVE(name)                                                     \
  lt.name = reinterpret_cast<decltype(&::name)>(dlsym(h, #name));                \
  if (!lt.name) return {lt, fmt::format("cuBLASLt lacks {}", #name)};
    MOEJIT_CUBLASLT_FUNCTIONS(MOEJIT_RESOLVE)
#undef MOEJIT_RESOLVE
    return {lt, ""};
  }();
  if (!loaded.second.empty()) throw LtFailure{loaded.second};
  return loaded.first;
}

void lt_check(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  const char* name = cublaslt().cublasLtGetStatusString(st);
  throw LtFailure{fmt::format("{}: {}", what, name ? name : "unknown cuBLASLt status")};
}

// lt_check's counterpart for destructors: a failed release is reported on stderr the way
// report_cleanup reports the driver's, and otherwise ignored.
void lt_cleanup(const CublasLt& lt, cublasStatus_t st, const char* what) noexcept {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  const char* name = lt.cublasLtGetStatusString(st);
  std::fprintf(stderr, "moejit: %s failed during cleanup: %s\n", what, name ? name : "unknown cuBLASLt status");
}

// Owns cuBLASLt objects for one measurement; releases them in reverse order of creation.
struct LtObjects {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtObjects() {
    const CublasLt& lt = cublaslt();
    if (pref) lt_cleanup(lt, lt.cublasLtMatmulPreferenceDestroy(pref), "cublasLtMatmulPreferenceDestroy");
    if (d) lt_cleanup(lt, lt.cublasLtMatrixLayoutDestroy(d), "cublasLtMatrixLayoutDestroy(D)");
    if (b) lt_cleanup(lt, lt.cublasLtMatrixLayoutDestroy(b), "cublasLtMatrixLayoutDestroy(B)");
    if (a) lt_cleanup(lt, lt.cublasLtMatrixLayoutDestroy(a), "cublasLtMatrixLayoutDestroy(A)");
    if (op) lt_cleanup(lt, lt.cublasLtMatmulDescDestroy(op), "cublasLtMatmulDescDestroy");
    if (handle) lt_cleanup(lt, lt.cublasLtDestroy(handle), "cublasLtDestroy");
  }
};

// Random bf16 values in [-1, 1) (the top half of a float), from a fixed LCG.
std::vector<uint16_t> random_bf16(size_t count) {
  std::vector<uint16_t> v(count);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (auto& e : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const float f = static_cast<float>(static_cast<int32_t>(state >> 32)) * (1.0f / 2147483648.0f);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    e = static_cast<uint16_t>(bits >> 16);
  }
  return v;
}

double median_ms(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (static_cast<double>(v[n / 2 - 1]) + v[n / 2]);
}

DenseCeiling measure(CUstream s, int n) {
  const CublasLt& lt = cublaslt();
  const size_t elems = static_cast<size_t>(n) * n;
  const std::vector<uint16_t> host = random_bf16(elems);
  DeviceBuffer a(elems * 2), b(elems * 2), d(elems * 2);
  a.upload(host.data(), elems * 2);
  b.upload(host.data(), elems * 2);  // the same values: only their bit patterns matter here
  constexpr size_t kWorkspace = size_t{64} << 20;
  DeviceBuffer ws(kWorkspace);

  LtObjects o;
  lt_check(lt.cublasLtCreate(&o.handle), "cublasLtCreate");
  lt_check(lt.cublasLtMatmulDescCreate(&o.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  lt_check(lt.cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)),
           "cublasLtMatmulDescSetAttribute(TRANSA)");
  lt_check(lt.cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)),
           "cublasLtMatmulDescSetAttribute(TRANSB)");
  // Column-major: A stored K x M (used transposed), B K x N, D M x N; all n x n here.
  lt_check(lt.cublasLtMatrixLayoutCreate(&o.a, CUDA_R_16BF, n, n, n), "cublasLtMatrixLayoutCreate(A)");
  lt_check(lt.cublasLtMatrixLayoutCreate(&o.b, CUDA_R_16BF, n, n, n), "cublasLtMatrixLayoutCreate(B)");
  lt_check(lt.cublasLtMatrixLayoutCreate(&o.d, CUDA_R_16BF, n, n, n), "cublasLtMatrixLayoutCreate(D)");
  lt_check(lt.cublasLtMatmulPreferenceCreate(&o.pref), "cublasLtMatmulPreferenceCreate");
  const size_t ws_bytes = kWorkspace;
  lt_check(lt.cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                   sizeof(ws_bytes)),
           "cublasLtMatmulPreferenceSetAttribute(workspace)");
  constexpr int kAlgos = 4;
  cublasLtMatmulHeuristicResult_t found[kAlgos] = {};
  int returned = 0;
  lt_check(lt.cublasLtMatmulAlgoGetHeuristic(o.handle, o.op, o.a, o.b, o.d, o.d, o.pref, kAlgos, found, &returned),
           "cublasLtMatmulAlgoGetHeuristic");
  if (returned == 0) throw LtFailure{"cuBLASLt offers no algorithm for a bf16 GEMM here"};

  const float alpha = 1.f, beta = 0.f;
  CUevent start = nullptr, stop = nullptr;
  // Owns both events from here: a failed second create must not leak the first.
  struct Events {
    CUevent& a;
    CUevent& b;
    ~Events() {
      if (a) report_cleanup(driver().cuEventDestroy(a), "cuEventDestroy");
      if (b) report_cleanup(driver().cuEventDestroy(b), "cuEventDestroy");
    }
  } events{start, stop};
  check(driver().cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
  check(driver().cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
  const double flops = 2.0 * n * static_cast<double>(n) * n;
  double best_ms = 0;
  int best_algo = -1, ran = 0;
  for (int i = 0; i < returned; ++i) {
    if (found[i].state != CUBLAS_STATUS_SUCCESS || found[i].workspaceSize > kWorkspace) continue;
    auto gemm = [&] {
      lt_check(lt.cublasLtMatmul(o.handle, o.op, &alpha, reinterpret_cast<const void*>(a.ptr()), o.a,
                                 reinterpret_cast<const void*>(b.ptr()), o.b, &beta, reinterpret_cast<void*>(d.ptr()),
                                 o.d, reinterpret_cast<void*>(d.ptr()), o.d, &found[i].algo,
                                 reinterpret_cast<void*>(ws.ptr()), kWorkspace, s),
               "cublasLtMatmul");
    };
    for (int w = 0; w < 2; ++w) gemm();
    std::vector<float> ms;
    for (int r = 0; r < 10; ++r) {
      check(driver().cuEventRecord(start, s), "cuEventRecord");
      gemm();
      check(driver().cuEventRecord(stop, s), "cuEventRecord");
      check(driver().cuEventSynchronize(stop), "cuEventSynchronize(dense GEMM)");
      float t = 0;
      check(driver().cuEventElapsedTime(&t, start, stop), "cuEventElapsedTime");
      ms.push_back(t);
    }
    ++ran;
    const double m = median_ms(ms);
    if (best_algo < 0 || m < best_ms) best_ms = m, best_algo = i;
  }
  if (best_algo < 0) throw LtFailure{"none of cuBLASLt's algorithms fits its workspace"};
  DenseCeiling c;
  c.tflops = flops / (best_ms * 1e-3) / 1e12;
  c.what = fmt::format("cuBLASLt bf16 GEMM {0}x{0}x{0}, fp32 accumulation, best median of {1} algorithms", n, ran);
  return c;
}

}  // namespace

DenseCeiling measure_dense_bf16(CUstream s, int n) {
  try {
    return measure(s, n);
  } catch (const LtFailure& f) {
    return DenseCeiling{0, f.what};
  } catch (const Error& e) {  // e.g. no room for the three n x n matrices: the layers' rows still stand
    return DenseCeiling{0, e.what()};
  }
}

#else

DenseCeiling measure_dense_bf16(CUstream, int) {
  return DenseCeiling{0, "built without cublasLt.h (no CUDA math-library headers at build time)"};
}

#endif

}  // namespace moejit::cli
