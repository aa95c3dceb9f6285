// RoPE presets, exactly as the Hugging Face transformers rope_type definitions
// (modeling_rope_utils: default, linear, dynamic, yarn, longrope, llama3; docs/presets.md
// §1-7 gives every formula, default and branching rule, and the sources read):
//
//   rotary_dim D = int(head_dim * partial_rotary_factor)   (even, >= 2)
//   omega_i = theta^(-2i/D) rescaled per rope_type,        i = 0 .. D/2 - 1
//
// rope<S>(config, seq_len) is an ordinary peal encoding: a Bank of RotationBlock{omega_i, 0}
// on the first D coordinates (pairs (i, i + D/2) for Layout::HalfSplit, (2i, 2i+1) for
// Layout::Interleaved) followed by PassThrough(head_dim - D), so encode_query(q, t) rotates
// pair i by +omega_i t (x0' = x0 cos - x1 sin, x1' = x0 sin + x1 cos) exactly like HF's
// apply_rotary_pos_emb. Frequencies are computed in long double and stored as two doubles
// (rotation_block.hpp), so a float encoding stays accurate at position 2^40.
//
// Attention factor (YaRN mscale, LongRoPE): HF multiplies cos and sin by it, i.e. it scales
// the ROTARY coordinates of q and k (not the pass-through ones) by af, and the rotary part
// of the score by af^2. That is a fixed diagonal map, not part of A(tau) (A(0) = I must
// hold), so it is not applied by encode_query/encode_key: fold it into W_q/W_k, or call
// scale_rotary(rope, v) on q and k (before or after encoding: it commutes with A), or, for a
// full-rotary head (rotary_dim() == dim()), multiply ScoreOptions::scale by af^2.
//
// Limits (docs/presets.md §12, "Limits"): head_dim <= preset_max_head_dim, lengths <=
// preset_max_length, and every frequency, as the double pair it is stored in, in
// [preset_min_frequency, preset_max_frequency]; all checked before any table is built.
//
// Numerics deliberately differ from HF, which rounds inv_freq, p*omega and cos/sin to
// float32 (docs/presets.md §1.5): peal computes the published formula at >= double
// precision, so comparisons with HF-produced tensors need float32-scale tolerances.
#pragma once

#include <cmath>
#include <cstddef>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../bank.hpp"
#include "../block_diagonal.hpp"
#include "../errors.hpp"
#include "../layout.hpp"
#include "../rotation_block.hpp"
#include "../view.hpp"

