// Reading RoPE configurations from Hugging Face config.json files (include/peal/models/hf_config.hpp).
// The JSON below is written in the style of published model configs (keys, nesting, number
// formats); the LongRoPE factor lists are synthetic (float32 values written as doubles, in the
// shape of Phi-3's), not copies of a model's.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <peal/models/hf_config.hpp>
#include <peal/peal.hpp>
#include <string>

#include "reference/preset_reference.hpp"
#include "tolerances.hpp"

namespace {

using peal_test::Tol;

using json = nlohmann::json;
using LD = long double;

const char* kLlama31 = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

const char* kQwen2Yarn = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 3584,
  "initializer_range": 0.02,
  "intermediate_size": 18944,
  "max_position_embeddings": 32768,
  "max_window_layers": 28,
  "model_type": "qwen2",
  "num_attention_heads": 28,
  "num_hidden_layers": 28,
  "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 131072,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 152064,
  "rope_scaling": {
    "factor": 4.0,
    "original_max_position_embeddings": 32768,
    "type": "yarn"
  }
})";

const char* kPhi3 = R"({
  "_name_or_path": "Phi-3-mini-128k-instruct",
  "architectures": ["Phi3ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "embd_pdrop": 0.0,
  "eos_token_id": 32000,
  "hidden_act": "silu",
  "hidden_size": 3072,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "model_type": "phi3",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 32,
  "original_max_position_embeddings": 4096,
  "pad_token_id": 32000,
  "resid_pdrop": 0.0,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "long_factor": [
      1.0700000524520874, 1.149999976158142, 1.399999976158142, 1.809999942779541,
      2.359999895095825, 3.059999942779541, 3.880000114440918, 4.840000152587891,
      5.920000076293945, 7.110000133514404, 8.399999618530273, 9.800000190734863,
      11.279999732971191, 12.850000381469727, 14.489999771118164, 16.209999084472656,
      17.979999542236328, 19.809999465942383, 21.690000534057617, 23.610000610351562,
      25.559999465942383, 27.530000686645508, 29.530000686645508, 31.530000686645508,
      33.540000915527344, 35.540000915527344, 37.540000915527344, 39.5099983215332,
      41.459999084472656, 43.380001068115234, 45.2599983215332, 47.09000015258789,
      48.86000061035156, 50.58000183105469, 52.220001220703125, 53.790000915527344,
      55.27000045776367, 56.66999816894531, 57.959999084472656, 59.150001525878906,
      60.22999954223633, 61.189998626708984, 62.0099983215332, 62.709999084472656,
      63.2599983215332, 63.66999816894531, 63.91999816894531, 64.0
    ],
    "short_factor": [
      1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0499999523162842,
      1.059999942779541, 1.059999942779541, 1.059999942779541, 1.0700000524520874,
      1.0700000524520874, 1.0800000429153442, 1.0800000429153442, 1.090000033378601,
      1.100000023841858, 1.1100000143051147, 1.1100000143051147, 1.1200000047683716,
      1.1299999952316284, 1.1399999856948853, 1.149999976158142, 1.159999966621399,
      1.1699999570846558, 1.1799999475479126, 1.190000057220459, 1.2000000476837158,
      1.2000000476837158, 1.2100000381469727, 1.2200000286102295, 1.2300000190734863,
      1.2400000095367432, 1.25, 1.2599999904632568, 1.2699999809265137,
      1.2799999713897705, 1.2899999618530273, 1.2899999618530273, 1.2999999523162842,
      1.309999942779541, 1.3200000524520874, 1.3200000524520874, 1.3300000429153442,
      1.3300000429153442, 1.340000033378601, 1.340000033378601, 1.340000033378601,
      1.350000023841858, 1.350000023841858, 1.350000023841858, 1.350000023841858
    ],
    "type": "longrope"
  },
  "rope_theta": 10000.0,
  "sliding_window": 262144,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.2",
  "use_cache": true,
  "vocab_size": 32064
})";

