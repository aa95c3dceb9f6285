// The driver of the fused backward kernels (scores_backward.hpp, attention_backward.hpp;
// docs/gradients.md §4). Both need, per query head h and key head h / G, the gradient W_ij of
// the loss with respect to the raw score q_iᵀ A(t_i − s_j) k_j; from it this driver forms
//   dq̂_i += Σ_j W_ij A_X(Δ) k̂_j,   dk̂_j += A_X(Δ)ᵀ Σ_i W_ij q̂_i,
//   ∂L/∂θ += Σ_j (Σ_i W_ij q̂_i)ᵀ ∂A_X(Δ)/∂θ k̂_j,
// per tile pair of anchors T_I, S_J (Δ = T_I − S_J; q̂_i = F(t_i − T_I) q_i, k̂_j = G(s_j − S_J) k_j;
// A_X is A, or a basis change's inner A), and turns dq̂, dk̂ into dq, dk, ∂L/∂θ, ∂L/∂t, ∂L/∂s by
// the encode backward at the relative positions (encode_backward.hpp). The tiles are the
// forward's (detail/tiled/tile_plan.hpp: ρ h ≤ 128 ln 2, (1 + 4h)^p ≤ 2^20); pure rotations take
// anchor 0 (Δ = 0, q̂ = F(t) q).
//
// What W is belongs to the caller, an epilogue Epi with
//   bool skip(double tmin, double tmax, double smin, double smax) const;   every pair masked
//   void weights(Index h, Index kh, Index ib, Index ni, Index jb, Index nj, const Rows<C>& qh,
//                const Tile<C>& kt, Tile<C> W);   W for query head h, rows ib.., keys jb..; kt holds
//                the rows (A_X(Δ) k̂_j)ᵀ, so qh ktᵀ is the raw score tile
// and its own gradients (ALiBi slopes, decays, sinks, the bias's share of the positions).
// Arithmetic in C (float, or double when an input stores double, as the forward's); positions,
// tile anchors and parameters in double; one thread, deterministic (tiles and heads in a
// fixed order).
#pragma once

#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../derivatives.hpp"
#include "../../encode_backward.hpp"
#include "../../errors.hpp"
#include "../../positions.hpp"
#include "../../view.hpp"
#include "../coders/coders.hpp"
#include "../overlap.hpp"
#include "../storage.hpp"
#include "tile_plan.hpp"

