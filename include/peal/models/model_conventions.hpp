// What a model's own transformers code decides about positions, per model_type (docs/models.md):
// the pairing of rotary coordinates, which coordinates of the q/k head rotate, which layers
// rotate at all, which slide, the softmax scale, qk-norm, a position-dependent query scale,
// and the class defaults transformers fills in when config.json omits a key. Each row cites
// the modeling / configuration file of transformers (src/transformers/models/<name>/) it was
// read from. JSON-free; read by model_positions_from_hf (hf_config.hpp).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "../layout.hpp"

namespace peal {

/// Which coordinates of the q/k head are rotated.
enum class RotatedPart {
  First,   ///< the first rotary_dim = int(head_dim * partial_rotary_factor)
  MlaLast  ///< MLA: the last qk_rope_head_dim, after qk_nope_head_dim unrotated ones
};
/// How layer types are derived when config.json has no layer_types list.
enum class LayerRule {
  Uniform,         ///< every layer full attention
  AllSliding,      ///< every layer slides when sliding_window is set (Mistral, Phi-3, ...)
  QwenMaxWindow,   ///< sliding when use_sliding_window and layer >= max_window_layers
  Pattern,         ///< full when (i + 1) % pattern == 0, else sliding (pattern key below)
  LinearInterval,  ///< full when (i + 1) % full_attention_interval == 0, else linear
  Llama4Chunked,   ///< chunked attention on RoPE layers, full on NoPE layers
  JambaPeriod,     ///< attention when i % attn_layer_period == attn_layer_offset, else linear
  QwenMoeAlternate,///< sliding when use_sliding_window, (i + 1) % 2 and i < max_window_layers
  HybridPattern    ///< hybrid_override_pattern: * attention, M Mamba, - MLP, E MoE (Nemotron-H)
};
/// Which layers do not rotate.
enum class NopeRule {
  None,           ///< every attention layer rotates
  NoRopeLayers,   ///< no_rope_layers[i] == 0 (1 = RoPE); default (i + 1) % interval == 0
  FullLayers,     ///< full-attention layers are NoPE (Cohere2)
  FullIfSliding,  ///< full-attention layers are NoPE when sliding_window is set (EXAONE 4)
  All             ///< no layer rotates (ALiBi or learned absolute positions, Jamba)
};
/// The factor of q.k before the softmax.
enum class ScaleRule {
  HeadDim,             ///< qk_head_dim^-1/2
  QueryPreAttnScalar,  ///< query_pre_attn_scalar^-1/2 (Gemma 2/3)
  AttentionMultiplier, ///< attention_multiplier (Granite)
  MlaMscale,           ///< qk_head_dim^-1/2 mscale^2, mscale = yarn_get_mscale(factor, mscale_all_dim)
  One                  ///< 1 (Gemma 3n)
};
enum class QkNormRule { Never, Always, Key };
enum class QueryScaleRule { None, Llama4Temperature, Llama4Beta };
enum class PositionsKind { Rope, MRope, Alibi, Absolute, None };

/// A value transformers' configuration class gives a key that config.json omits.
struct ClassDefault {
  const char* key;
  double value;
};

/// Something an architecture's code does to the attention that peal does not model: always
/// (key "") or when the config's flag `key` is true. The model reader refuses it by default.
struct Unmodelled {
  const char* key;
  const char* why;
};

/// One row of the architecture table.
struct ModelConventions {
  const char* model_type;
  Layout layout;
  RotatedPart rotated;
  PositionsKind positions;
  LayerRule layer_rule;
  const char* pattern_key;  ///< LayerRule::Pattern: the key holding the pattern ("" none)
  int pattern_default;      ///< its class default
  NopeRule nope;
  ScaleRule scale;
  QkNormRule qk_norm;
  const char* qk_norm_key;  ///< QkNormRule::Key
  QueryScaleRule query_scale;
  /// Per layer type RoPE: legacy rope_scaling applies to full layers only and sliding layers
  /// take rope_local_base_freq (Gemma 3, OLMo 3).
  bool local_rope;
  std::vector<ClassDefault> defaults;
  const char* source;  ///< files and the lines that decide the row

