// The model-level reader (include/peal/models/model_positions.hpp, model_conventions.hpp and
// model_positions_from_hf in hf_config.hpp): every layer of real config.json files
// (tests/data/hf_configs/, sources in its SOURCES.md) against an independent transcription
// of transformers' modeling and configuration code (tests/reference/hf_model_reference.hpp),
// and the conventions the issue tracker named, case by case. Light on purpose: no kernel is
// instantiated here (compile cost, docs/build-cost.md).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <peal/models/hf_config.hpp>
#include <peal/models/model_positions.hpp>
#include <set>
#include <string>
#include <vector>

#include "reference/hf_model_reference.hpp"
#include "reference/preset_reference.hpp"
#include "tolerances.hpp"

namespace {

using json = nlohmann::json;
using LD = long double;

json load(const std::filesystem::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

// Relative difference, 0 for two zeros.
LD rel(LD a, LD b) {
  const LD s = std::max(std::fabs(a), std::fabs(b));
  return s == 0 ? 0 : std::fabs(a - b) / s;
}

// The length at which a config's frequencies are compared: its trained length (dynamic types
// also at twice it, where the table changes).
std::vector<double> lengths(const peal::LayerPositions& L) {
  const auto& c = L.rope;
  double n = c.max_position_embeddings.value_or(4096);
  if (c.scaling.original_max_position_embeddings && c.scaling.type == peal::RopeType::LongRope)
    n = *c.scaling.original_max_position_embeddings;
  // Hunyuan's alpha base is static in peal; past max_position_embeddings transformers'
  // inherited dynamic update switches to the factor's NTK (docs/models.md, Limits).
  if ((c.scaling.type == peal::RopeType::Dynamic && !c.scaling.alpha) ||
      c.scaling.type == peal::RopeType::LongRope)
    return {n, 2 * n};
  return {n};
}

std::string attention_name(peal::LayerAttention a) {
  // The reference knows full, sliding and linear; a chunked layer (Llama 4) is full attention
  // inside each chunk.
  return a == peal::LayerAttention::Chunked ? "full" : peal::to_string(a);
}

// One layer of peal against the reference at seq_len; returns the number of mismatches.
int compare_layer(const std::string& tag, const peal::LayerPositions& L,
                  const peal_ref::hf::Layer& R, double seq_len) {
  int bad = 0;
  const auto check = [&](bool ok, const std::string& what) {
    if (!ok) {
      ++bad;
      UNSCOPED_INFO(tag << ": " << what);
    }
  };
  const std::string enc = L.encoding == peal::LayerEncoding::Alibi ? "none" : to_string(L.encoding);
  check(enc == R.encoding, "encoding " + enc + " vs " + R.encoding);
  check(attention_name(L.attention) == R.attention,
        "attention " + attention_name(L.attention) + " vs " + R.attention);
  check(L.qk_head_dim == R.qk_head_dim, "qk_head_dim " + std::to_string(L.qk_head_dim) + " vs " +
                                            std::to_string(R.qk_head_dim));
  check(rel(L.softmax_scale, R.softmax_scale) < 1e-12,
        "softmax_scale " + std::to_string(L.softmax_scale) + " vs " +
            std::to_string(double(R.softmax_scale)));
  check(L.sliding_window.value_or(0) == R.sliding_window, "sliding_window");
  check(rel(L.softcap.value_or(0), R.softcap) < 1e-15, "softcap");
  check(L.qk_norm == R.qk_norm, "qk_norm");
  for (LD p : {0.0L, 100.0L, 8191.0L, 8192.0L, 70000.0L, 1e6L}) {
    const LD want = R.query_scale ? R.query_scale(p) : 1.0L;
    check(rel(L.query_scale.at(p), want) < 1e-15, "query scale at " + std::to_string(double(p)));
  }
  if (L.encoding != peal::LayerEncoding::Rope && L.encoding != peal::LayerEncoding::MRope)
    return bad;
  check(L.rotary_offset == R.rotary_offset, "rotary_offset");
  check((L.rope.layout == peal::Layout::Interleaved) == R.interleaved, "layout");
  const peal::RopeFrequencies f = peal::rope_frequencies(L.rope, seq_len);
  check(f.rotary_dim == R.rotary_dim,
        "rotary_dim " + std::to_string(f.rotary_dim) + " vs " + std::to_string(R.rotary_dim));
  check(rel(f.attention_factor, R.attention_factor) <= peal_test::Tol<LD>::roundings(8), "attention_factor");
  if (f.inv_freq.size() != R.inv_freq.size()) {
    check(false, "number of frequencies");
    return bad;
  }
  for (std::size_t i = 0; i < f.inv_freq.size(); ++i)
    if (rel(f.inv_freq[i], R.inv_freq[i]) > peal_test::Tol<LD>::roundings(8)) {
      check(false, "frequency " + std::to_string(i) + " at seq_len " + std::to_string(seq_len));
      break;
    }
  return bad;
}

}  // namespace

TEST_CASE("model positions: real configs against transformers' code, layer by layer",
          "[model_positions][corpus]") {
  const std::filesystem::path dir = std::filesystem::path(PEAL_TESTS_DIR) / "data" / "hf_configs";
  REQUIRE(std::filesystem::is_directory(dir));
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::set<std::string> families, unknown;
  int compared_layers = 0, not_modelled_configs = 0;
  for (const auto& p : files) {
    const std::string tag = p.filename().string();
    const json cfg = load(p);
    peal::ModelReadOptions opt;
    opt.allow_not_modelled = true;
    peal::ModelPositions m;
    REQUIRE_NOTHROW(m = peal::model_positions_from_hf(cfg, opt));
    INFO(tag);
    if (!m.architecture_known) {
      // Not in the architecture table: read with the defaults, and the result says so.
      REQUIRE(!m.facts.empty());
      bool said = false;
      for (const auto& f : m.facts)
        said = said || f.source.find("not in the architecture table") != std::string::npos;
      CHECK(said);
      unknown.insert(m.model_type);
      continue;
    }
    // A config with a key peal refuses to model is not compared (its layers are not claimed).
    bool refused = false;
    for (const auto& n : m.not_modelled) refused = refused || n.changes_attention;
    if (refused) {
      CHECK_THROWS(peal::model_positions_from_hf(cfg));
      ++not_modelled_configs;
      continue;
    }
    const peal::LayerPositions* rope = nullptr;
    for (const auto& L : m.layers)
      if (L.encoding == peal::LayerEncoding::Rope || L.encoding == peal::LayerEncoding::MRope)
        rope = &L;
    const std::vector<double> lens = rope ? lengths(*rope) : std::vector<double>{4096};
    for (double n : lens) {
      std::vector<peal_ref::hf::Layer> ref;
      REQUIRE_NOTHROW(ref = peal_ref::hf::expected_layers(cfg, n));
      REQUIRE(ref.size() == m.layers.size());
      int bad = 0;
      for (std::size_t i = 0; i < ref.size(); ++i)
        bad += compare_layer(tag + " layer " + std::to_string(i), m.layers[i], ref[i], n);
      CHECK(bad == 0);
      compared_layers += int(ref.size());
    }
    families.insert(m.model_type);
  }
  INFO("families: " << families.size() << ", layers compared: " << compared_layers
                     << ", configs with a key not modelled: " << not_modelled_configs
                     << ", model types not in the table: " << unknown.size());
  CHECK(files.size() >= 70);
  CHECK(families.size() >= 40);
}

namespace {
const char* kDeepSeekV3 = R"({
  "model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128,
  "num_hidden_layers": 61, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
  "kv_lora_rank": 512, "q_lora_rank": 1536, "max_position_embeddings": 163840,
  "rope_theta": 10000,
  "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096}})";
}  // namespace

TEST_CASE("model positions: MLA rotates the last qk_rope_head_dim coordinates, interleaved",
          "[model_positions][mla]") {
  const auto m = peal::model_positions_from_hf(json::parse(kDeepSeekV3));
  REQUIRE(m.layers.size() == 61);
  const auto& L = m.layers[0];
  CHECK(L.qk_head_dim == 192);
  CHECK(L.rotary_offset == 128);
  CHECK(L.v_head_dim == 128);
  CHECK(L.rope.head_dim == 64);
  CHECK(L.rope.layout == peal::Layout::Interleaved);
  CHECK(m.kv_lora_rank == 512);
  CHECK(m.q_lora_rank == 1536);
  // scaling = 192^-1/2 * (0.1 * 1.0 * ln 40 + 1)^2 (yarn_get_mscale(factor, mscale_all_dim)).
  const LD ms = 0.1L * std::log(40.0L) + 1.0L;
  CHECK(rel(L.softmax_scale, ms * ms / std::sqrt(192.0L)) < 1e-15);
  // The frequencies: YaRN on 64 dims (peal_ref::rope_yarn).
  const auto want = peal_ref::rope_yarn(64, 10000.0L, 1.0, 40.0L, 4096.0L, 32.0L, 1.0L, true,
                                        1.0L, 1.0L);
  const auto f = peal::rope_frequencies(L.rope, 163840);
  REQUIRE(f.inv_freq.size() == 32);
  for (int i = 0; i < 32; ++i) CHECK(rel(f.inv_freq[i], want.inv_freq[i]) <= peal_test::Tol<LD>::roundings(8));
  // rope_interleave false: half-split.
  json c = json::parse(kDeepSeekV3);
  c["rope_interleave"] = false;
  CHECK(peal::model_positions_from_hf(c).layers[0].rope.layout == peal::Layout::HalfSplit);
  // The whole head: 128 coordinates untouched, then the 64 rotated ones as rope<S> does.
  const auto head = peal::rope_head<double>(L);
  REQUIRE(head.dim() == 192);
  const auto kpe = peal::rope<double>(L.rope);
  Eigen::VectorXd q = Eigen::VectorXd::LinSpaced(192, -1.0, 2.0), r = q;
  head.encode_query(q, 12345.0);
  Eigen::VectorXd tail = r.tail(64);
  kpe.encode_query(tail, 12345.0);
  CHECK((q.head(128) - r.head(128)).norm() == 0.0);
  CHECK((q.tail(64) - tail).norm() <= 1e-15 * tail.norm());
  // rope_config_from_hf refuses to pick: it names the reader.
  CHECK_THROWS_WITH(peal::rope_config_from_hf(json::parse(kDeepSeekV3)),
                    Catch::Contains("model_positions_from_hf") && Catch::Contains("[128, 192)"));
}

TEST_CASE("model positions: pairing from the architecture (Cohere, GLM-4, ERNIE, Llama 4)",
          "[model_positions][layout]") {
  for (const char* mt : {"cohere", "glm4", "ernie4_5", "llama4_text", "gptj", "deepseek_v2"}) {
    json c = {{"model_type", mt}, {"hidden_size", 4096}, {"num_attention_heads", 32},
              {"num_hidden_layers", 2}, {"qk_rope_head_dim", 64}, {"qk_nope_head_dim", 64}};
    INFO(mt);
    c["no_rope_layers"] = {1, 1};
    const auto m = peal::model_positions_from_hf(c);
    CHECK(m.layers[0].rope.layout == peal::Layout::Interleaved);
  }
  for (const char* mt : {"llama", "qwen2", "glm4_moe", "gpt_oss", "mistral"}) {
    json c = {{"model_type", mt}, {"hidden_size", 4096}, {"num_attention_heads", 32},
              {"num_hidden_layers", 2}};
    INFO(mt);
    CHECK(peal::model_positions_from_hf(c).layers[0].rope.layout == peal::Layout::HalfSplit);
  }
  // GLM-4 rotates the first half of the head (class default partial_rotary_factor 0.5).
  json g = {{"model_type", "glm4"}, {"hidden_size", 4096}, {"num_attention_heads", 32},
            {"num_hidden_layers", 1}, {"head_dim", 128}};
  CHECK(peal::rope_rotary_dim(peal::rope_config_from_hf(g)) == 64);
  // An unknown model_type keeps the defaults and says so.
  json u = {{"model_type", "someone_new"}, {"hidden_size", 1024}, {"num_attention_heads", 8}};
  const auto mu = peal::model_positions_from_hf(u);
  CHECK_FALSE(mu.architecture_known);
  CHECK(mu.layers[0].rope.layout == peal::Layout::HalfSplit);
  REQUIRE(!mu.facts.empty());
  CHECK(mu.facts[0].source.find("not in the architecture table") != std::string::npos);
  // The caller's layout wins.
  peal::ModelReadOptions o;
  o.layout = peal::Layout::Interleaved;
  json l = {{"model_type", "llama"}, {"hidden_size", 4096}, {"num_attention_heads", 32}};
  CHECK(peal::model_positions_from_hf(l, o).layers[0].rope.layout == peal::Layout::Interleaved);
}

TEST_CASE("model positions: Gemma 3 local and global layers, class defaults, v5 per-type",
          "[model_positions][gemma3]") {
  // Gemma 3 12B's text config omits head_dim and rope_theta: transformers takes 256 and 1e6.
  const json g = json::parse(R"({"model_type": "gemma3", "text_config": {
      "model_type": "gemma3_text", "hidden_size": 3840, "num_attention_heads": 16,
      "num_hidden_layers": 48, "sliding_window": 1024,
      "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}})");
  const auto m = peal::model_positions_from_hf(g);
  REQUIRE(m.layers.size() == 48);
  for (int i = 0; i < 48; ++i) {
    const auto& L = m.layers[std::size_t(i)];
    INFO("layer " << i);
    CHECK(L.qk_head_dim == 256);
    CHECK(rel(L.softmax_scale, 1.0L / 16) < 1e-15);  // query_pre_attn_scalar 256
    CHECK(L.qk_norm);
    if ((i + 1) % 6 == 0) {
      CHECK(L.attention == peal::LayerAttention::Full);
      CHECK(L.rope.rope_theta == 1e6);
      CHECK(L.rope.scaling.type == peal::RopeType::Linear);
    } else {
      CHECK(L.attention == peal::LayerAttention::Sliding);
      CHECK(L.sliding_window == 1024);
      CHECK(L.rope.rope_theta == 1e4);
      CHECK(L.rope.scaling.type == peal::RopeType::Default);
    }
  }
  const auto lines = peal::describe_layers(m);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].find("layers 0-4, 6-10") == 0);
  CHECK_THROWS_WITH(peal::rope_config_from_hf(g), Catch::Contains("model_positions_from_hf") &&
                                                      Catch::Contains("sliding_attention"));
  CHECK(peal::rope_config_from_hf(g, "full_attention").rope_theta == 1e6);
  CHECK(peal::rope_config_from_hf(g, "sliding_attention").rope_theta == 1e4);
  // transformers v5: rope_parameters per layer type.
  const json v5 = json::parse(R"({"model_type": "gemma3_text", "hidden_size": 2560,
      "num_attention_heads": 8, "head_dim": 256, "num_hidden_layers": 12,
      "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention",
                      "sliding_attention", "sliding_attention", "full_attention",
                      "sliding_attention", "sliding_attention", "sliding_attention",
                      "sliding_attention", "sliding_attention", "full_attention"],
      "rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}})");
  const auto m5 = peal::model_positions_from_hf(v5);
  CHECK(m5.layers[5].rope.rope_theta == 1e6);
  CHECK(m5.layers[5].rope.scaling.factor == 8.0);
  CHECK(m5.layers[0].rope.rope_theta == 1e4);
  CHECK(m5.layers[0].rope.scaling.type == peal::RopeType::Default);
}

