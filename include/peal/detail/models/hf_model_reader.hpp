// model_positions_from_hf's stages (hf_config.hpp; docs/models.md): unwrap the text config,
// fill class defaults, derive the layer types, build each layer, and list the keys not
// modelled. The architecture facts come from model_conventions.hpp.
#pragma once

#include <cmath>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "../../errors.hpp"
#include "../../models/model_conventions.hpp"
#include "../../models/model_positions.hpp"
#include "../../presets/rope.hpp"
#include "hf_json.hpp"
#include "hf_rope_keys.hpp"

namespace peal {
namespace detail {
namespace hf {

// Keys the model reader uses (top level of the text config).
inline const std::set<std::string>& used_keys() {
  static const std::set<std::string> k = {
      "head_dim", "hidden_size", "n_embd", "d_model", "num_attention_heads", "n_head",
      "rope_theta", "rotary_emb_base", "partial_rotary_factor", "rotary_pct", "rotary_dim",
      "max_position_embeddings", "n_positions", "rope_scaling", "rope_parameters",
      "original_max_position_embeddings", "text_config", "model_type", "layer_types",
      "sliding_window", "sliding_window_pattern", "use_sliding_window", "max_window_layers",
      "rope_local_base_freq", "query_pre_attn_scalar", "attn_logit_softcapping",
      "no_rope_layers", "no_rope_layer_interval", "attn_temperature_tuning", "floor_scale",
      "attn_scale", "use_qk_norm", "qk_layernorm", "attention_multiplier",
      "full_attention_interval", "attention_chunk_size", "qk_rope_head_dim", "qk_nope_head_dim",
      "v_head_dim", "kv_lora_rank", "q_lora_rank", "rope_interleave", "num_hidden_layers",
      "n_layer", "n_layers", "n_heads", "num_layers", "attn_layer_period", "attn_layer_offset", "alibi", "attn_config",
      "num_key_value_heads", "position_embedding_type", "rope_ratio", "original_rope", "kv_channels",
      "hybrid_override_pattern", "block_configs", "use_dynamic_ntk", "use_logn_attn",
      "linear_key_head_dim"};
  return k;
}
// The used keys that only some architectures read: listed when a config has one that its
// architecture's path did not read.
inline const std::vector<const char*>& family_keys() {
  static const std::vector<const char*> k = {
      "query_pre_attn_scalar", "attention_multiplier", "attn_logit_softcapping",
      "rope_local_base_freq", "no_rope_layers", "no_rope_layer_interval",
      "attn_temperature_tuning", "floor_scale", "attn_scale", "full_attention_interval",
      "attention_chunk_size", "qk_rope_head_dim", "qk_nope_head_dim", "kv_lora_rank",
      "q_lora_rank", "rope_interleave", "attn_layer_period", "attn_layer_offset", "use_qk_norm",
      "qk_layernorm", "sliding_window", "sliding_window_pattern", "use_sliding_window",
      "max_window_layers", "alibi", "rope_ratio", "original_rope", "hybrid_override_pattern",
      "block_configs", "use_dynamic_ntk", "use_logn_attn"};
  return k;
}
// Keys inside rope_scaling / rope_parameters that peal reads.
inline const std::set<std::string>& used_scaling_keys() {
  static const std::set<std::string> k = {
      "rope_type", "type", "factor", "original_max_position_embeddings", "beta_fast",
      "beta_slow", "truncate", "mscale", "mscale_all_dim", "attention_factor", "short_factor",
      "long_factor", "low_freq_factor", "high_freq_factor", "mrope_section", "mrope_interleaved",
      "alpha", "rope_theta", "partial_rotary_factor", "llama_4_scaling_beta"};
  return k;
}
// Keys whose names look positional but which do not touch q.k (with the reason).
inline const char* irrelevant_key(const std::string& k) {
  static const char* const list[][2] = {
      {"attention_dropout", "dropout (training only)"},
      {"attn_pdrop", "dropout (training only)"},
      {"attention_bias", "bias of the projections"},
      {"attention_out_bias", "bias of the projections"},
      {"final_logit_softcapping", "softcap of the LM logits, not attention"},
      {"logit_scale", "scale of the LM logits, not attention"},
      {"logits_scaling", "scale of the LM logits, not attention"},
      {"embedding_multiplier", "scale of the embeddings"},
      {"residual_multiplier", "scale of the residual branch"},
      {"layer_norm_epsilon", "norm epsilon"},
      {"attention_layernorm", "norm"},
      {"scale_attn_weights", "1/sqrt(head_dim), the default scale"},
      {"interleave_moe_layer_step", "which layers are MoE (MLP), not attention"},
      {"attn_implementation", "kernel choice"},
      {"_attn_implementation", "kernel choice"},
      {"torch_dtype", "storage type"},
      {"use_flash_attn", "kernel choice"},
      {"apply_query_key_layer_scaling", "fp16 guard: q.k divided by the layer number, multiplied back before the softmax"},
      {"multi_query_attention", "kv-head sharing, not positions"},
      {"multi_query_group_num", "kv-head count"},
      {"attn_output_gate", "a gate on the attention output, after the softmax"},
      {"scale_emb", "scale of the embeddings"},
      {"scale_depth", "scale of the residual branch"},
      {"rescale_prenorm_residual", "initialisation"},
  };
  for (const auto& e : list)
    if (k == e[0]) return e[1];
  return nullptr;
}
inline bool positional_name(const std::string& k) {
  for (const char* w : {"rope", "rotary", "position", "window", "scal", "attn", "attention",
                        "nope", "layer_types", "softcap", "alibi", "chunk", "temperature"})
    if (k.find(w) != std::string::npos) return true;
  return false;
}

inline std::string dump(const json& v) {
  std::string s = v.dump();
  return s.size() > 120 ? s.substr(0, 117) + "..." : s;
}

// A truthy flag: true/false, or a number (Llama 4's v4 attn_temperature_tuning = 4).
inline bool flag(const json& o, const char* key, bool dflt) {
  const json* v = find(o, key);
  if (!v) return dflt;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_number()) return v->get<double>() != 0;
  fail(std::string("hf_config: ") + key + " must be true or false, got " + v->dump());
}

struct ModelReader {
  explicit ModelReader(const ModelReadOptions& o) : opt(o) {}
  const ModelReadOptions& opt;
  ModelPositions out;
  json j;      // the text config with class defaults filled in
  json given;  // the text config as the file has it
  const ModelConventions* conv = nullptr;

