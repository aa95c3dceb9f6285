// Backward of linear_attention() (linear_attention.hpp; docs/gradients.md §4). The forward is
//   out[i,h,:] = Σ_{s_j ≤ t_i} S_hij v[j,h/G,:],   S_hij = scale γ_h^τ q_ihᵀ A(τ) k_j,h/G,
// τ = t_i − s_j: the scores of scores() with a causal mask and the decays, times V. So with
// dO = ∂L/∂out,
//   dV_j = Σ_{h of its group} Σ_{i : s_j ≤ t_i} S_hij dO_ih,   dS_hij = dO_ih · v_j,
// and dS goes through scores_backward (scores_backward.hpp: anchored tiles, cross factors,
// the encode backward at relative positions) into dq, dk, ∂L/∂θ, ∂L/∂t, ∂L/∂s and ∂L/∂γ_h.
// The three forms of the forward compute the same function; the backward has two algorithms:
//  - O(n), the chunkwise form's own (detail/tiled/linear_backward_run.hpp): for form = chunkwise
//    or recurrent, and automatic past 256 keys (where the forward takes the chunkwise form).
//    The states at the chunk anchors are recomputed (checkpoints every sqrt(chunks) chunks),
//    the adjoint state dM carried from the last chunk back, the pairs within a chunk by the
//    quadratic algorithm below on a C x C block; the anchor transport A_X(Δ) between chunks
//    contributes its own parameter derivative. Time O(n C d + n d dv) per head (plus
//    O(n d² dv / C) for the dense transport of encodings that are not pure rotations), memory
//    O(sqrt(n / C) d dv) per state head and one chunk's rows. Every encoding of the forward's
//    chunkwise form; PerHead (which the forward does not take) keeps the quadratic one.
//  - quadratic, for form = parallel, automatic up to 256 keys, PerHead: queries taken in
//    blocks (at most 2^22 entries of S and dS per block, and at least one query): per block S
//    by scores() (only when dv is wanted) and dS by one product per head, in double; dV and dk
//    sum over the blocks in double and are written once. Memory: O(Hq · nb · nk) for a block of
//    nb queries and O((d + dv) · nk · Hk) for the sums, never O(nq · nk · Hq).
// Arithmetic: the forward's for the scores (double if q, k or v stores double, float
// otherwise), double for dS, dV, the states, their adjoints and the sums. Threads: the O(n)
// backward over the key heads (each with its own sums, added in head order), the quadratic
// one's scores forward and backward take opt.threads (the products per block one thread);
// deterministic (any thread count gives the bits of one thread).
// RetNet's normalisation (normalization = retnet; detail/tiled/linear_retnet_backward.hpp): the
// forward writes o_i = u_i / (sqrt(S_i) D_i), u_i the row above, S_i = Σ_{j ∈ J_i} γ^(t_i − s_j)
// the decay mask's row sum (J_i: the visible keys; chunkwise: those of i's chunk) and D_i
// torchscale's divisor, which microsoft/torchscale multiscale_retention.py computes from
// .detach()ed tensors: parallel_forward's abs row sum clamped to [1, 5e4],
// chunk_recurrent_forward's max(inner_scale, kv_scale); recurrent_forward has none (D_i = 1).
// The backward holds D_i constant, as torchscale's autograd does, and differentiates S_i (built
// from the decay buffer in retnet.py RetNetRelPos.forward, not detached): dq, dk, dv and ∂L/∂θ
// are the backward above with dO_i scaled by c_i = 1 / (sqrt(S_i) D_i) (torchscale's gradients,
// whose decays are fixed), and ∂L/∂γ_h, ∂L/∂t, ∂L/∂s add ∂L/∂S_i = −(dO_i · o_i) / (2 S_i)
// times ∂S_i: the derivative of the forward with the divisors held constant. The form must be
// the forward's (automatic throws), chunkwise with its chunk and a pure rotation, as the
// forward requires; chunkwise and recurrent take the O(n) algorithm, parallel the quadratic one;
// PerHead throws (no such forward).
// A call continuing a LinearState has its own overload, with the state's gradients, in
// linear_state_backward.hpp (normalization = none there).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "detail/overlap.hpp"
#include "detail/tiled/backward_run.hpp"
#include "detail/tiled/linear_backward_run.hpp"
#include "errors.hpp"
#include "linear_attention.hpp"
#include "positions.hpp"
#include "scores.hpp"
#include "scores_backward.hpp"
#include "view.hpp"