TEST_CASE("model positions: NoPE layers, linear layers and query scales",
          "[model_positions][per_layer]") {
  // Llama 4: every 4th layer NoPE with the temperature; chunked attention on RoPE layers.
  const json l4 = json::parse(R"({"model_type": "llama4", "text_config": {
      "model_type": "llama4_text", "hidden_size": 5120, "num_attention_heads": 40,
      "head_dim": 128, "num_hidden_layers": 8, "rope_theta": 500000.0,
      "attn_temperature_tuning": true, "floor_scale": 8192, "attn_scale": 0.1}})");
  const auto m = peal::model_positions_from_hf(l4);
  for (int i = 0; i < 8; ++i) {
    const auto& L = m.layers[std::size_t(i)];
    INFO("layer " << i);
    if ((i + 1) % 4 == 0) {
      CHECK(L.encoding == peal::LayerEncoding::None);
      CHECK(L.attention == peal::LayerAttention::Full);
      CHECK_FALSE(L.qk_norm);
      // 1 + 0.1 ln(1 + floor((p + 1) / 8192)), p 0-based.
      CHECK(L.query_scale.at(8190) == 1.0L);
      CHECK(rel(L.query_scale.at(8191), 1.0L + LD(0.1) * std::log(2.0L)) <= peal_test::Tol<LD>::roundings(8));
      CHECK(rel(L.query_scale.at(100000), 1.0L + LD(0.1) * std::log(13.0L)) <= peal_test::Tol<LD>::roundings(8));
    } else {
      CHECK(L.encoding == peal::LayerEncoding::Rope);
      CHECK(L.attention == peal::LayerAttention::Chunked);
      CHECK(L.attention_chunk == 8192);
      CHECK(L.qk_norm);
      CHECK_FALSE(L.query_scale);
      CHECK(L.rope.layout == peal::Layout::Interleaved);
    }
  }
  // SmolLM3: no_rope_layers, 1 = RoPE.
  const json s3 = json::parse(R"({"model_type": "smollm3", "hidden_size": 2048,
      "num_attention_heads": 16, "num_hidden_layers": 4, "no_rope_layers": [1, 0, 1, 1]})");
  const auto ms = peal::model_positions_from_hf(s3);
  CHECK(ms.layers[1].encoding == peal::LayerEncoding::None);
  CHECK(ms.layers[2].encoding == peal::LayerEncoding::Rope);
  // Cohere2: RoPE on sliding layers only.
  const json c2 = json::parse(R"({"model_type": "cohere2", "hidden_size": 4096,
      "num_attention_heads": 32, "num_hidden_layers": 8, "sliding_window": 4096,
      "sliding_window_pattern": 4})");
  const auto mc = peal::model_positions_from_hf(c2);
  CHECK(mc.layers[3].encoding == peal::LayerEncoding::None);
  CHECK(mc.layers[3].attention == peal::LayerAttention::Full);
  CHECK(mc.layers[2].encoding == peal::LayerEncoding::Rope);
  CHECK(mc.layers[2].rope.layout == peal::Layout::Interleaved);
  // Qwen3-Next: linear-attention layers between full ones (full_attention_interval 4).
  const json qn = json::parse(R"({"model_type": "qwen3_next", "hidden_size": 2048,
      "num_attention_heads": 16, "head_dim": 256, "num_hidden_layers": 8})");
  const auto mq = peal::model_positions_from_hf(qn);
  CHECK(mq.layers[0].attention == peal::LayerAttention::Linear);
  CHECK(mq.layers[0].encoding == peal::LayerEncoding::None);
  CHECK(mq.layers[3].attention == peal::LayerAttention::Full);
  CHECK(peal::rope_rotary_dim(mq.layers[3].rope) == 64);  // partial_rotary_factor 0.25
  CHECK(peal::rope_config_from_hf(qn, "full_attention").head_dim == 256);
  // Ministral 3: q x (1 + beta ln(1 + floor(p / original_max_position_embeddings))).
  const json mi = json::parse(R"({"model_type": "ministral3", "hidden_size": 4096,
      "num_attention_heads": 32, "head_dim": 128, "num_hidden_layers": 2,
      "rope_parameters": {"rope_type": "yarn", "factor": 16.0, "rope_theta": 1000000.0,
        "original_max_position_embeddings": 16384, "llama_4_scaling_beta": 0.1}})");
  const auto mm = peal::model_positions_from_hf(mi);
  CHECK(mm.layers[0].query_scale.kind == peal::QueryScale::Kind::Llama4Beta);
  CHECK(rel(mm.layers[1].query_scale.at(40000), 1.0L + LD(0.1) * std::log(3.0L)) <= peal_test::Tol<LD>::roundings(8));
}

