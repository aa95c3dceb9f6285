// Independent long-double reference of the published positional-encoding presets.
//
// Plain C++17: no Eigen, no peal headers. Every quantity is computed in long double straight
// from the published formula (see docs/presets.md for the formulas, branching rules, defaults
// and the exact sources and versions they were read from). Tests compare peal's presets
// against these functions; nothing here reproduces the float32 rounding of the Python
// implementations (Hugging Face computes inv_freq and cos/sin in float32, see the doc).
//
// "Absent" optional parameters are modelled as NaN (the default argument absent()).
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace peal_ref {

// inv_freq[i] is the angular frequency of rotary pair i; attention_factor multiplies cos and
// sin (so it scales the rotated coordinates of both q and k, and the score by its square);
// rotary_dim = int(head_dim * partial_rotary_factor) coordinates are rotated, the rest pass
// through unchanged.
struct RopeRef {
  std::vector<long double> inv_freq;
  long double attention_factor;
  int rotary_dim;
};

// NaN: the value of an optional parameter that a configuration does not set.
inline long double absent() { return std::nanl(""); }

namespace detail {

// Exact equality without -Wfloat-equal noise (false if either is NaN).
inline bool same(long double a, long double b) {
  return !std::isnan(a) && !std::isnan(b) && !(a < b) && !(a > b);
}

inline long double pi() { return std::acos(-1.0L); }

inline bool is_absent(long double v) { return std::isnan(v); }

inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("peal_ref: " + what);
}

// HF: dim = int(head_dim * partial_rotary_factor) (Python float product, truncated).
inline int rotary_dim_of(int head_dim, double partial_rotary_factor) {
  require(head_dim > 0, "head_dim must be positive");
  require(partial_rotary_factor > 0.0 && partial_rotary_factor <= 1.0,
          "partial_rotary_factor must be in (0, 1]");
  const double product = static_cast<double>(head_dim) * partial_rotary_factor;
  const int dim = static_cast<int>(product);  // truncation toward zero, as Python int()
  require(dim >= 2 && dim % 2 == 0, "rotary dim must be even and >= 2, got " + std::to_string(dim));
  return dim;
}

// theta^(-2i/dim) for i = 0 .. dim/2 - 1 (HF: 1 / base ** (arange(0, dim, 2) / dim)).
inline std::vector<long double> base_inv_freq(int dim, long double theta) {
  require(theta > 1.0L, "rope_theta must be > 1");
  std::vector<long double> v(static_cast<std::size_t>(dim / 2));
  for (int i = 0; i < dim / 2; ++i) {
    const long double exponent = static_cast<long double>(2 * i) / static_cast<long double>(dim);
    v[static_cast<std::size_t>(i)] = 1.0L / std::pow(theta, exponent);
  }
  return v;
}

// YaRN get_mscale: 1 if scale <= 1, else 0.1 * mscale * ln(scale) + 1.
inline long double yarn_get_mscale(long double scale, long double mscale = 1.0L) {
  if (scale <= 1.0L) return 1.0L;
  return 0.1L * mscale * std::log(scale) + 1.0L;
}

// YaRN find_correction_dim: the (fractional) pair-dimension index whose wavelength makes
// num_rotations turns over original_max positions.
inline long double yarn_correction_dim(long double num_rotations, int dim, long double theta,
                                       long double original_max) {
  return (static_cast<long double>(dim) * std::log(original_max / (num_rotations * 2.0L * pi()))) /
         (2.0L * std::log(theta));
}

inline void rotate_pair(long double& a, long double& b, long double angle, long double scale) {
  const long double c = std::cos(angle) * scale;
  const long double s = std::sin(angle) * scale;
  const long double a0 = a;
  const long double b0 = b;
  a = a0 * c - b0 * s;
  b = b0 * c + a0 * s;
}

inline void check_rope(const RopeRef& r, std::size_t x_size) {
  require(r.rotary_dim >= 2 && r.rotary_dim % 2 == 0, "RopeRef.rotary_dim must be even and >= 2");
  require(r.inv_freq.size() == static_cast<std::size_t>(r.rotary_dim / 2),
          "RopeRef.inv_freq must have rotary_dim/2 entries");
  require(x_size >= static_cast<std::size_t>(r.rotary_dim), "vector shorter than rotary_dim");
}

}  // namespace detail

