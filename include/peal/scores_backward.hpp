// Backward of scores() (scores.hpp; docs/gradients.md §4): given dS = ∂L/∂out [Hq, nq, nk],
//
//   out[h][i][j] = scale · γ_h^τ · q_ihᵀ A(τ) k_j,h/G − m_h τ,   τ = t_i − s_j,
//
// returns dq, dk, and adds the gradients of the encoding's parameters θ, of the positions,
// of the ALiBi slopes m_h and of the decays γ_h. Masked entries (causal, s_j > t_i) are
// constants of the forward: their dS is never read.
//
// The score is a function of the encoded rows only, S_ij = ⟨F(t_i) q_i, G(s_j) k_j⟩, so the
// backward is the one of a product in the encoded frame followed by the encode backward of
// each side (encode_backward.hpp) — but, as in the forward, never at absolute time when A(τ)
// grows or decays: the positions are cut into tiles of half-spread h around anchors T_I, S_J
// (the forward's plan, detail/tile_plan.hpp: ρ h ≤ θ_exp, (1 + 4h)^p ≤ P in double), and
//   q̂_i = F(t_i − T_I) q_i,   k̂_j = G(s_j − S_J) k_j,   S_ij = scale γ^τ q̂_iᵀ A_X(Δ) k̂_j,
// Δ = T_I − S_J, where A_X is the encoding's A (F(a)ᵀ = A(a), G(b) = A(−b)), or for a basis
// change its inner encoding's (F(a)ᵀ = P A_J(a), G(b) = A_J(−b) P⁻¹). With W = dS ∘ scale γ^τ:
//   dq̂_i += Σ_j W_ij A_X(Δ) k̂_j,   dk̂_j += A_X(Δ)ᵀ Σ_i W_ij q̂_i,
//   ∂L/∂θ += Σ_j (Σ_i W_ij q̂_i)ᵀ ∂A_X(Δ)/∂θ k̂_j      (the bilinear form of derivatives.hpp),
// and encode_queries_backward at t_i − T_I, encode_keys_backward at s_j − S_J turn dq̂, dk̂ into
// dq, dk, ∂L/∂θ and ∂L/∂t, ∂L/∂s (the anchors are constants: they cancel in S). Pure rotations
// (no growth, no Jordan chain: RoPE) take anchor 0, so Δ = 0 and q̂ = F(t) q. The epilogue:
//   ∂L/∂m_h = −Σ_ij dS_ij τ_ij;   ∂L/∂γ_h = Σ_ij W_ij (τ_ij / γ_h) R_ij,  R_ij = q̂_iᵀ A_X(Δ) k̂_j;
//   ∂L/∂t_i += Σ_j (W_ij ln γ_h R_ij − m_h dS_ij),  ∂L/∂s_j −= the same terms.
// A_X(Δ) is formed once per tile pair as a dense d x d matrix and applied to the key tile's
// rows by a GEMM (d / n_I of the pair's work). Arithmetic in double (products by Eigen's GEMM;
// the rows are converted to double before the encode backward, whose rotation-bank pair sums
// need one storage type); one thread, deterministic. Not yet: PerHead
// and N-D points, a float path, threads (docs/gradients.md §5).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "derivatives.hpp"
#include "detail/overlap.hpp"
#include "detail/scores_coders.hpp"
#include "detail/tile_plan.hpp"
#include "encode_backward.hpp"
#include "errors.hpp"
#include "positions.hpp"
#include "score_options.hpp"
#include "scores.hpp"
#include "view.hpp"

