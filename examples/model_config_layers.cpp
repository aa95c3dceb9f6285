// From config.json to each layer's attention, as an engine author wires it (docs/models.md):
//
//   1. Gemma 3: sliding layers use rope_local_base_freq unscaled, every 6th layer is global
//      with rope_theta and the linear rope_scaling; the softmax scale is
//      query_pre_attn_scalar^-1/2. peal::attention on a sliding (0) and the global (5) layer.
//   2. DeepSeek-V3 MLA: a 24-coordinate q/k head, 16 unrotated + 8 rotated (interleaved), the
//      rotated key k_pe shared by all heads. Attention non-absorbed (full per-head keys) and
//      absorbed (W_UK folded into q: one-KV-head attention over [latent, encoded k_pe]).
//
// Everything is checked against the textbook formula in long double, rotating with
// peal::rope_frequencies; the example exits non-zero if a check fails.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <nlohmann/json.hpp>
#include <peal/attention.hpp>
#include <peal/encode.hpp>
#include <peal/models/hf_config.hpp>
#include <peal/models/model_positions.hpp>
#include <peal/positions.hpp>
#include <peal/presets/rope.hpp>
#include <peal/view.hpp>
#include <random>
#include <string>
#include <vector>

namespace {

using peal::Index;
using Z = std::size_t;
using LD = long double;
using Vec = std::vector<double>;

const char* kGemma3 = R"({
  "model_type": "gemma3_text", "hidden_size": 256, "num_attention_heads": 2,
  "num_key_value_heads": 1, "head_dim": 32, "num_hidden_layers": 6, "sliding_window": 8,
  "query_pre_attn_scalar": 32, "rope_scaling": {"rope_type": "linear", "factor": 8.0}
})";

const char* kDeepSeekV3 = R"({
  "model_type": "deepseek_v3", "hidden_size": 512, "num_attention_heads": 2,
  "num_hidden_layers": 2, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
  "kv_lora_rank": 32, "q_lora_rank": 64, "max_position_embeddings": 4096, "rope_theta": 10000,
  "rope_scaling": {"type": "yarn", "factor": 4, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 1024}
})";

constexpr Z kTokens = 24;  // positions 0 .. 23
int g_failed = 0;

void check(const char* what, double value, double bound, bool below = true) {
  const bool ok = below ? value < bound : value > bound;
  std::printf("  %-58s %.3g (%s %.0e) %s\n", what, value, below ? "<" : ">", bound,
              ok ? "ok" : "FAILED");
  if (!ok) ++g_failed;
}

Vec randn(Z n, std::mt19937& rng) {
  std::normal_distribution<double> N(0.0, 1.0);
  Vec v(n);
  for (double& x : v) x = N(rng);
  return v;
}

// q [n, Hq, dqk], k [n, Hk, dqk], v [n, Hk, dv], dense; query head h reads key head h / (Hq/Hk).
struct Shape {
  Z n, Hq, Hk, dqk, dv;
};

