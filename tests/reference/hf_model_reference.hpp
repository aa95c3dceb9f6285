// Independent long-double reference of what Hugging Face transformers computes, per decoder
// layer, for the positions and the attention scale of a model described by its config.json.
//
// Plain C++17 + nlohmann/json + preset_reference.hpp (no peal headers). Every rule below was
// read from transformers' own sources (models/<family>/modeling_*.py, configuration_*.py and
// modeling_rope_utils.py), in two generations:
//   * v4 (<= 4.57): the config carries `rope_theta` + optional `rope_scaling` dict;
//   * v5: the config carries `rope_parameters`, either flat or nested per layer type
//     ({"full_attention": {...}, "sliding_attention": {...}}), with rope_theta inside.
// A config is treated as v5 when it has a non-null "rope_parameters" object, else as v4.
// Class defaults (the configuration class's __init__ / dataclass defaults) stand in for keys
// that are absent, as transformers does.
//
// Conventions of the output (see Layer): the rotated block of a q/k head starts at
// rotary_offset and has rotary_dim coordinates; half-split pairs (i, i + rotary_dim/2) are
// HF's rotate_half, interleaved pairs (2i, 2i+1) are view_as_complex / rotate_every_two /
// x[..., 0::2] + repeat_interleave. inv_freq[i] is the frequency of pair i at `seq_len`.
#pragma once

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/preset_reference.hpp"