namespace peal {

/// Where the gradients of scores_backward go (each may be null: not wanted). All are ADDED to.
template <class R>
struct ScoresGradients {
  std::vector<R>* parameters = nullptr;         ///< parameter_count(enc) entries
  std::vector<R>* query_positions = nullptr;    ///< nq entries
  std::vector<R>* key_positions = nullptr;      ///< nk entries
  std::vector<double>* alibi_slopes = nullptr;  ///< Hq entries (opt.alibi_slopes set)
  std::vector<double>* decay = nullptr;         ///< Hq entries (opt.decay set)
};

namespace detail {
namespace scores_backward {

// The encoding whose A the cross factor of two anchors is (see the top of this file).
template <class E>
const E& cross(const E& e) {
  return e;
}
template <class I>
const auto& cross(const BasisChange<I>& e) {
  return cross(e.inner());
}

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Rows = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;
using Tile = Eigen::Ref<RowMatrix, 0, Eigen::OuterStride<>>;

// Head h of a [tokens, heads, d] double buffer, rows [b, b + n).
inline Rows head_rows(std::vector<double>& v, Index b, Index n, Index heads, Index h, Index d) {
  return Rows(v.data() + (b * heads + h) * d, n, d, Eigen::OuterStride<>(heads * d));
}

template <class T>
TensorView<T> token_range(const TensorView<T>& v, Index b, Index n) {
  if (v.empty()) return v;
  return TensorView<T>(v.vector(b, 0), n, v.heads(), v.dim(), v.strides());
}

// Working memory of a call, kept by the calling thread between calls (fresh allocations of a
// few MB per call cost more page faults than the arithmetic at n = 512): the encoded key rows
// and their gradient (nk·Hk·d doubles each), one query tile's (256·Hq·d each), the tile pair's
// matrices. It grows to the largest call made on the thread and is not released.
struct Workspace {
  std::vector<double> khat, dkhat, qhat, dqhat, xbuf;
  RowMatrix W, raw, kt, u;
  static Workspace& local() {
    thread_local Workspace w;
    return w;
  }
};
inline void at_least(std::vector<double>& v, Index n) {
  if (Index(v.size()) < n) v.resize(std::size_t(n));
}
inline void at_least(RowMatrix& m, Index rows, Index cols) {
  if (m.rows() < rows || m.cols() < cols)
    m.resize(std::max(rows, Index(m.rows())), std::max(cols, Index(m.cols())));
}

template <class R>
void add_to(std::vector<R>* dst, Index offset, const std::vector<R>& src) {
  if (!dst) return;
  for (std::size_t i = 0; i < src.size(); ++i) (*dst)[std::size_t(offset) + i] += src[i];
}

template <class E, class Tq, class Tk, class Td, class Tdq, class Tdk, class R>
void check(const E& enc, const TensorView<Tq>& q, const Positions& tq, const TensorView<Tk>& k,
           const Positions& tk, const TensorView<Td>& ds, const TensorView<Tdq>& dq,
           const TensorView<Tdk>& dk, const ScoreOptions& opt, const ScoresGradients<R>& g) {
  const std::string w = "scores_backward";
  const Index nq = q.tokens(), nk = k.tokens(), Hq = q.heads();
  if (ds.tokens() != Hq || ds.heads() != nq || ds.dim() != nk)
    fail(w + ": d_scores is " + scores_kernels::extents(ds.tokens(), ds.heads(), ds.dim()) +
         ", expected [Hq, nq, nk] = " + scores_kernels::extents(Hq, nq, nk));
  auto disjoint = [&](const auto& a, const auto& b, const char* what) {
    if (!a.empty() && !b.empty() && may_overlap(a, b)) fail(w + ": " + what);
  };
  disjoint(ds, q, "d_scores overlaps q");
  disjoint(ds, k, "d_scores overlaps k");
  scores_kernels::check_scores(enc, q, tq, k, tk, ds, opt, "scores_backward");
  if (!dq.empty() && (dq.tokens() != nq || dq.heads() != Hq || dq.dim() != q.dim()))
    fail(w + ": dq must have the extents of q, or be empty");
  if (!dk.empty() && (dk.tokens() != nk || dk.heads() != k.heads() || dk.dim() != k.dim()))
    fail(w + ": dk must have the extents of k, or be empty");
  disjoint(dq, q, "dq overlaps q"), disjoint(dq, k, "dq overlaps k");
  disjoint(dk, q, "dk overlaps q"), disjoint(dk, k, "dk overlaps k");
  disjoint(dq, ds, "dq overlaps d_scores"), disjoint(dk, ds, "dk overlaps d_scores");
  disjoint(dq, dk, "dq overlaps dk");
  auto size = [&](const auto* v, Index n, const char* what) {
    if (v && Index(v->size()) != n)
      fail(w + ": the " + what + " gradient has " + std::to_string(v->size()) +
           " entries, expected " + std::to_string(n));
  };
  size(g.parameters, Index(parameter_count(enc)), "parameter");
  size(g.query_positions, nq, "query position");
  size(g.key_positions, nk, "key position");
  if (g.alibi_slopes && opt.alibi_slopes.empty())
    fail(w + ": an ALiBi slope gradient was asked for, but the options have no slopes");
  if (g.decay && opt.decay.empty())
    fail(w + ": a decay gradient was asked for, but the options have no decays");
  size(g.alibi_slopes, Hq, "ALiBi slope");
  size(g.decay, Hq, "decay");
}

// The tiles of one side: the forward's plan for growing/decaying encodings, one anchor 0 per
// tile of max_rows tokens for pure rotations.
inline scores_kernels::TilePlan plan(const Positions& p, Index n, Index max_rows, double h, bool pure) {
  std::vector<double> t(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i) t[std::size_t(i)] = p[i];
  scores_kernels::TilePlan tp = scores_kernels::plan_tiles(t.data(), n, max_rows, pure ? std::numeric_limits<double>::infinity() : h);
  if (pure) std::fill(tp.anchor.begin(), tp.anchor.end(), 0.0);
  return tp;
}

template <class E, class Tq, class Tk, class Td, class Tdq, class Tdk, class R>
class Run {
 public:
  Run(const E& enc, const TensorView<Tq>& q, const Positions& tq, const TensorView<Tk>& k,
      const Positions& tk, const TensorView<Td>& ds, const TensorView<Tdq>& dq,
      const TensorView<Tdk>& dk, const ScoreOptions& opt, const ScoresGradients<R>& g)
      : enc_(enc), q_(q), tq_(tq), k_(k), tk_(tk), ds_(ds), dq_(dq), dk_(dk), opt_(opt), g_(g),
        nq_(q.tokens()), nk_(k.tokens()), Hq_(q.heads()), Hk_(k.heads()), d_(q.dim()),
        G_(Hq_ / Hk_) {
    const scores_kernels::coder_t<double, E> coder(enc);
    using L = scores_kernels::rebase_limits<double>;
    const bool pure = coder.rate() == 0 && coder.degree() == 0;
    const double h = scores_kernels::max_half_spread(coder.rate(), coder.degree(), L::exp_budget,
                                                     L::poly_budget);
    qp_ = plan(tq, nq_, 256, h, pure);
    kp_ = plan(tk, nk_, 512, h, pure);
    at_least(ws_.W, qp_.max_rows, kp_.max_rows);
    if (!opt.decay.empty()) at_least(ws_.raw, qp_.max_rows, kp_.max_rows);
    at_least(ws_.kt, kp_.max_rows, d_);
    at_least(ws_.u, kp_.max_rows, d_);
  }

