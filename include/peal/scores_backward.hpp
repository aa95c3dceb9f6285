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
// (the forward's plan, detail/tiled/tile_plan.hpp: ρ h ≤ θ_exp, (1 + 4h)^p ≤ P in double), and
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
// rows by a GEMM (d / n_I of the pair's work). The driver (tiles, cross factors, encode
// backward) is detail/tiled/backward_run.hpp. Arithmetic: the forward's, double if q or k stores
// double, float otherwise (products by Eigen's GEMM; the rows are converted to that type
// before the encode backward, whose rotation-bank pair sums need one storage type); positions,
// anchors, the decay factors and the parameter gradients in double. Threads (opt.threads)
// over shards of the query tiles, deterministic: any thread count gives the bits of one thread.
// PerHead (one encoding per query head): each head's backward on its slices, below. N-D points:
// scores_nd_backward.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "detail/overlap.hpp"
#include "detail/tiled/backward_run.hpp"
#include "errors.hpp"
#include "per_head.hpp"
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

template <class E, class Tq, class Tk, class Td, class Tdq, class Tdk, class R>
void check(const E& enc, const TensorView<Tq>& q, const Positions& tq, const TensorView<Tk>& k,
           const Positions& tk, const TensorView<Td>& ds, const TensorView<Tdq>& dq,
           const TensorView<Tdk>& dk, const ScoreOptions& opt, const ScoresGradients<R>& g) {
  const std::string w = "scores_backward";
  const Index nq = q.tokens(), nk = k.tokens(), Hq = q.heads();
  if (ds.tokens() != Hq || ds.heads() != nq || ds.dim() != nk)
    fail(w + ": d_scores is " + tiled::extents(ds.tokens(), ds.heads(), ds.dim()) +
         ", expected [Hq, nq, nk] = " + tiled::extents(Hq, nq, nk));
  auto disjoint = [&](const auto& a, const auto& b, const char* what) {
    if (!a.empty() && !b.empty() && may_overlap(a, b)) fail(w + ": " + what);
  };
  disjoint(ds, q, "d_scores overlaps q");
  disjoint(ds, k, "d_scores overlaps k");
  tiled::check_scores(enc, q, tq, k, tk, ds, opt, "scores_backward");
  namespace br = backward_run;
  br::check_output(w, dq, "dq", q, "q", std::make_pair(&q, "q"), std::make_pair(&k, "k"),
                   std::make_pair(&ds, "d_scores"), std::make_pair(&dk, "dk"));
  br::check_output(w, dk, "dk", k, "k", std::make_pair(&q, "q"), std::make_pair(&k, "k"),
                   std::make_pair(&ds, "d_scores"));
  br::check_size(w, g.parameters, Index(parameter_count(enc)), "parameter");
  br::check_size(w, g.query_positions, nq, "query position");
  br::check_size(w, g.key_positions, nk, "key position");
  br::check_head_option(w, g.alibi_slopes, opt.alibi_slopes, Hq, "ALiBi slope");
  br::check_head_option(w, g.decay, opt.decay, Hq, "decay");
}

// The epilogue of scores (detail/tiled/backward_run.hpp): W_ij = dS_ij scale γ_h^τ, 0 where masked;
// the ALiBi and decay gradients and their share of the position gradients.
template <class C, class Td, class R>
class ScoresEpilogue {
 public:
  ScoresEpilogue(const TensorView<Td>& ds, const Positions& tq, const Positions& tk,
                 const ScoreOptions& opt, const ScoresGradients<R>& g)
      : ds_(ds), tq_(tq), tk_(tk), opt_(opt), g_(g) {
    const bool want_pos = g.query_positions || g.key_positions;
    want_raw_ = !opt.decay.empty() && (g.decay || want_pos);
    want_bias_ = !opt.alibi_slopes.empty() && (g.alibi_slopes || want_pos);
  }
  // A shard's sums (detail/tiled/backward_run.hpp): the slopes', decays' and key positions'.
  struct Part {
    std::vector<double> slopes, decay;
    std::vector<R> key_positions;
  };
  void reset(Part& p, bool) const {
    p.slopes.assign(g_.alibi_slopes ? g_.alibi_slopes->size() : 0, 0.0);
    p.decay.assign(g_.decay ? g_.decay->size() : 0, 0.0);
    p.key_positions.assign(g_.key_positions ? g_.key_positions->size() : 0, R(0));
  }
  double part_bytes() const {
    return g_.key_positions ? double(g_.key_positions->size()) * sizeof(R) : 0.0;
  }
  // The shards' sums into the totals, in shard order.
  void join(const std::vector<const Part*>& parts, int) {
    for (const Part* p : parts) {
      for (std::size_t h = 0; h < p->slopes.size(); ++h) (*g_.alibi_slopes)[h] += p->slopes[h];
      for (std::size_t h = 0; h < p->decay.size(); ++h) (*g_.decay)[h] += p->decay[h];
      for (std::size_t j = 0; j < p->key_positions.size(); ++j)
        (*g_.key_positions)[j] += p->key_positions[j];
    }
  }