  void fact(const std::string& n, const std::string& v, const std::string& src) {
    out.facts.push_back({n, v, src});
  }
  [[noreturn]] void bad(const std::string& what) const {
    fail("hf_config: " + (out.model_type.empty() ? std::string() : out.model_type + ": ") + what);
  }

  // Vision-language and multimodal wrappers keep the language model in text_config.
  void unwrap(const json& top) {
    if (!top.is_object()) fail("hf_config: the config must be a JSON object");
    const json* text = find(top, "text_config");
    const json* mt = find(top, "model_type");
    const std::string top_type = mt && mt->is_string() ? mt->get<std::string>() : "";
    const bool wrapper = top_type == "gemma3" || top_type == "llama4" || top_type == "mistral3" ||
                         top_type == "qwen3_vl" || top_type == "qwen3_vl_moe" ||
                         top_type == "gemma3n" || top_type == "qwen3_5" ||
                         top_type == "qwen3_5_moe";
    const bool bare = !find(top, "head_dim") && !find(top, "hidden_size") &&
                      !find(top, "rope_scaling") && !find(top, "rope_parameters");
    if (text && text->is_object() && (wrapper || bare)) {
      j = *text;
      const json* tt = find(j, "model_type");
      out.model_type = tt && tt->is_string() ? tt->get<std::string>() : top_type;
      fact("text model", out.model_type, "config: text_config (wrapper " + top_type + ")");
    } else {
      j = top;
      out.model_type = top_type;
    }
    conv = model_conventions(out.model_type);
    if (conv && *conv->theta_block && !find(j, "rope_theta"))
      if (const json* ac = find(j, conv->theta_block))
        if (const json* th = find(*ac, "rope_theta")) {
          j["rope_theta"] = *th;
          fact("rope_theta", dump(*th), std::string("config: ") + conv->theta_block + ".rope_theta");
        }
    out.architecture_known = conv != nullptr;
    if (conv)
      fact("architecture", conv->model_type, std::string("architecture table: ") + conv->source);
    else
      fact("architecture", out.model_type.empty() ? "(no model_type)" : out.model_type,
           "not in the architecture table: transformers' Llama conventions assumed "
           "(rotate_half, first rotary_dim coordinates, every layer alike)");
  }

