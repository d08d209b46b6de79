// The compressed scale format (docs/CSF.md): exact round trips of the plane codec on every kind of
// row, the byte layout a GPU decoder relies on, strict validation, compression of layers made the
// way real ones are, CSF layer files, reference outputs identical to the plain layer's, and the CLI.
#include "catch_compat.hpp"
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cli_process.hpp"
#include "golden_dir.hpp"
#include "moejit/csf.hpp"
#include "moejit/csf_layer.hpp"
#include "moejit/error.hpp"
#include "moejit/host_layer.hpp"
#include "moejit/reference.hpp"
#include "moejit/safetensors.hpp"

using namespace moejit;
using Catch::Contains;

namespace {

const moejit_test::Sandbox& sandbox() {
  static moejit_test::Sandbox s;
  return s;
}
std::string scratch(const std::string& name) { return sandbox().dir + "/" + name; }

// Encodes, checks the plane's invariants, decodes whole and one scale at a time, and returns the plane.
CsfPlane round_trip(ScaleFormat format, const std::vector<uint8_t>& scales, int64_t rows, int64_t per_row) {
  REQUIRE(scales.size() == static_cast<size_t>(rows * per_row));
  CsfPlane p = csf_encode(format, scales.data(), rows, per_row);
  REQUIRE_NOTHROW(p.validate("test"));
  REQUIRE(csf_decode(p) == scales);
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t j = 0; j < per_row; ++j) REQUIRE(p.scale(n, j) == scales[n * per_row + j]);
  return p;
}

// The fewest bytes of `row` outside any window [b, b + width - 1] (brute force over every b).
int64_t fewest_outside(const uint8_t* row, int64_t n, int width) {
  int64_t best = n;
  for (int b = 0; b < 256; ++b) {
    int64_t outside = 0;
    for (int64_t j = 0; j < n; ++j) outside += !(row[j] >= b && row[j] < b + width);
    best = std::min(best, outside);
  }
  return best;
}

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(g());
  return v;
}

LayerSpec small_spec(ScaleFormat format, Activation act) {
  LayerSpec s;
  s.format = format;
  s.activation = act;
  s.experts = 3;
  s.hidden = 128;
  s.intermediate = 64;
  s.top_k = 2;
  if (act == Activation::swigluoai) {
    s.has_bias = true;
    s.limit = 7.0f;
    s.gate_up_order = GateUpOrder::interleaved;
  }
  return s;
}

void expect_same_scales(const HostLayer& a, const HostLayer& b) {
  std::vector<uint8_t> s1, s2, s3, s4;
  REQUIRE(plain_scale_plane(a.w13_scale, a.w13_scale_csf, s1) == plain_scale_plane(b.w13_scale, b.w13_scale_csf, s2));
  REQUIRE(plain_scale_plane(a.w2_scale, a.w2_scale_csf, s3) == plain_scale_plane(b.w2_scale, b.w2_scale_csf, s4));
}

}  // namespace

TEST_CASE("csf: offset bits and the fixed row stride", "[csf]") {
  CHECK(csf_offset_bits(ScaleFormat::mxfp4) == 1);
  CHECK(csf_offset_bits(ScaleFormat::nvfp4) == 4);
  CHECK(csf_offset_stride(ScaleFormat::mxfp4, 1) == 4);
  CHECK(csf_offset_stride(ScaleFormat::mxfp4, 32) == 4);
  CHECK(csf_offset_stride(ScaleFormat::mxfp4, 33) == 8);
  CHECK(csf_offset_stride(ScaleFormat::mxfp4, 90) == 12);   // gpt-oss: 2880 / 32
  CHECK(csf_offset_stride(ScaleFormat::nvfp4, 1) == 4);
  CHECK(csf_offset_stride(ScaleFormat::nvfp4, 9) == 8);
  CHECK(csf_offset_stride(ScaleFormat::nvfp4, 448) == 224);  // DeepSeek-V3: 7168 / 16
  // Row n's offsets start at n * stride: offset j of row n is nibble j of that run (nvfp4), bit j (mxfp4).
  const std::vector<uint8_t> nv = {10, 11, 25, 12, /*row 1*/ 200, 201, 215, 200};
  const CsfPlane p = round_trip(ScaleFormat::nvfp4, nv, 2, 4);
  CHECK(p.base == std::vector<uint8_t>{10, 200});
  CHECK(p.offsets[0] == 0x10);  // scales 0, 1: offsets 0 and 1, low nibble first
  CHECK(p.offsets[1] == 0x2F);  // scales 2, 3: offsets 15 and 2
  CHECK(p.offsets[4 + 0] == 0x10);
  CHECK(p.offsets[4 + 1] == 0x0F);
  const std::vector<uint8_t> mx = {127, 128, 128, 127, 127, 128, 127, 128, 128};
  const CsfPlane m = round_trip(ScaleFormat::mxfp4, mx, 1, 9);
  CHECK(m.base[0] == 127);
  CHECK(m.offsets[0] == 0xA6);  // bits 0..7 = 0,1,1,0,0,1,0,1
  CHECK(m.offsets[1] == 0x01);
  CHECK(m.exceptions.empty());
}