  bool causal() const { return opt_.causal; }
  bool skip(double, double tmax, double smin, double) const { return opt_.causal && smin > tmax; }

  void weights(Part& part, Index h, Index, Index ib, Index ni, Index jb, Index nj,
               const backward_run::Rows<C>& qh, const backward_run::Tile<C>& kt,
               backward_run::Tile<C> W) {
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
        W(r, c) = C(f * detail::to_arith<double>(ds_(h, ib + r, jb + c)));
      }
    }
    if (!want_raw_ && !want_bias_) return;
    backward_run::RowMatrix<C>& raw = raw_buffer();
    if (want_raw_) {  // q̂ᵀ A_X(Δ) k̂ = qᵀ A(τ) k
      backward_run::at_least(raw, ni, nj);
      raw.topLeftCorner(ni, nj).noalias() = qh * kt.transpose();
    }
    bias(part, h, ib, ni, jb, nj, W, raw);
  }

 private:
  // The raw score tile, a buffer of the running thread kept across tile pairs and calls.
  static backward_run::RowMatrix<C>& raw_buffer() {
    thread_local backward_run::RowMatrix<C> raw;
    return raw;
  }

  // ∂L/∂m_h = −Σ dS τ; ∂L/∂γ_h = Σ W (τ/γ) raw; ∂L/∂t_i = Σ_j (W ln γ raw − m dS) = −∂L/∂s_j's
  // (t_i: this tile's rows, no other shard has them; s_j, m_h, γ_h: the shard's part).
  void bias(Part& part, Index h, Index ib, Index ni, Index jb, Index nj,
            const backward_run::Tile<C>& W, const backward_run::RowMatrix<C>& raw) {
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
        const double tau = t - s, dsv = detail::to_arith<double>(ds_(h, ib + r, jb + c));
        double p = -m * dsv;
        dm -= dsv * tau;
        if (want_raw_) {
          const double wr = double(W(r, c)) * double(raw(r, c));
          dg += wr * tau / gamma;
          p += wr * lg;
        }
        dt += p;
        if (g_.key_positions) part.key_positions[std::size_t(jb + c)] -= R(p);
      }
      if (g_.query_positions) (*g_.query_positions)[std::size_t(ib + r)] += R(dt);
    }
    if (g_.alibi_slopes) part.slopes[std::size_t(h)] += dm;
    if (g_.decay) part.decay[std::size_t(h)] += dg;
  }

  const TensorView<Td>& ds_;
  const Positions& tq_;
  const Positions& tk_;
  const ScoreOptions& opt_;
  const ScoresGradients<R>& g_;
  bool want_raw_ = false, want_bias_ = false;
};

}  // namespace scores_backward
}  // namespace detail

/// Backward of scores(enc, q, tq, k, tk, out, opt): d_scores = ∂L/∂out [Hq, nq, nk] (float or
/// double; its masked entries are not read). Writes dq [nq, Hq, d] and dk [nk, Hk, d] (either
/// may be empty: not wanted; neither may overlap q, k, d_scores or each other) and ADDS the
/// gradients asked for in grads. Throws peal::invalid_argument before writing anything on
/// inconsistent extents, positions, options or gradient sizes. opt.threads threads (0: OpenMP's
/// maximum; the result does not depend on it); opt.query_tile and key_tile are validated and
/// not used (tiles of at most 256 queries x 512 keys).
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
  if (q.tokens() == 0 || q.heads() == 0 || k.tokens() == 0) {  // no scores: dq, dk are 0
    detail::backward_run::set_zero(dq);
    detail::backward_run::set_zero(dk);
    return;
  }
  const auto qr = detail::ro(q);
  const auto kr = detail::ro(k);
  const auto dr = detail::ro(d_scores);
  using Rd = const std::remove_cv_t<Td>;
  using C = detail::arith_t<Tq, Tk>;  // the forward's arithmetic
  sb::ScoresEpilogue<C, Rd, R> epi(dr, tq, tk, opt, grads);
  const detail::backward_run::Targets<R> targets{grads.parameters, grads.query_positions,
                                                 grads.key_positions, false};
  detail::backward_run::Run<C, E, const std::remove_cv_t<Tq>, const std::remove_cv_t<Tk>, Tdq, Tdk,
                            R, sb::ScoresEpilogue<C, Rd, R>>
      run(enc, qr, tq, kr, tk, dq, dk, targets, epi, opt.threads);
  run.run();
}

