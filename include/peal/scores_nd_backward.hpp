// Backward of scores() and attention() over points p ∈ ℝᴰ (scores_nd.hpp; docs/gradients.md
// §4, "Over N-D points"): given ∂L/∂out, returns dq, dk (and dv), and adds the gradients of the
// encoding's parameters, of the points (tokens × axes, token-major) and of the sinks.
//
// Built as the forward is, by composition (no tile driver of its own):
//   1. q and k are encoded exactly as the forward encodes them (scores_nd.hpp's Encoded: the
//      same anchor p0, the centre of the points' bounding box when an axis grows or decays,
//      the same buffer of the arithmetic type C): q̃_i = F(p_i − p0) q_i, k̃_j = G(p'_j − p0) k_j;
//   2. the 1-D backward (scores_backward.hpp, attention_backward.hpp) with the identity
//      encoding runs on q̃, k̃ with the forward's options and token-order positions (query i at
//      key index nk − nq + i: causal, window, softcap, sinks with their gradient, GQA, dv ≠ d,
//      scale, threads), and gives dq̃, dk̃ (buffers of C, O(n d)), dv and ∂L/∂σ;
//   3. the N-D encode backwards (encode_backward.hpp) at the anchored points u_i = p_i − p0,
//      u'_j = p'_j − p0 turn dq̃, dk̃ into dq = F(u)ᵀ dq̃, dk = G(u')ᵀ dk̃, and add each side's
//      share of ∂L/∂θ (the two sides summed in one vector) and ∂L/∂u, ∂L/∂u'.
// Memory: the encoded rows and their gradients, O((nq Hq + nk Hk) d); never nq × nk.
//
// Why ∂L/∂u is the gradient with respect to the points although p0 depends on them (through
// min and max). Encoded at u = p − c, u' = p' − c for any vector c, a score is
//   S_ij = (F(p_i − c) q_i)ᵀ (G(p'_j − c) k_j) = q_iᵀ A(p_i − c) A(c − p'_j) k_j
//        = q_iᵀ A(p_i − p'_j) k_j   (F(u)ᵀ = A(u), G(u') = A(−u'), A(a) A(b) = A(a + b)),
// so L̃(p, p', c) := L(p − c, p' − c) does not depend on c, and for each axis a
//   0 = ∂L̃/∂c_a = −Σ_i ∂L/∂u_{i,a} − Σ_j ∂L/∂u'_{j,a}:
// the anchor's total derivative, summed over both sides, is zero. The chain rule through
// p0(p, p') then gives dL/dp_{i,a} = ∂L/∂u_{i,a} + Σ_b (∂L̃/∂c_b)(∂p0_b/∂p_{i,a}) = ∂L/∂u_{i,a}
// (and likewise for p'), whatever ∂p0/∂p is: min and max are piecewise linear, and at a tie any
// one-sided derivative multiplies 0. The parameters meet p0 only through the same product, so
// their gradient does not see it either. In floating point the anchor moves the results by
// rounding only; the identity above is also why the point gradients of the queries and keys sum
// to zero per axis (translation invariance, tested).
//
// ALiBi slopes and scalar decays need a scalar distance and are refused, as the forward refuses
// them; Jordan chains over points and points spread too far for the growth are refused by the
// forward's anchor (scores_nd.hpp). PerHead<MultiAxis<E>> (RoPE-Mixed): head h's backward on
// head h's slices, as the 1-D PerHead backwards. Bad input (extents, lse, gradient sizes,
// overlapping views, non-finite points) throws peal::invalid_argument before anything is
// written.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include "attention_backward.hpp"
#include "encode_backward.hpp"
#include "multi_axis.hpp"
#include "pass_through.hpp"
#include "per_head.hpp"
#include "positions_nd.hpp"
#include "scores_backward.hpp"
#include "scores_nd.hpp"