  void class_defaults() {
    if (!conv) return;
    if (*conv->head_dim_key && !find(j, "head_dim"))
      if (const json* hd = find(j, conv->head_dim_key)) {
        j["head_dim"] = *hd;
        read_keys.insert(conv->head_dim_key);
        fact("head_dim", dump(*hd), std::string("config: ") + conv->head_dim_key);
      }
    for (const ClassDefault& d : conv->defaults) {
      if (find(j, d.key)) continue;
      // v5 configs keep rope_theta in rope_parameters.
      if (std::string(d.key) == "rope_theta" && find(j, "rope_parameters")) continue;
      if (d.value == std::floor(d.value) && std::abs(d.value) < 1e15)
        j[d.key] = static_cast<long long>(d.value);
      else
        j[d.key] = d.value;
      fact(d.key, dump(j[d.key]),
           std::string("class default (") + conv->model_type + ", architecture table)");
    }
  }

  // Look-ups of the text config that record the key as read: a key of the per-family list
  // (family_keys) that the config gives and this architecture's path never reads is listed
  // in not_modelled.
  std::set<std::string> read_keys;
  const json* key(const char* k) {
    read_keys.insert(k);
    return find(j, k);
  }
  std::optional<double> num(const char* k) {
    read_keys.insert(k);
    return number(j, k, "");
  }
  bool flg(const char* k, bool dflt) {
    read_keys.insert(k);
    return flag(j, k, dflt);
  }
  std::optional<long long> int_key(const char* k) {
    read_keys.insert(k);
    return integer(j, k, "");
  }

  int layer_count() {
    auto n = first_of(j, {"num_hidden_layers", "n_layer", "n_layers", "num_layers"},
                      [](const json& o, const char* k) { return integer(o, k, ""); });
    const json* lt = key("layer_types");
    if (!n && lt && lt->is_array()) n = static_cast<long long>(lt->size());
    if (!n) {
      const bool uniform = !conv || ((conv->layer_rule == LayerRule::Uniform ||
                                      conv->layer_rule == LayerRule::AllSliding ||
                                      ((conv->layer_rule == LayerRule::QwenMaxWindow ||
                                        conv->layer_rule == LayerRule::QwenMoeAlternate) &&
                                       !flg("use_sliding_window", false))) &&
                                     (conv->nope == NopeRule::None || conv->nope == NopeRule::All) &&
                                     !conv->local_rope);
      if (!uniform)
        bad("num_hidden_layers is missing: the layers of this architecture differ, so the "
            "reader needs their count");
      fact("num_hidden_layers", "1", "missing from the config: every layer alike, one shown");
      return 1;
    }
    if (*n <= 0 || *n > 4096) bad("num_hidden_layers must be in [1, 4096], got " + std::to_string(*n));
    return int(*n);
  }