namespace peal {

// ---- Limits of the rotary presets (rope, xpos, retnet) and of what hf_config.hpp reads ----
// Generous for real models (head_dim 64 .. 256, lengths <= ~10^7, omega in ~[1e-9, 1]); they
// bound the time and memory a configuration can ask for (validation builds the table of
// head_dim/2 frequencies) and keep every frequency inside what the angle code handles.

/// Largest head_dim (so rotary dim, and the length of LongRoPE factor lists: half of it).
inline constexpr int preset_max_head_dim = 65536;
/// Largest max_position_embeddings, original_max_position_embeddings and seq_len: 2^53,
/// beyond which a double no longer holds every integer length.
inline constexpr double preset_max_length = 0x1p53;
/// Range of every frequency a preset produces, as the normalised double pair
/// (omega_hi, omega_lo) a float or double encoding stores: omega_hi must be a normal double
/// (below 2^-1022 it is subnormal or 0 and the pair no longer holds omega), and omega <= 2^20
/// keeps |omega t| <= 2^100, the range over which detail/math/angle.hpp states its accuracy, for
/// every |t| <= 2^80 (a larger omega overflows omega t to inf, hence NaN, for some t; real
/// presets have omega <= 1, LongRoPE 1 / factor).
inline constexpr double preset_min_frequency = 0x1p-1022;
inline constexpr double preset_max_frequency = 0x1p20;

namespace detail {

/// Throws unless head_dim is in [1, preset_max_head_dim]; `what` names the caller.
inline void require_preset_head_dim(long long head_dim, const char* what) {
  if (head_dim <= 0 || head_dim > preset_max_head_dim)
    fail(std::string(what) + ": head_dim must be in [1, " + std::to_string(preset_max_head_dim) +
         "] (preset_max_head_dim), got " + std::to_string(head_dim));
}

/// Throws unless omega, split into the double pair (hi, lo) a float or double encoding
/// stores, lies in [preset_min_frequency, preset_max_frequency] (compared as the exact pair).
/// `what` names the preset, `origin` (optional) the input the value came from.
inline void require_preset_frequency(long double omega, std::size_t pair, const std::string& what,
                                     const std::string& origin = std::string()) {
  double hi, lo;
  split_frequency(omega, hi, lo);  // exactly what RotationBlock<float or double> stores
  const bool ok = std::isfinite(hi) && std::isfinite(lo) &&
                  (hi > preset_min_frequency || (hi == preset_min_frequency && lo >= 0)) &&
                  (hi < preset_max_frequency || (hi == preset_max_frequency && lo <= 0));
  if (ok) return;
  std::ostringstream os;
  os.precision(17);
  os << what << " gives pair " << pair << " the frequency omega = " << omega;
  if (!origin.empty()) os << " (" << origin << ")";
  os << ", stored as the double pair (omega_hi, omega_lo) = (" << hi << ", " << lo
     << "): outside the accepted range [2^-1022, 2^20] (preset_min_frequency, "
        "preset_max_frequency)";
  fail(os.str());
}

}  // namespace detail

/// The Hugging Face rope_type of a RoPE preset ("su" is the legacy name of LongRope).
enum class RopeType { Default, Linear, Dynamic, Yarn, LongRope, Llama3 };

/// The HF spelling of a rope type: "default", "linear", "dynamic", "yarn", "longrope", "llama3".
inline const char* to_string(RopeType t) {
  switch (t) {
    case RopeType::Default:
      return "default";
    case RopeType::Linear:
      return "linear";
    case RopeType::Dynamic:
      return "dynamic";
    case RopeType::Yarn:
      return "yarn";
    case RopeType::LongRope:
      return "longrope";
    case RopeType::Llama3:
      return "llama3";
  }
  return "?";
}

/// Parses an HF rope_type / legacy type string; "su" (early Phi-3 configs) means longrope.
/// Throws for anything else (e.g. "mrope", which is not a 1-D RoPE).
inline RopeType rope_type_from_string(const std::string& s) {
  if (s == "default") return RopeType::Default;
  if (s == "linear") return RopeType::Linear;
  if (s == "dynamic") return RopeType::Dynamic;
  if (s == "yarn") return RopeType::Yarn;
  if (s == "longrope" || s == "su") return RopeType::LongRope;
  if (s == "llama3") return RopeType::Llama3;
  detail::fail("rope: unknown rope_type \"" + s +
               "\" (supported: default, linear, dynamic, yarn, longrope (or su), llama3)");
}

/// The rope_scaling block of a model config. Absent keys are std::nullopt; which keys a type
/// requires, and the defaults of the optional ones, are those of HF (docs/presets.md):
///   linear:   factor
///   dynamic:  factor, and RopeConfig::max_position_embeddings
///   yarn:     factor (or both lengths, factor = max_position_embeddings / original),
///             original_max_position_embeddings (else max_position_embeddings);
///             optional beta_fast (32), beta_slow (1), truncate (true), attention_factor,
///             mscale, mscale_all_dim (0 or absent: unused; the ratio form needs both)
///   longrope: short_factor, long_factor (rotary_dim/2 entries each),
///             original_max_position_embeddings (else max_position_embeddings);
///             optional attention_factor, factor (else max_position_embeddings / original)
///   llama3:   factor, low_freq_factor, high_freq_factor, original_max_position_embeddings
///   dynamic with alpha (Hunyuan): alpha only (> 0, finite)
/// Keys a type does not use are ignored (but must not be NaN).
struct RopeScaling {
  RopeType type = RopeType::Default;
  std::optional<double> factor;
  std::optional<double> original_max_position_embeddings;
  std::optional<double> beta_fast;
  std::optional<double> beta_slow;
  std::optional<bool> truncate;
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;
  std::optional<double> attention_factor;
  std::optional<std::vector<double>> short_factor;
  std::optional<std::vector<double>> long_factor;
  std::optional<double> low_freq_factor;
  std::optional<double> high_freq_factor;
  /// Hunyuan's dynamic NTK by a fixed alpha (modeling_hunyuan_v1_dense.py, rope_type
  /// "dynamic" with rope_scaling.alpha): base theta alpha^(D / (D - 2)), for every seq_len;
  /// factor and max_position_embeddings are then unused. Only with RopeType::Dynamic.
  std::optional<double> alpha;
  /// Multimodal RoPE (Qwen2-VL "mrope_section", Qwen3-VL "mrope_interleaved"): how many
  /// pairs take the t, h and w position (sum = rotary_dim / 2). Empty: 1-D RoPE. Such a
  /// config needs N-D positions: mrope<S>(config) (mrope.hpp); rope<S>(config) refuses it.
  std::vector<int> mrope_section;
  bool mrope_interleaved = false;
};

/// A RoPE configuration with the keys of a model config (hf_config.hpp reads config.json).
struct RopeConfig {
  int head_dim = 0;                               ///< size of one head vector
  double rope_theta = 10000.0;                    ///< base theta (> 1)
  double partial_rotary_factor = 1.0;             ///< in (0, 1]; the rotary part comes first
  std::optional<double> max_position_embeddings;  ///< needed by dynamic, and as fallbacks
  Layout layout = Layout::HalfSplit;              ///< HF checkpoints: HalfSplit (rotate_half)
  RopeScaling scaling;                            ///< type Default: plain RoPE
  /// ggml's rope "freq_factors" (GGUF tensor rope_freqs, e.g. llama3 scaling baked in by
  /// llama.cpp's converter): omega_i is divided by factor i after the rope_type's rescaling
  /// (ggml_rope_ext: theta_extrap = theta_base / freq_factor). Empty: none; else rotary_dim/2
  /// finite factors > 0.
  std::vector<double> frequency_factors;
};

/// What a preset computes before it becomes an encoding: omega_i (long double, exactly the
/// published formula), the attention factor and the rotary dimension.
struct RopeFrequencies {
  std::vector<long double> inv_freq;
  long double attention_factor = 1.0L;
  int rotary_dim = 0;
};

namespace detail {
namespace rope_impl {

inline std::string num(long double x) {
  std::ostringstream os;
  os.precision(17);
  os << x;
  return os.str();
}

inline void require_finite_opt(const std::optional<double>& v, const char* name) {
  if (v && !std::isfinite(*v))
    fail(std::string("rope: rope_scaling.") + name + " must be finite, got " + num(*v));
}

// theta^(-2i/D), i < D/2 (HF: 1 / base ** (arange(0, D, 2) / D)).
inline std::vector<long double> base_inv_freq(int dim, long double theta) {
  std::vector<long double> v(std::size_t(dim / 2));
  for (int i = 0; i < dim / 2; ++i)
    v[std::size_t(i)] = 1.0L / std::pow(theta, static_cast<long double>(2 * i) / dim);
  return v;
}

inline long double pi() { return std::acos(-1.0L); }

// YaRN get_mscale: 1 if scale <= 1, else 0.1 m ln(scale) + 1.
inline long double yarn_get_mscale(long double scale, long double m = 1.0L) {
  return scale <= 1.0L ? 1.0L : 0.1L * m * std::log(scale) + 1.0L;
}

inline double need(const std::optional<double>& v, RopeType t, const char* name) {
  if (!v)
    fail(std::string("rope: rope_type \"") + to_string(t) + "\" requires rope_scaling." + name);
  return *v;
}

inline void require_factor_at_least_one(double f, RopeType t, const char* what = "factor") {
  if (!(f >= 1.0))
    fail(std::string("rope: rope_type \"") + to_string(t) + "\" requires " + what + " >= 1, got " +
         num(f));
}

inline void check_factor_list(const std::optional<std::vector<double>>& v, const char* name,
                              int half) {
  if (!v) fail(std::string("rope: rope_type \"longrope\" requires rope_scaling.") + name);
  if (int(v->size()) != half)
    fail(std::string("rope: rope_scaling.") + name + " has " + std::to_string(v->size()) +
         " entries, expected rotary_dim/2 = " + std::to_string(half));
  for (std::size_t i = 0; i < v->size(); ++i) {
    const double x = (*v)[i];
    if (!std::isfinite(x) || !(x > 0))
      fail(std::string("rope: rope_scaling.") + name + "[" + std::to_string(i) +
           "] must be finite and > 0, got " + num(x));
  }
}

}  // namespace rope_impl
}  // namespace detail

/// rotary_dim = int(head_dim * partial_rotary_factor) (HF's truncation), validated.
inline int rope_rotary_dim(const RopeConfig& c) {
  using detail::rope_impl::num;
  detail::require_preset_head_dim(c.head_dim, "rope");
  if (!std::isfinite(c.partial_rotary_factor) || !(c.partial_rotary_factor > 0.0) ||
      c.partial_rotary_factor > 1.0)
    detail::fail("rope: partial_rotary_factor must be in (0, 1], got " +
                 num(c.partial_rotary_factor));
  const int d = static_cast<int>(static_cast<double>(c.head_dim) * c.partial_rotary_factor);
  if (d < 2 || d % 2 != 0)
    detail::fail("rope: rotary dim int(head_dim * partial_rotary_factor) = int(" +
                 std::to_string(c.head_dim) + " * " + num(c.partial_rotary_factor) +
                 ") = " + std::to_string(d) + " must be even and >= 2");
  return d;
}

namespace detail {
namespace rope_impl {
inline RopeFrequencies compute(const RopeConfig& c, double seq_len, bool need_seq_len);
}  // namespace rope_impl
}  // namespace detail

/// The frequencies and attention factor of a configuration (docs/presets.md §2-7), in long
/// double. seq_len is the length HF computed its table for (max(position_ids) + 1); it is
/// used by dynamic (must be > 0) and longrope (must be > 0: it selects short/long factors)
/// and ignored otherwise. Throws peal::invalid_argument for any invalid or missing value.
inline RopeFrequencies rope_frequencies(const RopeConfig& c, double seq_len = 0) {
  return detail::rope_impl::compute(c, seq_len, true);
}

/// Throws peal::invalid_argument unless rope(config, seq_len) succeeds for some seq_len > 0:
/// every check of rope_frequencies except the one on seq_len.
inline void validate_rope_config(const RopeConfig& c) {
  (void)detail::rope_impl::compute(c, 0, false);
}

namespace detail {
namespace rope_impl {
// What every rope_type checks: theta, the lengths, every scaling key finite (a key a type does
// not use is ignored, but must not be NaN), alpha only with "dynamic".
inline void check_common(const RopeConfig& c, double seq_len) {
  const RopeScaling& sc = c.scaling;
  const RopeType type = sc.type;
  if (!std::isfinite(c.rope_theta) || !(c.rope_theta > 1.0))
    detail::fail("rope: rope_theta must be finite and > 1, got " + num(c.rope_theta));
  if (c.max_position_embeddings &&
      (!(*c.max_position_embeddings > 0) || !(*c.max_position_embeddings <= preset_max_length)))
    detail::fail("rope: max_position_embeddings must be > 0 and <= 2^53 (preset_max_length), got " +
                 num(*c.max_position_embeddings));
  if (!(seq_len >= 0) || !(seq_len <= preset_max_length))
    detail::fail("rope: seq_len must be >= 0 and <= 2^53 (preset_max_length), got " + num(seq_len));
  require_finite_opt(sc.factor, "factor");
  require_finite_opt(sc.original_max_position_embeddings, "original_max_position_embeddings");
  require_finite_opt(sc.beta_fast, "beta_fast");
  require_finite_opt(sc.beta_slow, "beta_slow");
  require_finite_opt(sc.mscale, "mscale");
  require_finite_opt(sc.mscale_all_dim, "mscale_all_dim");
  require_finite_opt(sc.attention_factor, "attention_factor");
  require_finite_opt(sc.low_freq_factor, "low_freq_factor");
  require_finite_opt(sc.high_freq_factor, "high_freq_factor");
  for (const auto* list : {&sc.short_factor, &sc.long_factor})
    if (*list)
      for (double x : **list)
        if (!std::isfinite(x))
          detail::fail("rope: short_factor/long_factor entries must be finite");
  if (sc.original_max_position_embeddings &&
      (!(*sc.original_max_position_embeddings > 0) ||
       !(*sc.original_max_position_embeddings <= preset_max_length)))
    detail::fail(
        "rope: rope_scaling.original_max_position_embeddings must be > 0 and <= 2^53 "
        "(preset_max_length), got " +
        num(*sc.original_max_position_embeddings));
  if (sc.attention_factor && !(*sc.attention_factor > 0))
    detail::fail("rope: rope_scaling.attention_factor must be > 0, got " +
                 num(*sc.attention_factor));

  if (sc.alpha && type != RopeType::Dynamic)
    detail::fail(
        std::string("rope: rope_scaling.alpha is Hunyuan's dynamic scaling; rope_type \"") +
        to_string(type) + "\" does not use it");
}

// One function per rope_type (docs/presets.md §2-7), each writing out.inv_freq (and
// out.attention_factor where the type has one) for rotary dimension D and base theta.

// default: theta^(-2i/D).
inline void default_frequencies(int D, long double theta, RopeFrequencies& out) {
  out.inv_freq = base_inv_freq(D, theta);
}

// linear: omega_i / factor.
inline void linear_frequencies(const RopeConfig& c, int D, long double theta,
                               RopeFrequencies& out) {
  const RopeScaling& sc = c.scaling;
  const RopeType type = sc.type;
  const double f = need(sc.factor, type, "factor");
  require_factor_at_least_one(f, type);
  out.inv_freq = base_inv_freq(D, theta);
  for (long double& w : out.inv_freq) w /= static_cast<long double>(f);
}

// dynamic (NTK by length, or Hunyuan's fixed alpha): a larger base theta.
inline void dynamic_frequencies(const RopeConfig& c, int D, long double theta, double seq_len,
                                bool need_seq_len, RopeFrequencies& out) {
  const RopeScaling& sc = c.scaling;
  const RopeType type = sc.type;
  if (sc.alpha) {
    // Hunyuan: theta' = theta alpha^(D / (D - 2)), whatever the length.
    if (!std::isfinite(*sc.alpha) || !(*sc.alpha > 0))
      detail::fail("rope: rope_scaling.alpha must be finite and > 0, got " + num(*sc.alpha));
    if (D <= 2) detail::fail("rope: rope_type \"dynamic\" requires rotary dim > 2");
    const long double Dl = D;
    out.inv_freq =
        base_inv_freq(D, theta * std::pow(static_cast<long double>(*sc.alpha), Dl / (Dl - 2.0L)));
    return;
  }
  // theta' = theta (f L / M - (f - 1))^(D / (D - 2)), L = max(seq_len, M), M =
  // max_position_embeddings (HF ignores rope_scaling.original_max_position_embeddings).
  const double f = need(sc.factor, type, "factor");
  require_factor_at_least_one(f, type);
  if (!c.max_position_embeddings)
    detail::fail("rope: rope_type \"dynamic\" requires max_position_embeddings");
  if (need_seq_len && !(seq_len > 0))
    detail::fail(
        "rope: rope_type \"dynamic\" requires seq_len > 0 (the length the table is "
        "computed for), got " +
        num(seq_len));
  if (D <= 2) detail::fail("rope: rope_type \"dynamic\" requires rotary dim > 2");
  const long double M = *c.max_position_embeddings, F = f;
  const long double L = seq_len > M ? static_cast<long double>(seq_len) : M;
  const long double Dl = D;
  // f L / M - (f - 1) written as 1 + f (L - M) / M: equal, and exactly 1 at L = M
  // (the published form cancels to 0 there once f exceeds 2^64, giving omega = inf).
  const long double base = theta * std::pow(1.0L + F * ((L - M) / M), Dl / (Dl - 2.0L));
  out.inv_freq = base_inv_freq(D, base);
}

// yarn: a ramp between interpolation and extrapolation over the pair index, and an
// attention factor.
inline void yarn_frequencies(const RopeConfig& c, int D, long double theta, RopeFrequencies& out) {
  const RopeScaling& sc = c.scaling;
  const RopeType type = sc.type;
  // Current HF (after PR #40320): explicit factor; L0 = original_max_position_embeddings,
  // else max_position_embeddings; factor = max / L0 only when factor is absent.
  std::optional<double> L0o = sc.original_max_position_embeddings;
  if (!L0o) L0o = c.max_position_embeddings;
  if (!L0o)
    detail::fail(
        "rope: rope_type \"yarn\" requires rope_scaling."
        "original_max_position_embeddings or max_position_embeddings");
  double f;
  if (sc.factor) {
    f = *sc.factor;
  } else if (sc.original_max_position_embeddings && c.max_position_embeddings) {
    f = *c.max_position_embeddings / *sc.original_max_position_embeddings;
  } else {
    detail::fail(
        "rope: rope_type \"yarn\" requires rope_scaling.factor (or both "
        "max_position_embeddings and rope_scaling.original_max_position_embeddings)");
  }
  require_factor_at_least_one(f, type);
  // HF reads beta_* as `value or default`: 0 means the default too.
  const long double beta_fast = (sc.beta_fast && *sc.beta_fast != 0) ? *sc.beta_fast : 32.0L;
  const long double beta_slow = (sc.beta_slow && *sc.beta_slow != 0) ? *sc.beta_slow : 1.0L;
  if (!(beta_fast > 0) || !(beta_slow > 0))
    detail::fail("rope: rope_scaling.beta_fast and beta_slow must be > 0, got " + num(beta_fast) +
                 " and " + num(beta_slow));
  const bool truncate = sc.truncate.value_or(true);
  const long double F = f, L0 = *L0o;

  long double af;
  if (sc.attention_factor) {
    af = *sc.attention_factor;
  } else if (sc.mscale && *sc.mscale != 0 && sc.mscale_all_dim && *sc.mscale_all_dim != 0) {
    af = yarn_get_mscale(F, *sc.mscale) / yarn_get_mscale(F, *sc.mscale_all_dim);
  } else {
    af = yarn_get_mscale(F);
  }
  if (!std::isfinite(af) || !(af > 0))
    detail::fail(
        "rope: yarn attention factor get_mscale(factor, mscale) / "
        "get_mscale(factor, mscale_all_dim) = " +
        num(af) + " must be finite and > 0");
  out.attention_factor = af;

  // Correction range over pair indices: c(r) = D ln(L0 / (2 pi r)) / (2 ln theta).
  const auto corr = [&](long double r) {
    return static_cast<long double>(D) * std::log(L0 / (r * 2.0L * pi())) /
           (2.0L * std::log(theta));
  };
  long double low = corr(beta_fast), high = corr(beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  if (low < 0) low = 0;
  if (high > static_cast<long double>(D - 1)) high = static_cast<long double>(D - 1);
  if (!(low < high) && !(low > high)) high += 0.001L;  // HF: avoid a zero-width ramp

  const std::vector<long double> extra = base_inv_freq(D, theta);
  out.inv_freq.resize(extra.size());
  for (std::size_t j = 0; j < extra.size(); ++j) {
    long double ramp = (static_cast<long double>(j) - low) / (high - low);
    ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
    const long double extrapolation_factor = 1.0L - ramp;
    out.inv_freq[j] =
        (extra[j] / F) * (1.0L - extrapolation_factor) + extra[j] * extrapolation_factor;
  }
}

// longrope: per-pair short or long factors (chosen by seq_len), and an attention factor.
inline void longrope_frequencies(const RopeConfig& c, int D, long double theta, double seq_len,
                                 bool need_seq_len, RopeFrequencies& out) {
  const RopeScaling& sc = c.scaling;
  const RopeType type = sc.type;
  const int half = D / 2;
  check_factor_list(sc.short_factor, "short_factor", half);
  check_factor_list(sc.long_factor, "long_factor", half);
  std::optional<double> L0o = sc.original_max_position_embeddings;
  if (!L0o) L0o = c.max_position_embeddings;
  if (!L0o)
    detail::fail(
        "rope: rope_type \"longrope\" requires original_max_position_embeddings "
        "or max_position_embeddings");
  if (!(*L0o > 1))
    detail::fail("rope: longrope original_max_position_embeddings must be > 1, got " + num(*L0o));
  if (need_seq_len && !(seq_len > 0))
    detail::fail(
        "rope: rope_type \"longrope\" requires seq_len > 0 (it selects "
        "short_factor or long_factor), got " +
        num(seq_len));
  const long double L0 = *L0o;
  if (sc.factor) require_factor_at_least_one(*sc.factor, type);
  if (sc.attention_factor) {
    out.attention_factor = *sc.attention_factor;
  } else {
    long double f;
    if (sc.factor) {
      f = *sc.factor;
    } else if (c.max_position_embeddings) {
      f = static_cast<long double>(*c.max_position_embeddings) / L0;
    } else {
      detail::fail(
          "rope: rope_type \"longrope\" needs rope_scaling.factor, "
          "max_position_embeddings or rope_scaling.attention_factor");
    }
    out.attention_factor = f <= 1.0L ? 1.0L : std::sqrt(1.0L + std::log(f) / std::log(L0));
  }
  // Both tables must be valid whatever seq_len selects: HF switches to the other at L0.
  const std::vector<long double> base = base_inv_freq(D, theta);
  for (const char* name : {"short_factor", "long_factor"}) {
    const std::vector<double>& list = name[0] == 's' ? *sc.short_factor : *sc.long_factor;
    for (std::size_t i = 0; i < base.size(); ++i)
      require_preset_frequency(base[i] / static_cast<long double>(list[i]), i,
                               "rope: rope_type \"longrope\"",
                               "theta^(-2i/D) / rope_scaling." + std::string(name) + "[" +
                                   std::to_string(i) + "] = " + num(list[i]));
  }
  const std::vector<double>& ext =
      static_cast<long double>(seq_len) > L0 ? *sc.long_factor : *sc.short_factor;
  out.inv_freq = base;
  for (int i = 0; i < half; ++i)
    out.inv_freq[std::size_t(i)] /= static_cast<long double>(ext[std::size_t(i)]);
}

// llama3: low frequencies divided by factor, high ones kept, a smooth band between.
inline void llama3_frequencies(const RopeConfig& c, int D, long double theta,
                               RopeFrequencies& out) {
  const RopeScaling& sc = c.scaling;
  const RopeType type = sc.type;
  const double f = need(sc.factor, type, "factor");
  const double lo = need(sc.low_freq_factor, type, "low_freq_factor");
  const double hi = need(sc.high_freq_factor, type, "high_freq_factor");
  const double L0d =
      need(sc.original_max_position_embeddings, type, "original_max_position_embeddings");
  require_factor_at_least_one(f, type);
  // Equal factors (Llama 4's configs: 1 and 1) leave no smooth band: HF's torch.where
  // then keeps or divides each frequency; only a wavelength exactly at the threshold would
  // meet HF's 0 / 0, and peal keeps that one.
  if (!(lo > 0) || !(hi >= lo))
    detail::fail("rope: llama3 requires 0 < low_freq_factor <= high_freq_factor, got " + num(lo) +
                 " and " + num(hi));
  const long double F = f, L0 = L0d, LO = lo, HI = hi;
  const long double low_wavelen = L0 / LO, high_wavelen = L0 / HI;
  out.inv_freq = base_inv_freq(D, theta);
  for (long double& w : out.inv_freq) {
    const long double wavelen = 2.0L * pi() / w;
    if (wavelen < high_wavelen) {
      // high frequency: kept
    } else if (wavelen > low_wavelen) {
      w = w / F;
    } else if (!(HI > LO)) {
      // the threshold itself, with no band: kept
    } else {
      const long double smooth = (L0 / wavelen - LO) / (HI - LO);
      w = (1.0L - smooth) * w / F + smooth * w;
    }
  }
}

// ggml's freq_factors, after the rope_type's rescaling.
inline void apply_frequency_factors(const RopeConfig& c, RopeFrequencies& out) {
  if (c.frequency_factors.empty()) return;
  if (c.frequency_factors.size() != out.inv_freq.size())
    detail::fail("rope: frequency_factors has " + std::to_string(c.frequency_factors.size()) +
                 " entries, rotary_dim / 2 = " + std::to_string(out.inv_freq.size()) + " expected");
  for (std::size_t i = 0; i < out.inv_freq.size(); ++i) {
    const double f = c.frequency_factors[i];
    if (!std::isfinite(f) || !(f > 0))
      detail::fail("rope: frequency_factors[" + std::to_string(i) +
                   "] must be finite and > 0, got " + num(f));
    out.inv_freq[i] /= static_cast<long double>(f);
  }
}

inline RopeFrequencies compute(const RopeConfig& c, double seq_len, bool need_seq_len) {
  const int D = rope_rotary_dim(c);
  check_common(c, seq_len);
  const long double theta = c.rope_theta;
  const RopeType type = c.scaling.type;
  RopeFrequencies out;
  out.rotary_dim = D;
  switch (type) {
    case RopeType::Default:
      default_frequencies(D, theta, out);
      break;
    case RopeType::Linear:
      linear_frequencies(c, D, theta, out);
      break;
    case RopeType::Dynamic:
      dynamic_frequencies(c, D, theta, seq_len, need_seq_len, out);
      break;
    case RopeType::Yarn:
      yarn_frequencies(c, D, theta, out);
      break;
    case RopeType::LongRope:
      longrope_frequencies(c, D, theta, seq_len, need_seq_len, out);
      break;
    case RopeType::Llama3:
      llama3_frequencies(c, D, theta, out);
      break;
  }
  apply_frequency_factors(c, out);
  // Whatever formula produced them, the frequencies must be usable as stored (double pairs).
  const std::string what = std::string("rope: rope_type \"") + to_string(type) + "\"";
  for (std::size_t i = 0; i < out.inv_freq.size(); ++i)
    require_preset_frequency(out.inv_freq[i], i, what);
  return out;
}
}  // namespace rope_impl
}  // namespace detail

namespace detail {
/// Throws unless frequencies given to a preset class are usable (sizes, every frequency in
/// the accepted range, a finite attention factor > 0); `what` names the class.
inline void check_rope_frequencies(const RopeFrequencies& f, int head_dim, const char* what) {
  require_preset_head_dim(head_dim, what);
  const std::size_t n = f.inv_freq.size();
  if (f.rotary_dim < 2 || f.rotary_dim % 2 != 0 || f.rotary_dim > head_dim ||
      std::size_t(f.rotary_dim / 2) != n)
    fail(std::string(what) + ": rotary_dim " + std::to_string(f.rotary_dim) +
         " must be even, >= 2, <= head_dim " + std::to_string(head_dim) +
         " and twice the number of frequencies " + std::to_string(n));
  if (!std::isfinite(f.attention_factor) || !(f.attention_factor > 0))
    fail(std::string(what) + ": attention_factor must be finite and > 0, got " +
         rope_impl::num(f.attention_factor));
  for (std::size_t i = 0; i < n; ++i) require_preset_frequency(f.inv_freq[i], i, what);
}
}  // namespace detail

/// A RoPE preset: BlockDiagonal(Bank<RotationBlock<S>> on the first rotary_dim()
/// coordinates, PassThrough<S> on the rest) plus what HF applies outside A(tau): the
/// attention factor. Everything an encoding offers (A, F, G, encode_query, encode_key,
/// score, the kernels) is the BlockDiagonal's.
template <class S = double>
class RopeEncoding : public BlockDiagonal<Bank<RotationBlock<S>>, PassThrough<S>> {
 public:
  using Base = BlockDiagonal<Bank<RotationBlock<S>>, PassThrough<S>>;
  /// The ordinary peal encoding this preset is (for code that dispatches on types).
  using encoding_type = Base;
  using Real = real_t<S>;

