// Reading a RopeConfig from a Hugging Face config.json (docs/presets.md §1-7). This header
// alone needs nlohmann/json (an optional dependency: link nlohmann_json::nlohmann_json);
// it is not part of <peal/peal.hpp>, include it explicitly.
//
// Keys read (HF names first, then the aliases of the attribute maps of GPT-NeoX / GPT-J
// configs, then transformers v5's rope_parameters):
//   head_dim                 else hidden_size (n_embd, d_model) // num_attention_heads
//                            (n_head); null or 0 counts as unset, as in transformers
//   rope_theta               else rotary_emb_base (GPT-NeoX), rope_parameters.rope_theta;
//                            default 10000
//   partial_rotary_factor    else rotary_pct (GPT-NeoX), rope_parameters.partial_rotary_factor,
//                            rotary_dim / head_dim (GPT-J's absolute rotary_dim); default 1
//   max_position_embeddings  else n_positions
//   rope_scaling             object or null; else rope_parameters (v5). Its type is
//                            "rope_type" or the legacy "type" ("su" = longrope); fields
//                            factor, original_max_position_embeddings, beta_fast, beta_slow,
//                            truncate, mscale, mscale_all_dim, attention_factor,
//                            short_factor, long_factor, low_freq_factor, high_freq_factor;
//                            M-RoPE's mrope_section (integers) and mrope_interleaved, with
//                            Qwen2-VL's legacy "type": "mrope" read as default (mrope.hpp).
//   text_config              a wrapper (gemma3, llama4, mistral3, qwen3_vl, ...) or a config
//                            whose top level has none of head_dim, hidden_size, rope_scaling,
//                            rope_parameters is read from its text_config.
//                            A top-level original_max_position_embeddings (Phi-3) fills the
//                            scaling's when the scaling block has none.
//   rope_scaling.alpha       Hunyuan's dynamic scaling (RopeScaling::alpha).
//
// Two entry points (docs/models.md):
//   model_positions_from_hf  every layer: its encoding (RoPE on which coordinates, M-RoPE,
//                            ALiBi, none) and attention facts, from the keys above plus the
//                            model's conventions (model_conventions.hpp: pairing, rotated
//                            sub-head, class defaults, layer rules, each with its source) and
//                            the per-layer keys (layer_types, sliding_window_pattern,
//                            no_rope_layers, rope_local_base_freq, per-layer-type
//                            rope_parameters, MLA's qk_rope_head_dim, ...).
//   rope_config_from_hf      the RoPE of a config whose layers all have the same one; it
//                            throws, naming model_positions_from_hf, when they differ (Gemma 3,
//                            Llama 4, MLA's sub-head, ...); the overload with a layer type
//                            reads the layers of that type.
// Layout: from the architecture table (Layout::HalfSplit for rotate_half; Interleaved for
// GPT-J, Cohere, GLM-4, ERNIE 4.5, Llama 4, DeepSeek); pass `layout` to override (e.g. for
// Meta-format checkpoints). A key that changes the attention and that peal does not model
// (dual_chunk_attention_config, an unknown rope_scaling field, ...) throws unless
// ModelReadOptions::allow_not_modelled; other positional-looking keys peal does not read are
// listed in ModelPositions::not_modelled.
//
// The result is validated (validate_rope_config): an unknown type, a missing required field,
// a wrong type of value or an out-of-range value throws peal::invalid_argument naming the key.
//
// Limits (rope.hpp, docs/presets.md §12 "Limits"), checked before anything is allocated:
// head_dim (given or derived) <= preset_max_head_dim = 65536, factor lists <= 32768 entries,
// lengths <= preset_max_length = 2^53, every frequency a double pair in [2^-1022, 2^20];
// rope_config_from_hf_file reads at most hf_config_max_file_bytes (16 MiB).
#pragma once

#include <cmath>
#include <cstddef>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "../detail/models/hf_model_reader.hpp"
#include "../errors.hpp"
#include "../layout.hpp"
#include "../presets/mrope.hpp"
#include "../presets/rope.hpp"
#include "model_positions.hpp"