// ---- RoPE inverse frequencies ---------------------------------------------------------------

// HF transformers modeling_rope_utils._compute_default_rope_parameters (Su et al. RoPE).
inline RopeRef rope_default(int head_dim, long double theta, double partial_rotary_factor = 1.0) {
  const int dim = detail::rotary_dim_of(head_dim, partial_rotary_factor);
  return RopeRef{detail::base_inv_freq(dim, theta), 1.0L, dim};
}

// HF modeling_rope_utils._compute_linear_scaling_rope_parameters (position interpolation).
inline RopeRef rope_linear(int head_dim, long double theta, double partial_rotary_factor,
                           long double factor) {
  detail::require(factor > 0.0L, "linear factor must be > 0");
  RopeRef r = rope_default(head_dim, theta, partial_rotary_factor);
  for (long double& f : r.inv_freq) f /= factor;
  return r;
}

// HF modeling_rope_utils._compute_dynamic_ntk_parameters. The length argument is HF's
// config.max_position_embeddings; L = max(seq_len, that length); at L <= it, base is unchanged.
inline RopeRef rope_dynamic(
    int head_dim, long double theta, double partial_rotary_factor, long double factor,
    long double original_max_position_embeddings /* max_position_embeddings in HF */,
    long double seq_len) {
  const int dim = detail::rotary_dim_of(head_dim, partial_rotary_factor);
  detail::require(dim > 2, "dynamic NTK needs rotary dim > 2 (exponent dim/(dim-2))");
  detail::require(original_max_position_embeddings > 0.0L, "max_position_embeddings must be > 0");
  const long double m = original_max_position_embeddings;
  const long double len = (seq_len > m) ? seq_len : m;
  const long double d = static_cast<long double>(dim);
  const long double base = theta * std::pow(factor * len / m - (factor - 1.0L), d / (d - 2.0L));
  return RopeRef{detail::base_inv_freq(dim, base), 1.0L, dim};
}

// HF modeling_rope_utils._compute_yarn_parameters (Peng et al. YaRN; jquesnelle/yarn).
// beta_fast / beta_slow: NaN or 0 mean "absent" -> 32 / 1 (HF uses `get(...) or default`).
// attention_factor: NaN = absent -> derived from mscale/mscale_all_dim/factor.
// mscale, mscale_all_dim: NaN or 0 = absent; the ratio form is used only if both are present.
// `factor` is the factor YaRN actually uses; how a config yields it (explicit key, or
// max_position_embeddings / original_max_position_embeddings) is version dependent, see doc.
inline RopeRef rope_yarn(int head_dim, long double theta, double partial_rotary_factor,
                         long double factor, long double original_max_position_embeddings,
                         long double beta_fast = 32.0L, long double beta_slow = 1.0L,
                         bool truncate = true, long double mscale = absent(),
                         long double mscale_all_dim = absent(),
                         long double attention_factor = absent()) {
  const int dim = detail::rotary_dim_of(head_dim, partial_rotary_factor);
  detail::require(factor > 0.0L, "yarn factor must be > 0");
  detail::require(original_max_position_embeddings > 0.0L,
                  "original_max_position_embeddings must be > 0");
  if (detail::is_absent(beta_fast) || detail::same(beta_fast, 0.0L)) beta_fast = 32.0L;
  if (detail::is_absent(beta_slow) || detail::same(beta_slow, 0.0L)) beta_slow = 1.0L;

  long double af = attention_factor;
  if (detail::is_absent(af)) {
    const bool have_m = !detail::is_absent(mscale) && !detail::same(mscale, 0.0L);
    const bool have_all = !detail::is_absent(mscale_all_dim) && !detail::same(mscale_all_dim, 0.0L);
    if (have_m && have_all) {
      af =
          detail::yarn_get_mscale(factor, mscale) / detail::yarn_get_mscale(factor, mscale_all_dim);
    } else {
      af = detail::yarn_get_mscale(factor);
    }
  }

  long double low =
      detail::yarn_correction_dim(beta_fast, dim, theta, original_max_position_embeddings);
  long double high =
      detail::yarn_correction_dim(beta_slow, dim, theta, original_max_position_embeddings);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  if (low < 0.0L) low = 0.0L;
  const long double top = static_cast<long double>(dim - 1);
  if (high > top) high = top;
  if (detail::same(low, high)) high += 0.001L;  // HF linear_ramp_factor singularity guard

  const std::vector<long double> extrapolation = detail::base_inv_freq(dim, theta);
  std::vector<long double> inv(extrapolation.size());
  for (std::size_t j = 0; j < inv.size(); ++j) {
    long double ramp = (static_cast<long double>(j) - low) / (high - low);
    if (ramp < 0.0L) ramp = 0.0L;
    if (ramp > 1.0L) ramp = 1.0L;
    const long double extrapolation_factor = 1.0L - ramp;
    const long double interpolation = extrapolation[j] / factor;
    inv[j] =
        interpolation * (1.0L - extrapolation_factor) + extrapolation[j] * extrapolation_factor;
  }
  return RopeRef{inv, af, dim};
}

