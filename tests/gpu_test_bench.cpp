// `moejit bench` on the GPU: its ceilings (device copy bandwidth, dense bf16 rate) are measured, and its
// rows are consistent with them, for a decode-family and a batch-family M of a small layer.
#include "catch_compat.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_process.hpp"

namespace {

// A scratch directory removed at the end of the test.
struct ScratchDir {
  std::filesystem::path dir;
  ScratchDir() {
    std::string t = (std::filesystem::temp_directory_path() / "moejit-gpu-bench-XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    dir = t;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

bool cublaslt_loadable() {
  for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"})
    if (void* h = ::dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
      ::dlclose(h);
      return true;
    }
  return false;
}

}  // namespace

TEST_CASE("bench: ceilings measured in the same run, rows consistent with them", "[bench]") {
  ScratchDir scratch;
  const auto config = scratch.dir / "small.json";
  std::ofstream(config) << R"({"name": "bench-test-layer", "format": "nvfp4", "activation": "silu", "experts": 8,
    "hidden": 256, "intermediate": 256, "top_k": 2, "bias": false, "gate_up_order": "gate_up"})";
  const auto json_path = scratch.dir / "bench.json";
  // M = 1 runs the decode family, M = 300 (past every cutover) the batch family.
  const auto r = moejit_test::run_cli({"bench", "--config", config.string(), "--tokens", "1,300", "--replays", "5",
                                       "--json", json_path.string(), "--jobs", "4"});
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("copy bandwidth") && Catch::Contains("roofline"));
  nlohmann::json j;
  std::ifstream(json_path) >> j;
  const double copy = j.at("copy_tbps").get<double>();
  CHECK(copy > 0.5);  // any HBM GPU copies faster than 0.5 TB/s
  const bool dense = !j.at("dense_bf16_tflops").is_null();
  CHECK_FALSE(j.at("dense_bf16_method").get<std::string>().empty());
  // Where the GEMM library loads, the dense ceiling must have been measured.
  if (cublaslt_loadable()) {
    REQUIRE(dense);
    CHECK(j.at("dense_bf16_tflops").get<double>() > 50);
    CHECK_THAT(r.out, Catch::Contains("dense bf16") && Catch::Contains("TFLOP/s (cuBLASLt"));
  } else {
    CHECK_THAT(r.out, Catch::Contains("dense bf16: not measured"));
  }
  const auto& rows = j.at("rows");
  REQUIRE(rows.size() == 2);
  for (const auto& row : rows) {
    const int m = row.at("tokens").get<int>();
    INFO("M = " << m);
    CHECK((m == 1 || m == 300));
    CHECK(row.at("graph_matches_eager").get<bool>());
    const double us = row.at("us_median").get<double>();
    REQUIRE(us > 0);
    CHECK(row.at("us_min").get<double>() <= us);
    const double bytes = row.at("weight_bytes").get<double>();
    const int touched = row.at("experts_touched").get<int>();
    CHECK(touched >= 1);
    CHECK(touched <= (m == 1 ? 2 : 8));  // top-2 of one token; 600 pairs over 8 experts reach all of them
    if (m == 300) CHECK(touched == 8);
    CHECK(row.at("tbps").get<double>() == Approx(bytes / (us * 1e-6) / 1e12).epsilon(1e-9));
    CHECK(row.at("copy_fraction").get<double>() == Approx(row.at("tbps").get<double>() / copy).epsilon(1e-9));
    if (dense) {
      const double tflops = row.at("tflops").get<double>(), peak = j.at("dense_bf16_tflops").get<double>();
      CHECK(row.at("dense_fraction").get<double>() == Approx(tflops / peak).epsilon(1e-9));
      // The roofline's time is the larger of the two ceilings' times, so its fraction is at least each
      // of theirs, and a real layer cannot beat it by much (a pure read may run a little above copy).
      const double roof = row.at("roofline_fraction").get<double>();
      CHECK(roof >= row.at("copy_fraction").get<double>() * (1 - 1e-9));
      CHECK(roof >= tflops / peak * (1 - 1e-9));
      CHECK(roof > 0);
      CHECK(roof < 1.3);
    } else {
      CHECK(row.at("roofline_fraction").is_null());
    }
  }
}