  void run() {
    at_least(ws_.khat, nk_ * Hk_ * d_);  // every row written by encode_tile
    at_least(ws_.dkhat, nk_ * Hk_ * d_);
    std::fill(ws_.dkhat.begin(), ws_.dkhat.begin() + nk_ * Hk_ * d_, 0.0);
    for (Index J = 0; J < kp_.size(); ++J) encode_tile(/*query=*/false, J, ws_.khat);
    for (Index I = 0; I < qp_.size(); ++I) query_tile(I);
    for (Index J = 0; J < kp_.size(); ++J) backward_tile(/*query=*/false, J, ws_.dkhat);
  }

 private:
  // q̂ (or k̂) of tile I: F(t − T_I) q (G(s − S_J) k) into rows [b, b + n) of buf.
  void encode_tile(bool query, Index I, std::vector<double>& buf) {
    if (d_ == 0) return;  // no coordinates: only the bias and decay gradients
    const scores_kernels::TilePlan& p = query ? qp_ : kp_;
    const Index b = p.begin[std::size_t(I)], n = p.rows(I), H = query ? Hq_ : Hk_;
    const std::vector<double> rel = relative(query, I);
    const Index off = query ? 0 : b;  // the query buffer holds one tile
    TensorView<double> dst(buf.data() + off * H * d_, n, H, d_);
    if (query)
      encode_queries(enc_, token_range(q_, b, n), dst, Positions(rel));
    else
      encode_keys(enc_, token_range(k_, b, n), dst, Positions(rel));
  }
  std::vector<double> relative(bool query, Index I) const {
    const scores_kernels::TilePlan& p = query ? qp_ : kp_;
    const Positions& pos = query ? tq_ : tk_;
    const Index b = p.begin[std::size_t(I)], n = p.rows(I);
    std::vector<double> rel(static_cast<std::size_t>(n));
    for (Index r = 0; r < n; ++r) rel[std::size_t(r)] = pos[b + r] - p.anchor[std::size_t(I)];
    return rel;
  }
  // dq̂ (dk̂) of a tile through the encode backward at the relative positions.
  void backward_tile(bool query, Index I, std::vector<double>& dbuf) {
    if (d_ == 0) return;
    const scores_kernels::TilePlan& p = query ? qp_ : kp_;
    const Index b = p.begin[std::size_t(I)], n = p.rows(I), H = query ? Hq_ : Hk_;
    const Index off = query ? 0 : b;
    const std::vector<double> rel = relative(query, I);
    std::vector<R> dpos(g_.query_positions || g_.key_positions ? std::size_t(n) : 0, R(0));
    std::vector<R>* pos_out = query ? g_.query_positions : g_.key_positions;
    EncodeGradients<R> eg{g_.parameters, pos_out ? &dpos : nullptr};
    const TensorView<const double> dv(dbuf.data() + off * H * d_, n, H, d_);
    // The rows in double, as dv: the rotation banks' direct pair sums need one storage type.
    at_least(ws_.xbuf, n * H * d_);
    const TensorView<double> xv(ws_.xbuf.data(), n, H, d_);
    for (Index r = 0; r < n; ++r)
      for (Index h = 0; h < H; ++h)
        for (Index e = 0; e < d_; ++e)
          xv(r, h, e) = query ? scores_kernels::to_arith<double>(q_(b + r, h, e))
                              : scores_kernels::to_arith<double>(k_(b + r, h, e));
    if (query)
      encode_queries_backward(enc_, ro(xv), Positions(rel), dv, token_range(dq_, b, n), eg);
    else
      encode_keys_backward(enc_, ro(xv), Positions(rel), dv, token_range(dk_, b, n), eg);
    add_to(pos_out, b, dpos);
  }