namespace detail {
namespace per_head {

// Key head kh's gradient is the sum over the query heads of its group: the group's first head
// writes it, the others write `scratch` and add it (in the order of the heads: deterministic;
// the sum in the storage type of dk). The epilogue's per-head gradients come back one entry
// at a time.
template <class T>
void add_slice(const TensorView<T>& to, Index kh, const TensorView<T>& from) {
  for (Index j = 0; j < to.tokens(); ++j)
    for (Index e = 0; e < to.dim(); ++e) to(j, kh, e) = T(to(j, kh, e) + from(j, 0, e));
}
template <class T>
struct GroupScratch {  // [tokens, 1, dim], only when a group has more than one query head
  GroupScratch(const TensorView<T>& v, Index group)
      : data(group > 1 && !v.empty() ? std::size_t(v.tokens() * v.dim()) : 0),
        view(data.data(), data.empty() ? 0 : v.tokens(), 1, data.empty() ? 0 : v.dim()) {}
  std::vector<std::remove_cv_t<T>> data;
  TensorView<T> view;
};
template <class R>
struct HeadGradients {  // head h's share of a gradient laid out over every head
  std::vector<R> part;
  std::vector<double> one = std::vector<double>(1);
  // parameters: head h's block [offset, offset + n) of the layout of parameters(enc).
  std::vector<R>* parameters(std::vector<R>* all, std::size_t n) {
    if (!all) return nullptr;
    part.assign(n, R(0));
    return &part;
  }
  std::vector<double>* entry(std::vector<double>* all) {
    one[0] = 0;
    return all ? &one : nullptr;
  }
};

template <class E, class Tq, class Tk, class Td, class Tdq, class Tdk, class R>
void scores_backward(const PerHead<E>& enc, const TensorView<Tq>& q, const Positions& tq,
                     const TensorView<Tk>& k, const Positions& tk, const TensorView<Td>& ds,
                     const TensorView<Tdq>& dq, const TensorView<Tdk>& dk,
                     const ScoreOptions& opt, const ScoresGradients<R>& g) {
  const Index hq = q.heads(), G = group_size(enc, hq, k.heads(), "scores_backward");
  scores_backward::check(enc, q, tq, k, tk, ds, dq, dk, opt, g);  // whole views, first
  GroupScratch<Tdk> scratch(dk, G);
  HeadGradients<R> params;
  HeadGradients<double> slopes, decays;
  std::size_t offset = 0;
  for (Index h = 0; h < hq; ++h) {
    const E& e = enc.head(int(h));
    const std::size_t n = std::size_t(parameter_count(e));
    ScoreOptions o = opt;
    o.alibi_slopes = pick(opt.alibi_slopes, h, hq, "scores_backward", "alibi_slopes");
    o.decay = pick(opt.decay, h, hq, "scores_backward", "decay");
    const ScoresGradients<R> gh{params.parameters(g.parameters, n), g.query_positions,
                                g.key_positions, slopes.entry(g.alibi_slopes),
                                decays.entry(g.decay)};
    const bool first = h % G == 0;
    peal::scores_backward(e, slice(q, h), tq, slice(k, h / G), tk, out_slice(ds, h),
                          slice(dq, h), first ? slice(dk, h / G) : scratch.view, o, gh);
    if (!first && !dk.empty()) add_slice(dk, h / G, scratch.view);
    if (g.parameters)
      for (std::size_t x = 0; x < n; ++x) (*g.parameters)[offset + x] += params.part[x];
    if (g.alibi_slopes) (*g.alibi_slopes)[std::size_t(h)] += slopes.one[0];
    if (g.decay) (*g.decay)[std::size_t(h)] += decays.one[0];
    offset += n;
  }
}

}  // namespace per_head
}  // namespace detail

/// scores_backward with one encoding per query head (per_head.hpp): the contract of the
/// function above, head h's backward on head h's slices (its ALiBi slope and decay), dk summed
/// over the query heads of each key head's group; the parameter gradient in the layout of
/// parameters(enc) ("head[h].").
template <class E, class Tq, class Tk, class Td, class Tdq, class Tdk>
void scores_backward(const PerHead<E>& enc, TensorView<Tq> q, const Positions& tq,
                     TensorView<Tk> k, const Positions& tk, TensorView<Td> d_scores,
                     TensorView<Tdq> dq, TensorView<Tdk> dk, const ScoreOptions& opt = {},
                     ScoresGradients<real_t<typename E::Scalar>> grads = {}) {
  detail::encode_backward::require_derivatives<E>();
  detail::per_head::scores_backward(enc, detail::ro(q), tq, detail::ro(k), tk,
                                    detail::ro(d_scores), dq, dk, opt, grads);
}

}  // namespace peal
