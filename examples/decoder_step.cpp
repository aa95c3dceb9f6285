// One decoder layer's attention, the way an inference engine runs a Llama-3.1-style model:
// prompt (prefill), a KV cache holding encoded keys, decode steps, and a context shift.
//
//   1. read the model's config.json (RoPE "llama3" scaling, theta 500000, grouped-query
//      attention: 4 query heads share each of 2 key/value heads, head_dim 64);
//   2. project the hidden states x to q, k, v (random weights, fixed seed);
//   3. encode the new keys with the RoPE preset at their positions, in place;
//   4. append k (encoded: G(s) k) and v to the cache, run peal::attention with
//      keys_encoded = true: causal over the prompt, then one query per decode step; and
//      the same with the queries encoded in place too (encode_queries) and plain dot products;
//   5. context shift: drop the oldest tokens, move the rest to positions 0, 1, ... with
//      peal::shift_keys (no raw keys needed), check it equals re-encoding, decode again.
// Every attention output is checked against the textbook formula evaluated pair by pair in
// double, softmax_j(scale q_i^T A(t_i - s_j) k_j) v_j from the RAW q and k; the example
// exits nonzero if the largest error exceeds the stated tolerance.
//
// The output projection, the MLP and the other layers are not shown: they do not involve
// positions.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <peal/attention.hpp>
#include <peal/encode.hpp>
#include <peal/models/hf_config.hpp>
#include <peal/peal.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// A small Llama 3.1 configuration (the real 8B model: hidden 4096, 32 / 8 heads, head_dim 128).
const char* kConfig = R"({
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 256,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "head_dim": 64,
  "max_position_embeddings": 131072,
  "rope_theta": 500000.0,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  }
})";

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using peal::Index;

struct Model {
  int hidden, Hq, Hk, d;
  RowMat Wq, Wk, Wv;  // [Hq*d, hidden], [Hk*d, hidden], [Hk*d, hidden]
};

RowMat random_matrix(Index rows, Index cols, float sigma, std::mt19937& rng) {
  std::normal_distribution<float> N(0.0f, sigma);
  RowMat m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = N(rng);
  return m;
}

// The KV cache of one layer: keys stored ENCODED (G(s) k, what engines keep for RoPE),
// values as they are, [capacity, Hk, d] each. raw_k keeps the unencoded keys only so that
// the example can check every result against the textbook formula; an engine has no such copy.
struct KvCache {
  Index len = 0, Hk, d;
  std::vector<float> k, v, raw_k;
  std::vector<double> pos;  // the position of each cached token
  KvCache(Index capacity, Index Hk_, Index d_)
      : Hk(Hk_), d(d_), k(std::size_t(capacity * Hk_ * d_)), v(k.size()), raw_k(k.size()) {}
  float* key(Index i) { return k.data() + i * Hk * d; }
  float* value(Index i) { return v.data() + i * Hk * d; }
  float* raw_key(Index i) { return raw_k.data() + i * Hk * d; }
};