  void query_tile(Index I) {
    const Index ib = qp_.begin[std::size_t(I)], ni = qp_.rows(I);
    at_least(ws_.qhat, ni * Hq_ * d_);
    at_least(ws_.dqhat, ni * Hq_ * d_);
    std::fill(ws_.dqhat.begin(), ws_.dqhat.begin() + ni * Hq_ * d_, 0.0);
    encode_tile(/*query=*/true, I, ws_.qhat);
    double tmax = tq_[ib];
    for (Index r = 1; r < ni; ++r) tmax = std::max(tmax, tq_[ib + r]);
    for (Index J = 0; J < kp_.size(); ++J) {
      const Index jb = kp_.begin[std::size_t(J)], nj = kp_.rows(J);
      double smin = tk_[jb];
      for (Index c = 1; c < nj; ++c) smin = std::min(smin, tk_[jb + c]);
      if (opt_.causal && smin > tmax) continue;  // every pair masked
      pair(I, J);
    }
    backward_tile(/*query=*/true, I, ws_.dqhat);
  }

  // One query tile against one key tile, every head.
  void pair(Index I, Index J) {
    const Index ib = qp_.begin[std::size_t(I)], ni = qp_.rows(I);
    const Index jb = kp_.begin[std::size_t(J)], nj = kp_.rows(J);
    const double delta = qp_.anchor[std::size_t(I)] - kp_.anchor[std::size_t(J)];
    const bool shifted = delta != 0;
    const bool want_pos = g_.query_positions || g_.key_positions;
    const bool want_r = !opt_.decay.empty() && (g_.decay || want_pos);
    const bool want_bias = !opt_.alibi_slopes.empty() && (g_.alibi_slopes || want_pos);
    auto W = ws_.W.topLeftCorner(ni, nj);
    auto kt = ws_.kt.topLeftCorner(nj, d_);
    auto u = ws_.u.topLeftCorner(nj, d_);
    RowMatrix ax;
    if (shifted) ax = cross(enc_).A(real_t<typename E::Scalar>(delta)).template cast<double>();
    for (Index kh = 0; kh < Hk_; ++kh) {
      const Rows kh_rows = head_rows(ws_.khat, jb, nj, Hk_, kh, d_);
      if (shifted)  // rows k̃_jᵀ = k̂_jᵀ A_X(Δ)ᵀ
        kt.noalias() = kh_rows * ax.transpose();
      else
        kt = kh_rows;
      u.setZero();
      for (Index h = kh * G_; h < (kh + 1) * G_; ++h) {
        const Rows qh = head_rows(ws_.qhat, 0, ni, Hq_, h, d_);
        weights(h, ib, ni, jb, nj, W);
        head_rows(ws_.dqhat, 0, ni, Hq_, h, d_).noalias() += W * kt;
        u.noalias() += W.transpose() * qh;
        if (want_r) ws_.raw.topLeftCorner(ni, nj).noalias() = qh * kt.transpose();
        if (want_r || want_bias) epilogue(h, ib, ni, jb, nj, W, want_r);
      }
      if (shifted && g_.parameters) {  // ∂A_X(Δ)/∂θ: Σ_j u_jᵀ ∂A_X(Δ) k̂_j
        const Eigen::Matrix<R, Eigen::Dynamic, Eigen::Dynamic> U = u.transpose().template cast<R>(),
                                                               V = kh_rows.transpose().template cast<R>();
        encoding_derivatives<std::decay_t<decltype(cross(enc_))>>::bilinear(
            cross(enc_), R(delta), U, V, g_.parameters->data(), 1);
      }
      if (shifted)  // rows (A_X(Δ)ᵀ u_j)ᵀ = u_jᵀ A_X(Δ)
        head_rows(ws_.dkhat, jb, nj, Hk_, kh, d_).noalias() += u * ax;
      else
        head_rows(ws_.dkhat, jb, nj, Hk_, kh, d_) += u;
    }
  }

