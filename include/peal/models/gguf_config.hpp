// Reading a RopeConfig from a GGUF model file: the mapping of its metadata (read by
// <peal/models/gguf.hpp>, the file format) to a peal::RopeConfig. The keys and their meaning are as
// llama.cpp's loader reads them (src/llama-arch.cpp, src/llama-model.cpp load_hparams and
// llama_model_rope_type) and as convert_hf_to_gguf.py writes them. Not part of
// <peal/peal.hpp>, include it explicitly.
//
// Mapping ({arch} = general.architecture):
//   head_dim               {arch}.attention.key_length, else {arch}.embedding_length /
//                          {arch}.attention.head_count (integer division, as llama.cpp)
//   n_rot                  {arch}.rope.dimension_count, else head_dim;
//                          partial_rotary_factor = n_rot / head_dim
//   rope_theta             {arch}.rope.freq_base, default 10000
//   max_position_embeddings {arch}.context_length
//   scaling                {arch}.rope.scaling.type: none, linear, yarn, longrope; absent:
//                          linear when a factor is given (llama.cpp's default), else none.
//                          factor: {arch}.rope.scaling.factor, else the older
//                          {arch}.rope.scale_linear (0 means unset);
//                          original_max_position_embeddings: .scaling.original_context_length;
//                          yarn: beta_fast / beta_slow from .scaling.yarn_beta_fast / _slow,
//                          attention_factor from .scaling.yarn_attn_factor, else
//                          .scaling.attn_factor (the converter writes HF's attention_factor
//                          into them); a .scaling.yarn_ext_factor other than 1 is refused (HF's
//                          YaRN, which peal computes, is ext_factor 1);
//                          longrope: short/long factors from the tensors rope_factors_short /
//                          rope_factors_long (required), attention_factor from
//                          .scaling.attn_factor (Phi-3's converter writes HF's value there).
//                          .scaling.yarn_log_multiplier (DeepSeek's mscale_all_dim * 0.1),
//                          .scaling.alpha, .scaling.finetuned and the *_swa keys (sliding-window
//                          layers) have no RopeScaling field: they are only in `metadata` (so for
//                          DeepSeek-style YaRN the attention factor, not the frequencies, may
//                          differ from HF's mscale ratio; the config is that of the full layers).
//   frequency_factors      tensor rope_freqs (llama.cpp's converter bakes Llama 3.1's llama3
//                          scaling into it: the file then has no scaling type and
//                          omega_i = theta^(-2i/D) / rope_freqs[i])
//   M-RoPE                 {arch}.rope.dimension_sections, 4 integers (t, h, w, and a 4th
//                          used by ggml's vision RoPE only, which must be 0): the first three
//                          become RopeScaling::mrope_section (sum n_rot / 2);
//                          mrope_interleaved for the IMROPE architectures (qwen3vl ...)
//   max_alibi_bias         {arch}.attention.max_alibi_bias
// Layout: llama.cpp's llama_model_rope_type of the architecture (gguf_rope_type below):
// NORM rotates pairs (2i, 2i+1) -> Layout::Interleaved; NEOX, MROPE and IMROPE rotate
// (i, i + n_rot/2) -> Layout::HalfSplit; NONE (ALiBi or no positional rotation: bloom, mpt,
// mamba, ...): GgufConfig::rope_type == GgufRopeType::None and `rope` is not validated.
// Note: Hugging Face Llama checkpoints are half-split (rotate_half), but llama.cpp's
// converter permutes the rows of their q and k projections so that the GGUF model is
// interleaved; the Layout here is that of the GGUF tensors, not of the HF checkpoint.
// GPT-J is read as NORM (its rotate_every_two is interleaved; llama.cpp lists it as NONE only
// because it has no GPT-J graph).
//
// The result is validated (validate_rope_config; with M-RoPE sections, the config without
// them, and sum(sections) == n_rot / 2): errors name the key and the file.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "../errors.hpp"
#include "../layout.hpp"
#include "../presets/rope.hpp"
#include "gguf.hpp"
#include "model_positions.hpp"

