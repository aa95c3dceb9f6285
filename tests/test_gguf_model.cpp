// The model-level GGUF reader (model_positions_from_gguf, include/peal/models/gguf_config.hpp): files
// written byte by byte by tests/gguf_writer.hpp with the keys llama.cpp's converter writes for
// the models named, checked layer by layer against what the config.json of the same model
// gives (model_positions_from_hf, tests/test_model_positions.cpp). This TU needs no JSON, so
// the config.json side is stated as numbers from the formulas of docs/models.md, with the
// corresponding config.json case named at each test.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <peal/models/gguf_config.hpp>
#include <peal/models/model_positions.hpp>
#include <string>
#include <vector>

#include "gguf_writer.hpp"
#include "tolerances.hpp"

namespace {

using namespace peal_test;
using LD = long double;

LD rel(LD a, LD b) {
  const LD s = std::max(std::fabs(a), std::fabs(b));
  return s == 0 ? 0 : std::fabs(a - b) / s;
}

peal::ModelPositions read(const GgufBuilder& g, const peal::ModelReadOptions& o = {}) {
  const Bytes b = g.bytes();
  return peal::model_positions_from_gguf_bytes(b.data(), b.size(), "model.gguf", o);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const peal::invalid_argument& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("not a peal::invalid_argument: " << e.what());
  }
  FAIL("no exception");
  return {};
}

// The frequencies and attention factor of two RoPE configs agree.
void same_frequencies(const peal::RopeConfig& a, const peal::RopeConfig& b, double seq_len) {
  const peal::RopeFrequencies fa = peal::rope_frequencies(a, seq_len);
  const peal::RopeFrequencies fb = peal::rope_frequencies(b, seq_len);
  CHECK(fa.rotary_dim == fb.rotary_dim);
  CHECK(rel(fa.attention_factor, fb.attention_factor) <= Tol<LD>::roundings(8));
  REQUIRE(fa.inv_freq.size() == fb.inv_freq.size());
  for (std::size_t i = 0; i < fa.inv_freq.size(); ++i)
    CHECK(rel(fa.inv_freq[i], fb.inv_freq[i]) <= Tol<LD>::roundings(8));
}

// DeepSeek-V3 as convert_hf_to_gguf.py's DeepseekV2Model writes it; `mla`: the current
// converter (key_length = kv_lora_rank + rope dim, the head sizes in *_mla), else the older one.
GgufBuilder deepseek_v3(bool mla) {
  GgufBuilder g;
  g.str("general.architecture", "deepseek2");
  g.str("general.name", "DeepSeek V3");
  g.u32("deepseek2.block_count", 61);
  g.u32("deepseek2.context_length", 163840);
  g.u32("deepseek2.embedding_length", 7168);
  g.u32("deepseek2.feed_forward_length", 18432);
  g.u32("deepseek2.attention.head_count", 128);
  g.u32("deepseek2.attention.head_count_kv", mla ? 1 : 128);
  g.f32("deepseek2.rope.freq_base", 10000.0f);
  g.f32("deepseek2.attention.layer_norm_rms_epsilon", 1e-6f);
  g.u32("deepseek2.leading_dense_block_count", 3);
  g.u32("deepseek2.attention.q_lora_rank", 1536);
  g.u32("deepseek2.attention.kv_lora_rank", 512);
  if (mla) {
    g.u32("deepseek2.attention.key_length", 576);
    g.u32("deepseek2.attention.value_length", 512);
    g.u32("deepseek2.attention.key_length_mla", 192);
    g.u32("deepseek2.attention.value_length_mla", 128);
  } else {
    g.u32("deepseek2.attention.key_length", 192);
    g.u32("deepseek2.attention.value_length", 128);
  }
  g.u32("deepseek2.rope.dimension_count", 64);
  g.str("deepseek2.rope.scaling.type", "yarn");
  g.f32("deepseek2.rope.scaling.factor", 40.0f);
  g.u32("deepseek2.rope.scaling.original_context_length", 4096);
  g.f32("deepseek2.rope.scaling.yarn_log_multiplier", 0.1f);  // 0.1 * mscale_all_dim
  return g;
}

