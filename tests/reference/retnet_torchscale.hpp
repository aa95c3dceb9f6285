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

// torchscale's result, the divisors it applied per row (which clamp acted), and the magnitudes
// an error bound needs (the caller's tolerance: a kernel's rounding is relative to these).
struct Result {
  Rows out;                 // [n][dv], before the group norm
  std::vector<LD> abs_sum;  // parallel: sum_j |w_ij|; chunkwise: sum over the chunk's keys; else 0
  std::vector<LD> divisor;  // N_i (parallel), 1 (recurrent), max(I_i, K_c) (chunkwise)
  std::vector<LD> cross;    // chunkwise: K_c of the row's chunk (else 1)
  Rows bound;               // [n][dv]: sum_j |w|-bound_ij |v_j[e]| / divisor, where the bound of
                            // |w_ij| is gamma^(i-j) |qr_i| |kr_j| / sqrt(S) (Cauchy-Schwarz)
  std::vector<LD> cond;     // relative sensitivity of the divisor to rounding of its terms:
                            // (sum_j |w|-bound_ij) / abs_sum when the abs sum is the divisor,
                            // K_abs / K_c when K_c is (K_abs: K_c with |.| inside the key sums),
                            // 0 when a clamp constant (1, 5e4) or nothing divides
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

inline LD dot(const std::vector<LD>& a, const std::vector<LD>& b) {
  LD s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// The rotated rows (k times the scale), their norms and the powers gamma^l, l < n.
struct Prepared {
  Rows qr, kr, v;
  std::vector<LD> qn, kn, pw;
  Prepared(const Rows& q, const Rows& k, const Rows& vv, LD gamma, LD scale) : v(vv) {
    if (q.empty() || q.size() != k.size() || q.size() != v.size())
      throw std::invalid_argument("retnet_ts: q, k, v need the same n >= 1 rows");
    const std::vector<LD> w = angles(int(q[0].size()));
    LD g = 1;
    for (std::size_t i = 0; i < q.size(); ++i, g *= gamma) {
      qr.push_back(rotate(q[i], long(i), w));
      std::vector<LD> ks = k[i];
      for (LD& x : ks) x *= scale;
      kr.push_back(rotate(ks, long(i), w));
      qn.push_back(std::sqrt(dot(qr[i], qr[i])));
      kn.push_back(std::sqrt(dot(kr[i], kr[i])));
      pw.push_back(g);
    }
  }
  std::size_t n() const { return qr.size(); }
  std::size_t dv() const { return v[0].size(); }
};

// One row: w_ij = gamma^(i-j) sigma_ij / sqrt(S(m)) for j <= i, its abs sum over j >= j0 and the
// Cauchy-Schwarz bound of that sum.
struct Row {
  std::vector<LD> w, wbound;
  LD abs_sum = 0, abs_bound = 0;
};
inline Row masked_row(const Prepared& P, std::size_t i, std::size_t j0, LD gamma, long m) {
  const LD norm = std::sqrt(geometric(gamma, m));
  Row r;
  for (std::size_t j = 0; j <= i; ++j) {
    r.w.push_back(P.pw[i - j] * dot(P.qr[i], P.kr[j]) / norm);
    r.wbound.push_back(P.pw[i - j] * P.qn[i] * P.kn[j] / norm);
    if (j >= j0) {
      r.abs_sum += std::fabs(r.w.back());
      r.abs_bound += r.wbound.back();
    }
  }
  return r;
}

// Appends o_i = sum_j w_ij v_j / D and its magnitude to res.
inline void finish(Result& res, const Prepared& P, const Row& r, LD D, LD abs_sum, LD cross,
                   LD cond) {
  std::vector<LD> o(P.dv(), 0.0L), b(P.dv(), 0.0L);
  for (std::size_t j = 0; j < r.w.size(); ++j)
    for (std::size_t e = 0; e < P.dv(); ++e) {
      o[e] += r.w[j] * P.v[j][e] / D;
      b[e] += r.wbound[j] * std::fabs(P.v[j][e]) / D;
    }
  res.out.push_back(o);
  res.bound.push_back(b);
  res.abs_sum.push_back(abs_sum);
  res.divisor.push_back(D);
  res.cross.push_back(cross);
  res.cond.push_back(cond);
}

// K_c = max(1, ||KV_c||_1), KV_c = S(B)^-1 sum_{j < cB} gamma^(cB-1-j) kr_j v_j^T (d x dv,
// torchscale's absolute rotation frame), K_0 = 1; and K_abs, the same with |.| on every term.
inline void cross_scale(const Prepared& P, LD gamma, std::size_t B, std::size_t c, LD& K,
                        LD& K_abs) {
  K = 1;
  K_abs = 0;
  if (c == 0) return;
  const std::size_t d = P.kr[0].size(), end = c * B;
  const LD SB = geometric(gamma, long(B));
  LD best = 0, best_abs = 0;
  for (std::size_t e = 0; e < P.dv(); ++e) {
    LD col = 0, col_abs = 0;
    for (std::size_t l = 0; l < d; ++l) {
      LD m = 0, m_abs = 0;
      for (std::size_t j = 0; j < end; ++j) {
        const LD t = P.pw[end - 1 - j] * P.kr[j][l] * P.v[j][e];
        m += t;
        m_abs += std::fabs(t);
      }
      col += std::fabs(m / SB);
      col_abs += m_abs / SB;
    }
    best = std::max(best, col);
    best_abs = std::max(best_abs, col_abs);
  }
  K = std::max(best, 1.0L);
  K_abs = best_abs;
}

}  // namespace detail

// parallel_forward (one head): the decay mask row-normalised by sqrt(S(i+1)), then the scores
// divided by their abs row sum clamped to [1, 5e4].
inline Result parallel(const Rows& q, const Rows& k, const Rows& v, LD gamma, LD scale) {
  const detail::Prepared P(q, k, v, gamma, scale);
  Result res;
  for (std::size_t i = 0; i < P.n(); ++i) {
    const detail::Row r = detail::masked_row(P, i, 0, gamma, long(i) + 1);
    const LD N = std::min(std::max(r.abs_sum, 1.0L), 5e4L);
    const bool by_sum = r.abs_sum > 1 && r.abs_sum < 5e4L;
    detail::finish(res, P, r, N, r.abs_sum, 1, by_sum ? r.abs_bound / r.abs_sum : 0);
  }
  return res;
}

// recurrent_forward, token by token from an empty state: c_i = S(i+1) and
// KV_i = sum_{j<=i} gamma^(i-j) kr_j v_j^T / sqrt(c_i), o_i = KV_i qr_i. No clamp.
inline Result recurrent(const Rows& q, const Rows& k, const Rows& v, LD gamma, LD scale) {
  const detail::Prepared P(q, k, v, gamma, scale);
  Result res;
  for (std::size_t i = 0; i < P.n(); ++i)
    detail::finish(res, P, detail::masked_row(P, i, 0, gamma, long(i) + 1), 1, 0, 1, 0);
  return res;
}

// chunk_recurrent_forward with chunk size B (n need not be a multiple: see the header).
inline Result chunkwise(const Rows& q, const Rows& k, const Rows& v, LD gamma, LD scale,
                        std::size_t B) {
  if (B == 0) throw std::invalid_argument("retnet_ts::chunkwise: B >= 1");
  const detail::Prepared P(q, k, v, gamma, scale);
  const std::size_t chunks = (P.n() + B - 1) / B;
  std::vector<LD> K(chunks), K_abs(chunks);
  for (std::size_t c = 0; c < chunks; ++c) detail::cross_scale(P, gamma, B, c, K[c], K_abs[c]);
  Result res;
  for (std::size_t i = 0; i < P.n(); ++i) {
    const std::size_t c = i / B, a = i % B;
    const detail::Row r = detail::masked_row(P, i, c * B, gamma, long(a) + 1);
    const LD D = std::max(std::max(r.abs_sum, 1.0L), K[c]);
    const LD cond = D == 1 ? 0 : D == K[c] ? K_abs[c] / K[c] : r.abs_bound / r.abs_sum;
    detail::finish(res, P, r, D, r.abs_sum, K[c], cond);
  }
  return res;
}

}  // namespace retnet_ts
}  // namespace peal_ref
