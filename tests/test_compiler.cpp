// NVRTC front end: cubins for every target architecture, PTX mode, error reporting, resource parsing.
// Runs without a GPU (NVRTC only).
#include "catch_compat.hpp"

#include <algorithm>
#include <cstring>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "moejit/compiler.hpp"
#include "moejit/error.hpp"
#include "moejit/generator.hpp"
#include "moejit/key.hpp"

using namespace moejit;

namespace {

// A small kernel with known shared memory (128 floats = 512 bytes) and no spills.
GeneratedSource small_kernel(const std::string& entry = "moejit_test_reverse") {
  GeneratedSource s;
  s.name = entry + ".cu";
  s.entry = entry;
  s.source = "extern \"C\" __global__ void " + entry +
             "(float* p, float scale) {\n"
             "  __shared__ float t[128];\n"
             "  t[threadIdx.x] = p[threadIdx.x] * scale;\n"
             "  __syncthreads();\n"
             "  p[threadIdx.x] = t[127 - threadIdx.x];\n"
             "}\n";
  return s;
}

bool is_cuda_elf(const std::vector<char>& b) {
  if (b.size() < 64 || std::memcmp(b.data(), "\x7f" "ELF", 4) != 0) return false;
  const unsigned machine = static_cast<unsigned char>(b[18]) | (static_cast<unsigned char>(b[19]) << 8);
  return machine == 190;  // EM_CUDA
}

std::string text(const std::vector<char>& b) { return std::string(b.begin(), b.end()); }

}  // namespace

TEST_CASE("nvrtc version strings", "[compiler]") {
  CHECK(std::regex_match(nvrtc_version(), std::regex(R"(\d+\.\d+)")));
  const std::string build = nvrtc_build_id();
  INFO(build);
  CHECK_FALSE(build.empty());
  // The build id names the release (e.g. "release 13.0, V13.0.88; CL-...") when NVRTC writes it.
  CHECK(build.find(nvrtc_version()) != std::string::npos);
  // It is what this NVRTC writes into the header of the PTX it generates ("// Cuda compilation tools,
  // <tools>" and "// Compiler Build ID: <build>", joined as "<tools>; <build>"), or, where the header
  // lacks both lines, the plain version.
  const std::string ptx = text(compile_source(small_kernel(), Arch::sm_90a, /*want_ptx=*/true).binary);
  const auto header_line = [&](const std::string& prefix) {
    std::smatch m;
    return std::regex_search(ptx, m, std::regex("(^|\n)" + prefix + "([^\r\n]*)")) ? m[2].str() : std::string();
  };
  const std::string tools = header_line("// Cuda compilation tools, "), id = header_line("// Compiler Build ID: ");
  INFO("PTX header: tools '" << tools << "', build '" << id << "'");
  if (tools.empty() && id.empty()) {
    CHECK(build == nvrtc_version());
  } else {
    CHECK(build == tools + "; " + id);
  }
}

TEST_CASE("compile options name the exact architecture and never fast math", "[compiler]") {
  const auto o90 = compile_options(Arch::sm_90a);
  CHECK(o90.front() == "--gpu-architecture=sm_90a");
  CHECK(compile_options(Arch::sm_100a).front() == "--gpu-architecture=sm_100a");
  CHECK(compile_options(Arch::sm_120a).front() == "--gpu-architecture=sm_120a");
  CHECK(compile_options(Arch::sm_90a, true).front() == "--gpu-architecture=compute_90a");
  for (const auto& o : o90) {
    CHECK(o.find("fast") == std::string::npos);
    CHECK(o != "-G");
  }
  CHECK(std::find(o90.begin(), o90.end(), "--ptxas-options=-v") != o90.end());
  CHECK(std::find(o90.begin(), o90.end(), "-std=c++17") != o90.end());
}

TEST_CASE("cubins for sm_90a, sm_100a and sm_120a", "[compiler]") {
  for (Arch arch : {Arch::sm_90a, Arch::sm_100a, Arch::sm_120a}) {
    DYNAMIC_SECTION(to_string(arch)) {
      const CompileOutput out = compile_source(small_kernel(), arch);
      CHECK(is_cuda_elf(out.binary));
      CHECK(out.options == compile_options(arch));
      CHECK(out.seconds > 0);
      INFO(out.log);
      CHECK(out.log.find("ptxas") != std::string::npos);
      CHECK(out.log.find(std::string("for '") + std::string(to_string(arch)) + "'") != std::string::npos);
      CHECK(out.registers > 0);
      CHECK(out.registers < 64);
      CHECK(out.shared_bytes == 512);
      CHECK(out.spill_bytes == 0);
    }
  }
}

