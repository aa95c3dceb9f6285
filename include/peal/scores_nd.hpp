// scores() and attention() for points p ∈ ℝᴰ (multi_axis.hpp, docs/positions-nd.md §3).
//
// The kernels encode q and k once into a buffer of the arithmetic type (one encoded copy,
// O(n d): never the n×n matrix) and run the 1-D fused kernels with the identity encoding on
// it, so tiling, online softmax, GQA, masking and threading are the 1-D kernels'.
// For a pure rotation (every axis a rotation bank with a = 0: M-RoPE, axial and mixed ViT
// RoPE, DINOv3), F(p) and G(p) are orthogonal, so q̃ = F(p) q, k̃ = G(p') k at the points
// themselves is as accurate as any rebasing (the angles are formed exactly per axis).
// With growth or decay (a ≠ 0, real blocks) the points are rebased by one anchor per call,
// the centre p0 of their bounding box: q̃ = F(p − p0) q, k̃ = G(p' − p0) k, still
// q̃ᵀk̃ = qᵀ A(p − p') k, and accurate while no factor leaves the range (the call checks
// Σ_a rate_a · half width_a ≤ ln(max) / 4 and says so otherwise: split the call). Jordan
// chains over points are refused (their polynomial factors at points lose precision).
//
// Masks are by token order: query i is at index nk − nq + i of the keys (the KV-cache
// convention: the queries are the last nq tokens), `causal` hides keys with a larger index
// and `window` keys at index distance ≥ W. ALiBi slopes and scalar decays need a scalar
// distance and are refused; per-head encodings (per_head.hpp) take N-D points too.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "attention.hpp"
#include "detail/overlap.hpp"
#include "encode.hpp"
#include "multi_axis.hpp"
#include "positions_nd.hpp"
#include "scores.hpp"