// HF modeling_rope_utils._compute_longrope_parameters (Phi-3 LongRoPE / microsoft/LongRoPE).
// long_factor is used iff seq_len > original_max_position_embeddings, else short_factor.
// factor: NaN = absent -> max_position_embeddings / original_max_position_embeddings (the
// Phi-3 path); attention_factor: NaN = absent -> sqrt(1 + ln(factor)/ln(original_max)), or 1
// if factor <= 1. The attention factor does not depend on seq_len.
inline RopeRef rope_longrope(int head_dim, long double theta, double partial_rotary_factor,
                             const std::vector<long double>& short_factor,
                             const std::vector<long double>& long_factor,
                             long double original_max_position_embeddings,
                             long double max_position_embeddings, long double seq_len,
                             long double attention_factor = absent(),
                             long double factor = absent()) {
  const int dim = detail::rotary_dim_of(head_dim, partial_rotary_factor);
  const std::size_t half = static_cast<std::size_t>(dim / 2);
  detail::require(short_factor.size() == half && long_factor.size() == half,
                  "short_factor and long_factor must have rotary_dim/2 entries");
  detail::require(original_max_position_embeddings > 1.0L,
                  "original_max_position_embeddings must be > 1");
  long double f = factor;
  if (detail::is_absent(f)) f = max_position_embeddings / original_max_position_embeddings;
  long double af = attention_factor;
  if (detail::is_absent(af)) {
    af = (f <= 1.0L) ? 1.0L
                     : std::sqrt(1.0L + std::log(f) / std::log(original_max_position_embeddings));
  }
  const std::vector<long double>& ext =
      (seq_len > original_max_position_embeddings) ? long_factor : short_factor;
  std::vector<long double> inv = detail::base_inv_freq(dim, theta);
  for (std::size_t i = 0; i < half; ++i) inv[i] /= ext[i];
  return RopeRef{inv, af, dim};
}

