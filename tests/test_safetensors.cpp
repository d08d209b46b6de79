// safetensors container and the layer / input / output files of DESIGN §3: round trips, the golden
// files, and every malformed-file case giving a moejit::Error with a useful message.
#include <unistd.h>

#include "catch_compat.hpp"
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "golden_dir.hpp"
#include "layer_equal.hpp"
#include "moejit/codecs.hpp"
#include "moejit/error.hpp"
#include "moejit/host_layer.hpp"
#include "moejit/safetensors.hpp"

using namespace moejit;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

// A private scratch directory per test process, removed at exit.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("moejit_test_safetensors_" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};
const TempDir& tmp() {
  static TempDir t;
  return t;
}

// A raw file: 8-byte little-endian length, the header text as given, then the data bytes.
std::vector<uint8_t> raw(const std::string& header, size_t data_bytes = 0, uint64_t declared = UINT64_MAX) {
  const uint64_t n = declared == UINT64_MAX ? header.size() : declared;
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<uint8_t>(i * 7 + 1));
  return out;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Both entry points (buffer and file) must reject a malformed file with the same message.
void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  INFO("expecting an error containing: " << needle);
  CHECK_THROWS_WITH(parse_safetensors(bytes, "test"), Contains(needle));
  const std::string path = tmp().file("malformed.safetensors");
  write_bytes(path, bytes);
  CHECK_THROWS_WITH(read_safetensors(path), Contains(needle) && Contains(path));
}

Tensor tensor(const std::string& dtype, std::vector<int64_t> shape, size_t bytes) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  for (size_t i = 0; i < bytes; ++i) t.data.push_back(static_cast<uint8_t>(i * 31 + 3));
  return t;
}

using moejit_test::check_same_layer;

LayerSpec spec_of(ScaleFormat f, Activation a, GateUpOrder o, bool bias) {
  LayerSpec s;
  s.format = f;
  s.activation = a;
  s.gate_up_order = o;
  s.experts = 3;
  s.hidden = 64;
  s.intermediate = 32;
  s.top_k = 2;
  s.has_bias = bias;
  return s;
}

}  // namespace

// ------------------------------------------------------------------------------------ container

TEST_CASE("safetensors: serialize / parse / file round trip with every dtype", "[safetensors]") {
  SafetensorsFile f;
  const char* dtypes[] = {"U8", "I8", "U16", "I16", "BF16", "F16", "I32", "U32", "F32", "I64", "F64"};
  const size_t sizes[] = {1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8};
  for (int i = 0; i < 11; ++i) f.tensors[std::string("t_") + dtypes[i]] = tensor(dtypes[i], {2, 3}, 6 * sizes[i]);
  f.tensors["scalar"] = tensor("F32", {}, 4);  // rank 0: one element
  f.tensors["empty"] = tensor("U8", {0, 5}, 0);
  f.metadata = {{"format", "nvfp4"}, {"note", "a \"quoted\" value"}};

  const auto bytes = serialize_safetensors(f);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  CHECK((8 + n) % 8 == 0);  // the data section starts 8-byte aligned

  auto check = [&](const SafetensorsFile& g) {
    CHECK(g.metadata == f.metadata);
    REQUIRE(g.tensors.size() == f.tensors.size());
    for (const auto& [name, t] : f.tensors) {
      INFO(name);
      REQUIRE(g.tensors.count(name) == 1);
      CHECK(g.tensors.at(name).dtype == t.dtype);
      CHECK(g.tensors.at(name).shape == t.shape);
      CHECK(g.tensors.at(name).data == t.data);
    }
  };
  check(parse_safetensors(bytes));
  const std::string path = tmp().file("all_dtypes.safetensors");
  write_safetensors(path, f);
  check(read_safetensors(path));
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(on_disk == bytes);

  // No metadata: no __metadata__ entry at all.
  SafetensorsFile plain;
  plain.tensors["a"] = tensor("U8", {3}, 3);
  const auto pb = serialize_safetensors(plain);
  CHECK(std::string(pb.begin(), pb.end()).find("__metadata__") == std::string::npos);
  CHECK(parse_safetensors(pb).metadata.empty());
}