  /// From frequencies (rope_frequencies, or computed elsewhere): validated like rope()'s
  /// (sizes, every frequency in the accepted range, a finite attention factor > 0).
  RopeEncoding(const RopeFrequencies& f, int head_dim, Layout layout, RopeType type)
      : RopeEncoding(checked(f, head_dim), head_dim, layout, type, Checked{}) {}

  /// The encoding itself, as its ordinary type.
  const Base& encoding() const { return *this; }
  /// The rotation bank acting on coordinates [0, rotary_dim()).
  const Bank<RotationBlock<S>>& rotary() const { return this->template part<0>(); }
  int head_dim() const { return this->dim(); }
  int rotary_dim() const { return rotary().dim(); }
  Layout layout() const { return rotary().layout(); }
  RopeType type() const { return type_; }
  /// omega_i in long double, as computed from the published formula.
  const std::vector<long double>& inv_freq() const { return inv_freq_; }
  /// HF's attention_scaling (1 except for yarn and longrope): scale the rotary coordinates
  /// of q and k by it (scale_rotary), or the score by its square for full-rotary heads.
  Real attention_factor() const { return static_cast<Real>(attention_factor_); }
  long double attention_factor_long() const { return attention_factor_; }

 private:
  struct Checked {};
  RopeEncoding(const RopeFrequencies& f, int head_dim, Layout layout, RopeType type, Checked)
      : Base(make_bank(f, layout), PassThrough<S>(head_dim - f.rotary_dim)),
        inv_freq_(f.inv_freq),
        attention_factor_(f.attention_factor),
        type_(type) {}

