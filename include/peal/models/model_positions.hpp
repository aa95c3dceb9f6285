// A model's positions, layer by layer (docs/models.md): for each attention layer of a
// checkpoint, what it does with positions (RoPE on which coordinates of its q/k head, with
// which frequencies; M-RoPE; ALiBi; none) and the attention facts that go with it (sliding
// window, softmax scale, a position-dependent query scale, logit softcap, qk-norm), with
// where each fact came from and the keys that peal read but does not model.
//
// Filled by model_positions_from_hf (hf_config.hpp, config.json) and
// model_positions_from_gguf (gguf_config.hpp); this header needs neither JSON nor GGUF.
//
//   score_ij = softmax_scale * qs(t_i) * q_i^T A(t_i - s_j) k_j  (+ ALiBi bias, softcap, mask)
//
// where A is the layer's encoding on the q/k head: coordinates [0, rotary_offset) pass
// through, the RoPE of `rope` (rope.hpp) acts on the next rope.head_dim coordinates (its own
// rotary part first, the rest passing through), and qs is the query scale (1 when none).
#pragma once

#include <cmath>
#include <cstddef>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "../block_diagonal.hpp"
#include "../errors.hpp"
#include "../presets/rope.hpp"

namespace peal {

/// What a layer does with positions.
enum class LayerEncoding {
  Rope,   ///< rope<S>(layer.rope) on coordinates [rotary_offset, qk_head_dim)
  MRope,  ///< mrope<S>(layer.rope): N-D positions (mrope.hpp)
  Alibi,  ///< a linear bias -m_h (t - s) per head, no rotation (alibi.hpp)
  None    ///< no positional information in this layer (NoPE, or a layer without attention)
};
/// Which attention a layer computes.
enum class LayerAttention {
  Full,     ///< softmax attention over every visible key
  Sliding,  ///< softmax attention over the last `sliding_window` keys
  Chunked,  ///< softmax attention inside fixed chunks of `attention_chunk` tokens (Llama 4)
  Linear    ///< a linear-attention / state-space layer of a hybrid model (no softmax)
};

inline const char* to_string(LayerEncoding e) {
  switch (e) {
    case LayerEncoding::Rope:
      return "rope";
    case LayerEncoding::MRope:
      return "mrope";
    case LayerEncoding::Alibi:
      return "alibi";
    case LayerEncoding::None:
      return "none";
  }
  return "?";
}
inline const char* to_string(LayerAttention a) {
  switch (a) {
    case LayerAttention::Full:
      return "full";
    case LayerAttention::Sliding:
      return "sliding";
    case LayerAttention::Chunked:
      return "chunked";
    case LayerAttention::Linear:
      return "linear";
  }
  return "?";
}

/// A position-dependent multiplier of the query, qs(p) at 0-based position p:
///   Llama4Temperature (modeling_llama4.py, NoPE layers with attn_temperature_tuning):
///     qs(p) = 1 + attn_scale * ln(floor((p + 1) / floor_scale) + 1)
///   Llama4Beta (modeling_ministral3.py / mistral3, rope_parameters.llama_4_scaling_beta):
///     qs(p) = 1 + beta * ln(1 + floor(p / original_max_position_embeddings))
/// It multiplies q before the score (not part of A(tau): it breaks translation invariance on
/// purpose); apply it to the query rows, or fold it into the per-query scale.
struct QueryScale {
  enum class Kind { None, Llama4Temperature, Llama4Beta };
  Kind kind = Kind::None;
  double floor_scale = 0;  ///< Llama4Temperature
  double attn_scale = 0;   ///< Llama4Temperature
  double beta = 0;         ///< Llama4Beta
  double original_max_position_embeddings = 0;  ///< Llama4Beta