TEST_CASE("csf: exact round trip of random bytes, both formats, many shapes", "[csf]") {
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4})
    for (auto [rows, per_row] : {std::pair<int64_t, int64_t>{1, 1}, {7, 1}, {1, 5}, {13, 9}, {4, 90}, {3, 448}, {0, 4}}) {
      INFO(to_string(f) << " rows " << rows << " per_row " << per_row);
      const auto bytes = random_bytes(static_cast<size_t>(rows * per_row), 1000 * rows + per_row);
      const CsfPlane p = round_trip(f, bytes, rows, per_row);
      CHECK(p.exception_start.size() == static_cast<size_t>(rows + 1));
    }
}

TEST_CASE("csf: the base leaves the fewest exceptions; rows decide packed or plain by bytes", "[csf]") {
  std::mt19937_64 g(7);
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4}) {
    const int width = 1 << csf_offset_bits(f);
    // Clustered rows with a few far bytes: the realistic shape, with exceptions.
    const int64_t rows = 200, C = 40;
    std::vector<uint8_t> s(rows * C);
    for (int64_t n = 0; n < rows; ++n) {
      const int centre = static_cast<int>(g() % 256);
      const int spread = 1 + static_cast<int>(n % 48);
      for (int64_t j = 0; j < C; ++j)
        s[n * C + j] = static_cast<uint8_t>(std::clamp<int>(centre + static_cast<int>(g() % spread) - spread / 2, 0, 255));
    }
    const CsfPlane p = round_trip(f, s, rows, C);
    int64_t packed_with_exceptions = 0, plain = 0;
    for (int64_t n = 0; n < rows; ++n) {
      const int64_t fewest = fewest_outside(&s[n * C], C, width);
      if (p.mode[n] == static_cast<uint8_t>(CsfRowMode::plain)) {
        ++plain;
        CHECK(fewest * kCsfRecordBytes >= C);  // records would cost at least the row
      } else {
        const int64_t records = (p.exception_start[n + 1] - p.exception_start[n]) / kCsfRecordBytes;
        CHECK(records == fewest);
        CHECK(records * kCsfRecordBytes < C);
        packed_with_exceptions += records > 0;
      }
    }
    CHECK(packed_with_exceptions > 0);  // the test meets both kinds of row
    CHECK(plain > 0);
  }
}