GgufBuilder gemma3(std::uint32_t layers, std::uint32_t embd, std::uint32_t heads,
                   std::uint32_t key_length) {
  GgufBuilder g;
  g.str("general.architecture", "gemma3");
  g.u32("gemma3.block_count", layers);
  g.u32("gemma3.context_length", 131072);
  g.u32("gemma3.embedding_length", embd);
  g.u32("gemma3.attention.head_count", heads);
  g.u32("gemma3.attention.head_count_kv", 8);
  g.u32("gemma3.attention.key_length", key_length);
  g.u32("gemma3.attention.value_length", key_length);
  g.f32("gemma3.rope.freq_base", 1000000.0f);
  g.u32("gemma3.attention.sliding_window", 1024);
  g.str("gemma3.rope.scaling.type", "linear");
  g.f32("gemma3.rope.scaling.factor", 8.0f);
  return g;
}

GgufBuilder llama4(std::uint32_t layers, std::uint32_t experts) {
  GgufBuilder g;
  g.str("general.architecture", "llama4");
  g.u32("llama4.block_count", layers);
  g.u32("llama4.context_length", 10485760);
  g.u32("llama4.embedding_length", 5120);
  g.u32("llama4.attention.head_count", 40);
  g.u32("llama4.attention.head_count_kv", 8);
  g.u32("llama4.attention.key_length", 128);
  g.u32("llama4.attention.value_length", 128);
  g.u32("llama4.rope.dimension_count", 128);
  g.f32("llama4.rope.freq_base", 500000.0f);
  g.u32("llama4.expert_count", experts);
  g.u32("llama4.expert_used_count", 1);
  g.u32("llama4.interleave_moe_layer_step", 1);
  return g;
}

}  // namespace

// config.json side: tests/test_model_positions.cpp, "model positions: MLA rotates the last
// qk_rope_head_dim coordinates, interleaved" (kDeepSeekV3).
TEST_CASE("gguf model: DeepSeek-V3 (deepseek2, MLA) as its config.json",
          "[gguf_model][mla]") {
  for (bool mla : {true, false}) {
    INFO((mla ? "MLA-converted file" : "older file"));
    const auto m = read(deepseek_v3(mla));
    REQUIRE(m.layers.size() == 61);
    CHECK(m.model_type == "deepseek2");
    CHECK(m.kv_lora_rank == 512);
    CHECK(m.q_lora_rank == 1536);
    // The config.json reader's RoPE of the 64 rotated coordinates.
    peal::RopeConfig want;
    want.head_dim = 64;
    want.rope_theta = 10000;
    want.max_position_embeddings = 163840;
    want.layout = peal::Layout::Interleaved;
    want.scaling.type = peal::RopeType::Yarn;
    want.scaling.factor = 40;
    want.scaling.original_max_position_embeddings = 4096;
    want.scaling.beta_fast = 32;
    want.scaling.beta_slow = 1;
    want.scaling.mscale = 1;
    want.scaling.mscale_all_dim = 1;
    const LD ms = 0.1L * std::log(40.0L) + 1.0L;  // yarn_get_mscale(40, mscale_all_dim 1)
    for (const auto& L : m.layers) {
      CHECK(L.encoding == peal::LayerEncoding::Rope);
      CHECK(L.attention == peal::LayerAttention::Full);
      CHECK(L.qk_head_dim == 192);
      CHECK(L.v_head_dim == 128);
      CHECK(L.rotary_offset == 128);
      CHECK(L.rope.head_dim == 64);
      CHECK(peal::rope_rotary_dim(L.rope) == 64);
      CHECK(L.rope.layout == peal::Layout::Interleaved);
      CHECK_FALSE(L.query_scale);
      // 192^-1/2 (0.1 ln 40 + 1)^2
      CHECK(rel(L.softmax_scale, ms * ms / std::sqrt(192.0L)) <= Tol<double>::roundings(8));
    }
    same_frequencies(m.layers[0].rope, want, 163840);
    CHECK(peal::rope_frequencies(m.layers[0].rope, 163840).attention_factor == 1.0);
    const auto head = peal::rope_head<double>(m.layers[0]);
    CHECK(head.dim() == 192);
    CHECK(m.not_modelled.empty());
  }
}