namespace peal_ref::hf {

struct Layer {
  std::string encoding;   // "rope", "mrope" or "none"
  std::string attention;  // "full", "sliding" or "linear"
  int qk_head_dim = 0;
  int rotary_offset = 0;
  int rotary_dim = 0;
  bool interleaved = false;
  std::vector<long double> inv_freq;
  long double attention_factor = 1;
  long double softmax_scale = 0;
  long long sliding_window = 0;
  long double softcap = 0;
  bool qk_norm = false;
  std::function<long double(long double pos)> query_scale;
};

namespace detail {

using nlohmann::json;

[[noreturn]] inline void fail(const std::string& what) {
  throw std::invalid_argument("peal_ref::hf: " + what);
}

// Python `config.get(key)` is not None.
inline bool has(const json& c, const char* key) {
  return c.is_object() && c.contains(key) && !c.at(key).is_null();
}

inline long double num(const json& c, const char* key, long double def) {
  if (!has(c, key)) return def;
  const json& v = c.at(key);
  if (v.is_boolean()) return v.get<bool>() ? 1.0L : 0.0L;
  if (!v.is_number()) fail(std::string("key '") + key + "' is not a number");
  return v.get<long double>();
}

// Python truthiness of an optional scalar (None / False / 0 -> false).
inline bool truthy(const json& c, const char* key, bool def = false) {
  if (!c.is_object() || !c.contains(key)) return def;
  const json& v = c.at(key);
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get<std::string>().empty();
  if (v.is_array() || v.is_object()) return !v.empty();
  return def;
}

// First present key among aliases (HF attribute_map: n_layer -> num_hidden_layers, ...).
inline long long int_any(const json& c, std::initializer_list<const char*> keys, long long def) {
  for (const char* k : keys) {
    if (has(c, k)) return static_cast<long long>(num(c, k, 0.0L));
  }
  return def;
}

// Class defaults of one family (only what this reference reads).
struct Family {
  long long layers;
  long long hidden;
  long long heads;
  long long head_dim;  // 0: hidden_size // num_attention_heads
  long double theta;
  double partial;      // partial_rotary_factor default
  long long max_pos;   // max_position_embeddings default
};

inline long long n_layers(const json& c, const Family& f) {
  const long long n = int_any(c, {"num_hidden_layers", "n_layer", "n_layers", "num_layers"}, f.layers);
  if (n <= 0) fail("num_hidden_layers must be positive");
  return n;
}

inline long long hidden(const json& c, const Family& f) {
  return int_any(c, {"hidden_size", "n_embd", "n_embed", "d_model"}, f.hidden);
}

inline long long heads(const json& c, const Family& f) {
  const long long h = int_any(c, {"num_attention_heads", "n_head", "n_heads"}, f.heads);
  if (h <= 0) fail("num_attention_heads must be positive");
  return h;
}

// HF: getattr(config, "head_dim", None) or hidden_size // num_attention_heads.
inline int head_dim(const json& c, const Family& f) {
  long long d = int_any(c, {"head_dim"}, 0);
  if (d <= 0) d = f.head_dim;
  if (d <= 0) d = hidden(c, f) / heads(c, f);
  if (d <= 0) fail("head_dim must be positive");
  return static_cast<int>(d);
}

inline long long max_pos(const json& c, const Family& f) {
  return int_any(c, {"max_position_embeddings", "n_positions", "max_seq_len"}, f.max_pos);
}

// ---- RoPE parameters (modeling_rope_utils.py, both generations) -------------------------------

struct Rope {
  json p;            // the (per-layer-type) rope parameter dict, {} when none
  std::string type;  // rope_type (BC key "type"), "default" when absent
  long double theta;
  double partial;
  bool v5;
};

inline bool is_nested(const json& p) {
  if (!p.is_object()) return false;
  for (const char* k : {"full_attention", "sliding_attention", "chunked_attention", "linear_attention"}) {
    if (p.contains(k) && (p.at(k).is_object() || p.at(k).is_null())) return true;
  }
  return false;
}

// v5 RotaryEmbeddingConfigMixin.standardize_rope_params: rope_type <- "type" <- "default";
// rope_theta and partial_rotary_factor setdefault from the config attributes. v4: rope_theta is a
// config attribute, partial_rotary_factor a config attribute, the rest in rope_scaling.
inline Rope rope_params(const json& c, const Family& f, const std::string& layer_type = "full_attention") {
  Rope r;
  r.v5 = has(c, "rope_parameters") && c.at("rope_parameters").is_object();
  json p = json::object();
  if (r.v5) {
    p = c.at("rope_parameters");
  } else if (has(c, "rope_scaling") && c.at("rope_scaling").is_object()) {
    p = c.at("rope_scaling");
  }
  if (is_nested(p)) {
    const std::string key = p.contains(layer_type) ? layer_type : "full_attention";
    if (!has(p, key.c_str())) fail("rope_parameters has no entry for " + layer_type);
    p = p.at(key);
  }
  r.p = p;
  r.type = has(p, "rope_type") ? p.at("rope_type").get<std::string>()
                               : (has(p, "type") ? p.at("type").get<std::string>() : "default");
  // Qwen2-VL v4 config: rope_scaling {"type": "mrope", ...} is rewritten to "default".
  if (r.type == "mrope") r.type = "default";
  const long double top_theta = num(c, "rope_theta", f.theta);
  r.theta = r.v5 ? num(p, "rope_theta", top_theta) : top_theta;
  double top_partial = static_cast<double>(num(c, "partial_rotary_factor", f.partial));
  if (has(c, "rotary_pct") && !has(c, "partial_rotary_factor")) {
    top_partial = static_cast<double>(num(c, "rotary_pct", f.partial));  // GPT-NeoX v4
  }
  r.partial = r.v5 ? static_cast<double>(num(p, "partial_rotary_factor", top_partial)) : top_partial;
  return r;
}

inline std::vector<long double> floats(const json& p, const char* key) {
  if (!has(p, key) || !p.at(key).is_array()) fail(std::string("rope parameters need list '") + key + "'");
  std::vector<long double> v;
  for (const json& x : p.at(key)) v.push_back(x.get<long double>());
  return v;
}

// original_max_position_embeddings as the rope function sees it.
// v5 standardize_rope_params (llama3/yarn/longrope): a config attribute
// original_max_position_embeddings (Phi-3 has one by default) overrides the dict; else the dict
// value; else max_position_embeddings. v4 yarn: rope_scaling.get(...) or max_position_embeddings.
inline long double original_max(const json& c, const Rope& r, const Family& f,
                                 long double class_default = -1.0L) {
  const long double top = num(c, "original_max_position_embeddings", class_default);
  if (r.v5 && top > 0.0L) return top;
  const long double in_dict = num(r.p, "original_max_position_embeddings", 0.0L);
  if (in_dict > 0.0L) return in_dict;
  return static_cast<long double>(max_pos(c, f));
}

// HF _compute_llama3_parameters (torch.where form: wavelen < high_wl keeps, > low_wl divides,
// the rest is smoothed); written out here so equal low/high factors (empty medium band) work.
inline RopeRef llama3(int hd, long double theta, double partial, long double factor,
                      long double low, long double high, long double old_len) {
  RopeRef r = rope_default(hd, theta, partial);
  const long double low_wl = old_len / low;
  const long double high_wl = old_len / high;
  for (long double& x : r.inv_freq) {
    const long double wl = 2.0L * std::acos(-1.0L) / x;
    if (wl < high_wl) continue;
    if (wl > low_wl) {
      x /= factor;
      continue;
    }
    const long double s = (old_len / wl - low) / (high - low);
    x = (1.0L - s) * x / factor + s * x;
  }
  return r;
}

// ROPE_INIT_FUNCTIONS[rope_type](config, seq_len) after dynamic_rope_update: "dynamic" uses
// max(seq_len, max_position_embeddings); "longrope" picks long_factor iff seq_len > original.
// class_orig: the configuration class's default original_max_position_embeddings (Phi-3: 4096).
inline RopeRef rope_freqs(const json& c, const Rope& r, const Family& f, int hd, double seq_len,
                          long double class_orig = -1.0L) {
  const json& p = r.p;
  const long double mp = static_cast<long double>(max_pos(c, f));
  if (r.type == "default") return rope_default(hd, r.theta, r.partial);
  if (r.type == "linear") return rope_linear(hd, r.theta, r.partial, num(p, "factor", 1.0L));
  if (r.type == "dynamic") {
    return rope_dynamic(hd, r.theta, r.partial, num(p, "factor", 1.0L), mp, seq_len);
  }
  if (r.type == "yarn") {
    const long double orig = original_max(c, r, f, class_orig);
    const long double factor = has(p, "factor") ? num(p, "factor", 1.0L) : mp / orig;
    const bool truncate = !p.contains("truncate") || truthy(p, "truncate");
    return rope_yarn(hd, r.theta, r.partial, factor, orig, num(p, "beta_fast", absent()),
                     num(p, "beta_slow", absent()), truncate, num(p, "mscale", absent()),
                     num(p, "mscale_all_dim", absent()), num(p, "attention_factor", absent()));
  }
  if (r.type == "longrope") {
    // v4: hasattr(config, "original_max_position_embeddings") -> that, and factor = max / it;
    //     else original = max_position_embeddings and factor = rope_scaling.get("factor").
    // v5: original as in original_max(); factor = dict factor, or max / original if absent.
    long double orig = 0.0L;
    long double factor = 0.0L;
    const long double top = num(c, "original_max_position_embeddings", class_orig);
    if (!r.v5) {
      if (top > 0.0L) {
        orig = top;
        factor = mp / orig;
      } else {
        orig = mp;
        if (!has(p, "factor")) fail("longrope without original_max_position_embeddings needs factor");
        factor = num(p, "factor", 1.0L);
      }
    } else {
      orig = original_max(c, r, f, class_orig);
      factor = has(p, "factor") ? num(p, "factor", 1.0L) : mp / orig;
    }
    return rope_longrope(hd, r.theta, r.partial, floats(p, "short_factor"), floats(p, "long_factor"),
                         orig, mp, seq_len, num(p, "attention_factor", absent()), factor);
  }
  if (r.type == "llama3") {
    const long double orig = r.v5 ? original_max(c, r, f, class_orig)
                                  : num(p, "original_max_position_embeddings", 0.0L);
    if (!(orig > 0.0L)) fail("llama3 rope needs original_max_position_embeddings");
    return llama3(hd, r.theta, r.partial, num(p, "factor", 1.0L), num(p, "low_freq_factor", 1.0L),
                  num(p, "high_freq_factor", 4.0L), orig);
  }
  fail("unsupported rope_type '" + r.type + "'");
}

inline Layer rope_layer(int qk_head_dim, const RopeRef& rr, bool interleaved, int offset = 0,
                        const std::string& encoding = "rope") {
  Layer l;
  l.encoding = encoding;
  l.attention = "full";
  l.qk_head_dim = qk_head_dim;
  l.rotary_offset = offset;
  l.rotary_dim = rr.rotary_dim;
  l.interleaved = interleaved;
  l.inv_freq = rr.inv_freq;
  l.attention_factor = rr.attention_factor;
  l.softmax_scale = 1.0L / std::sqrt(static_cast<long double>(qk_head_dim));
  return l;
}

inline Layer nope_layer(int qk_head_dim) {
  Layer l;
  l.encoding = "none";
  l.attention = "full";
  l.qk_head_dim = qk_head_dim;
  l.softmax_scale = 1.0L / std::sqrt(static_cast<long double>(qk_head_dim));
  return l;
}

inline void make_sliding(Layer& l, long long window) {
  if (window > 0) {
    l.attention = "sliding";
    l.sliding_window = window;
  }
}

// Explicit config.layer_types, if present and of the right length.
inline bool explicit_layer_types(const json& c, long long n, std::vector<std::string>& out) {
  if (!has(c, "layer_types") || !c.at("layer_types").is_array()) return false;
  out = c.at("layer_types").get<std::vector<std::string>>();
  if (static_cast<long long>(out.size()) < n) fail("layer_types shorter than num_hidden_layers");
  out.resize(static_cast<std::size_t>(n));
  return true;
}

// "sliding_attention" if bool((i + 1) % pattern) else "full_attention" (Gemma 2/3, Cohere 2, GPT-OSS).
inline std::vector<std::string> pattern_types(long long n, long long pattern) {
  std::vector<std::string> t;
  for (long long i = 0; i < n; ++i) {
    t.push_back(pattern > 0 && ((i + 1) % pattern) != 0 ? "sliding_attention" : "full_attention");
  }
  return t;
}

inline long long window_of(const json& c, long long def) {
  return has(c, "sliding_window") ? static_cast<long long>(num(c, "sliding_window", 0.0L))
                                  : (c.is_object() && c.contains("sliding_window") ? 0 : def);
}

// A plain model: every layer the same RoPE, optional all-layer sliding window.
inline std::vector<Layer> uniform(const json& c, const Family& f, double seq_len, bool interleaved,
                                  bool qk_norm, long long window, long double scale = 0.0L) {
  const int hd = head_dim(c, f);
  Layer l = rope_layer(hd, rope_freqs(c, rope_params(c, f), f, hd, seq_len), interleaved);
  l.qk_norm = qk_norm;
  if (scale > 0.0L) l.softmax_scale = scale;
  make_sliding(l, window);
  return std::vector<Layer>(static_cast<std::size_t>(n_layers(c, f)), l);
}

// ---- families --------------------------------------------------------------------------------

// modeling_llama.py / modeling_olmo.py / modeling_nemotron.py: rotate_half (half-split);
// Nemotron/StableLM/Phi/Persimmon: q_rot = q[..., :rotary_ndims] (partial_rotary_factor).
// scaling = head_dim**-0.5; granite: self.scaling = config.attention_multiplier.
inline std::vector<Layer> llama_like(const json& c, double seq_len, const Family& f, bool qk_norm = false) {
  return uniform(c, f, seq_len, false, qk_norm, 0);
}

inline std::vector<Layer> granite(const json& c, double seq_len) {
  const Family f{32, 4096, 32, 0, 10000.0L, 1.0, 2048};
  return uniform(c, f, seq_len, false, false, 0, num(c, "attention_multiplier", 1.0L));
}

// modeling_mistral.py / modeling_mixtral.py / modeling_starcoder2.py / modeling_phi3.py:
// attention_interface(..., sliding_window=getattr(self.config, "sliding_window", None)) on every
// layer. MistralConfig default sliding_window=4096, Mixtral/Starcoder2/Phi3/PhiMoE None.
inline std::vector<Layer> mistral_like(const json& c, double seq_len, const Family& f, long long window_default,
                                       long double class_orig = -1.0L) {
  const int hd = head_dim(c, f);
  Layer l = rope_layer(hd, rope_freqs(c, rope_params(c, f), f, hd, seq_len, class_orig), false);
  make_sliding(l, window_of(c, window_default));
  return std::vector<Layer>(static_cast<std::size_t>(n_layers(c, f)), l);
}

// configuration_qwen2.py: sliding_window = sliding_window if use_sliding_window else None;
// layer_types default "sliding_attention" if sliding_window is not None and i >= max_window_layers.
// modeling_qwen2.py: self.sliding_window = config.sliding_window if layer_types[i] == "sliding_attention".
// Qwen3 (modeling_qwen3.py) the same plus q_norm/k_norm = RMSNorm(head_dim) before RoPE.
// Qwen2-VL / Qwen2.5-VL text model: the same layer rule, M-RoPE (rotate_half, mrope_section).
inline std::vector<Layer> qwen2_like(const json& c, double seq_len, const Family& f, bool qk_norm,
                                     long long max_window_default, const std::string& encoding = "rope") {
  const int hd = head_dim(c, f);
  const long long n = n_layers(c, f);
  const bool use_sw = truthy(c, "use_sliding_window", false);
  const long long window = use_sw ? window_of(c, 4096) : 0;
  std::vector<std::string> types;
  if (!explicit_layer_types(c, n, types)) {
    const long long mwl = int_any(c, {"max_window_layers"}, max_window_default);
    for (long long i = 0; i < n; ++i) {
      types.push_back(window > 0 && i >= mwl ? "sliding_attention" : "full_attention");
    }
  }
  Layer base = rope_layer(hd, rope_freqs(c, rope_params(c, f), f, hd, seq_len), false, 0, encoding);
  base.qk_norm = qk_norm;
  std::vector<Layer> out;
  for (long long i = 0; i < n; ++i) {
    Layer l = base;
    if (types[static_cast<std::size_t>(i)] == "sliding_attention") make_sliding(l, window);
    out.push_back(l);
  }
  return out;
}

// configuration_qwen2_moe.py (v5): sliding_window = sliding_window if use_sliding_window else 0;
// layer_types default "sliding_attention" if bool((i + 1) % 2) and i < max_window_layers and
// use_sliding_window. modeling: sliding_window only on "sliding_attention" layers.
inline std::vector<Layer> qwen2_moe(const json& c, double seq_len) {
  const Family f{24, 2048, 16, 0, 10000.0L, 1.0, 32768};
  const int hd = head_dim(c, f);
  const long long n = n_layers(c, f);
  const bool use_sw = truthy(c, "use_sliding_window", false);
  const long long window = use_sw ? window_of(c, 4096) : 0;
  std::vector<std::string> types;
  if (!explicit_layer_types(c, n, types)) {
    const long long mwl = int_any(c, {"max_window_layers"}, 28);
    for (long long i = 0; i < n; ++i) {
      types.push_back(((i + 1) % 2) != 0 && i < mwl && use_sw ? "sliding_attention" : "full_attention");
    }
  }
  const Layer base = rope_layer(hd, rope_freqs(c, rope_params(c, f), f, hd, seq_len), false);
  std::vector<Layer> out;
  for (long long i = 0; i < n; ++i) {
    Layer l = base;
    if (types[static_cast<std::size_t>(i)] == "sliding_attention") make_sliding(l, window);
    out.push_back(l);
  }
  return out;
}

// configuration_qwen3_moe.py: sliding_window = sliding_window if use_sliding_window else None (no
// layer_types); modeling_qwen3_moe.py passes sliding_window=getattr(config, "sliding_window") on
// every layer; q_norm/k_norm RMSNorm(head_dim) before RoPE.
inline std::vector<Layer> qwen3_moe(const json& c, double seq_len) {
  const Family f{24, 2048, 32, 0, 10000.0L, 1.0, 32768};
  const long long window = truthy(c, "use_sliding_window", false) ? window_of(c, 4096) : 0;
  return uniform(c, f, seq_len, false, true, window);
}

// configuration_qwen3_next.py: layer_types default "linear_attention" if bool((i + 1) %
// full_attention_interval) else "full_attention"; partial_rotary_factor 0.25, head_dim 256.
// modeling_qwen3_next.py: full layers apply q_norm/k_norm (head_dim) then rotate_half on
// q[..., :rotary_dim]; linear layers are Gated DeltaNet (no RoPE, no softmax).
inline std::vector<Layer> qwen3_next(const json& c, double seq_len) {
  const Family f{48, 2048, 16, 256, 10000.0L, 0.25, 32768};
  const int hd = head_dim(c, f);
  const long long n = n_layers(c, f);
  std::vector<std::string> types;
  if (!explicit_layer_types(c, n, types)) {
    const long long every = int_any(c, {"full_attention_interval"}, 4);
    for (long long i = 0; i < n; ++i) {
      types.push_back(((i + 1) % every) != 0 ? "linear_attention" : "full_attention");
    }
  }
  Layer full = rope_layer(hd, rope_freqs(c, rope_params(c, f), f, hd, seq_len), false);
  full.qk_norm = true;
  Layer lin;
  lin.encoding = "none";
  lin.attention = "linear";
  lin.qk_head_dim = static_cast<int>(int_any(c, {"linear_key_head_dim"}, 128));
  lin.softmax_scale = 0;  // no softmax in a linear-attention layer
  std::vector<Layer> out;
  for (const std::string& t : types) out.push_back(t == "linear_attention" ? lin : full);
  return out;
}

// modeling_qwen3_vl.py (text model, config.text_config): rotate_half M-RoPE (mrope_section,
// interleaved T/H/W assignment across frequencies, frequencies as default rope); q_norm/k_norm.
inline std::vector<Layer> qwen3_vl(const json& c, double seq_len) {
  const Family f{36, 4096, 32, 128, 5000000.0L, 1.0, 128000};
  const int hd = head_dim(c, f);
  Layer l = rope_layer(hd, rope_freqs(c, rope_params(c, f), f, hd, seq_len), false, 0, "mrope");
  l.qk_norm = true;
  return std::vector<Layer>(static_cast<std::size_t>(n_layers(c, f)), l);
}

// modeling_gemma.py: rotate_half, head_dim 256, scaling = head_dim**-0.5.
inline std::vector<Layer> gemma(const json& c, double seq_len) {
  return llama_like(c, seq_len, Family{28, 3072, 16, 256, 10000.0L, 1.0, 8192});
}

// modeling_gemma2.py: scaling = query_pre_attn_scalar**-0.5; softcap attn_logit_softcapping
// (default 50.0); layer_types default "sliding_attention" if bool((i + 1) % 2) (layer 0 slides).
inline std::vector<Layer> gemma2(const json& c, double seq_len) {
  const Family f{26, 2304, 8, 256, 10000.0L, 1.0, 8192};
  const int hd = head_dim(c, f);
  const long long n = n_layers(c, f);
  std::vector<std::string> types;
  if (!explicit_layer_types(c, n, types)) types = pattern_types(n, 2);
  Layer base = rope_layer(hd, rope_freqs(c, rope_params(c, f), f, hd, seq_len), false);
  base.softmax_scale = 1.0L / std::sqrt(num(c, "query_pre_attn_scalar", 256.0L));
  base.softcap = c.contains("attn_logit_softcapping") ? num(c, "attn_logit_softcapping", 0.0L) : 50.0L;
  const long long window = window_of(c, 4096);
  std::vector<Layer> out;
  for (const std::string& t : types) {
    Layer l = base;
    if (t == "sliding_attention") make_sliding(l, window);
    out.push_back(l);
  }
  return out;
}

// modeling_gemma3.py: full layers use rotary_emb (rope_theta + rope_scaling), sliding layers
// rotary_emb_local (config.rope_theta = rope_local_base_freq, rope_scaling = {"rope_type":
// "default"}); v5: rope_parameters["full_attention"] / ["sliding_attention"]. layer_types default
// "sliding_attention" if bool((i + 1) % sliding_window_pattern) (default 6); q_norm/k_norm;
// scaling = query_pre_attn_scalar**-0.5; softcap attn_logit_softcapping (default None).
inline std::vector<Layer> gemma3_text(const json& c, double seq_len) {
  const Family f{26, 2304, 8, 256, 1000000.0L, 1.0, 131072};
  const int hd = head_dim(c, f);
  const long long n = n_layers(c, f);
  std::vector<std::string> types;
  if (!explicit_layer_types(c, n, types)) {
    types = pattern_types(n, int_any(c, {"sliding_window_pattern", "_sliding_window_pattern"}, 6));
  }
  const Rope full_p = rope_params(c, f, "full_attention");
  Rope local_p = rope_params(c, f, "sliding_attention");
  const bool nested = full_p.v5 && is_nested(c.at("rope_parameters"));
  if (!nested) {
    local_p.p = json::object();
    local_p.type = "default";
    local_p.theta = num(c, "rope_local_base_freq", 10000.0L);
  }
  Layer full = rope_layer(hd, rope_freqs(c, full_p, f, hd, seq_len), false);
  full.softmax_scale = 1.0L / std::sqrt(num(c, "query_pre_attn_scalar", 256.0L));
  full.softcap = num(c, "attn_logit_softcapping", 0.0L);
  full.qk_norm = true;
  Layer local = full;
  const RopeRef lr = rope_freqs(c, local_p, f, hd, seq_len);
  local.inv_freq = lr.inv_freq;
  local.attention_factor = lr.attention_factor;
  local.rotary_dim = lr.rotary_dim;
  make_sliding(local, window_of(c, 4096));
  std::vector<Layer> out;
  for (const std::string& t : types) out.push_back(t == "sliding_attention" ? local : full);
  return out;
}

// modeling_cohere.py: rotate_half uses x[..., ::2], x[..., 1::2]; cos/sin repeat_interleave(2)
// (interleaved pairs over the whole head); use_qk_norm -> CohereLayerNorm per head before RoPE.
inline std::vector<Layer> cohere(const json& c, double seq_len) {
  const Family f{40, 8192, 64, 0, 10000.0L, 1.0, 8192};
  return uniform(c, f, seq_len, true, truthy(c, "use_qk_norm", false), 0);
}

// modeling_cohere2.py: same interleaved rotation, but `if self.sliding_window is not None:
// apply_rotary_pos_emb` -> RoPE only on sliding layers, full layers NoPE. layer_types default
// "sliding_attention" if bool((i + 1) % sliding_window_pattern) (default 4).
inline std::vector<Layer> cohere2(const json& c, double seq_len) {
  const Family f{40, 8192, 64, 0, 10000.0L, 1.0, 8192};
  const int hd = head_dim(c, f);
  const long long n = n_layers(c, f);
  std::vector<std::string> types;
  if (!explicit_layer_types(c, n, types)) {
    types = pattern_types(n, int_any(c, {"sliding_window_pattern", "_sliding_window_pattern"}, 4));
  }
  const long long window = window_of(c, 4096);
  Layer local = rope_layer(hd, rope_freqs(c, rope_params(c, f, "sliding_attention"), f, hd, seq_len), true);
  make_sliding(local, window);
  std::vector<Layer> out;
  for (const std::string& t : types) {
    out.push_back(t == "sliding_attention" && window > 0 ? local : nope_layer(hd));
  }
  return out;
}

// modeling_glm4.py: cos/sin[..., :half].repeat_interleave(2), rotate_half_llm uses x[..., 0::2],
// x[..., 1::2], q_rot = q[..., :rotary_dim] -> interleaved pairs inside the first
// int(head_dim * partial_rotary_factor) coordinates (default 0.5, head_dim 128).
inline std::vector<Layer> glm4(const json& c, double seq_len) {
  return uniform(c, seq_len > 0 ? seq_len : seq_len, Family{40, 4096, 32, 128, 10000.0L, 0.5, 32768}.layers
                 ? c : c, Family{40, 4096, 32, 128, 10000.0L, 0.5, 32768}, seq_len, true, false, 0);
}

}  // namespace detail
}  // namespace peal_ref::hf
