// Fault classes of files a user hands moejit (docs/RELIABILITY.md): deeply nested JSON, files that are not
// regular files, safetensors headers above the format's cap and data sections with gaps or trailing
// bytes, geometry beyond the bounds the kernels index with 32-bit integers, and `run --output` naming
// an input. Each case is the regression test of one row of that table.
#include "catch_compat.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_process.hpp"
#include "moejit/error.hpp"
#include "moejit/generator.hpp"
#include "moejit/host_layer.hpp"
#include "moejit/model_config.hpp"
#include "moejit/planner.hpp"
#include "moejit/safetensors.hpp"
#include "reference/json_limits.hpp"

using namespace moejit;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

moejit_test::Sandbox& sandbox() {
  static moejit_test::Sandbox s;
  return s;
}

std::string scratch(const std::string& name) { return sandbox().dir + "/" + name; }

// A reader that blocks would hang the test binary; SIGALRM ends it with a clear failure instead.
struct Watchdog {
  explicit Watchdog(unsigned seconds) { ::alarm(seconds); }
  ~Watchdog() { ::alarm(0); }
};

std::string nested(int depth) { return std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']'); }

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// 8-byte little-endian length, the header text, then data_bytes bytes.
std::vector<uint8_t> raw(const std::string& header, size_t data_bytes, uint64_t declared) {
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(declared >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + data_bytes, 0x3C);
  return out;
}
std::vector<uint8_t> raw(const std::string& header, size_t data_bytes = 0) { return raw(header, data_bytes, header.size()); }

LayerSpec small_spec() {
  LayerSpec s;
  s.format = ScaleFormat::nvfp4;
  s.activation = Activation::silu;
  s.experts = 4;
  s.hidden = 64;
  s.intermediate = 32;
  s.top_k = 2;
  return s;
}

}  // namespace

