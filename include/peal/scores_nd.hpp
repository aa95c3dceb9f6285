// scores() and attention() for points p ∈ ℝᴰ (multi_axis.hpp, docs/positions-nd.md §3).
//
// For a pure rotation (every axis a rotation bank with a = 0: M-RoPE, axial and mixed ViT
// RoPE, DINOv3), F(p) and G(p) are orthogonal, so the factorisation q̃ = F(p) q,
// k̃ = G(p') k at absolute points is as accurate as any rebasing (the angles are formed
// exactly per axis; |q̃| = |q|). The kernels encode q and k once into a buffer of the
// arithmetic type (one encoded copy, O(n d): never the n×n matrix) and run the 1-D fused
// kernels with the identity encoding on it, so tiling, online softmax, GQA, masking and
// threading are the 1-D kernels'. Encodings with growth, decay or Jordan parts are refused:
// at absolute points their factors overflow (the 1-D kernels rebase by a scalar anchor,
// which a vector lag does not have yet).
//
// Masks are by token order: query i is at index nk − nq + i of the keys (the KV-cache
// convention: the queries are the last nq tokens), `causal` hides keys with a larger index
// and `window` keys at index distance ≥ W. ALiBi slopes and scalar decays need a scalar
// distance and are refused; per-head encodings (per_head.hpp) take N-D points too.
#pragma once

#include <algorithm>
#include <type_traits>
#include <vector>

#include "attention.hpp"
#include "encode.hpp"
#include "multi_axis.hpp"
#include "positions_nd.hpp"
#include "scores.hpp"

namespace peal {
namespace detail {
namespace scores_nd {

template <class C, class E>
void require_pure_rotation(const E& enc, const char* where) {
  for (int a = 0; a < enc.axes(); ++a)
    if (!scores_kernels::is_pure_rotation<C>(enc.axis(a)))
      fail(std::string(where) + ": N-D positions need a pure rotation on every axis (a rotation "
                                "bank with a = 0, no growth, decay or Jordan part); axis " +
           std::to_string(a) + " is not (use the per-token score, or 1-D positions)");
}

// q (and k unless already encoded) encoded at their points into buffers of C.
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
    require_pure_rotation<C>(enc, where);
    qe.resize(std::size_t(qv.tokens() * qv.heads() * qv.dim()));
    const TensorView<C> qd(qe.data(), qv.tokens(), qv.heads(), qv.dim());
    encode_queries(enc, qv, qd, pq);
    q = qd;
    if (keys_encoded) return;
    ke.resize(std::size_t(kv.tokens() * kv.heads() * kv.dim()));
    const TensorView<C> kd(ke.data(), kv.tokens(), kv.heads(), kv.dim());
    encode_keys(enc, kv, kd, pk);
    k = kd;
  }
};

}  // namespace scores_nd
}  // namespace detail

/// out[h, i, j] = scale q_iᵀ A(p_i − p'_j) k_j over points (a pure-rotation MultiAxis);
/// causal by token order (header comment). Extents and options as the 1-D scores().
template <class E, class Tq, class Tk, class Out>
void scores(const E& enc, TensorView<Tq> q, const PositionsND& pq, TensorView<Tk> k,
            const PositionsND& pk, TensorView<Out> out, const ScoreOptions& opt = {}) {
  namespace sn = detail::scores_nd;
  using C = detail::scores_kernels::arith_t<Tq, Tk>;
  if (!opt.alibi_slopes.empty() || !opt.decay.empty())
    detail::fail("scores: ALiBi slopes and decays need scalar positions, not N-D points");
  if (q.dim() != Index(enc.dim()) || k.dim() != Index(enc.dim()))
    detail::fail("scores: q and k must have dim " + std::to_string(enc.dim()));
  const sn::Encoded<C, E, Tq, Tk> e(enc, q, pq, k, pk, false, "scores");
  const PassThrough<typename E::Scalar> id{enc.dim()};
  scores(id, e.q, Positions::sequence(double(k.tokens() - q.tokens())), e.k,
         Positions::sequence(0.0), out, opt);
}

/// Softmax attention over points (a pure-rotation MultiAxis): out = softmax(scale S) V with
/// S_ij = q_iᵀ A(p_i − p'_j) k_j; masks by token order (header comment). With
/// opt.keys_encoded the keys hold G(p'_j) k_j already (a KV cache encoded once).
template <class E, class Tq, class Tk, class Tv, class To>
void attention(const E& enc, TensorView<Tq> q, const PositionsND& pq, TensorView<Tk> k,
               const PositionsND& pk, TensorView<Tv> v, TensorView<To> out,
               AttentionOptions opt = {}) {
  namespace sn = detail::scores_nd;
  using C = std::conditional_t<std::is_same<std::remove_cv_t<Tv>, double>::value, double,
                               detail::scores_kernels::arith_t<Tq, Tk>>;
  if (!opt.alibi_slopes.empty())
    detail::fail("attention: ALiBi slopes need scalar positions, not N-D points");
  if (q.dim() != Index(enc.dim()) || k.dim() != Index(enc.dim()))
    detail::fail("attention: q and k must have dim " + std::to_string(enc.dim()));
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

}  // namespace peal
