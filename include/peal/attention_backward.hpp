// Backward of attention() (attention.hpp; docs/gradients.md §4), FlashAttention-2's in the
// encoded frame. The forward, per query head h and query i, over the visible keys j:
//   y_ij = scale q_iᵀ A(τ) k_j,  x_ij = cap(y_ij) − m_h τ  (cap(y) = c tanh(y / c), or y),
//   P_ij = exp(x_ij − lse_i),  out_i = Σ_j P_ij v_j,  lse_i = log(e^{σ_h} + Σ_j e^{x_ij}).
// Given dO = ∂L/∂out and the forward's out and lse (AttentionOptions::lse):
//   D_i = dO_i · out_i,  dV_j += Σ_i P_ij dO_i,  dP_ij = dO_i · v_j,  dx_ij = P_ij (dP_ij − D_i),
//   W_ij = ∂L/∂(q_iᵀ A(τ) k_j) = dx_ij cap'(y_ij) scale,  cap'(y) = 1 − (cap(y) / c)²,
// and W goes through the scores backward's driver (detail/tiled/backward_run.hpp: anchored tiles,
// cross factors, the encode backward at relative positions) into dq, dk, ∂L/∂θ, ∂L/∂t, ∂L/∂s.
// P is recomputed per tile pair from the same rebased rows (never stored: O(n d) memory).
// The epilogue's own gradients: ∂L/∂m_h = −Σ dx_ij τ_ij (and −m_h Σ_j dx_ij to ∂L/∂t_i, the
// opposite to ∂L/∂s_j), ∂L/∂σ_h = −Σ_i e^{σ_h − lse_i} D_i (the sink's share of each row).
// Masked pairs (causal, window) and rows with lse = −inf (nothing visible) contribute nothing.
// With keys_encoded (keys stored as G(s) k, pure rotations only) dk is the gradient of those
// stored rows, and the keys add nothing to θ or s. Arithmetic: the forward's (double if q, k
// or v stores double, float otherwise); positions, D and the gradients of the slopes, sinks
// and parameters in double. Threads (opt.threads) over shards of the query tiles,
// deterministic: any thread count gives the bits of one thread. PerHead (one encoding per query
// head): each head's backward on its slices, below. N-D points: scores_nd_backward.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "attention.hpp"
#include "detail/overlap.hpp"
#include "detail/tiled/backward_run.hpp"
#include "errors.hpp"
#include "positions.hpp"
#include "scores_backward.hpp"
#include "view.hpp"