  static const RopeFrequencies& checked(const RopeFrequencies& f, int head_dim) {
    detail::check_rope_frequencies(f, head_dim, "RopeEncoding");
    return f;
  }

  static Bank<RotationBlock<S>> make_bank(const RopeFrequencies& f, Layout layout) {
    std::vector<RotationBlock<S>> blocks;
    blocks.reserve(f.inv_freq.size());
    for (long double w : f.inv_freq) blocks.emplace_back(w);
    return Bank<RotationBlock<S>>(blocks, layout);
  }

  std::vector<long double> inv_freq_;
  long double attention_factor_;
  RopeType type_;
};

/// The RoPE preset of a configuration (see rope_frequencies for seq_len and validation).
template <class S = double>
RopeEncoding<S> rope(const RopeConfig& config, double seq_len = 0) {
  if (!config.scaling.mrope_section.empty())
    detail::fail("rope: the config has an mrope_section (multimodal RoPE): it needs (t, h, w) "
                 "positions, use mrope<S>(config) from <peal/presets/mrope.hpp>");
  const RopeFrequencies f = rope_frequencies(config, seq_len);
  return RopeEncoding<S>(f, config.head_dim, config.layout, config.scaling.type);
}

namespace detail {
template <class T>
struct is_tensor_view : std::false_type {};
template <class T>
struct is_tensor_view<TensorView<T>> : std::true_type {};
}  // namespace detail

/// v[0 .. rotary_dim) *= attention_factor: HF's cos/sin scaling, for one head vector (an
/// Eigen vector, std::vector or std::array of size head_dim). Apply it to both q and k.
/// A no-op when the factor is 1.
template <class S, class V,
          class = std::enable_if_t<!detail::is_tensor_view<std::decay_t<V>>::value>>
void scale_rotary(const RopeEncoding<S>& rope, V&& v) {
  auto&& m = detail::as_eigen(v);
  detail::require_size(m.size(), rope.head_dim(), "scale_rotary");
  if (rope.attention_factor_long() == 1.0L) return;
  using T = typename std::decay_t<decltype(m)>::Scalar;
  const T af = static_cast<T>(rope.attention_factor_long());
  for (int i = 0; i < rope.rotary_dim(); ++i) m(i) *= af;
}

/// The same for every [token, head] vector of a view (float, double, Eigen::half or
/// Eigen::bfloat16; half types are scaled in float).
template <class S, class T>
void scale_rotary(const RopeEncoding<S>& rope, TensorView<T> x) {
  static_assert(!std::is_const<T>::value, "peal: scale_rotary needs a writable view");
  if (x.dim() != Index(rope.head_dim())) {
    std::ostringstream os;
    os << "scale_rotary: view has dim " << x.dim() << ", the encoding acts on size "
       << rope.head_dim();
    detail::fail(os.str());
  }
  if (rope.attention_factor_long() == 1.0L) return;
  using A = std::conditional_t<std::is_same<T, double>::value, double, float>;
  const A af = static_cast<A>(rope.attention_factor_long());
  const Index D = rope.rotary_dim();
  for (Index t = 0; t < x.tokens(); ++t)
    for (Index h = 0; h < x.heads(); ++h)
      for (Index i = 0; i < D; ++i) {
        T& e = x(t, h, i);
        e = T(static_cast<A>(e) * af);
      }
}

}  // namespace peal