TEST_CASE("the bench's read-floor kernel compiles for every architecture, without spills", "[compiler]") {
  const GeneratedSource src = read_floor_source();
  CHECK(src.entry == "moejit_read_floor");
  for (Arch arch : {Arch::sm_90a, Arch::sm_100a, Arch::sm_120a}) {
    DYNAMIC_SECTION(to_string(arch)) {
      const CompileOutput out = compile_source(src, arch);
      INFO(out.log);
      CHECK(is_cuda_elf(out.binary));
      CHECK(out.log.find(src.entry) != std::string::npos);
      // 512 threads per CTA, four CTAs per SM: the whole register file at <= 32 registers.
      CHECK(out.registers > 0);
      CHECK(out.registers <= 32);
      CHECK(out.spill_bytes == 0);
    }
  }
  // Its loads are the 16-byte streaming loads the decode kernels use.
  const std::string ptx = text(compile_source(src, Arch::sm_90a, /*want_ptx=*/true).binary);
  CHECK(ptx.find("ld.global.nc.L1::no_allocate.v4.u32") != std::string::npos);
}

TEST_CASE("PTX mode returns PTX text for the architecture", "[compiler]") {
  const CompileOutput out = compile_source(small_kernel(), Arch::sm_90a, /*want_ptx=*/true);
  const std::string ptx = text(out.binary);
  CHECK(ptx.find(".target sm_90a") != std::string::npos);
  CHECK(ptx.find(".entry moejit_test_reverse(") != std::string::npos);
  CHECK(ptx.find('\0') == std::string::npos);  // plain text
  CHECK(out.options.front() == "--gpu-architecture=compute_90a");
  CHECK(out.registers == -1);  // no ptxas ran
  const CompileOutput out120 = compile_source(small_kernel(), Arch::sm_120a, true);
  CHECK(text(out120.binary).find(".target sm_120a") != std::string::npos);
}

TEST_CASE("a syntax error throws moejit::Error carrying the NVRTC log", "[compiler]") {
  GeneratedSource bad = small_kernel("moejit_test_bad");
  bad.source = "extern \"C\" __global__ void moejit_test_bad(float* p) {\n  p[0] = 1.0f\n  undeclared_thing();\n}\n";
  try {
    compile_source(bad, Arch::sm_90a);
    FAIL("expected moejit::Error");
  } catch (const Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("moejit_test_bad.cu") != std::string::npos);      // file name from the log
    CHECK(msg.find("sm_90a") != std::string::npos);
    CHECK(msg.find("NVRTC_ERROR_COMPILATION") != std::string::npos);
    CHECK(msg.find("error") != std::string::npos);
    CHECK(msg.find("undeclared_thing") != std::string::npos);        // the diagnostic itself
  }
}

TEST_CASE("a source without its entry kernel is an error", "[compiler]") {
  GeneratedSource s = small_kernel("moejit_test_present");
  s.entry = "moejit_test_absent";
  CHECK_THROWS_WITH(compile_source(s, Arch::sm_90a), Catch::Contains("moejit_test_absent"));
  // A multi-kernel module names the common prefix of its kernels.
  GeneratedSource multi = small_kernel("moejit_test_mod_weights");
  multi.entry = "moejit_test_mod";
  CHECK(is_cuda_elf(compile_source(multi, Arch::sm_90a).binary));
}

TEST_CASE("embedded template headers are visible to NVRTC", "[compiler]") {
  const auto headers = template_headers();
  REQUIRE_FALSE(headers.empty());
  for (const auto& [name, content] : headers) {
    DYNAMIC_SECTION(name) {
      GeneratedSource s = small_kernel();
      s.source = "#include \"" + name + "\"\n" + s.source;
      const CompileOutput out = compile_source(s, Arch::sm_90a);
      CHECK(is_cuda_elf(out.binary));
    }
  }
}

