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
// Model types that transformers does not ship (trust_remote_code: baichuan, chatglm, internlm2,
// mimo, minicpm, orion, qwen, nemotron-nas) follow the model's own modeling_*.py as published
// with the checkpoint (a GitHub copy of it), or vLLM's port where that file was not found; each
// such rule names its source.
// Class defaults (the configuration class's __init__ / dataclass defaults) stand in for keys
// that are absent, as transformers does.
//
// Conventions of the output (see Layer): the rotated block of a q/k head starts at
// rotary_offset and has rotary_dim coordinates; half-split pairs (i, i + rotary_dim/2) are
// HF's rotate_half, interleaved pairs (2i, 2i+1) are view_as_complex / rotate_every_two /
// x[..., 0::2] + repeat_interleave. inv_freq[i] is the frequency of pair i at `seq_len`.
// softmax_scale is the factor on q.k before the softmax (1/sqrt(qk_head_dim) unless the model
// says otherwise); it is 0 for layers without a softmax (attention "linear" or "none").
#pragma once

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "preset_reference.hpp"

namespace peal_ref::hf {

struct Layer {
  std::string encoding;   // "rope", "mrope" or "none"
  // "full", "sliding", "linear" (a recurrent mixer: Gated DeltaNet, Mamba) or "none" (no token
  // mixing at all: an MLP/MoE-only block, a DeciLM no_op or per-token Linear replacement).
  std::string attention;
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
  return uniform(c, Family{40, 4096, 32, 128, 10000.0L, 0.5, 32768}, seq_len, true, false, 0);
}

// modeling_glm4_moe.py: plain rotate_half on q[..., :rotary_dim] (half-split, NOT GLM-4's
// interleaving), partial_rotary_factor 0.5; use_qk_norm -> RMSNorm(head_dim) before RoPE.
inline std::vector<Layer> glm4_moe(const json& c, double seq_len) {
  const Family f{46, 4096, 96, 128, 10000.0L, 0.5, 131072};
  return uniform(c, f, seq_len, false, truthy(c, "use_qk_norm", false), 0);
}

// modeling_ernie4_5.py: "glm rope style (with full dim)": rotate_half uses x[..., 0::2],
// x[..., 1::2] stacked; cos/sin[..., :half].repeat_interleave(2) -> interleaved, whole head.
inline std::vector<Layer> ernie4_5(const json& c, double seq_len, const Family& f) {
  return uniform(c, f, seq_len, true, false, 0);
}

// modeling_llama4.py (text_config): use_rope = no_rope_layers[i] (default
// int((i + 1) % no_rope_layer_interval != 0), interval 4); apply_rotary_emb via
// torch.view_as_complex (interleaved); qk_norm = L2Norm only on RoPE layers when use_qk_norm
// (applied after RoPE, but a weightless RMS norm commutes with the rotation); NoPE layers with
// attn_temperature_tuning: q *= log(floor((cache_position + 1) / floor_scale) + 1) * attn_scale + 1.
// RoPE layers use chunked attention (attention_chunk_size), reported here as "full".
inline std::vector<Layer> llama4(const json& c, double seq_len) {
  const Family f{48, 5120, 40, 128, 500000.0L, 1.0, 131072};
  const int hd = head_dim(c, f);
  const long long n = n_layers(c, f);
  std::vector<long long> use_rope;
  if (has(c, "no_rope_layers") && !c.at("no_rope_layers").empty()) {
    use_rope = c.at("no_rope_layers").get<std::vector<long long>>();
    if (static_cast<long long>(use_rope.size()) < n) fail("no_rope_layers shorter than num_hidden_layers");
  } else {
    const long long every = int_any(c, {"no_rope_layer_interval"}, 4);
    for (long long i = 0; i < n; ++i) use_rope.push_back(((i + 1) % every) != 0 ? 1 : 0);
  }
  Layer rope = rope_layer(hd, rope_freqs(c, rope_params(c, f), f, hd, seq_len), true);
  rope.qk_norm = truthy(c, "use_qk_norm", true);
  Layer nope = nope_layer(hd);
  if (truthy(c, "attn_temperature_tuning", true)) {
    const long double floor_scale = num(c, "floor_scale", 8192.0L);
    const long double attn_scale = num(c, "attn_scale", 0.1L);
    nope.query_scale = [floor_scale, attn_scale](long double pos) {
      return std::log(std::floor((pos + 1.0L) / floor_scale) + 1.0L) * attn_scale + 1.0L;
    };
  }
  std::vector<Layer> out;
  for (long long i = 0; i < n; ++i) out.push_back(use_rope[static_cast<std::size_t>(i)] ? rope : nope);
  return out;
}

// configuration_smollm3.py: no_rope_layers default int((i + 1) % no_rope_layer_interval != 0);
// layer_types "sliding_attention" only if use_sliding_window and sliding_window is not None and
// not has_rope. modeling_smollm3.py: use_rope = no_rope_layers[i]; rotate_half.
inline std::vector<Layer> smollm3(const json& c, double seq_len) {
  const Family f{36, 2048, 16, 0, 2000000.0L, 1.0, 32768};
  const int hd = head_dim(c, f);
  const long long n = n_layers(c, f);
  std::vector<long long> use_rope;
  if (has(c, "no_rope_layers")) {
    use_rope = c.at("no_rope_layers").get<std::vector<long long>>();
    if (static_cast<long long>(use_rope.size()) < n) fail("no_rope_layers shorter than num_hidden_layers");
  } else {
    const long long every = int_any(c, {"no_rope_layer_interval"}, 4);
    for (long long i = 0; i < n; ++i) use_rope.push_back(((i + 1) % every) != 0 ? 1 : 0);
  }
  const long long window = window_of(c, 0);
  std::vector<std::string> types;
  if (!explicit_layer_types(c, n, types)) {
    for (long long i = 0; i < n; ++i) {
      const bool sw = truthy(c, "use_sliding_window", false) && window > 0 && !use_rope[static_cast<std::size_t>(i)];
      types.push_back(sw ? "sliding_attention" : "full_attention");
    }
  }
  const Layer rope = rope_layer(hd, rope_freqs(c, rope_params(c, f), f, hd, seq_len), false);
  std::vector<Layer> out;
  for (long long i = 0; i < n; ++i) {
    Layer l = use_rope[static_cast<std::size_t>(i)] ? rope : nope_layer(hd);
    if (types[static_cast<std::size_t>(i)] == "sliding_attention") make_sliding(l, window);
    out.push_back(l);
  }
  return out;
}

// modeling_deepseek_v2.py / modeling_deepseek_v3.py (MLA): q = [q_nope | q_pe], RoPE on the
// last qk_rope_head_dim coordinates only, frequencies with head_dim = qk_rope_head_dim.
// V2: apply_rotary_emb with torch.view_as_complex (interleaved). V3: rope_interleave (default
// True) -> apply_rotary_pos_emb_interleave (pairs (2i, 2i+1) de-interleaved then rotate_half),
// else rotate_half. scaling = qk_head_dim**-0.5, and if rope scaling is set and mscale_all_dim:
// scaling *= yarn_get_mscale(factor, mscale_all_dim) ** 2.
inline std::vector<Layer> deepseek(const json& c, double seq_len, const Family& f, bool v3) {
  const int nope = static_cast<int>(int_any(c, {"qk_nope_head_dim"}, 128));
  const int rope_d = static_cast<int>(int_any(c, {"qk_rope_head_dim"}, 64));
  const int qk = nope + rope_d;
  const Rope r = rope_params(c, f);
  const bool interleaved = v3 ? truthy(c, "rope_interleave", true) : true;
  Layer l = rope_layer(qk, rope_freqs(c, r, f, rope_d, seq_len), interleaved, nope);
  const bool scaled = r.v5 ? r.type != "default" : has(c, "rope_scaling");
  if (scaled && truthy(r.p, "mscale_all_dim")) {
    const long double m = peal_ref::detail::yarn_get_mscale(num(r.p, "factor", 1.0L), num(r.p, "mscale_all_dim", 0.0L));
    l.softmax_scale *= m * m;
  }
  return std::vector<Layer>(static_cast<std::size_t>(n_layers(c, f)), l);
}

// modeling_hunyuan_v1_dense.py / _moe.py: rotate_half; "DynamicNTKAlphaRotary": if rope_type ==
// "dynamic" and rope_parameters["alpha"]: base = rope_theta * alpha ** (head_dim / (head_dim - 2)),
// attention_scaling 1. forward is still @dynamic_rope_update, so once seq_len >
// max_position_embeddings the standard dynamic-NTK inv_freq (factor, no alpha) replaces it.
// query_layernorm / key_layernorm are applied AFTER apply_rotary_pos_emb: qk_norm (a norm on
// q and k is present) is true.
inline std::vector<Layer> hunyuan(const json& c, double seq_len) {
  const Family f{32, 4096, 32, 0, 10000.0L, 1.0, 2048};
  const int hd = head_dim(c, f);
  const Rope r = rope_params(c, f);
  RopeRef rr;
  if (r.type == "dynamic" && truthy(r.p, "alpha") &&
      !(seq_len > static_cast<double>(max_pos(c, f)))) {
    const long double d = static_cast<long double>(hd);
    const long double base = r.theta * std::pow(num(r.p, "alpha", 1.0L), d / (d - 2.0L));
    rr = RopeRef{peal_ref::detail::base_inv_freq(hd, base), 1.0L, hd};
  } else {
    rr = rope_freqs(c, r, f, hd, seq_len);
  }
  Layer l = rope_layer(hd, rr, false);
  l.qk_norm = true;
  return std::vector<Layer>(static_cast<std::size_t>(n_layers(c, f)), l);
}

// modeling_gpt_neox.py: rotary_ndims = int(head_size * rotary_pct) (v5: partial_rotary_factor),
// base rotary_emb_base (v5: rope_theta); rotate_half on q[..., :rotary_ndims]; scaling head_size**-0.5.
inline std::vector<Layer> gpt_neox(const json& c, double seq_len) {
  json cc = c;
  if (!has(cc, "rope_theta") && has(cc, "rotary_emb_base")) cc["rope_theta"] = cc["rotary_emb_base"];
  return uniform(cc, Family{44, 6144, 64, 0, 10000.0L, 0.25, 2048}, seq_len, false, false, 0);
}

// modeling_gptj.py: create_sinusoidal_positions(max_positions, rotary_dim) with base 10000,
// rotate_every_two (x[..., ::2], x[..., 1::2]) on k[..., :rotary_dim] (interleaved);
// attn_weights / sqrt(head_dim). rotary_dim None would rotate with embed_dim-sized tables
// (shape-inconsistent for more than one head), so it is not covered.
inline std::vector<Layer> gptj(const json& c, double /*seq_len*/) {
  const Family f{28, 4096, 16, 0, 10000.0L, 1.0, 2048};
  const int hd = head_dim(c, f);
  if (c.contains("rotary_dim") && c.at("rotary_dim").is_null()) fail("gptj with rotary_dim null is not covered");
  const int rd = static_cast<int>(int_any(c, {"rotary_dim"}, 64));
  if (rd < 2 || rd % 2 != 0 || rd > hd) fail("gptj rotary_dim must be even, >= 2 and <= head_dim");
  const RopeRef rr{peal_ref::detail::base_inv_freq(rd, 10000.0L), 1.0L, rd};
  return std::vector<Layer>(static_cast<std::size_t>(n_layers(c, f)), rope_layer(hd, rr, true));
}

// modeling_falcon.py: alibi -> no rotary (ALiBi bias), else FalconRotaryEmbedding + rotate_half
// over the whole head; inv_norm_factor = 1 / sqrt(head_dim).
inline std::vector<Layer> falcon(const json& c, double seq_len) {
  const Family f{32, 4544, 71, 0, 10000.0L, 1.0, 2048};
  if (truthy(c, "alibi", false)) {
    return std::vector<Layer>(static_cast<std::size_t>(n_layers(c, f)), nope_layer(head_dim(c, f)));
  }
  return uniform(c, f, seq_len, false, false, 0);
}

// modeling_phi.py / modeling_persimmon.py / modeling_stablelm.py: q_rot = q[..., :rotary_ndims]
// (int(head_dim * partial_rotary_factor)), rotate_half; qk_layernorm -> LayerNorm(head_dim)
// per head before RoPE (Phi default False, Persimmon True, StableLM False).
inline std::vector<Layer> partial_ln(const json& c, double seq_len, const Family& f, bool qk_ln_default) {
  return uniform(c, f, seq_len, false, truthy(c, "qk_layernorm", qk_ln_default), 0);
}

// configuration_gpt_oss.py: layer_types default "sliding_attention" if bool((i + 1) % 2);
// sliding_window 128. modeling_gpt_oss.py _apply_rotary_emb: first_half, second_half =
// torch.chunk(x, 2, dim=-1) (half-split); yarn rope_scaling (truncate False in the checkpoints).
inline std::vector<Layer> gpt_oss(const json& c, double seq_len) {
  const Family f{36, 2880, 64, 64, 150000.0L, 1.0, 131072};
  const int hd = head_dim(c, f);
  const long long n = n_layers(c, f);
  std::vector<std::string> types;
  if (!explicit_layer_types(c, n, types)) types = pattern_types(n, 2);
  const Layer base = rope_layer(hd, rope_freqs(c, rope_params(c, f), f, hd, seq_len), false);
  const long long window = window_of(c, 128);
  std::vector<Layer> out;
  for (const std::string& t : types) {
    Layer l = base;
    if (t == "sliding_attention") make_sliding(l, window);
    out.push_back(l);
  }
  return out;
}

// configuration_exaone4.py: if sliding_window is None: sliding_window_pattern = 0; layer_types
// default "sliding_attention" if (i + 1) % sliding_window_pattern != 0. A string pattern ("LLLG")
// is read per its docstring: 'L' local, repeating, last layer global. modeling_exaone4.py:
// q_norm/k_norm before RoPE; "global NoPE": RoPE iff sliding_window is None or the layer slides.
inline std::vector<Layer> exaone4(const json& c, double seq_len) {
  const Family f{32, 4096, 32, 0, 10000.0L, 1.0, 2048};
  const int hd = head_dim(c, f);
  const long long n = n_layers(c, f);
  const long long window = window_of(c, 4096);
  std::vector<std::string> types;
  if (!explicit_layer_types(c, n, types)) {
    const json pat = c.contains("sliding_window_pattern") ? c.at("sliding_window_pattern") : json(4);
    for (long long i = 0; i < n; ++i) {
      bool sliding = false;
      if (window > 0 && pat.is_string()) {
        const std::string s = pat.get<std::string>();
        sliding = !s.empty() && s[static_cast<std::size_t>(i) % s.size()] == 'L' && i != n - 1;
      } else if (window > 0 && pat.is_number()) {
        const long long p = pat.get<long long>();
        sliding = p > 0 && ((i + 1) % p) != 0;
      }
      types.push_back(sliding ? "sliding_attention" : "full_attention");
    }
  }
  Layer rope = rope_layer(hd, rope_freqs(c, rope_params(c, f), f, hd, seq_len), false);
  rope.qk_norm = true;
  Layer nope = nope_layer(hd);
  nope.qk_norm = true;
  std::vector<Layer> out;
  for (const std::string& t : types) {
    const bool sliding = t == "sliding_attention";
    Layer l = (window <= 0 || sliding) ? rope : nope;
    if (sliding) make_sliding(l, window);
    out.push_back(l);
  }
  return out;
}

// modeling_ministral3.py: rotate_half; sliding_window=getattr(config, "sliding_window", None);
// query_states *= 1 + beta * log(1 + floor(cache_position / original_max_position_embeddings)),
// beta = rope_parameters["llama_4_scaling_beta"], original = rope_parameters[...] (after RoPE).
inline std::vector<Layer> ministral3(const json& c, double seq_len) {
  const Family f{26, 3072, 32, 128, 1000000.0L, 1.0, 262144};
  const int hd = head_dim(c, f);
  const Rope r = rope_params(c, f);
  Layer l = rope_layer(hd, rope_freqs(c, r, f, hd, seq_len), false);
  make_sliding(l, window_of(c, 0));
  if (has(r.p, "llama_4_scaling_beta")) {
    const long double beta = num(r.p, "llama_4_scaling_beta", 0.0L);
    const long double orig = original_max(c, r, f);
    l.query_scale = [beta, orig](long double pos) {
      return 1.0L + beta * std::log(1.0L + std::floor(pos / orig));
    };
  }
  return std::vector<Layer>(static_cast<std::size_t>(n_layers(c, f)), l);
}

// modeling_phimoe.py PhimoeRotaryEmbedding.forward: with rope scaling, mscale = long_mscale if
// seq_len > rope_scaling["original_max_position_embeddings"] else short_mscale, replacing the
// longrope attention factor unless that mscale is None; rotate_half; sliding_window (default None).
inline std::vector<Layer> phimoe(const json& c, double seq_len) {
  const Family f{32, 4096, 32, 0, 1000000.0L, 1.0, 131072};
  std::vector<Layer> out = mistral_like(c, seq_len, f, 0);
  const Rope r = rope_params(c, f);
  if (r.type != "default") {
    const long double orig = num(r.p, "original_max_position_embeddings",
                                 num(c, "original_max_position_embeddings", static_cast<long double>(max_pos(c, f))));
    const char* key = seq_len > static_cast<double>(orig) ? "long_mscale" : "short_mscale";
    if (has(r.p, key)) {
      for (Layer& l : out) l.attention_factor = num(r.p, key, 1.0L);
    }
  }
  return out;
}

// No RoPE at all: modeling_bloom.py / modeling_mpt.py (ALiBi), modeling_gpt_bigcode.py (learned
// absolute positions). Bloom: inv_norm_factor 1/sqrt(head_dim); MPT: attn_config.softmax_scale
// or 1/sqrt(d_model / n_heads); GPT-BigCode: head_dim**-0.5 if scale_attn_weights else 1.
inline std::vector<Layer> no_rope(const json& c, const Family& f, long double scale) {
  Layer l = nope_layer(head_dim(c, f));
  if (scale > 0.0L) l.softmax_scale = scale;
  return std::vector<Layer>(static_cast<std::size_t>(n_layers(c, f)), l);
}

inline std::vector<Layer> mpt(const json& c) {
  const Family f{24, 2048, 16, 0, 10000.0L, 1.0, 2048};
  const json attn = has(c, "attn_config") ? c.at("attn_config") : json::object();
  long double scale = num(attn, "softmax_scale", 0.0L);
  if (!(scale > 0.0L)) {
    scale = 1.0L / std::sqrt(static_cast<long double>(hidden(c, f)) / static_cast<long double>(heads(c, f)));
  }
  return no_rope(c, f, scale);
}

inline std::vector<Layer> gpt_bigcode(const json& c) {
  const Family f{12, 768, 12, 0, 10000.0L, 1.0, 1024};
  const long double scale = truthy(c, "scale_attn_weights", true)
                                ? 1.0L / std::sqrt(static_cast<long double>(head_dim(c, f)))
                                : 1.0L;
  return no_rope(c, f, scale);
}

// ---- families added from the models' own code (transformers v5 tree and remote code) ----------

// A layer without any token mixing: an MLP/MoE-only block or a no-op / per-token Linear
// replacement of attention. No positions, no softmax.
inline Layer no_mixing_layer() {
  Layer l;
  l.encoding = "none";
  l.attention = "none";
  l.qk_head_dim = 0;
  l.softmax_scale = 0;
  return l;
}

// A recurrent (linear-attention / state-space) mixer: no positions, no softmax.
inline Layer recurrent_layer(int key_dim) {
  Layer l;
  l.encoding = "none";
  l.attention = "linear";
  l.qk_head_dim = key_dim;
  l.softmax_scale = 0;
  return l;
}

// huggingface/transformers src/transformers/models/deepseek_v32/modular_deepseek_v32.py (and the
// generated configuration_deepseek_v32.py): DeepseekV32Attention is DeepSeek-V3 MLA whose forward
// always calls apply_rotary_pos_emb_interleave on q_rot / k_rot (the config class deletes
// `rope_interleave`: `rope_interleave = AttributeError()`), RoPE on the last qk_rope_head_dim
// coordinates (config.head_dim is pointed at qk_rope_head_dim), self.scaling inherited from
// DeepseekV3Attention (qk_head_dim**-0.5, times yarn_get_mscale(factor, mscale_all_dim)**2 when
// the rope type is not default). The DSA indexer (its own wq_b/wk, half-split
// apply_rotary_pos_emb, softmax_scale index_head_dim**-0.5, ReLU scores) only selects the top
// index_topk keys; it is not described here. The MTP layer (model.layers.61) is ignored on load:
// num_hidden_layers entries. Class defaults: 61 layers, max_position_embeddings 163840.
inline std::vector<Layer> deepseek_v32(const json& c, double seq_len) {
  json cc = c;
  cc["rope_interleave"] = true;
  return deepseek(cc, seq_len, Family{61, 7168, 128, 0, 10000.0L, 1.0, 163840}, true);
}

// huggingface/transformers src/transformers/models/minimax_m2/configuration_minimax_m2.py and
// modeling_minimax_m2.py (v5): convert_rope_params_to_dict sets rope_parameters["rope_theta"]
// setdefault(default_theta = 5e6) and partial_rotary_factor = kwargs.pop("rotary_dim",
// head_dim // 2) / head_dim (overriding any partial_rotary_factor); apply_rotary_pos_emb rotates
// q[..., :rotary_dim] with rotate_half (Glm4Moe style); q_norm / k_norm are RMSNorm over the whole
// q / k projection (num_heads * head_dim), before RoPE; scaling head_dim**-0.5; every layer full
// causal attention ("No sliding window opposed to mixtral"); no attn_type_list is read.
// A top-level rope_theta is NOT read by that conversion (the dict's rope_theta or 5e6 wins); a
// config whose top-level rope_theta differs from that value is refused rather than guessed.
inline std::vector<Layer> minimax_m2(const json& c, double seq_len) {
  const Family f{62, 3072, 48, 128, 5000000.0L, 0.5, 196608};
  const int hd = head_dim(c, f);
  Rope r = rope_params(c, f);
  const long double used_theta = num(r.p, "rope_theta", 5000000.0L);
  if (has(c, "rope_theta") && !has(r.p, "rope_theta") && !peal_ref::detail::same(num(c, "rope_theta", 0.0L), used_theta)) {
    fail("minimax_m2: top-level rope_theta differs from the value transformers uses (dict or 5e6)");
  }
  r.theta = used_theta;
  const long long rd = int_any(c, {"rotary_dim"}, hd / 2);
  r.partial = static_cast<double>(rd) / static_cast<double>(hd);
  Layer l = rope_layer(hd, rope_freqs(c, r, f, hd, seq_len), false);
  l.qk_norm = true;
  return std::vector<Layer>(static_cast<std::size_t>(n_layers(c, f)), l);
}

// huggingface/transformers src/transformers/models/nemotron_h/configuration_nemotron_h.py and
// modular_nemotron_h.py / modeling_nemotron_h.py (v5). Layer kinds: layers_block_type, else
// hybrid_override_pattern ('M' mamba, '*' attention, 'E' moe; the Nemotron-H remote code also has
// '-' = plain MLP block, which the in-tree _pattern_to_list rejects - it is accepted here as an
// MLP block), else the class default ["mamba", "moe", "attention", "moe"]. The in-tree config
// derives num_hidden_layers from that list and ignores a given num_hidden_layers (the remote code
// asserts they match); this reference must return num_hidden_layers entries, so a mismatch (e.g. a
// config without its pattern) is refused. NemotronHAttention never calls apply_rotary_pos_emb: no
// position encoding at all (NoPE), causal full attention (config.sliding_window is not passed to
// the attention), scaling head_dim**-0.5 (head_dim default 128). Mamba-2 layers: "linear", key
// dim = ssm_state_size (B/C width, default 128). MLP / MoE blocks mix no tokens: "none".
inline std::vector<Layer> nemotron_h(const json& c, double /*seq_len*/) {
  std::vector<std::string> kinds;
  if (has(c, "layers_block_type") && c.at("layers_block_type").is_array()) {
    kinds = c.at("layers_block_type").get<std::vector<std::string>>();
  } else if (has(c, "hybrid_override_pattern") && c.at("hybrid_override_pattern").is_string()) {
    for (const char ch : c.at("hybrid_override_pattern").get<std::string>()) {
      if (ch == 'M') kinds.emplace_back("mamba");
      else if (ch == '*') kinds.emplace_back("attention");
      else if (ch == 'E') kinds.emplace_back("moe");
      else if (ch == '-') kinds.emplace_back("mlp");
      else fail(std::string("nemotron_h: unknown hybrid_override_pattern character '") + ch + "'");
    }
  } else {
    kinds = {"mamba", "moe", "attention", "moe"};  // NemotronHConfig default layers_block_type
  }
  if (has(c, "num_hidden_layers") &&
      static_cast<long long>(kinds.size()) != static_cast<long long>(num(c, "num_hidden_layers", 0.0L))) {
    fail("nemotron_h: num_hidden_layers (" + std::to_string(static_cast<long long>(num(c, "num_hidden_layers", 0.0L))) +
         ") does not match the layer pattern length (" + std::to_string(kinds.size()) +
         (has(c, "hybrid_override_pattern") || has(c, "layers_block_type") ? ")" : ", class default pattern)"));
  }
  const Family f{static_cast<long long>(kinds.size()), 4096, 32, 128, 10000.0L, 1.0, 4096};
  Layer attn = nope_layer(head_dim(c, f));
  const Layer mamba = recurrent_layer(static_cast<int>(int_any(c, {"ssm_state_size"}, 128)));
  std::vector<Layer> out;
  for (const std::string& k : kinds) {
    if (k == "attention") out.push_back(attn);
    else if (k == "mamba") out.push_back(mamba);
    else if (k == "moe" || k == "mlp") out.push_back(no_mixing_layer());
    else fail("nemotron_h: unknown block type '" + k + "'");
  }
  return out;
}

// huggingface/transformers src/transformers/models/qwen3_5/modular_qwen3_5.py /
// configuration_qwen3_5.py and src/transformers/models/qwen3_5_moe/modular_qwen3_5_moe.py (text
// model, config.text_config): Qwen3NextConfig-style layer_types (default "linear_attention" if
// bool((i + 1) % full_attention_interval) else "full_attention", interval 4); partial_rotary_factor
// default 0.25 (kwargs.setdefault), head_dim 256. Full layers: Qwen3NextAttention (q_norm/k_norm
// RMSNorm(head_dim) before RoPE, gated output, scaling head_dim**-0.5) with Qwen3_5TextRotaryEmbedding
// = Qwen3VLTextRotaryEmbedding (interleaved M-RoPE over mrope_section, default [11, 11, 10]; the
// config's mrope_interleaved is not read - it is always interleaved) on the frequencies of
// int(head_dim * partial_rotary_factor) dims, rotate_half on q[..., :rotary_dim]. Linear layers:
// Gated DeltaNet (no positions, no softmax), key head dim linear_key_head_dim. MTP layers
// (mtp_num_hidden_layers) are ignored on load (^mtp.*): num_hidden_layers entries.
inline std::vector<Layer> qwen3_5(const json& c, double seq_len, const Family& f) {
  const int hd = head_dim(c, f);
  const long long n = n_layers(c, f);
  std::vector<std::string> types;
  if (!explicit_layer_types(c, n, types)) {
    const long long every = int_any(c, {"full_attention_interval"}, 4);
    for (long long i = 0; i < n; ++i) types.push_back(((i + 1) % every) != 0 ? "linear_attention" : "full_attention");
  }
  Layer full = rope_layer(hd, rope_freqs(c, rope_params(c, f), f, hd, seq_len), false, 0, "mrope");
  full.qk_norm = true;
  const Layer lin = recurrent_layer(static_cast<int>(int_any(c, {"linear_key_head_dim"}, 128)));
  std::vector<Layer> out;
  for (const std::string& t : types) {
    if (t == "linear_attention") out.push_back(lin);
    else if (t == "full_attention") out.push_back(full);
    else fail("qwen3_5: unknown layer type '" + t + "'");
  }
  return out;
}

// Remote-code llama-style attention (rotate_half over the whole head, head_dim = hidden_size //
// num_attention_heads, attn_weights / sqrt(head_dim)) with the classic remote-code RotaryEmbedding
// classes: rope_scaling None -> base rope_theta; {"type": "linear", "factor"} -> positions / factor;
// {"type": "dynamic", "factor"} -> base * (factor * seq_len / max_position_embeddings - (factor -
// 1)) ** (dim / (dim - 2)) once seq_len > max_position_embeddings (the same as HF's dynamic rope at
// that length). Anything else is not covered.
inline std::vector<Layer> remote_llama(const json& c, double seq_len, const Family& f, const std::string& who) {
  if (has(c, "rope_parameters")) fail(who + ": rope_parameters is not read by the remote code");
  if (has(c, "head_dim") && !peal_ref::detail::same(num(c, "head_dim", 0.0L), static_cast<long double>(hidden(c, f) / heads(c, f)))) {
    fail(who + ": the remote code uses hidden_size // num_attention_heads, not head_dim");
  }
  const int hd = static_cast<int>(hidden(c, f) / heads(c, f));
  if (hd * heads(c, f) != hidden(c, f)) fail(who + ": hidden_size must be divisible by num_attention_heads");
  const Rope r = rope_params(c, f);
  if (r.type != "default" && r.type != "linear" && r.type != "dynamic") {
    fail(who + ": rope_scaling type '" + r.type + "' is not covered (remote code: linear / dynamic only)");
  }
  if (r.type != "default" && !has(r.p, "factor")) fail(who + ": rope_scaling needs factor");
  return std::vector<Layer>(static_cast<std::size_t>(n_layers(c, f)), rope_layer(hd, rope_freqs(c, r, f, hd, seq_len), false));
}

// Baichuan remote code. vllm-project/vllm vllm/model_executor/models/baichuan.py (the hub's
// Baichuan2-7B modeling_baichuan.py was not found on GitHub; its 13B sibling was, see below):
// BaichuanForCausalLM uses ROPE iff hidden_size == 4096 ("baichuan2 7b"), else ALIBI ("baichuan
// 13b, baichuan2 13b"); BaiChuanForCausalLM (Baichuan-7B) always ROPE. ROPE: get_rope(head_dim,
// rotary_dim=head_dim, neox style = rotate_half), base 10000 (Baichuan-7B remote code
// alibaba/alimama-video-narrator modeling_baichuan.py: RotaryEmbedding(head_dim) with its default
// base=10000, rotate_half, attn_weights / sqrt(head_dim)). ALIBI (Baichuan 13B remote code, e.g.
// Mrgengli/baichuan_python modeling_baichuan.py: _gen_alibi_mask slopes, matmul / sqrt(head_dim),
// no rotary): reported as encoding "none" with the 1/sqrt(head_dim) scale, the bias not modelled
// (as bloom / mpt). A config carrying rope_theta / rope_scaling is refused (the remote code
// hard-codes base 10000 and has no scaling).
inline std::vector<Layer> baichuan(const json& c, double /*seq_len*/) {
  const Family f{32, 4096, 32, 0, 10000.0L, 1.0, 4096};
  if (has(c, "rope_scaling") || (has(c, "rope_theta") && !peal_ref::detail::same(num(c, "rope_theta", 0.0L), 10000.0L))) {
    fail("baichuan: rope_theta / rope_scaling are not read by the remote code");
  }
  std::string arch;
  if (has(c, "architectures") && c.at("architectures").is_array() && !c.at("architectures").empty()) {
    arch = c.at("architectures").at(0).get<std::string>();
  }
  const int hd = static_cast<int>(hidden(c, f) / heads(c, f));
  const bool rope = arch == "BaiChuanForCausalLM" || hidden(c, f) == 4096;
  if (!rope) return std::vector<Layer>(static_cast<std::size_t>(n_layers(c, f)), nope_layer(hd));
  return std::vector<Layer>(static_cast<std::size_t>(n_layers(c, f)),
                            rope_layer(hd, rope_default(hd, 10000.0L), false));
}

// ChatGLM2/3 (GLM-4 chat) remote code, modeling_chatglm.py (czk1997/chatglm3-copy, a copy of
// THUDM/chatglm3-6b): head dim = kv_channels (projection_size = kv_channels * num_attention_heads);
// rotary_dim = kv_channels (or hidden_size // num_attention_heads if kv_channels is None);
// RotaryEmbedding(rotary_dim // 2): theta = 1 / base ** (arange(0, n_elem, 2) / n_elem) with
// n_elem = rotary_dim // 2 and base = 10000 * rope_ratio (rope_ratio: ChatGLM3-6B-32k / GLM-4
// versions of the same file, `base = base * self.rope_ratio`, default 1); apply_rotary_pos_emb
// rotates x[..., :rot_dim] with rot_dim = 2 * len(theta) as pairs (x[2i], x[2i+1]) (interleaved),
// the other half of the head passes through. CoreAttention: SDPA default scale (1/sqrt(head dim)),
// or baddbmm alpha 1/(sqrt(hn) * layer_number) then * layer_number (apply_query_key_layer_scaling)
// - the same 1/sqrt(kv_channels) either way. The cache is rotary_pos_emb(config.seq_length)
// indexed by position_ids, so positions >= seq_length are out of range: refused. original_rope is
// not read. ChatGLM-6B v1 (position_encoding_2d) is a different model: not covered.
inline std::vector<Layer> chatglm(const json& c, double seq_len) {
  const Family f{28, 4096, 32, 0, 10000.0L, 1.0, 2048};
  if (truthy(c, "position_encoding_2d")) fail("chatglm: ChatGLM-6B v1 (position_encoding_2d) is not covered");
  const long long kvc = has(c, "kv_channels") ? int_any(c, {"kv_channels"}, 128) : (c.contains("kv_channels") ? 0 : 128);
  const int rotary = static_cast<int>(kvc > 0 ? kvc : hidden(c, f) / heads(c, f));
  const int qk = static_cast<int>(kvc > 0 ? kvc : hidden(c, f) / heads(c, f));
  const int n_elem = rotary / 2;
  if (n_elem < 2 || n_elem % 2 != 0) fail("chatglm: rotary dim // 2 must be even and >= 2");
  const long long seq_length = int_any(c, {"seq_length"}, 2048);
  if (seq_len > static_cast<double>(seq_length)) {
    fail("chatglm: positions beyond config.seq_length index past the rotary cache");
  }
  const long double base = 10000.0L * num(c, "rope_ratio", 1.0L);
  const RopeRef rr{peal_ref::detail::base_inv_freq(n_elem, base), 1.0L, n_elem};
  return std::vector<Layer>(static_cast<std::size_t>(n_layers(c, f)), rope_layer(qk, rr, true));
}

// InternLM2 remote code, modeling_internlm2.py (NanSang2000/S1mpleAgent, a copy of the
// internlm/internlm2 hub file): head_dim = hidden_size // num_attention_heads, wqkv grouped per KV
// head (layout only), InternLM2RotaryEmbedding(head_dim, max_position_embeddings, base=rope_theta)
// with rope_scaling["type"] "dynamic" (InternLM2DynamicNTKScalingRotaryEmbedding) or "linear",
// rotate_half over the whole head, attn_weights / sqrt(head_dim). InternLM2Config defaults:
// rope_theta 10000, max_position_embeddings 2048.
inline std::vector<Layer> internlm2(const json& c, double seq_len) {
  return remote_llama(c, seq_len, Family{32, 4096, 32, 0, 10000.0L, 1.0, 2048}, "internlm2");
}

// MiMo remote code, modeling_mimo.py (XiaomiMiMo/MiMo; the stored copy carries extra text after
// the original classes): MiMoModel(Qwen2Model) with num_hidden_layers Qwen2 decoder layers plus
// config.num_nextn_predict_layers MiMoMTPLayers that Qwen2Model.forward never runs (MTP heads for
// speculative decoding): the decoder is Qwen2's, so the Qwen2 rule (modeling_qwen2.py) applies to
// num_hidden_layers entries. MiMoConfig is a Qwen2Config (configuration_mimo.py not found; the
// published configs carry every key read here).
inline std::vector<Layer> mimo(const json& c, double seq_len) {
  if (truthy(c, "use_mrope")) fail("mimo: use_mrope is not covered");
  return qwen2_like(c, seq_len, Family{32, 4096, 32, 0, 10000.0L, 1.0, 32768}, false, 28);
}

// MiniCPM (1/2) remote code, modeling_minicpm.py (oshersidi/OCD, a copy of the openbmb hub file):
// MiniCPMAttention is LlamaAttention (head_dim = hidden_size // num_attention_heads, rotate_half
// over the whole head, linear / dynamic MiniCPM*RotaryEmbedding, attn_weights / sqrt(head_dim)).
// scale_emb, scale_depth / sqrt(num_layers) and dim_model_base scale the embeddings, the residual
// branches and the logits only - not q, k or the softmax. MiniCPM-3 (MLA) / MiniCPM-4 (longrope,
// InfLLM-v2 sparse_config) variants are not covered.
inline std::vector<Layer> minicpm(const json& c, double seq_len) {
  if (truthy(c, "sparse_config")) fail("minicpm: sparse_config (InfLLM v2) is not covered");
  if (has(c, "kv_lora_rank") || has(c, "qk_rope_head_dim")) fail("minicpm: MiniCPM3 MLA is not covered");
  return remote_llama(c, seq_len, Family{32, 4096, 32, 0, 10000.0L, 1.0, 2048}, "minicpm");
}

// Orion: vllm-project/vllm vllm/model_executor/models/orion.py ("Adapted from
// OrionStarAI/Orion-14B-Base modeling_orion.py", which was not found on GitHub): head_dim =
// hidden_size // num_attention_heads, get_rope(head_dim, rotary_dim=head_dim, base=rope_theta
// (10000), rope_scaling) neox style = rotate_half, scaling head_dim**-0.5, every layer the same.
inline std::vector<Layer> orion(const json& c, double seq_len) {
  return remote_llama(c, seq_len, Family{40, 5120, 40, 0, 10000.0L, 1.0, 4096}, "orion");
}

// Qwen (v1) remote code, modeling_qwen.py (mapengAdam/qianwen-72B, a copy of the Qwen hub file in
// its final form, shared by Qwen-1.8B/7B/14B/72B) and QWenConfig defaults (kv_channels 128,
// rotary_pct 1.0, rotary_emb_base 10000, use_dynamic_ntk True, use_logn_attn True; seq_length is
// not a constructor default, so it must be in the config). head_dim = hidden_size //
// num_attention_heads (must equal kv_channels: c_attn is split by hidden_size, projection by
// kv_channels); rotary dim = kv_channels, or int(kv_channels * rotary_pct) if rotary_pct != 1;
// _rotate_half splits "(j d)" with j=2 (half-split), t[..., :rot_dim] rotated. Inference:
//  * dynamic NTK (use_dynamic_ntk, prefill of kv_seq_len tokens, no padding): ntk_alpha =
//    max(2 ** ceil(log(kv_seq_len / seq_length, 2) + 1) - 1, 1) (Python floats, mirrored in
//    double), base = rotary_emb_base * ntk_alpha ** (dim / (dim - 2)); decode steps reuse the
//    prefill alpha, so inv_freq here is the one for a prefill of seq_len tokens;
//  * logn (use_logn_attn, not training): query *= logn_list[p] for 0-based position p, logn_list[p]
//    = log(p + 1, seq_length) if p + 1 > seq_length else 1, a table of 32767 entries (longer
//    sequences fail to broadcast: refused);
//  * softmax scale 1/sqrt(head_dim) (scale_attn_weights is hard-coded True; SDPA/flash default).
inline std::vector<Layer> qwen1(const json& c, double seq_len) {
  const Family f{32, 4096, 32, 0, 10000.0L, 1.0, 8192};
  const long long kvc = int_any(c, {"kv_channels"}, 128);
  const int hd = static_cast<int>(hidden(c, f) / heads(c, f));
  if (static_cast<long long>(hd) * heads(c, f) != hidden(c, f) || kvc != hd) {
    fail("qwen: kv_channels * num_attention_heads must equal hidden_size");
  }
  if (!has(c, "seq_length")) fail("qwen: seq_length is required by the remote code (no default)");
  const double seq_length = static_cast<double>(num(c, "seq_length", 0.0L));
  const double pct = static_cast<double>(num(c, "rotary_pct", 1.0L));
  int dim = static_cast<int>(kvc);
  if (pct < 1.0 || pct > 1.0) {
    if (!(pct < 1.0)) fail("qwen: rotary_pct must be <= 1");
    dim = static_cast<int>(static_cast<double>(kvc) * pct);
  }
  if (dim < 4 || dim % 2 != 0) fail("qwen: rotary dim must be even and >= 4");
  long double base = num(c, "rotary_emb_base", 10000.0L);
  if (truthy(c, "use_dynamic_ntk", true)) {
    const double context_value = std::log(seq_len / seq_length) / std::log(2.0) + 1.0;
    double alpha = std::pow(2.0, std::ceil(context_value)) - 1.0;
    if (alpha < 1.0) alpha = 1.0;
    const long double d = static_cast<long double>(dim);
    base = base * std::pow(static_cast<long double>(alpha), d / (d - 2.0L));
  }
  Layer l = rope_layer(hd, RopeRef{peal_ref::detail::base_inv_freq(dim, base), 1.0L, dim}, false);
  if (truthy(c, "use_logn_attn", true)) {
    if (seq_len > 32767.0) fail("qwen: use_logn_attn covers at most 32767 positions");
    const long double sl = static_cast<long double>(seq_length);
    l.query_scale = [sl](long double pos) {
      const long double i = pos + 1.0L;
      return i > sl ? std::log(i) / std::log(sl) : 1.0L;
    };
  }
  return std::vector<Layer>(static_cast<std::size_t>(n_layers(c, f)), l);
}

// nemotron-nas (DeciLM: Llama-3.1/3.3-Nemotron-Nano/Super/Ultra) remote code, modeling_decilm.py
// (the NVIDIA hub file; the stored copy found by content carries later additions - mamba, llama4,
// mistral_yarn - that these configs do not use) and vllm-project/vllm
// vllm/model_executor/models/nemotron_nas.py: DeciLMDecoderLayer reads config.block_configs[i]
// (there is no default: a config without block_configs cannot build a layer - refused).
// attention.no_op -> no attention sublayer at all; attention.replace_with_linear ->
// DeciLMLinearAttention = Linear(hidden, hidden) per token: both mix no tokens ("none").
// Otherwise DeciLMAttention: num_key_value_heads = num_heads // n_heads_in_group, head_dim =
// config.head_dim or hidden_size // num_attention_heads, position_embedding_type "rope" (default)
// -> DeciLMRotaryEmbedding.llama3_forward: ROPE_INIT_FUNCTIONS[rope_scaling type] (transformers
// 4.44.2 copy, llama3 in these checkpoints), rotate_half over the whole head, attn_weights /
// sqrt(head_dim). Sinks, windows, sparsify-only-in-training aside, anything else is refused.
inline std::vector<Layer> nemotron_nas(const json& c, double seq_len) {
  const Family f{32, 4096, 32, 0, 10000.0L, 1.0, 2048};
  if (!has(c, "block_configs") || !c.at("block_configs").is_array()) {
    fail("nemotron-nas: config has no block_configs (DeciLM builds each layer from block_configs[i])");
  }
  const json& blocks = c.at("block_configs");
  const long long n = n_layers(c, f);
  if (static_cast<long long>(blocks.size()) < n) fail("nemotron-nas: block_configs shorter than num_hidden_layers");
  const std::string pe = has(c, "position_embedding_type") ? c.at("position_embedding_type").get<std::string>() : "rope";
  if (pe != "rope") fail("nemotron-nas: position_embedding_type '" + pe + "' is not covered");
  long long hdl = int_any(c, {"head_dim"}, 0);
  if (hdl <= 0) hdl = hidden(c, f) / heads(c, f);
  const int hd = static_cast<int>(hdl);
  const Layer attn = rope_layer(hd, rope_freqs(c, rope_params(c, f), f, hd, seq_len), false);
  std::vector<Layer> out;
  for (long long i = 0; i < n; ++i) {
    const json& b = blocks.at(static_cast<std::size_t>(i));
    const json a = has(b, "attention") ? b.at("attention") : json::object();
    if (truthy(a, "no_op") || truthy(a, "replace_with_linear")) {
      out.push_back(no_mixing_layer());
      continue;
    }
    for (const char* k : {"num_sink_tokens", "unshifted_sink", "use_prefill_window_in_sink_attention",
                          "window_length", "prefill_sliding_window", "mamba", "llama4", "is_mamba", "is_llama4"}) {
      if (truthy(a, k)) fail(std::string("nemotron-nas: attention.") + k + " is not covered");
    }
    if (!has(a, "n_heads_in_group")) fail("nemotron-nas: attention block needs n_heads_in_group");
    out.push_back(attn);
  }
  return out;
}

inline const json& text_config(const json& c) {
  if (has(c, "text_config") && c.at("text_config").is_object()) return c.at("text_config");
  return c;
}

inline std::string model_type(const json& c, const std::string& def = "") {
  return has(c, "model_type") ? c.at("model_type").get<std::string>() : def;
}

inline std::vector<Layer> dispatch(const json& c, const std::string& mt, double seq_len) {
  // Llama-style: rotate_half over the whole head (modeling_llama.py, modeling_olmo.py,
  // modeling_olmo2.py / modeling_olmoe.py with q_norm/k_norm over the whole projection).
  if (mt == "llama") return llama_like(c, seq_len, Family{32, 4096, 32, 0, 10000.0L, 1.0, 2048});
  if (mt == "olmo") return llama_like(c, seq_len, Family{32, 4096, 32, 0, 10000.0L, 1.0, 2048});
  if (mt == "olmo2") return llama_like(c, seq_len, Family{32, 4096, 32, 0, 10000.0L, 1.0, 2048}, true);
  if (mt == "olmoe") return llama_like(c, seq_len, Family{16, 2048, 16, 0, 10000.0L, 1.0, 4096}, true);
  if (mt == "granite") return granite(c, seq_len);
  if (mt == "nemotron") return llama_like(c, seq_len, Family{32, 6144, 48, 0, 10000.0L, 0.5, 4096});
  if (mt == "mistral") return mistral_like(c, seq_len, Family{32, 4096, 32, 0, 10000.0L, 1.0, 131072}, 4096);
  if (mt == "mixtral") return mistral_like(c, seq_len, Family{32, 4096, 32, 0, 1000000.0L, 1.0, 131072}, 0);
  if (mt == "starcoder2") return mistral_like(c, seq_len, Family{30, 3072, 24, 0, 10000.0L, 1.0, 4096}, 0);
  // modeling_phi3.py: q_rot = q[..., :rotary_dim], rotate_half; Phi3Config
  // original_max_position_embeddings=4096 (a class attribute, so always present for longrope).
  if (mt == "phi3") return mistral_like(c, seq_len, Family{32, 3072, 32, 0, 10000.0L, 1.0, 4096}, 0, 4096.0L);
  if (mt == "phimoe") return phimoe(c, seq_len);
  if (mt == "ministral3") return ministral3(c, seq_len);
  if (mt == "mistral3") {
    const json& t = text_config(c);
    return dispatch(t, model_type(t, "mistral"), seq_len);
  }
  if (mt == "qwen2") return qwen2_like(c, seq_len, Family{32, 4096, 32, 0, 10000.0L, 1.0, 32768}, false, 28);
  if (mt == "qwen3") return qwen2_like(c, seq_len, Family{32, 4096, 32, 128, 10000.0L, 1.0, 32768}, true, 28);
  if (mt == "qwen2_moe") return qwen2_moe(c, seq_len);
  if (mt == "qwen3_moe") return qwen3_moe(c, seq_len);
  if (mt == "qwen3_next") return qwen3_next(c, seq_len);
  // modeling_qwen2_vl.py / modeling_qwen2_5_vl.py: apply_multimodal_rotary_pos_emb, rotate_half,
  // mrope_section split of the default-rope frequencies; text settings in text_config (newer
  // checkpoints) or at the top level (older ones); Qwen2-style sliding rule.
  if (mt == "qwen2_vl" || mt == "qwen2_5_vl" || mt == "qwen2_vl_text" || mt == "qwen2_5_vl_text") {
    return qwen2_like(text_config(c), seq_len, Family{80, 8192, 64, 0, 1000000.0L, 1.0, 32768}, false, 80, "mrope");
  }
  // Qwen3-VL-MoE: modeling_qwen3_vl_moe.py has the attention and rotary of Qwen3-VL.
  if (mt == "qwen3_vl" || mt == "qwen3_vl_text" || mt == "qwen3_vl_moe" || mt == "qwen3_vl_moe_text")
    return qwen3_vl(text_config(c), seq_len);
  if (mt == "phi") return partial_ln(c, seq_len, Family{24, 2048, 32, 0, 10000.0L, 0.5, 2048}, false);
  if (mt == "persimmon") return partial_ln(c, seq_len, Family{36, 4096, 64, 0, 25000.0L, 0.5, 16384}, true);
  if (mt == "stablelm") return partial_ln(c, seq_len, Family{32, 2560, 32, 0, 10000.0L, 0.25, 4096}, false);
  if (mt == "gemma") return gemma(c, seq_len);
  if (mt == "gemma2") return gemma2(c, seq_len);
  if (mt == "gemma3") return gemma3_text(text_config(c), seq_len);
  if (mt == "gemma3_text") return gemma3_text(c, seq_len);
  if (mt == "cohere") return cohere(c, seq_len);
  if (mt == "cohere2") return cohere2(c, seq_len);
  if (mt == "glm4") return glm4(c, seq_len);
  if (mt == "glm4_moe") return glm4_moe(c, seq_len);
  if (mt == "ernie4_5") return ernie4_5(c, seq_len, Family{18, 1024, 16, 128, 500000.0L, 1.0, 131072});
  if (mt == "ernie4_5_moe") return ernie4_5(c, seq_len, Family{28, 2560, 20, 128, 500000.0L, 1.0, 131072});
  if (mt == "llama4") return llama4(text_config(c), seq_len);
  if (mt == "llama4_text") return llama4(c, seq_len);
  if (mt == "smollm3") return smollm3(c, seq_len);
  if (mt == "deepseek_v2") return deepseek(c, seq_len, Family{30, 4096, 32, 0, 10000.0L, 1.0, 2048}, false);
  // Kimi K2: model_type "kimi_k2", architectures DeepseekV3ForCausalLM (its remote code is
  // DeepSeek-V3's modeling file).
  if (mt == "deepseek_v3" || mt == "kimi_k2") return deepseek(c, seq_len, Family{61, 7168, 128, 0, 10000.0L, 1.0, 4096}, true);
  if (mt == "deepseek_v32") return deepseek_v32(c, seq_len);
  if (mt == "hunyuan_v1_dense" || mt == "hunyuan_v1_moe") return hunyuan(c, seq_len);
  if (mt == "gpt_neox") return gpt_neox(c, seq_len);
  if (mt == "gptj") return gptj(c, seq_len);
  if (mt == "falcon") return falcon(c, seq_len);
  if (mt == "gpt_oss") return gpt_oss(c, seq_len);
  if (mt == "exaone4") return exaone4(c, seq_len);
  if (mt == "bloom") {
    const Family f{2, 64, 8, 0, 10000.0L, 1.0, 2048};
    return no_rope(c, f, 1.0L / std::sqrt(static_cast<long double>(head_dim(c, f))));
  }
  if (mt == "mpt") return mpt(c);
  if (mt == "minimax_m2") return minimax_m2(c, seq_len);
  if (mt == "nemotron_h") return nemotron_h(c, seq_len);
  if (mt == "qwen3_5") return qwen3_5(text_config(c), seq_len, Family{32, 4096, 16, 256, 10000.0L, 0.25, 32768});
  if (mt == "qwen3_5_text") return qwen3_5(c, seq_len, Family{32, 4096, 16, 256, 10000.0L, 0.25, 32768});
  if (mt == "qwen3_5_moe") return qwen3_5(text_config(c), seq_len, Family{40, 2048, 16, 256, 10000.0L, 0.25, 32768});
  if (mt == "qwen3_5_moe_text") return qwen3_5(c, seq_len, Family{40, 2048, 16, 256, 10000.0L, 0.25, 32768});
  // Remote-code (trust_remote_code) models: rules read from the models' own modeling files.
  if (mt == "baichuan") return baichuan(c, seq_len);
  if (mt == "chatglm") return chatglm(c, seq_len);
  if (mt == "internlm2") return internlm2(c, seq_len);
  if (mt == "mimo") return mimo(c, seq_len);
  if (mt == "minicpm") return minicpm(c, seq_len);
  if (mt == "orion") return orion(c, seq_len);
  if (mt == "qwen") return qwen1(c, seq_len);
  if (mt == "nemotron-nas") return nemotron_nas(c, seq_len);
  if (mt == "gpt_bigcode") return gpt_bigcode(c);
  fail("model_type '" + mt + "' is not covered");
}

}  // namespace detail

// Per layer, in order (num_hidden_layers entries); seq_len is the length the positions are
// computed for (dynamic NTK, longrope, PhiMoE mscale, Hunyuan alpha). Throws
// std::invalid_argument for a config it does not cover.
inline std::vector<Layer> expected_layers(const nlohmann::json& config, double seq_len) {
  if (!config.is_object()) detail::fail("config must be a JSON object");
  const std::string mt = detail::model_type(config);
  if (mt.empty()) detail::fail("config has no model_type");
  return detail::dispatch(config, mt, seq_len);
}

}  // namespace peal_ref::hf