// HF modeling_rope_utils._compute_llama3_parameters == Meta llama-models apply_scaling
// (Llama 3.1). Bands by wavelength 2*pi/inv_freq against original/high and original/low.
inline RopeRef rope_llama3(int head_dim, long double theta, double partial_rotary_factor,
                           long double factor, long double low_freq_factor,
                           long double high_freq_factor,
                           long double original_max_position_embeddings) {
  detail::require(factor > 0.0L, "llama3 factor must be > 0");
  detail::require(!detail::same(high_freq_factor, low_freq_factor),
                  "llama3 high_freq_factor must differ from low_freq_factor");
  RopeRef r = rope_default(head_dim, theta, partial_rotary_factor);
  const long double old_len = original_max_position_embeddings;
  const long double low_freq_wavelen = old_len / low_freq_factor;
  const long double high_freq_wavelen = old_len / high_freq_factor;
  for (long double& f : r.inv_freq) {
    const long double wavelen = 2.0L * detail::pi() / f;
    if (wavelen < high_freq_wavelen) {
      // high frequency: unchanged
    } else if (wavelen > low_freq_wavelen) {
      f = f / factor;
    } else {
      const long double smooth =
          (old_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      f = (1.0L - smooth) * f / factor + smooth * f;
    }
  }
  return r;
}

// ---- Applying RoPE to one head vector ---------------------------------------------------------

// HF modeling_llama.apply_rotary_pos_emb + rotate_half (GPT-NeoX layout): pair (i, i + rd/2),
// x[i] <- af*(x[i] cos - x[i+rd/2] sin), x[i+rd/2] <- af*(x[i+rd/2] cos + x[i] sin),
// angle = pos * inv_freq[i]; coordinates >= rotary_dim pass through unscaled.
inline void apply_rope_halfsplit(std::vector<long double>& x, const RopeRef& r, long double pos) {
  detail::check_rope(r, x.size());
  const std::size_t half = static_cast<std::size_t>(r.rotary_dim / 2);
  for (std::size_t i = 0; i < half; ++i) {
    detail::rotate_pair(x[i], x[i + half], pos * r.inv_freq[i], r.attention_factor);
  }
}

// HF modeling_gptj.apply_rotary_pos_emb + rotate_every_two / Meta llama apply_rotary_emb
// (complex pairs): pair (2i, 2i+1) rotated by pos * inv_freq[i], same signs and scaling as above.
inline void apply_rope_interleaved(std::vector<long double>& x, const RopeRef& r, long double pos) {
  detail::check_rope(r, x.size());
  const std::size_t half = static_cast<std::size_t>(r.rotary_dim / 2);
  for (std::size_t i = 0; i < half; ++i) {
    detail::rotate_pair(x[2 * i], x[2 * i + 1], pos * r.inv_freq[i], r.attention_factor);
  }
}

// Plain dot product (score = dot(encoded q, encoded k)).
inline long double dot(const std::vector<long double>& a, const std::vector<long double>& b) {
  detail::require(a.size() == b.size(), "dot: size mismatch");
  long double s = 0.0L;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---- ALiBi -----------------------------------------------------------------------------------

// ofirpress/attention_with_linear_biases fairseq get_slopes (== HF bloom build_alibi_tensor):
// n a power of two: m_k = 2^(-8k/n), k = 1..n; otherwise with c = 2^floor(log2 n): the c slopes
// of c, then the slopes 2^(-8k/(2c)) for odd k = 1, 3, 5, ... (n - c of them).
inline std::vector<long double> alibi_slopes(int n_heads) {
  detail::require(n_heads > 0, "alibi_slopes: n_heads must be positive");
  int c = 1;
  while (c * 2 <= n_heads) c *= 2;
  std::vector<long double> m;
  m.reserve(static_cast<std::size_t>(n_heads));
  for (int k = 1; k <= c; ++k) {
    m.push_back(std::exp2(-8.0L * static_cast<long double>(k) / static_cast<long double>(c)));
  }
  for (int j = 0; j < n_heads - c; ++j) {
    const int k = 2 * j + 1;
    m.push_back(std::exp2(-8.0L * static_cast<long double>(k) / static_cast<long double>(2 * c)));
  }
  return m;
}

// HF modeling_mpt.build_mpt_alibi_tensor (MPT gen_slopes). With alibi_bias_max = 8 it equals
// alibi_slopes(n_heads) for every n_heads; kept separate because MPT exposes alibi_bias_max.
inline std::vector<long double> alibi_slopes_mpt(int n_heads, long double alibi_bias_max = 8.0L) {
  detail::require(n_heads > 0, "alibi_slopes_mpt: n_heads must be positive");
  int p = 1;
  while (p < n_heads) p *= 2;
  std::vector<long double> all(static_cast<std::size_t>(p));
  for (int k = 1; k <= p; ++k) {
    all[static_cast<std::size_t>(k - 1)] =
        std::exp2(-static_cast<long double>(k) * (alibi_bias_max / static_cast<long double>(p)));
  }
  if (p == n_heads) return all;
  std::vector<long double> out;
  for (int i = 1; i < p; i += 2) out.push_back(all[static_cast<std::size_t>(i)]);
  for (int i = 0; i < p; i += 2) out.push_back(all[static_cast<std::size_t>(i)]);
  out.resize(static_cast<std::size_t>(n_heads));
  return out;
}

// Press et al. ALiBi bias added to the logit of query position t against key position s (s <= t
// in causal use): -m (t - s). Implementations add +m*s per key (softmax shift invariance).
inline long double alibi_bias(long double m, long double t, long double s) { return -m * (t - s); }

// ---- xPos (Sun et al., microsoft/torchscale) ---------------------------------------------------

// torchscale XPOS.__init__: zeta_i = (2i + 0.4 d) / (1.4 d), i = 0 .. d/2 - 1.
inline std::vector<long double> xpos_scale(int head_dim) {
  detail::require(head_dim >= 2 && head_dim % 2 == 0, "xpos: head_dim must be even and >= 2");
  const long double d = static_cast<long double>(head_dim);
  std::vector<long double> z(static_cast<std::size_t>(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) {
    z[static_cast<std::size_t>(i)] = (static_cast<long double>(2 * i) + 0.4L * d) / (1.4L * d);
  }
  return z;
}

// torchscale xpos_relative_position.fixed_pos_embedding: theta_i = 10000^(-i/(d/2)) =
// 10000^(-2i/d).
inline std::vector<long double> xpos_inv_freq(int head_dim) {
  detail::require(head_dim >= 2 && head_dim % 2 == 0, "xpos: head_dim must be even and >= 2");
  return detail::base_inv_freq(head_dim, 10000.0L);
}

// torchscale XPOS.forward centring: min_pos = -(L+offset)//2, so the scale exponent of the token
// at absolute position n is (n - ceil((L+offset)/2)) / scale_base. It cancels in q.k.
inline long double xpos_torchscale_center(long long length, long long offset) {
  return static_cast<long double>((length + offset + 1) / 2);
}

// torchscale XPOS.forward + apply_rotary_pos_emb + rotate_every_two (interleaved pairs (2i,2i+1)):
// x_pair <- zeta_i^(+-(pos - center)/scale_base) * R(pos * theta_i) x_pair, '+' for queries
// (downscale=False), '-' for keys (downscale=True). The whole head is rotated.
inline void apply_xpos(std::vector<long double>& x, long double pos, bool is_query,
                       long double scale_base = 512.0L, long double center = 0.0L) {
  detail::require(scale_base > 0.0L, "xpos: scale_base must be > 0");
  const int d = static_cast<int>(x.size());
  const std::vector<long double> zeta = xpos_scale(d);
  const std::vector<long double> theta = xpos_inv_freq(d);
  const long double e = (is_query ? 1.0L : -1.0L) * (pos - center) / scale_base;
  for (std::size_t i = 0; i < zeta.size(); ++i) {
    detail::rotate_pair(x[2 * i], x[2 * i + 1], pos * theta[i], std::pow(zeta[i], e));
  }
}

// ---- RetNet (Sun et al., microsoft/torchscale) ------------------------------------------------

// torchscale RetNetRelPos.__init__: decay = log(1 - 2^(-5 - h)); returns gamma_h = 1 - 2^(-5-h).
inline std::vector<long double> retnet_decay(int n_heads) {
  detail::require(n_heads > 0, "retnet_decay: n_heads must be positive");
  std::vector<long double> g(static_cast<std::size_t>(n_heads));
  for (int h = 0; h < n_heads; ++h) {
    g[static_cast<std::size_t>(h)] = 1.0L - std::exp2(-5.0L - static_cast<long double>(h));
  }
  return g;
}

// torchscale RetNetRelPos.__init__: angle = 1 / 10000^linspace(0, 1, d/2), one per interleaved
// pair (torchscale stores it duplicated, [a0, a0, a1, a1, ...]); note linspace includes 1.
inline std::vector<long double> retnet_angles(int head_dim) {
  detail::require(head_dim >= 2 && head_dim % 2 == 0, "retnet: head_dim must be even and >= 2");
  const int n = head_dim / 2;
  std::vector<long double> a(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const long double u =
        (n == 1) ? 0.0L : static_cast<long double>(i) / static_cast<long double>(n - 1);
    a[static_cast<std::size_t>(i)] = 1.0L / std::pow(10000.0L, u);
  }
  return a;
}

// RetNet rotation as a RopeRef for apply_rope_interleaved (torchscale theta_shift).
inline RopeRef retnet_rope(int head_dim) {
  return RopeRef{retnet_angles(head_dim), 1.0L, head_dim};
}

// torchscale MultiScaleRetention (parallel form, before the key_dim^-0.5 scaling and the row
// normalisation of the decay mask): gamma^(t-s) * <theta_shift(q, t), theta_shift(k, s)>.
inline long double retnet_score(const std::vector<long double>& q, long double t,
                                const std::vector<long double>& k, long double s,
                                long double gamma) {
  const RopeRef r = retnet_rope(static_cast<int>(q.size()));
  std::vector<long double> qe = q;
  std::vector<long double> ke = k;
  apply_rope_interleaved(qe, r, t);
  apply_rope_interleaved(ke, r, s);
  return std::pow(gamma, t - s) * dot(qe, ke);
}

}  // namespace peal_ref