const char* kNeoX = R"({
  "architectures": ["GPTNeoXForCausalLM"],
  "bos_token_id": 0,
  "eos_token_id": 0,
  "hidden_act": "gelu_fast",
  "hidden_size": 6144,
  "initializer_range": 0.02,
  "intermediate_size": 24576,
  "layer_norm_eps": 1e-05,
  "max_position_embeddings": 2048,
  "model_type": "gpt_neox",
  "num_attention_heads": 64,
  "num_hidden_layers": 44,
  "rotary_emb_base": 10000,
  "rotary_pct": 0.25,
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "transformers_version": "4.24.0",
  "use_cache": true,
  "use_parallel_residual": true,
  "vocab_size": 50432
})";

std::vector<LD> list_of(const json& j, const char* key) {
  std::vector<LD> v;
  for (const auto& x : j.at("rope_scaling").at(key)) v.push_back(x.get<double>());
  return v;
}

// peal and the reference evaluate the published formulas in long double along their own
// paths, at most four operations each (pow, the scaling, the ramp): roundings(8).
template <class S>
void same_frequencies(const peal::RopeEncoding<S>& e, const peal_ref::RopeRef& ref) {
  REQUIRE(e.rotary_dim() == ref.rotary_dim);
  REQUIRE(e.inv_freq().size() == ref.inv_freq.size());
  for (std::size_t i = 0; i < ref.inv_freq.size(); ++i)
    REQUIRE(std::fabs(e.inv_freq()[i] - ref.inv_freq[i]) <=
            Tol<LD>::roundings(8) * ref.inv_freq[i]);
  REQUIRE(std::fabs(e.attention_factor_long() - ref.attention_factor) <=
          Tol<LD>::roundings(8) * ref.attention_factor);
}

peal::RopeConfig parse(const char* s) { return peal::rope_config_from_hf(json::parse(s)); }

}  // namespace

TEST_CASE("hf_config: Llama 3.1 (llama3 scaling)", "[hf_config]") {
  const auto c = parse(kLlama31);
  REQUIRE(c.head_dim == 128);
  REQUIRE(c.rope_theta == 500000.0);
  REQUIRE(c.partial_rotary_factor == 1.0);
  REQUIRE(c.max_position_embeddings == 131072.0);
  REQUIRE(c.layout == peal::Layout::HalfSplit);
  REQUIRE(c.scaling.type == peal::RopeType::Llama3);
  REQUIRE(c.scaling.factor == 8.0);
  REQUIRE(c.scaling.low_freq_factor == 1.0);
  REQUIRE(c.scaling.high_freq_factor == 4.0);
  REQUIRE(c.scaling.original_max_position_embeddings == 8192.0);
  same_frequencies(peal::rope<float>(c),
                   peal_ref::rope_llama3(128, 500000.0L, 1.0, 8.0L, 1.0L, 4.0L, 8192.0L));
}

TEST_CASE("hf_config: Qwen2 YaRN (legacy \"type\" key, current factor semantics)", "[hf_config]") {
  const auto c = parse(kQwen2Yarn);
  REQUIRE(c.head_dim == 128);  // 3584 / 28
  REQUIRE(c.scaling.type == peal::RopeType::Yarn);
  const auto e = peal::rope<double>(c);
  // factor 4 is used as given (not max / original = 1: transformers issue #38224).
  same_frequencies(e, peal_ref::rope_yarn(128, 1e6L, 1.0, 4.0L, 32768.0L));
  REQUIRE(std::abs(e.attention_factor() - 1.138629) <= Tol<double>::printed(6));  // docs value
}