  // W_ij = dS_ij scale γ_h^τ, 0 where masked.
  void weights(Index h, Index ib, Index ni, Index jb, Index nj, Tile W) const {
    const double lg = opt_.decay.empty() ? 0.0 : std::log(opt_.decay[std::size_t(h)]);
    for (Index r = 0; r < ni; ++r) {
      const double t = tq_[ib + r];
      for (Index c = 0; c < nj; ++c) {
        const double s = tk_[jb + c];
        if (opt_.causal && s > t) {
          W(r, c) = 0;
          continue;
        }
        const double f = lg == 0 ? opt_.scale : opt_.scale * std::exp(lg * (t - s));
        W(r, c) = f * scores_kernels::to_arith<double>(ds_(h, ib + r, jb + c));
      }
    }
  }

  // The ALiBi and decay gradients, and their share of the position gradients.
  void epilogue(Index h, Index ib, Index ni, Index jb, Index nj, const Tile& W, bool with_raw) {
    const double m = opt_.alibi_slopes.empty() ? 0.0 : opt_.alibi_slopes[std::size_t(h)];
    const double gamma = opt_.decay.empty() ? 1.0 : opt_.decay[std::size_t(h)];
    const double lg = std::log(gamma);
    double dm = 0, dg = 0;
    for (Index r = 0; r < ni; ++r) {
      const double t = tq_[ib + r];
      double dt = 0;
      for (Index c = 0; c < nj; ++c) {
        const double s = tk_[jb + c];
        if (opt_.causal && s > t) continue;
        const double tau = t - s, dsv = scores_kernels::to_arith<double>(ds_(h, ib + r, jb + c));
        double p = -m * dsv;  // ∂S/∂t of the bias, times dS
        dm -= dsv * tau;
        if (with_raw) {
          const double wr = W(r, c) * ws_.raw(r, c);
          dg += wr * tau / gamma;
          p += wr * lg;
        }
        dt += p;
        if (g_.key_positions) (*g_.key_positions)[std::size_t(jb + c)] -= R(p);
      }
      if (g_.query_positions) (*g_.query_positions)[std::size_t(ib + r)] += R(dt);
    }
    if (g_.alibi_slopes) (*g_.alibi_slopes)[std::size_t(h)] += dm;
    if (g_.decay) (*g_.decay)[std::size_t(h)] += dg;
  }