namespace peal {

/// Where the gradients of linear_attention_backward go (each may be null: not wanted). All are
/// ADDED to.
template <class R>
struct LinearAttentionGradients {
  std::vector<R>* parameters = nullptr;       ///< parameter_count(enc) entries
  std::vector<R>* query_positions = nullptr;  ///< nq entries
  std::vector<R>* key_positions = nullptr;    ///< nk entries
  std::vector<double>* decay = nullptr;       ///< Hq entries (opt.decay set)
};

namespace detail {
namespace linear_backward {

namespace br = backward_run;
using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Entries of S (and of dS) per block of queries.
inline constexpr Index kBlockEntries = Index(1) << 22;

// What RetNet's normalisation needs of the call: the forward's own requirements
// (linear_attention.hpp run_linear), since the backward differentiates the form given.
template <class E>
void check_retnet(const E& enc, const LinearAttentionOptions& opt, const std::string& w) {
  if constexpr (per_head_encoding<E>::value) {
    fail(w + ": normalization = retnet with a PerHead encoding: linear_attention takes one "
             "encoding, so there is no such forward to differentiate");
  } else {
    if (opt.form == LinearForm::automatic)
      fail(w + ": with normalization = retnet the output depends on the form (torchscale "
               "normalises its parallel, recurrent and chunkwise forms differently): give the "
               "forward's form = parallel, chunkwise or recurrent");
    if (opt.form == LinearForm::chunkwise && opt.chunk == 0)
      fail(w + ": RetNet's chunkwise normalisation depends on the chunk size: give the "
               "forward's chunk (torchscale's recurrent_chunk_size)");
    if (opt.form == LinearForm::chunkwise && !coders::is_pure_rotation<double>(enc))
      fail(w + ": RetNet's chunkwise normalisation takes the 1-norm of the state in the "
               "absolute frame, bounded only for a pure rotation (decays as the decay option)");
  }
}

template <class E, class Tq, class Tk, class Tv, class Tdo, class Tdq, class Tdk, class Tdv,
          class R>
void check(const E& enc, const TensorView<Tq>& q, const Positions& tq, const TensorView<Tk>& k,
           const Positions& tk, const TensorView<Tv>& v, const TensorView<Tdo>& dout,
           const TensorView<Tdq>& dq, const TensorView<Tdk>& dk, const TensorView<Tdv>& dv,
           const LinearAttentionOptions& opt, const LinearAttentionGradients<R>& g) {
  const std::string w = "linear_attention_backward";
  const Index d = Index(enc.dim()), nq = q.tokens(), nk = k.tokens(), Hq = q.heads();
  if (q.dim() != d || k.dim() != d)
    fail(w + ": queries " + tiled::extents(nq, Hq, q.dim()) + " and keys " +
         tiled::extents(nk, k.heads(), k.dim()) + " must have dim " + std::to_string(d) +
         " (the encoding's dim())");
  if (Hq <= 0 || k.heads() <= 0 || Hq % k.heads() != 0)
    fail(w + ": the number of query heads (" + std::to_string(Hq) +
         ") must be a positive multiple of the number of key heads (" +
         std::to_string(k.heads()) + ")");
  if (v.tokens() != nk || v.heads() != k.heads())
    fail(w + ": values " + tiled::extents(v.tokens(), v.heads(), v.dim()) +
         " must have the keys' tokens and heads");
  if (dout.tokens() != nq || dout.heads() != Hq || dout.dim() != v.dim())
    fail(w + ": d_out is " + tiled::extents(dout.tokens(), dout.heads(), dout.dim()) +
         ", expected [nq, Hq, dv] = " + tiled::extents(nq, Hq, v.dim()));
  tq.check(nq, "linear_attention_backward (query positions)");
  tk.check(nk, "linear_attention_backward (key positions)");
  linear::require_sorted(tq, nq, w + ": query positions");
  linear::require_sorted(tk, nk, w + ": key positions");
  linear::check_linear_options(opt, Hq, "linear_attention_backward");
  if (opt.normalization == LinearNorm::retnet) check_retnet(enc, opt, w);
  tiled::check_position_span(tq, nq, tk, nk, w);
  const auto Q = std::make_pair(&q, "q");
  const auto K = std::make_pair(&k, "k");
  const auto V = std::make_pair(&v, "v");
  const auto DO = std::make_pair(&dout, "d_out");
  br::check_output(w, dq, "dq", q, "q", Q, K, V, DO);
  br::check_output(w, dk, "dk", k, "k", Q, K, V, DO, std::make_pair(&dq, "dq"));
  br::check_output(w, dv, "dv", v, "v", Q, K, V, DO, std::make_pair(&dq, "dq"),
                   std::make_pair(&dk, "dk"));
  br::check_size(w, g.parameters, Index(parameter_count(enc)), "parameter");
  br::check_size(w, g.query_positions, nq, "query position");
  br::check_size(w, g.key_positions, nk, "key position");
  br::check_head_option(w, g.decay, opt.decay, Hq, "decay");
}

// Rows [i0, i0 + n) of a [tokens, heads, dim] view.
template <class T>
TensorView<T> tokens(const TensorView<T>& x, Index i0, Index n) {
  if (x.empty() || n == 0) return TensorView<T>(x.data(), 0, x.heads(), x.dim());
  return TensorView<T>(x.vector(i0, 0), n, x.heads(), x.dim(), x.strides());
}

// The calling thread's buffers, kept between calls and grown when needed, never zero-filled
// unless asked: fresh ones cost page faults and zero-filling, which were half of the backward's
// time at n = 512 (perf, bench/README.md). Sizes are checked products: past the index range,
// invalid_argument, never a wrapped small allocation. 64-byte aligned (linear::Buffer): the
// bits of Eigen's loops over them must not depend on the heap (detail/tiled/backward_run.hpp,
// Buffer).
enum Buffer { kS, kdS, kdKBlock, kdK, kdV, kV, kdO, kBuffers };
inline double* kept_buffer(Buffer which, Index a, Index b, Index c = 1) {
  const Index n = checked_mul(checked_mul(a, b), c);
  if (n < 0) fail("linear_attention_backward: a working buffer's size overflows the index range");
  thread_local linear::Buffer<double> buffers[kBuffers];
  linear::Buffer<double>& buf = buffers[which];
  if (Index(buf.size()) < n) buf.resize(std::size_t(n));
  return buf.data();
}

template <class E, class Tq, class Tk, class Tv, class Tdo, class Tdq, class Tdk, class Tdv,
          class R>
void run(const E& enc, const TensorView<Tq>& q, const Positions& tq, const TensorView<Tk>& k,
         const Positions& tk, const TensorView<Tv>& v, const TensorView<Tdo>& dout,
         const TensorView<Tdq>& dq, const TensorView<Tdk>& dk, const TensorView<Tdv>& dv,
         const LinearAttentionOptions& opt, const LinearAttentionGradients<R>& g,
         Index block_entries = kBlockEntries, RetNetRows* rn = nullptr) {
  const Index nq = q.tokens(), nk = k.tokens(), Hq = q.heads(), Hk = k.heads(), G = Hq / Hk;
  const Index d = q.dim(), dvn = v.dim();
  if (nk == 0) {  // no keys: out is 0, nothing reaches q
    br::set_zero(dq);
    return;
  }
  ScoreOptions so;  // the forward's scores: causal (s_j ≤ t_i visible), scale, decays
  so.causal = true;
  so.scale = linear::linear_scale(opt, d);
  so.decay = opt.decay;
  so.threads = opt.threads;
  using Map = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;
  const Index hk_nk = checked_mul(Hq, nk);
  const Index nb = std::max<Index>(1, std::min(nq, hk_nk < 0 ? 1 : block_entries / std::max<Index>(1, hk_nk)));
  double* const S = kept_buffer(kS, Hq, nb, nk);
  double* const dS = kept_buffer(kdS, Hq, nb, nk);
  double* const dO = kept_buffer(kdO, nb, dvn);
  double* const V = kept_buffer(kV, nk, Hk, dvn);  // [nk, Hk, dv], the keys' values in double
  double* const dV = kept_buffer(kdV, nk, Hk, dvn);
  double* const dK = kept_buffer(kdK, nk, Hk, d);
  double* const dk_block = kept_buffer(kdKBlock, nk, Hk, d);
  for (Index h = 0; h < Hk; ++h) gather(v, 0, nk, h, V + h * dvn, Hk * dvn);
  std::fill(dV, dV + nk * Hk * dvn, 0.0);
  std::fill(dK, dK + nk * Hk * d, 0.0);
  std::vector<double> tb(static_cast<std::size_t>(nb));
  std::vector<Index> visible(tb.size());  // keys with s_j ≤ t_i (both sorted)
  std::vector<R> qpos_b;                  // a block's query-position gradient
  for (Index i0 = 0; i0 < nq; i0 += nb) {
    const Index n = std::min(nb, nq - i0);
    for (Index r = 0; r < n; ++r) tb[std::size_t(r)] = tq[i0 + r];
    const Positions tqb(tb.data(), n);
    for (Index r = 0, j = 0; r < n; ++r) {
      while (j < nk && !(tk[j] > tb[std::size_t(r)])) ++j;
      visible[std::size_t(r)] = j;
    }
    const auto qb = tokens(q, i0, n);
    const bool want_S = !dv.empty() || rn;  // (RetNet: its rows' abs sums and a_i)
    if (want_S) peal::scores(enc, qb, tqb, k, tk, TensorView<double>(S, Hq, n, nk), so);
    for (Index h = 0; h < Hq; ++h) {  // dS = dO Vᵀ (masked entries are never read); dV += Sᵀ dO
      const Index kh = h / G;
      gather(dout, i0, n, h, dO, dvn);
      Eigen::Map<RowMatrix> Sh(S + h * n * nk, n, nk);
      if (want_S)
        for (Index r = 0; r < n; ++r)  // masked: −∞ in S, no share of dV
          Sh.row(r).tail(nk - visible[std::size_t(r)]).setZero();
      if (rn) normalise_rows(*rn, Sh.data(), n, nk, i0, h, 1.0, dO, dvn, dvn);  // dO′ = c dO
      const Eigen::Map<const RowMatrix> dOh(dO, n, dvn);
      const Map Vh(V + kh * dvn, nk, dvn, Eigen::OuterStride<>(Hk * dvn));
      Eigen::Map<RowMatrix>(dS + h * n * nk, n, nk).noalias() = dOh * Vh.transpose();
      if (rn) add_row_dots(*rn, Sh.data(), dS + h * n * nk, n, nk, i0, h);
      if (dv.empty()) continue;
      Map(dV + kh * dvn, nk, dvn, Eigen::OuterStride<>(Hk * dvn)).noalias() += Sh.transpose() * dOh;
    }
    const TensorView<double> dkb(dk.empty() ? nullptr : dk_block, dk.empty() ? 0 : nk, Hk, d);
    if (g.query_positions) qpos_b.assign(std::size_t(n), R(0));
    const ScoresGradients<R> sg{g.parameters, g.query_positions ? &qpos_b : nullptr,
                                g.key_positions, nullptr, g.decay};
    peal::scores_backward(enc, qb, tqb, k, tk, TensorView<const double>(dS, Hq, n, nk),
                          tokens(dq, i0, n), dkb, so, sg);
    if (g.query_positions)
      for (Index r = 0; r < n; ++r) (*g.query_positions)[std::size_t(i0 + r)] += qpos_b[std::size_t(r)];
    if (!dk.empty())
      for (Index x = 0; x < nk * Hk * d; ++x) dK[x] += dk_block[x];
  }
  if (!dk.empty()) write(dk, dK);
  if (!dv.empty()) write(dv, dV);
}

}  // namespace linear_backward
}  // namespace detail

/// Backward of linear_attention(enc, q, tq, k, tk, v, out, opt) (the top of this file; with
/// normalization = retnet, torchscale's detached divisors held constant): d_out = ∂L/∂out
/// [nq, Hq, dv]. Writes dq [nq, Hq, d], dk [nk, Hk, d] and dv [nk, Hk, dv] (each may be empty:
/// not wanted; none may overlap an input or another) and ADDS the gradients asked for in grads
/// (the decays' with opt.decay set). q, k, v, d_out: float, double, Eigen::half or
/// Eigen::bfloat16. Throws peal::invalid_argument before writing anything on inconsistent
/// extents, unsorted or non-finite positions, bad options, gradient sizes, overlapping outputs,
/// and, with normalization = retnet, on form = automatic, chunkwise without a chunk or with an
/// encoding that is not a pure rotation, and PerHead. opt.form and opt.chunk choose the
/// algorithm (the top of this file), not the result: the forms compute one function (except
/// under RetNet's normalisation, which is the form's own).
template <class E, class Tq, class Tk, class Tv, class Tdo, class Tdq, class Tdk, class Tdv>
void linear_attention_backward(const E& enc, TensorView<Tq> q, const Positions& tq,
                               TensorView<Tk> k, const Positions& tk, TensorView<Tv> v,
                               TensorView<Tdo> d_out, TensorView<Tdq> dq, TensorView<Tdk> dk,
                               TensorView<Tdv> dv, const LinearAttentionOptions& opt = {},
                               LinearAttentionGradients<real_t<typename E::Scalar>> grads = {}) {
  namespace lb = detail::linear_backward;
  detail::encode_backward::require_derivatives<E>();
  lb::check(enc, q, tq, k, tk, v, d_out, dq, dk, dv, opt, grads);
  lb::RetNetRows retnet;  // RetNet's normalisation (detail/tiled/linear_retnet_backward.hpp)
  lb::RetNetRows* const rn = opt.normalization == LinearNorm::retnet ? &retnet : nullptr;
  if (rn)
    retnet = lb::retnet_rows(opt, tq, tk, q.tokens(), k.tokens(), q.heads(),
                             detail::linear::linear_scale(opt, q.dim()));
  if constexpr (!lb::per_head_encoding<E>::value) {
    if (lb::chunked(opt, q.tokens(), k.tokens())) {
      const auto qr = detail::ro(q);
      const auto kr = detail::ro(k);
      const auto vr = detail::ro(v);
      const auto dor = detail::ro(d_out);
      lb::ChunkBackward<E, const std::remove_cv_t<Tq>, const std::remove_cv_t<Tk>,
                        const std::remove_cv_t<Tv>, const std::remove_cv_t<Tdo>,
                        real_t<typename E::Scalar>>
          cb(enc, qr, tq, kr, tk, vr, dor, opt, grads.parameters, grads.query_positions,
             grads.key_positions, grads.decay, rn);
      cb.run(dq, dk, dv);
      if (rn)
        lb::add_mask_gradients(retnet, grads.decay, grads.query_positions, grads.key_positions);
      return;
    }
  }
  lb::run(enc, detail::ro(q), tq, detail::ro(k), tk, detail::ro(v), detail::ro(d_out), dq, dk,
          dv, opt, grads, lb::kBlockEntries, rn);
  if (rn) lb::add_mask_gradients(retnet, grads.decay, grads.query_positions, grads.key_positions);
}

}  // namespace peal