  explicit operator bool() const { return kind != Kind::None; }
  /// qs(p) in long double (1 for Kind::None).
  long double at(long double p) const {
    switch (kind) {
      case Kind::None:
        return 1.0L;
      case Kind::Llama4Temperature:
        return 1.0L + static_cast<long double>(attn_scale) *
                          std::log(std::floor((p + 1.0L) / floor_scale) + 1.0L);
      case Kind::Llama4Beta:
        return 1.0L + static_cast<long double>(beta) *
                          std::log(1.0L + std::floor(p / original_max_position_embeddings));
    }
    return 1.0L;
  }
  /// The formula with its numbers, e.g. "1 + 0.1 ln(floor((p + 1) / 8192) + 1)".
  std::string formula() const {
    std::ostringstream os;
    os.precision(10);
    switch (kind) {
      case Kind::None:
        return "1";
      case Kind::Llama4Temperature:
        os << "1 + " << attn_scale << " ln(floor((p + 1) / " << floor_scale << ") + 1)";
        break;
      case Kind::Llama4Beta:
        os << "1 + " << beta << " ln(1 + floor(p / " << original_max_position_embeddings << "))";
        break;
    }
    return os.str();
  }
};

/// One layer's positions and attention facts (see the header comment for the score).
struct LayerPositions {
  LayerEncoding encoding = LayerEncoding::Rope;
  LayerAttention attention = LayerAttention::Full;
  std::string layer_type;  ///< the config's name ("full_attention", "sliding_attention", ...)
  int qk_head_dim = 0;     ///< size of one q/k head vector
  int v_head_dim = 0;      ///< size of one v head vector (0: not stated, = qk_head_dim)
  /// First coordinate of the part `rope` acts on; MLA: qk_nope_head_dim (the unrotated
  /// coordinates come first). rope.head_dim = qk_head_dim - rotary_offset.
  int rotary_offset = 0;
  /// The RoPE of the coordinates [rotary_offset, qk_head_dim) (Rope, MRope); its own
  /// partial_rotary_factor and layout apply inside that range.
  RopeConfig rope;
  /// The full factor of q.k before the softmax: usually qk_head_dim^-1/2; Gemma
  /// query_pre_attn_scalar^-1/2; Granite attention_multiplier; DeepSeek (MLA with YaRN)
  /// qk_head_dim^-1/2 mscale^2. RoPE's own attention factor (rope_frequencies) is separate.
  double softmax_scale = 0;
  std::optional<long long> sliding_window;   ///< Sliding: the window (the config's value)
  std::optional<long long> attention_chunk;  ///< Chunked: the chunk size
  std::optional<double> softcap;             ///< tanh softcapping of the logits
  std::optional<double> alibi_max_bias;      ///< Alibi: slopes 2^(-max_bias h / H) (8 default)
  QueryScale query_scale;                    ///< position-dependent query multiplier
  bool qk_norm = false;                      ///< a norm on q and k before RoPE
};

/// Where a fact of ModelPositions came from.
struct ModelFact {
  std::string name;    ///< e.g. "rope_theta", "layout", "layers 5, 11, ...: global"
  std::string value;   ///< as printed
  std::string source;  ///< "config: rope_theta", "class default (configuration_gemma3.py)", ...
};
/// A key that changes positions or the attention scale and that peal does not model.
struct NotModelled {
  std::string key;    ///< e.g. "dual_chunk_attention_config"
  std::string value;  ///< its value as in the file
  std::string why;    ///< what it does and why peal leaves it out
  /// True when the key is known to change the attention (the reader throws for it unless
  /// ModelReadOptions::allow_not_modelled); false for a key peal merely does not read.
  bool changes_attention = false;
};

/// Options of the model-level readers.
struct ModelReadOptions {
  /// Accept a config with a key that changes the encoding and that peal cannot model (it is
  /// then listed in ModelPositions::not_modelled); by default the reader throws.
  bool allow_not_modelled = false;
  /// Override the pairing of every RoPE layer (e.g. for a Meta-format checkpoint).
  std::optional<Layout> layout;
};

/// Every layer of a model (the result of model_positions_from_hf / _from_gguf).
struct ModelPositions {
  std::string model_type;          ///< config model_type (of the text model) or GGUF arch
  bool architecture_known = true;  ///< false: conventions are the defaults (see facts)
  std::vector<LayerPositions> layers;
  std::vector<ModelFact> facts;
  std::vector<NotModelled> not_modelled;
  /// MLA (DeepSeek-V2/V3, Kimi K2): the latent and LoRA ranks (0 when not MLA).
  int kv_lora_rank = 0;
  int q_lora_rank = 0;
};

/// True when the two layers have the same positions (encoding, rotated coordinates and RoPE
/// parameters); attention facts (window, scale) are not compared.
inline bool same_positions(const LayerPositions& a, const LayerPositions& b) {
  if (a.encoding != b.encoding) return false;
  if (a.encoding == LayerEncoding::None) return true;
  if (a.encoding == LayerEncoding::Alibi) return a.alibi_max_bias == b.alibi_max_bias;
  if (a.qk_head_dim != b.qk_head_dim || a.rotary_offset != b.rotary_offset) return false;
  const RopeConfig &x = a.rope, &y = b.rope;
  const RopeScaling &s = x.scaling, &t = y.scaling;
  return x.head_dim == y.head_dim && x.rope_theta == y.rope_theta &&
         x.partial_rotary_factor == y.partial_rotary_factor &&
         x.max_position_embeddings == y.max_position_embeddings && x.layout == y.layout &&
         x.frequency_factors == y.frequency_factors && s.type == t.type && s.factor == t.factor &&
         s.original_max_position_embeddings == t.original_max_position_embeddings &&
         s.beta_fast == t.beta_fast && s.beta_slow == t.beta_slow && s.truncate == t.truncate &&
         s.mscale == t.mscale && s.mscale_all_dim == t.mscale_all_dim &&
         s.attention_factor == t.attention_factor && s.short_factor == t.short_factor &&
         s.long_factor == t.long_factor && s.low_freq_factor == t.low_freq_factor &&
         s.high_freq_factor == t.high_freq_factor && s.alpha == t.alpha &&
         s.mrope_section == t.mrope_section && s.mrope_interleaved == t.mrope_interleaved;
}

/// The encoding of a RoPE layer's whole q/k head: PassThrough(rotary_offset), then
/// rope<S>(layer.rope, seq_len) (its rotary part, then its own pass-through). For MLA this
/// is the 192-coordinate q/k head of DeepSeek-V3 (128 unrotated, 64 rotated); the decoupled
/// key k_pe that MLA caches is rope<S>(layer.rope) alone.
template <class S = double>
BlockDiagonal<PassThrough<S>, typename RopeEncoding<S>::encoding_type> rope_head(
    const LayerPositions& layer, double seq_len = 0) {
  if (layer.encoding != LayerEncoding::Rope)
    detail::fail(std::string("rope_head: the layer's encoding is ") + to_string(layer.encoding) +
                 ", not rope");
  if (layer.rotary_offset < 0 || layer.rotary_offset + layer.rope.head_dim != layer.qk_head_dim)
    detail::fail("rope_head: rotary_offset + rope.head_dim must equal qk_head_dim, got " +
                 std::to_string(layer.rotary_offset) + " + " +
                 std::to_string(layer.rope.head_dim) + " != " +
                 std::to_string(layer.qk_head_dim));
  return BlockDiagonal<PassThrough<S>, typename RopeEncoding<S>::encoding_type>(
      PassThrough<S>(layer.rotary_offset), rope<S>(layer.rope, seq_len).encoding());
}

namespace detail {
namespace model_impl {

inline std::string short_num(double x) {
  std::ostringstream os;
  os.precision(6);
  os << x;
  return os.str();
}

/// One layer in words, without its index: "rope θ 1e+06 linear x8 on 128/128, full".
inline std::string describe(const LayerPositions& L) {
  std::string s;
  switch (L.encoding) {
    case LayerEncoding::Rope:
    case LayerEncoding::MRope: {
      s = L.encoding == LayerEncoding::Rope ? "rope" : "mrope";
      s += " theta " + short_num(L.rope.rope_theta);
      if (L.rope.scaling.type != RopeType::Default) {
        s += std::string(" ") + to_string(L.rope.scaling.type);
        if (L.rope.scaling.factor) s += " x" + short_num(*L.rope.scaling.factor);
        if (L.rope.scaling.alpha) s += " alpha " + short_num(*L.rope.scaling.alpha);
      }
      const int D = int(double(L.rope.head_dim) * L.rope.partial_rotary_factor);
      s += ", " + std::to_string(D) + " of " + std::to_string(L.qk_head_dim) + " coords";
      if (L.rotary_offset) s += " from " + std::to_string(L.rotary_offset);
      s += L.rope.layout == Layout::Interleaved ? " interleaved" : " half-split";
      break;
    }
    case LayerEncoding::Alibi:
      s = "alibi";
      if (L.alibi_max_bias) s += " max_bias " + short_num(*L.alibi_max_bias);
      break;
    case LayerEncoding::None:
      s = "no positions";
      break;
  }
  s += std::string(", ") + to_string(L.attention);
  if (L.sliding_window) s += " window " + std::to_string(*L.sliding_window);
  if (L.attention_chunk) s += " chunk " + std::to_string(*L.attention_chunk);
  if (L.attention != LayerAttention::Linear) s += ", scale " + short_num(L.softmax_scale);
  if (L.softcap) s += ", softcap " + short_num(*L.softcap);
  if (L.query_scale) s += ", q x (" + L.query_scale.formula() + ")";
  if (L.qk_norm) s += ", qk-norm";
  return s;
}

inline std::string ranges(const std::vector<int>& idx) {
  std::string s;
  for (std::size_t i = 0; i < idx.size();) {
    std::size_t j = i;
    while (j + 1 < idx.size() && idx[j + 1] == idx[j] + 1) ++j;
    if (!s.empty()) s += ", ";
    s += std::to_string(idx[i]);
    if (j > i) s += (j == i + 1 ? ", " : "-") + std::to_string(idx[j]);
    i = j + 1;
  }
  return s;
}

}  // namespace model_impl
}  // namespace detail

/// The layer pattern compressed: one line per distinct layer description, with the layers
/// that have it ("layers 0-4, 6-10: rope theta 10000 ..., sliding window 1024, ...").
inline std::vector<std::string> describe_layers(const ModelPositions& m) {
  namespace mi = detail::model_impl;
  std::vector<std::string> kinds;
  std::vector<std::vector<int>> members;
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const std::string d = mi::describe(m.layers[i]);
    std::size_t k = 0;
    while (k < kinds.size() && kinds[k] != d) ++k;
    if (k == kinds.size()) {
      kinds.push_back(d);
      members.emplace_back();
    }
    members[k].push_back(int(i));
  }
  std::vector<std::string> out;
  for (std::size_t k = 0; k < kinds.size(); ++k)
    out.push_back((members[k].size() == 1 ? "layer " : "layers ") + mi::ranges(members[k]) +
                  ": " + kinds[k]);
  return out;
}

}  // namespace peal