TEST_CASE("model positions: Hunyuan's dynamic scaling by alpha", "[model_positions][hunyuan]") {
  const json h = json::parse(R"({"model_type": "hunyuan_v1_dense", "hidden_size": 4096,
      "num_attention_heads": 32, "head_dim": 128, "num_hidden_layers": 2,
      "max_position_embeddings": 262144, "rope_theta": 10000.0,
      "rope_scaling": {"type": "dynamic", "alpha": 1000.0, "factor": 1.0}})");
  const auto c = peal::rope_config_from_hf(h);
  REQUIRE(c.scaling.alpha == 1000.0);
  // base = theta alpha^(d / (d - 2)), independent of the length.
  const auto want = peal_ref::rope_default(128, 10000.0L * std::pow(1000.0L, 128.0L / 126.0L));
  for (double n : {1000.0, 262144.0}) {
    const auto f = peal::rope_frequencies(c, n);
    for (int i = 0; i < 64; ++i) CHECK(rel(f.inv_freq[i], want.inv_freq[i]) <= peal_test::Tol<LD>::roundings(8));
  }
  peal::RopeConfig bad = c;
  bad.scaling.alpha = -1.0;
  CHECK_THROWS_WITH(peal::rope_frequencies(bad, 10), Catch::Contains("alpha"));
  bad.scaling.alpha = 2.0;
  bad.scaling.type = peal::RopeType::Linear;
  CHECK_THROWS_WITH(peal::rope_frequencies(bad, 10), Catch::Contains("alpha"));
}