TEST_CASE("hf_config: Phi-3 LongRoPE (top-level original_max_position_embeddings)", "[hf_config]") {
  const json j = json::parse(kPhi3);
  const auto c = peal::rope_config_from_hf(j);
  REQUIRE(c.head_dim == 96);
  REQUIRE(c.scaling.type == peal::RopeType::LongRope);
  REQUIRE(c.scaling.original_max_position_embeddings == 4096.0);
  REQUIRE(c.scaling.short_factor->size() == 48);
  REQUIRE_FALSE(c.scaling.factor.has_value());
  for (double L : {100.0, 4096.0, 4097.0, 131072.0}) {
    const auto e = peal::rope<float>(c, L);
    same_frequencies(e,
                     peal_ref::rope_longrope(96, 10000.0L, 1.0, list_of(j, "short_factor"),
                                             list_of(j, "long_factor"), 4096.0L, 131072.0L, LD(L)));
    REQUIRE(std::abs(e.attention_factor() - 1.190238) <= Tol<double>::printed(6));
  }
  // The legacy "su" spelling.
  json su = j;
  su["rope_scaling"]["type"] = "su";
  REQUIRE(peal::rope_config_from_hf(su).scaling.type == peal::RopeType::LongRope);
  // Without the length the table cannot be chosen.
  REQUIRE_THROWS_WITH(peal::rope<float>(c), Catch::Contains("seq_len"));
}

TEST_CASE("hf_config: GPT-NeoX-20B partial rotary (rotary_pct, rotary_emb_base)", "[hf_config]") {
  const auto c = parse(kNeoX);
  REQUIRE(c.head_dim == 96);
  REQUIRE(c.partial_rotary_factor == 0.25);
  REQUIRE(c.rope_theta == 10000.0);
  REQUIRE(c.scaling.type == peal::RopeType::Default);
  const auto e = peal::rope<float>(c);
  REQUIRE(e.rotary_dim() == 24);
  same_frequencies(e, peal_ref::rope_default(96, 10000.0L, 0.25));
}

TEST_CASE("hf_config: other spellings (head_dim, GPT-J, dynamic, v5 rope_parameters)",
          "[hf_config]") {
  // Explicit head_dim wins over hidden_size / heads (Gemma, Qwen3 style); null means unset.
  auto c = parse(R"({"hidden_size": 2048, "num_attention_heads": 16, "head_dim": 256,
                     "rope_theta": 10000.0, "rope_scaling": null})");
  REQUIRE(c.head_dim == 256);
  c = parse(R"({"hidden_size": 2048, "num_attention_heads": 16, "head_dim": null})");
  REQUIRE(c.head_dim == 128);
  REQUIRE(c.rope_theta == 10000.0);  // default
  // GPT-J: absolute rotary_dim, interleaved (rotate_every_two).
  c = parse(R"({"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64,
                "n_positions": 2048})");
  REQUIRE(c.head_dim == 256);
  REQUIRE(c.layout == peal::Layout::Interleaved);
  REQUIRE(peal::rope<double>(c).rotary_dim() == 64);
  REQUIRE(c.max_position_embeddings == 2048.0);
  // Layout override.
  REQUIRE(peal::rope_config_from_hf(json::parse(kLlama31), peal::Layout::Interleaved).layout ==
          peal::Layout::Interleaved);
  // Legacy dynamic / linear.
  c = parse(R"({"hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 4096,
                "rope_scaling": {"type": "dynamic", "factor": 2.0}})");
  REQUIRE(c.scaling.type == peal::RopeType::Dynamic);
  same_frequencies(peal::rope<double>(c, 8192),
                   peal_ref::rope_dynamic(128, 10000.0L, 1.0, 2.0L, 4096.0L, 8192.0L));
  c = parse(R"({"hidden_size": 4096, "num_attention_heads": 32,
                "rope_scaling": {"rope_type": "linear", "factor": 4}})");
  same_frequencies(peal::rope<double>(c), peal_ref::rope_linear(128, 10000.0L, 1.0, 4.0L));
  // DeepSeek-style YaRN fields.
  c = parse(R"({"head_dim": 64, "rope_theta": 10000, "max_position_embeddings": 163840,
                "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1,
                                 "mscale": 1.0, "mscale_all_dim": 1.0,
                                 "original_max_position_embeddings": 4096, "truncate": false}})");
  REQUIRE(c.scaling.truncate == false);
  same_frequencies(peal::rope<double>(c), peal_ref::rope_yarn(64, 10000.0L, 1.0, 40.0L, 4096.0L,
                                                              32.0L, 1.0L, false, 1.0L, 1.0L));
  // transformers v5: rope_parameters holding the type and theta.
  c = parse(R"({"hidden_size": 1024, "num_attention_heads": 8,
                "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}})");
  REQUIRE(c.rope_theta == 1e6);
  REQUIRE(c.scaling.type == peal::RopeType::Default);
}