TEST_CASE("csf: all-equal rows, single-element rows, all-exception rows", "[csf]") {
  SECTION("all equal: no exceptions, zero offsets, base is the byte") {
    const std::vector<uint8_t> s(5 * 64, 0x3A);
    const CsfPlane p = round_trip(ScaleFormat::nvfp4, s, 5, 64);
    CHECK(p.exceptions.empty());
    for (uint8_t b : p.base) CHECK(b == 0x3A);
    for (uint8_t o : p.offsets) CHECK(o == 0);
    const CsfPlaneStats st = csf_stats(p);
    CHECK(st.plain_bytes == 320);
    CHECK(st.csf_bytes == 5 + 5 + 5 * 32 + 6 * 4);  // base, mode, offsets, exception_start
  }
  SECTION("one scale per row: every row packed with its own base") {
    const std::vector<uint8_t> s = {0, 255, 127, 0x7F, 0xFF, 0x80};
    const CsfPlane p = round_trip(ScaleFormat::mxfp4, s, 6, 1);
    for (int n = 0; n < 6; ++n) CHECK(p.mode[n] == static_cast<uint8_t>(CsfRowMode::packed));
    CHECK(p.exceptions.empty());
  }
  SECTION("bytes 17 apart: every window covers one, so the row is stored plainly") {
    std::vector<uint8_t> s;
    for (int j = 0; j < 15; ++j) s.push_back(static_cast<uint8_t>(j * 17));
    const CsfPlane p = round_trip(ScaleFormat::nvfp4, s, 1, 15);
    CHECK(p.mode[0] == static_cast<uint8_t>(CsfRowMode::plain));
    CHECK(p.exceptions == s);
    CHECK(p.base[0] == 0);
  }
  SECTION("MXFP4 bytes 2 apart: the same for e8m0, 0 and 255 included") {
    std::vector<uint8_t> s;
    for (int j = 0; j < 128; ++j) s.push_back(static_cast<uint8_t>(2 * j + (j == 127)));  // ... 252, 255
    s[0] = 0;
    const CsfPlane p = round_trip(ScaleFormat::mxfp4, s, 1, 128);
    CHECK(p.mode[0] == static_cast<uint8_t>(CsfRowMode::plain));
  }
}

TEST_CASE("csf: e4m3 sign bits and NaN codes, e8m0 0 and 255 round-trip as bytes", "[csf]") {
  // NVFP4 rows around the NaN codes 0x7F / 0xFF and the sign boundary.
  const std::vector<uint8_t> nv = {0x7F, 0x7E, 0x70, 0x7F, 0xFF, 0xF8, 0xFF, 0xF0, 0x00, 0x80, 0x01, 0x81};
  const CsfPlane p = round_trip(ScaleFormat::nvfp4, nv, 3, 4);
  CHECK(p.base[0] == 0x70);
  CHECK(p.base[1] == 0xF0);
  // MXFP4 rows at both ends of e8m0: {254, 255} packs with base 254, {0, 1} with base 0.
  const std::vector<uint8_t> mx = {255, 254, 255, 255, 0, 1, 0, 0, 255, 0, 255, 255};
  const CsfPlane m = round_trip(ScaleFormat::mxfp4, mx, 3, 4);
  CHECK(m.base[0] == 254);
  CHECK(m.base[1] == 0);
  CHECK(m.exception_start[3] - m.exception_start[2] == kCsfRecordBytes);  // row 2: one 0 among 255s
  CHECK(m.exceptions[m.exception_start[2] + 2] == 0);
}