  std::vector<std::string> layer_types(int n) {
    if (const json* lt = key("layer_types")) {
      if (!lt->is_array() || lt->size() != std::size_t(n))
        bad("layer_types must be an array of num_hidden_layers strings");
      std::vector<std::string> t;
      for (const auto& e : *lt) {
        if (!e.is_string()) bad("layer_types entries must be strings, got " + e.dump());
        t.push_back(e.get<std::string>());
      }
      fact("layer types", "layer_types", "config: layer_types");
      return t;
    }
    if (conv && conv->layer_rule == LayerRule::HybridPattern) return hybrid_pattern(n);
    std::vector<std::string> t(std::size_t(n), "full_attention");
    const LayerRule rule = conv ? conv->layer_rule : LayerRule::Uniform;
    switch (rule) {
      case LayerRule::Uniform:
        break;
      case LayerRule::AllSliding:
        if (key("sliding_window")) t.assign(std::size_t(n), "sliding_attention");
        break;
      case LayerRule::QwenMaxWindow: {
        const bool use = flg("use_sliding_window", false);
        const long long from = int_key("max_window_layers").value_or(n);
        if (use && key("sliding_window"))
          for (int i = int(from); i < n; ++i) t[std::size_t(i)] = "sliding_attention";
        break;
      }
      case LayerRule::Pattern: {
        long long p = conv->pattern_default;
        if (*conv->pattern_key) p = int_key(conv->pattern_key).value_or(p);
        if (p <= 0) bad(std::string(conv->pattern_key) + " must be > 0");
        for (int i = 0; i < n; ++i)
          if ((i + 1) % p != 0) t[std::size_t(i)] = "sliding_attention";
        fact("layer types", "every " + std::to_string(p) + "th layer full, the others sliding",
             *conv->pattern_key && key(conv->pattern_key)
                 ? std::string("config: ") + conv->pattern_key
                 : "class default (architecture table)");
        break;
      }
      case LayerRule::LinearInterval: {
        const long long p = int_key("full_attention_interval").value_or(4);
        if (p <= 0) bad("full_attention_interval must be > 0");
        for (int i = 0; i < n; ++i)
          if ((i + 1) % p != 0) t[std::size_t(i)] = "linear_attention";
        break;
      }
      case LayerRule::Llama4Chunked: {
        const std::vector<int> rope = no_rope_layers(n);
        for (int i = 0; i < n; ++i)
          if (rope[std::size_t(i)]) t[std::size_t(i)] = "chunked_attention";
        break;
      }
      case LayerRule::QwenMoeAlternate: {
        const long long below = int_key("max_window_layers").value_or(n);
        if (flg("use_sliding_window", false) && key("sliding_window"))
          for (int i = 0; i < n && i < below; ++i)
            if ((i + 1) % 2 != 0) t[std::size_t(i)] = "sliding_attention";
        break;
      }
      case LayerRule::HybridPattern:
        break;  // hybrid_pattern above
      case LayerRule::JambaPeriod: {
        const long long per = int_key("attn_layer_period").value_or(8);
        const long long off = int_key("attn_layer_offset").value_or(4);
        if (per <= 0) bad("attn_layer_period must be > 0");
        for (int i = 0; i < n; ++i)
          if (i % per != off) t[std::size_t(i)] = "mamba";
        break;
      }
    }
    return t;
  }

  // configuration_nemotron_h.py: one character per layer, M Mamba2, * attention, - MLP, E MoE.
  // Without the pattern transformers builds its 4-layer default, which is not the model.
  std::vector<std::string> hybrid_pattern(int n) {
    const json* p = key("hybrid_override_pattern");
    if (!p) bad("hybrid_override_pattern (or layer_types) is missing: which layers attend is unknown");
    if (!p->is_string() || p->get<std::string>().size() != std::size_t(n))
      bad("hybrid_override_pattern must be a string of num_hidden_layers characters");
    std::vector<std::string> t;
    for (char c : p->get<std::string>()) {
      if (c == '*') t.push_back("full_attention");
      else if (c == 'M') t.push_back("mamba");
      else if (c == '-') t.push_back("mlp");
      else if (c == 'E') t.push_back("moe");
      else bad(std::string("hybrid_override_pattern: unknown layer character '") + c + "'");
    }
    fact("layer types", "hybrid_override_pattern", "config: hybrid_override_pattern");
    return t;
  }