TEST_CASE("hf_config: M-RoPE (Qwen2-VL legacy type, Qwen3-VL text_config, interleaved)",
          "[hf_config][mrope]") {
  // Qwen2-VL-7B-Instruct's shape: top-level language keys, "type": "mrope".
  auto c = parse(R"({"model_type": "qwen2_vl", "hidden_size": 3584, "num_attention_heads": 28,
                     "rope_theta": 1000000.0, "max_position_embeddings": 32768,
                     "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
                     "vision_config": {"depth": 32, "embed_dim": 1280}})");
  REQUIRE(c.head_dim == 128);
  REQUIRE(c.scaling.type == peal::RopeType::Default);
  REQUIRE(c.scaling.mrope_section == std::vector<int>{16, 24, 24});
  REQUIRE_FALSE(c.scaling.mrope_interleaved);
  const auto m = peal::mrope<double>(c);
  REQUIRE(m.pair_axis()[15] == 0);
  REQUIRE(m.pair_axis()[16] == 1);
  REQUIRE(m.pair_axis()[40] == 2);
  REQUIRE_THROWS_WITH(peal::rope<double>(c), Catch::Contains("mrope"));
  // Qwen3-VL's shape: everything under text_config, rope_type default + interleaved.
  c = parse(R"({"model_type": "qwen3_vl", "architectures": ["Qwen3VLForConditionalGeneration"],
                "text_config": {"head_dim": 128, "hidden_size": 4096, "num_attention_heads": 32,
                                "rope_theta": 5000000, "max_position_embeddings": 262144,
                                "rope_scaling": {"mrope_interleaved": true,
                                                 "mrope_section": [24, 20, 20],
                                                 "rope_type": "default"}},
                "vision_config": {"depth": 27}})");
  REQUIRE(c.rope_theta == 5e6);
  REQUIRE(c.scaling.mrope_interleaved);
  REQUIRE(peal::mrope<double>(c).pair_axis()[1] == 1);
  // Sections that do not sum to rotary_dim / 2, or are not integers, name the key.
  REQUIRE_THROWS_WITH(parse(R"({"head_dim": 128, "rope_scaling": {"type": "mrope",
                                "mrope_section": [16, 24, 16]}})"),
                      Catch::Contains("mrope_section") && Catch::Contains("sums to 56"));
  REQUIRE_THROWS_WITH(parse(R"({"head_dim": 128, "rope_scaling": {"type": "mrope",
                                "mrope_section": [16, 24.5, 23.5]}})"),
                      Catch::Contains("integers"));
  REQUIRE_THROWS_WITH(parse(R"({"head_dim": 128, "rope_scaling": {"rope_type": "default",
                                "mrope_interleaved": true}})"),
                      Catch::Contains("without mrope_section"));
}