  const E& enc_;
  const TensorView<Tq>& q_;
  const Positions& tq_;
  const TensorView<Tk>& k_;
  const Positions& tk_;
  const TensorView<Td>& ds_;
  const TensorView<Tdq>& dq_;
  const TensorView<Tdk>& dk_;
  const ScoreOptions& opt_;
  const ScoresGradients<R>& g_;
  const Index nq_, nk_, Hq_, Hk_, d_, G_;
  scores_kernels::TilePlan qp_, kp_;
  Workspace& ws_ = Workspace::local();
};

}  // namespace scores_backward
}  // namespace detail

/// Backward of scores(enc, q, tq, k, tk, out, opt): d_scores = ∂L/∂out [Hq, nq, nk] (float or
/// double; its masked entries are not read). Writes dq [nq, Hq, d] and dk [nk, Hk, d] (either
/// may be empty: not wanted; neither may overlap q, k, d_scores or each other) and ADDS the
/// gradients asked for in grads. Throws peal::invalid_argument before writing anything on
/// inconsistent extents, positions, options or gradient sizes.
template <class E, class Tq, class Tk, class Td, class Tdq, class Tdk>
void scores_backward(const E& enc, TensorView<Tq> q, const Positions& tq, TensorView<Tk> k,
                     const Positions& tk, TensorView<Td> d_scores, TensorView<Tdq> dq,
                     TensorView<Tdk> dk, const ScoreOptions& opt = {},
                     ScoresGradients<real_t<typename E::Scalar>> grads = {}) {
  namespace sb = detail::scores_backward;
  detail::encode_backward::require_derivatives<E>();
  static_assert(std::is_same<std::remove_cv_t<Td>, float>::value ||
                    std::is_same<std::remove_cv_t<Td>, double>::value,
                "peal::scores_backward: d_scores must be a view of float or double");
  using R = real_t<typename E::Scalar>;
  sb::check(enc, q, tq, k, tk, d_scores, dq, dk, opt, grads);
  if (q.tokens() == 0 || k.tokens() == 0 || q.heads() == 0) return;  // dq, dk have no entries
  const auto qr = detail::ro(q);
  const auto kr = detail::ro(k);
  const auto dr = detail::ro(d_scores);
  sb::Run<E, const std::remove_cv_t<Tq>, const std::remove_cv_t<Tk>, const std::remove_cv_t<Td>,
          Tdq, Tdk, R>
      run(enc, qr, tq, kr, tk, dr, dq, dk, opt, grads);
  run.run();
}

}  // namespace peal