TEST_CASE("safetensors: files written by other tools (padding, any order) are read", "[safetensors]") {
  // Offsets in non-sorted order, trailing spaces in the header.
  const auto f = parse_safetensors(raw(R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},)"
                                       R"("a":{"dtype":"I16","shape":[1],"data_offsets":[0,2]}}   )",
                                       4));
  CHECK(f.tensors.at("a").data == std::vector<uint8_t>{1, 8});
  CHECK(f.tensors.at("b").data == std::vector<uint8_t>{15, 22});
  // Empty header object: a file with no tensors.
  CHECK(parse_safetensors(raw("{}")).tensors.empty());
}

TEST_CASE("safetensors: every malformed file is a clear error", "[safetensors]") {
  const std::string ok_tensor = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  CHECK_NOTHROW(parse_safetensors(raw("{" + ok_tensor + "}", 8)));

  // Shorter than the 8-byte length field.
  expect_error({}, "shorter than the 8-byte");
  expect_error({1, 2, 3}, "shorter than the 8-byte");
  // Header length past the end; absurd lengths (that would overflow 8 + n) are above the format's cap.
  expect_error(raw("{}", 0, 100), "runs past the end");
  expect_error(raw("{}", 0, UINT64_MAX - 3), "exceeds the safetensors limit");
  // Not JSON, or JSON that is not an object.
  expect_error(raw("{\"t\": [1, 2"), "not valid JSON");
  expect_error(raw("hello"), "not valid JSON");
  expect_error(raw("[1, 2, 3]"), "not a JSON object");
  // Unknown dtype.
  expect_error(raw(R"({"t":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}})", 2), "unknown dtype 'Q4'");
  // Shape * itemsize != the offsets' span.
  expect_error(raw(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "needs 12 bytes");
  expect_error(raw(R"({"t":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,4]}})", 8), "tensor 't'");
  // Offsets past the end of the data section.
  expect_error(raw(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 7), "past the end of the data section");
  expect_error(raw(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[100,101]}})", 4), "past the end");
  // begin > end.
  expect_error(raw(R"({"t":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})", 8), "begin 4 > end 2");
  // Overlapping tensors.
  expect_error(raw(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                   R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                   8),
               "overlapping");
  // __metadata__ must be an object of strings.
  expect_error(raw(R"({"__metadata__":{"format":"nvfp4","experts":8}})"), "__metadata__ field 'experts' is not a string");
  expect_error(raw(R"({"__metadata__":["nvfp4"]})"), "__metadata__ is not an object");
  // Broken tensor entries.
  expect_error(raw(R"({"t":5})"), "entry is not an object");
  expect_error(raw(R"({"t":{"shape":[1],"data_offsets":[0,1]}})", 1), "dtype");
  expect_error(raw(R"({"t":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1), "shape");
  expect_error(raw(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", 1), "data_offsets");
  expect_error(raw(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", 1), "data_offsets");
  expect_error(raw(R"({"t":{"dtype":"U8","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,1]}})", 1),
               "too large");

  CHECK_THROWS_WITH(read_safetensors(tmp().file("does_not_exist.safetensors")), Contains("cannot open"));

  // The writer refuses inconsistent tensors before touching the file.
  SafetensorsFile bad;
  bad.tensors["t"] = tensor("F32", {3}, 8);
  CHECK_THROWS_WITH(serialize_safetensors(bad), Contains("tensor 't'") && Contains("needs 12"));
  bad.tensors["t"] = tensor("F8", {1}, 1);
  CHECK_THROWS_WITH(write_safetensors(tmp().file("bad.safetensors"), bad), Contains("unknown dtype 'F8'"));
  CHECK_FALSE(fs::exists(tmp().file("bad.safetensors")));
  bad.tensors.clear();
  bad.tensors["__metadata__"] = tensor("U8", {1}, 1);
  CHECK_THROWS_WITH(serialize_safetensors(bad), Contains("__metadata__"));
}

// ------------------------------------------------------------------------------------ layer files

TEST_CASE("layer files: round trip of every variant", "[safetensors][layer]") {
  struct Case {
    LayerSpec s;
    const char* name;
  };
  std::vector<Case> cases;
  cases.push_back({spec_of(ScaleFormat::nvfp4, Activation::silu, GateUpOrder::gate_up, false), "nvfp4_silu"});
  {
    LayerSpec s = spec_of(ScaleFormat::mxfp4, Activation::swigluoai, GateUpOrder::interleaved, true);
    s.limit = 7.0f;
    s.swiglu_alpha = 1.702f;
    s.swiglu_beta = 0.5f;
    s.expert_begin = 6;
    cases.push_back({s, "mxfp4_swigluoai"});
  }
  cases.push_back({spec_of(ScaleFormat::nvfp4, Activation::relu2, GateUpOrder::gate_up, true), "nvfp4_relu2"});
  {
    LayerSpec s = spec_of(ScaleFormat::nvfp4, Activation::silu, GateUpOrder::up_gate, true);
    s.limit = 10.0f;
    cases.push_back({s, "nvfp4_silu_limit"});
  }
  cases.push_back({spec_of(ScaleFormat::mxfp4, Activation::gelu_tanh, GateUpOrder::interleaved, false), "mxfp4_gelu"});

  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const HostLayer L = make_random_layer(c.s, 3);
      const std::string path = tmp().file(std::string(c.name) + ".safetensors");
      write_layer_file(path, L);
      check_same_layer(read_layer_file(path), L);

      // The file uses the DESIGN §3 names and metadata.
      const SafetensorsFile f = read_safetensors(path);
      const bool relu2 = c.s.activation == Activation::relu2;
      const std::string fc1 = relu2 ? "w1" : "w13";
      CHECK(f.tensors.count(fc1) == 1);
      CHECK(f.tensors.count(relu2 ? "w13" : "w1") == 0);
      CHECK(f.tensors.at(fc1).dtype == "U8");
      CHECK(f.tensors.at(fc1).shape == std::vector<int64_t>{3, c.s.fc1_rows(), 32});
      CHECK(f.tensors.at(fc1 + "_scale").shape ==
            std::vector<int64_t>{3, c.s.fc1_rows(), 64 / scale_block(c.s.format)});
      CHECK(f.tensors.at("w2").shape == std::vector<int64_t>{3, 64, 16});
      CHECK(f.tensors.count(fc1 + "_global_scale") == (c.s.format == ScaleFormat::nvfp4 ? 1u : 0u));
      CHECK(f.tensors.count("w2_bias") == (c.s.has_bias ? 1u : 0u));
      if (c.s.has_bias) CHECK(f.tensors.at(fc1 + "_bias").dtype == "F32");
      CHECK(f.metadata.at("format") == std::string(to_string(c.s.format)));
      CHECK(f.metadata.at("activation") == std::string(to_string(c.s.activation)));
      CHECK(f.metadata.at("gate_up_order") == std::string(to_string(c.s.gate_up_order)));
      CHECK(f.metadata.at("experts") == "3");
      CHECK(f.metadata.at("hidden") == "64");
      CHECK(f.metadata.at("intermediate") == "32");
      CHECK(f.metadata.at("top_k") == "2");
      CHECK(f.metadata.count("swiglu_limit") == (c.s.limit ? 1u : 0u));
      if (c.s.activation == Activation::swigluoai) {
        CHECK(f.metadata.at("swiglu_alpha") == "1.702");
        CHECK(f.metadata.at("swiglu_limit") == "7");
        CHECK(f.metadata.at("expert_begin") == "6");
      }
    }
  }
}

TEST_CASE("layer files: the activation precision and a4's input scales round trip", "[safetensors][layer][precision]") {
  LayerSpec s = spec_of(ScaleFormat::nvfp4, Activation::silu, GateUpOrder::gate_up, false);
  HostLayer L = make_random_layer(s, 5);
  // a8: the metadata field only.
  L.spec.precision = ActPrecision::a8;
  const std::string a8 = tmp().file("a8.safetensors");
  write_layer_file(a8, L);
  check_same_layer(read_layer_file(a8), L);
  CHECK(read_safetensors(a8).metadata.at("precision") == "a8");
  CHECK(read_safetensors(a8).tensors.count("a1_gs") == 0);
  // a4: scalar ([1]) and per-expert ([E]) scales.
  L.spec.precision = ActPrecision::a4;
  for (const auto& [a1, a2] : {std::pair{std::vector<float>{672.f}, std::vector<float>{1344.f}},
                               std::pair{std::vector<float>{600.f, 700.f, 800.f}, std::vector<float>{1.f, 2.f, 3.f}}}) {
    L.a1_gs = a1;
    L.a2_gs = a2;
    const std::string path = tmp().file("a4.safetensors");
    write_layer_file(path, L);
    check_same_layer(read_layer_file(path), L);
    const SafetensorsFile f = read_safetensors(path);
    CHECK(f.metadata.at("precision") == "a4");
    CHECK(f.tensors.at("a1_gs").dtype == "F32");
    CHECK(f.tensors.at("a1_gs").shape == std::vector<int64_t>{static_cast<int64_t>(a1.size())});
  }
  // a16 files carry neither (and read as a16, as files written before the field existed do).
  L.spec.precision = ActPrecision::a16;
  L.a1_gs.clear();
  L.a2_gs.clear();
  const std::string a16 = tmp().file("a16.safetensors");
  write_layer_file(a16, L);
  CHECK(read_safetensors(a16).metadata.count("precision") == 0);
  CHECK(read_layer_file(a16).spec.precision == ActPrecision::a16);
  // Errors: an a4 file without its scales, scales in an a16 file, an unknown precision.
  SafetensorsFile f = read_safetensors(a16);
  f.metadata["precision"] = "a4";
  write_safetensors(a16, f);
  CHECK_THROWS_WITH(read_layer_file(a16), Contains("a1_gs"));
  f.metadata["precision"] = "a2";
  write_safetensors(a16, f);
  CHECK_THROWS_WITH(read_layer_file(a16), Contains("a2"));
  f.metadata.erase("precision");
  f.tensors["a1_gs"] = f.tensors.at("w2_global_scale");
  write_safetensors(a16, f);
  CHECK_THROWS_WITH(read_layer_file(a16), Contains("unexpected tensor 'a1_gs'"));
}

TEST_CASE("layer files: the golden layers read and re-write unchanged", "[safetensors][layer][golden]") {
  for (const char* name : moejit::test::kGoldenLayers) {
    DYNAMIC_SECTION(name) {
      const std::string dir = moejit::test::golden_dir() + "/" + name;
      const HostLayer L = read_layer_file(dir + "/layer.safetensors");
      CHECK_NOTHROW(L.validate());
      const std::string path = tmp().file(std::string("golden_") + name + ".safetensors");
      write_layer_file(path, L);
      check_same_layer(read_layer_file(path), L);
      // Tensor bytes are identical to the golden file's.
      const SafetensorsFile a = read_safetensors(dir + "/layer.safetensors"), b = read_safetensors(path);
      REQUIRE(a.tensors.size() == b.tensors.size());
      for (const auto& [tname, t] : a.tensors) CHECK(b.tensors.at(tname).data == t.data);

      const HostInputs in = read_input_file(dir + "/input.safetensors");
      CHECK(in.hidden == L.spec.hidden);
      CHECK(in.top_k == L.spec.top_k);
      int M = 0, H = 0;
      const auto out = read_output_file(dir + "/expected.safetensors", &M, &H);  // extra out_f32 ignored
      CHECK(M == in.tokens);
      CHECK(H == L.spec.hidden);
      CHECK(out.size() == static_cast<size_t>(M) * H);
    }
  }
  // Spot checks of the metadata the golden README lists.
  const HostLayer ep = read_layer_file(moejit::test::golden_dir() + "/mxfp4_swigluoai_bias_ep/layer.safetensors");
  CHECK(ep.spec.expert_begin == 2);
  CHECK(ep.spec.has_bias);
  CHECK(ep.spec.limit == 7.0f);
  CHECK(ep.spec.swiglu_alpha == 1.702f);
  const HostLayer r2 = read_layer_file(moejit::test::golden_dir() + "/nvfp4_relu2/layer.safetensors");
  CHECK(r2.spec.activation == Activation::relu2);
  CHECK(r2.w13.size() == 5u * 48 * 32);
  const HostLayer ug = read_layer_file(moejit::test::golden_dir() + "/nvfp4_silu_limit_upgate/layer.safetensors");
  CHECK(ug.spec.gate_up_order == GateUpOrder::up_gate);
  CHECK(ug.spec.limit == 10.0f);
}

TEST_CASE("layer files: errors name the tensor or field", "[safetensors][layer]") {
  const LayerSpec s = spec_of(ScaleFormat::nvfp4, Activation::silu, GateUpOrder::gate_up, true);
  const HostLayer L = make_random_layer(s, 4);
  const std::string good = tmp().file("good_layer.safetensors");
  write_layer_file(good, L);
  const SafetensorsFile base = read_safetensors(good);
  const std::string path = tmp().file("bad_layer.safetensors");
  auto expect_layer_error = [&](auto mutate, const std::string& needle) {
    SafetensorsFile f = base;
    mutate(f);
    write_safetensors(path, f);
    INFO("expecting: " << needle);
    CHECK_THROWS_WITH(read_layer_file(path), Contains(needle) && Contains(path));
  };
  expect_layer_error([](SafetensorsFile& f) { f.metadata.erase("format"); }, "field 'format' is missing");
  expect_layer_error([](SafetensorsFile& f) { f.metadata.erase("intermediate"); }, "'intermediate' is missing");
  expect_layer_error([](SafetensorsFile& f) { f.metadata["format"] = "fp4"; }, "nvfp4, mxfp4");
  expect_layer_error([](SafetensorsFile& f) { f.metadata["activation"] = "swish"; }, "activation");
  expect_layer_error([](SafetensorsFile& f) { f.metadata["gate_up_order"] = "gate-up"; }, "gate_up_order");
  expect_layer_error([](SafetensorsFile& f) { f.metadata["experts"] = "3x"; }, "'experts' = '3x' is not an integer");
  expect_layer_error([](SafetensorsFile& f) { f.metadata["top_k"] = ""; }, "'top_k'");
  expect_layer_error([](SafetensorsFile& f) { f.metadata["swiglu_limit"] = "seven"; }, "'swiglu_limit'");
  expect_layer_error([](SafetensorsFile& f) { f.metadata["hidden"] = "72"; }, "multiple of 16");
  expect_layer_error([](SafetensorsFile& f) { f.metadata["experts"] = "4"; }, "tensor 'w13' has shape [3, 64, 32]");
  expect_layer_error([](SafetensorsFile& f) { f.tensors.erase("w2_scale"); }, "tensor 'w2_scale' is missing");
  expect_layer_error([](SafetensorsFile& f) { f.tensors.erase("w13_global_scale"); }, "'w13_global_scale' is missing");
  expect_layer_error([](SafetensorsFile& f) { f.tensors.erase("w2_bias"); }, "'w2_bias' is missing");
  expect_layer_error([](SafetensorsFile& f) { f.tensors["w2_scale"].dtype = "I8"; }, "'w2_scale' has dtype I8, expected U8");
  expect_layer_error([](SafetensorsFile& f) { f.tensors["w13_global_scale"] = tensor("F32", {2}, 8); },
                     "'w13_global_scale' has shape [2], expected [3]");
  expect_layer_error([](SafetensorsFile& f) { f.tensors["w1"] = tensor("U8", {1}, 1); }, "unexpected tensor 'w1'");
  expect_layer_error([](SafetensorsFile& f) { f.tensors["extra"] = tensor("U8", {1}, 1); }, "unexpected tensor 'extra'");
  // MXFP4 has no global scales: a file that has them is not silently accepted.
  expect_layer_error(
      [](SafetensorsFile& f) {
        f.metadata["format"] = "mxfp4";
        f.tensors["w13_scale"] = tensor("U8", {3, 64, 2}, 3 * 64 * 2);
        f.tensors["w2_scale"] = tensor("U8", {3, 64, 1}, 3 * 64);
      },
      "unexpected tensor 'w13_global_scale'");
  // relu2 layers use w1*; a w13 there is reported.
  expect_layer_error([](SafetensorsFile& f) { f.metadata["activation"] = "relu2"; }, "unexpected tensor 'w13");
  CHECK_THROWS_WITH(read_layer_file(tmp().file("missing_layer.safetensors")), Contains("cannot open"));
  // The writer validates the layer first.
  HostLayer broken = L;
  broken.w2.pop_back();
  CHECK_THROWS_WITH(write_layer_file(path, broken), Contains("w2"));
}

// ------------------------------------------------------------------------------------ inputs, outputs

TEST_CASE("input and output files: round trip and errors", "[safetensors][io]") {
  LayerSpec s = spec_of(ScaleFormat::mxfp4, Activation::silu, GateUpOrder::gate_up, false);
  s.top_k = 3;
  const HostInputs in = make_random_inputs(s, 7, 5, true);
  const std::string ipath = tmp().file("input.safetensors");
  write_input_file(ipath, in);
  const HostInputs back = read_input_file(ipath);
  CHECK(back.tokens == 7);
  CHECK(back.top_k == 3);
  CHECK(back.hidden == 64);
  CHECK(back.x == in.x);
  CHECK(back.topk_ids == in.topk_ids);
  CHECK(back.topk_weights == in.topk_weights);
  const SafetensorsFile f = read_safetensors(ipath);
  CHECK(f.tensors.at("x").dtype == "BF16");
  CHECK(f.tensors.at("x").shape == std::vector<int64_t>{7, 64});
  CHECK(f.tensors.at("topk_ids").dtype == "I32");
  CHECK(f.tensors.at("topk_weights").dtype == "F32");
  CHECK(f.tensors.at("topk_weights").shape == std::vector<int64_t>{7, 3});

  std::vector<uint16_t> out(7 * 64);
  for (size_t i = 0; i < out.size(); ++i) out[i] = float_to_bf16(0.25f * static_cast<float>(i) - 3);
  const std::string opath = tmp().file("output.safetensors");
  write_output_file(opath, out, 7, 64);
  int M = 0, H = 0;
  CHECK(read_output_file(opath, &M, &H) == out);
  CHECK(M == 7);
  CHECK(H == 64);
  CHECK(read_safetensors(opath).tensors.at("out").dtype == "BF16");

  // Zero tokens is a valid (empty) call.
  HostInputs none = make_random_inputs(s, 0, 1);
  write_input_file(ipath, none);
  CHECK(read_input_file(ipath).tokens == 0);

  // Errors.
  HostInputs bad = in;
  bad.topk_ids.pop_back();
  CHECK_THROWS_WITH(write_input_file(ipath, bad), Contains("topk_ids"));
  CHECK_THROWS_WITH(write_output_file(opath, out, 7, 65), Contains("out has"));
  const std::string p = tmp().file("bad_io.safetensors");
  auto write_with = [&](auto mutate) {
    SafetensorsFile g = f;
    mutate(g);
    write_safetensors(p, g);
  };
  write_with([](SafetensorsFile& g) { g.tensors.erase("topk_weights"); });
  CHECK_THROWS_WITH(read_input_file(p), Contains("'topk_weights' is missing"));
  write_with([](SafetensorsFile& g) { g.tensors["x"].dtype = "F16"; });
  CHECK_THROWS_WITH(read_input_file(p), Contains("'x' has dtype F16, expected BF16"));
  write_with([](SafetensorsFile& g) { g.tensors["topk_ids"] = tensor("I32", {6, 3}, 72); });
  CHECK_THROWS_WITH(read_input_file(p), Contains("'topk_ids' has shape [6, 3], expected [7, 3]"));
  write_with([](SafetensorsFile& g) { g.tensors["x"] = tensor("BF16", {7 * 64}, 7 * 64 * 2); });
  CHECK_THROWS_WITH(read_input_file(p), Contains("'x'") && Contains("[M, H]"));
  CHECK_THROWS_WITH(read_output_file(ipath), Contains("'out' is missing"));
  write_with([](SafetensorsFile& g) { g.tensors["out"] = tensor("F32", {7, 64}, 7 * 64 * 4); });
  CHECK_THROWS_WITH(read_output_file(p), Contains("'out' has dtype F32, expected BF16"));
}