TEST_CASE("hf_config: errors", "[hf_config][errors]") {
  using peal::invalid_argument;
  // Unknown scaling type.
  REQUIRE_THROWS_WITH(parse(R"({"head_dim": 128, "rope_scaling": {"rope_type": "mrope",
                                "mrope_section": [16, 24, 24]}})"),
                      Catch::Contains("unknown rope_type \"mrope\""));
  REQUIRE_THROWS_WITH(parse(R"({"head_dim": 128, "rope_scaling": {"type": "ntk-by-parts",
                                "factor": 2.0}})"),
                      Catch::Contains("unknown rope_type"));
  // Missing required fields.
  json l = json::parse(kLlama31);
  l["rope_scaling"].erase("low_freq_factor");
  REQUIRE_THROWS_WITH(peal::rope_config_from_hf(l), Catch::Contains("low_freq_factor"));
  l = json::parse(kLlama31);
  l["rope_scaling"].erase("original_max_position_embeddings");
  REQUIRE_THROWS_WITH(peal::rope_config_from_hf(l),
                      Catch::Contains("original_max_position_embeddings"));
  json p = json::parse(kPhi3);
  p["rope_scaling"].erase("long_factor");
  REQUIRE_THROWS_WITH(peal::rope_config_from_hf(p), Catch::Contains("long_factor"));
  p = json::parse(kPhi3);
  p["rope_scaling"]["short_factor"].erase(0);
  REQUIRE_THROWS_WITH(peal::rope_config_from_hf(p), Catch::Contains("47 entries"));
  REQUIRE_THROWS_WITH(parse(R"({"head_dim": 128, "rope_scaling": {"type": "linear"}})"),
                      Catch::Contains("factor"));
  REQUIRE_THROWS_WITH(parse(R"({"head_dim": 128, "rope_scaling": {"factor": 2.0}})"),
                      Catch::Contains("neither \"rope_type\" nor \"type\""));
  REQUIRE_THROWS_WITH(parse(R"({"num_attention_heads": 32})"), Catch::Contains("head_dim"));
  // Wrong value types and ranges.
  REQUIRE_THROWS_WITH(parse(R"({"head_dim": 128, "rope_scaling": {"type": "linear",
                                "factor": "4"}})"),
                      Catch::Contains("rope_scaling.factor must be a number"));
  REQUIRE_THROWS_AS(parse(R"({"head_dim": 128, "rope_scaling": "yarn"})"), invalid_argument);
  REQUIRE_THROWS_AS(parse(R"({"head_dim": 127})"), invalid_argument);  // odd rotary dim
  REQUIRE_THROWS_AS(parse(R"({"head_dim": 128.5})"), invalid_argument);
  REQUIRE_THROWS_AS(parse(R"({"head_dim": 128, "rope_theta": 1.0})"), invalid_argument);
  REQUIRE_THROWS_AS(parse(R"({"head_dim": 128, "rope_theta": -5})"), invalid_argument);
  REQUIRE_THROWS_AS(parse(R"({"head_dim": 128, "partial_rotary_factor": 1.5})"), invalid_argument);
  REQUIRE_THROWS_AS(parse(R"({"head_dim": 128, "rope_scaling": {"type": "yarn", "factor": 4,
                                "original_max_position_embeddings": 4096, "truncate": 1}})"),
                    invalid_argument);
  REQUIRE_THROWS_AS(parse(R"({"head_dim": 128, "rope_scaling": {"type": "linear",
                                "factor": 0.5}})"),
                    invalid_argument);
  REQUIRE_THROWS_AS(peal::rope_config_from_hf(json::array()), invalid_argument);
}

TEST_CASE("hf_config: reading a file", "[hf_config]") {
  const std::string path =
      (std::filesystem::temp_directory_path() / "peal_test_hf_config_tmp.json").string();
  {
    std::ofstream out(path);
    out << kLlama31;
  }
  const auto c = peal::rope_config_from_hf_file(path);
  REQUIRE(c.scaling.type == peal::RopeType::Llama3);
  {
    std::ofstream out(path);
    out << "{ \"head_dim\": 128, ";  // truncated
  }
  REQUIRE_THROWS_WITH(peal::rope_config_from_hf_file(path), Catch::Contains("not valid JSON"));
  std::remove(path.c_str());
  REQUIRE_THROWS_WITH(peal::rope_config_from_hf_file("/nonexistent/dir/config.json"),
                      Catch::Contains("cannot open"));
}