TEST_CASE("json nesting: the depth scan counts arrays and objects outside strings only", "[reliability][json]") {
  using detail::json_depth_problem;
  CHECK(json_depth_problem(nested(64)).empty());
  CHECK_THAT(json_depth_problem(nested(65)), Contains("deeper than 64"));
  CHECK(json_depth_problem(R"({"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["})").empty());
  CHECK(json_depth_problem(R"({"a": "\"[[[", "b": [1, {"c": "\\"}]})", 3).empty());
  CHECK_FALSE(json_depth_problem(R"({"a": "\\", "b": [[1]]})", 2).empty());  // an escaped backslash ends no string early
  CHECK(json_depth_problem("]]]]}}}}" + nested(3), 3).empty());             // stray closers never go below zero
  CHECK(json_depth_problem("not json at all").empty());                    // left for the parser to reject
}

TEST_CASE("json nesting: a deeply nested model config or safetensors header is an error, not a stack overflow",
          "[reliability][json]") {
  // 200,000 levels: far past any stack if something recursed per level.
  const std::string deep = nested(200000);
  CHECK_THROWS_WITH(parse_model_config(deep, "deep.json"), Contains("deep.json") && Contains("deeper than 64"));
  CHECK_THROWS_WITH(parse_model_config(R"({"name": )" + deep + "}", "deep-field.json"), Contains("deeper than 64"));
  CHECK_THROWS_WITH(parse_safetensors(raw(R"({"__metadata__": )" + deep + "}"), "deep"),
                    Contains("header nests") && Contains("deeper than 64"));
  const std::string path = scratch("deep.safetensors");
  write_bytes(path, raw(R"({"t": )" + deep + "}"));
  CHECK_THROWS_WITH(read_safetensors(path), Contains(path) && Contains("deeper than 64"));
  const std::string cfg = scratch("deep-config.json");
  std::ofstream(cfg) << deep;
  CHECK_THROWS_WITH(load_model_config(cfg), Contains(cfg) && Contains("deeper than 64"));
}

TEST_CASE("a number no double holds in a model config is a moejit::Error (found by fuzz_model_config)",
          "[reliability][json]") {
  // nlohmann reports it as out_of_range, not parse_error; the reader used to let it escape as a
  // foreign exception type.
  CHECK_THROWS_AS(parse_model_config("2.2e2222", "overflow.json"), Error);
  CHECK_THROWS_WITH(parse_model_config(R"({"name": "x", "swiglu_alpha": 1e999})", "overflow.json"),
                    Contains("overflow.json: not valid JSON") && Contains("number overflow"));
}

TEST_CASE("files that are not regular files (FIFO, directory) are refused without blocking", "[reliability][fifo]") {
  Watchdog watchdog(60);
  const std::string fifo = scratch("layer.fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(read_safetensors(fifo), Contains(fifo) && Contains("is a FIFO, not a regular file"));
  CHECK_THROWS_WITH(read_layer_file(fifo), Contains("FIFO"));
  CHECK_THROWS_WITH(read_input_file(fifo), Contains("FIFO"));
  CHECK_THROWS_WITH(load_model_config(fifo), Contains(fifo) && Contains("FIFO"));
  CHECK_THROWS_WITH(read_safetensors(sandbox().dir), Contains("directory, not a regular file"));
  // A symlink a user names is followed (to a regular file it is fine; to a FIFO it is the FIFO).
  const std::string link = scratch("fifo-link.safetensors");
  fs::create_symlink(fifo, link);
  CHECK_THROWS_WITH(read_safetensors(link), Contains("FIFO"));
  // The CLI's run and validate refuse it the same way (and exit).
  const auto r = moejit_test::run_cli({"validate", "--layer", fifo});
  INFO(r.out);
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, Contains("FIFO"));
}

TEST_CASE("safetensors: a header above the format's 100 MB cap is refused before it is read", "[reliability][safetensors]") {
  // A sparse 300 MB file whose header length claims 200 MB: refused from the length field alone.
  const std::string path = scratch("huge-header.safetensors");
  {
    const uint64_t n = 200'000'000;
    std::vector<uint8_t> head(8);
    for (int i = 0; i < 8; ++i) head[i] = static_cast<uint8_t>(n >> (8 * i));
    write_bytes(path, head);
    fs::resize_file(path, 300'000'000);
  }
  CHECK_THROWS_WITH(read_safetensors(path), Contains("header length 200000000 exceeds the safetensors limit of 100000000"));
  CHECK_THROWS_WITH(parse_safetensors(raw("{}", 0, 100'000'001), "buf"), Contains("exceeds the safetensors limit"));
  fs::remove(path);
}

TEST_CASE("safetensors: tensors must fill the data section exactly (no gaps, no overlaps, no trailing bytes)",
          "[reliability][safetensors]") {
  const std::string a = R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]})";
  CHECK_NOTHROW(parse_safetensors(raw("{" + a + "}", 4)));
  // A gap between two tensors, and a gap before the first.
  CHECK_THROWS_WITH(parse_safetensors(raw("{" + a + R"(,"b":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}})", 8)),
                    Contains("tensor 'b' starts at byte 6") && Contains("tensor 'a' ends at byte 4") &&
                        Contains("without gaps"));
  CHECK_THROWS_WITH(parse_safetensors(raw(R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4)),
                    Contains("no tensor starts at byte 0"));
  // Trailing bytes after the last tensor.
  CHECK_THROWS_WITH(parse_safetensors(raw("{" + a + "}", 5)),
                    Contains("end at byte 4 but the data section has 5 bytes") && Contains("no trailing bytes"));
  // An empty tensor must sit where the data reached (the reference implementation's rule).
  CHECK_NOTHROW(parse_safetensors(raw("{" + a + R"(,"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})", 4)));
  CHECK_THROWS_WITH(parse_safetensors(raw("{" + a + R"(,"e":{"dtype":"F32","shape":[0],"data_offsets":[2,2]}})", 4)),
                    Contains("overlapping"));

  // The issue's case: a header length a few bytes short of the (space-padded) header still parses as
  // JSON, so every tensor would shift by those bytes. Refused now, with a hint at the length field.
  SafetensorsFile f;
  f.tensors["t"].dtype = "U8";
  f.tensors["t"].shape = {4};
  f.tensors["t"].data = {1, 2, 3, 4};
  std::vector<uint8_t> bytes = serialize_safetensors(f);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<size_t>(i)];
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(n));
  const std::string padded = header.substr(0, header.find_last_not_of(' ') + 1) + "   ";
  std::vector<uint8_t> good = raw(padded), shifted = raw(padded, 0, padded.size() - 3);
  good.insert(good.end(), {1, 2, 3, 4});
  shifted.insert(shifted.end(), {1, 2, 3, 4});
  CHECK(parse_safetensors(good).tensors.at("t").data == std::vector<uint8_t>{1, 2, 3, 4});
  CHECK_THROWS_WITH(parse_safetensors(shifted, "shifted"),
                    Contains("data section has 7 bytes") && Contains("header length"));
}