namespace peal {

/// Every layer of a model from its config.json object (docs/models.md): per layer the
/// positional encoding and the attention facts, with where each came from and the keys not
/// modelled. Throws peal::invalid_argument for an invalid config, and for a key that changes
/// the attention that peal cannot model unless options.allow_not_modelled.
inline ModelPositions model_positions_from_hf(const nlohmann::json& cfg,
                                              const ModelReadOptions& options = {}) {
  detail::hf::ModelReader r(options);
  r.read(cfg);
  return std::move(r.out);
}

namespace detail {
namespace hf {
inline RopeConfig single_rope(const ModelPositions& m, const std::string* layer_type) {
  const LayerPositions* first = nullptr;
  std::string types;
  for (const LayerPositions& L : m.layers) {
    if (types.find("\"" + L.layer_type + "\"") == std::string::npos)
      types += (types.empty() ? "\"" : ", \"") + L.layer_type + "\"";
    if (layer_type && L.layer_type != *layer_type) continue;
    if (!first) first = &L;
    if (!same_positions(*first, L))
      fail("hf_config: the layers of this " + m.model_type +
           " config have different positions (" + describe_layers(m)[0] + "; ...): read them with "
           "model_positions_from_hf, or pass the layer type to read (" + types + ")");
  }
  if (!first)
    fail("hf_config: no layer of type \"" + (layer_type ? *layer_type : std::string()) +
         "\" (layer types: " + types + ")");
  if (first->encoding != LayerEncoding::Rope && first->encoding != LayerEncoding::MRope)
    fail(std::string("hf_config: this ") + m.model_type + " config has no RoPE (layers: " +
         to_string(first->encoding) + ")");
  if (first->rotary_offset != 0)
    fail("hf_config: " + m.model_type + " rotates coordinates [" +
         std::to_string(first->rotary_offset) + ", " + std::to_string(first->qk_head_dim) +
         ") of its " + std::to_string(first->qk_head_dim) +
         "-dim q/k head (MLA): read it with model_positions_from_hf and rope_head<S>(layer); "
         "layer.rope is the RoPE of the rotated part (the cached k_pe)");
  return first->rope;
}
}  // namespace hf
}  // namespace detail

/// The RoPE configuration of an HF config.json object (see the header comment for keys),
/// when every layer has the same one; otherwise it throws, naming model_positions_from_hf
/// and the layer types (the overload below reads one of them).
inline RopeConfig rope_config_from_hf(const nlohmann::json& cfg,
                                      std::optional<Layout> layout = std::nullopt) {
  ModelReadOptions o;
  o.layout = layout;
  detail::hf::ModelReader r(o);
  r.read(cfg);
  return detail::hf::single_rope(r.out, nullptr);
}

/// The RoPE configuration of the layers of type layer_type ("full_attention",
/// "sliding_attention", ...), which must all have the same one.
inline RopeConfig rope_config_from_hf(const nlohmann::json& cfg, const std::string& layer_type,
                                      std::optional<Layout> layout = std::nullopt) {
  ModelReadOptions o;
  o.layout = layout;
  detail::hf::ModelReader r(o);
  r.read(cfg);
  return detail::hf::single_rope(r.out, &layer_type);
}

/// Largest file rope_config_from_hf_file reads: 16 MiB (model config.json files are a few
/// kB; the parsed JSON takes several times the file's size in memory).
inline constexpr std::size_t hf_config_max_file_bytes = std::size_t(16) << 20;

namespace detail {
namespace hf {
/// The JSON of the file at path, at most hf_config_max_file_bytes long.
inline nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) detail::fail("hf_config: cannot open \"" + path + "\"");
  // Chunks, stopping past the limit (works for pipes too, whose size is not known).
  std::string text;
  std::vector<char> chunk(std::size_t(1) << 16);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    text.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
    if (text.size() > hf_config_max_file_bytes)
      detail::fail("hf_config: \"" + path + "\" is larger than " +
                   std::to_string(hf_config_max_file_bytes) + " bytes (hf_config_max_file_bytes)");
  }
  if (in.bad()) detail::fail("hf_config: cannot read \"" + path + "\"");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    detail::fail("hf_config: \"" + path + "\" is not valid JSON: " + e.what());
  }
}
}  // namespace hf
}  // namespace detail

/// rope_config_from_hf of the JSON file at path (e.g. a model's config.json), at most
/// hf_config_max_file_bytes long.
inline RopeConfig rope_config_from_hf_file(const std::string& path,
                                           std::optional<Layout> layout = std::nullopt) {
  return rope_config_from_hf(detail::hf::read_json_file(path), layout);
}

/// model_positions_from_hf of the JSON file at path, at most hf_config_max_file_bytes long.
inline ModelPositions model_positions_from_hf_file(const std::string& path,
                                                   const ModelReadOptions& options = {}) {
  return model_positions_from_hf(detail::hf::read_json_file(path), options);
}

}  // namespace peal
