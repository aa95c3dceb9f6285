// Independent long double reference of torchscale's RetNet retention, one head, before the
// group norm: the parallel, recurrent and chunkwise forms with their normalisations
// (microsoft/torchscale torchscale/architecture/retnet.py RetNetRelPos.forward and
// torchscale/component/multiscale_retention.py parallel_forward, recurrent_forward,
// chunk_recurrent_forward; the formulas, quoted, in the notes/retnet-norm.md the lead implements
// from, summarised here). Plain C++17, no Eigen, no peal headers; written from the per-row
// formulas, not transcribed from the tensor code.
//
// Integer positions 0..n-1 (torchscale has no others); queries and keys are the same tokens.
// Raw q, k (n x d) and v (n x dv) are rotated here as theta_shift does: pair (x0, x1) at position
// p goes to R(p w_i) (x0, x1), w_i = 10000^(-i/(d/2-1)) (torch.linspace(0, 1, d/2), w_0 = 1 for
// d = 2), and k is multiplied by `scale` (torchscale: key_dim^-1/2) before anything else.
// With sigma_ij = qr_i . kr_j, S(m) = sum_{l<m} gamma^l:
//   parallel:  w_ij = gamma^(i-j) sigma_ij / sqrt(S(i+1)),  o_i = sum_{j<=i} w_ij v_j / N_i,
//              N_i = min(max(sum_j |w_ij|, 1), 5e4);
//   recurrent: o_i = sum_{j<=i} w_ij v_j   (c_i = gamma c_{i-1} + 1 = S(i+1), no clamp);
//   chunkwise (B keys per chunk, i = cB + a): wc_ij = gamma^(i-j) sigma_ij / sqrt(S(a+1)),
//              o_i = sum_{j<=i} wc_ij v_j / max(I_i, K_c), I_i = max(1, sum_{cB<=j<=i} |wc_ij|),
//              K_c = max(1, ||KV_c||_1) (max over value columns of the abs-sum over the key
//              index), KV_c = S(B)^-1 sum_{j<cB} gamma^(cB-1-j) kr_j v_j^T (absolute frame),
//              K_0 = 1. A partial last chunk is allowed: torchscale pads to a multiple of B
//              with zeros and, every factor of a row depending only on earlier keys, the rows
//              kept are the same.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <vector>