// ---- Resource bounds: every size read from a file is checked before anything is built ----
// (preset_max_head_dim = 65536, factor lists <= 32768 entries, lengths <= 2^53:
// docs/presets.md §12, "Limits"). {"head_dim": 1073741824} used to take 150 s and 8.2 GB.
TEST_CASE("hf_config: sizes read from a file are bounded before allocating",
          "[hf_config][errors][limits]") {
  using Catch::Contains;
  // head_dim, both sides of the limit.
  REQUIRE_THROWS_WITH(parse(R"({"head_dim": 131072})"), Contains("head_dim") && Contains("65536"));
  REQUIRE(parse(R"({"head_dim": 65536})").head_dim == 65536);
  REQUIRE_THROWS_WITH(parse(R"({"head_dim": 65537, "partial_rotary_factor": 0.5})"),
                      Contains("65536"));
  // The reported inputs fail at once (they reach no table).
  REQUIRE_THROWS_WITH(parse(R"({"head_dim": 1073741824})"), Contains("65536"));
  REQUIRE_THROWS_WITH(parse(R"({"head_dim": 200000000})"), Contains("65536"));
  REQUIRE_THROWS_WITH(parse(R"({"head_dim": 9e15})"), Contains("65536"));
  // The derived hidden_size // num_attention_heads (also d_model), both sides.
  REQUIRE_THROWS_WITH(parse(R"({"hidden_size": 262144, "num_attention_heads": 2})"),
                      Contains("hidden_size // num_attention_heads") && Contains("65536"));
  REQUIRE(parse(R"({"hidden_size": 131073, "num_attention_heads": 2})").head_dim == 65536);
  REQUIRE_THROWS_WITH(parse(R"({"d_model": 131072, "n_head": 1})"), Contains("65536"));
  REQUIRE(parse(R"({"d_model": 1024, "n_head": 8})").head_dim == 128);
  REQUIRE_THROWS_WITH(parse(R"({"hidden_size": 7, "num_attention_heads": 8})"),
                      Contains("head_dim") && Contains("got 0"));

  // Factor lists: at most preset_max_head_dim / 2 = 32768 entries, checked before the copy.
  auto longrope = [](std::size_t n_short, std::size_t n_long, int head_dim) {
    json j = {{"head_dim", head_dim},
              {"max_position_embeddings", 131072},
              {"rope_scaling",
               {{"type", "longrope"},
                {"original_max_position_embeddings", 4096},
                {"short_factor", std::vector<double>(n_short, 1.0)},
                {"long_factor", std::vector<double>(n_long, 2.0)}}}};
    return j;
  };
  REQUIRE_THROWS_WITH(peal::rope_config_from_hf(longrope(32769, 64, 128)),
                      Contains("rope_scaling.short_factor") && Contains("32768"));
  REQUIRE_THROWS_WITH(peal::rope_config_from_hf(longrope(64, 40000, 128)),
                      Contains("rope_scaling.long_factor") && Contains("32768"));
  const auto at_limit = peal::rope_config_from_hf(longrope(32768, 32768, 65536));
  REQUIRE(at_limit.scaling.short_factor->size() == 32768);
  REQUIRE(peal::rope<float>(at_limit, 10).rotary_dim() == 65536);

  // Lengths: at most 2^53 (exact integers in double), in every place they are read.
  const double two53 = 9007199254740992.0;
  REQUIRE(parse(R"({"head_dim": 128, "max_position_embeddings": 9007199254740992})")
              .max_position_embeddings == two53);
  REQUIRE_THROWS_WITH(parse(R"({"head_dim": 128, "max_position_embeddings": 1.8e16})"),
                      Contains("max_position_embeddings") && Contains("2^53"));
  REQUIRE_THROWS_WITH(parse(R"({"head_dim": 128, "n_positions": 1e300})"),
                      Contains("max_position_embeddings") && Contains("2^53"));
  REQUIRE_THROWS_WITH(parse(R"({"head_dim": 128, "original_max_position_embeddings": 1e300})"),
                      Contains("original_max_position_embeddings") && Contains("2^53"));
  REQUIRE_THROWS_WITH(parse(R"({"head_dim": 128, "rope_scaling": {"type": "yarn", "factor": 4,
                                "original_max_position_embeddings": 1e20}})"),
                      Contains("original_max_position_embeddings") && Contains("2^53"));
}