// out[i, h, :] = softmax_j(scale q_i^T A(t_i - s_j) k_j) v_j over the visible keys (s_j <= t_i),
// pair by pair in double from the raw q (queries [nq, Hq, d]) and the raw cached keys.
template <class Rope>
std::vector<double> naive_attention(const Rope& rope, const std::vector<float>& q_raw, Index nq,
                                    const std::vector<double>& tq, KvCache& c, int Hq,
                                    double scale) {
  const Index d = c.d, G = Hq / c.Hk;
  std::vector<double> out(std::size_t(nq * Hq * d), 0.0), logit(std::size_t(c.len));
  for (Index i = 0; i < nq; ++i)
    for (Index h = 0; h < Hq; ++h) {
      const Eigen::VectorXd qv =
          Eigen::Map<const Eigen::VectorXf>(q_raw.data() + (i * Hq + h) * d, d).cast<double>();
      double mx = -std::numeric_limits<double>::infinity(), sum = 0;
      for (Index j = 0; j < c.len; ++j) {
        logit[std::size_t(j)] = -std::numeric_limits<double>::infinity();
        if (c.pos[std::size_t(j)] > tq[std::size_t(i)]) continue;  // causal
        const Eigen::VectorXd kv =
            Eigen::Map<const Eigen::VectorXf>(c.raw_key(j) + (h / G) * d, d).cast<double>();
        logit[std::size_t(j)] =
            scale * rope.score(qv, tq[std::size_t(i)], kv, c.pos[std::size_t(j)]);
        mx = std::max(mx, logit[std::size_t(j)]);
      }
      double* o = out.data() + (i * Hq + h) * d;
      for (Index j = 0; j < c.len; ++j) {
        if (c.pos[std::size_t(j)] > tq[std::size_t(i)]) continue;
        const double w = std::exp(logit[std::size_t(j)] - mx);
        sum += w;
        const float* vj = c.value(j) + (h / G) * d;
        for (Index e = 0; e < d; ++e) o[e] += w * vj[e];
      }
      for (Index e = 0; e < d; ++e) o[e] /= sum;
    }
  return out;
}

double max_error(const std::vector<float>& got, const std::vector<double>& want) {
  double m = 0;
  for (std::size_t i = 0; i < got.size(); ++i) m = std::max(m, std::abs(got[i] - want[i]));
  return m;
}

}  // namespace