namespace peal {
namespace detail {
namespace backward_run {

// The encoding whose A the cross factor of two anchors is: F(a)ᵀ X G(b) = A(a + Δ − b) needs
// X = A(Δ), or for a basis change (F(a)ᵀ = P A_J(a), G(b) = A_J(−b) P⁻¹) X = A_J(Δ).
template <class E>
const E& cross(const E& e) {
  return e;
}
template <class I>
const auto& cross(const BasisChange<I>& e) {
  return cross(e.inner());
}

// Matrices of the arithmetic type C (float, or double when an input stores double: the
// forward's detail::arith_t).
template <class C>
using RowMatrix = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class C>
using Rows = Eigen::Map<RowMatrix<C>, 0, Eigen::OuterStride<>>;
template <class C>
using Tile = Eigen::Ref<RowMatrix<C>, 0, Eigen::OuterStride<>>;

// Head h of a [tokens, heads, d] buffer, rows [b, b + n).
template <class C>
Rows<C> head_rows(std::vector<C>& v, Index b, Index n, Index heads, Index h, Index d) {
  return Rows<C>(v.data() + (b * heads + h) * d, n, d, Eigen::OuterStride<>(heads * d));
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
template <class C>
struct Workspace {
  std::vector<C> khat, dkhat, qhat, dqhat, xbuf;
  RowMatrix<C> W, kt, u;
  static Workspace& local() {
    thread_local Workspace w;
    return w;
  }
};
template <class T>
void at_least(std::vector<T>& v, Index n) {
  if (Index(v.size()) < n) v.resize(std::size_t(n));
}
template <class C>
void at_least(RowMatrix<C>& m, Index rows, Index cols) {
  if (m.rows() < rows || m.cols() < cols)
    m.resize(std::max(rows, Index(m.rows())), std::max(cols, Index(m.cols())));
}

// The tiles of one side: the forward's plan for growing/decaying encodings, one anchor 0 per
// tile of max_rows tokens for pure rotations.
inline tiled::TilePlan plan(const Positions& p, Index n, Index max_rows, double h,
                                     bool pure) {
  std::vector<double> t(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i) t[std::size_t(i)] = p[i];
  tiled::TilePlan tp = tiled::plan_tiles(
      t.data(), n, max_rows, pure ? std::numeric_limits<double>::infinity() : h);
  if (pure) std::fill(tp.anchor.begin(), tp.anchor.end(), 0.0);
  return tp;
}

// ---- Validation shared by the backward kernels (scores_backward.hpp, attention_backward.hpp)
// An output gradient view: empty (not wanted) or with the extents of its input, and touching
// none of the views it is read beside.
template <class TD, class TX, class... Read>
void check_output(const std::string& w, const TensorView<TD>& d, const char* name,
                  const TensorView<TX>& like, const char* like_name,
                  const std::pair<const Read*, const char*>&... read) {
  if (d.empty()) return;
  if (d.tokens() != like.tokens() || d.heads() != like.heads() || d.dim() != like.dim())
    fail(w + ": " + name + " must have the extents of " + like_name + ", or be empty");
  auto apart = [&](const auto& v, const char* other) {
    if (!v.empty() && may_overlap(d, v)) fail(w + ": " + name + " overlaps " + other);
  };
  (apart(*read.first, read.second), ...);
}
// Every entry of a gradient view 0 (a kernel with nothing to sum: no keys, or no queries).
template <class T>
void set_zero(const TensorView<T>& x) {
  for (Index i = 0; i < x.tokens(); ++i)
    for (Index h = 0; h < x.heads(); ++h)
      for (Index e = 0; e < x.dim(); ++e) x(i, h, e) = from_arith<std::remove_cv_t<T>>(0.0);
}
// A gradient vector: n entries when wanted.
template <class T>
void check_size(const std::string& w, const std::vector<T>* g, Index n, const char* what) {
  if (g && Index(g->size()) != n)
    fail(w + ": the " + what + " gradient has " + std::to_string(g->size()) + " entries, expected " +
         std::to_string(n));
}
// The gradient of a per-head option (ALiBi slopes, decays, sinks): only when the option is set.
inline void check_head_option(const std::string& w, const std::vector<double>* g,
                              const std::vector<double>& option, Index Hq, const char* what) {
  if (g && option.empty())
    fail(w + ": the " + std::string(what) + " gradient was asked for, but the options have none");
  check_size(w, g, Hq, what);
}

/// Where the encoding's gradients go (each may be null) and whether the keys arrive encoded
/// (attention's keys_encoded: k holds G(s) k, pure rotations only; dk is then the gradient of
/// those rows and the keys add nothing to θ or s).
template <class R>
struct Targets {
  std::vector<R>* parameters = nullptr;
  std::vector<R>* query_positions = nullptr;
  std::vector<R>* key_positions = nullptr;
  bool keys_encoded = false;
};

template <class C, class E, class Tq, class Tk, class Tdq, class Tdk, class R, class Epi>
class Run {
 public:
  Run(const E& enc, const TensorView<Tq>& q, const Positions& tq, const TensorView<Tk>& k,
      const Positions& tk, const TensorView<Tdq>& dq, const TensorView<Tdk>& dk,
      const Targets<R>& g, Epi& epi)
      : enc_(enc), q_(q), tq_(tq), k_(k), tk_(tk), dq_(dq), dk_(dk), g_(g), epi_(epi),
        nq_(q.tokens()), nk_(k.tokens()), Hq_(q.heads()), Hk_(k.heads()), d_(q.dim()),
        G_(Hq_ / Hk_) {
    const coders::coder_t<double, E> coder(enc);
    using L = tiled::rebase_limits<C>;
    const double rate = coder.rate();  // once: a fallback coder solves for its eigenvalues
    const int degree = coder.degree();
    const bool pure = g.keys_encoded || (rate == 0 && degree == 0);
    const double h = tiled::max_half_spread(rate, degree, L::exp_budget, L::poly_budget);
    qp_ = plan(tq, nq_, 256, h, pure);
    kp_ = plan(tk, nk_, 512, h, pure);
    at_least(ws_.W, qp_.max_rows, kp_.max_rows);
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
  std::vector<double> relative(bool query, Index I) const {
    const tiled::TilePlan& p = query ? qp_ : kp_;
    const Positions& pos = query ? tq_ : tk_;
    const Index b = p.begin[std::size_t(I)], n = p.rows(I);
    std::vector<double> rel(static_cast<std::size_t>(n));
    for (Index r = 0; r < n; ++r) rel[std::size_t(r)] = pos[b + r] - p.anchor[std::size_t(I)];
    return rel;
  }

  // q̂ (k̂) of tile I: F(t − T_I) q (G(s − S_J) k) into rows [b, b + n) of buf (the query
  // buffer holds one tile).
  void encode_tile(bool query, Index I, std::vector<C>& buf) {
    if (d_ == 0) return;  // no coordinates: only the epilogue's gradients
    const tiled::TilePlan& p = query ? qp_ : kp_;
    const Index b = p.begin[std::size_t(I)], n = p.rows(I), H = query ? Hq_ : Hk_;
    const Index off = query ? 0 : b;
    const TensorView<C> dst(buf.data() + off * H * d_, n, H, d_);
    if (!query && g_.keys_encoded) {  // k̂ = G(s) k as given
      for (Index r = 0; r < n; ++r)
        for (Index h = 0; h < H; ++h)
          for (Index e = 0; e < d_; ++e) dst(r, h, e) = detail::to_arith<C>(k_(b + r, h, e));
      return;
    }
    const std::vector<double> rel = relative(query, I);
    if (query)
      encode_queries(enc_, token_range(q_, b, n), dst, Positions(rel));
    else
      encode_keys(enc_, token_range(k_, b, n), dst, Positions(rel));
  }

  // dq̂ (dk̂) of a tile through the encode backward at the relative positions.
  void backward_tile(bool query, Index I, std::vector<C>& dbuf) {
    if (d_ == 0) return;
    const tiled::TilePlan& p = query ? qp_ : kp_;
    const Index b = p.begin[std::size_t(I)], n = p.rows(I), H = query ? Hq_ : Hk_;
    const Index off = query ? 0 : b;
    const TensorView<const C> dv(dbuf.data() + off * H * d_, n, H, d_);
    if (!query && g_.keys_encoded) {  // dk = dk̂
      if (!dk_.empty())
        for (Index r = 0; r < n; ++r)
          for (Index h = 0; h < H; ++h)
            for (Index e = 0; e < d_; ++e)
              dk_(b + r, h, e) = from_arith<std::remove_cv_t<Tdk>>(dv(r, h, e));
      return;
    }
    std::vector<R>* pos_out = query ? g_.query_positions : g_.key_positions;
    std::vector<R> dpos(pos_out ? std::size_t(n) : 0, R(0));
    const EncodeGradients<R> eg{g_.parameters, pos_out ? &dpos : nullptr};
    // The rows in C, as dv: the rotation banks' direct pair sums need one storage type.
    at_least(ws_.xbuf, n * H * d_);
    const TensorView<C> xv(ws_.xbuf.data(), n, H, d_);
    for (Index r = 0; r < n; ++r)
      for (Index h = 0; h < H; ++h)
        for (Index e = 0; e < d_; ++e)
          xv(r, h, e) = query ? detail::to_arith<C>(q_(b + r, h, e))
                              : detail::to_arith<C>(k_(b + r, h, e));
    const std::vector<double> rel = relative(query, I);
    if (query)
      encode_queries_backward(enc_, ro(xv), Positions(rel), dv, token_range(dq_, b, n), eg);
    else
      encode_keys_backward(enc_, ro(xv), Positions(rel), dv, token_range(dk_, b, n), eg);
    if (pos_out)
      for (Index r = 0; r < n; ++r) (*pos_out)[std::size_t(b + r)] += dpos[std::size_t(r)];
  }

  void query_tile(Index I) {
    const Index ib = qp_.begin[std::size_t(I)], ni = qp_.rows(I);
    at_least(ws_.qhat, ni * Hq_ * d_);
    at_least(ws_.dqhat, ni * Hq_ * d_);
    std::fill(ws_.dqhat.begin(), ws_.dqhat.begin() + ni * Hq_ * d_, 0.0);
    encode_tile(/*query=*/true, I, ws_.qhat);
    const auto [tmin, tmax] = span(tq_, ib, ni);
    for (Index J = 0; J < kp_.size(); ++J) {
      const Index jb = kp_.begin[std::size_t(J)], nj = kp_.rows(J);
      const auto [smin, smax] = span(tk_, jb, nj);
      if (!epi_.skip(tmin, tmax, smin, smax)) pair(I, J);
    }
    backward_tile(/*query=*/true, I, ws_.dqhat);
  }
  static std::pair<double, double> span(const Positions& p, Index b, Index n) {
    double lo = p[b], hi = p[b];
    for (Index r = 1; r < n; ++r) lo = std::min(lo, p[b + r]), hi = std::max(hi, p[b + r]);
    return {lo, hi};
  }

  // One query tile against one key tile, every head.
  void pair(Index I, Index J) {
    const Index ib = qp_.begin[std::size_t(I)], ni = qp_.rows(I);
    const Index jb = kp_.begin[std::size_t(J)], nj = kp_.rows(J);
    const double delta = qp_.anchor[std::size_t(I)] - kp_.anchor[std::size_t(J)];
    const bool shifted = delta != 0;
    auto W = ws_.W.topLeftCorner(ni, nj);
    auto kt = ws_.kt.topLeftCorner(nj, d_);
    auto u = ws_.u.topLeftCorner(nj, d_);
    RowMatrix<C> ax;  // A_X(Δ), dense: applied to a tile's rows by a GEMM
    if (shifted) ax = cross(enc_).A(real_t<typename E::Scalar>(delta)).template cast<C>();
    for (Index kh = 0; kh < Hk_; ++kh) {
      const Rows<C> kh_rows = head_rows(ws_.khat, jb, nj, Hk_, kh, d_);
      if (shifted)  // rows k̃_jᵀ = k̂_jᵀ A_X(Δ)ᵀ
        kt.noalias() = kh_rows * ax.transpose();
      else
        kt = kh_rows;
      u.setZero();
      for (Index h = kh * G_; h < (kh + 1) * G_; ++h) {
        const Rows<C> qh = head_rows(ws_.qhat, 0, ni, Hq_, h, d_);
        epi_.weights(h, kh, ib, ni, jb, nj, qh, kt, W);
        head_rows(ws_.dqhat, 0, ni, Hq_, h, d_).noalias() += W * kt;
        u.noalias() += W.transpose() * qh;
      }
      if (shifted && g_.parameters) {  // ∂A_X(Δ)/∂θ: Σ_j u_jᵀ ∂A_X(Δ) k̂_j
        using M = Eigen::Matrix<R, Eigen::Dynamic, Eigen::Dynamic>;
        const M U = u.transpose().template cast<R>(), V = kh_rows.transpose().template cast<R>();
        encoding_derivatives<std::decay_t<decltype(cross(enc_))>>::bilinear(
            cross(enc_), R(delta), U, V, g_.parameters->data(), 1);
      }
      if (shifted)  // rows (A_X(Δ)ᵀ u_j)ᵀ = u_jᵀ A_X(Δ)
        head_rows(ws_.dkhat, jb, nj, Hk_, kh, d_).noalias() += u * ax;
      else
        head_rows(ws_.dkhat, jb, nj, Hk_, kh, d_) += u;
    }
  }

  const E& enc_;
  const TensorView<Tq>& q_;
  const Positions& tq_;
  const TensorView<Tk>& k_;
  const Positions& tk_;
  const TensorView<Tdq>& dq_;
  const TensorView<Tdk>& dk_;
  const Targets<R>& g_;
  Epi& epi_;
  const Index nq_, nk_, Hq_, Hk_, d_, G_;
  tiled::TilePlan qp_, kp_;
  Workspace<C>& ws_ = Workspace<C>::local();
};

}  // namespace backward_run
}  // namespace detail
}  // namespace peal
