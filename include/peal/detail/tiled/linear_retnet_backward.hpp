// RetNet's row normalisation in the backward of peal::linear_attention (normalization = retnet;
// linear_attention_backward.hpp, docs/gradients.md §4). The forward (linear_run.hpp,
// docs/linear-attention.md §5) writes each row of query head h as
//   o_i = c_i u_i,   c_i = 1 / (sqrt(S_i) D_i),   S_i = Σ_{j ∈ J_i} γ^(t_i − s_j),
// u_i the unnormalised row Σ_{s_j ≤ t_i} S_ij v_j (S_ij = scale γ^τ qᵀ A(τ) k), J_i the keys
// visible to query i (chunkwise: those of its chunk) and D_i torchscale's divisor, computed
// there from .detach()ed tensors (microsoft/torchscale multiscale_retention.py):
//   parallel_forward:        D_i = clamp(A_i / sqrt(S_i), 1, 5·10⁴), A_i = Σ_{s_j ≤ t_i} |S_ij|
//                            (qk_mat.detach().abs().sum(-1).clamp(min=1, max=5e4));
//   recurrent_forward:       D_i = 1 (no detach: the running scale is the mask's S_i);
//   chunk_recurrent_forward: D_i = max(I_i, K_c), I_i = A_i / sqrt(S_i) over the chunk's keys
//                            (inner_scale = qk_mat.detach().abs()...clamp(min=1)) and
//                            K_c = max(1, ‖scale/S(B) · A(−T′) M(T′)‖₁) (kv_scale =
//                            kv_state.detach().abs().sum(-2).max(-1).clamp(min=1)).
// D_i is held constant, as torchscale's autograd holds it; S_i, the decay mask's row sum
// (retnet.py RetNetRelPos.forward: mask / mask.sum(-1).sqrt(), no detach; a fixed buffer there),
// is differentiated, so that the decay and position gradients are the derivative of the forward
// with the detached divisors held constant. With dO = ∂L/∂o:
//   ∂L/∂u_i = c_i dO_i = dO′_i                 (the unnormalised backward, with dO′),
//   ∂L/∂S_i = −c_i dO_i · u_i / (2 S_i) = −a_i / (2 S_i),   a_i = dO′_i · u_i,
//   ∂S_i/∂γ = Σ_j τ_ij γ^(τ_ij − 1),  ∂S_i/∂t_i = λ S_i,  ∂S_i/∂s_j = −λ γ^(τ_ij)  (λ = ln γ).
// The backward forms a_i from its own products: Σ_j S_ij dS′_ij over a row's pairs, plus
// ρ_i = dq̂_i · q̂_i for the state's part of the chunkwise algorithm (linear_backward_run.hpp).
// The sums over J_i are recurrences over the sorted times, every exponent a lag ≥ 0: O(nq + nk)
// per head.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "../../linear_options.hpp"
#include "../../positions.hpp"
#include "../../view.hpp"

namespace peal {
namespace detail {
namespace linear_backward {

/// The normalisation of one call: its form, the mask sums S_ih and λ-weighted sums, and the
/// row products a_ih the backward fills ([nq, Hq] each, entry i Hq + h).
struct RetNetRows {
  LinearForm form = LinearForm::parallel;  // parallel, recurrent or chunkwise
  Index chunk = 0;     // chunkwise: keys per chunk (the forward's, ≤ nk); otherwise 0
  double block = 0;    // chunkwise: the chunk given, torchscale's recurrent_chunk_size B
  double scale = 1;    // the scores' scale (K_c's scale/S(B))
  std::vector<double> t, s, lam, gamma;  // times, and ln γ_h and γ_h per query head
  std::vector<double> mask_sum;          // S_ih
  std::vector<double> mask_lag;          // U_ih = Σ_j τ_ij γ^τ_ij = γ ∂S_ih/∂γ
  std::vector<double> row_dot;           // a_ih = dO′_ih · u_ih

  Index Hq() const { return Index(lam.size()); }