TEST_CASE("hf_config: LongRoPE factors that overflow omega in double are rejected",
          "[hf_config][errors][limits]") {
  using Catch::Contains;
  // omega_0 = 1 / 1e-320 = 1e320: finite in long double, inf as the stored double. It used to
  // build an encoding whose A(0) threw and whose encoded vectors were NaN. Now the config
  // is rejected when read (validate_rope_config checks the frequencies).
  const char* tiny = R"({"head_dim": 4, "max_position_embeddings": 131072,
      "rope_scaling": {"type": "longrope", "original_max_position_embeddings": 4096,
                       "short_factor": [1e-320, 1], "long_factor": [1, 1]}})";
  REQUIRE_THROWS_WITH(parse(tiny), Contains("pair 0") && Contains("short_factor[0]"));
  // 1e-300: omega = 1e300 is a finite double, but omega * t overflows from t = 2 on. The
  // long list is checked too, whatever seq_len selects (HF switches to it at L0).
  const char* small = R"({"head_dim": 4, "max_position_embeddings": 131072,
      "rope_scaling": {"type": "longrope", "original_max_position_embeddings": 4096,
                       "short_factor": [1, 1], "long_factor": [1, 1e-300]}})";
  REQUIRE_THROWS_WITH(parse(small), Contains("pair 1") && Contains("long_factor[1]"));
  // The same lists in a RopeConfig built in code: rope() says the same for any seq_len.
  auto c = parse(R"({"head_dim": 4, "max_position_embeddings": 131072,
      "rope_scaling": {"type": "longrope", "original_max_position_embeddings": 4096,
                       "short_factor": [1, 1], "long_factor": [1, 1]}})");
  REQUIRE_NOTHROW(peal::rope<double>(c, 10));
  (*c.scaling.short_factor)[0] = 1e-320;
  REQUIRE_THROWS_WITH(peal::rope<float>(c, 10), Contains("short_factor[0]"));
  REQUIRE_THROWS_WITH(peal::rope<double>(c, 1e5), Contains("short_factor[0]"));
}

TEST_CASE("hf_config: files larger than hf_config_max_file_bytes are not read",
          "[hf_config][errors][limits]") {
  STATIC_REQUIRE(peal::hf_config_max_file_bytes == std::size_t(16) << 20);
  const std::string path =
      (std::filesystem::temp_directory_path() / "peal_test_hf_config_big.json").string();
  const std::string body = R"({"head_dim": 128})";
  for (std::size_t size : {peal::hf_config_max_file_bytes, peal::hf_config_max_file_bytes + 1}) {
    {
      std::ofstream out(path, std::ios::binary);
      out << body << std::string(size - body.size(), ' ');  // valid JSON padded with blanks
    }
    CAPTURE(size);
    if (size <= peal::hf_config_max_file_bytes)
      REQUIRE(peal::rope_config_from_hf_file(path).head_dim == 128);
    else
      REQUIRE_THROWS_WITH(peal::rope_config_from_hf_file(path),
                          Catch::Contains("hf_config_max_file_bytes"));
  }
  std::remove(path.c_str());
}