  // DeciLM (modeling_decilm.py): block_configs[i].attention.no_op or .replace_with_linear
  // leaves layer i without attention.
  void decilm_blocks(std::vector<std::string>& t) {
    const json* b = key("block_configs");
    if (!b) {
      out.not_modelled.push_back({"block_configs", "(missing)",
                                  "DeciLM's per-layer blocks decide which layers attend", true});
      if (!opt.allow_not_modelled)
        bad("block_configs is missing: DeciLM's per-layer blocks decide which layers attend; "
            "pass ModelReadOptions::allow_not_modelled to read every layer as attention");
      return;
    }
    if (!b->is_array() || b->size() != t.size())
      bad("block_configs must be an array of num_hidden_layers objects");
    for (std::size_t i = 0; i < t.size(); ++i) {
      const json* a = (*b)[i].is_object() ? find((*b)[i], "attention") : nullptr;
      if (!a || !a->is_object()) bad("block_configs[" + std::to_string(i) + "].attention is missing");
      if (flag(*a, "no_op", false)) t[i] = "no_attention";
      else if (flag(*a, "replace_with_linear", false)) t[i] = "linear_replacement";
    }
    fact("layer types", "block_configs", "config: block_configs[i].attention");
  }

  // no_rope_layers: 1 = RoPE, 0 = NoPE; default (i + 1) % no_rope_layer_interval != 0.
  std::vector<int> no_rope_layers(int n) {
    std::vector<int> r(std::size_t(n), 1);
    const json* v = key("no_rope_layers");
    if (v && v->is_array() && !v->empty()) {
      if (v->size() != std::size_t(n)) bad("no_rope_layers must have num_hidden_layers entries");
      for (std::size_t i = 0; i < v->size(); ++i) {
        const json& e = (*v)[i];
        if (!e.is_number_integer() || (e.get<long long>() != 0 && e.get<long long>() != 1))
          bad("no_rope_layers entries must be 0 or 1, got " + e.dump());
        r[i] = int(e.get<long long>());
      }
      return r;
    }
    const long long p = int_key("no_rope_layer_interval").value_or(4);
    if (p <= 0) bad("no_rope_layer_interval must be > 0");
    for (int i = 0; i < n; ++i) r[std::size_t(i)] = (i + 1) % p != 0;
    return r;
  }

  static LayerAttention attention_of(const std::string& t) {
    if (t == "full_attention" || t == "attention" || t == "global") return LayerAttention::Full;
    if (t == "sliding_attention" || t == "local") return LayerAttention::Sliding;
    if (t == "chunked_attention") return LayerAttention::Chunked;
    return LayerAttention::Linear;  // linear_attention, mamba, ...: no softmax attention
  }

  // The config whose keys give layer type t's RoPE.
  json rope_json(const std::string& t, bool& nope) {
    json r = j;
    nope = false;
    if (conv && *conv->theta_factor_key)
      if (const auto f = num(conv->theta_factor_key)) {
        if (!(*f > 0) || !std::isfinite(*f)) bad(std::string(conv->theta_factor_key) + " must be > 0");
        r["rope_theta"] = r.value("rope_theta", 10000.0) * *f;
      }
    const json* p = key("rope_parameters");
    if (p && p->is_object() && !p->empty()) {
      bool nested = true;
      for (auto it = p->begin(); it != p->end(); ++it)
        if (!(it.value().is_object() || it.value().is_null()) ||
            used_scaling_keys().count(it.key()))
          nested = false;
      if (nested) {  // v5 per-layer-type rope_parameters
        const auto it = p->find(t);
        if (it == p->end()) bad("rope_parameters has no entry for layer type \"" + t + "\"");
        if (it->is_null()) {
          nope = true;
          return r;
        }
        r["rope_parameters"] = *it;
        r.erase("rope_scaling");
        return r;
      }
    }
    if (conv && conv->local_rope && attention_of(t) == LayerAttention::Sliding) {
      // Gemma 3 / OLMo 3: sliding layers take rope_local_base_freq, without rope_scaling.
      r.erase("rope_scaling");
      r.erase("rope_parameters");
      if (const json* lb = key("rope_local_base_freq")) r["rope_theta"] = *lb;
    }
    return r;
  }

