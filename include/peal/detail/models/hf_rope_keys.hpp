// The keys of one RoPE configuration in a config.json object (the key list is in
// hf_config.hpp's header comment): the single-encoding stage of model_positions_from_hf.
#pragma once

#include <cmath>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "../../errors.hpp"
#include "../../layout.hpp"
#include "../../presets/mrope.hpp"
#include "../../presets/rope.hpp"
#include "hf_json.hpp"

namespace peal {
namespace detail {
namespace hf {
// head_dim, else hidden_size // num_attention_heads. Bounded by preset_max_head_dim before the
// int conversion and before any table is built (validation builds head_dim/2 frequencies).
inline int read_head_dim(const nlohmann::json& cfg) {
  const auto top_int = [](const json& o, const char* k) { return integer(o, k, ""); };
  std::optional<long long> head_dim = top_int(cfg, "head_dim");
  std::string derived;
  if (!head_dim || *head_dim == 0) {
    const char *hidden_key = "", *heads_key = "";
    const auto hidden = first_of(cfg, {"hidden_size", "n_embd", "d_model"}, top_int, &hidden_key);
    const auto heads = first_of(cfg, {"num_attention_heads", "n_head", "n_heads"}, top_int, &heads_key);
    if (!hidden || !heads)
      detail::fail(
          "hf_config: head_dim is missing and cannot be derived (needs hidden_size "
          "and num_attention_heads)");
    if (*heads <= 0 || *hidden <= 0)
      detail::fail("hf_config: hidden_size and num_attention_heads must be > 0");
    head_dim = *hidden / *heads;
    derived = std::string(" (= ") + hidden_key + " // " + heads_key + " = " +
              std::to_string(*hidden) + " // " + std::to_string(*heads) + ")";
  }
  if (*head_dim <= 0 || *head_dim > preset_max_head_dim)
    detail::fail("hf_config: head_dim must be in [1, " + std::to_string(preset_max_head_dim) +
                 "] (preset_max_head_dim), got " + std::to_string(*head_dim) + derived);
  return static_cast<int>(*head_dim);
}

// partial_rotary_factor (or rotary_pct; rope_parameters' own; GPT-J's absolute rotary_dim).
inline double read_partial_rotary_factor(const nlohmann::json& cfg, const json* params,
                                         int head_dim) {
  const auto top_num = [](const json& o, const char* k) { return number(o, k, ""); };
  std::optional<double> prf = first_of(cfg, {"partial_rotary_factor", "rotary_pct"}, top_num);
  if (!prf && params) prf = number(*params, "partial_rotary_factor", "rope_parameters.");
  if (!prf) {
    if (const auto rd = integer(cfg, "rotary_dim", "")) {  // GPT-J: absolute rotary dimension
      if (*rd <= 0 || *rd > head_dim)
        detail::fail("hf_config: rotary_dim must be in [1, head_dim], got " + std::to_string(*rd));
      double p = double(*rd) / double(head_dim);
      while (static_cast<long long>(double(head_dim) * p) < *rd) p = std::nextafter(p, 2.0);
      prf = p;
    }
  }
  return prf.value_or(1.0);
}

// The scaling block (rope_scaling, or v5 rope_parameters: `from_params`), every key it may
// hold, into s; `where` names the block in messages.
inline void read_scaling_block(const json& rs, const char* where, bool from_params,
                               RopeScaling& s) {
  const json* type = find(rs, "rope_type");
  if (!type) type = find(rs, "type");
  if (!type) {
    if (!from_params) detail::fail("hf_config: rope_scaling has neither \"rope_type\" nor \"type\"");
    s.type = RopeType::Default;  // v5 rope_parameters without a type: default RoPE
  } else {
    if (!type->is_string())
      detail::fail(std::string("hf_config: ") + where + "rope_type must be a string, got " +
                   type->dump());
    // Qwen2-VL's legacy "type": "mrope" is default RoPE with sections (transformers maps
    // it to "default"); the sections make it M-RoPE.
    const std::string name = type->get<std::string>();
    const bool legacy = !find(rs, "rope_type");
    s.type = legacy && name == "mrope" ? RopeType::Default : rope_type_from_string(name);
  }
  s.factor = number(rs, "factor", where);
  s.original_max_position_embeddings = number(rs, "original_max_position_embeddings", where);
  s.beta_fast = number(rs, "beta_fast", where);
  s.beta_slow = number(rs, "beta_slow", where);
  s.truncate = boolean(rs, "truncate", where);
  s.mscale = number(rs, "mscale", where);
  s.mscale_all_dim = number(rs, "mscale_all_dim", where);
  s.attention_factor = number(rs, "attention_factor", where);
  const std::size_t max_list = std::size_t(preset_max_head_dim / 2);
  s.short_factor = numbers(rs, "short_factor", where, max_list);
  s.long_factor = numbers(rs, "long_factor", where, max_list);
  s.low_freq_factor = number(rs, "low_freq_factor", where);
  s.high_freq_factor = number(rs, "high_freq_factor", where);
  s.alpha = number(rs, "alpha", where);  // Hunyuan's dynamic scaling
  // M-RoPE (mrope.hpp): sections of (t, h, w) pairs, integers; interleaved for Qwen3-VL.
  if (const auto sec = numbers(rs, "mrope_section", where, 8)) {
    for (double v : *sec) {
      if (!(v >= 0 && v <= preset_max_head_dim / 2) || v != std::floor(v))
        detail::fail(std::string("hf_config: ") + where +
                     "mrope_section entries must be integers in [0, 32768], got " +
                     detail::rope_impl::num(v));
      s.mrope_section.push_back(int(v));
    }
  }
  s.mrope_interleaved = boolean(rs, "mrope_interleaved", where).value_or(false);
  if (s.mrope_interleaved && s.mrope_section.empty())
    detail::fail(std::string("hf_config: ") + where + "mrope_interleaved without mrope_section");
}

/// The keys of one RoPE configuration (see the header comment), in the pairing `layout`: the
/// single-encoding part of the readers; model_positions_from_hf decides layout, class
/// defaults and per-layer configs before calling it.
inline RopeConfig read_rope_keys(const nlohmann::json& cfg, Layout layout) {
  if (!cfg.is_object()) detail::fail("hf_config: the config must be a JSON object");
  const auto top_num = [](const json& o, const char* k) { return number(o, k, ""); };

  // v5 rope_parameters (may also hold rope_theta / partial_rotary_factor).
  const json* params = find(cfg, "rope_parameters");
  if (params && !params->is_object())
    detail::fail("hf_config: rope_parameters must be an object or null");

  RopeConfig c;
  c.head_dim = read_head_dim(cfg);
  std::optional<double> theta = first_of(cfg, {"rope_theta", "rotary_emb_base"}, top_num);
  if (!theta && params) theta = number(*params, "rope_theta", "rope_parameters.");
  c.rope_theta = theta.value_or(10000.0);
  c.partial_rotary_factor = read_partial_rotary_factor(cfg, params, c.head_dim);
  c.max_position_embeddings = first_of(cfg, {"max_position_embeddings", "n_positions"}, top_num);
  c.layout = layout;

  // The scaling block: rope_scaling, else v5 rope_parameters.
  const json* rs = find(cfg, "rope_scaling");
  if (rs && !rs->is_object()) detail::fail("hf_config: rope_scaling must be an object or null");
  if (rs)
    read_scaling_block(*rs, "rope_scaling.", false, c.scaling);
  else if (params)
    read_scaling_block(*params, "rope_parameters.", true, c.scaling);
  if (!c.scaling.original_max_position_embeddings)
    c.scaling.original_max_position_embeddings = top_num(cfg, "original_max_position_embeddings");

  validate_rope_config(c);
  if (!c.scaling.mrope_section.empty()) {
    try {
      (void)mrope_pair_axes(c.scaling.mrope_section, c.scaling.mrope_interleaved,
                            rope_rotary_dim(c) / 2);
    } catch (const invalid_argument& e) {
      detail::fail(std::string("hf_config: rope_scaling.mrope_section: ") + e.what());
    }
  }
  return c;
}
}  // namespace hf
}  // namespace detail

}  // namespace peal