  // Facts of single architectures, set by name below the table ("" / 0 = none).
  const char* sliding_switch = "";    ///< flag key that must be true for any layer to slide
  const char* softcap_key = "";       ///< key of a tanh softcap of the attention logits
  const char* stored_unused = "";     ///< a key the config stores but the code never applies
  const char* alibi_flag = "";        ///< flag key that replaces RoPE by ALiBi (Falcon)
  const char* theta_block = "";       ///< object holding rope_theta when the top level lacks it
  const char* theta_factor_key = "";  ///< key multiplying the base (ChatGLM rope_ratio)
  const char* layout_flag = "";       ///< flag key: true = the row's layout, false = half-split
  const char* head_dim_key = "";      ///< key giving the head size when head_dim is absent
  int rope_only_hidden = 0;           ///< RoPE only at this hidden_size, ALiBi otherwise
  bool block_configs = false;         ///< per-layer block_configs may remove attention (DeciLM)
  std::vector<Unmodelled> unmodelled = {};  ///< what the code does that peal does not model
};

namespace detail {
inline const std::vector<ModelConventions>& model_table() {
  using L = Layout;
  using R = RotatedPart;
  using P = PositionsKind;
  using LR = LayerRule;
  using N = NopeRule;
  using S = ScaleRule;
  using Q = QkNormRule;
  using QS = QueryScaleRule;
  const auto half = L::HalfSplit;
  const auto inter = L::Interleaved;
  // clang-format off
  static const std::vector<ModelConventions> t = [&] {
  std::vector<ModelConventions> v = {
    // ---- rotate_half (pairs (i, i + D/2)), the Llama family ----
    {"llama", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}}, "llama/modeling_llama.py: rotate_half, emb = cat((freqs, freqs))"},
    {"mistral", half, R::First, P::Rope, LR::AllSliding, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}}, "mistral/modeling_mistral.py: rotate_half; sliding_window on every layer"},
    {"mixtral", half, R::First, P::Rope, LR::AllSliding, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 1e6}}, "mixtral/modeling_mixtral.py: rotate_half; sliding_window on every layer"},
    {"ministral", half, R::First, P::Rope, LR::AllSliding, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {}, "ministral/modeling_ministral.py: rotate_half"},
    {"ministral3", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::Llama4Beta, false,
     {}, "ministral3/modeling_ministral3.py: rotate_half; q *= 1 + beta ln(1 + floor(p / original_max_position_embeddings))"},
    {"qwen2", half, R::First, P::Rope, LR::QwenMaxWindow, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}}, "qwen2/modeling_qwen2.py: rotate_half; configuration_qwen2.py: sliding when use_sliding_window and i >= max_window_layers"},
    {"qwen2_moe", half, R::First, P::Rope, LR::QwenMoeAlternate, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}, {"max_window_layers", 28}, {"sliding_window", 4096}},
     "qwen2_moe/modeling_qwen2_moe.py: rotate_half; configuration_qwen2_moe.py: sliding when use_sliding_window, (i + 1) % 2 and i < max_window_layers"},
    {"qwen3", half, R::First, P::Rope, LR::QwenMaxWindow, "", 0, N::None, S::HeadDim, Q::Always, "", QS::None, false,
     {{"rope_theta", 10000}}, "qwen3/modeling_qwen3.py: rotate_half; q_norm/k_norm (RMSNorm per head) before RoPE"},
    {"qwen3_moe", half, R::First, P::Rope, LR::QwenMaxWindow, "", 0, N::None, S::HeadDim, Q::Always, "", QS::None, false,
     {{"rope_theta", 10000}}, "qwen3_moe/modeling_qwen3_moe.py: rotate_half; q_norm/k_norm"},
    {"qwen3_next", half, R::First, P::Rope, LR::LinearInterval, "", 0, N::None, S::HeadDim, Q::Always, "", QS::None, false,
     {{"rope_theta", 10000}, {"partial_rotary_factor", 0.25}, {"full_attention_interval", 4}},
     "qwen3_next/modeling_qwen3_next.py: rotate_half on the first int(head_dim * 0.25); linear_attention (Gated DeltaNet) layers between"},
    {"qwen2_vl", half, R::First, P::MRope, LR::QwenMaxWindow, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {}, "qwen2_vl/modeling_qwen2_vl.py: apply_multimodal_rotary_pos_emb, rotate_half"},
    {"qwen2_5_vl", half, R::First, P::MRope, LR::QwenMaxWindow, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {}, "qwen2_5_vl/modeling_qwen2_5_vl.py: apply_multimodal_rotary_pos_emb, rotate_half"},
    {"qwen3_vl", half, R::First, P::MRope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Always, "", QS::None, false,
     {}, "qwen3_vl/modeling_qwen3_vl.py: interleaved M-RoPE sections, rotate_half; q_norm/k_norm"},
    {"qwen3_vl_moe", half, R::First, P::MRope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Always, "", QS::None, false,
     {}, "qwen3_vl_moe/modeling_qwen3_vl_moe.py: as qwen3_vl"},
    {"qwen3_5", half, R::First, P::MRope, LR::LinearInterval, "", 0, N::None, S::HeadDim, Q::Always, "", QS::None, false,
     {{"head_dim", 256}, {"partial_rotary_factor", 0.25}, {"full_attention_interval", 4}},
     "qwen3_5/modular_qwen3_5.py: Qwen3NextAttention (rotate_half on the first int(head_dim * 0.25), q_norm/k_norm) with Qwen3-VL's interleaved M-RoPE; Gated DeltaNet layers between"},
    {"qwen3_5_moe", half, R::First, P::MRope, LR::LinearInterval, "", 0, N::None, S::HeadDim, Q::Always, "", QS::None, false,
     {{"head_dim", 256}, {"partial_rotary_factor", 0.25}, {"full_attention_interval", 4}},
     "qwen3_5_moe/modular_qwen3_5_moe.py: as qwen3_5"},
    {"mimo", half, R::First, P::Rope, LR::QwenMaxWindow, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}}, "XiaomiMiMo/MiMo-7B modeling_mimo.py: MiMoModel(Qwen2Model); the MTP layers sit outside num_hidden_layers"},
    {"phi", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Key, "qk_layernorm", QS::None, false,
     {{"rope_theta", 10000}, {"partial_rotary_factor", 0.5}}, "phi/modeling_phi.py: rotate_half on the first int(head_dim * partial_rotary_factor)"},
    {"phi3", half, R::First, P::Rope, LR::AllSliding, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}}, "phi3/modeling_phi3.py: rotate_half; sliding_window on every layer"},
    {"phimoe", half, R::First, P::Rope, LR::AllSliding, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {}, "phimoe/modeling_phimoe.py: rotate_half"},
    {"starcoder2", half, R::First, P::Rope, LR::AllSliding, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}}, "starcoder2/modeling_starcoder2.py: rotate_half; sliding_window on every layer"},
    {"granite", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::AttentionMultiplier, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}, {"attention_multiplier", 1.0}}, "granite/modeling_granite.py: self.scaling = config.attention_multiplier"},
    {"granitemoe", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::AttentionMultiplier, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}, {"attention_multiplier", 1.0}}, "granitemoe/modeling_granitemoe.py: self.scaling = config.attention_multiplier"},
    {"gemma", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}, {"head_dim", 256}}, "gemma/modeling_gemma.py: rotate_half; configuration_gemma.py head_dim=256"},
    {"gemma2", half, R::First, P::Rope, LR::Pattern, "", 2, N::None, S::QueryPreAttnScalar, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}, {"head_dim", 256}, {"query_pre_attn_scalar", 256}, {"sliding_window", 4096}, {"attn_logit_softcapping", 50}},
     "gemma2/modeling_gemma2.py: rotate_half; even layers sliding; scaling = query_pre_attn_scalar**-0.5; tanh softcap"},
    {"gemma3_text", half, R::First, P::Rope, LR::Pattern, "sliding_window_pattern", 6, N::None, S::QueryPreAttnScalar, Q::Always, "", QS::None, true,
     {{"rope_theta", 1e6}, {"rope_local_base_freq", 10000}, {"head_dim", 256}, {"query_pre_attn_scalar", 256}, {"sliding_window", 4096}, {"max_position_embeddings", 131072}},
     "gemma3/configuration_gemma3.py: full layers rope_theta with rope_scaling, sliding layers rope_local_base_freq unscaled; modeling_gemma3.py: rotate_half, q_norm/k_norm"},
    {"olmo", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}}, "olmo/modeling_olmo.py: rotate_half"},
    {"olmo2", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Always, "", QS::None, false,
     {{"rope_theta", 10000}}, "olmo2/modeling_olmo2.py: rotate_half; q_norm/k_norm over the whole projection"},
    {"olmo3", half, R::First, P::Rope, LR::Pattern, "", 4, N::None, S::HeadDim, Q::Always, "", QS::None, true,
     {{"rope_theta", 500000}, {"rope_local_base_freq", 500000}, {"sliding_window", 4096}},
     "olmo3/configuration_olmo3.py: 3 sliding : 1 full; rope_scaling on full layers only"},
    {"olmoe", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Always, "", QS::None, false,
     {{"rope_theta", 10000}}, "olmoe/modeling_olmoe.py: rotate_half; q_norm/k_norm over the projection"},
    {"smollm3", half, R::First, P::Rope, LR::Uniform, "", 0, N::NoRopeLayers, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 2e6}, {"no_rope_layer_interval", 4}},
     "smollm3/modeling_smollm3.py: use_rope = config.no_rope_layers[layer_idx] (1 = RoPE)"},
    {"exaone4", half, R::First, P::Rope, LR::Pattern, "sliding_window_pattern", 4, N::FullIfSliding, S::HeadDim, Q::Always, "", QS::None, false,
     {{"rope_theta", 10000}, {"sliding_window", 4096}},
     "exaone4/modeling_exaone4.py: RoPE if sliding_window is None or is_sliding (global NoPE); q_norm/k_norm"},
    {"gpt_oss", half, R::First, P::Rope, LR::Pattern, "", 2, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 150000}, {"head_dim", 64}, {"sliding_window", 128}},
     "gpt_oss/modeling_gpt_oss.py: _apply_rotary_emb chunks x in halves; even layers sliding"},
    {"apertus", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Always, "", QS::None, false,
     {{"rope_theta", 12e6}}, "apertus/modeling_apertus.py: rotate_half; q_norm/k_norm"},
    {"arcee", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}}, "arcee/modeling_arcee.py: rotate_half"},
    {"seed_oss", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}}, "seed_oss/modeling_seed_oss.py: rotate_half"},
    {"glm4_moe", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Key, "use_qk_norm", QS::None, false,
     {{"rope_theta", 10000}, {"partial_rotary_factor", 0.5}},
     "glm4_moe/modeling_glm4_moe.py: rotate_half (GPT-NeoX partial rotation) on the first half of head_dim"},
    {"hunyuan_v1_dense", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Always, "", QS::None, false,
     {{"rope_theta", 10000}}, "hunyuan_v1_dense/modeling_hunyuan_v1_dense.py: rotate_half; dynamic with alpha: base theta alpha^(d/(d-2)); query/key layernorm"},
    {"hunyuan_v1_moe", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Always, "", QS::None, false,
     {{"rope_theta", 10000}}, "hunyuan_v1_moe/modeling_hunyuan_v1_moe.py: as hunyuan_v1_dense"},
    {"gpt_neox", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}, {"partial_rotary_factor", 0.25}}, "gpt_neox/modeling_gpt_neox.py: rotate_half on the first int(head_dim * rotary_pct)"},
    {"falcon", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}}, "falcon/modeling_falcon.py: rotate_half (alibi=true: ALiBi, no RoPE)"},
    {"stablelm", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Key, "qk_layernorm", QS::None, false,
     {{"rope_theta", 10000}, {"partial_rotary_factor", 0.25}}, "stablelm/modeling_stablelm.py: rotate_half on the first int(head_dim * partial_rotary_factor)"},
    {"persimmon", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Key, "qk_layernorm", QS::None, false,
     {{"partial_rotary_factor", 0.5}}, "persimmon/modeling_persimmon.py: rotate_half on the first half"},
    {"nemotron", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}, {"partial_rotary_factor", 0.5}}, "nemotron/modeling_nemotron.py: rotate_half on the first half"},
    {"minimax_m2", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Always, "", QS::None, false,
     {{"rope_theta", 5e6}, {"head_dim", 128}},
     "minimax_m2/modular_minimax_m2.py: Glm4Moe rotary (rotate_half on the first rotary_dim), q_norm/k_norm over the projection, no sliding window"},
    {"orion", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}}, "OrionStarAI/Orion-14B modeling_orion.py: Llama attention, rotate_half"},
    {"minicpm", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}}, "openbmb/MiniCPM modeling_minicpm.py: Llama attention, rotate_half (scale_emb / scale_depth act on the residual)"},
    {"internlm2", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}}, "internlm/internlm2_5-7b-chat modeling_internlm2.py: rotate_half; dynamic NTK as transformers' dynamic"},
    {"baichuan", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}}, "baichuan-inc/Baichuan2-7B modeling_baichuan.py: rotate_half, base 10000; 13B: ALiBi (vLLM baichuan.py: by hidden_size)"},
    {"qwen", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rotary_emb_base", 10000}, {"rotary_pct", 1.0}, {"use_dynamic_ntk", 1}, {"use_logn_attn", 1}},
     "Qwen/Qwen-7B modeling_qwen.py: rotate_half on the first int(kv_channels * rotary_pct)"},
    {"nemotron-nas", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}}, "nvidia/Llama-3_3-Nemotron-Super-49B-v1 modeling_decilm.py: Llama rotary; block_configs[i].attention.no_op / replace_with_linear remove a layer's attention"},
    {"helium", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {}, "helium/modeling_helium.py"},
    {"dbrx", half, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {}, "dbrx/modeling_dbrx.py: Llama rotary; base attn_config.rope_theta"},
    // ---- interleaved pairs (2i, 2i + 1) ----
    {"gptj", inter, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}}, "gptj/modeling_gptj.py: rotate_every_two on the first rotary_dim"},
    {"chatglm", inter, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}, {"partial_rotary_factor", 0.5}},
     "THUDM/chatglm3-6b modeling_chatglm.py: RotaryEmbedding(rotary_dim // 2) on the first half of the head, pairs (2i, 2i + 1) (original_rope)"},
    {"cohere", inter, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Key, "use_qk_norm", QS::None, false,
     {{"rope_theta", 10000}}, "cohere/modeling_cohere.py: rotate_half on x[..., ::2], x[..., 1::2]; emb = repeat_interleave(freqs, 2)"},
    {"cohere2", inter, R::First, P::Rope, LR::Pattern, "sliding_window_pattern", 4, N::FullLayers, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}, {"sliding_window", 4096}},
     "cohere2/modeling_cohere2.py: RoPE only if sliding_window is not None (sliding layers); interleaved as cohere"},
    {"glm", inter, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}, {"partial_rotary_factor", 0.5}}, "glm/modeling_glm.py: rotate_half on x[..., 0::2], x[..., 1::2], cos repeat_interleave(2)"},
    {"glm4", inter, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}, {"partial_rotary_factor", 0.5}}, "glm4/modeling_glm4.py: as glm (interleaved, first half of head_dim)"},
    {"ernie4_5", inter, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 500000}}, "ernie4_5/modeling_ernie4_5.py: rotate_half on x[..., 0::2], x[..., 1::2]"},
    {"ernie4_5_moe", inter, R::First, P::Rope, LR::Uniform, "", 0, N::None, S::HeadDim, Q::Never, "", QS::None, false,
     {{"rope_theta", 500000}}, "ernie4_5_moe/modeling_ernie4_5_moe.py: as ernie4_5"},
    {"llama4_text", inter, R::First, P::Rope, LR::Llama4Chunked, "", 0, N::NoRopeLayers, S::HeadDim, Q::Key, "use_qk_norm", QS::Llama4Temperature, false,
     {{"rope_theta", 500000}, {"head_dim", 128}, {"no_rope_layer_interval", 4}, {"attention_chunk_size", 8192},
      {"attn_temperature_tuning", 1}, {"floor_scale", 8192}, {"attn_scale", 0.1}, {"use_qk_norm", 1}},
     "llama4/modeling_llama4.py: view_as_complex (interleaved); use_rope = no_rope_layers[i]; NoPE q *= 1 + attn_scale ln(1 + floor((p + 1) / floor_scale)); qk_norm on RoPE layers"},
    {"deepseek_v2", inter, R::MlaLast, P::Rope, LR::Uniform, "", 0, N::None, S::MlaMscale, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}, {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64}, {"v_head_dim", 128}, {"kv_lora_rank", 512}},
     "deepseek_v2/modeling_deepseek_v2.py: view_as_complex on q_pe / k_pe (the last qk_rope_head_dim); scaling *= mscale^2"},
    {"deepseek_v3", inter, R::MlaLast, P::Rope, LR::Uniform, "", 0, N::None, S::MlaMscale, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}, {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64}, {"v_head_dim", 128}, {"kv_lora_rank", 512}, {"q_lora_rank", 1536}},
     "deepseek_v3/modeling_deepseek_v3.py: apply_rotary_pos_emb_interleave when rope_interleave (default true) on q_pe / k_pe (the last qk_rope_head_dim); scaling *= mscale^2"},
    {"deepseek_v32", inter, R::MlaLast, P::Rope, LR::Uniform, "", 0, N::None, S::MlaMscale, Q::Never, "", QS::None, false,
     {{"rope_theta", 10000}, {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64}, {"v_head_dim", 128}, {"kv_lora_rank", 512}, {"q_lora_rank", 1536}},
     "deepseek_v32/modeling_deepseek_v32.py: MLA as DeepSeek-V3: apply_rotary_pos_emb_interleave when rope_interleave (default true) on q_pe / k_pe (the last qk_rope_head_dim); scaling *= mscale^2"},
    // ---- no rotation ----
    {"bloom", half, R::First, P::Alibi, LR::Uniform, "", 0, N::All, S::HeadDim, Q::Never, "", QS::None, false,
     {}, "bloom/modeling_bloom.py: build_alibi_tensor (ALiBi, no RoPE)"},
    {"mpt", half, R::First, P::Alibi, LR::Uniform, "", 0, N::All, S::HeadDim, Q::Never, "", QS::None, false,
     {}, "mpt/modeling_mpt.py: build_mpt_alibi_tensor (attn_config.alibi_bias_max)"},
    {"gpt_bigcode", half, R::First, P::Absolute, LR::Uniform, "", 0, N::All, S::HeadDim, Q::Never, "", QS::None, false,
     {}, "gpt_bigcode/modeling_gpt_bigcode.py: learned absolute position embeddings (wpe)"},
    {"gpt2", half, R::First, P::Absolute, LR::Uniform, "", 0, N::All, S::HeadDim, Q::Never, "", QS::None, false,
     {}, "gpt2/modeling_gpt2.py: learned absolute position embeddings (wpe)"},
    {"jamba", half, R::First, P::None, LR::JambaPeriod, "", 0, N::All, S::HeadDim, Q::Never, "", QS::None, false,
     {{"attn_layer_period", 8}, {"attn_layer_offset", 4}}, "jamba/modeling_jamba.py: attention layers without positional encoding, Mamba layers between"},
    {"nemotron_h", half, R::First, P::None, LR::HybridPattern, "", 0, N::All, S::HeadDim, Q::Never, "", QS::None, false,
     {}, "nemotron_h/configuration_nemotron_h.py: hybrid_override_pattern M = Mamba2, * = attention, - = MLP, E = MoE; modeling_nemotron_h.py: attention without positional encoding"},
  };
  // clang-format on
  const auto row = [&v](const char* name) -> ModelConventions& {
    for (auto& r : v)
      if (std::string(r.model_type) == name) return r;
    throw std::logic_error(std::string("model_table: no row ") + name);
  };
  for (const char* q : {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_vl", "qwen2_5_vl", "smollm3", "mimo"})
    row(q).sliding_switch = "use_sliding_window";  // configuration_qwen2.py & co.
  row("gemma2").softcap_key = "attn_logit_softcapping";  // modeling_gemma2.py: softcap=
  // configuration_gemma3.py keeps attn_logit_softcapping; modeling_gemma3.py never passes it.
  row("gemma3_text").stored_unused = "attn_logit_softcapping";
  row("falcon").alibi_flag = "alibi";       // modeling_falcon.py: alibi replaces rotary
  row("dbrx").theta_block = "attn_config";  // configuration_dbrx.py: attn_config.rope_theta
  // ChatGLM (THUDM/chatglm3-6b modeling_chatglm.py, vLLM chatglm.py): base 10000 * rope_ratio,
  // interleaved pairs unless original_rope is false, head size kv_channels.
  row("chatglm").theta_factor_key = "rope_ratio";
  row("chatglm").layout_flag = "original_rope";
  row("chatglm").head_dim_key = "kv_channels";
  row("qwen").head_dim_key = "kv_channels";
  // Baichuan (vLLM baichuan.py): hidden_size 4096 (7B) rotates, the 13B models use ALiBi.
  row("baichuan").rope_only_hidden = 4096;
  row("nemotron-nas").block_configs = true;
  row("deepseek_v32").unmodelled = {
      {"", "DeepSeek Sparse Attention: a lightning indexer picks the top-k keys each query "
           "attends (modeling_deepseek_v32.py)"}};
  row("qwen").unmodelled = {
      {"use_dynamic_ntk", "Qwen's dynamic NTK: base scaled by (2^ceil(log2(L / seq_length) + 1) - 1)"
                          "^(d / (d - 2)) past seq_length (modeling_qwen.py)"},
      {"use_logn_attn", "Qwen's logn attention: q *= log_seq_length(p + 1) past seq_length "
                        "(modeling_qwen.py)"}};
  return v;
  }();
  return t;
}
}  // namespace detail

/// Aliases: model_type values that share another's row (a text config of a wrapper, a
/// checkpoint family with its own model_type on the same architecture).
inline const char* model_conventions_alias(const std::string& model_type) {
  if (model_type == "gemma3") return "gemma3_text";
  if (model_type == "llama4") return "llama4_text";
  if (model_type == "kimi_k2") return "deepseek_v3";  // DeepseekV3ForCausalLM
  if (model_type == "qwen3_vl_text") return "qwen3_vl";
  if (model_type == "qwen3_vl_moe_text") return "qwen3_vl_moe";
  if (model_type == "qwen2_5_vl_text") return "qwen2_5_vl";
  if (model_type == "qwen2_vl_text") return "qwen2_vl";
  if (model_type == "qwen3_5_text") return "qwen3_5";
  if (model_type == "qwen3_5_moe_text") return "qwen3_5_moe";
  return nullptr;
}

/// The row of a model_type (after model_conventions_alias), or nullptr when unknown.
inline const ModelConventions* model_conventions(const std::string& model_type) {
  const char* alias = model_conventions_alias(model_type);
  const std::string name = alias ? alias : model_type;
  for (const auto& r : detail::model_table())
    if (name == r.model_type) return &r;
  return nullptr;
}

}  // namespace peal