namespace peal {
namespace detail {
namespace scores_nd_backward {

namespace br = backward_run;
namespace sn = scores_nd;

// The token-order positions the forward gives the 1-D kernels (scores_nd.hpp): query i at key
// index nk − nq + i.
inline Positions query_order(Index nq, Index nk) { return Positions::sequence(double(nk - nq)); }
inline Positions key_order() { return Positions::sequence(0.0); }

// The gradients of the encoding: parameters, and points with `axes` coordinates per token.
template <class R>
void check_sizes(const std::string& w, Index n_parameters, int axes, Index nq, Index nk,
                 const std::vector<R>* parameters, const std::vector<R>* query_points,
                 const std::vector<R>* key_points) {
  br::check_size(w, parameters, n_parameters, "parameter");
  br::check_size(w, query_points, nq * axes, "query point (nq x axes, token-major)");
  br::check_size(w, key_points, nk * axes, "key point (nk x axes, token-major)");
}

// The forward's anchor and encoding checks for one MultiAxis (scores_nd.hpp: axes of the
// points, finite points, no Jordan chain, the spread within C's range, keys_encoded only for
// pure rotations), without encoding: the per-head backwards run them for every head first.
template <class C, class E>
void check_points(const MultiAxis<E>& enc, Index nq, const PositionsND& pq, Index nk,
                  const PositionsND& pk, bool keys_encoded, const char* where) {
  pq.check(nq, enc.axes(), where);
  pk.check(nk, enc.axes(), where);
  (void)sn::anchor<C>(enc, pq, nq, pk, nk, keys_encoded, where);
}

// The anchored points of the forward (scores_nd.hpp's anchor, the same call): u = p − p0, or
// the points as given for pure rotations.
struct Points {
  sn::Anchored an;
  PositionsND q, k;
  template <class C, class E>
  static Points of(const MultiAxis<E>& enc, const PositionsND& pq, Index nq, const PositionsND& pk,
                   Index nk, bool keys_encoded, const char* where) {
    Points r{sn::anchor<C>(enc, pq, nq, pk, nk, keys_encoded, where), pq, pk};
    if (r.an.shifted) {
      r.q = PositionsND(r.an.q.data(), nq, enc.axes());
      r.k = PositionsND(r.an.k.data(), nk, enc.axes());
    }
    return r;
  }
};

// The gradient of the encoded rows of one side, [tokens, heads, dim] of C, when wanted.
template <class C>
struct EncodedGradient {
  std::vector<C> data;
  TensorView<C> view;
  EncodedGradient(bool wanted, Index tokens, Index heads, Index dim)
      : data(wanted ? std::size_t(tokens * heads * dim) : 0),
        view(wanted ? TensorView<C>(data.data(), tokens, heads, dim) : TensorView<C>()) {}
  EncodedGradient(const EncodedGradient&) = delete;
  EncodedGradient& operator=(const EncodedGradient&) = delete;
};

// Step 3 (header comment): the encode backwards of both sides at the anchored points.
template <class E, class Tq, class Tk, class C, class Tdq, class Tdk, class R>
void encode_backwards(const MultiAxis<E>& enc, const TensorView<Tq>& q, const TensorView<Tk>& k,
                      const Points& pts, const EncodedGradient<C>& gq, const EncodedGradient<C>* gk,
                      const TensorView<Tdq>& dq, const TensorView<Tdk>& dk,
                      std::vector<R>* parameters, std::vector<R>* query_points,
                      std::vector<R>* key_points) {
  if (!gq.view.empty())
    peal::encode_queries_backward(enc, q, pts.q, ro(gq.view), dq,
                                  EncodeGradients<R>{parameters, query_points});
  if (gk && !gk->view.empty())
    peal::encode_keys_backward(enc, k, pts.k, ro(gk->view), dk,
                               EncodeGradients<R>{parameters, key_points});
}

// Checks the caller's views as the 1-D scores_backward does (the 1-D call below sees the
// encoded copies only), then the gradient sizes.
template <class Enc, class Tq, class Tk, class Td, class Tdq, class Tdk, class R>
void check_scores(const Enc& enc, int axes, const TensorView<Tq>& q, const TensorView<Tk>& k,
                  const TensorView<Td>& ds, const TensorView<Tdq>& dq, const TensorView<Tdk>& dk,
                  const ScoreOptions& opt, const ScoresGradients<R>& g) {
  const std::string w = "scores_backward";
  if (!opt.alibi_slopes.empty() || !opt.decay.empty() || g.alibi_slopes || g.decay)
    fail(w + ": ALiBi slopes and decays need scalar positions, not N-D points");
  const PassThrough<typename Enc::Scalar> id{enc.dim()};
  scores_backward::check(id, q, query_order(q.tokens(), k.tokens()), k, key_order(), ds, dq, dk,
                         opt, ScoresGradients<R>{});
  check_sizes(w, Index(parameter_count(enc)), axes, q.tokens(), k.tokens(), g.parameters,
              g.query_positions, g.key_positions);
}

template <class Enc, class Tq, class Tk, class Tv, class To, class Tdo, class Tdq, class Tdk,
          class Tdv, class R>
void check_attention(const Enc& enc, int axes, const TensorView<Tq>& q, const TensorView<Tk>& k,
                     const TensorView<Tv>& v, const TensorView<To>& out,
                     const std::vector<double>& lse, const TensorView<Tdo>& dout,
                     const TensorView<Tdq>& dq, const TensorView<Tdk>& dk,
                     const TensorView<Tdv>& dv, const AttentionOptions& opt,
                     const AttentionGradients<R>& g) {
  const std::string w = "attention_backward";
  if (!opt.alibi_slopes.empty() || g.alibi_slopes)
    fail(w + ": ALiBi slopes need scalar positions, not N-D points");
  const PassThrough<typename Enc::Scalar> id{enc.dim()};
  attention_backward::check(id, q, query_order(q.tokens(), k.tokens()), k, key_order(), v, out, lse,
                            dout, dq, dk, dv, opt,
                            AttentionGradients<R>{nullptr, nullptr, nullptr, nullptr, g.sinks});
  check_sizes(w, Index(parameter_count(enc)), axes, q.tokens(), k.tokens(), g.parameters,
              g.query_positions, g.key_positions);
}

// The backwards once the caller's views and gradient sizes are checked.
template <class E, class Tq, class Tk, class Td, class Tdq, class Tdk, class R>
void run_scores(const MultiAxis<E>& enc, const TensorView<Tq>& q, const PositionsND& pq,
                const TensorView<Tk>& k, const PositionsND& pk, const TensorView<Td>& ds,
                const TensorView<Tdq>& dq, const TensorView<Tdk>& dk, const ScoreOptions& opt,
                const ScoresGradients<R>& g) {
  const char* w = "scores_backward";
  using C = arith_t<Tq, Tk>;  // the forward's (scores_nd.hpp)
  const sn::Encoded<C, MultiAxis<E>, Tq, Tk> e(enc, q, pq, k, pk, false, w);  // checks the points
  const Points pts = Points::of<C>(enc, pq, q.tokens(), pk, k.tokens(), false, w);
  const EncodedGradient<C> gq(!dq.empty() || g.parameters || g.query_positions, q.tokens(),
                              q.heads(), q.dim());
  const EncodedGradient<C> gk(!dk.empty() || g.parameters || g.key_positions, k.tokens(), k.heads(),
                              k.dim());
  const PassThrough<typename E::Scalar> id{enc.dim()};
  peal::scores_backward(id, e.q, query_order(q.tokens(), k.tokens()), e.k, key_order(), ds, gq.view,
                        gk.view, opt, ScoresGradients<R>{});
  encode_backwards(enc, q, k, pts, gq, &gk, dq, dk, g.parameters, g.query_positions,
                   g.key_positions);
}

template <class E, class Tq, class Tk, class Tv, class To, class Tdo, class Tdq, class Tdk,
          class Tdv, class R>
void run_attention(const MultiAxis<E>& enc, const TensorView<Tq>& q, const PositionsND& pq,
                   const TensorView<Tk>& k, const PositionsND& pk, const TensorView<Tv>& v,
                   const TensorView<To>& out, const std::vector<double>& lse,
                   const TensorView<Tdo>& dout, const TensorView<Tdq>& dq,
                   const TensorView<Tdk>& dk, const TensorView<Tdv>& dv,
                   const AttentionOptions& opt, const AttentionGradients<R>& g) {
  const char* w = "attention_backward";
  // The forward's arithmetic and encoded buffer type (scores_nd.hpp's attention).
  using C = std::conditional_t<std::is_same<std::remove_cv_t<Tv>, double>::value, double,
                               arith_t<Tq, Tk>>;
  const bool raw_keys = opt.keys_encoded;  // k holds G(p') k: its gradient is dk itself
  const sn::Encoded<C, MultiAxis<E>, Tq, Tk> e(enc, q, pq, k, pk, raw_keys, w);
  const Points pts = Points::of<C>(enc, pq, q.tokens(), pk, k.tokens(), raw_keys, w);
  const EncodedGradient<C> gq(!dq.empty() || g.parameters || g.query_positions, q.tokens(),
                              q.heads(), q.dim());
  const EncodedGradient<C> gk(!raw_keys && (!dk.empty() || g.parameters || g.key_positions),
                              k.tokens(), k.heads(), k.dim());
  const PassThrough<typename E::Scalar> id{enc.dim()};
  AttentionOptions o = opt;
  o.keys_encoded = false;  // the identity encoding: its "keys" are what we pass
  const AttentionGradients<R> sinks{nullptr, nullptr, nullptr, nullptr, g.sinks};
  const Positions qs = query_order(q.tokens(), k.tokens()), ks = key_order();
  if (raw_keys)  // the keys add nothing to θ or the points (as the 1-D keys_encoded)
    peal::attention_backward(id, e.q, qs, k, ks, v, out, lse, dout, gq.view, dk, dv, o, sinks);
  else
    peal::attention_backward(id, e.q, qs, e.k, ks, v, out, lse, dout, gq.view, gk.view, dv, o,
                             sinks);
  encode_backwards(enc, q, k, pts, gq, raw_keys ? nullptr : &gk, dq, dk, g.parameters,
                   g.query_positions, g.key_positions);
}

// ---- PerHead<MultiAxis<E>>: head h's backward on head h's slices (scores_backward.hpp's
// per-head pattern), after every head's points are checked.
template <class E, class Tq, class Tk, class Td, class Tdq, class Tdk, class R>
void per_head_scores(const PerHead<MultiAxis<E>>& enc, const TensorView<Tq>& q,
                     const PositionsND& pq, const TensorView<Tk>& k, const PositionsND& pk,
                     const TensorView<Td>& ds, const TensorView<Tdq>& dq, const TensorView<Tdk>& dk,
                     const ScoreOptions& opt, const ScoresGradients<R>& g) {
  namespace ph = per_head;
  const char* w = "scores_backward";
  const Index hq = q.heads(), G = ph::group_size(enc, hq, k.heads(), w);
  check_scores(enc, enc.head(0).axes(), q, k, ds, dq, dk, opt, g);  // whole views, first
  for (int h = 0; h < enc.heads(); ++h)
    check_points<arith_t<Tq, Tk>>(enc.head(h), q.tokens(), pq, k.tokens(), pk, false, w);
  ph::GroupScratch<Tdk> scratch(dk, G);
  ph::HeadGradients<R> params;
  std::size_t offset = 0;
  for (Index h = 0; h < hq; ++h) {
    const MultiAxis<E>& e = enc.head(int(h));
    const std::size_t n = std::size_t(parameter_count(e));
    const ScoresGradients<R> gh{params.parameters(g.parameters, n), g.query_positions,
                                g.key_positions, nullptr, nullptr};
    const bool first = h % G == 0;
    run_scores(e, ph::slice(q, h), pq, ph::slice(k, h / G), pk, ph::out_slice(ds, h),
               ph::slice(dq, h), first ? ph::slice(dk, h / G) : scratch.view, opt, gh);
    if (!first && !dk.empty()) ph::add_slice(dk, h / G, scratch.view);
    if (g.parameters)
      for (std::size_t x = 0; x < n; ++x) (*g.parameters)[offset + x] += params.part[x];
    offset += n;
  }
}

template <class E, class Tq, class Tk, class Tv, class To, class Tdo, class Tdq, class Tdk,
          class Tdv, class R>
void per_head_attention(const PerHead<MultiAxis<E>>& enc, const TensorView<Tq>& q,
                        const PositionsND& pq, const TensorView<Tk>& k, const PositionsND& pk,
                        const TensorView<Tv>& v, const TensorView<To>& out,
                        const std::vector<double>& lse, const TensorView<Tdo>& dout,
                        const TensorView<Tdq>& dq, const TensorView<Tdk>& dk,
                        const TensorView<Tdv>& dv, const AttentionOptions& opt,
                        const AttentionGradients<R>& g) {
  namespace ph = per_head;
  const char* w = "attention_backward";
  const Index hq = q.heads(), nq = q.tokens(), G = ph::group_size(enc, hq, k.heads(), w);
  check_attention(enc, enc.head(0).axes(), q, k, v, out, lse, dout, dq, dk, dv, opt, g);
  using C = std::conditional_t<std::is_same<std::remove_cv_t<Tv>, double>::value, double,
                               arith_t<Tq, Tk>>;
  for (int h = 0; h < enc.heads(); ++h)
    check_points<C>(enc.head(h), nq, pq, k.tokens(), pk, opt.keys_encoded, w);
  ph::GroupScratch<Tdk> dk_scratch(dk, G);
  ph::GroupScratch<Tdv> dv_scratch(dv, G);
  ph::HeadGradients<R> params;
  ph::HeadGradients<double> sinks;
  std::vector<double> lse_h(static_cast<std::size_t>(nq));
  std::size_t offset = 0;
  for (Index h = 0; h < hq; ++h) {
    const MultiAxis<E>& e = enc.head(int(h));
    const std::size_t n = std::size_t(parameter_count(e));
    AttentionOptions o = opt;
    o.sinks = ph::pick(opt.sinks, h, hq, w, "sinks");
    o.lse = nullptr;
    for (Index i = 0; i < nq; ++i) lse_h[std::size_t(i)] = lse[std::size_t(i * hq + h)];
    const AttentionGradients<R> gh{params.parameters(g.parameters, n), g.query_positions,
                                   g.key_positions, nullptr, sinks.entry(g.sinks)};
    const bool first = h % G == 0;
    const Index kh = h / G;
    run_attention(e, ph::slice(q, h), pq, ph::slice(k, kh), pk, ph::slice(v, kh), ph::slice(out, h),
                  lse_h, ph::slice(dout, h), ph::slice(dq, h),
                  first ? ph::slice(dk, kh) : dk_scratch.view,
                  first ? ph::slice(dv, kh) : dv_scratch.view, o, gh);
    if (!first && !dk.empty()) ph::add_slice(dk, kh, dk_scratch.view);
    if (!first && !dv.empty()) ph::add_slice(dv, kh, dv_scratch.view);
    if (g.parameters)
      for (std::size_t x = 0; x < n; ++x) (*g.parameters)[offset + x] += params.part[x];
    if (g.sinks) (*g.sinks)[std::size_t(h)] += sinks.one[0];
    offset += n;
  }
}

}  // namespace scores_nd_backward
}  // namespace detail

/// Backward of scores(enc, q, pq, k, pk, out, opt) over points (scores_nd.hpp): d_scores =
/// ∂L/∂out [Hq, nq, nk] (its masked entries are not read). Writes dq [nq, Hq, d] and dk
/// [nk, Hk, d] (either may be empty: not wanted; neither may overlap q, k, d_scores or each
/// other) and ADDS the gradients asked for in grads: parameters in the layout of
/// parameters(enc) ("axis[a]."), query_positions nq × axes and key_positions nk × axes,
/// token-major (∂L/∂p_{i,a} at i · axes + a). ALiBi slopes and decays are refused (as the
/// forward refuses them). Throws peal::invalid_argument before writing anything on bad input.
/// opt.threads as the 1-D scores_backward (deterministic).
template <class E, class Tq, class Tk, class Td, class Tdq, class Tdk>
void scores_backward(const MultiAxis<E>& enc, TensorView<Tq> q, const PositionsND& pq,
                     TensorView<Tk> k, const PositionsND& pk, TensorView<Td> d_scores,
                     TensorView<Tdq> dq, TensorView<Tdk> dk, const ScoreOptions& opt = {},
                     ScoresGradients<real_t<typename E::Scalar>> grads = {}) {
  namespace nb = detail::scores_nd_backward;
  detail::encode_backward::require_derivatives<E>();
  static_assert(std::is_same<std::remove_cv_t<Td>, float>::value ||
                    std::is_same<std::remove_cv_t<Td>, double>::value,
                "peal::scores_backward: d_scores must be a view of float or double");
  nb::check_scores(enc, enc.axes(), q, k, d_scores, dq, dk, opt, grads);
  nb::run_scores(enc, detail::ro(q), pq, detail::ro(k), pk, detail::ro(d_scores), dq, dk, opt,
                 grads);
}

/// Backward of attention(enc, q, pq, k, pk, v, out, opt) over points (scores_nd.hpp): d_out,
/// out and lse (nq·Hq entries, lse[i·Hq + h]) as in the 1-D attention_backward; masks by token
/// order as the forward's. Writes dq, dk, dv (each may be empty; none may overlap an input or
/// another) and ADDS the gradients asked for in grads: parameters, points (nq × axes and
/// nk × axes, token-major) and sinks. With opt.keys_encoded (pure rotations only) dk is the
/// gradient of the stored rows G(p') k and the keys add nothing to θ or the points. ALiBi
/// slopes are refused (as the forward refuses them). Throws peal::invalid_argument before
/// writing anything on bad input.
template <class E, class Tq, class Tk, class Tv, class To, class Tdo, class Tdq, class Tdk,
          class Tdv>
void attention_backward(const MultiAxis<E>& enc, TensorView<Tq> q, const PositionsND& pq,
                        TensorView<Tk> k, const PositionsND& pk, TensorView<Tv> v,
                        TensorView<To> out, const std::vector<double>& lse, TensorView<Tdo> d_out,
                        TensorView<Tdq> dq, TensorView<Tdk> dk, TensorView<Tdv> dv,
                        const AttentionOptions& opt = {},
                        AttentionGradients<real_t<typename E::Scalar>> grads = {}) {
  namespace nb = detail::scores_nd_backward;
  detail::encode_backward::require_derivatives<E>();
  nb::check_attention(enc, enc.axes(), q, k, v, out, lse, d_out, dq, dk, dv, opt, grads);
  nb::run_attention(enc, detail::ro(q), pq, detail::ro(k), pk, detail::ro(v), detail::ro(out), lse,
                    detail::ro(d_out), dq, dk, dv, opt, grads);
}

/// scores_backward and attention_backward of M-RoPE over (t, h, w) points: those of its
/// MultiAxis, with the parameter gradient in M-RoPE's own layout (parameters.hpp: inv_freq[i],
/// one per rotary pair).
template <class S, class Tq, class Tk, class Td, class Tdq, class Tdk>
void scores_backward(const MRopeEncoding<S>& enc, TensorView<Tq> q, const PositionsND& pq,
                     TensorView<Tk> k, const PositionsND& pk, TensorView<Td> d_scores,
                     TensorView<Tdq> dq, TensorView<Tdk> dk, const ScoreOptions& opt = {},
                     ScoresGradients<real_t<S>> grads = {}) {
  detail::with_mrope_layout(enc, grads, "scores_backward", [&](const auto& g) {
    scores_backward(enc.encoding(), q, pq, k, pk, d_scores, dq, dk, opt, g);
  });
}
template <class S, class Tq, class Tk, class Tv, class To, class Tdo, class Tdq, class Tdk,
          class Tdv>
void attention_backward(const MRopeEncoding<S>& enc, TensorView<Tq> q, const PositionsND& pq,
                        TensorView<Tk> k, const PositionsND& pk, TensorView<Tv> v,
                        TensorView<To> out, const std::vector<double>& lse, TensorView<Tdo> d_out,
                        TensorView<Tdq> dq, TensorView<Tdk> dk, TensorView<Tdv> dv,
                        const AttentionOptions& opt = {},
                        AttentionGradients<real_t<S>> grads = {}) {
  detail::with_mrope_layout(enc, grads, "attention_backward", [&](const auto& g) {
    attention_backward(enc.encoding(), q, pq, k, pk, v, out, lse, d_out, dq, dk, dv, opt, g);
  });
}

/// scores_backward and attention_backward with one MultiAxis per query head (RoPE-Mixed) over
/// points: the contracts above, head h's backward on head h's slices (its sink and lse
/// column), dk and dv summed over the query heads of each key head's group; the parameter
/// gradient in the layout of parameters(enc) ("head[h].axis[a].").
template <class E, class Tq, class Tk, class Td, class Tdq, class Tdk>
void scores_backward(const PerHead<MultiAxis<E>>& enc, TensorView<Tq> q, const PositionsND& pq,
                     TensorView<Tk> k, const PositionsND& pk, TensorView<Td> d_scores,
                     TensorView<Tdq> dq, TensorView<Tdk> dk, const ScoreOptions& opt = {},
                     ScoresGradients<real_t<typename E::Scalar>> grads = {}) {
  detail::encode_backward::require_derivatives<E>();
  static_assert(std::is_same<std::remove_cv_t<Td>, float>::value ||
                    std::is_same<std::remove_cv_t<Td>, double>::value,
                "peal::scores_backward: d_scores must be a view of float or double");
  detail::scores_nd_backward::per_head_scores(enc, detail::ro(q), pq, detail::ro(k), pk,
                                              detail::ro(d_scores), dq, dk, opt, grads);
}
template <class E, class Tq, class Tk, class Tv, class To, class Tdo, class Tdq, class Tdk,
          class Tdv>
void attention_backward(const PerHead<MultiAxis<E>>& enc, TensorView<Tq> q, const PositionsND& pq,
                        TensorView<Tk> k, const PositionsND& pk, TensorView<Tv> v,
                        TensorView<To> out, const std::vector<double>& lse, TensorView<Tdo> d_out,
                        TensorView<Tdq> dq, TensorView<Tdk> dk, TensorView<Tdv> dv,
                        const AttentionOptions& opt = {},
                        AttentionGradients<real_t<typename E::Scalar>> grads = {}) {
  detail::encode_backward::require_derivatives<E>();
  detail::scores_nd_backward::per_head_attention(enc, detail::ro(q), pq, detail::ro(k), pk,
                                                 detail::ro(v), detail::ro(out), lse,
                                                 detail::ro(d_out), dq, dk, dv, opt, grads);
}

}  // namespace peal