  RopeConfig rope_for(const json& r, int& qk_head_dim, int& offset) {
    const Layout lay = opt.layout ? *opt.layout : (conv ? conv->layout : Layout::HalfSplit);
    if (conv && conv->rotated == RotatedPart::MlaLast) {
      const long long nope = int_key("qk_nope_head_dim").value_or(0);
      const auto rope_dim = int_key("qk_rope_head_dim");
      if (!rope_dim || *rope_dim <= 0 || nope < 0 || nope + *rope_dim > preset_max_head_dim)
        bad("MLA needs qk_rope_head_dim > 0 and qk_nope_head_dim >= 0");
      json m = r;
      m["head_dim"] = *rope_dim;
      m.erase("partial_rotary_factor");
      Layout l = lay;
      if (!opt.layout && !flg("rope_interleave", true)) l = Layout::HalfSplit;
      RopeConfig c = read_rope_keys(m, l);
      qk_head_dim = int(nope + *rope_dim);
      offset = int(nope);
      return c;
    }
    Layout l = lay;
    if (!opt.layout && conv && *conv->layout_flag && !flg(conv->layout_flag, true)) l = Layout::HalfSplit;
    RopeConfig c = read_rope_keys(r, l);
    qk_head_dim = c.head_dim;
    offset = 0;
    return c;
  }

  double softmax_scale(const LayerPositions& L) {
    const ScaleRule rule = conv ? conv->scale : ScaleRule::HeadDim;
    const double base = 1.0 / std::sqrt(double(L.qk_head_dim));
    switch (rule) {
      case ScaleRule::HeadDim:
        return base;
      case ScaleRule::QueryPreAttnScalar: {
        const auto q = num("query_pre_attn_scalar");
        if (!q || !(*q > 0)) bad("query_pre_attn_scalar must be > 0");
        return 1.0 / std::sqrt(*q);
      }
      case ScaleRule::AttentionMultiplier: {
        const auto m = num("attention_multiplier");
        if (!m || !std::isfinite(*m)) bad("attention_multiplier must be a finite number");
        return *m;
      }
      case ScaleRule::MlaMscale: {
        // modular_deepseek_v3.py: if rope_type != "default": mscale_all_dim = rope_parameters
        // .get("mscale_all_dim", 0); if mscale_all_dim: scaling *= yarn_get_mscale(factor, m)^2
        // (DeepSeek-V2 likewise since transformers PR #47435; earlier releases did not).
        const json* rs = key("rope_scaling");
        if (!rs) rs = key("rope_parameters");
        if (!rs || !rs->is_object()) return base;
        const json* ty = find(*rs, "rope_type");
        if (!ty) ty = find(*rs, "type");
        if (!ty || (ty->is_string() && ty->get<std::string>() == "default")) return base;
        const double m = number(*rs, "mscale_all_dim", "rope_scaling.").value_or(0);
        if (m == 0) return base;
        const auto f = number(*rs, "factor", "rope_scaling.");
        if (!f) bad("rope_scaling.factor is needed with mscale_all_dim");
        const double ms = *f <= 1 ? 1.0 : 0.1 * m * std::log(*f) + 1.0;
        return base * ms * ms;
      }
      case ScaleRule::One:
        return 1.0;
    }
    return base;
  }

