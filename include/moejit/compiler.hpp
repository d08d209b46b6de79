#pragma once
// NVRTC front end: generated source -> cubin (or PTX) for one architecture.
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

// NVRTC version as "major.minor".
std::string nvrtc_version();
// Full NVRTC build identity, e.g. "Cuda compilation tools, release 13.0, V13.0.88; CL-36424714"
// (from the header NVRTC writes into PTX; computed once per process with a tiny compile). Patch
// releases share "major.minor" but may generate different code, so the cache hashes this too. Falls
// back to nvrtc_version() when the header cannot be read.
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
// when entry is not in the log, the maximum over all functions of the log.
PtxasResources parse_ptxas_resources(std::string_view log, std::string_view entry = {});
// The options compile_source uses for an architecture (hashed into cache entries).
std::vector<std::string> compile_options(Arch arch, bool want_ptx = false);
// Compiles; throws moejit::Error with the NVRTC log on failure. Thread-safe (NVRTC calls are
// serialized inside one process).
CompileOutput compile_source(const GeneratedSource& src, Arch arch, bool want_ptx = false);

}  // namespace moejit
