// Model configs: bundled configs parse, TP/EP slicing, and malformed configs fail naming the field.
#include "catch_compat.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "moejit/error.hpp"
#include "moejit/model_config.hpp"

using namespace moejit;
using nlohmann::json;

namespace {

json base_config() {
  return json{{"name", "test-model"}, {"format", "nvfp4"}, {"activation", "silu"}, {"experts", 64},
              {"hidden", 1024},       {"intermediate", 512}, {"top_k", 4}};
}

// The message of the moejit::Error that parsing j throws ("" when it parses).
std::string parse_error(const json& j, const std::string& origin = "my.json") {
  try {
    (void)parse_model_config(j.dump(), origin);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("every bundled config parses and slices", "[config]") {
  const auto names = bundled_config_names();
  REQUIRE(names.size() >= 4);
  CHECK(std::find(names.begin(), names.end(), default_config_name()) != names.end());
  for (const auto& n : names) {
    INFO("config " << n);
    ModelConfig c;
    REQUIRE_NOTHROW(c = load_model_config(n));
    CHECK(c.name == n);
    LayerSpec l;
    REQUIRE_NOTHROW(l = c.local());
    CHECK_NOTHROW(l.validate());
    CHECK(l.expert_begin == 0);
    // Also by file name with the extension.
    CHECK(load_model_config(n + ".json").name == n);
  }
}

TEST_CASE("bundled configs hold the real geometries", "[config]") {
  CHECK(default_config_name() == "gpt-oss-120b");
  const ModelConfig g = load_model_config("gpt-oss-120b");
  CHECK(g.global.format == ScaleFormat::mxfp4);
  CHECK(g.global.activation == Activation::swigluoai);
  CHECK(g.global.experts == 128);
  CHECK(g.global.hidden == 2880);
  CHECK(g.global.intermediate == 2880);
  CHECK(g.global.top_k == 4);
  CHECK(g.global.has_bias);
  CHECK(g.global.gate_up_order == GateUpOrder::interleaved);
  CHECK(g.global.swiglu_alpha == Approx(1.702f));
  CHECK(g.global.swiglu_beta == Approx(1.0f));
  REQUIRE(g.global.limit.has_value());
  CHECK(*g.global.limit == Approx(7.0f));

  const ModelConfig g20 = load_model_config("gpt-oss-20b");
  CHECK(g20.global.experts == 32);
  CHECK(g20.global.hidden == 2880);
  CHECK(g20.global.activation == Activation::swigluoai);

  const ModelConfig d = load_model_config("deepseek-v3");
  CHECK(d.global.format == ScaleFormat::nvfp4);
  CHECK(d.global.activation == Activation::silu);
  CHECK(d.global.experts == 256);
  CHECK(d.global.hidden == 7168);
  CHECK(d.global.intermediate == 2048);
  CHECK(d.global.top_k == 8);
  CHECK_FALSE(d.global.has_bias);
  CHECK_FALSE(d.global.limit.has_value());

  const ModelConfig q = load_model_config("qwen3-30b-a3b");
  CHECK(q.global.experts == 128);
  CHECK(q.global.hidden == 2048);
  CHECK(q.global.intermediate == 768);
  CHECK(q.global.top_k == 8);
  CHECK(q.global.format == ScaleFormat::nvfp4);

  const ModelConfig n = load_model_config("nemotron-3-nano-30b-a3b");
  CHECK(n.global.activation == Activation::relu2);
  CHECK(n.global.format == ScaleFormat::nvfp4);
  CHECK(n.global.fc1_rows() == n.global.intermediate);
}

TEST_CASE("tp and ep slicing", "[config]") {
  ModelConfig c = load_model_config("gpt-oss-120b");
  c.tp = 2;
  LayerSpec l = c.local();
  CHECK(l.intermediate == 1440);
  CHECK(l.experts == 128);
  CHECK(l.hidden == 2880);

  c.tp = 1;
  c.ep = 4;
  c.ep_rank = 2;
  l = c.local();
  CHECK(l.experts == 32);
  CHECK(l.expert_begin == 64);
  CHECK(l.intermediate == 2880);
  CHECK(l.top_k == 4);

  c.ep_rank = 3;
  CHECK(c.local().expert_begin == 96);
  c.ep_rank = 4;
  CHECK_THROWS_WITH(c.local(), Catch::Contains("ep_rank"));
  c.ep_rank = 0;
  c.ep = 3;
  CHECK_THROWS_WITH(c.local(), Catch::Contains("ep = 3"));
  c.ep = 1;
  c.tp = 4;  // 2880 / 4 = 720, not a multiple of the MXFP4 block 32
  CHECK_THROWS_WITH(c.local(), Catch::Contains("tp") && Catch::Contains("32"));
  c.tp = 7;  // does not divide 2880
  CHECK_THROWS_WITH(c.local(), Catch::Contains("tp = 7"));

  ModelConfig d = load_model_config("deepseek-v3");
  d.tp = 8;
  d.ep = 8;
  d.ep_rank = 7;
  l = d.local();
  CHECK(l.intermediate == 256);
  CHECK(l.experts == 32);
  CHECK(l.expert_begin == 224);

  // Slicing given in the JSON itself.
  json j = base_config();
  j["tp"] = 2;
  j["ep"] = 4;
  j["ep_rank"] = 1;
  const ModelConfig s = parse_model_config(j.dump(), "inline");
  CHECK(s.local().experts == 16);
  CHECK(s.local().expert_begin == 16);
  CHECK(s.local().intermediate == 256);
}

TEST_CASE("malformed configs name the origin and the field", "[config]") {
  CHECK(parse_error(base_config()).empty());

  auto without = [](const char* field) {
    json j = base_config();
    j.erase(field);
    return j;
  };
  for (const char* f : {"name", "format", "activation", "experts", "hidden", "intermediate", "top_k"}) {
    INFO("missing " << f);
    const std::string e = parse_error(without(f));
    CHECK_THAT(e, Catch::Contains("my.json") && Catch::Contains(std::string("'") + f + "'") && Catch::Contains("required"));
  }

  auto with = [](const char* field, json v) {
    json j = base_config();
    j[field] = std::move(v);
    return j;
  };
  CHECK_THAT(parse_error(with("experts", "many")), Catch::Contains("'experts'") && Catch::Contains("integer"));
  CHECK_THAT(parse_error(with("experts", 0)), Catch::Contains("'experts'"));
  CHECK_THAT(parse_error(with("experts", 2.5)), Catch::Contains("'experts'"));
  CHECK_THAT(parse_error(with("hidden", 1000)), Catch::Contains("'hidden'") && Catch::Contains("16"));
  CHECK_THAT(parse_error(with("intermediate", 520)), Catch::Contains("'intermediate'"));
  CHECK_THAT(parse_error(with("format", "fp8")), Catch::Contains("'format'") && Catch::Contains("fp8"));
  CHECK_THAT(parse_error(with("activation", "gelu")), Catch::Contains("'activation'"));
  CHECK_THAT(parse_error(with("gate_up_order", "sideways")), Catch::Contains("'gate_up_order'"));
  CHECK_THAT(parse_error(with("bias", "yes")), Catch::Contains("'bias'"));
  CHECK_THAT(parse_error(with("top_k", 65)), Catch::Contains("'top_k'"));
  CHECK_THAT(parse_error(with("swiglu_alpha", 1.5)), Catch::Contains("'swiglu_alpha'"));  // silu has no alpha
  CHECK_THAT(parse_error(with("swiglu_limit", -1.0)), Catch::Contains("'swiglu_limit'"));
  CHECK_THAT(parse_error(with("swiglu_limit", "seven")), Catch::Contains("'swiglu_limit'"));
  CHECK_THAT(parse_error(with("precision", "a2")), Catch::Contains("'precision'") && Catch::Contains("a2"));
  CHECK_THAT(parse_error(with("precision", 8)), Catch::Contains("'precision'"));
  // The activation precision: a16 when absent, else as given, kept through slicing.
  CHECK(parse_model_config(base_config().dump()).local().precision == ActPrecision::a16);
  CHECK(parse_model_config(with("precision", "a4").dump()).local().precision == ActPrecision::a4);
  CHECK(parse_model_config(with("precision", "a8").dump()).global.precision == ActPrecision::a8);
  CHECK_THAT(parse_error(with("tp", 3)), Catch::Contains("'tp'"));
  CHECK_THAT(parse_error(with("tp", 0)), Catch::Contains("'tp'"));
  CHECK_THAT(parse_error(with("ep", 5)), Catch::Contains("'ep'"));
  CHECK_THAT(parse_error(with("ep_rank", 1)), Catch::Contains("'ep_rank'"));  // ep defaults to 1
  CHECK_THAT(parse_error(with("name", "")), Catch::Contains("'name'"));
  // relu2 takes no limit and no gate/up order.
  json r = base_config();
  r["activation"] = "relu2";
  CHECK(parse_error(r).empty());
  r["swiglu_limit"] = 7.0;
  CHECK_THAT(parse_error(r), Catch::Contains("'swiglu_limit'"));

  // Unknown fields are errors (a typo must not fall back to a default).
  CHECK_THAT(parse_error(with("top-k", 4)), Catch::Contains("'top-k'") && Catch::Contains("unknown"));
  // Not JSON, not an object.
  try {
    (void)parse_model_config("{\"name\": ", "broken.json");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("broken.json") && Catch::Contains("JSON"));
  }
  CHECK_THROWS_WITH(parse_model_config("[1, 2]", "list.json"), Catch::Contains("list.json"));
}

TEST_CASE("load_model_config reads files and names them in errors", "[config]") {
  char tmpl[] = "/tmp/moejit-config-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  const std::string good = dir + "/good.json", bad = dir + "/bad.json";
  {
    json j = base_config();
    j["ep"] = 2;
    j["ep_rank"] = 1;
    std::ofstream(good) << j.dump(2);
    j.erase("hidden");
    std::ofstream(bad) << j.dump(2);
  }
  const ModelConfig c = load_model_config(good);
  CHECK(c.name == "test-model");
  CHECK(c.local().expert_begin == 32);
  CHECK_THROWS_WITH(load_model_config(bad), Catch::Contains(bad) && Catch::Contains("'hidden'"));
  // Neither a file nor a bundled name: the error lists the bundled configs.
  CHECK_THROWS_WITH(load_model_config("no-such-model"),
                    Catch::Contains("no-such-model") && Catch::Contains("gpt-oss-120b") && Catch::Contains("qwen3-30b-a3b"));
  CHECK_THROWS_WITH(load_model_config(dir), Catch::Contains(dir));
  std::filesystem::remove_all(dir);
}