  LayerPositions layer(int i, const std::string& t, const std::vector<int>& rope_flags) {
    LayerPositions L;
    L.layer_type = t;
    L.attention = attention_of(t);
    const PositionsKind kind = conv ? conv->positions : PositionsKind::Rope;
    const NopeRule nr = conv ? conv->nope : NopeRule::None;
    bool nope = L.attention == LayerAttention::Linear || nr == NopeRule::All ||
                (nr == NopeRule::NoRopeLayers && !rope_flags[std::size_t(i)]) ||
                (nr == NopeRule::FullLayers && L.attention == LayerAttention::Full) ||
                (nr == NopeRule::FullIfSliding && L.attention == LayerAttention::Full &&
                 key("sliding_window"));
    bool typed_nope = false;
    const json r = rope_json(t, typed_nope);
    nope = nope || typed_nope;
    int qk = 0, off = 0;
    if (!nope && L.attention != LayerAttention::Linear) {
      L.rope = rope_for(r, qk, off);
      L.encoding = (kind == PositionsKind::MRope || !L.rope.scaling.mrope_section.empty())
                       ? LayerEncoding::MRope
                       : LayerEncoding::Rope;
    } else {
      // The head size still matters for the scale.
      RopeConfig c = read_rope_keys(j, Layout::HalfSplit);
      qk = c.head_dim;
      L.encoding = LayerEncoding::None;
    }
    if (nope && kind == PositionsKind::Alibi) {
      L.encoding = LayerEncoding::Alibi;
      L.alibi_max_bias = 8.0;
      if (const json* ac = key("attn_config"))
        if (const auto b = number(*ac, "alibi_bias_max", "attn_config.")) L.alibi_max_bias = *b;
    }
    const bool alibi_flag = conv && *conv->alibi_flag && flg(conv->alibi_flag, false);
    const bool alibi_size = conv && conv->rope_only_hidden &&
                            int_key("hidden_size").value_or(conv->rope_only_hidden) != conv->rope_only_hidden;
    if (alibi_flag || alibi_size) {
      L.encoding = LayerEncoding::Alibi;
      L.alibi_max_bias = 8.0;
    }
    L.qk_head_dim = qk;
    L.rotary_offset = off;
    if (const auto v = int_key("v_head_dim")) L.v_head_dim = int(*v);
    L.softmax_scale = softmax_scale(L);
    window_and_extras(L, rope_flags[std::size_t(i)] != 0);
    if (L.attention == LayerAttention::Linear) {
      // No softmax in a linear-attention / state-space / MLP-only layer: no scale, no qk-norm
      // of the softmax attention; the key size is the linear layer's (Qwen3-Next, Qwen3.5).
      L.softmax_scale = 0;
      L.qk_norm = false;
      L.qk_head_dim = int(int_key("linear_key_head_dim").value_or(L.qk_head_dim));
    }
    return L;
  }

  void window_and_extras(LayerPositions& L, bool rope_layer) {
    if (L.attention == LayerAttention::Sliding) {
      bool use = true;
      if (conv && *conv->sliding_switch) use = flg(conv->sliding_switch, false);
      const auto w = int_key("sliding_window");
      if (use && w && *w > 0)
        L.sliding_window = *w;
      else
        L.attention = LayerAttention::Full;  // transformers: sliding_window None -> full
    }
    if (L.attention == LayerAttention::Chunked) {
      const auto c = int_key("attention_chunk_size");
      if (c && *c > 0)
        L.attention_chunk = *c;
      else
        L.attention = LayerAttention::Full;
    }
    if (conv && *conv->softcap_key)
      if (const auto s = num(conv->softcap_key)) L.softcap = *s;
    if (conv) {
      if (conv->qk_norm == QkNormRule::Always) L.qk_norm = true;
      if (conv->qk_norm == QkNormRule::Key) L.qk_norm = flg(conv->qk_norm_key, false);
      if (conv->query_scale == QueryScaleRule::Llama4Temperature) {
        L.qk_norm = L.qk_norm && rope_layer;  // modeling_llama4.py: use_qk_norm and use_rope
        if (!rope_layer && flg("attn_temperature_tuning", true)) {
          L.query_scale.kind = QueryScale::Kind::Llama4Temperature;
          L.query_scale.floor_scale = num("floor_scale").value_or(8192);
          L.query_scale.attn_scale = num("attn_scale").value_or(0.1);
          if (!(L.query_scale.floor_scale > 0)) bad("floor_scale must be > 0");
        }
      }
      if (conv->query_scale == QueryScaleRule::Llama4Beta) llama4_beta(L);
    }
  }