TEST_CASE("generated route kernels compile for every architecture", "[compiler]") {
  for (Arch arch : {Arch::sm_90a, Arch::sm_100a, Arch::sm_120a}) {
    KernelKey k;
    k.kind = KernelKind::route;
    k.arch = arch;
    k.experts = 8;
    k = k.normalized();
    const GeneratedSource src = generate_source(k);
    CHECK(src.entry == k.entry_name());
    const CompileOutput out = compile_source(src, arch);
    CHECK(is_cuda_elf(out.binary));
    CHECK(out.registers > 0);
  }
}

TEST_CASE("ptxas resource lines are parsed per function", "[compiler]") {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'small' for 'sm_90a'\n"
      "ptxas info    : Function properties for small\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 10 registers, used 1 barriers, 256 bytes smem\n"
      "ptxas info    : Compiling entry function 'big' for 'sm_90a'\n"
      "ptxas info    : Function properties for big\n"
      "ptxas         .     96 bytes stack frame, 40 bytes spill stores, 24 bytes spill loads\n"
      "ptxas info    : Function properties for _Z6helperv\n"
      "ptxas         .     8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 49152 bytes smem, 400 bytes cmem[0]\n"
      "ptxas info    : Compiling entry function 'nosmem' for 'sm_90a'\n"
      "ptxas info    : Function properties for nosmem\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 6 registers, 352 bytes cmem[0]\n"
      "ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
      "insufficient register resources for the wgmma pipeline in the function 'big'\n";
  auto small = parse_ptxas_resources(log, "small");
  CHECK(small.registers == 10);
  CHECK_FALSE(small.wgmma_serialized);
  CHECK(small.shared_bytes == 256);
  CHECK(small.spill_bytes == 0);
  // "Used" after a callee's properties still belongs to the entry being compiled.
  auto big = parse_ptxas_resources(log, "big");
  CHECK(big.registers == 255);
  CHECK(big.shared_bytes == 49152);
  CHECK(big.spill_bytes == 64);
  CHECK(big.wgmma_serialized);  // the line names its function, wherever it appears in the log
  auto nosmem = parse_ptxas_resources(log, "nosmem");
  CHECK(nosmem.registers == 6);
  CHECK(nosmem.shared_bytes == 0);
  auto all = parse_ptxas_resources(log);  // no entry: worst case over the module
  CHECK(all.registers == 255);
  CHECK(all.shared_bytes == 49152);
  CHECK(all.spill_bytes == 64);
  CHECK(all.wgmma_serialized);
  auto unknown = parse_ptxas_resources("", "x");
  CHECK(unknown.registers == -1);
  CHECK(unknown.shared_bytes == -1);
  CHECK(unknown.spill_bytes == -1);
}

TEST_CASE("a kernel that spills reports its spill bytes", "[compiler]") {
  // 64 live accumulators with a 32-register cap (maxnreg) must spill.
  GeneratedSource s;
  s.entry = "moejit_test_spill";
  s.name = "moejit_test_spill.cu";
  s.source =
      "extern \"C\" __global__ void __maxnreg__(32) moejit_test_spill(const float* in, float* out, int n) {\n"
      "  float acc[64];\n"
      "  #pragma unroll\n"
      "  for (int j = 0; j < 64; ++j) acc[j] = in[j * 7 + threadIdx.x];\n"
      "  for (int i = 0; i < n; ++i) {\n"
      "    #pragma unroll\n"
      "    for (int j = 0; j < 64; ++j) acc[j] = acc[j] * in[i + j] + acc[(j + 13) & 63];\n"
      "  }\n"
      "  float s = 0;\n"
      "  #pragma unroll\n"
      "  for (int j = 0; j < 64; ++j) s += acc[j] * (j + 1);\n"
      "  out[threadIdx.x] = s;\n"
      "}\n";
  const CompileOutput out = compile_source(s, Arch::sm_90a);
  INFO(out.log);
  CHECK(out.registers <= 32);
  CHECK(out.spill_bytes > 0);
}

TEST_CASE("concurrent compiles are safe", "[compiler]") {
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const auto out = compile_source(small_kernel("moejit_test_thread" + std::to_string(t)), Arch::sm_90a);
      ok[t] = is_cuda_elf(out.binary) ? 1 : 0;
    });
  }
  for (auto& th : threads) th.join();
  CHECK(ok == std::vector<int>(4, 1));
}
