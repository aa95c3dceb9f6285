// Batch encoding of queries and keys held as inference engines hold them,
// [tokens, heads, dim] with arbitrary element strides (view.hpp), docs/design.md §1-2:
//   encode_queries:  q[i,h,:] <- F(t_i) q[i,h,:],   F(t) = A(t)^T,
//   encode_keys:     k[i,h,:] <- G(s_i) k[i,h,:],   G(s) = A(-s),
//   shift_keys:      k[i,h,:] <- A(-delta) k[i,h,:], so that G(s) k becomes G(s + delta) k
//                    (G(s + delta) = A(-delta) G(s); one matrix for every token),
// so that score = q~^T k~ = q^T A(t - s) k. Out-of-place overloads read a source view and
// write a destination view of the same extents (the storage types may differ).
//
// Storage: float, double, Eigen::half, Eigen::bfloat16. Arithmetic is in double when the
// source or destination stores double, in float otherwise; positions and parameters are
// doubles (long double for long double encodings) and angles are reduced exactly
// (detail/math/angle.hpp) before sin/cos, so a float RoPE at position 1.7e9 is still accurate.
//
// Dispatch (docs/kernels-encode.md): each encoding maps to a per-token kernel, the coder of
// the fused kernels for double parameters, a dense one for long double encodings, the N-D
// kernels for points: detail/encode/kernels.hpp.
// Numerics at large |a t|: encode applies the GLOBAL F(t) and G(s). For growth/decay
// components (RealBlock lambda != 0, RotationBlock a != 0, Jordan blocks) the factor
// e^{a t} overflows to inf or underflows to 0 once |a t| passes the range of the
// arithmetic type (|a t| > ~88 in float, ~709 in double: with a RetNet decay
// gamma = 1 - 2^-5 the float key factor e^{-a s} overflows past s ~ 2800 and the query
// factor e^{a t} underflows past t ~ 2800). That is the nature of the global
// factorization, not a defect of the kernel, and it is not clamped here: scores at any
// sequence length come from the fused, rebasing scores() kernel (docs/design.md §1).
// Pure rotations (a = 0, RoPE) have |F(t)| = 1 and are accurate at any position. When a
// token's factor overflows the arithmetic type, that token is computed exactly instead
// (rotation first, then the factor by detail::mul_exp, or the encoding's own apply()): a
// zero component stays 0 (never inf·0 = NaN), a tiny one stays finite when its product is,
// the others are ±inf. A factor that underflows gives what IEEE arithmetic gives.
//
// With OpenMP (-fopenmp), tokens are split statically over threads when the call moves at
// least detail::encode_kernels::kParallelMinElements elements; the results
// are bitwise the same for any number of threads.
#pragma once

#include "detail/encode/kernels.hpp"
#include "detail/overlap.hpp"
#include "per_head.hpp"
#include "positions.hpp"
#include "positions_nd.hpp"
#include "view.hpp"