// config.json side: tests/test_model_positions.cpp, "model positions: Gemma 3 local and global
// layers, class defaults, v5 per-type" (Gemma 3 12B: sliding_window 1024, linear x8, head_dim
// 256, query_pre_attn_scalar 256).
TEST_CASE("gguf model: Gemma 3 local and global layers as its config.json",
          "[gguf_model][gemma3]") {
  const auto m = read(gemma3(48, 3840, 16, 256));
  REQUIRE(m.layers.size() == 48);
  for (int i = 0; i < 48; ++i) {
    const auto& L = m.layers[std::size_t(i)];
    INFO("layer " << i);
    CHECK(L.encoding == peal::LayerEncoding::Rope);
    CHECK(L.qk_head_dim == 256);
    CHECK(rel(L.softmax_scale, 1.0L / 16) <= Tol<double>::roundings(4));
    CHECK(L.qk_norm);
    CHECK(L.rope.layout == peal::Layout::HalfSplit);
    CHECK(L.rotary_offset == 0);
    if ((i + 1) % 6 == 0) {
      CHECK(L.attention == peal::LayerAttention::Full);
      CHECK_FALSE(L.sliding_window);
      CHECK(L.rope.rope_theta == 1e6);
      CHECK(L.rope.scaling.type == peal::RopeType::Linear);
      CHECK(L.rope.scaling.factor == 8.0);
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
  // Gemma 3 27B: query_pre_attn_scalar 168 = hidden_size / num_attention_heads (5376 / 32).
  const auto m27 = read(gemma3(62, 5376, 32, 128));
  REQUIRE(m27.layers.size() == 62);
  CHECK(rel(m27.layers[0].softmax_scale, 1.0L / std::sqrt(168.0L)) <= Tol<double>::roundings(4));
  CHECK(rel(m27.layers[5].softmax_scale, 1.0L / std::sqrt(168.0L)) <= Tol<double>::roundings(4));
  CHECK(m27.layers[0].qk_head_dim == 128);
  // Without a sliding window (llama.cpp: LLAMA_SWA_TYPE_NONE) every layer is full.
  GgufBuilder ns;
  ns.str("general.architecture", "gemma3");
  ns.u32("gemma3.block_count", 6);
  ns.u32("gemma3.embedding_length", 1024);
  ns.u32("gemma3.attention.head_count", 4);
  ns.u32("gemma3.attention.key_length", 256);
  const auto mn = read(ns);
  for (const auto& L : mn.layers) CHECK(L.attention == peal::LayerAttention::Full);
}

// config.json side: tests/test_model_positions.cpp, "model positions: NoPE layers, linear
// layers and query scales" (Llama 4: no_rope_layer_interval 4, attention_chunk_size 8192,
// floor_scale 8192, attn_scale 0.1, use_qk_norm).
TEST_CASE("gguf model: Llama 4 NoPE, chunked layers and temperature as its config.json",
          "[gguf_model][llama4]") {
  const auto m = read(llama4(8, 16));
  REQUIRE(m.layers.size() == 8);
  for (int i = 0; i < 8; ++i) {
    const auto& L = m.layers[std::size_t(i)];
    INFO("layer " << i);
    CHECK(rel(L.softmax_scale, 1.0L / std::sqrt(128.0L)) <= Tol<double>::roundings(4));
    if ((i + 1) % 4 == 0) {
      CHECK(L.encoding == peal::LayerEncoding::None);
      CHECK(L.attention == peal::LayerAttention::Full);
      CHECK_FALSE(L.qk_norm);
      CHECK(L.query_scale.kind == peal::QueryScale::Kind::Llama4Temperature);
      CHECK(L.query_scale.at(8190) == 1.0L);
      CHECK(rel(L.query_scale.at(8191), 1.0L + LD(0.1) * std::log(2.0L)) <= Tol<LD>::roundings(8));
      CHECK(rel(L.query_scale.at(100000), 1.0L + LD(0.1) * std::log(13.0L)) <=
            Tol<LD>::roundings(8));
    } else {
      CHECK(L.encoding == peal::LayerEncoding::Rope);
      CHECK(L.attention == peal::LayerAttention::Chunked);
      CHECK(L.attention_chunk == 8192);
      CHECK(L.qk_norm);
      CHECK_FALSE(L.query_scale);
      CHECK(L.rope.layout == peal::Layout::Interleaved);
      CHECK(L.rope.rope_theta == 500000.0);
      CHECK(peal::rope_rotary_dim(L.rope) == 128);
    }
  }
  // Maverick (128 experts): no qk-norm (llama.cpp use_kq_norm = type != LLM_TYPE_17B_128E).
  CHECK_FALSE(read(llama4(4, 128)).layers[0].qk_norm);
  // sliding_window 0: every layer RoPE, full (llama.cpp "always use rope").
  GgufBuilder g = llama4(4, 0);
  g.u32("llama4.attention.sliding_window", 0);
  for (const auto& L : read(g).layers) {
    CHECK(L.encoding == peal::LayerEncoding::Rope);
    CHECK(L.attention == peal::LayerAttention::Full);
  }
}

TEST_CASE("gguf model: bad input and keys not modelled", "[gguf_model][errors]") {
  // block_count absurd.
  GgufBuilder big = llama4(4, 16);
  big.kvs.clear();
  big.kv_count = 0;
  big.str("general.architecture", "llama4");
  big.u32("llama4.block_count", 1000000000u);
  big.u32("llama4.embedding_length", 5120);
  big.u32("llama4.attention.head_count", 40);
  CHECK(error_of([&] { read(big); }).find("llama4.block_count") != std::string::npos);
  // Layers that differ need block_count.
  GgufBuilder nb;
  nb.str("general.architecture", "gemma3");
  nb.u32("gemma3.embedding_length", 1024);
  nb.u32("gemma3.attention.head_count", 4);
  nb.u32("gemma3.attention.sliding_window", 512);
  CHECK(error_of([&] { read(nb); }).find("gemma3.block_count") != std::string::npos);
  // Layers alike without block_count: one layer, said in a fact.
  GgufBuilder one;
  one.str("general.architecture", "llama");
  one.u32("llama.embedding_length", 4096);
  one.u32("llama.attention.head_count", 32);
  const auto m1 = read(one);
  REQUIRE(m1.layers.size() == 1);
  bool said = false;
  for (const auto& f : m1.facts) said = said || f.source.find("read as one") != std::string::npos;
  CHECK(said);
  // deepseek2: key_length_mla not above the rotary dim.
  GgufBuilder ds = deepseek_v3(true);
  ds.kvs.clear();
  ds.kv_count = 0;
  ds.str("general.architecture", "deepseek2");
  ds.u32("deepseek2.block_count", 2);
  ds.u32("deepseek2.embedding_length", 7168);
  ds.u32("deepseek2.attention.head_count", 128);
  ds.u32("deepseek2.attention.key_length", 576);
  ds.u32("deepseek2.attention.value_length", 512);
  ds.u32("deepseek2.attention.key_length_mla", 64);
  ds.u32("deepseek2.attention.value_length_mla", 128);
  ds.u32("deepseek2.rope.dimension_count", 64);
  CHECK(error_of([&] { read(ds); }).find("key_length_mla") != std::string::npos);
  // Older file: key_length below n_rot (refused by the RoPE mapping).
  GgufBuilder ds2;
  ds2.str("general.architecture", "deepseek2");
  ds2.u32("deepseek2.block_count", 2);
  ds2.u32("deepseek2.attention.key_length", 32);
  ds2.u32("deepseek2.rope.dimension_count", 64);
  CHECK(error_of([&] { read(ds2); }).find("deepseek2.rope.dimension_count") != std::string::npos);
  // A key that changes the RoPE of the sliding layers and is not read: refused, or listed.
  GgufBuilder sw = gemma3(12, 3840, 16, 256);
  sw.f32("gemma3.rope.freq_base_swa", 20000.0f);
  CHECK(error_of([&] { read(sw); }).find("gemma3.rope.freq_base_swa") != std::string::npos);
  peal::ModelReadOptions allow;
  allow.allow_not_modelled = true;
  const auto ms = read(sw, allow);
  REQUIRE(ms.not_modelled.size() == 1);
  CHECK(ms.not_modelled[0].key == "gemma3.rope.freq_base_swa");
  CHECK(ms.not_modelled[0].changes_attention);
  // yarn_log_multiplier outside deepseek2 and rope.scaling.finetuned: listed, not refused.
  GgufBuilder ll = one;
  ll.f32("llama.rope.scaling.yarn_log_multiplier", 0.1f);
  ll.boolean("llama.rope.scaling.finetuned", false);
  const auto ml = read(ll);
  REQUIRE(ml.not_modelled.size() == 2);
  for (const auto& n : ml.not_modelled) CHECK_FALSE(n.changes_attention);
  // The caller's layout wins.
  peal::ModelReadOptions hs;
  hs.layout = peal::Layout::HalfSplit;
  CHECK(read(deepseek_v3(true), hs).layers[0].rope.layout == peal::Layout::HalfSplit);
}

TEST_CASE("gguf model: a key from the file is escaped in the message that names it",
          "[gguf_model][errors][gguf_escape]") {
  // An unread *_swa RoPE key is refused by name; a NUL in the name cut what() short.
  GgufBuilder sw = gemma3(12, 3840, 16, 256);
  sw.f32(std::string("gemma3.rope.freq_base_swa\0\x1b[2J", 30), 20000.0f);
  const std::string e = error_of([&] { read(sw); });
  CHECK(e.find("gemma3.rope.freq_base_swa\\x00\\x1b[2J (20000)") != std::string::npos);
  CHECK(e.find("allow_not_modelled") != std::string::npos);
}
