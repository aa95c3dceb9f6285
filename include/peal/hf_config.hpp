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
//   text_config              a vision-language config (Qwen3-VL) whose top level has none of
//                            head_dim, hidden_size, rope_scaling, rope_parameters is read
//                            from its text_config.
//                            A top-level original_max_position_embeddings (Phi-3) fills the
//                            scaling's when the scaling block has none.
// Layout: Layout::HalfSplit (HF's rotate_half), except model_type "gptj" (rotate_every_two:
// Layout::Interleaved); pass `layout` to override (e.g. for Meta-format checkpoints).
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
#include <string>
#include <vector>

#include "errors.hpp"
#include "layout.hpp"
#include "mrope.hpp"
#include "rope.hpp"

namespace peal {
namespace detail {
namespace hf {

using json = nlohmann::json;

inline const json* find(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

inline std::optional<double> number(const json& obj, const char* key, const char* where) {
  const json* v = find(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number())
    fail(std::string("hf_config: ") + where + key + " must be a number, got " + v->dump());
  return v->get<double>();
}

inline std::optional<long long> integer(const json& obj, const char* key, const char* where) {
  const auto x = number(obj, key, where);
  if (!x) return std::nullopt;
  if (!(*x == std::floor(*x)) || std::abs(*x) > 9.0e15)
    fail(std::string("hf_config: ") + where + key + " must be an integer, got " +
         find(obj, key)->dump());
  return static_cast<long long>(*x);
}

inline std::optional<bool> boolean(const json& obj, const char* key, const char* where) {
  const json* v = find(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean())
    fail(std::string("hf_config: ") + where + key + " must be true or false, got " + v->dump());
  return v->get<bool>();
}

// An array of at most max_entries numbers (checked before the copy is allocated).
inline std::optional<std::vector<double>> numbers(const json& obj, const char* key,
                                                  const char* where, std::size_t max_entries) {
  const json* v = find(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_array())
    fail(std::string("hf_config: ") + where + key + " must be an array of numbers");
  if (v->size() > max_entries)
    fail(std::string("hf_config: ") + where + key + " has " + std::to_string(v->size()) +
         " entries, more than " + std::to_string(max_entries) + " (preset_max_head_dim / 2)");
  std::vector<double> out;
  out.reserve(v->size());
  for (const auto& e : *v) {
    if (!e.is_number())
      fail(std::string("hf_config: ") + where + key + " must be an array of numbers, found " +
           e.dump());
    out.push_back(e.get<double>());
  }
  return out;
}

// First present key of a list; *found (if given) is set to its name.
template <class Getter>
auto first_of(const json& obj, std::initializer_list<const char*> keys, Getter get,
              const char** found = nullptr) -> decltype(get(obj, "")) {
  for (const char* k : keys)
    if (auto v = get(obj, k)) {
      if (found) *found = k;
      return v;
    }
  return {};
}

}  // namespace hf
}  // namespace detail

/// The RoPE configuration of an HF config.json object (see the header comment for keys).
inline RopeConfig rope_config_from_hf(const nlohmann::json& cfg,
                                      std::optional<Layout> layout = std::nullopt) {
  namespace hf = detail::hf;
  using hf::json;
  if (!cfg.is_object()) detail::fail("hf_config: the config must be a JSON object");
  const auto top_num = [](const json& o, const char* k) { return hf::number(o, k, ""); };
  const auto top_int = [](const json& o, const char* k) { return hf::integer(o, k, ""); };

  // v5 rope_parameters (may also hold rope_theta / partial_rotary_factor).
  const json* params = hf::find(cfg, "rope_parameters");
  if (params && !params->is_object())
    detail::fail("hf_config: rope_parameters must be an object or null");

  // Vision-language configs (Qwen3-VL, ...) keep the language model's keys in text_config.
  const json* text = hf::find(cfg, "text_config");
  if (text && text->is_object() && !hf::find(cfg, "head_dim") && !hf::find(cfg, "hidden_size") &&
      !hf::find(cfg, "rope_scaling") && !params)
    return rope_config_from_hf(*text, layout);

  RopeConfig c;

  // head_dim, else hidden_size // num_attention_heads.
  // Bounded by preset_max_head_dim before the int conversion and before any table is built
  // (validation builds head_dim/2 frequencies).
  std::optional<long long> head_dim = top_int(cfg, "head_dim");
  std::string derived;
  if (!head_dim || *head_dim == 0) {
    const char *hidden_key = "", *heads_key = "";
    const auto hidden =
        hf::first_of(cfg, {"hidden_size", "n_embd", "d_model"}, top_int, &hidden_key);
    const auto heads = hf::first_of(cfg, {"num_attention_heads", "n_head"}, top_int, &heads_key);
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
  c.head_dim = static_cast<int>(*head_dim);

  // rope_theta
  std::optional<double> theta = hf::first_of(cfg, {"rope_theta", "rotary_emb_base"}, top_num);
  if (!theta && params) theta = hf::number(*params, "rope_theta", "rope_parameters.");
  c.rope_theta = theta.value_or(10000.0);

  // partial_rotary_factor
  std::optional<double> prf = hf::first_of(cfg, {"partial_rotary_factor", "rotary_pct"}, top_num);
  if (!prf && params) prf = hf::number(*params, "partial_rotary_factor", "rope_parameters.");
  if (!prf) {
    if (const auto rd = top_int(cfg, "rotary_dim")) {  // GPT-J: absolute rotary dimension
      if (*rd <= 0 || *rd > c.head_dim)
        detail::fail("hf_config: rotary_dim must be in [1, head_dim], got " + std::to_string(*rd));
      double p = double(*rd) / double(c.head_dim);
      while (static_cast<long long>(double(c.head_dim) * p) < *rd) p = std::nextafter(p, 2.0);
      prf = p;
    }
  }
  c.partial_rotary_factor = prf.value_or(1.0);

  c.max_position_embeddings =
      hf::first_of(cfg, {"max_position_embeddings", "n_positions"}, top_num);

  // Layout
  if (layout) {
    c.layout = *layout;
  } else {
    const json* mt = hf::find(cfg, "model_type");
    c.layout = (mt && mt->is_string() && mt->get<std::string>() == "gptj") ? Layout::Interleaved
                                                                           : Layout::HalfSplit;
  }

  // Scaling block
  const json* rs = hf::find(cfg, "rope_scaling");
  const char* where = "rope_scaling.";
  bool from_params = false;
  if (rs && !rs->is_object()) detail::fail("hf_config: rope_scaling must be an object or null");
  if (!rs && params) {
    rs = params;
    where = "rope_parameters.";
    from_params = true;
  }
  if (rs) {
    RopeScaling& s = c.scaling;
    const json* type = hf::find(*rs, "rope_type");
    if (!type) type = hf::find(*rs, "type");
    if (!type) {
      if (!from_params)
        detail::fail("hf_config: rope_scaling has neither \"rope_type\" nor \"type\"");
      s.type = RopeType::Default;  // v5 rope_parameters without a type: default RoPE
    } else {
      if (!type->is_string())
        detail::fail(std::string("hf_config: ") + where + "rope_type must be a string, got " +
                     type->dump());
      // Qwen2-VL's legacy "type": "mrope" is default RoPE with sections (transformers maps
      // it to "default"); the sections make it M-RoPE.
      const std::string name = type->get<std::string>();
      const bool legacy = !hf::find(*rs, "rope_type");
      s.type = legacy && name == "mrope" ? RopeType::Default : rope_type_from_string(name);
    }
    s.factor = hf::number(*rs, "factor", where);
    s.original_max_position_embeddings = hf::number(*rs, "original_max_position_embeddings", where);
    s.beta_fast = hf::number(*rs, "beta_fast", where);
    s.beta_slow = hf::number(*rs, "beta_slow", where);
    s.truncate = hf::boolean(*rs, "truncate", where);
    s.mscale = hf::number(*rs, "mscale", where);
    s.mscale_all_dim = hf::number(*rs, "mscale_all_dim", where);
    s.attention_factor = hf::number(*rs, "attention_factor", where);
    const std::size_t max_list = std::size_t(preset_max_head_dim / 2);
    s.short_factor = hf::numbers(*rs, "short_factor", where, max_list);
    s.long_factor = hf::numbers(*rs, "long_factor", where, max_list);
    s.low_freq_factor = hf::number(*rs, "low_freq_factor", where);
    s.high_freq_factor = hf::number(*rs, "high_freq_factor", where);
    // M-RoPE (mrope.hpp): sections of (t, h, w) pairs, integers; interleaved for Qwen3-VL.
    if (const auto sec = hf::numbers(*rs, "mrope_section", where, 8)) {
      for (double v : *sec) {
        if (!(v >= 0 && v <= preset_max_head_dim / 2) || v != std::floor(v))
          detail::fail(std::string("hf_config: ") + where +
                       "mrope_section entries must be integers in [0, 32768], got " +
                       detail::rope_impl::num(v));
        s.mrope_section.push_back(int(v));
      }
    }
    s.mrope_interleaved = hf::boolean(*rs, "mrope_interleaved", where).value_or(false);
    if (s.mrope_interleaved && s.mrope_section.empty())
      detail::fail(std::string("hf_config: ") + where + "mrope_interleaved without mrope_section");
  }
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

/// Largest file rope_config_from_hf_file reads: 16 MiB (model config.json files are a few
/// kB; the parsed JSON takes several times the file's size in memory).
inline constexpr std::size_t hf_config_max_file_bytes = std::size_t(16) << 20;

/// rope_config_from_hf of the JSON file at path (e.g. a model's config.json), at most
/// hf_config_max_file_bytes long.
inline RopeConfig rope_config_from_hf_file(const std::string& path,
                                           std::optional<Layout> layout = std::nullopt) {
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
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    detail::fail("hf_config: \"" + path + "\" is not valid JSON: " + e.what());
  }
  return rope_config_from_hf(j, layout);
}

}  // namespace peal