namespace peal {

/// Where the gradients of attention_backward go (each may be null: not wanted). All are ADDED to.
template <class R>
struct AttentionGradients {
  std::vector<R>* parameters = nullptr;         ///< parameter_count(enc) entries
  std::vector<R>* query_positions = nullptr;    ///< nq entries
  std::vector<R>* key_positions = nullptr;      ///< nk entries
  std::vector<double>* alibi_slopes = nullptr;  ///< Hq entries (opt.alibi_slopes set)
  std::vector<double>* sinks = nullptr;         ///< Hq entries (opt.sinks set)
};

namespace detail {
namespace attention_backward {

namespace br = backward_run;

template <class E, class Tq, class Tk, class Tv, class To, class Tdo, class Tdq, class Tdk,
          class Tdv, class R>
void check(const E& enc, const TensorView<Tq>& q, const Positions& tq, const TensorView<Tk>& k,
           const Positions& tk, const TensorView<Tv>& v, const TensorView<To>& out,
           const std::vector<double>& lse, const TensorView<Tdo>& dout, const TensorView<Tdq>& dq,
           const TensorView<Tdk>& dk, const TensorView<Tdv>& dv, const AttentionOptions& opt,
           const AttentionGradients<R>& g) {
  const std::string w = "attention_backward";
  tiled::check_attention(enc, q, tq, k, tk, v, out, opt);
  const Index nq = q.tokens(), nk = k.tokens(), Hq = q.heads();
  if (Index(lse.size()) != nq * Hq)
    fail(w + ": lse has " + std::to_string(lse.size()) + " entries, expected nq Hq = " +
         std::to_string(nq * Hq) + " (the forward's AttentionOptions::lse)");
  if (dout.tokens() != out.tokens() || dout.heads() != out.heads() || dout.dim() != out.dim())
    fail(w + ": d_out must have the extents of out");
  // Each output against every input and the outputs checked before it.
  const auto Q = std::make_pair(&q, "q");
  const auto K = std::make_pair(&k, "k");
  const auto V = std::make_pair(&v, "v");
  const auto O = std::make_pair(&out, "out");
  const auto DO = std::make_pair(&dout, "d_out");
  br::check_output(w, dq, "dq", q, "q", Q, K, V, O, DO);
  br::check_output(w, dk, "dk", k, "k", Q, K, V, O, DO, std::make_pair(&dq, "dq"));
  br::check_output(w, dv, "dv", v, "v", Q, K, V, O, DO, std::make_pair(&dq, "dq"),
                   std::make_pair(&dk, "dk"));
  br::check_size(w, g.parameters, Index(parameter_count(enc)), "parameter");
  br::check_size(w, g.query_positions, nq, "query position");
  br::check_size(w, g.key_positions, nk, "key position");
  br::check_head_option(w, g.alibi_slopes, opt.alibi_slopes, Hq, "ALiBi slope");
  br::check_head_option(w, g.sinks, opt.sinks, Hq, "sink");
}

// Working memory of the epilogue, kept by the calling thread between calls (as the driver's,
// detail/tiled/backward_run.hpp): dO and V in the arithmetic type C, dV, D and the tile's P, dP,
// cap'; positions in double.
template <class C>
struct Work {
  br::Buffer<C> dout, vd, dvacc, lse_h, D_h;  // aligned: the bits never depend on the heap
  std::vector<double> D, tcol, srow;
  br::RowMatrix<C> P, dP, Cap;
  static Work& local() {
    thread_local Work w;
    return w;
  }
};

// The epilogue of attention (detail/tiled/backward_run.hpp): P recomputed from the raw score tile,
// dV, and W = scale cap' P (dP − D); the ALiBi and sink gradients.
template <class C, class Tv, class To, class Tdo, class R>
class Epilogue {
 public:
  Epilogue(const TensorView<Tv>& v, const TensorView<To>& out, const std::vector<double>& lse,
           const TensorView<Tdo>& dout, const Positions& tq, const Positions& tk,
           const AttentionOptions& opt, double scale, const AttentionGradients<R>& g)
      : lse_(lse), tq_(tq), tk_(tk), opt_(opt), g_(g), nq_(out.tokens()), nk_(v.tokens()),
        Hq_(out.heads()), Hk_(v.heads()), dv_(v.dim()), scale_(scale) {
    // dO, V in C (the GEMMs' operands) and D_i = dO_i · out_i (in double).
    br::at_least(w_.dout, nq_ * Hq_ * dv_);
    br::at_least(w_.vd, nk_ * Hk_ * dv_);
    br::at_least(w_.dvacc, nk_ * Hk_ * dv_);
    std::fill(w_.dvacc.begin(), w_.dvacc.begin() + nk_ * Hk_ * dv_, 0.0);
    br::at_least(w_.D, nq_ * Hq_);
    br::row_chunks(nq_, Hq_ * dv_, opt.threads, [&](Index i0, Index i1) {
      for (Index i = i0; i < i1; ++i)
        for (Index h = 0; h < Hq_; ++h) {
          double dsum = 0;
          for (Index e = 0; e < dv_; ++e) {
            const double a = detail::to_arith<double>(dout(i, h, e));
            w_.dout[std::size_t((i * Hq_ + h) * dv_ + e)] = C(a);
            dsum += a * detail::to_arith<double>(out(i, h, e));
          }
          w_.D[std::size_t(i * Hq_ + h)] = dsum;
        }
    });
    br::row_chunks(nk_, Hk_ * dv_, opt.threads, [&](Index j0, Index j1) {
      for (Index j = j0; j < j1; ++j)
        for (Index h = 0; h < Hk_; ++h)
          for (Index e = 0; e < dv_; ++e)
            w_.vd[std::size_t((j * Hk_ + h) * dv_ + e)] = detail::to_arith<C>(v(j, h, e));
    });
    // Positions, and lse and D head-major, as contiguous arrays for the tile operations.
    br::at_least(w_.tcol, nq_), br::at_least(w_.srow, nk_);
    for (Index i = 0; i < nq_; ++i) w_.tcol[std::size_t(i)] = tq[i];
    for (Index j = 0; j < nk_; ++j) w_.srow[std::size_t(j)] = tk[j];
    br::at_least(w_.lse_h, nq_ * Hq_), br::at_least(w_.D_h, nq_ * Hq_);
    for (Index i = 0; i < nq_; ++i)
      for (Index h = 0; h < Hq_; ++h) {
        w_.lse_h[std::size_t(h * nq_ + i)] = C(lse[std::size_t(i * Hq_ + h)]);
        w_.D_h[std::size_t(h * nq_ + i)] = C(w_.D[std::size_t(i * Hq_ + h)]);
      }
  }