namespace peal {

static_assert(gguf_max_rope_tensor_entries == std::uint64_t(preset_max_head_dim / 2),
              "gguf.hpp bounds the RoPE tensors by preset_max_head_dim / 2");

/// llama.cpp's llama_rope_type: how an architecture applies RoPE.
enum class GgufRopeType {
  None,    ///< no RoPE (ALiBi, recurrent, learned absolute positions)
  Norm,    ///< pairs (2i, 2i+1): Layout::Interleaved
  Neox,    ///< pairs (i, i + n_rot/2): Layout::HalfSplit
  MRope,   ///< multimodal RoPE, sections in blocks (Qwen2-VL), half-split pairs
  IMRope,  ///< multimodal RoPE, sections interleaved (Qwen3-VL), half-split pairs
};

inline const char* to_string(GgufRopeType t) {
  switch (t) {
    case GgufRopeType::None:
      return "none";
    case GgufRopeType::Norm:
      return "norm";
    case GgufRopeType::Neox:
      return "neox";
    case GgufRopeType::MRope:
      return "mrope";
    case GgufRopeType::IMRope:
      return "imrope";
  }
  return "?";
}

namespace detail {
namespace gguf {

// llama_model_rope_type (llama.cpp src/llama-model.cpp) by GGUF architecture name
// (src/llama-arch.cpp LLM_ARCH_NAMES). glm4, glm4moe and hunyuan_vl depend on whether the
// file has M-RoPE sections: listed with the type they have without them.
struct ArchRope {
  const char* name;
  GgufRopeType type;
};
inline const std::vector<ArchRope>& arch_table() {
  using R = GgufRopeType;
  static const std::vector<ArchRope> t = {
      // no RoPE
      {"clip", R::None},
      {"gpt2", R::None},
      {"mpt", R::None},
      {"refact", R::None},
      {"bloom", R::None},
      {"mamba", R::None},
      {"mamba2", R::None},
      {"jamba", R::None},
      {"jina-bert-v2", R::None},
      {"t5", R::None},
      {"t5encoder", R::None},
      {"jais", R::None},
      {"rwkv6", R::None},
      {"rwkv6qwen2", R::None},
      {"rwkv7", R::None},
      {"arwkv7", R::None},
      {"wavtokenizer-dec", R::None},
      {"nemotron_h", R::None},
      {"nemotron_h_moe", R::None},
      {"kimi-linear", R::None},
      // NORM: consecutive pairs
      {"llama", R::Norm},
      {"llada", R::Norm},
      {"llama4", R::Norm},
      {"deci", R::Norm},
      {"baichuan", R::Norm},
      {"starcoder", R::Norm},
      {"internlm2", R::Norm},
      {"minicpm", R::Norm},
      {"xverse", R::Norm},
      {"command-r", R::Norm},
      {"cohere2", R::Norm},
      {"cohere2moe", R::Norm},
      {"olmo", R::Norm},
      {"arctic", R::Norm},
      {"deepseek", R::Norm},
      {"deepseek2", R::Norm},
      {"deepseek2-ocr", R::Norm},
      {"deepseek32", R::Norm},
      {"deepseek4", R::Norm},
      {"plm", R::Norm},
      {"chatglm", R::Norm},
      {"granite", R::Norm},
      {"granitemoe", R::Norm},
      {"granitehybrid", R::Norm},
      {"chameleon", R::Norm},
      {"bailingmoe", R::Norm},
      {"neo-bert", R::Norm},
      {"smollm3", R::Norm},
      {"arcee", R::Norm},
      {"ernie4_5", R::Norm},
      {"ernie4_5-moe", R::Norm},
      {"mistral3", R::Norm},
      {"eagle3", R::Norm},
      {"mistral4", R::Norm},
      {"llama-embed", R::Norm},
      {"maincoder", R::Norm},
      {"glm-dsa", R::Norm},
      {"gptj", R::Norm},
      {"glm4", R::Norm},
      // NEOX: pairs offset by n_rot / 2
      {"falcon", R::Neox},
      {"falcon-h1", R::Neox},
      {"grok", R::Neox},
      {"dbrx", R::Neox},
      {"bert", R::Neox},
      {"jina-bert-v3", R::Neox},
      {"modern-bert", R::Neox},
      {"nomic-bert", R::Neox},
      {"nomic-bert-moe", R::Neox},
      {"eurobert", R::Neox},
      {"stablelm", R::Neox},
      {"bitnet", R::Neox},
      {"qwen", R::Neox},
      {"qwen2", R::Neox},
      {"dream", R::Neox},
      {"qwen2moe", R::Neox},
      {"qwen3", R::Neox},
      {"qwen3moe", R::Neox},
      {"llada-moe", R::Neox},
      {"rnd1", R::Neox},
      {"olmo2", R::Neox},
      {"olmoe", R::Neox},
      {"phi2", R::Neox},
      {"phi3", R::Neox},
      {"phimoe", R::Neox},
      {"plamo", R::Neox},
      {"plamo2", R::Neox},
      {"plamo3", R::Neox},
      {"gemma", R::Neox},
      {"gemma2", R::Neox},
      {"gemma3", R::Neox},
      {"gemma3n", R::Neox},
      {"gemma4", R::Neox},
      {"gemma4-assistant", R::Neox},
      {"gemma-embedding", R::Neox},
      {"starcoder2", R::Neox},
      {"openelm", R::Neox},
      {"gptneox", R::Neox},
      {"codeshell", R::Neox},
      {"orion", R::Neox},
      {"nemotron", R::Neox},
      {"exaone", R::Neox},
      {"exaone4", R::Neox},
      {"exaone-moe", R::Neox},
      {"minicpm3", R::Neox},
      {"bailingmoe2", R::Neox},
      {"dots1", R::Neox},
      {"hunyuan-moe", R::Neox},
      {"jais2", R::Neox},
      {"gpt-oss", R::Neox},
      {"hunyuan-dense", R::Neox},
      {"hy_v3", R::Neox},
      {"lfm2", R::Neox},
      {"lfm2moe", R::Neox},
      {"smallthinker", R::Neox},
      {"seed_oss", R::Neox},
      {"grovemoe", R::Neox},
      {"apertus", R::Neox},
      {"minimax-m2", R::Neox},
      {"cogvlm", R::Neox},
      {"pangu-embedded", R::Neox},
      {"afmoe", R::Neox},
      {"laguna", R::Neox},
      {"qwen3next", R::Neox},
      {"mimo2", R::Neox},
      {"step35", R::Neox},
      {"talkie", R::Neox},
      {"mellum", R::Neox},
      {"glm4moe", R::Neox},
      {"hunyuan_vl", R::Neox},
      // multimodal
      {"qwen2vl", R::MRope},
      {"paddleocr", R::MRope},
      {"qwen3vl", R::IMRope},
      {"qwen3vlmoe", R::IMRope},
      {"qwen35", R::IMRope},
      {"qwen35moe", R::IMRope},
  };
  return t;
}

inline bool mrope_if_sections(const std::string& arch) {
  return arch == "glm4" || arch == "glm4moe" || arch == "hunyuan_vl";
}

}  // namespace gguf
}  // namespace detail

/// The RoPE type llama.cpp assigns to a GGUF architecture name, or std::nullopt if unknown.
/// (glm4, glm4moe, hunyuan_vl: their type without M-RoPE sections.)
inline std::optional<GgufRopeType> gguf_rope_type(const std::string& architecture) {
  for (const auto& e : detail::gguf::arch_table())
    if (architecture == e.name) return e.type;
  return std::nullopt;
}

/// A GGUF model's positional-encoding configuration.
struct GgufConfig {
  std::string architecture;  ///< general.architecture
  GgufRopeType rope_type = GgufRopeType::None;
  RopeConfig rope;                       ///< meaningful unless rope_type == None
  std::optional<double> max_alibi_bias;  ///< {arch}.attention.max_alibi_bias
  int n_rot = 0;                         ///< {arch}.rope.dimension_count (rotary dim)
  std::optional<int> context_length;     ///< {arch}.context_length
  std::uint32_t version = 0;             ///< GGUF version (2 or 3)
  std::uint64_t tensor_count = 0;
  /// Every metadata key and its value in printable form (GgufValue::text()).
  std::map<std::string, std::string> metadata;
};

namespace detail {
namespace gguf {

struct Mapper {
  const GgufMetadata& md;
  std::string arch;

  // `key` may come from the file (list_unread): printed escaped. `what` quotes file content
  // only through GgufValue::text() or printable(), which escape it.
  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    fail("gguf_config: \"" + md.source + "\": " + printable(key) + " " + what);
  }
  std::string k(const char* suffix) const { return arch + "." + suffix; }