// HF's rotation of coordinates [off, off + D) at position t (rope.hpp header): pair i is
// (i, i + D/2) half-split or (2i, 2i + 1) interleaved; x0' = x0 cos - x1 sin,
// x1' = x0 sin + x1 cos, cos and sin times RoPE's attention factor.
void rotate(LD* x, Z off, const peal::RopeFrequencies& f, peal::Layout layout, LD t) {
  const Z half = Z(f.rotary_dim / 2);
  const bool il = layout == peal::Layout::Interleaved;
  for (Z i = 0; i < half; ++i) {
    const Z a = off + (il ? 2 * i : i), b = il ? a + 1 : a + half;
    const LD c = f.attention_factor * std::cos(f.inv_freq[i] * t);
    const LD s = f.attention_factor * std::sin(f.inv_freq[i] * t);
    const LD x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
}

// softmax_j(scale q'_i . k'_j) v_j over i - window < j <= i (transformers' sliding window).
std::vector<LD> naive_attention(const Shape& s, const Vec& q, const Vec& k, const Vec& v,
                                const peal::LayerPositions& L, Z window) {
  const peal::RopeFrequencies f = peal::rope_frequencies(L.rope, double(s.n));
  const Z off = Z(L.rotary_offset);
  std::vector<LD> qr(q.begin(), q.end()), kr(k.begin(), k.end());
  for (Z t = 0; t < s.n; ++t) {
    for (Z h = 0; h < s.Hq; ++h) rotate(&qr[(t * s.Hq + h) * s.dqk], off, f, L.rope.layout, t);
    for (Z h = 0; h < s.Hk; ++h) rotate(&kr[(t * s.Hk + h) * s.dqk], off, f, L.rope.layout, t);
  }
  std::vector<LD> out(s.n * s.Hq * s.dv, 0.0L), p(s.n);
  for (Z i = 0; i < s.n; ++i)
    for (Z h = 0; h < s.Hq; ++h) {
      const Z hk = h / (s.Hq / s.Hk), j0 = i + 1 > window ? i + 1 - window : 0;
      LD mx = -std::numeric_limits<LD>::infinity(), sum = 0;
      for (Z j = j0; j <= i; ++j) {
        LD dot = 0;
        for (Z e = 0; e < s.dqk; ++e)
          dot += qr[(i * s.Hq + h) * s.dqk + e] * kr[(j * s.Hk + hk) * s.dqk + e];
        p[j] = LD(L.softmax_scale) * dot;
        mx = std::max(mx, p[j]);
      }
      LD* o = &out[(i * s.Hq + h) * s.dv];
      for (Z j = j0; j <= i; ++j) {
        const LD w = std::exp(p[j] - mx);
        sum += w;
        for (Z e = 0; e < s.dv; ++e) o[e] += w * v[(j * s.Hk + hk) * s.dv + e];
      }
      for (Z e = 0; e < s.dv; ++e) o[e] /= sum;
    }
  return out;
}

double max_err(const Vec& a, const std::vector<LD>& b) {
  LD m = 0;
  for (Z i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(LD(a[i]) - b[i]));
  return double(m);
}

constexpr Z kNoWindow = std::numeric_limits<Z>::max();
Z window_of(const peal::LayerPositions& L) {
  return L.attention == peal::LayerAttention::Sliding ? Z(*L.sliding_window) : kNoWindow;
}

// peal::attention, causal. Its window masks t_i - s_j >= W, i.e. keys i - W < j <= i are
// visible: transformers' convention, so W = sliding_window as it is.
template <class E>
Vec peal_attention(const E& enc, const Shape& s, const Vec& q, const Vec& k, const Vec& v,
                   double scale, Z window) {
  peal::AttentionOptions o;
  o.scale = scale;
  o.causal = true;
  if (window != kNoWindow) o.window = double(window);
  Vec out(s.n * s.Hq * s.dv);
  const auto pos = peal::Positions::sequence(0.0);
  const Index n = Index(s.n), Hq = Index(s.Hq), Hk = Index(s.Hk);
  peal::attention(enc, peal::TensorView<const double>(q.data(), n, Hq, Index(s.dqk)), pos,
                  peal::TensorView<const double>(k.data(), n, Hk, Index(s.dqk)), pos,
                  peal::TensorView<const double>(v.data(), n, Hk, Index(s.dv)),
                  peal::TensorView<double>(out.data(), n, Hq, Index(s.dv)), o);
  return out;
}

void print_layers(const peal::ModelPositions& m) {
  for (const std::string& line : peal::describe_layers(m)) std::printf("  %s\n", line.c_str());
}

void gemma3() {
  std::printf("Gemma 3 (gemma3_text, sliding_window 8, pattern 6):\n");
  const peal::ModelPositions m = peal::model_positions_from_hf(nlohmann::json::parse(kGemma3));
  print_layers(m);
  const peal::LayerPositions &local = m.layers[0], &global = m.layers[5];
  if (local.attention != peal::LayerAttention::Sliding ||
      global.attention != peal::LayerAttention::Full)
    ++g_failed, std::printf("  FAILED: expected layer 0 sliding, layer 5 full\n");
  check("softmax scale - query_pre_attn_scalar^-1/2",
        std::fabs(local.softmax_scale - 1.0 / std::sqrt(32.0)), 1e-15);

  std::mt19937 rng(3);
  const Shape s{kTokens, 2, 1, 32, 32};  // 2 query heads share 1 KV head
  const Vec q = randn(s.n * s.Hq * s.dqk, rng), k = randn(s.n * s.Hk * s.dqk, rng),
            v = randn(s.n * s.Hk * s.dv, rng);
  for (const peal::LayerPositions* L : {&local, &global}) {
    const Vec out =
        peal_attention(peal::rope_head<double>(*L), s, q, k, v, L->softmax_scale, window_of(*L));
    check(L == &local ? "layer 0 (sliding, theta 1e4): |peal - naive|"
                      : "layer 5 (global, theta 1e6 linear x8): |peal - naive|",
          max_err(out, naive_attention(s, q, k, v, *L, window_of(*L))), 1e-10);
  }
  // The check can fail: the global layer's frequencies on the sliding layer.
  const Vec wrong = peal_attention(peal::rope_head<double>(global), s, q, k, v, local.softmax_scale,
                                   window_of(local));
  check("global encoding on layer 0: |peal - naive| (must differ)",
        max_err(wrong, naive_attention(s, q, k, v, local, window_of(local))), 1e-3, false);
}

// One MLA layer: the latent cache c [n, r], head h's up-projections W_UK[h] [nope, r] and
// W_UV[h] [dv, r] (k_nope_h = W_UK[h] c, v_h = W_UV[h] c), q [n, H, nope + rope] and the
// rotated key k_pe [n, rope], one head shared by all heads.
struct Mla {
  Z n, H, nope, rope, dv, r;
  Vec c, wuk, wuv, q, kpe;
  Z d() const { return nope + rope; }
};

// Per-head keys [W_UK[h] c_j, k_pe_j] (k_pe repeated) and values W_UV[h] c_j: the
// non-absorbed layout.
void expand_kv(const Mla& M, Vec& k, Vec& v) {
  k.assign(M.n * M.H * M.d(), 0.0);
  v.assign(M.n * M.H * M.dv, 0.0);
  for (Z j = 0; j < M.n; ++j)
    for (Z h = 0; h < M.H; ++h) {
      double *kj = &k[(j * M.H + h) * M.d()], *vj = &v[(j * M.H + h) * M.dv];
      for (Z a = 0; a < M.r; ++a) {
        for (Z e = 0; e < M.nope; ++e)
          kj[e] += M.wuk[(h * M.nope + e) * M.r + a] * M.c[j * M.r + a];
        for (Z e = 0; e < M.dv; ++e) vj[e] += M.wuv[(h * M.dv + e) * M.r + a] * M.c[j * M.r + a];
      }
      std::copy_n(&M.kpe[j * M.rope], M.rope, kj + M.nope);
    }
}

// Absorbed MLA, as engines run it: multi-query attention with ONE KV head of r + rope
// coordinates, keys [c_j, G(s_j) k_pe_j] (k_pe encoded once per token at insertion),
// queries [W_UK^T q_nope, F(t_i) q_pe], values c_j, W_UV after the sum. Everything positional
// is already in the vectors, so the attention's own encoding is the identity.
Vec mla_absorbed(const Mla& M, const peal::LayerPositions& L) {
  const auto rope = peal::rope<double>(L.rope);
  const auto pos = peal::Positions::sequence(0.0);
  const Z da = M.r + M.rope;
  const Index n = Index(M.n), H = Index(M.H), dr = Index(M.rope), d = Index(M.d()), ia = Index(da);
  Vec qa(M.n * M.H * da), ka(M.n * da), out(M.n * M.H * M.dv);
  peal::encode_queries(  // the last 8 coordinates of each q head, strided views both sides
      rope, peal::TensorView<const double>(M.q.data() + M.nope, n, H, dr, {H * d, d, 1}),
      peal::TensorView<double>(qa.data() + M.r, n, H, dr, {H * ia, ia, 1}), pos);
  peal::encode_keys(rope, peal::TensorView<const double>(M.kpe.data(), n, 1, dr),
                    peal::TensorView<double>(ka.data() + M.r, n, 1, dr, {ia, ia, 1}), pos);
  for (Z j = 0; j < M.n; ++j) std::copy_n(&M.c[j * M.r], M.r, &ka[j * da]);
  for (Z i = 0; i < M.n; ++i)
    for (Z h = 0; h < M.H; ++h)
      for (Z a = 0; a < M.r; ++a)
        for (Z e = 0; e < M.nope; ++e)
          qa[(i * M.H + h) * da + a] +=
              M.wuk[(h * M.nope + e) * M.r + a] * M.q[(i * M.H + h) * M.d() + e];
  const Vec lat = peal_attention(peal::PassThrough<double>(int(da)), {M.n, M.H, 1, da, M.r}, qa, ka,
                                 M.c, L.softmax_scale, kNoWindow);
  for (Z i = 0; i < M.n; ++i)
    for (Z h = 0; h < M.H; ++h)
      for (Z e = 0; e < M.dv; ++e)
        for (Z a = 0; a < M.r; ++a)
          out[(i * M.H + h) * M.dv + e] +=
              M.wuv[(h * M.dv + e) * M.r + a] * lat[(i * M.H + h) * M.r + a];
  return out;
}

void deepseek_v3() {
  std::printf("DeepSeek-V3 MLA (qk 16 nope + 8 rope, v 16, kv_lora_rank 32, YaRN x4):\n");
  const peal::ModelPositions m = peal::model_positions_from_hf(nlohmann::json::parse(kDeepSeekV3));
  print_layers(m);
  const peal::LayerPositions& L = m.layers[0];
  if (L.qk_head_dim != 24 || L.rotary_offset != 16 || L.rope.head_dim != 8 || L.v_head_dim != 16 ||
      L.rope.layout != peal::Layout::Interleaved || m.kv_lora_rank != 32)
    ++g_failed, std::printf("  FAILED: unexpected MLA head layout\n");
  const double ms = 0.1 * std::log(4.0) + 1.0, want = ms * ms / std::sqrt(24.0);  // factor 4
  check("softmax scale - 24^-1/2 mscale^2", std::fabs(L.softmax_scale - want), 1e-15);
  // peal::attention leaves RoPE's attention factor to the caller (scale_rotary); here it is 1.
  std::printf("  RoPE attention factor %.17g\n",
              double(peal::rope_frequencies(L.rope).attention_factor));

  std::mt19937 rng(7);
  const Z n = kTokens, H = 2, r = Z(m.kv_lora_rank);
  Mla M{n, H, 16, 8, 16, r, randn(n * r, rng), {}, {}, {}, {}};
  M.wuk = randn(H * 16 * r, rng), M.wuv = randn(H * 16 * r, rng);
  M.q = randn(n * H * 24, rng), M.kpe = randn(n * 8, rng);
  for (double& w : M.wuk) w /= std::sqrt(double(r));  // keep the logits O(1)
  Vec k, v;
  expand_kv(M, k, v);
  const Shape s{M.n, M.H, M.H, M.d(), M.dv};
  const std::vector<LD> ref = naive_attention(s, M.q, k, v, L, window_of(L));
  const Vec out =
      peal_attention(peal::rope_head<double>(L), s, M.q, k, v, L.softmax_scale, window_of(L));
  check("non-absorbed, attention(rope_head): |peal - naive|", max_err(out, ref), 1e-10);
  check("absorbed (MQA over the latent, encoded k_pe): |peal - naive|",
        max_err(mla_absorbed(M, L), ref), 1e-10);
}

}  // namespace

int main() {
  try {
    gemma3();
    deepseek_v3();
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
  std::printf(g_failed ? "%d check(s) FAILED\n" : "all checks passed\n", g_failed);
  return g_failed ? 1 : 0;
}