  // A shard's sums (detail/tiled/backward_run.hpp): dV (the first shard's: the total itself),
  // the slopes' and the key positions'.
  struct Part {
    br::Buffer<C> own;
    C* dv = nullptr;
    std::vector<double> slopes;
    std::vector<R> key_positions;
  };
  void reset(Part& p, bool first) const {
    if (first) {
      p.dv = w_.dvacc.data();  // zero (the constructor)
    } else {
      p.own.assign(std::size_t(nk_ * Hk_ * dv_), C(0));
      p.dv = p.own.data();
    }
    p.slopes.assign(g_.alibi_slopes ? std::size_t(Hq_) : 0, 0.0);
    p.key_positions.assign(g_.key_positions ? std::size_t(nk_) : 0, R(0));
  }
  double part_bytes() const {
    return double(nk_ * Hk_ * dv_) * sizeof(C) + (g_.key_positions ? double(nk_) * sizeof(R) : 0.0);
  }
  // The shards' sums into the totals, each entry in shard order (dV over threads by entries).
  void join(const std::vector<const Part*>& parts, int threads) {
    br::join_shards(w_.dvacc.data(), nk_ * Hk_ * dv_, Index(parts.size()),
                    [&](Index s) -> const C* { return parts[std::size_t(s)]->dv; }, threads);
    for (const Part* p : parts) {
      for (std::size_t h = 0; h < p->slopes.size(); ++h) (*g_.alibi_slopes)[h] += p->slopes[h];
      for (std::size_t j = 0; j < p->key_positions.size(); ++j)
        (*g_.key_positions)[j] += p->key_positions[j];
    }
  }

  bool causal() const { return opt_.causal; }
  bool skip(double tmin, double tmax, double smin, double smax) const {
    return (opt_.causal && smin > tmax) || !(tmin - smax < opt_.window);
  }
  bool masked(double t, double s) const {
    return (opt_.causal && s > t) || !(t - s < opt_.window);
  }

  // Whole-tile array operations (Eigen's vectorised exp and tanh); masks and empty rows after.
  // The tile's matrices are the running thread's (Work<C>::local()); the data read are the
  // calling thread's (w_).
  void weights(Part& part, Index h, Index kh, Index ib, Index ni, Index jb, Index nj,
               const br::Rows<C>& qh, const br::Tile<C>& kt, br::Tile<C> W) {
    Work<C>& tw = Work<C>::local();
    // P's rows start on 64 bytes whatever the buffer's history (a whole number of 16-entry
    // packets per row): Eigen's vectorised exp and tanh run scalar code on the entries before a
    // row's first aligned one, and those round differently, so a stride left by an earlier call
    // or by another thread would change the bits.
    br::at_least(tw.P, ni, (nj + 15) / 16 * 16);
    br::at_least(tw.dP, ni, nj);
    br::at_least(tw.Cap, ni, nj);
    auto P = tw.P.topLeftCorner(ni, nj).array();
    auto dP = tw.dP.topLeftCorner(ni, nj);
    auto Cd = tw.Cap.topLeftCorner(ni, nj).array();  // cap'(y) with a softcap
    W.noalias() = qh * kt.transpose();               // q̂ᵀ A_X(Δ) k̂ = qᵀ A(τ) k
    const br::Rows<C> dO = br::head_rows(w_.dout, ib, ni, Hq_, h, dv_);
    const br::Rows<C> V = br::head_rows(w_.vd, jb, nj, Hk_, kh, dv_);
    dP.noalias() = dO * V.transpose();
    const double c = opt_.softcap, m = opt_.alibi_slopes.empty() ? 0.0 : opt_.alibi_slopes[std::size_t(h)];
    const auto t = Eigen::Map<const Eigen::ArrayXd>(w_.tcol.data() + ib, ni);
    const auto s = Eigen::Map<const Eigen::Array<double, 1, Eigen::Dynamic>>(w_.srow.data() + jb, nj);
    using Col = Eigen::Array<C, Eigen::Dynamic, 1>;
    const auto lse = Eigen::Map<const Col>(w_.lse_h.data() + h * nq_ + ib, ni);
    const auto D = Eigen::Map<const Col>(w_.D_h.data() + h * nq_ + ib, ni);
    // x = cap(scale raw) − m τ − lse, P = e^x (τ in double: positions may be ~1e9).
    if (c > 0) {
      P = (W.array() * C(scale_ / c)).tanh();
      Cd = 1 - P.square();
      P *= C(c);
    } else {
      P = W.array() * C(scale_);
    }
    // Row by row: a replicate()d column has no packet access in Eigen, which turns the whole
    // expression, exp included, into scalar libm calls (a sixth of the backward's time).
    if (m != 0)
      for (Index r = 0; r < ni; ++r) P.row(r) -= (m * (t(r) - s)).template cast<C>();
    for (Index r = 0; r < ni; ++r) P.row(r) = (P.row(r) - lse(r)).exp();
    mask(ib, ni, jb, nj, P, lse);
    // dx = P (dP − D) (in dP), W = dx cap' scale.
    for (Index r = 0; r < ni; ++r) dP.array().row(r) = P.row(r) * (dP.array().row(r) - D(r));
    if (c > 0)
      W.array() = dP.array() * Cd * C(scale_);
    else
      W.array() = dP.array() * C(scale_);
    if (m != 0 || g_.alibi_slopes) bias(part, h, ib, ni, jb, nj, m, dP);
    br::head_rows(part.dv, jb, nj, Hk_, kh, dv_).noalias() += P.matrix().transpose() * dO;
  }