TEST_CASE("geometry bounds are checked where a layer spec is validated", "[reliability][bounds]") {
  LayerSpec s = small_spec();
  CHECK_NOTHROW(s.validate());
  auto refused = [](LayerSpec t, const std::string& needle) {
    INFO(needle);
    CHECK_THROWS_WITH(t.validate(), Contains(needle));
  };
  LayerSpec t = s;
  t.experts = 4097;
  refused(t, "experts = 4097 exceeds 4096");
  t = s;
  t.hidden = 65536 + 16;
  refused(t, "hidden = 65552 exceeds 65536");
  t = s;
  t.intermediate = 65536 + 16;
  refused(t, "intermediate = 65552 exceeds 65536");
  t = s;
  t.top_k = 257;
  refused(t, "top_k = 257 exceeds 256");
  t = s;
  t.expert_begin = INT32_MAX - 2;
  refused(t, "expert_begin + experts");
  // Each size within its bound, the product of one expert's FC1 matrix not: 2 x 32768 x 65536 = 2^32.
  t = s;
  t.hidden = 65536;
  t.intermediate = 32768;
  refused(t, "FC1 rows x hidden");
  t.activation = Activation::relu2;  // one FC1 matrix of I rows: 2^31 elements, still one too many
  refused(t, "FC1 rows x hidden");
  t.intermediate = 32768 - 16;
  CHECK_NOTHROW(t.validate());

  // A model config beyond the bounds is refused when it is read (so plan never shows it).
  CHECK_THROWS_WITH(parse_model_config(R"({"name": "big", "format": "mxfp4", "activation": "silu", "experts": 8192,
                                          "hidden": 2048, "intermediate": 1024, "top_k": 8})",
                                       "big.json"),
                    Contains("big.json") && Contains("experts = 8192 exceeds 4096"));
  CHECK_NOTHROW(parse_model_config(R"({"name": "big-ep", "format": "mxfp4", "activation": "silu", "experts": 8192,
                                      "hidden": 2048, "intermediate": 1024, "top_k": 8, "ep": 4})",
                                   "big-ep.json"));

  // At the bounds, every key the planner picks is one the generator builds: plan never prints a key
  // prewarm rejects.
  std::vector<LayerSpec> corners;
  LayerSpec c = s;
  c.format = ScaleFormat::mxfp4;
  c.experts = 4096;
  c.hidden = 4096;
  c.intermediate = 1024;
  c.top_k = 256;
  corners.push_back(c);
  c = s;
  c.format = ScaleFormat::mxfp4;
  c.experts = 8;
  c.hidden = 65536;
  c.intermediate = 16384 - 32;
  c.top_k = 8;
  corners.push_back(c);
  c.hidden = 16384 - 32;
  c.intermediate = 65536;
  c.activation = Activation::relu2;
  corners.push_back(c);
  for (const LayerSpec& corner : corners) {
    REQUIRE_NOTHROW(corner.validate());
    for (Arch arch : {Arch::sm_90a, Arch::sm_120a}) {
      for (const KernelKey& k : keys_for_range(corner, arch, 512, 132)) {
        INFO(k.str());
        CHECK_NOTHROW(generate_source(KernelKey::parse(k.str())));
      }
    }
  }
}

TEST_CASE("validate and run: the same file rules, and run --output never overwrites an input", "[reliability][cli]") {
  const LayerSpec s = small_spec();
  const std::string layer = scratch("v-layer.safetensors"), input = scratch("v-input.safetensors");
  write_layer_file(layer, make_random_layer(s, 3));
  write_input_file(input, make_random_inputs(s, 5, 4));
  const auto input_before = fs::file_size(input);

  auto r = moejit_test::run_cli({"validate", "--layer", layer, "--input", input, "--config", "qwen3-30b-a3b"});
  INFO(r.out);
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, Contains("is not a layer of --config qwen3-30b-a3b") && Contains("experts 4 (config: 128)"));
  r = moejit_test::run_cli({"validate", "--layer", layer, "--input", input, "--output", scratch("new.safetensors")});
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("valid: layer") && Contains("valid: input") && Contains("M = 5"));

  // The output named as an input: by the same path, another spelling, a symlink and a hard link.
  const std::string link = scratch("v-link.safetensors"), hard = scratch("v-hard.safetensors");
  fs::create_symlink(input, link);
  fs::create_hard_link(input, hard);
  for (const std::string& out : {input, sandbox().dir + "/./v-input.safetensors", link, hard}) {
    for (const char* cmd : {"run", "validate"}) {
      r = moejit_test::run_cli({cmd, "--layer", layer, "--input", input, "--output", out});
      INFO(cmd << " --output " << out << "\n" << r.out);
      CHECK(r.rc == 2);
      CHECK_THAT(r.out, Contains("is the same file as --input") && Contains("refusing to overwrite an input"));
    }
  }
  r = moejit_test::run_cli({"run", "--layer", layer, "--input", input, "--output", layer});
  CHECK_THAT(r.out, Contains("is the same file as --layer"));
  // An output path that exists and is not a regular file: writing a FIFO would block.
  const std::string fifo = scratch("v-out.fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  r = moejit_test::run_cli({"run", "--layer", layer, "--input", input, "--output", fifo});
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, Contains("--output " + fifo + ": it is a FIFO, not a regular file"));
  CHECK(fs::file_size(input) == input_before);
  CHECK_NOTHROW(read_input_file(input));

  // A broken input file: validate and run report the same rule.
  std::vector<uint8_t> bytes;
  {
    std::ifstream in(input, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  bytes.push_back(0);  // one trailing byte
  const std::string trailing = scratch("v-trailing.safetensors");
  write_bytes(trailing, bytes);
  const auto v = moejit_test::run_cli({"validate", "--layer", layer, "--input", trailing});
  const auto run = moejit_test::run_cli({"run", "--layer", layer, "--input", trailing, "--output", scratch("o.safetensors")});
  INFO(v.out << "\n" << run.out);
  CHECK(v.rc == 2);
  CHECK(run.rc == 2);
  CHECK_THAT(v.out, Contains("no trailing bytes"));
  // "moejit validate: error: <message>" and "moejit run: error: <message>": one message.
  const auto message = [](const std::string& out) { return out.substr(out.find("error: ")); };
  CHECK(message(v.out) == message(run.out));
}