namespace peal {

/// dst[i,h,:] <- F(t_i) src[i,h,:]. src and dst have the same extents and do not overlap
/// (unless they are the same view, which is then encoded in place); partial overlap throws.
template <class E, class TS, class TD>
void encode_queries(const E& enc, TensorView<TS> src, TensorView<TD> dst, const Positions& pos) {
  namespace k = detail::encode_kernels;
  k::check_views(enc, src, dst, "encode_queries");
  pos.check(dst.tokens(), "encode_queries");
  k::run(enc, k::Mode::query, detail::ro(src), dst, pos);
}

/// q[i,h,:] <- F(t_i) q[i,h,:] = A(t_i)^T q[i,h,:] for every token i and head h, in place.
template <class E, class T>
void encode_queries(const E& enc, TensorView<T> q, const Positions& pos) {
  encode_queries(enc, q, q, pos);
}

/// dst[i,h,:] <- G(s_i) src[i,h,:]; same extents, no overlap (or the same view: in place).
template <class E, class TS, class TD>
void encode_keys(const E& enc, TensorView<TS> src, TensorView<TD> dst, const Positions& pos) {
  namespace kk = detail::encode_kernels;
  kk::check_views(enc, src, dst, "encode_keys");
  pos.check(dst.tokens(), "encode_keys");
  kk::run(enc, kk::Mode::key, detail::ro(src), dst, pos);
}

/// k[i,h,:] <- G(s_i) k[i,h,:] = A(-s_i) k[i,h,:] for every token i and head h, in place.
template <class E, class T>
void encode_keys(const E& enc, TensorView<T> k, const Positions& pos) {
  encode_keys(enc, k, k, pos);
}

/// Keys encoded at s become keys encoded at s + delta: k <- A(-delta) k for every token and
/// head (G(s + delta) = A(-delta) G(s)); one factor for the whole view. Pure rotations
/// (RoPE) compose exactly up to rounding, so repeated shifts neither drift nor scale.
template <class E, class T>
void shift_keys(const E& enc, TensorView<T> k, double delta) {
  namespace kk = detail::encode_kernels;
  kk::check_views(enc, k, k, "shift_keys");
  detail::require_finite(delta, "shift_keys", "delta");
  kk::run(enc, kk::Mode::shift, detail::ro(k), k, Positions::sequence(delta, 0.0));
}

/// dst <- A(-delta) src (out-of-place shift_keys; no overlap, or the same view: in place).
template <class E, class TS, class TD>
void shift_keys(const E& enc, TensorView<TS> src, TensorView<TD> dst, double delta) {
  namespace kk = detail::encode_kernels;
  kk::check_views(enc, src, dst, "shift_keys");
  detail::require_finite(delta, "shift_keys", "delta");
  kk::run(enc, kk::Mode::shift, detail::ro(src), dst, Positions::sequence(delta, 0.0));
}

// ---- N-D positions (multi_axis.hpp, positions_nd.hpp): token i at the point p_i ∈ ℝᴰ.
// The encoding is a MultiAxis (or a preset that is one); everything else is as above.

/// dst[i,h,:] <- F(p_i) src[i,h,:] for points p_i (same extents, no overlap, or in place).
template <class E, class TS, class TD>
void encode_queries(const E& enc, TensorView<TS> src, TensorView<TD> dst, const PositionsND& pos) {
  namespace k = detail::encode_kernels;
  k::check_views(enc, src, dst, "encode_queries");
  pos.check(dst.tokens(), enc.axes(), "encode_queries");
  k::run(enc, k::Mode::query, detail::ro(src), dst, pos);
}
template <class E, class T>
void encode_queries(const E& enc, TensorView<T> q, const PositionsND& pos) {
  encode_queries(enc, q, q, pos);
}
/// dst[i,h,:] <- G(p_i) src[i,h,:] for points p_i.
template <class E, class TS, class TD>
void encode_keys(const E& enc, TensorView<TS> src, TensorView<TD> dst, const PositionsND& pos) {
  namespace k = detail::encode_kernels;
  k::check_views(enc, src, dst, "encode_keys");
  pos.check(dst.tokens(), enc.axes(), "encode_keys");
  k::run(enc, k::Mode::key, detail::ro(src), dst, pos);
}
template <class E, class T>
void encode_keys(const E& enc, TensorView<T> k, const PositionsND& pos) {
  encode_keys(enc, k, k, pos);
}
/// Keys encoded at p become keys encoded at p + delta (delta ∈ ℝᴰ): k <- A(-delta) k.
template <class E, class TS, class TD>
void shift_keys(const E& enc, TensorView<TS> src, TensorView<TD> dst,
                const std::vector<double>& delta) {
  namespace k = detail::encode_kernels;
  k::check_views(enc, src, dst, "shift_keys");
  if (int(delta.size()) != enc.axes())
    detail::fail("shift_keys: delta has " + std::to_string(delta.size()) +
                 " coordinates, the encoding has " + std::to_string(enc.axes()) + " axes");
  const PositionsND d = PositionsND::constant(delta.data(), enc.axes());
  d.check(dst.tokens(), enc.axes(), "shift_keys");
  k::run(enc, k::Mode::shift, detail::ro(src), dst, d);
}
template <class E, class T>
void shift_keys(const E& enc, TensorView<T> k, const std::vector<double>& delta) {
  shift_keys(enc, k, k, delta);
}

// ---- One encoding per query head (per_head.hpp): head h's kernel on head h's slices.
namespace detail {
namespace per_head {

template <bool Query, class E, class TS, class TD, class Pos>
void encode(const PerHead<E>& enc, const TensorView<TS>& src, const TensorView<TD>& dst,
            const Pos& pos) {
  const char* where = Query ? "encode_queries" : "encode_keys";
  require_heads(enc, dst, where, "destination");
  require_heads(enc, src, where, "source");
  // Whole views: head h's call sees its own slices only, not dst over a later head's source.
  check_encode_aliasing(src, dst, where);
  for (int h = 0; h < enc.heads(); ++h) {
    if constexpr (Query)
      encode_queries(enc.head(h), slice(src, h), slice(dst, h), pos);
    else
      encode_keys(enc.head(h), slice(src, h), slice(dst, h), pos);
  }
}

template <class E, class T, class Delta>
void shift(const PerHead<E>& enc, const TensorView<T>& k, const Delta& delta) {
  require_heads(enc, k, "shift_keys", "key");
  for (int h = 0; h < enc.heads(); ++h) shift_keys(enc.head(h), slice(k, h), delta);
}

}  // namespace per_head
}  // namespace detail

// One overload per position type (Positions, PositionsND): a template parameter for it would
// make the calls ambiguous with the overloads above.
template <class E, class TS, class TD>
void encode_queries(const PerHead<E>& enc, TensorView<TS> src, TensorView<TD> dst,
                    const Positions& pos) {
  detail::per_head::encode<true>(enc, src, dst, pos);
}
template <class E, class T>
void encode_queries(const PerHead<E>& enc, TensorView<T> q, const Positions& pos) {
  detail::per_head::encode<true>(enc, q, q, pos);
}
template <class E, class TS, class TD>
void encode_keys(const PerHead<E>& enc, TensorView<TS> src, TensorView<TD> dst,
                 const Positions& pos) {
  detail::per_head::encode<false>(enc, src, dst, pos);
}
template <class E, class T>
void encode_keys(const PerHead<E>& enc, TensorView<T> k, const Positions& pos) {
  detail::per_head::encode<false>(enc, k, k, pos);
}
template <class E, class TS, class TD>
void encode_queries(const PerHead<E>& enc, TensorView<TS> src, TensorView<TD> dst,
                    const PositionsND& pos) {
  detail::per_head::encode<true>(enc, src, dst, pos);
}
template <class E, class T>
void encode_queries(const PerHead<E>& enc, TensorView<T> q, const PositionsND& pos) {
  detail::per_head::encode<true>(enc, q, q, pos);
}
template <class E, class TS, class TD>
void encode_keys(const PerHead<E>& enc, TensorView<TS> src, TensorView<TD> dst,
                 const PositionsND& pos) {
  detail::per_head::encode<false>(enc, src, dst, pos);
}
template <class E, class T>
void encode_keys(const PerHead<E>& enc, TensorView<T> k, const PositionsND& pos) {
  detail::per_head::encode<false>(enc, k, k, pos);
}
/// shift_keys per head: delta a scalar (1-D heads) or a vector (N-D heads).
template <class E, class T>
void shift_keys(const PerHead<E>& enc, TensorView<T> k, double delta) {
  detail::per_head::shift(enc, k, delta);
}
template <class E, class T>
void shift_keys(const PerHead<E>& enc, TensorView<T> k, const std::vector<double>& delta) {
  detail::per_head::shift(enc, k, delta);
}

}  // namespace peal