  std::optional<double> number(const std::string& key) const {
    const GgufValue* v = md.find(key);
    if (!v) return std::nullopt;
    if (v->is_float()) return v->f;
    if (v->is_integer()) return v->is_signed() ? double(v->i) : double(v->u);
    bad(key, std::string("must be a number, got ") + to_string(v->type) + " " + v->text());
  }
  // An integer in [lo, hi].
  std::optional<long long> integer(const std::string& key, long long lo, long long hi) const {
    const GgufValue* v = md.find(key);
    if (!v) return std::nullopt;
    return integer_value(*v, key, lo, hi);
  }
  long long integer_value(const GgufValue& v, const std::string& key, long long lo,
                          long long hi) const {
    if (!v.is_integer())
      bad(key, std::string("must be an integer, got ") + to_string(v.type) + " " + v.text());
    // hi >= 0 for every caller.
    const bool ok = v.is_signed() ? (v.i >= lo && v.i <= hi)
                                  : ((lo <= 0 || v.u >= static_cast<unsigned long long>(lo)) &&
                                     v.u <= static_cast<unsigned long long>(hi));
    if (!ok)
      bad(key,
          "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v.text());
    return v.is_signed() ? static_cast<long long>(v.i) : static_cast<long long>(v.u);
  }
  // An integer, or an array of equal integers (per-layer values, e.g. head_count).
  std::optional<long long> per_layer(const std::string& key, long long lo, long long hi) const {
    const GgufValue* v = md.find(key);
    if (!v) return std::nullopt;
    if (v->type != GgufType::Array) return integer_value(*v, key, lo, hi);
    if (!v->loaded || v->elements.empty())
      bad(key, "is an array of " + std::to_string(v->count) + " entries (" +
                   (v->loaded ? "empty" : "not loaded") + "): one integer expected");
    const long long first = integer_value(v->elements[0], key + "[0]", lo, hi);
    for (std::size_t j = 1; j < v->elements.size(); ++j)
      if (integer_value(v->elements[j], key + "[" + std::to_string(j) + "]", lo, hi) != first)
        bad(key,
            "differs between layers (" + v->text() + "): per-layer head sizes are not supported");
    return first;
  }
  std::optional<std::string> string(const std::string& key) const {
    const GgufValue* v = md.find(key);
    if (!v) return std::nullopt;
    if (v->type != GgufType::String || !v->loaded)
      bad(key, std::string("must be a string, got ") + to_string(v->type) + " " + v->text());
    return v->str;
  }
  const std::vector<float>* tensor(const char* base) const {
    for (const std::string& n : {std::string(base) + ".weight", std::string(base)}) {
      const auto it = md.rope_tensors.find(n);
      if (it != md.rope_tensors.end()) return &it->second;
    }
    return nullptr;
  }
};

inline std::string known_architectures() {
  std::string s;
  for (const auto& e : arch_table()) {
    if (!s.empty()) s += ", ";
    s += e.name;
  }
  return s;
}

// Where each field of the mapped RopeConfig was read from, for the validation message.
struct Provenance {
  std::string head_dim_from, nrot_key, base_key, type_key, tname, factor_from, orig_key;
};

// general.architecture and its RoPE type (before M-RoPE sections are looked at), the context
// length and the ALiBi bias; sets m.arch.
inline void map_architecture(Mapper& m, GgufConfig& out) {
  const std::optional<std::string> arch = m.string("general.architecture");
  if (!arch) m.bad("general.architecture", "is missing (required by ggml/docs/gguf.md)");
  out.architecture = *arch;
  m.arch = *arch;
  const std::optional<GgufRopeType> rt = gguf_rope_type(*arch);
  if (!rt)
    m.bad("general.architecture", "is \"" + printable(*arch) +
                                      "\", an architecture whose RoPE type is not known (known: " +
                                      known_architectures() + ")");
  out.rope_type = *rt;

  if (const auto cl = m.integer(m.k("context_length"), 0, std::numeric_limits<int>::max()))
    out.context_length = static_cast<int>(*cl);
  if (const auto ab = m.number(m.k("attention.max_alibi_bias"))) {
    if (!std::isfinite(*ab)) m.bad(m.k("attention.max_alibi_bias"), "must be finite");
    out.max_alibi_bias = *ab;
  }
}

// head_dim: key_length, else embedding_length / head_count (std::nullopt if neither);
// `from` receives the key(s) it came from. At most preset_max_head_dim.
inline std::optional<long long> resolve_head_dim(const Mapper& m, std::string& from) {
  const std::string key_len = m.k("attention.key_length");
  std::optional<long long> head_dim = m.per_layer(key_len, 0, preset_max_head_dim);
  from = key_len;
  if (!head_dim || *head_dim == 0) {
    const auto embd = m.integer(m.k("embedding_length"), 0, std::numeric_limits<int>::max());
    const auto heads = m.per_layer(m.k("attention.head_count"), 0, std::numeric_limits<int>::max());
    if (embd && heads && *heads > 0) {
      head_dim = *embd / *heads;
      from = m.k("embedding_length") + " / " + m.k("attention.head_count") + " = " +
             std::to_string(*embd) + " / " + std::to_string(*heads);
    }
  }
  if (head_dim && *head_dim > preset_max_head_dim)
    m.bad(from, "gives head_dim " + std::to_string(*head_dim) + ", more than " +
                    std::to_string(preset_max_head_dim) + " (preset_max_head_dim)");
  return head_dim;
}

// {arch}.rope.dimension_sections: empty if absent, else 4 integers (missing ones 0).
inline std::vector<long long> read_sections(const Mapper& m, const std::string& sec_key) {
  const GgufValue* sec = m.md.find(sec_key);
  std::vector<long long> sections;
  if (!sec) return sections;
  if (sec->type != GgufType::Array || !sec->loaded || sec->count == 0 || sec->count > 4)
    m.bad(sec_key, std::string("must be an array of up to 4 integers, got ") +
                       to_string(sec->type) + " " + sec->text());
  for (std::size_t j = 0; j < sec->elements.size(); ++j)
    sections.push_back(m.integer_value(sec->elements[j], sec_key + "[" + std::to_string(j) + "]", 0,
                                       preset_max_head_dim));
  sections.resize(4, 0);
  return sections;
}

// The rotary dim n_rot ({arch}.rope.dimension_count, else head_dim): even, in [2, head_dim];
// sets c.partial_rotary_factor to the smallest p with int(head_dim * p) == n_rot.
inline long long map_rotary_dim(const Mapper& m, RopeConfig& c, const Provenance& from) {
  const long long n_rot = m.integer(from.nrot_key, 0, preset_max_head_dim).value_or(c.head_dim);
  if (n_rot < 2 || n_rot % 2 != 0 || n_rot > c.head_dim)
    m.bad(from.nrot_key, "is " + std::to_string(n_rot) + ": must be even, >= 2 and <= head_dim " +
                             std::to_string(c.head_dim) + " (" + from.head_dim_from + ")");
  double p = double(n_rot) / double(c.head_dim);
  while (static_cast<long long>(double(c.head_dim) * p) < n_rot) p = std::nextafter(p, 2.0);
  c.partial_rotary_factor = p;
  return n_rot;
}

// The scaling factor: .rope.scaling.factor, else the older .rope.scale_linear; 0 means unset
// (llama.cpp). Sets from.factor_from.
inline std::optional<double> scaling_factor(const Mapper& m, Provenance& from) {
  const std::string factor_key = m.k("rope.scaling.factor");
  const std::string linear_key = m.k("rope.scale_linear");
  std::optional<double> factor = m.number(factor_key);
  from.factor_from = factor_key;
  if (!factor || *factor == 0) {
    factor = m.number(linear_key);
    from.factor_from = linear_key;
  }
  if (factor && *factor == 0) factor.reset();
  return factor;
}

// The YaRN and LongRoPE parameters of s (s.type already set).
inline void map_scaling_extras(const Mapper& m, RopeScaling& s, const Provenance& from) {
  if (s.type == RopeType::Yarn) {
    s.beta_fast = m.number(m.k("rope.scaling.yarn_beta_fast"));
    s.beta_slow = m.number(m.k("rope.scaling.yarn_beta_slow"));
    const std::string ext_key = m.k("rope.scaling.yarn_ext_factor");
    if (const auto ext = m.number(ext_key))
      if (*ext != 1.0)
        m.bad(ext_key,
              "is " + m.md.find(ext_key)->text() + ": only 1 (HF's YaRN ramp) is supported");
    s.attention_factor = m.number(m.k("rope.scaling.yarn_attn_factor"));
    if (!s.attention_factor) s.attention_factor = m.number(m.k("rope.scaling.attn_factor"));
  }
  if (s.type == RopeType::LongRope) {
    s.attention_factor = m.number(m.k("rope.scaling.attn_factor"));
    const std::vector<float>* lf = m.tensor("rope_factors_long");
    const std::vector<float>* sf = m.tensor("rope_factors_short");
    if (!lf || !sf)
      m.bad(from.type_key,
            "is \"longrope\" but the tensors rope_factors_long and "
            "rope_factors_short are not both in the file");
    s.long_factor = std::vector<double>(lf->begin(), lf->end());
    s.short_factor = std::vector<double>(sf->begin(), sf->end());
  }
}

// RopeScaling from .rope.scaling.type (absent: linear with a factor, else none), the factor,
// .scaling.original_context_length and the YaRN / LongRoPE parameters.
inline void map_scaling(const Mapper& m, RopeScaling& s, Provenance& from) {
  from.type_key = m.k("rope.scaling.type");
  const std::optional<double> factor = scaling_factor(m, from);
  const std::optional<std::string> type = m.string(from.type_key);
  from.tname = type ? *type : (factor ? "linear" : "none");
  if (from.tname == "none") {
    s.type = RopeType::Default;
  } else if (from.tname == "linear") {
    s.type = factor ? RopeType::Linear : RopeType::Default;
    s.factor = factor;
  } else if (from.tname == "yarn") {
    s.type = RopeType::Yarn;
    s.factor = factor;
  } else if (from.tname == "longrope") {
    s.type = RopeType::LongRope;
    s.factor = factor;
  } else {
    m.bad(from.type_key,
          "is \"" + from.tname + "\": unknown (supported: none, linear, yarn, longrope)");
  }
  if (factor && !std::isfinite(*factor)) m.bad(from.factor_from, "must be finite");
  from.orig_key = m.k("rope.scaling.original_context_length");
  if (const auto o = m.integer(from.orig_key, 1, static_cast<long long>(preset_max_length)))
    s.original_max_position_embeddings = double(*o);
  map_scaling_extras(m, s, from);
}

// validate_rope_config(c), its message prefixed with the file, the architecture and the keys
// each field was read from.
inline void validate_mapped(const Mapper& m, const RopeConfig& c, const Provenance& from) {
  try {
    validate_rope_config(c);
  } catch (const invalid_argument& e) {
    std::string why = e.what();
    if (why.rfind("peal: ", 0) == 0) why.erase(0, 6);
    detail::fail("gguf_config: \"" + m.md.source + "\" (architecture " + m.arch +
                 "): the RoPE configuration read from it is invalid: " + why +
                 " [read: head_dim <- " + from.head_dim_from + ", rotary dim <- " + from.nrot_key +
                 ", rope_theta <- " + from.base_key + ", scaling <- " + from.type_key + " \"" +
                 from.tname + "\", factor <- " + from.factor_from +
                 ", original_max_position_embeddings <- " + from.orig_key +
                 ", frequency_factors <- tensor rope_freqs]");
  }
}

// The M-RoPE sections of an MRope / IMRope config: present, no 4th (vision) section, summing
// to n_rot / 2; sets mrope_section and mrope_interleaved.
inline void map_sections(const Mapper& m, GgufConfig& out, const std::vector<long long>& sections,
                         const std::string& sec_key, const Provenance& from) {
  const long long n_rot = out.n_rot;
  if (sections.empty())
    m.bad(sec_key,
          "is missing: architecture " + m.arch + " uses M-RoPE (" + to_string(out.rope_type) + ")");
  if (sections[3] != 0)
    m.bad(sec_key, "has a 4th section " + std::to_string(sections[3]) +
                       " (ggml's vision RoPE): only (t, h, w) text M-RoPE is supported");
  const long long sum = sections[0] + sections[1] + sections[2];
  if (sum != n_rot / 2)
    m.bad(sec_key, "sums to " + std::to_string(sum) + ", expected n_rot / 2 = " +
                       std::to_string(n_rot / 2) + " (" + from.nrot_key + ")");
  RopeScaling& s = out.rope.scaling;
  s.mrope_section = {int(sections[0]), int(sections[1]), int(sections[2])};
  s.mrope_interleaved = out.rope_type == GgufRopeType::IMRope;
}

}  // namespace gguf
}  // namespace detail

/// The positional-encoding configuration of parsed GGUF metadata (see the header comment).
inline GgufConfig rope_config_from_gguf(const GgufMetadata& md) {
  namespace g = detail::gguf;
  GgufConfig out;
  out.version = md.version;
  out.tensor_count = md.tensor_count;
  for (const auto& kv : md.kv) out.metadata.emplace(kv.first, kv.second.text());

  g::Mapper m{md, std::string()};
  g::map_architecture(m, out);
  g::Provenance from;
  const std::optional<long long> head_dim = g::resolve_head_dim(m, from.head_dim_from);
  if (head_dim) out.rope.head_dim = static_cast<int>(*head_dim);

  // Sections (M-RoPE): decide the rope type of the conditional architectures first.
  const std::string sec_key = m.k("rope.dimension_sections");
  const std::vector<long long> sections = g::read_sections(m, sec_key);
  const bool use_sections = !sections.empty() && sections[0] > 0 && sections[1] > 0;
  if (g::mrope_if_sections(m.arch) && use_sections) out.rope_type = GgufRopeType::MRope;

  if (out.rope_type == GgufRopeType::None) return out;

  if (!head_dim || *head_dim <= 0)
    m.bad(m.k("attention.key_length"), "is missing and head_dim cannot be derived (needs " +
                                           m.k("embedding_length") + " and " +
                                           m.k("attention.head_count") + " > 0)");
  RopeConfig& c = out.rope;
  c.layout = out.rope_type == GgufRopeType::Norm ? Layout::Interleaved : Layout::HalfSplit;
  from.nrot_key = m.k("rope.dimension_count");
  out.n_rot = static_cast<int>(g::map_rotary_dim(m, c, from));

  from.base_key = m.k("rope.freq_base");
  c.rope_theta = m.number(from.base_key).value_or(10000.0);
  if (out.context_length) c.max_position_embeddings = double(*out.context_length);
  g::map_scaling(m, c.scaling, from);
  if (const std::vector<float>* ff = m.tensor("rope_freqs"))
    c.frequency_factors.assign(ff->begin(), ff->end());

  // Validate: the 1-D config, then the sections.
  g::validate_mapped(m, c, from);
  if (out.rope_type == GgufRopeType::MRope || out.rope_type == GgufRopeType::IMRope)
    g::map_sections(m, out, sections, sec_key, from);
  return out;
}

/// rope_config_from_gguf of a GGUF file (its metadata and small RoPE tensors only).
inline GgufConfig rope_config_from_gguf(const std::string& path) {
  return rope_config_from_gguf(gguf_metadata_from_file(path));
}

/// rope_config_from_gguf of a GGUF image in memory; `name` is used in messages.
inline GgufConfig rope_config_from_gguf_bytes(const void* data, std::size_t size,
                                              const std::string& name = "<memory>") {
  return rope_config_from_gguf(gguf_metadata_from_bytes(data, size, name));
}

// ---------------------------------------------------------------------------------------------
// model_positions_from_gguf: every layer of a GGUF model (docs/models.md), as llama.cpp's loader
// and graphs compute it. Built on rope_config_from_gguf (the RoPE of the full layers), plus:
//   layers        {arch}.block_count (src/llama-model.cpp load_hparams: "ml.get_key(
//                 LLM_KV_BLOCK_COUNT, hparams.n_layer)"), at most 512 (LLAMA_MAX_LAYERS,
//                 src/llama-hparams.h); required when the layers differ, else one layer.
//   head sizes    qk_head_dim = head_dim of rope_config_from_gguf; v_head_dim from
//                 {arch}.attention.value_length.
//   encoding      Rope (NORM / NEOX), MRope (MROPE / IMROPE), else Alibi with
//                 {arch}.attention.max_alibi_bias, else None.
//   scale         qk_head_dim^-1/2 unless an architecture rule below says otherwise.
//   deepseek2     (DeepSeek-V2/V3, Kimi K2; src/models/deepseek2.cpp load_arch_hparams and the
//                 graph): "n_embd_head_k = hparams.n_embd_head_k_mla()" is
//                 {arch}.attention.key_length_mla when both it and value_length_mla are in the
//                 file (is_mla(): the MLA-converted files, whose key_length is kv_lora_rank +
//                 n_rot and value_length kv_lora_rank), else key_length; "n_embd_head_qk_rope =
//                 hparams.n_rot()", "n_embd_head_qk_nope = n_embd_head_k_mla - n_rot",
//                 "GGML_ASSERT(n_embd_head_qk_nope >= 1)"; q_pe is the view at offset
//                 n_embd_head_qk_nope, roped with rope_type NORM (interleaved pairs), so
//                 rotary_offset = qk_head_dim - n_rot, rope.head_dim = n_rot. Ranks from
//                 {arch}.attention.kv_lora_rank and q_lora_rank. The scale:
//                   "if (ml.get_key(LLM_KV_ROPE_SCALING_YARN_LOG_MUL, hparams.rope_yarn_log_mul,
//                    false)) { // [TAG_DEEPSEEK2_YARN_LOG_MUL_FIX] cancel the factor from the
//                    convert script  hparams.rope_yarn_log_mul /= 0.1f; }"
//                   "const float attn_factor_org = attn_factor * (1.0f + 0.1f * logf(1.0f /
//                    freq_scale));  const float mscale = attn_factor_org * (1.0f + 0.1f *
//                    hparams.rope_yarn_log_mul * logf(1.0f / freq_scale));  const float kq_scale
//                    = 1.0f * mscale * mscale / sqrtf(float(n_embd_head_k));"
//                 where attn_factor_org is YaRN's attention factor of cos and sin, set in
//                 src/llama-context.cpp: with rope_yarn_log_mul != 0 "mscale = 1.0f;
//                 mscale_all_dims = hparams.rope_yarn_log_mul; if (model.arch ==
//                 LLM_ARCH_DEEPSEEK2 && mscale_all_dims != 1.0f) mscale = mscale_all_dims;
//                 cparams.yarn_attn_factor = get_mscale(factor, mscale) / get_mscale(factor,
//                 mscale_all_dims)", else get_mscale(factor, 1.0f). A DeepSeek-V3 file (factor
//                 40, yarn_log_multiplier 0.1) gives 192^-1/2 (0.1 ln 40 + 1)^2 and a RoPE
//                 attention factor of 1, as its config.json does. The file's
//                 rope.scaling.yarn_attn_factor / attn_factor are not what llama.cpp uses there
//                 (listed in not_modelled). Optional temperature tuning (Mistral Large 3):
//                 {arch}.attention.temperature_scale and temperature_length with
//                 "f_attn_temp_offset = 0.0f": qs(p) = 1 + scale ln(floor(p / length) + 1),
//                 QueryScale::Llama4Beta.
//   gemma3        (src/llama-model.cpp load_hparams, case LLM_ARCH_GEMMA3): "found_swa =
//                 ml.get_key(LLM_KV_ATTENTION_SLIDING_WINDOW, hparams.n_swa, false); if
//                 (found_swa && hparams.n_swa > 0) { swa_type = LLAMA_SWA_TYPE_STANDARD;
//                 set_swa_pattern(6); rope_freq_base_train_swa = 10000.0f;
//                 rope_freq_scale_train_swa = 1.0f; }"; set_swa_pattern (src/llama-hparams.cpp):
//                 "swa_layers[il] = n_pattern == 0 || (il % n_pattern < (n_pattern - 1))", i.e.
//                 full when (i + 1) % 6 == 0; sliding layers: theta 10000 and no scaling;
//                 "hparams.f_attention_scale = type == LLM_TYPE_27B ? 1.0f / std::sqrt(float(
//                 hparams.n_embd / hparams.n_head(0))) : 1.0f / std::sqrt(float(
//                 hparams.n_embd_head_k))" (27B: block_count 62), applied to Q with kq_scale 1
//                 (src/models/gemma3.cpp); q/k RMS norms before RoPE (attn_q_norm, attn_k_norm).
//   llama4        (src/llama-model.cpp load_hparams, case LLM_ARCH_LLAMA4): "found_swa =
//                 ml.get_key(LLM_KV_ATTENTION_SLIDING_WINDOW, hparams.n_swa, false); if (found_swa
//                 && hparams.n_swa == 0) { swa_type = LLAMA_SWA_TYPE_NONE; n_no_rope_layer_step =
//                 n_layer; // always use rope } else { swa_type = LLAMA_SWA_TYPE_CHUNKED; n_swa =
//                 8192; n_attn_temp_floor_scale = 8192; f_attn_temp_scale = 0.1f;
//                 f_attn_temp_offset = 1.0f; set_swa_pattern(4); // 3 chunked - 1 full }";
//                 n_no_rope_layer_step is 4 (the llama_hparams default, read from no key); the
//                 graph ropes layer il when (il + 1) % n_no_rope_layer_step != 0 and otherwise
//                 multiplies Q by 1 + 0.1 ln(floor((p + 1) / 8192) + 1)
//                 (QueryScale::Llama4Temperature); "hparams.use_kq_norm = type !=
//                 LLM_TYPE_17B_128E" (an L2 norm on the RoPE layers; 128 experts: Maverick).
// Other keys of {arch} whose name is positional (rope, window, swa, temperature, scal, ...)
// and which are not read are listed in not_modelled (e.g. the sliding window of an
// architecture without a rule here, rope.scaling.yarn_log_multiplier outside deepseek2,
// rope.scaling.finetuned); those that change the RoPE of some layers (the *_swa RoPE keys,
// per-layer RoPE dimensions, rope.scaling.alpha) make the reader throw unless
// ModelReadOptions::allow_not_modelled.

/// The largest {arch}.block_count accepted (llama.cpp's LLAMA_MAX_LAYERS).
inline constexpr long long gguf_max_layers = 512;

namespace detail {
namespace gguf {

// src/llama-context.cpp: "scale <= 1.0f ? 1.0f : (0.1f * mscale * logf(scale) + 1.0f)".
inline long double llama_get_mscale(long double scale, long double mscale) {
  return scale <= 1.0L ? 1.0L : 0.1L * mscale * std::log(scale) + 1.0L;
}

struct ModelReader {
  Mapper m;
  const GgufConfig& g;
  ModelPositions& out;
  std::set<std::string> used;