  // P = 0 on masked pairs and on rows with nothing visible (lse = −∞).
  template <class A, class L>
  void mask(Index ib, Index ni, Index jb, Index nj, A& P, const L& lse) const {
    const double inf = std::numeric_limits<double>::infinity();
    for (Index r = 0; r < ni; ++r) {
      if (lse(r) == -inf) {
        P.row(r).setZero();
        continue;
      }
      const double t = tq_[ib + r];
      if (!(opt_.causal || opt_.window < inf)) continue;
      for (Index col = 0; col < nj; ++col)
        if (masked(t, tk_[jb + col])) P(r, col) = 0;
    }
  }
  // ∂L/∂m_h = −Σ dx τ; the slope's share of the positions: −m Σ_j dx to t_i (this tile's rows:
  // no other shard has them), +m Σ_i dx to s_j (the shard's part).
  template <class M>
  void bias(Part& part, Index h, Index ib, Index ni, Index jb, Index nj, double m,
            const M& dx) const {
    double dm = 0;
    for (Index r = 0; r < ni; ++r) {
      const double t = tq_[ib + r];
      double row = 0;
      for (Index col = 0; col < nj; ++col) {
        dm -= dx(r, col) * (t - tk_[jb + col]);
        row += dx(r, col);
      }
      if (g_.query_positions) (*g_.query_positions)[std::size_t(ib + r)] -= R(m * row);
    }
    if (g_.key_positions)
      for (Index col = 0; col < nj; ++col)
        part.key_positions[std::size_t(jb + col)] += R(m * dx.col(col).sum());
    if (g_.alibi_slopes) part.slopes[std::size_t(h)] += dm;
  }

  // ∂L/∂σ_h and dv, once every tile pair is done.
  template <class Tdv>
  void finish(const TensorView<Tdv>& dv) const {
    if (g_.sinks)
      for (Index h = 0; h < Hq_; ++h) {
        double ds = 0;
        for (Index i = 0; i < nq_; ++i) {
          const double lse = lse_[std::size_t(i * Hq_ + h)];
          if (lse == -std::numeric_limits<double>::infinity()) continue;
          ds -= std::exp(opt_.sinks[std::size_t(h)] - lse) * w_.D[std::size_t(i * Hq_ + h)];
        }
        (*g_.sinks)[std::size_t(h)] += ds;
      }
    if (!dv.empty())
      br::row_chunks(nk_, Hk_ * dv_, opt_.threads, [&](Index j0, Index j1) {
        for (Index j = j0; j < j1; ++j)
          for (Index h = 0; h < Hk_; ++h)
            for (Index e = 0; e < dv_; ++e)
              dv(j, h, e) = from_arith<std::remove_cv_t<Tdv>>(
                  double(w_.dvacc[std::size_t((j * Hk_ + h) * dv_ + e)]));
      });
  }