int main() {
  try {
    // ---- 1. The model's config.json (written to a temporary file, read back like a
    // downloaded checkpoint's). peal reads the RoPE part; the head counts are read here.
    const auto path = std::filesystem::temp_directory_path() / "peal_decoder_step_config.json";
    std::ofstream(path) << kConfig;
    const peal::RopeConfig rc = peal::rope_config_from_hf_file(path.string());
    nlohmann::json j;
    std::ifstream(path) >> j;
    std::filesystem::remove(path);
    const int hidden = j["hidden_size"], Hq = j["num_attention_heads"];
    const int Hk = j["num_key_value_heads"], d = rc.head_dim;
    // max_position_embeddings is only a default for seq_len-dependent types; llama3 ignores it.
    const auto rope = peal::rope<double>(rc);
    std::printf(
        "config: hidden %d, %d query heads over %d KV heads (GQA groups of %d), head_dim "
        "%d, rope %s, theta %g, attention factor %g\n",
        hidden, Hq, Hk, Hq / Hk, d, peal::to_string(rope.type()), rc.rope_theta,
        double(rope.attention_factor()));

    // ---- 2. Weights (fixed seed; scaled so that q and k entries are ~N(0, 1)).
    std::mt19937 rng(2026);
    const float w_sigma = 1.0f / std::sqrt(float(hidden));
    const Model M{hidden,
                  Hq,
                  Hk,
                  d,
                  random_matrix(Hq * d, hidden, w_sigma, rng),
                  random_matrix(Hk * d, hidden, w_sigma, rng),
                  random_matrix(Hk * d, hidden, w_sigma, rng)};
    // The softmax scale 1/sqrt(head_dim). llama3 has attention factor 1; YaRN and LongRoPE
    // also scale the rotary part of q and k (peal::scale_rotary, see load_config.cpp).
    const double scale = 1.0 / std::sqrt(double(d));
    if (rope.attention_factor_long() != 1.0L) throw std::runtime_error("expected factor 1");

    // Tolerance on outputs (|out| <~ 1): the kernel works in float. A logit's rounding error is
    // ~ sqrt(d) eps scale |q||k| ~ 8 * 1.2e-7 * 64 / 8 ~ 8e-6 in the worst direction, and the
    // outputs average it out; 1e-5 (~80 float eps) is well above what rounding gives (a few
    // 1e-7) and far below what a wrong encoding gives (~1e-1, shown after the prefill).
    const double tol = 1e-5;
    double worst = 0, wrong = 0;

    const Index prompt = 12, steps = 3, drop = 4;
    KvCache cache(prompt + steps + 1, Hk, d);

    // Projection of T tokens of hidden states x [T, hidden] into raw q, k, v, laid out
    // [T, heads, head_dim] (a row-major [T, heads*head_dim] matrix is exactly that).
    auto project = [&](const RowMat& x, std::vector<float>& q, std::vector<float>& k,
                       std::vector<float>& v) {
      const Index T = x.rows();
      q.resize(std::size_t(T * Hq * d));
      k.resize(std::size_t(T * Hk * d));
      v.resize(k.size());
      Eigen::Map<RowMat>(q.data(), T, Hq * d).noalias() = x * M.Wq.transpose();
      Eigen::Map<RowMat>(k.data(), T, Hk * d).noalias() = x * M.Wk.transpose();
      Eigen::Map<RowMat>(v.data(), T, Hk * d).noalias() = x * M.Wv.transpose();
    };

    // One forward pass of the layer's attention over T new tokens at positions t.
    auto forward = [&](const RowMat& x, const std::vector<double>& t, const char* what) {
      const Index T = x.rows();
      std::vector<float> q, k, v;
      project(x, q, k, v);
      const std::vector<float> q_raw = q, k_raw = k;
      // 3. Encode the new keys in place, k <- G(s) k = A(-s) k: the cache keeps them so and
      // never touches them again (until a context shift).
      peal::encode_keys(rope, peal::make_view(k.data(), T, Hk, d), peal::Positions(t));
      // 4. Append to the cache: encoded keys, values, positions.
      for (Index i = 0; i < T; ++i) {
        const Index c = cache.len + i;
        std::copy_n(k.data() + i * Hk * d, Hk * d, cache.key(c));
        std::copy_n(v.data() + i * Hk * d, Hk * d, cache.value(c));
        std::copy_n(k_raw.data() + i * Hk * d, Hk * d, cache.raw_key(c));
        cache.pos.push_back(t[std::size_t(i)]);
      }
      cache.len += T;
      const auto keys = peal::make_view<const float>(cache.key(0), cache.len, Hk, d);
      const auto values = peal::make_view<const float>(cache.value(0), cache.len, Hk, d);
      // Attention of the new queries over the whole cache. Causal: each prompt token sees the
      // keys at positions <= its own (a decode step sees the whole cache). keys_encoded: the
      // cache holds G(s) k, so peal::attention encodes the raw queries with F(t) = A(t)^T
      // itself and takes plain dot products (no rebasing of keys).
      peal::AttentionOptions opt;
      opt.causal = true;
      opt.keys_encoded = true;
      opt.scale = scale;
      std::vector<float> out(std::size_t(T * Hq * d)), out2(out.size());
      peal::attention(rope, peal::make_view<const float>(q_raw.data(), T, Hq, d),
                      peal::Positions(t), keys, peal::Positions(cache.pos), values,
                      peal::make_view(out.data(), T, Hq, d), opt);
      // The same with the queries encoded in place by the caller, q <- F(t) q (what an engine
      // with its own attention kernel does): the scores are then plain dot products q~ . k~,
      // an identity encoding (PassThrough); the positions only serve the causal mask.
      peal::encode_queries(rope, peal::make_view(q.data(), T, Hq, d), peal::Positions(t));
      opt.keys_encoded = false;
      peal::attention(peal::PassThrough<double>(d),
                      peal::make_view<const float>(q.data(), T, Hq, d), peal::Positions(t), keys,
                      peal::Positions(cache.pos), values, peal::make_view(out2.data(), T, Hq, d),
                      opt);
      const std::vector<double> want = naive_attention(rope, q_raw, T, t, cache, Hq, scale);
      const double err = std::max(max_error(out, want), max_error(out2, want));
      worst = std::max(worst, err);
      std::printf("%-24s %2td queries x %2td cached keys: max |out - naive| = %.2e\n", what, T,
                  cache.len, err);
      if (T > 1) {
        // What the check catches: the same cache read as RAW keys (keys_encoded forgotten)
        // scores q^T A(t - s) G(s) k = q^T A(t - 2s) k, as if each key sat at twice its
        // position: the outputs are wrong.
        opt.keys_encoded = false;
        peal::attention(rope, peal::make_view<const float>(q_raw.data(), T, Hq, d),
                        peal::Positions(t), keys, peal::Positions(cache.pos), values,
                        peal::make_view(out2.data(), T, Hq, d), opt);
        wrong = max_error(out2, want);
        std::printf("  (the same cache read with keys_encoded forgotten: max error %.2e)\n", wrong);
      }
    };

    std::normal_distribution<float> N;
    auto hidden_states = [&](Index T) {
      RowMat x(T, hidden);
      for (Index i = 0; i < x.size(); ++i) x.data()[i] = N(rng);
      return x;
    };

    // Prefill: the prompt at positions 0 .. prompt-1, causal.
    std::vector<double> t(static_cast<std::size_t>(prompt));
    for (Index i = 0; i < prompt; ++i) t[std::size_t(i)] = double(i);
    forward(hidden_states(prompt), t, "prefill (causal)");

    // Decode: one new token per step at the next position.
    for (Index s = 0; s < steps; ++s) {
      const double ts = double(cache.len);
      forward(hidden_states(1), {ts}, ("decode step " + std::to_string(s + 1)).c_str());
    }

    // ---- 5. Context shift (what llama.cpp does when the context is full): drop the oldest
    // `drop` tokens, move the others down, and re-position them 0, 1, ... by rotating the
    // cached keys: G(s) k -> G(s - drop) k = A(drop) G(s) k, one factor for every key.
    const Index kept = cache.len - drop;
    std::copy(cache.key(drop), cache.key(cache.len), cache.key(0));
    std::copy(cache.value(drop), cache.value(cache.len), cache.value(0));
    std::copy(cache.raw_key(drop), cache.raw_key(cache.len), cache.raw_key(0));
    cache.len = kept;
    cache.pos.assign(std::size_t(kept), 0.0);
    for (Index i = 0; i < kept; ++i) cache.pos[std::size_t(i)] = double(i);
    peal::shift_keys(rope, peal::make_view(cache.key(0), kept, Hk, d), -double(drop));
    // The shifted keys equal the raw keys encoded at the new positions (float rounding:
    // two rotations of a pair of size |k| ~ sqrt(2) each give ~ 4 eps |k|; 16 eps max|k|).
    std::vector<float> re(cache.raw_k.begin(), cache.raw_k.begin() + kept * Hk * d);
    peal::encode_keys(rope, peal::make_view(re.data(), kept, Hk, d), peal::Positions(cache.pos));
    double shift_err = 0, kmax = 0;
    for (std::size_t i = 0; i < re.size(); ++i) {
      shift_err = std::max(shift_err, double(std::abs(re[i] - cache.k[i])));
      kmax = std::max(kmax, double(std::abs(re[i])));
    }
    const double shift_tol = 16 * std::numeric_limits<float>::epsilon() * kmax;
    std::printf(
        "context shift: dropped %td tokens, %td kept at positions 0..%td: max |shifted - "
        "re-encoded| = %.2e (tolerance %.2e)\n",
        drop, kept, kept - 1, shift_err, shift_tol);
    forward(hidden_states(1), {double(kept)}, "decode after the shift");

    std::printf("max error %.2e (tolerance %.1e)\n", worst, tol);
    if (!(worst <= tol) || !(shift_err <= shift_tol) || !(wrong > tol)) {
      std::fprintf(stderr, "decoder_step: error above tolerance\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decoder_step: %s\n", e.what());
    return 1;
  }
}