  void llama4_beta(LayerPositions& L) {
    const json* p = key("rope_parameters");
    if (!p) p = key("rope_scaling");
    if (!p || !p->is_object()) return;
    const auto beta = number(*p, "llama_4_scaling_beta", "rope_parameters.");
    if (!beta || *beta == 0) return;
    const auto orig = number(*p, "original_max_position_embeddings", "rope_parameters.");
    if (!orig || !(*orig > 0))
      bad("llama_4_scaling_beta needs rope_parameters.original_max_position_embeddings > 0");
    L.query_scale.kind = QueryScale::Kind::Llama4Beta;
    L.query_scale.beta = *beta;
    L.query_scale.original_max_position_embeddings = *orig;
  }

  void not_modelled() {
    const auto add = [&](const std::string& k, const json& v, const std::string& why,
                         bool changes) {
      out.not_modelled.push_back({k, dump(v), why, changes});
      if (changes && !opt.allow_not_modelled)
        bad("key " + k + " = " + dump(v) + " changes the attention (" + why +
            ") and peal does not model it; pass ModelReadOptions::allow_not_modelled to read the "
            "rest");
    };
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& k = it.key();
      if (it.value().is_null() || used_keys().count(k) || irrelevant_key(k)) continue;
      if (k == "dual_chunk_attention_config")
        add(k, it.value(), "Qwen2.5-1M dual chunk attention: positions remapped per chunk", true);
      else if (k == "use_bidirectional_attention" && it.value().is_boolean() &&
               it.value().get<bool>())
        add(k, it.value(), "bidirectional mask", true);
      else if (k == "scale_attn_by_inverse_layer_idx" && it.value().is_boolean() &&
               it.value().get<bool>())
        add(k, it.value(), "per-layer 1/(layer + 1) score scale", true);
      else if (positional_name(k) && !(it.value().is_boolean() && !it.value().get<bool>()))
        add(k, it.value(), "not read by peal", false);
    }
    if (conv)
      for (const Unmodelled& u : conv->unmodelled) {
        if (!*u.key)
          add("(architecture)", json(conv->model_type), u.why, true);
        else if (flg(u.key, false))
          add(u.key, *find(j, u.key), u.why, true);
      }
    // Keys that only some architectures' code reads (query_pre_attn_scalar in a Llama, ...).
    for (const char* k : family_keys())
      if (const json* v = find(given, k))
        if (!read_keys.count(k) && !(v->is_boolean() && !v->get<bool>()))
          add(k, *v, "this architecture's code does not read it (architecture table)", false);
    for (const char* block : {"rope_scaling", "rope_parameters"}) {
      const json* rs = find(j, block);
      if (!rs || !rs->is_object()) continue;
      for (auto it = rs->begin(); it != rs->end(); ++it) {
        if (it.value().is_object() || it.value().is_null()) continue;  // per-layer-type entry
        if (!used_scaling_keys().count(it.key()))
          add(std::string(block) + "." + it.key(), it.value(),
              "a scaling field peal does not read (it changes the frequencies or their scale)",
              true);
      }
    }
    if (conv && *conv->stored_unused && find(j, conv->stored_unused))
      fact(conv->stored_unused, dump(j[conv->stored_unused]),
           "stored, but this architecture's code never applies it (architecture table)");
  }

  void read(const json& top) {
    unwrap(top);
    given = j;
    class_defaults();
    const int n = layer_count();
    std::vector<std::string> types = layer_types(n);
    if (conv && conv->block_configs) decilm_blocks(types);
    const std::vector<int> rope_flags =
        conv && conv->nope == NopeRule::NoRopeLayers ? no_rope_layers(n)
                                                     : std::vector<int>(std::size_t(n), 1);
    if (conv && conv->rotated == RotatedPart::MlaLast) {
      out.kv_lora_rank = int(int_key("kv_lora_rank").value_or(0));
      out.q_lora_rank = int(int_key("q_lora_rank").value_or(0));
    }
    for (int i = 0; i < n; ++i) out.layers.push_back(layer(i, types[std::size_t(i)], rope_flags));
    not_modelled();
  }
};

}  // namespace hf
}  // namespace detail
}  // namespace peal