namespace peal_ref {
namespace retnet_ts {

using LD = long double;
using Rows = std::vector<std::vector<LD>>;  // [token][element]

// torchscale's result and the divisors it applied, per row (diagnostics: which clamp acted).
struct Result {
  Rows out;               // [n][dv], before the group norm
  std::vector<LD> abs_sum;  // parallel: sum_j |w_ij|; chunkwise: the in-chunk sum of |wc_ij|
  std::vector<LD> divisor;  // N_i (parallel), 1 (recurrent), max(I_i, K_c) (chunkwise)
  std::vector<LD> cross;    // chunkwise: K_c of the row's chunk (else 1)
};

// RetNetRelPos angles, one per interleaved pair (torchscale stores each twice).
inline std::vector<LD> angles(int d) {
  if (d < 2 || d % 2 != 0) throw std::invalid_argument("retnet_ts::angles: d must be even >= 2");
  const int m = d / 2;
  std::vector<LD> w(static_cast<std::size_t>(m));
  for (int i = 0; i < m; ++i)
    w[static_cast<std::size_t>(i)] = 1.0L / std::pow(10000.0L, m == 1 ? 0.0L : LD(i) / (m - 1));
  return w;
}

// theta_shift at integer position p: (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin), angle p w_i.
inline std::vector<LD> rotate(const std::vector<LD>& x, long p, const std::vector<LD>& w) {
  std::vector<LD> y(x.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    const LD c = std::cos(LD(p) * w[i]), s = std::sin(LD(p) * w[i]);
    y[2 * i] = x[2 * i] * c - x[2 * i + 1] * s;
    y[2 * i + 1] = x[2 * i + 1] * c + x[2 * i] * s;
  }
  return y;
}

// S(m) = sum_{l=0}^{m-1} gamma^l, summed (not the closed form: no cancellation at gamma -> 1).
inline LD geometric(LD gamma, long m) {
  LD s = 0, g = 1;
  for (long l = 0; l < m; ++l, g *= gamma) s += g;
  return s;
}

namespace detail {

struct Rotated {
  Rows qr, kr;  // kr includes the key scale
};
inline Rotated rotated(const Rows& q, const Rows& k, LD scale) {
  if (q.size() != k.size() || q.empty()) throw std::invalid_argument("retnet_ts: q, k: n >= 1 rows each");
  const std::vector<LD> w = angles(int(q[0].size()));
  Rotated r;
  for (std::size_t i = 0; i < q.size(); ++i) {
    r.qr.push_back(rotate(q[i], long(i), w));
    std::vector<LD> ks = k[i];
    for (LD& x : ks) x *= scale;
    r.kr.push_back(rotate(ks, long(i), w));
  }
  return r;
}
inline LD dot(const std::vector<LD>& a, const std::vector<LD>& b) {
  LD s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
// Row i of the masked scores, w_ij = gamma^(i-j) sigma_ij / sqrt(S(m)) for j in [j0, i].
inline std::vector<LD> masked_row(const Rotated& r, std::size_t i, std::size_t j0, LD gamma, long m) {
  const LD norm = std::sqrt(geometric(gamma, m));
  std::vector<LD> row;
  for (std::size_t j = j0; j <= i; ++j)
    row.push_back(std::pow(gamma, LD(i - j)) * dot(r.qr[i], r.kr[j]) / norm);
  return row;
}
inline void accumulate(std::vector<LD>& o, LD wgt, const std::vector<LD>& v) {
  for (std::size_t e = 0; e < v.size(); ++e) o[e] += wgt * v[e];
}

}  // namespace detail

// parallel_forward (one head): the decay mask row-normalised by sqrt(S(i+1)), then the scores
// divided by their abs row sum clamped to [1, 5e4].
inline Result parallel(const Rows& q, const Rows& k, const Rows& v, LD gamma, LD scale) {
  const detail::Rotated r = detail::rotated(q, k, scale);
  const std::size_t n = q.size(), dv = v[0].size();
  Result res;
  for (std::size_t i = 0; i < n; ++i) {
    const std::vector<LD> w = detail::masked_row(r, i, 0, gamma, long(i) + 1);
    LD a = 0;
    for (LD x : w) a += std::fabs(x);
    const LD N = std::min(std::max(a, 1.0L), 5e4L);
    std::vector<LD> o(dv, 0.0L);
    for (std::size_t j = 0; j <= i; ++j) detail::accumulate(o, w[j] / N, v[j]);
    res.out.push_back(o);
    res.abs_sum.push_back(a);
    res.divisor.push_back(N);
    res.cross.push_back(1);
  }
  return res;
}

// recurrent_forward, token by token from an empty state: c_i = S(i+1) and
// KV_i = sum_{j<=i} gamma^(i-j) kr_j v_j^T / sqrt(c_i), o_i = KV_i qr_i. No clamp.
inline Result recurrent(const Rows& q, const Rows& k, const Rows& v, LD gamma, LD scale) {
  const detail::Rotated r = detail::rotated(q, k, scale);
  const std::size_t n = q.size(), dv = v[0].size();
  Result res;
  for (std::size_t i = 0; i < n; ++i) {
    const std::vector<LD> w = detail::masked_row(r, i, 0, gamma, long(i) + 1);
    std::vector<LD> o(dv, 0.0L);
    for (std::size_t j = 0; j <= i; ++j) detail::accumulate(o, w[j], v[j]);
    res.out.push_back(o);
    res.abs_sum.push_back(0);
    res.divisor.push_back(1);
    res.cross.push_back(1);
  }
  return res;
}

// K_c = max(1, ||KV_c||_1), KV_c = S(B)^-1 sum_{j < cB} gamma^(cB-1-j) kr_j v_j^T (d x dv,
// torchscale's absolute rotation frame); K_0 = 1.
inline LD cross_scale(const detail::Rotated& r, const Rows& v, LD gamma, std::size_t B, std::size_t c) {
  if (c == 0) return 1;
  const std::size_t d = r.kr[0].size(), dv = v[0].size(), end = c * B;
  const LD SB = geometric(gamma, long(B));
  LD best = 0;
  for (std::size_t e = 0; e < dv; ++e) {
    LD col = 0;
    for (std::size_t l = 0; l < d; ++l) {
      LD m = 0;
      for (std::size_t j = 0; j < end; ++j) m += std::pow(gamma, LD(end - 1 - j)) * r.kr[j][l] * v[j][e];
      col += std::fabs(m / SB);
    }
    best = std::max(best, col);
  }
  return std::max(best, 1.0L);
}

// chunk_recurrent_forward with chunk size B (n need not be a multiple: see the header).
inline Result chunkwise(const Rows& q, const Rows& k, const Rows& v, LD gamma, LD scale,
                        std::size_t B) {
  if (B == 0) throw std::invalid_argument("retnet_ts::chunkwise: B >= 1");
  const detail::Rotated r = detail::rotated(q, k, scale);
  const std::size_t n = q.size(), dv = v[0].size();
  Result res;
  std::vector<LD> K((n + B - 1) / B);
  for (std::size_t c = 0; c < K.size(); ++c) K[c] = cross_scale(r, v, gamma, B, c);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = i / B, a = i % B;
    const std::vector<LD> w = detail::masked_row(r, i, 0, gamma, long(a) + 1);
    LD in = 0;
    for (std::size_t j = c * B; j <= i; ++j) in += std::fabs(w[j]);
    const LD D = std::max(std::max(in, 1.0L), K[c]);
    std::vector<LD> o(dv, 0.0L);
    for (std::size_t j = 0; j <= i; ++j) detail::accumulate(o, w[j] / D, v[j]);
    res.out.push_back(o);
    res.abs_sum.push_back(in);
    res.divisor.push_back(D);
    res.cross.push_back(K[c]);
  }
  return res;
}

}  // namespace retnet_ts
}  // namespace peal_ref