namespace peal {
namespace detail {
namespace scores_nd {

// What the axes' coders say about their factors: growth rate (max |Re λ|) and whether a
// Jordan chain (polynomial in the lag) is present.
template <class C, class E>
struct AxisFacts {
  double rate = 0;
  bool polynomial = false;
  explicit AxisFacts(const E& axis) {
    using split = coders::scores_split<C, E>;
    const typename split::coder coder(axis);
    rate = coder.rate();
    polynomial = split::poly::active || coder.degree() > 0;
  }
};

// The points of q and k, shifted by one anchor p0 (the centre of their bounding box) when
// an axis grows or decays: q~ = F(p_i - p0) q, k~ = G(p_j - p0) k, whose product is still
// q^T A(p_i - p_j) k. Per block the factors scale like e^{a.(p_i - p0)} and e^{-a.(p_j - p0)},
// so their product has the size of the true block factor: accurate as long as no factor
// leaves the range of C, which the spread bound below guarantees (sum_a rate_a * half width
// of axis a <= ln(max_C) / 4). Pure rotations are encoded at their points as given (exact).
struct Anchored {
  std::vector<double> q, k;
  bool shifted = false;
};

template <class C, class E>
Anchored anchor(const E& enc, const PositionsND& pq, Index nq, const PositionsND& pk, Index nk,
                bool keys_encoded, const char* where) {
  const int D = enc.axes();
  double spread = 0;
  bool grows = false;
  std::vector<double> lo(std::size_t(D), 0), hi(std::size_t(D), 0), rate(std::size_t(D), 0);
  for (int a = 0; a < D; ++a) {
    const AxisFacts<C, typename E::AxisEncoding> f(enc.axis(a));
    if (f.polynomial)
      fail(std::string(where) + ": N-D positions need rotations, growth or decay on every axis, "
                                "not a Jordan chain (axis " + std::to_string(a) +
           "): its polynomial factors at points lose precision (use 1-D positions)");
    rate[std::size_t(a)] = f.rate;
    grows = grows || f.rate > 0;
  }
  Anchored out;
  if (!grows) return out;
  if (keys_encoded)
    fail(std::string(where) + ": keys_encoded needs a pure rotation on every axis (keys stored "
                              "as G(p) k grow or decay with p)");
  for (int a = 0; a < D; ++a) {
    double l = INFINITY, h = -INFINITY;
    // (a constant PositionsND has token stride 0: every index reads its one point)
    for (Index i = 0; i < nq; ++i) l = std::min(l, pq(i, a)), h = std::max(h, pq(i, a));
    for (Index j = 0; j < nk; ++j) l = std::min(l, pk(j, a)), h = std::max(h, pk(j, a));
    lo[std::size_t(a)] = l;
    hi[std::size_t(a)] = h;
    spread += rate[std::size_t(a)] * (0.5 * h - 0.5 * l);
  }
  const double limit = std::log(double(std::numeric_limits<C>::max())) / 4;
  if (!(spread <= limit))
    fail(std::string(where) + ": the points spread too far for the growth of the encoding: "
                              "sum over axes of rate * half width = " + std::to_string(spread) +
         " > ln(max) / 4 = " + std::to_string(limit) +
         " (one anchor per call; split the call into nearer groups of points)");
  out.shifted = true;
  out.q.resize(std::size_t(nq) * std::size_t(D));
  out.k.resize(std::size_t(nk) * std::size_t(D));
  for (int a = 0; a < D; ++a) {
    const double p0 = 0.5 * lo[std::size_t(a)] + 0.5 * hi[std::size_t(a)];
    for (Index i = 0; i < nq; ++i) out.q[std::size_t(i * D + a)] = pq(i, a) - p0;
    for (Index j = 0; j < nk; ++j) out.k[std::size_t(j * D + a)] = pk(j, a) - p0;
  }
  return out;
}

// q (and k unless already encoded) encoded at their points (shifted by the anchor when the
// encoding grows) into buffers of C.
template <class C, class E, class Tq, class Tk>
struct Encoded {
  std::vector<C> qe, ke;
  TensorView<const C> q;
  TensorView<const C> k;
  Encoded(const E& enc, const TensorView<Tq>& qv, const PositionsND& pq, const TensorView<Tk>& kv,
          const PositionsND& pk, bool keys_encoded, const char* where) {
    const int D = enc.axes();
    pq.check(qv.tokens(), D, where);
    pk.check(kv.tokens(), D, where);
    const Anchored an = anchor<C>(enc, pq, qv.tokens(), pk, kv.tokens(), keys_encoded, where);
    const PositionsND aq = an.shifted ? PositionsND(an.q.data(), qv.tokens(), D) : pq;
    const PositionsND ak = an.shifted ? PositionsND(an.k.data(), kv.tokens(), D) : pk;
    qe.resize(std::size_t(qv.tokens() * qv.heads() * qv.dim()));
    const TensorView<C> qd(qe.data(), qv.tokens(), qv.heads(), qv.dim());
    encode_queries(enc, qv, qd, aq);
    q = qd;
    if (keys_encoded) return;
    ke.resize(std::size_t(kv.tokens() * kv.heads() * kv.dim()));
    const TensorView<C> kd(ke.data(), kv.tokens(), kv.heads(), kv.dim());
    encode_keys(enc, kv, kd, ak);
    k = kd;
  }
};

}  // namespace scores_nd
}  // namespace detail

/// out[h, i, j] = scale q_iᵀ A(p_i − p'_j) k_j over points (a MultiAxis without Jordan
/// chains; growth rebased by one anchor); causal by token order (header comment). Extents and options as the 1-D scores().
template <class E, class Tq, class Tk, class Out>
void scores(const E& enc, TensorView<Tq> q, const PositionsND& pq, TensorView<Tk> k,
            const PositionsND& pk, TensorView<Out> out, const ScoreOptions& opt = {}) {
  namespace sn = detail::scores_nd;
  using C = detail::arith_t<Tq, Tk>;
  if (!opt.alibi_slopes.empty() || !opt.decay.empty())
    detail::fail("scores: ALiBi slopes and decays need scalar positions, not N-D points");
  if (q.dim() != Index(enc.dim()) || k.dim() != Index(enc.dim()))
    detail::fail("scores: q and k must have dim " + std::to_string(enc.dim()));
  // The 1-D call sees the encoded copies only: the caller's views are checked here.
  detail::check_scores_aliasing(q, k, out, "scores");
  const sn::Encoded<C, E, Tq, Tk> e(enc, q, pq, k, pk, false, "scores");
  const PassThrough<typename E::Scalar> id{enc.dim()};
  scores(id, e.q, Positions::sequence(double(k.tokens() - q.tokens())), e.k,
         Positions::sequence(0.0), out, opt);
}

/// Softmax attention over points (a MultiAxis without Jordan chains): out = softmax(scale S) V with
/// S_ij = q_iᵀ A(p_i − p'_j) k_j; masks by token order (header comment). With
/// opt.keys_encoded the keys hold G(p'_j) k_j already (a KV cache encoded once).
template <class E, class Tq, class Tk, class Tv, class To>
void attention(const E& enc, TensorView<Tq> q, const PositionsND& pq, TensorView<Tk> k,
               const PositionsND& pk, TensorView<Tv> v, TensorView<To> out,
               AttentionOptions opt = {}) {
  namespace sn = detail::scores_nd;
  using C = std::conditional_t<std::is_same<std::remove_cv_t<Tv>, double>::value, double,
                               detail::arith_t<Tq, Tk>>;
  if (!opt.alibi_slopes.empty())
    detail::fail("attention: ALiBi slopes need scalar positions, not N-D points");
  if (q.dim() != Index(enc.dim()) || k.dim() != Index(enc.dim()))
    detail::fail("attention: q and k must have dim " + std::to_string(enc.dim()));
  // The 1-D call sees the encoded copies only: the caller's views are checked here.
  detail::check_attention_aliasing(q, k, v, out, opt.lse, "attention");
  const sn::Encoded<C, E, Tq, Tk> e(enc, q, pq, k, pk, opt.keys_encoded, "attention");
  const PassThrough<typename E::Scalar> id{enc.dim()};
  const bool raw_keys = opt.keys_encoded;
  opt.keys_encoded = false;  // the identity encoding: its "keys" are what we pass
  const auto qs = Positions::sequence(double(k.tokens() - q.tokens()));
  if (raw_keys)
    attention(id, e.q, qs, k, Positions::sequence(0.0), v, out, opt);
  else
    attention(id, e.q, qs, e.k, Positions::sequence(0.0), v, out, opt);
}

/// scores and attention with one encoding per query head (per_head.hpp) over N-D points.
template <class E, class Tq, class Tk, class Out>
void scores(const PerHead<E>& enc, TensorView<Tq> q, const PositionsND& tq, TensorView<Tk> k,
            const PositionsND& tk, TensorView<Out> out, const ScoreOptions& opt = {}) {
  detail::per_head::scores(enc, q, tq, k, tk, out, opt);
}
template <class E, class Tq, class Tk, class Tv, class To>
void attention(const PerHead<E>& enc, TensorView<Tq> q, const PositionsND& tq, TensorView<Tk> k,
               const PositionsND& tk, TensorView<Tv> v, TensorView<To> out,
               const AttentionOptions& opt = {}) {
  detail::per_head::attention(enc, q, tq, k, tk, v, out, opt);
}

}  // namespace peal