TEST_CASE("csf: validation names the array, the row and the rule", "[csf]") {
  // Row 0 packed with one exception (byte 90 at position 2), row 1 plain.
  std::vector<uint8_t> s = {10, 12, 90, 11, 10, 13, 12, 11};
  for (int j = 0; j < 8; ++j) s.push_back(static_cast<uint8_t>(j * 30));
  const CsfPlane good = round_trip(ScaleFormat::nvfp4, s, 2, 8);
  REQUIRE(good.mode[0] == 0);
  REQUIRE(good.mode[1] == 1);
  REQUIRE(good.exception_start[1] == 3);
  auto broken = [&](auto edit, const std::string& needle) {
    CsfPlane p = good;
    edit(p);
    INFO(needle);
    CHECK_THROWS_WITH(p.validate("w2_scale"), Contains("w2_scale") && Contains(needle));
    CHECK_THROWS_AS(csf_decode(p), Error);
  };
  broken([](CsfPlane& p) { p.mode[0] = 2; }, "mode 2 is neither");
  broken([](CsfPlane& p) { p.base.pop_back(); }, "base has 1 entries, expected 2");
  broken([](CsfPlane& p) { p.exception_start[2] += 1; }, "exception stream holds");
  broken([](CsfPlane& p) { p.exceptions[2] = 12; }, "inside the window");
  broken([](CsfPlane& p) { p.exception_start[1] = 20; }, "row 0: exception_start[1] = 20 passes the end of the 11-byte");
  broken([](CsfPlane& p) { p.exceptions[0] = 8; }, "position 8 >= C = 8");
  broken([](CsfPlane& p) { p.offsets[1] |= 0x01; }, "offset of exception position 2");
  broken([](CsfPlane& p) { p.base[1] = 3; }, "plain row has base 0");
  broken([](CsfPlane& p) { p.base[0] = 253; p.exceptions[2] = 0; }, "passes 255");
  // Offset bits past the last scale (padding up to the 4-byte stride) are zero.
  CsfPlane padded = csf_encode(ScaleFormat::mxfp4, std::vector<uint8_t>(9, 127).data(), 1, 9);
  padded.offsets[3] = 0x80;
  CHECK_THROWS_WITH(padded.validate("x"), Contains("offset padding bit 31"));
  CsfPlane two_records = csf_encode(ScaleFormat::nvfp4, std::vector<uint8_t>{90, 10, 10, 10, 10, 10, 10, 10, 10, 10, 200}.data(), 1, 11);
  REQUIRE(two_records.exceptions.size() == 6);
  std::swap(two_records.exceptions[0], two_records.exceptions[3]);
  std::swap(two_records.exceptions[2], two_records.exceptions[5]);
  CHECK_THROWS_WITH(two_records.validate("x"), Contains("not strictly increasing"));
  CHECK_THROWS_WITH(csf_encode(ScaleFormat::nvfp4, s.data(), 1, 0), Contains("scales per row"));
  // Rows are checked in parallel; the lowest broken row is the one named.
  const auto many = random_bytes(20000 * 64, 5);
  CsfPlane big = csf_encode(ScaleFormat::nvfp4, many.data(), 20000, 64);
  big.mode[17000] = 9;
  big.mode[150] = 9;
  CHECK_THROWS_WITH(big.validate("big"), Contains("row 150: mode 9"));
}

TEST_CASE("csf: realistic layers compress, random scales stay plain", "[csf][layer]") {
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4}) {
    LayerSpec spec = small_spec(f, Activation::silu);
    spec.experts = 2;
    spec.hidden = 2048;
    spec.intermediate = 2048;
    HostLayer real = make_realistic_layer(spec, 3);
    const HostLayer plain = real;
    const LayerStorageReport r = compress_scales(real);
    INFO(to_string(f));
    REQUIRE(r.planes.size() == 2);
    for (const auto& p : r.planes) {
      CHECK(p.stored_as_csf);
      // C = 128 (nvfp4) or 64 (mxfp4) scales per row: 4-bit offsets bound NVFP4 at 128 / (64 + 6) = 1.83x,
      // 1-bit offsets MXFP4 at 64 / (8 + 6) = 4.6x (6 bytes of base, mode and exception_start per row).
      CHECK(p.stats.ratio() > (f == ScaleFormat::nvfp4 ? 1.6 : 3.5));
    }
    CHECK(r.stored_total() < r.plain_total());
    expect_same_scales(real, plain);
    // The same weights as make_random_layer without the spread.
    CHECK(make_realistic_layer(spec, 3, 0.0).w13 == make_random_layer(spec, 3).w13);
    CHECK_THROWS_WITH(make_realistic_layer(spec, 3, -1.0), Contains("row_spread must be in [0, 4]"));

    HostLayer noise = make_random_code_layer(spec, 3);
    const LayerStorageReport n = compress_scales(noise);
    CHECK_FALSE(has_csf_scales(noise));
    for (const auto& p : n.planes) CHECK(p.csf_bytes >= p.plain_bytes);
    CHECK(n.stored_total() == n.plain_total());
    HostLayer forced = make_random_code_layer(spec, 3);
    compress_scales(forced, CsfPolicy::always);
    CHECK(forced.w13_scale_csf.has_value());
    expect_same_scales(forced, make_random_code_layer(spec, 3));
  }
}