  void fact(const std::string& name, const std::string& value, const std::string& source) {
    out.facts.push_back(ModelFact{name, value, source});
  }
  // A fact read from a key of the file (marks the key used).
  void key_fact(const std::string& name, const std::string& key) {
    used.insert(key);
    fact(name, m.md.find(key)->text(), "gguf: " + key);
  }
  bool has(const std::string& key) const { return m.md.find(key) != nullptr; }
};

// The keys rope_config_from_gguf reads.
inline void mark_rope_keys(ModelReader& r) {
  for (const char* s :
       {"context_length", "embedding_length", "block_count", "attention.head_count",
        "attention.key_length", "attention.value_length", "rope.dimension_count",
        "rope.freq_base", "rope.scaling.type", "rope.scaling.factor", "rope.scale_linear",
        "rope.scaling.original_context_length", "rope.scaling.yarn_beta_fast",
        "rope.scaling.yarn_beta_slow", "rope.scaling.yarn_ext_factor",
        "rope.scaling.yarn_attn_factor", "rope.scaling.attn_factor", "rope.dimension_sections",
        "attention.max_alibi_bias"})
    r.used.insert(r.m.k(s));
}

inline bool positional_name(const std::string& key) {
  for (const char* w : {"rope", "rotary", "position", "window", "swa", "scal", "temperature",
                        "chunk", "attn_factor", "softcap", "alibi", "key_length", "nope"})
    if (key.find(w) != std::string::npos) return true;
  return false;
}
// Whether an unread key changes the RoPE of some layers.
inline bool changes_encoding(const std::string& key) {
  const bool rope = key.find("rope") != std::string::npos;
  return (rope && key.find("swa") != std::string::npos) ||
         (rope && key.find("per_layer") != std::string::npos) ||
         key.find("rope.scaling.alpha") != std::string::npos;
}

inline void list_unread(ModelReader& r, const ModelReadOptions& options) {
  const std::string prefix = r.m.arch + ".";
  for (const auto& kv : r.m.md.kv) {
    const std::string& key = kv.first;
    if (key.compare(0, prefix.size(), prefix) != 0 || r.used.count(key)) continue;
    if (!positional_name(key.substr(prefix.size()))) continue;
    NotModelled n;
    n.key = key;
    n.value = kv.second.text();
    n.changes_attention = changes_encoding(key);
    n.why = n.changes_attention
                ? "changes the RoPE of some layers; model_positions_from_gguf does not read it "
                  "for architecture " + r.m.arch
                : "not read by llama.cpp's loader for architecture " + r.m.arch +
                      ", or not modelled by peal";
    if (n.changes_attention && !options.allow_not_modelled)
      r.m.bad(key, "(" + n.value + "): " + n.why +
                       " (ModelReadOptions::allow_not_modelled lists it instead)");
    r.out.not_modelled.push_back(n);
  }
}

// {arch}.block_count: the number of layers (required when they differ).
inline int layer_count(ModelReader& r, bool layers_differ) {
  const std::string key = r.m.k("block_count");
  const std::optional<long long> n = r.m.integer(key, 1, gguf_max_layers);
  if (n) {
    r.key_fact("layers", key);
    return static_cast<int>(*n);
  }
  if (layers_differ)
    r.m.bad(key, "is missing: the layers of architecture " + r.m.arch +
                     " differ, their count is needed");
  r.fact("layers", "1", "gguf: " + key + " absent; every layer is alike, read as one");
  return 1;
}

// The MLA layer of deepseek2 (see the comment above gguf_max_layers).
inline void read_deepseek2(ModelReader& r, LayerPositions& L) {
  const Mapper& m = r.m;
  const std::string kmla = m.k("attention.key_length_mla");
  const std::string vmla = m.k("attention.value_length_mla");
  const auto key_mla = m.integer(kmla, 0, preset_max_head_dim);
  const auto val_mla = m.integer(vmla, 0, preset_max_head_dim);
  std::string qk_from = m.k("attention.key_length");
  if (key_mla && *key_mla > 0 && val_mla && *val_mla > 0) {  // hparams.is_mla()
    L.qk_head_dim = static_cast<int>(*key_mla);
    L.v_head_dim = static_cast<int>(*val_mla);
    qk_from = kmla;
    r.key_fact("qk_head_dim", kmla);
    r.key_fact("v_head_dim", vmla);
  } else {
    r.fact("qk_head_dim", std::to_string(L.qk_head_dim), "gguf: " + qk_from + " (no _mla keys)");
  }
  const int n_rot = r.g.n_rot;
  const std::string nrot_key = m.k("rope.dimension_count");
  if (L.qk_head_dim - n_rot < 1)
    m.bad(qk_from, "is " + std::to_string(L.qk_head_dim) + ", not more than the rotary dim " +
                       std::to_string(n_rot) + " (" + nrot_key +
                       "): MLA needs qk_nope_head_dim = key_length - n_rot >= 1");
  L.rotary_offset = L.qk_head_dim - n_rot;
  L.rope.head_dim = n_rot;
  L.rope.partial_rotary_factor = 1.0;
  r.fact("rotary_offset", std::to_string(L.rotary_offset),
         "src/models/deepseek2.cpp: n_embd_head_qk_nope = n_embd_head_k_mla - n_rot (" + qk_from +
             " - " + nrot_key + ")");
  const std::string kvr = m.k("attention.kv_lora_rank"), qr = m.k("attention.q_lora_rank");
  if (const auto kv = m.integer(kvr, 0, std::numeric_limits<int>::max())) {
    r.out.kv_lora_rank = static_cast<int>(*kv);
    r.key_fact("kv_lora_rank", kvr);
  }
  if (const auto q = m.integer(qr, 0, std::numeric_limits<int>::max())) {
    r.out.q_lora_rank = static_cast<int>(*q);
    r.key_fact("q_lora_rank", qr);
  }

  // The scale (src/models/deepseek2.cpp, src/llama-context.cpp).
  const std::string lm_key = m.k("rope.scaling.yarn_log_multiplier");
  long double log_mul = 0;
  if (const auto lm = m.number(lm_key)) {
    if (!std::isfinite(*lm)) m.bad(lm_key, "must be finite");
    // As the loader: a float divided by 0.1f (the converter's 0.1f gives exactly 1).
    log_mul = static_cast<long double>(static_cast<float>(*lm) / 0.1f);
    r.key_fact("yarn_log_multiplier (mscale_all_dim = value / 0.1)", lm_key);
  }
  RopeScaling& s = L.rope.scaling;
  const long double F = s.factor ? static_cast<long double>(*s.factor) : 1.0L;
  long double af_org = 1.0L;
  if (s.type == RopeType::Yarn) {
    if (log_mul != 0) {
      long double ms = 1.0L;
      const long double ms_all = log_mul;
      if (ms_all != 1.0L) ms = ms_all;
      af_org = llama_get_mscale(F, ms) / llama_get_mscale(F, ms_all);
    } else {
      af_org = llama_get_mscale(F, 1.0L);
    }
    for (const char* k : {"rope.scaling.yarn_attn_factor", "rope.scaling.attn_factor"})
      r.used.erase(m.k(k));  // not what llama.cpp uses for deepseek2: listed if present
    s.attention_factor = static_cast<double>(af_org);
    r.fact("rope attention factor", detail::model_impl::short_num(double(af_org)),
           "src/llama-context.cpp: get_mscale(factor, mscale) / get_mscale(factor, "
           "mscale_all_dims) (deepseek2)");
  }
  const long double ms = af_org * (1.0L + 0.1L * log_mul * std::log(F));
  L.softmax_scale =
      static_cast<double>(ms * ms / std::sqrt(static_cast<long double>(L.qk_head_dim)));
  r.fact("softmax_scale", detail::model_impl::short_num(L.softmax_scale),
         "src/models/deepseek2.cpp: kq_scale = mscale^2 / sqrt(n_embd_head_k), mscale = "
         "attn_factor_org (1 + 0.1 rope_yarn_log_mul ln(1 / freq_scale))");

  // Temperature tuning (Mistral Large 3 on deepseek2).
  const std::string ts = m.k("attention.temperature_scale");
  const std::string tl = m.k("attention.temperature_length");
  if (const auto t = m.number(ts)) {
    r.used.insert(ts);
    if (*t != 0) {
      if (!std::isfinite(*t)) m.bad(ts, "must be finite");
      const auto len = m.integer(tl, 1, static_cast<long long>(preset_max_length));
      if (!len) m.bad(tl, "is missing: " + ts + " is set and its floor length is needed");
      r.used.insert(tl);
      L.query_scale.kind = QueryScale::Kind::Llama4Beta;
      L.query_scale.beta = *t;
      L.query_scale.original_max_position_embeddings = double(*len);
      r.fact("query_scale", L.query_scale.formula(),
             "gguf: " + ts + ", " + tl +
                 " (src/models/deepseek2.cpp build_inp_attn_scale, f_attn_temp_offset 0)");
    }
  }
}

}  // namespace gguf
}  // namespace detail

/// Every layer of parsed GGUF metadata: the facts model_positions_from_hf gives for the
/// config.json of the same model (see the comment above gguf_max_layers).
inline ModelPositions model_positions_from_gguf(const GgufMetadata& md,
                                                const ModelReadOptions& options = {}) {
  namespace g = detail::gguf;
  namespace mi = detail::model_impl;
  const GgufConfig gc = rope_config_from_gguf(md);
  ModelPositions out;
  out.model_type = gc.architecture;
  g::ModelReader r{g::Mapper{md, gc.architecture}, gc, out, {}};
  g::mark_rope_keys(r);
  const g::Mapper& m = r.m;
  const std::string& arch = gc.architecture;
  r.fact("architecture", arch, "gguf: general.architecture");
  r.fact("rope type", to_string(gc.rope_type),
         "llama.cpp llama_model_rope_type (src/llama-model.cpp) of " + arch);

  // The layer all others start from: the full layers' RoPE of rope_config_from_gguf.
  LayerPositions base;
  base.layer_type = "full_attention";
  base.qk_head_dim = gc.rope.head_dim;
  if (const auto v = m.per_layer(m.k("attention.value_length"), 0, preset_max_head_dim))
    base.v_head_dim = static_cast<int>(*v);
  switch (gc.rope_type) {
    case GgufRopeType::None:
      base.encoding = gc.max_alibi_bias ? LayerEncoding::Alibi : LayerEncoding::None;
      if (gc.max_alibi_bias) base.alibi_max_bias = gc.max_alibi_bias;
      break;
    case GgufRopeType::MRope:
    case GgufRopeType::IMRope:
      base.encoding = LayerEncoding::MRope;
      break;
    default:
      base.encoding = LayerEncoding::Rope;
  }
  base.rope = gc.rope;
  if (base.qk_head_dim > 0)
    base.softmax_scale = 1.0 / std::sqrt(static_cast<double>(base.qk_head_dim));

  const bool deepseek2 = arch == "deepseek2";
  const bool gemma3 = arch == "gemma3";
  const bool llama4 = arch == "llama4";
  const std::string swa_key = m.k("attention.sliding_window");

  if (deepseek2) g::read_deepseek2(r, base);
  if (gemma3) {
    base.qk_norm = true;
    r.fact("qk_norm", "true", "src/models/gemma3.cpp: attn_q_norm / attn_k_norm before RoPE");
  }

  // Which layers differ.
  std::optional<long long> n_swa;
  if (gemma3 || llama4) {
    n_swa = m.integer(swa_key, 0, std::numeric_limits<int>::max());
    r.used.insert(swa_key);
  }
  const bool gemma3_swa = gemma3 && n_swa && *n_swa > 0;
  const bool llama4_chunked = llama4 && !(n_swa && *n_swa == 0);
  const int n_layer = g::layer_count(r, gemma3_swa || llama4_chunked);

  if (gemma3) {
    // f_attention_scale: 27B (62 layers) n_embd / n_head(0), else n_embd_head_k.
    double denom = base.qk_head_dim;
    std::string from = "1 / sqrt(n_embd_head_k) (src/llama-model.cpp load_hparams, gemma3)";
    if (n_layer == 62) {
      const auto embd = m.integer(m.k("embedding_length"), 1, std::numeric_limits<int>::max());
      const auto heads =
          m.per_layer(m.k("attention.head_count"), 1, std::numeric_limits<int>::max());
      if (!embd || !heads)
        m.bad(m.k("embedding_length"), "and " + m.k("attention.head_count") +
                                           " are needed for Gemma 3 27B's attention scale");
      denom = double(*embd / *heads);
      from = "1 / sqrt(n_embd / n_head(0)) for LLM_TYPE_27B (62 layers) (src/llama-model.cpp "
             "load_hparams, gemma3)";
    }
    base.softmax_scale = 1.0 / std::sqrt(denom);
    r.fact("softmax_scale", mi::short_num(base.softmax_scale), from);
  } else if (!deepseek2 && base.qk_head_dim > 0) {
    r.fact("softmax_scale", mi::short_num(base.softmax_scale), "1 / sqrt(head_dim)");
  }

  out.layers.assign(std::size_t(n_layer), base);

  if (gemma3_swa) {
    r.key_fact("sliding_window", swa_key);
    r.fact("layer pattern", "full when (i + 1) % 6 == 0, else sliding",
           "src/llama-model.cpp load_hparams (gemma3): set_swa_pattern(6)");
    r.fact("sliding layers' RoPE", "theta 10000, no scaling",
           "src/llama-model.cpp load_hparams (gemma3): rope_freq_base_train_swa = 10000, "
           "rope_freq_scale_train_swa = 1");
    for (int i = 0; i < n_layer; ++i) {
      if (i % 6 >= 5) continue;  // swa_layers[il] = il % n_pattern < n_pattern - 1
      LayerPositions& L = out.layers[std::size_t(i)];
      L.layer_type = "sliding_attention";
      L.attention = LayerAttention::Sliding;
      L.sliding_window = *n_swa;
      L.rope.rope_theta = 10000.0;
      L.rope.scaling = RopeScaling{};
    }
  } else if (gemma3) {
    r.fact("sliding_window", n_swa ? "0" : "absent",
           "src/llama-model.cpp load_hparams (gemma3): no SWA, every layer full");
  }

  if (llama4) {
    const auto n_expert = m.integer(m.k("expert_count"), 0, std::numeric_limits<int>::max());
    if (n_expert) r.used.insert(m.k("expert_count"));
    const bool kq_norm = !(n_expert && *n_expert == 128);
    if (!llama4_chunked) {
      r.fact("layers", "all RoPE, full attention",
             "src/llama-model.cpp load_hparams (llama4): " + swa_key +
                 " = 0: LLAMA_SWA_TYPE_NONE, n_no_rope_layer_step = n_layer");
      for (LayerPositions& L : out.layers) L.qk_norm = kq_norm;
    } else {
      if (n_swa) r.used.insert(swa_key);
      r.fact("attention_chunk", "8192",
             "src/llama-model.cpp load_hparams (llama4): LLAMA_SWA_TYPE_CHUNKED, n_swa = 8192" +
                 std::string(n_swa ? " (" + swa_key + " " + std::to_string(*n_swa) +
                                         " is overridden)"
                                   : ""));
      r.fact("layer pattern", "NoPE and full when (i + 1) % 4 == 0, else RoPE and chunked",
             "src/llama-model.cpp load_hparams (llama4): set_swa_pattern(4); "
             "n_no_rope_layer_step 4 (llama_hparams default)");
      r.fact("query_scale", "1 + 0.1 ln(floor((p + 1) / 8192) + 1) on NoPE layers",
             "src/llama-model.cpp load_hparams (llama4): f_attn_temp_scale 0.1, "
             "n_attn_temp_floor_scale 8192, f_attn_temp_offset 1");
      r.fact("qk_norm", kq_norm ? "L2, RoPE layers" : "none",
             "src/llama-model.cpp load_hparams (llama4): use_kq_norm = type != "
             "LLM_TYPE_17B_128E (" + m.k("expert_count") + ")");
      for (int i = 0; i < n_layer; ++i) {
        LayerPositions& L = out.layers[std::size_t(i)];
        if ((i + 1) % 4 == 0) {
          L.encoding = LayerEncoding::None;
          L.layer_type = "nope_full_attention";
          L.query_scale.kind = QueryScale::Kind::Llama4Temperature;
          L.query_scale.floor_scale = 8192;
          L.query_scale.attn_scale = 0.1;
        } else {
          L.attention = LayerAttention::Chunked;
          L.layer_type = "chunked_attention";
          L.attention_chunk = 8192;
          L.qk_norm = kq_norm;
        }
      }
    }
  }

  if (options.layout) {
    for (LayerPositions& L : out.layers)
      if (L.encoding == LayerEncoding::Rope || L.encoding == LayerEncoding::MRope)
        L.rope.layout = *options.layout;
    r.fact("layout", *options.layout == Layout::Interleaved ? "interleaved" : "half-split",
           "ModelReadOptions::layout");
  }
  g::list_unread(r, options);
  return out;
}

/// model_positions_from_gguf of a GGUF file (its metadata and small RoPE tensors only).
inline ModelPositions model_positions_from_gguf(const std::string& path,
                                                const ModelReadOptions& options = {}) {
  return model_positions_from_gguf(gguf_metadata_from_file(path), options);
}

/// model_positions_from_gguf of a GGUF image in memory; `name` is used in messages.
inline ModelPositions model_positions_from_gguf_bytes(const void* data, std::size_t size,
                                                      const std::string& name = "<memory>",
                                                      const ModelReadOptions& options = {}) {
  return model_positions_from_gguf(gguf_metadata_from_bytes(data, size, name), options);
}

}  // namespace peal