TEST_CASE("model positions: no silent key", "[model_positions][not_modelled]") {
  // A key that changes attention and that peal cannot model: refused unless allowed.
  const json q = json::parse(R"({"model_type": "qwen2", "hidden_size": 5120,
      "num_attention_heads": 40, "num_hidden_layers": 2,
      "dual_chunk_attention_config": {"chunk_size": 262144, "local_size": 8192}})");
  CHECK_THROWS_WITH(peal::model_positions_from_hf(q),
                    Catch::Contains("dual_chunk_attention_config") &&
                        Catch::Contains("allow_not_modelled"));
  CHECK_THROWS(peal::rope_config_from_hf(q));
  peal::ModelReadOptions o;
  o.allow_not_modelled = true;
  const auto m = peal::model_positions_from_hf(q, o);
  REQUIRE(m.not_modelled.size() == 1);
  CHECK(m.not_modelled[0].key == "dual_chunk_attention_config");
  // An unknown scaling field (Phi-3.5-MoE's short_mscale) is refused too.
  const json p = json::parse(R"({"model_type": "phimoe", "hidden_size": 4096,
      "num_attention_heads": 32, "num_hidden_layers": 2, "max_position_embeddings": 131072,
      "rope_scaling": {"type": "longrope", "short_mscale": 1.243, "long_mscale": 1.243,
        "original_max_position_embeddings": 4096,
        "short_factor": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
                         1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],
        "long_factor": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
                        1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}})");
  CHECK_THROWS_WITH(peal::model_positions_from_hf(p), Catch::Contains("_mscale"));
  // A positional-looking key peal does not know is listed, not refused.
  json x = {{"model_type", "llama"}, {"hidden_size", 4096}, {"num_attention_heads", 32},
            {"num_hidden_layers", 1}, {"rope_magic_window", 7}};
  const auto mx = peal::model_positions_from_hf(x);
  REQUIRE(mx.not_modelled.size() == 1);
  CHECK(mx.not_modelled[0].key == "rope_magic_window");
  // A key that only some architectures read, in a config whose architecture does not read it
  // (a Llama with Gemma's query_pre_attn_scalar): listed, since transformers ignores it there.
  json w = {{"model_type", "llama"}, {"hidden_size", 4096}, {"num_attention_heads", 32},
            {"num_hidden_layers", 1}, {"query_pre_attn_scalar", 64}, {"sliding_window", 4096}};
  const auto mw = peal::model_positions_from_hf(w);
  REQUIRE(mw.not_modelled.size() == 2);
  CHECK(mw.not_modelled[0].key == "query_pre_attn_scalar");
  CHECK(mw.not_modelled[1].key == "sliding_window");
  CHECK_FALSE(mw.not_modelled[0].changes_attention);
  CHECK(rel(mw.layers[0].softmax_scale, 1 / std::sqrt(128.0L)) < 1e-15);
  // The same keys where the architecture reads them are not listed (Gemma 2).
  json g2 = w;
  g2["model_type"] = "gemma2";
  g2["num_hidden_layers"] = 2;
  CHECK(peal::model_positions_from_hf(g2).not_modelled.empty());
  // Layers that need their count refuse to guess it.
  json g = {{"model_type", "gemma3_text"}, {"hidden_size", 2560}, {"num_attention_heads", 8}};
  CHECK_THROWS_WITH(peal::model_positions_from_hf(g), Catch::Contains("num_hidden_layers"));
  // Bad per-layer lists.
  json b = {{"model_type", "smollm3"}, {"hidden_size", 2048}, {"num_attention_heads", 16},
            {"num_hidden_layers", 2}, {"no_rope_layers", {1, 2}}};
  CHECK_THROWS_WITH(peal::model_positions_from_hf(b), Catch::Contains("no_rope_layers"));
  json t = {{"model_type", "gemma3_text"}, {"hidden_size", 2560}, {"num_attention_heads", 8},
            {"num_hidden_layers", 3}, {"layer_types", {"full_attention"}}};
  CHECK_THROWS_WITH(peal::model_positions_from_hf(t), Catch::Contains("layer_types"));
  json n = {{"model_type", "llama"}, {"hidden_size", 4096}, {"num_attention_heads", 32},
            {"num_hidden_layers", 100000}};
  CHECK_THROWS_WITH(peal::model_positions_from_hf(n), Catch::Contains("num_hidden_layers"));
}