  /// fn(ia, ib, ja, jb) for each run of queries [ia, ib) whose J_i are among keys [ja, jb):
  /// all (parallel, recurrent), or chunk c's queries T_c ≤ t_i < T_{c+1} and keys (chunkwise:
  /// the forward's split, detail/tiled/linear_run.hpp).
  template <class Fn>
  void segments(Fn&& fn) const {
    const Index nq = Index(t.size()), nk = Index(s.size());
    if (chunk <= 0 || nk == 0) return fn(Index(0), nq, Index(0), nk);
    const Index nc = 1 + (nk - 1) / chunk;
    Index i0 = 0;
    for (Index c = 0; c < nc; ++c) {
      const Index j0 = c * chunk, j1 = std::min(nk, j0 + chunk);
      const Index i1 = c + 1 < nc ? Index(std::lower_bound(t.begin() + i0, t.end(),
                                                           s[std::size_t(j1)]) - t.begin())
                                  : nq;
      fn(i0, i1, j0, j1);
      i0 = i1;
    }
  }
};

/// S_i and U_i of queries [ia, ib) over keys [ja, jb), head h: P = Σ γ^(T − s_j) and
/// Q = Σ (T − s_j) γ^(T − s_j) at the last key T, moved by Δ ≥ 0 as P ← γ^Δ P,
/// Q ← γ^Δ (Q + Δ P).
inline void mask_sums(RetNetRows& r, Index h, Index ia, Index ib, Index ja, Index jb) {
  const double l = r.lam[std::size_t(h)];
  const Index Hq = r.Hq();
  double P = 0, Q = 0, T = 0;
  Index j = ja;
  for (Index i = ia; i < ib; ++i) {
    const double ti = r.t[std::size_t(i)];
    for (; j < jb && r.s[std::size_t(j)] <= ti; ++j) {
      const double D = r.s[std::size_t(j)] - T, g = std::exp(l * D);
      if (j > ja) Q = g * (Q + D * P), P *= g;
      P += 1, T = r.s[std::size_t(j)];
    }
    const std::size_t x = std::size_t(i * Hq + h);
    if (j == ja) continue;  // no key: S = 0, the row is 0
    const double D = ti - T, g = std::exp(l * D);
    r.mask_sum[x] = g * P;
    r.mask_lag[x] = g * (Q + D * P);
  }
}

/// The normalisation of a call with these options (normalization = retnet, form given).
inline RetNetRows retnet_rows(const LinearAttentionOptions& opt, const Positions& tq,
                              const Positions& tk, Index nq, Index nk, Index Hq, double scale) {
  RetNetRows r;
  r.form = opt.form;
  r.scale = scale;
  if (opt.form == LinearForm::chunkwise) {
    r.chunk = std::min(opt.chunk, std::max<Index>(nk, 1));
    r.block = double(opt.chunk);
  }
  for (Index i = 0; i < nq; ++i) r.t.push_back(tq[i]);
  for (Index j = 0; j < nk; ++j) r.s.push_back(tk[j]);
  for (Index h = 0; h < Hq; ++h) {
    const double g = opt.decay.empty() ? 1.0 : opt.decay[std::size_t(h)];
    r.gamma.push_back(g);
    r.lam.push_back(std::log(g));
  }
  const std::size_t n = std::size_t(nq * Hq);
  r.mask_sum.assign(n, 0.0);
  r.mask_lag.assign(n, 0.0);
  r.row_dot.assign(n, 0.0);
  for (Index h = 0; h < Hq; ++h)
    r.segments([&](Index ia, Index ib, Index ja, Index jb) { mask_sums(r, h, ia, ib, ja, jb); });
  return r;
}

/// c = 1 / (sqrt(S) D) of a row with mask sum S and abs score sum A (the forward's sink:
/// f / clamp(f A, lo, hi), f = 1/sqrt(S)); floor: chunkwise K_c.
inline double row_factor(const RetNetRows& r, double S, double A, double floor) {
  if (!(S > 0)) return 0.0;  // no visible key: the forward writes 0
  const double f = 1 / std::sqrt(S);
  if (r.form == LinearForm::recurrent) return f;
  const double lo = r.form == LinearForm::chunkwise ? floor : 1.0;
  const double hi = r.form == LinearForm::chunkwise ? std::numeric_limits<double>::infinity() : 5e4;
  return f / std::clamp(f * A, lo, std::max(lo, hi));
}

/// Rows [i0, i0 + m) of query head h with scores S [m, n] (masked entries 0; all of a row's
/// pairs, or its chunk's): dO ← c dO (rows of dv at stride lddo), floor: the chunk's K_c.
inline void normalise_rows(const RetNetRows& r, const double* S, Index m, Index n, Index i0,
                           Index h, double floor, double* dO, Index dv, Index lddo) {
  for (Index i = 0; i < m; ++i) {
    double A = 0;
    for (Index j = 0; j < n; ++j) A += std::abs(S[i * n + j]);
    const double c = row_factor(r, r.mask_sum[std::size_t((i0 + i) * r.Hq() + h)], A, floor);
    for (Index e = 0; e < dv; ++e) dO[i * lddo + e] *= c;
  }
}

/// a_ih += Σ_j S_ij dS′_ij over the pairs of rows [i0, i0 + m) (S [m, n] masked to 0, dS′ [m, n]).
inline void add_row_dots(RetNetRows& r, const double* S, const double* dS, Index m, Index n,
                         Index i0, Index h) {
  for (Index i = 0; i < m; ++i) {
    double a = 0;
    for (Index j = 0; j < n; ++j) a += S[i * n + j] * dS[i * n + j];
    r.row_dot[std::size_t((i0 + i) * r.Hq() + h)] += a;
  }
}

/// K_c = max(1, ‖scale/S(B) γ^(−(T_c − T′)) M_c‖₁) of query head h from its state M_c (d x dv,
/// the absolute frame of a pure rotation: M_c = Σ_{s_j < T_c} γ^(T_c − s_j) G(s_j) k_j v_jᵀ),
/// back = T_c − T′, T′ the previous chunk's last key (the forward's chunk_floor); 1 for c = 0.
/// (A template on the state type, always Eigen::MatrixXd: compiled only where called, not by
/// every includer of peal.hpp, docs/build-cost.md §5.)
template <class St>
double state_floor(const RetNetRows& r, const St& M, Index h, double back) {
  const double l = r.lam[std::size_t(h)], g = r.gamma[std::size_t(h)], B = r.block;
  const double SB = g == 1.0 ? B : -std::expm1(B * l) / (1.0 - g);  // S(B) = (1 − γ^B)/(1 − γ)
  const double K = M.size() == 0 ? 0.0 : M.cwiseAbs().colwise().sum().maxCoeff();
  return std::max(1.0, K * r.scale / SB / std::exp(l * back));
}

/// Adds the mask sums' share, ∂L/∂S_ih = −a_ih / (2 S_ih) times ∂S_ih, to the decays',
/// query positions' and key positions' gradients (each may be null).
template <class R>
void add_mask_gradients(const RetNetRows& r, std::vector<double>* decay,
                        std::vector<R>* query_positions, std::vector<R>* key_positions) {
  const Index Hq = r.Hq();
  std::vector<double> b(r.t.size());  // ∂L/∂S_ih of one head
  for (Index h = 0; h < Hq; ++h) {
    const double l = r.lam[std::size_t(h)], g = r.gamma[std::size_t(h)];
    double dgamma = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
      const std::size_t x = i * std::size_t(Hq) + std::size_t(h);
      const double S = r.mask_sum[x];
      b[i] = S > 0 ? -r.row_dot[x] / (2 * S) : 0.0;
      dgamma += b[i] * r.mask_lag[x] / g;
      if (query_positions) (*query_positions)[i] += R(b[i] * l * S);
    }
    if (decay) (*decay)[std::size_t(h)] += dgamma;
    if (!key_positions || l == 0) continue;
    // E_j = Σ_{i : j ∈ J_i} b_i γ^(t_i − s_j), keys from the last: E ← γ^(s_{j+1} − s_j) E,
    // then the queries with t_i ≥ s_j not yet in it.
    r.segments([&](Index ia, Index ib, Index ja, Index jb) {
      double E = 0, T = 0;
      Index i = ib - 1;
      for (Index j = jb - 1; j >= ja; --j) {
        const double sj = r.s[std::size_t(j)];
        if (j + 1 < jb) E *= std::exp(l * (T - sj));
        for (; i >= ia && r.t[std::size_t(i)] >= sj; --i)
          E += b[std::size_t(i)] * std::exp(l * (r.t[std::size_t(i)] - sj));
        T = sj;
        (*key_positions)[std::size_t(j)] -= R(l * E);
      }
    });
  }
}

}  // namespace linear_backward
}  // namespace detail
}  // namespace peal
