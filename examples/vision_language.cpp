// A Qwen2-VL-style attention layer over a prompt with one image (docs/positions-nd.md):
//
//   1. the (t, h, w) position ids of "<6 text tokens><|vision_start|><image><|vision_end|>
//      <5 text tokens>" with a 1 x 8 x 12 patch grid (spatial_merge_size 2: 4 x 6 = 24 image
//      tokens), exactly as transformers' get_rope_index (peal::QwenVlPositionBuilder), and the
//      rope_delta that decoding continues from;
//   2. M-RoPE of a Qwen2-VL head (head_dim 128, theta 1e6, mrope_section [16, 24, 24]) from
//      its config keys (peal::mrope);
//   3. causal softmax attention over the prompt with the fused kernels (peal::attention over
//      N-D points: q and k encoded once, never the n x n matrix), 4 query heads sharing 2 key
//      heads, then one decode step at t = h = w = n + rope_delta;
//   4. every output checked against the naive formula in long double: softmax over j <= i of
//      q_i^T A(p_i - p_j) k_j / sqrt(d), with A from the per-token reference score.
// Exits non-zero if an error exceeds the tolerance stated below.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <peal/peal.hpp>  // mrope.hpp, qwen_vl_positions.hpp, scores_nd.hpp
#include <random>
#include <vector>

namespace {

using peal::Index;
using LD = long double;
constexpr Index Hq = 4, Hk = 2, d = 128;

// Tolerance on an output element relative to max |v|: each logit is a 128-term float dot
// product of rotated rows (~(d + 16) 2^-23 ≈ 2e-5 relative to |q||k|/sqrt(d) ≈ 1 here), and
// softmax is 1-Lipschitz in the logits' max norm: 1e-4 leaves a factor ~5.
constexpr double kTol = 1e-4;

std::vector<float> random_rows(Index n, Index H, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(std::size_t(n * H * d));
  for (auto& v : x) v = u(g);
  return x;
}

peal::Vector<LD> row(const std::vector<float>& x, Index i, Index H, Index h) {
  peal::Vector<LD> r(d);
  for (Index e = 0; e < d; ++e) r(e) = x[std::size_t((i * H + h) * d + e)];
  return r;
}

// Naive causal attention of query rows (at points pq) over keys (at points pk), long double.
double max_error(const peal::MRopeEncoding<long double>& el, const std::vector<float>& q,
                 const std::vector<double>& pq, const std::vector<float>& k,
                 const std::vector<float>& v, const std::vector<double>& pk,
                 const std::vector<float>& out) {
  const Index nq = Index(pq.size() / 3), nk = Index(pk.size() / 3);
  double worst = 0;
  for (Index h = 0; h < Hq; ++h)
    for (Index i = 0; i < nq; ++i) {
      const std::vector<double> p(pq.begin() + 3 * i, pq.begin() + 3 * i + 3);
      std::vector<LD> logit;
      for (Index j = 0; j <= nk - nq + i; ++j) {
        const std::vector<double> s(pk.begin() + 3 * j, pk.begin() + 3 * j + 3);
        logit.push_back(el.score(row(q, i, Hq, h), p, row(k, j, Hk, h / 2), s) / std::sqrt(LD(d)));
      }
      const LD mx = *std::max_element(logit.begin(), logit.end());
      LD l = 0;
      std::vector<LD> acc(std::size_t(d), 0);
      for (std::size_t j = 0; j < logit.size(); ++j) {
        const LD w = std::exp(logit[j] - mx);
        l += w;
        const auto vj = row(v, Index(j), Hk, h / 2);
        for (Index e = 0; e < d; ++e) acc[std::size_t(e)] += w * vj(e);
      }
      for (Index e = 0; e < d; ++e)
        worst = std::max(worst, double(std::fabs(acc[std::size_t(e)] / l -
                                                 out[std::size_t((i * Hq + h) * d + e)])));
    }
  return worst;
}

}  // namespace