TEST_CASE("model positions: Llama 4's llama3 scaling with equal band factors",
          "[model_positions][llama3]") {
  // Llama-4-Scout's rope_scaling: factor 16 (8 in Maverick), low = high = 1, original 8192.
  // transformers keeps pairs whose wavelength is below 8192 and divides the others by factor.
  const json l4 = json::parse(R"({"model_type": "llama4_text", "hidden_size": 5120,
      "num_attention_heads": 40, "head_dim": 128, "num_hidden_layers": 4,
      "rope_theta": 500000.0, "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0,
      "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
  const auto m = peal::model_positions_from_hf(l4);
  const auto f = peal::rope_frequencies(m.layers[0].rope, 8192);
  const auto base = peal_ref::rope_default(128, 500000.0L);
  int kept = 0, scaled = 0;
  for (std::size_t i = 0; i < f.inv_freq.size(); ++i) {
    const LD wl = 2 * std::acos(-1.0L) / base.inv_freq[i];
    const LD want = wl < 8192 ? base.inv_freq[i] : base.inv_freq[i] / 16;
    (wl < 8192 ? kept : scaled)++;
    CHECK(rel(f.inv_freq[i], want) <= peal_test::Tol<LD>::roundings(8));
  }
  CHECK(kept > 0);
  CHECK(scaled > 0);
  peal::RopeConfig c = m.layers[0].rope;
  c.scaling.high_freq_factor = 0.5;  // high < low stays an error
  CHECK_THROWS_WITH(peal::rope_frequencies(c, 8192), Catch::Contains("low_freq_factor"));
}


TEST_CASE("model positions: single-architecture facts (Qwen2-MoE, ChatGLM, Baichuan, hybrids, "
          "refused features)",
          "[model_positions][quirks]") {
  // configuration_qwen2_moe.py: sliding when use_sliding_window, (i + 1) % 2, i < max_window_layers.
  json q = {{"model_type", "qwen2_moe"}, {"hidden_size", 2048}, {"num_attention_heads", 16},
            {"num_hidden_layers", 8}, {"use_sliding_window", true}, {"sliding_window", 512},
            {"max_window_layers", 5}};
  auto m = peal::model_positions_from_hf(q);
  for (int i = 0; i < 8; ++i) {
    INFO("layer " << i);
    const bool slides = i % 2 == 0 && i < 5;
    CHECK((m.layers[std::size_t(i)].attention == peal::LayerAttention::Sliding) == slides);
    if (slides) CHECK(m.layers[std::size_t(i)].sliding_window == 512);
  }
  q["use_sliding_window"] = false;
  for (const auto& L : peal::model_positions_from_hf(q).layers)
    CHECK(L.attention == peal::LayerAttention::Full);

  // ChatGLM: the first half of kv_channels rotates, interleaved unless original_rope is false,
  // base 10000 * rope_ratio (chatglm3-6b-32k: rope_ratio 50).
  json g = {{"model_type", "chatglm"}, {"hidden_size", 4096}, {"num_attention_heads", 32},
            {"num_layers", 28}, {"kv_channels", 128}, {"original_rope", true}};
  m = peal::model_positions_from_hf(g);
  REQUIRE(m.layers.size() == 28);
  CHECK(m.layers[0].qk_head_dim == 128);
  CHECK(peal::rope_rotary_dim(m.layers[0].rope) == 64);
  CHECK(m.layers[0].rope.layout == peal::Layout::Interleaved);
  CHECK(m.layers[0].rope.rope_theta == 1e4);
  g["rope_ratio"] = 50;
  g["original_rope"] = false;
  m = peal::model_positions_from_hf(g);
  CHECK(m.layers[0].rope.rope_theta == 5e5);
  CHECK(m.layers[0].rope.layout == peal::Layout::HalfSplit);
  CHECK(m.not_modelled.empty());
  // rope_ratio means nothing to a Llama: listed, not silently passed.
  json l = {{"model_type", "llama"}, {"hidden_size", 4096}, {"num_attention_heads", 32},
            {"rope_ratio", 50}};
  const auto ml = peal::model_positions_from_hf(l);
  bool listed = false;
  for (const auto& n : ml.not_modelled) listed = listed || n.key == "rope_ratio";
  CHECK(listed);
  CHECK(ml.layers[0].rope.rope_theta == 1e4);

  // Baichuan: 7B (hidden 4096) rotates, 13B (hidden 5120) uses ALiBi.
  json b = {{"model_type", "baichuan"}, {"hidden_size", 4096}, {"num_attention_heads", 32},
            {"num_hidden_layers", 32}};
  CHECK(peal::model_positions_from_hf(b).layers[0].encoding == peal::LayerEncoding::Rope);
  b["hidden_size"] = 5120;
  b["num_attention_heads"] = 40;
  CHECK(peal::model_positions_from_hf(b).layers[0].encoding == peal::LayerEncoding::Alibi);

  // Nemotron-H: attention only at '*', no positional encoding; without the pattern, refused.
  json h = {{"model_type", "nemotron_h"}, {"hidden_size", 4096}, {"num_attention_heads", 32},
            {"head_dim", 128}, {"num_hidden_layers", 6}, {"hybrid_override_pattern", "M-M*-E"}};
  m = peal::model_positions_from_hf(h);
  REQUIRE(m.layers.size() == 6);
  for (int i = 0; i < 6; ++i) {
    INFO("layer " << i);
    CHECK(m.layers[std::size_t(i)].encoding == peal::LayerEncoding::None);
    CHECK((m.layers[std::size_t(i)].attention == peal::LayerAttention::Full) == (i == 3));
  }
  CHECK(m.layers[3].qk_head_dim == 128);
  h["hybrid_override_pattern"] = "M-M*";
  CHECK_THROWS_WITH(peal::model_positions_from_hf(h), Catch::Contains("num_hidden_layers"));
  h.erase("hybrid_override_pattern");
  CHECK_THROWS_WITH(peal::model_positions_from_hf(h), Catch::Contains("hybrid_override_pattern"));

  // DeciLM (Nemotron-NAS): block_configs remove attention; without them, refused by default.
  json d = {{"model_type", "nemotron-nas"}, {"hidden_size", 1024}, {"num_attention_heads", 8},
            {"num_hidden_layers", 3},
            {"block_configs", json::array({{{"attention", {{"no_op", false}}}},
                                           {{"attention", {{"no_op", true}}}},
                                           {{"attention", {{"replace_with_linear", true}}}}})}};
  m = peal::model_positions_from_hf(d);
  CHECK(m.layers[0].encoding == peal::LayerEncoding::Rope);
  CHECK(m.layers[1].attention == peal::LayerAttention::Linear);
  CHECK(m.layers[2].attention == peal::LayerAttention::Linear);
  d.erase("block_configs");
  CHECK_THROWS_WITH(peal::model_positions_from_hf(d), Catch::Contains("block_configs"));
  peal::ModelReadOptions allow;
  allow.allow_not_modelled = true;
  CHECK(peal::model_positions_from_hf(d, allow).not_modelled.at(0).changes_attention);

  // Features peal does not model are refused unless allowed: DeepSeek V3.2's sparse attention,
  // Qwen-1's dynamic NTK and logn scaling (class defaults true).
  json v32 = json::parse(kDeepSeekV3);
  v32["model_type"] = "deepseek_v32";
  CHECK_THROWS_WITH(peal::model_positions_from_hf(v32), Catch::Contains("Sparse Attention"));
  const auto mv = peal::model_positions_from_hf(v32, allow);
  CHECK(mv.layers[0].rotary_offset == 128);
  json qw = {{"model_type", "qwen"}, {"hidden_size", 2048}, {"num_attention_heads", 16},
             {"kv_channels", 128}, {"num_hidden_layers", 24}};
  CHECK_THROWS_WITH(peal::model_positions_from_hf(qw), Catch::Contains("use_dynamic_ntk"));
  qw["use_dynamic_ntk"] = false;
  qw["use_logn_attn"] = false;
  m = peal::model_positions_from_hf(qw);
  CHECK(peal::rope_rotary_dim(m.layers[0].rope) == 128);
  CHECK(m.layers[0].rope.layout == peal::Layout::HalfSplit);
}
