#pragma once
// NVRTC front end: generated source -> cubin (or PTX) for one architecture. Host-only; needs libnvrtc
// (linked), no GPU and no CUDA headers (generated sources include only the embedded templates).
#include <string>
#include <string_view>
#include <vector>

#include "moejit/generator.hpp"

namespace moejit {

struct CompileOutput {
  std::vector<char> binary;          // cubin (or PTX text when compiled with want_ptx)
  std::string log;                   // NVRTC program log (ptxas -v resource lines included)
  std::vector<std::string> options;  // options passed to NVRTC
  double seconds = 0;                // wall time of the compile
  int registers = -1;                // from ptxas info, -1 when unknown
  int shared_bytes = -1;             // static shared memory
  int spill_bytes = -1;              // spill stores + loads
  bool wgmma_serialized = false;     // ptxas serialized the entry's wgmmas (PtxasResources)
};

// NVRTC version as "major.minor" (e.g. "13.0"). Thread-safe; throws moejit::Error only when NVRTC
// itself fails to answer.
std::string nvrtc_version();
// Full NVRTC build identity, e.g. "Cuda compilation tools, release 13.0, V13.0.88; CL-36424714"
// (from the header NVRTC writes into PTX; computed once per process with a tiny compile). Patch
// releases share "major.minor" but may generate different code, so the cache hashes this too. Falls
// back to nvrtc_version() when the header cannot be read. Thread-safe; throws as nvrtc_version.
std::string nvrtc_build_id();

// Resource usage of one kernel as reported by `ptxas -v` in the NVRTC log.
struct PtxasResources {
  int registers = -1;     // -1 when unknown
  int shared_bytes = -1;  // static shared memory
  int spill_bytes = -1;   // spill stores + spill loads
  // ptxas reported that it serialized the function's wgmma.mma_async instructions (each waits for its own
  // completion: "Potential Performance Loss", C7510-C7519); sm_90a warpgroup-MMA kernels only.
  bool wgmma_serialized = false;
};
// Parses the ptxas info lines of an NVRTC log for the function named entry; with an empty entry, or
// when entry is not in the log, the maximum over all functions of the log; fields stay -1 (false)
// when the log does not report them. Pure, never throws.
PtxasResources parse_ptxas_resources(std::string_view log, std::string_view entry = {});
// The options compile_source uses for an architecture (hashed into cache entries): the arch
// (sm_XXa, or compute_XXa with want_ptx), -std=c++17, -default-device, -lineinfo, and ptxas -v for
// cubins. Pure.
std::vector<std::string> compile_options(Arch arch, bool want_ptx = false);
// Compiles src for arch (sm_90a, sm_100a, sm_120a) to a cubin, or PTX with want_ptx; fills the
// resource fields from ptxas' report for src.entry. Throws moejit::Error with the NVRTC log on
// failure. Thread-safe (NVRTC calls are serialized inside one process; compile in worker processes to
// scale, as `moejit prewarm` does). Takes about a second per kernel.
CompileOutput compile_source(const GeneratedSource& src, Arch arch, bool want_ptx = false);

}  // namespace moejit