int main() {
  try {
    // 1. Position ids (Qwen2-VL, merge 2): text, then the image block, then text.
    peal::QwenVlPositionBuilder prompt;
    prompt.text(7).image({1, 8, 12}).text(6);  // the 7th text token is <|vision_start|>
    const peal::QwenVlPositions ids = prompt.positions();
    const Index n = ids.tokens();
    std::printf("prompt: %lld tokens, rope_delta %lld; image token 0 at (t, h, w) = (%g, %g, %g), "
                "last at (%g, %g, %g)\n",
                (long long)n, ids.rope_delta, ids(7, 0), ids(7, 1), ids(7, 2), ids(30, 0),
                ids(30, 1), ids(30, 2));

    // 2. M-RoPE from Qwen2-VL's config keys.
    peal::RopeConfig cfg;
    cfg.head_dim = int(d);
    cfg.rope_theta = 1e6;
    cfg.scaling.mrope_section = {16, 24, 24};
    const auto enc = peal::mrope<float>(cfg);
    const auto ref = peal::mrope<long double>(cfg);

    // 3. Prefill: causal attention over the prompt.
    const auto q = random_rows(n, Hq, 1), k = random_rows(n, Hk, 2), v = random_rows(n, Hk, 3);
    std::vector<float> out(std::size_t(n * Hq * d));
    const peal::PositionsND P(ids.ids, 3);
    peal::AttentionOptions opt;
    opt.causal = true;
    peal::attention(enc, peal::TensorView<const float>(q.data(), n, Hq, d), P,
                    peal::TensorView<const float>(k.data(), n, Hk, d), P,
                    peal::TensorView<const float>(v.data(), n, Hk, d),
                    peal::TensorView<float>(out.data(), n, Hq, d), opt);
    const double e1 = max_error(ref, q, ids.ids, k, v, ids.ids, out);
    std::printf("prefill: max |out - naive| = %.2e (tolerance %.0e)\n", e1, kTol);

    // Decode one token: t = h = w = n + rope_delta, against the prompt's keys plus its own.
    const double t = double(n + ids.rope_delta);
    std::vector<double> pk = ids.ids;
    pk.insert(pk.end(), {t, t, t});
    auto k2 = k, v2 = v;
    const auto kn = random_rows(1, Hk, 4), vn = random_rows(1, Hk, 5), qn = random_rows(1, Hq, 6);
    k2.insert(k2.end(), kn.begin(), kn.end());
    v2.insert(v2.end(), vn.begin(), vn.end());
    std::vector<float> o2(std::size_t(Hq * d));
    const std::vector<double> pq = {t, t, t};
    peal::attention(enc, peal::TensorView<const float>(qn.data(), 1, Hq, d), peal::PositionsND(pq, 3),
                    peal::TensorView<const float>(k2.data(), n + 1, Hk, d), peal::PositionsND(pk, 3),
                    peal::TensorView<const float>(v2.data(), n + 1, Hk, d),
                    peal::TensorView<float>(o2.data(), 1, Hq, d), opt);
    const double e2 = max_error(ref, qn, pq, k2, v2, pk, o2);
    std::printf("decode at t = h = w = %g: max |out - naive| = %.2e\n", t, e2);

    // The image's positions matter: the same prompt with 1-D positions 0..n-1 is different.
    std::vector<double> flat;
    for (Index i = 0; i < n; ++i) flat.insert(flat.end(), {double(i), double(i), double(i)});
    std::vector<float> o3(out.size());
    peal::attention(enc, peal::TensorView<const float>(q.data(), n, Hq, d), peal::PositionsND(flat, 3),
                    peal::TensorView<const float>(k.data(), n, Hk, d), peal::PositionsND(flat, 3),
                    peal::TensorView<const float>(v.data(), n, Hk, d),
                    peal::TensorView<float>(o3.data(), n, Hq, d), opt);
    const double e3 = max_error(ref, q, ids.ids, k, v, ids.ids, o3);
    std::printf("with 1-D positions instead: max |out - naive| = %.2e (must be large)\n", e3);
    if (!(e1 <= kTol && e2 <= kTol && e3 > 100 * kTol)) {
      std::printf("FAILED\n");
      return 1;
    }
    std::printf("ok\n");
    return 0;
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
}