TEST_CASE("csf: layer files round trip, reference outputs identical to the plain layer", "[csf][layer]") {
  for (auto [f, act] : {std::pair{ScaleFormat::nvfp4, Activation::silu}, {ScaleFormat::mxfp4, Activation::swigluoai},
                        {ScaleFormat::nvfp4, Activation::relu2}}) {
    INFO(to_string(f) << " " << to_string(act));
    const LayerSpec spec = small_spec(f, act);
    const HostLayer plain = make_realistic_layer(spec, 11);
    HostLayer csf = plain;
    compress_scales(csf, CsfPolicy::always);
    const std::string path = scratch(std::string("csf_") + std::string(to_string(act)) + ".safetensors");
    write_layer_file(path, csf);
    const SafetensorsFile raw = read_safetensors(path);
    CHECK(raw.metadata.at("scale_storage") == "csf");
    const std::string fc1 = act == Activation::relu2 ? "w1_scale" : "w13_scale";
    CHECK(raw.tensors.count(fc1) == 0);
    CHECK(raw.tensors.at(fc1 + "_csf_offsets").shape ==
          std::vector<int64_t>{spec.experts, spec.fc1_rows(), csf_offset_stride(f, spec.hidden / scale_block(f))});
    CHECK(raw.tensors.at("w2_scale_csf_exception_start").dtype == "U32");

    const HostLayer back = read_layer_file(path);
    REQUIRE(back.w13_scale_csf.has_value());
    REQUIRE(back.w2_scale_csf.has_value());
    CHECK(back.w13_scale.empty());
    expect_same_scales(back, plain);
    CHECK(back.w13 == plain.w13);
    for (int k = 0; k < spec.hidden; k += 7) CHECK(back.fc1_weight(1, 5, k) == plain.fc1_weight(1, 5, k));

    const HostInputs in = make_random_inputs(spec, 5, 2, true);
    const ReferenceOutput a = reference_forward(plain, in), b = reference_forward(back, in);
    CHECK(a.out == b.out);
    CHECK(a.out_f64 == b.out_f64);

    HostLayer expanded = back;
    expand_scales(expanded);
    CHECK_FALSE(has_csf_scales(expanded));
    CHECK(expanded.w13_scale == plain.w13_scale);
    CHECK(expanded.w2_scale == plain.w2_scale);
  }
}

TEST_CASE("csf: golden layers compress and expand bit-exactly; reference outputs unchanged", "[csf][golden]") {
  for (const char* name : moejit::test::kGoldenLayers) {
    INFO(name);
    const std::string dir = moejit::test::golden_dir() + "/" + name;
    const HostLayer plain = read_layer_file(dir + "/layer.safetensors");
    HostLayer csf = plain;
    compress_scales(csf, CsfPolicy::always);  // random golden scales would stay plain otherwise
    const std::string path = scratch(std::string("golden_csf_") + name + ".safetensors");
    write_layer_file(path, csf);
    HostLayer back = read_layer_file(path);
    const HostInputs in = read_input_file(dir + "/input.safetensors");
    CHECK(reference_forward(back, in).out == read_output_file(dir + "/expected.safetensors"));
    expand_scales(back);
    CHECK(back.w13_scale == plain.w13_scale);
    CHECK(back.w2_scale == plain.w2_scale);
    // Expanded and written again, the file holds the golden tensors byte for byte.
    const std::string again = scratch(std::string("golden_plain_") + name + ".safetensors");
    write_layer_file(again, back);
    const SafetensorsFile g = read_safetensors(dir + "/layer.safetensors"), w = read_safetensors(again);
    REQUIRE(g.tensors.size() == w.tensors.size());
    for (const auto& [tensor, t] : g.tensors) CHECK(w.tensors.at(tensor).data == t.data);
  }
}