 private:
  const std::vector<double>& lse_;
  const Positions& tq_;
  const Positions& tk_;
  const AttentionOptions& opt_;
  const AttentionGradients<R>& g_;
  const Index nq_, nk_, Hq_, Hk_, dv_;
  const double scale_;
  Work<C>& w_ = Work<C>::local();
};

}  // namespace attention_backward
}  // namespace detail

/// Backward of attention(enc, q, tq, k, tk, v, out, opt): d_out = ∂L/∂out [nq, Hq, dv], out and
/// lse (nq·Hq entries, lse[i·Hq + h]) as the forward returned them with these options. Writes
/// dq, dk, dv (each may be empty: not wanted; none may overlap an input or another) and ADDS
/// the gradients asked for in grads. Throws peal::invalid_argument before writing anything on
/// inconsistent extents, positions, options or gradient sizes, and on keys_encoded for an
/// encoding that is not a pure rotation. opt.threads threads (0: OpenMP's maximum; the result
/// does not depend on it); opt.query_tile and key_tile are validated and not used (tiles of at
/// most 256 x 512), and opt.lse is not read (the forward's lse is the argument).
template <class E, class Tq, class Tk, class Tv, class To, class Tdo, class Tdq, class Tdk,
          class Tdv>
void attention_backward(const E& enc, TensorView<Tq> q, const Positions& tq, TensorView<Tk> k,
                        const Positions& tk, TensorView<Tv> v, TensorView<To> out,
                        const std::vector<double>& lse, TensorView<Tdo> d_out, TensorView<Tdq> dq,
                        TensorView<Tdk> dk, TensorView<Tdv> dv, const AttentionOptions& opt = {},
                        AttentionGradients<real_t<typename E::Scalar>> grads = {}) {
  namespace ab = detail::attention_backward;
  namespace br = detail::backward_run;
  detail::encode_backward::require_derivatives<E>();
  using R = real_t<typename E::Scalar>;
  ab::check(enc, q, tq, k, tk, v, out, lse, d_out, dq, dk, dv, opt, grads);
  if (opt.keys_encoded && !detail::coders::is_pure_rotation<double>(enc))
    detail::fail("attention_backward: keys_encoded needs a pure rotation (as attention)");
  if (q.tokens() == 0 || q.heads() == 0) {  // no scores: dk and dv are 0 (dq has no entries)
    br::set_zero(dk);
    br::set_zero(dv);
    return;
  }
  using V = TensorView<const std::remove_cv_t<Tv>>;
  using O = TensorView<const std::remove_cv_t<To>>;
  using DO = TensorView<const std::remove_cv_t<Tdo>>;
  const V vr = detail::ro(v);
  const O outr = detail::ro(out);
  const DO dor = detail::ro(d_out);
  // The forward's arithmetic (attention.hpp): double if q, k or v stores double.
  using C = std::conditional_t<std::is_same<std::remove_cv_t<Tv>, double>::value, double,
                               detail::arith_t<Tq, Tk>>;
  using Epi = ab::Epilogue<C, const std::remove_cv_t<Tv>, const std::remove_cv_t<To>,
                           const std::remove_cv_t<Tdo>, R>;
  // The forward's scale (attention.hpp).
  const double scale = opt.scale ? *opt.scale : 1.0 / std::sqrt(double(std::max<Index>(q.dim(), 1)));
  Epi epi(vr, outr, lse, dor, tq, tk, opt, scale, grads);
  if (k.tokens() > 0) {
    const br::Targets<R> targets{grads.parameters, grads.query_positions, grads.key_positions,
                                 opt.keys_encoded};
    const auto qr = detail::ro(q);
    const auto kr = detail::ro(k);
    br::Run<C, E, const std::remove_cv_t<Tq>, const std::remove_cv_t<Tk>, Tdq, Tdk, R, Epi> run(
        enc, qr, tq, kr, tk, dq, dk, targets, epi, opt.threads);
    run.run();
  } else {  // no keys: out is 0, nothing reaches q
    br::set_zero(dq);
  }
  epi.finish(dv);
}

namespace detail {
namespace per_head {

template <class E, class Tq, class Tk, class Tv, class To, class Tdo, class Tdq, class Tdk,
          class Tdv, class R>
void attention_backward(const PerHead<E>& enc, const TensorView<Tq>& q, const Positions& tq,
                        const TensorView<Tk>& k, const Positions& tk, const TensorView<Tv>& v,
                        const TensorView<To>& out, const std::vector<double>& lse,
                        const TensorView<Tdo>& dout, const TensorView<Tdq>& dq,
                        const TensorView<Tdk>& dk, const TensorView<Tdv>& dv,
                        const AttentionOptions& opt, const AttentionGradients<R>& g) {
  const char* w = "attention_backward";
  const Index hq = q.heads(), nq = q.tokens(), G = group_size(enc, hq, k.heads(), w);
  attention_backward::check(enc, q, tq, k, tk, v, out, lse, dout, dq, dk, dv, opt, g);
  for (int h = 0; h < enc.heads() && opt.keys_encoded; ++h)  // every head, before any writes
    if (!coders::is_pure_rotation<double>(enc.head(h)))
      fail("attention_backward: keys_encoded needs a pure rotation (as attention); head " +
           std::to_string(h) + " is not one");
  GroupScratch<Tdk> dk_scratch(dk, G);
  GroupScratch<Tdv> dv_scratch(dv, G);
  HeadGradients<R> params;
  HeadGradients<double> slopes, sinks;
  std::vector<double> lse_h(static_cast<std::size_t>(nq));
  std::size_t offset = 0;
  for (Index h = 0; h < hq; ++h) {
    const E& e = enc.head(int(h));
    const std::size_t n = std::size_t(parameter_count(e));
    AttentionOptions o = opt;
    o.alibi_slopes = pick(opt.alibi_slopes, h, hq, w, "alibi_slopes");
    o.sinks = pick(opt.sinks, h, hq, w, "sinks");
    o.lse = nullptr;
    for (Index i = 0; i < nq; ++i) lse_h[std::size_t(i)] = lse[std::size_t(i * hq + h)];
    const AttentionGradients<R> gh{params.parameters(g.parameters, n), g.query_positions,
                                   g.key_positions, slopes.entry(g.alibi_slopes),
                                   sinks.entry(g.sinks)};
    const bool first = h % G == 0;
    const Index kh = h / G;
    peal::attention_backward(e, slice(q, h), tq, slice(k, kh), tk, slice(v, kh), slice(out, h),
                             lse_h, slice(dout, h), slice(dq, h),
                             first ? slice(dk, kh) : dk_scratch.view,
                             first ? slice(dv, kh) : dv_scratch.view, o, gh);
    if (!first && !dk.empty()) add_slice(dk, kh, dk_scratch.view);
    if (!first && !dv.empty()) add_slice(dv, kh, dv_scratch.view);
    if (g.parameters)
      for (std::size_t x = 0; x < n; ++x) (*g.parameters)[offset + x] += params.part[x];
    if (g.alibi_slopes) (*g.alibi_slopes)[std::size_t(h)] += slopes.one[0];
    if (g.sinks) (*g.sinks)[std::size_t(h)] += sinks.one[0];
    offset += n;
  }
}

}  // namespace per_head
}  // namespace detail

/// attention_backward with one encoding per query head (per_head.hpp): the contract of the
/// function above, head h's backward on head h's slices (its lse column, ALiBi slope and sink),
/// dk and dv summed over the query heads of each key head's group; the parameter gradient in
/// the layout of parameters(enc) ("head[h].").
template <class E, class Tq, class Tk, class Tv, class To, class Tdo, class Tdq, class Tdk,
          class Tdv>
void attention_backward(const PerHead<E>& enc, TensorView<Tq> q, const Positions& tq,
                        TensorView<Tk> k, const Positions& tk, TensorView<Tv> v,
                        TensorView<To> out, const std::vector<double>& lse,
                        TensorView<Tdo> d_out, TensorView<Tdq> dq, TensorView<Tdk> dk,
                        TensorView<Tdv> dv, const AttentionOptions& opt = {},
                        AttentionGradients<real_t<typename E::Scalar>> grads = {}) {
  detail::encode_backward::require_derivatives<E>();
  detail::per_head::attention_backward(enc, detail::ro(q), tq, detail::ro(k), tk, detail::ro(v),
                                       detail::ro(out), lse, detail::ro(d_out), dq, dk, dv, opt,
                                       grads);
}

}  // namespace peal