TEST_CASE("csf: layer-file errors name the tensor and the rule", "[csf][layer]") {
  const LayerSpec spec = small_spec(ScaleFormat::nvfp4, Activation::silu);
  HostLayer csf = make_realistic_layer(spec, 5);
  const HostLayer plain = csf;
  compress_scales(csf, CsfPolicy::always);
  const std::string path = scratch("csf_errors.safetensors");
  write_layer_file(path, csf);
  const SafetensorsFile good = read_safetensors(path);
  auto expect = [&](auto edit, const std::string& needle) {
    SafetensorsFile f = good;
    edit(f);
    const std::string bad = scratch("csf_bad.safetensors");
    write_safetensors(bad, f);
    INFO(needle);
    CHECK_THROWS_WITH(read_layer_file(bad), Contains(needle));
  };
  expect([](SafetensorsFile& f) { f.tensors.erase("w13_scale_csf_mode"); }, "tensor 'w13_scale_csf_mode' is missing");
  expect([](SafetensorsFile& f) { f.metadata.erase("scale_storage"); }, "need __metadata__ scale_storage = csf");
  expect([](SafetensorsFile& f) { f.metadata["scale_storage"] = "zip"; }, "'scale_storage' = 'zip' is not 'csf'");
  expect([&](SafetensorsFile& f) { f.tensors["w2_scale"] = Tensor{"U8", {3, 128, 4}, plain.w2_scale}; },
         "'w2_scale' and its CSF tensors are both present");
  expect([](SafetensorsFile& f) { f.tensors["w2_scale_csf_exception_start"].dtype = "I32"; },
         "'w2_scale_csf_exception_start' has dtype I32, expected U32");
  expect([](SafetensorsFile& f) { f.tensors["w13_scale_csf_mode"].data[4] = 7; }, "w13_scale: row 4: mode 7");
  expect([](SafetensorsFile& f) { f.tensors["w13_scale_csf_offsets"].shape.back() += 4;
                                  f.tensors["w13_scale_csf_offsets"].data.resize(f.tensors["w13_scale_csf_offsets"].data.size() + 3 * 128 * 4); },
         "'w13_scale_csf_offsets' has shape");
  // A plane may stay plain inside a CSF file (an incompressible plane).
  HostLayer mixed = plain;
  compress_scales(mixed, CsfPolicy::always);
  mixed.w2_scale = plain.w2_scale;
  mixed.w2_scale_csf.reset();
  write_layer_file(path, mixed);
  const HostLayer back = read_layer_file(path);
  CHECK(back.w13_scale_csf.has_value());
  CHECK_FALSE(back.w2_scale_csf.has_value());
  expect_same_scales(back, plain);
  // A HostLayer holding a plane both ways is refused.
  HostLayer both = mixed;
  both.w13_scale = plain.w13_scale;
  CHECK_THROWS_WITH(both.validate(), Contains("w13_scale is held both plainly and in CSF"));
}

TEST_CASE("cli: compress a golden layer and report bytes; geometry report", "[csf][cli]") {
  const std::string golden = moejit::test::golden_dir() + "/nvfp4_silu/layer.safetensors";
  const std::string out = scratch("cli_csf.safetensors");
  auto r = moejit_test::run_cli({"compress", "--layer", golden, "--output", out, "--report", "--always"});
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("w13_scale") && Contains("stored as CSF") && Contains("layer      plain"));
  HostLayer back = read_layer_file(out);
  CHECK(has_csf_scales(back));
  expand_scales(back);
  CHECK(back.w13_scale == read_layer_file(golden).w13_scale);

  // Random golden scales do not shrink: without --always both planes stay plain.
  r = moejit_test::run_cli({"compress", "--layer", golden, "--output", out});
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("every plane plain"));
  CHECK_FALSE(has_csf_scales(read_layer_file(out)));

  r = moejit_test::run_cli({"compress", "--config", "qwen3-30b-a3b", "--experts", "1"});
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("qwen3-30b-a3b") && Contains("kept plain"));

  r = moejit_test::run_cli({"compress", "--config", "no-such-model"});
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, Contains("--config no-such-model"));
  CHECK_THAT(r.out, !Contains("scales plain"));  // nothing printed before the error

  r = moejit_test::run_cli({"compress", "--layer", golden});
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, Contains("--output PATH is required"));
  r = moejit_test::run_cli({"compress", "--layer", scratch("missing.safetensors"), "--report"});
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, Contains("--layer"));
}
