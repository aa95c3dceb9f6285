// Fused softmax attention over any peal encoding (docs/kernels-attention.md):
//
//   out[i,h,:] = Σ_j softmax_j( x_ij ) v[j, h/G, :],
//   x_ij = cap( scale · q_{i,h}ᵀ A(t_i − s_j) k_{j,h/G} ) − m_h (t_i − s_j),
//
// cap(x) = c tanh(x / c) when a softcap c is given (Gemma 2), m_h an optional ALiBi slope;
// keys with s_j > t_i (causal) or t_i − s_j ≥ W (sliding window, Mistral/Gemma) are masked;
// optional per-head sink logits σ_h join the denominator only (gpt-oss). q is [nq, Hq, d],
// k [nk, Hk, d], v [nk, Hk, dv], out [nq, Hq, dv] (Hq = G·Hk: grouped-query attention).
//
// The logits come from the same tiles, rebasing and coders as peal::scores (detail/
// tile_run.hpp, the top of scores.hpp); each finished tile is folded into an online softmax
// (detail/tiled/attention_sink.hpp, FlashAttention-2 style): no nq x nk matrix exists, working
// memory is bounded by the tile sizes. Decoding (few queries, a long cache) splits the key
// tiles into ranges merged by log-sum-exp, so that one head still fills the threads.
//
// Two ways to hold a KV cache: raw keys with their positions (any encoding: rebased inside),
// or keys_encoded = true, keys already multiplied by G(s) = A(−s) (encode_keys at insertion,
// what engines store for RoPE). The second needs a bounded G(s): it is accepted only for
// pure rotations (every block a rotation with a = 0, no Jordan part), and the queries are
// encoded with F(t) = A(t)ᵀ inside.
#pragma once

#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "block_diagonal.hpp"
#include "detail/basis_rows.hpp"
#include "detail/overlap.hpp"
#include "detail/storage.hpp"
#include "detail/tiled/attention_sink.hpp"
#include "detail/tiled/tile_run.hpp"
#include "encode.hpp"
#include "errors.hpp"
#include "per_head.hpp"
#include "positions.hpp"
#include "scores.hpp"
#include "view.hpp"

namespace peal {

/// Options of attention().
struct AttentionOptions {
  /// Multiplies q^T A k (empty: 1/sqrt(d)).
  std::optional<double> scale;
  /// Mask every key with s_j > t_i.
  bool causal = false;
  /// Sliding window W > 0: mask every key with t_i − s_j ≥ W (inf: none). Only the past
  /// side: future keys are masked by `causal`.
  double window = std::numeric_limits<double>::infinity();
  /// ALiBi slopes m_h, one per query head (empty: none); adds −m_h (t_i − s_j) to the logit.
  std::vector<double> alibi_slopes;
  /// Logit softcap c > 0: the scaled score x becomes c tanh(x / c) (0: none).
  double softcap = 0;
  /// Sink logits σ_h, one per query head (empty: none): e^{σ_h} joins the denominator only.
  std::vector<double> sinks;
  /// The keys hold G(s_j) k_j already (encode_keys); only for pure rotations.
  bool keys_encoded = false;
  /// Log-sum-exp of each row's logits (natural log, with the sink), lse[i * Hq + h]; −inf
  /// for a row with no visible key and no sink, NaN for a row a NaN reaches. nullptr: not
  /// written.
  double* lse = nullptr;
  /// Threads with OpenMP (0: omp_get_max_threads()); results do not depend on it.
  int threads = 0;
  /// Tile sizes in tokens (0: automatic, as ScoreOptions). Mostly for tests/tuning.
  Index query_tile = 0;
  Index key_tile = 0;
};

namespace detail {
namespace tiled {

template <class E, class Tq, class Tk, class Tv, class To>
void check_attention(const E& enc, const TensorView<Tq>& q, const Positions& tq,
                     const TensorView<Tk>& k, const Positions& tk, const TensorView<Tv>& v,
                     const TensorView<To>& out, const AttentionOptions& opt) {
  const std::string w = "attention";
  const Index d = Index(enc.dim()), Hq = q.heads(), Hk = k.heads();
  if (q.dim() != d || k.dim() != d)
    fail(w + ": queries " + extents(q.tokens(), q.heads(), q.dim()) + " and keys " +
         extents(k.tokens(), k.heads(), k.dim()) + " must have dim " + std::to_string(d) +
         " (the encoding's dim())");
  if (Hq > 0 && (Hk <= 0 || Hq % Hk != 0))
    fail(w + ": the number of query heads (" + std::to_string(Hq) +
         ") must be a multiple of the number of key heads (" + std::to_string(Hk) + ")");
  if (v.tokens() != k.tokens() || v.heads() != Hk)
    fail(w + ": values " + extents(v.tokens(), v.heads(), v.dim()) +
         " must have the keys' tokens and heads " + extents(k.tokens(), Hk, v.dim()));
  if (out.tokens() != q.tokens() || out.heads() != Hq || out.dim() != v.dim())
    fail(w + ": out is " + extents(out.tokens(), out.heads(), out.dim()) +
         ", expected [nq, Hq, dv] = " + extents(q.tokens(), Hq, v.dim()));
  if (may_overlap(out, q)) fail(w + ": out overlaps q (the output must not share memory)");
  if (may_overlap(out, k)) fail(w + ": out overlaps k (the output must not share memory)");
  if (may_overlap(out, v)) fail(w + ": out overlaps v (the output must not share memory)");
  if (opt.lse) {
    const TensorView<double> lv(opt.lse, q.tokens(), Hq, 1);
    if (may_overlap(out, lv) || may_overlap(lv, q) || may_overlap(lv, k) || may_overlap(lv, v))
      fail(w + ": lse overlaps out, q, k or v");
  }
  tq.check(q.tokens(), "attention (query positions)");
  tk.check(k.tokens(), "attention (key positions)");
  if (opt.scale && !std::isfinite(*opt.scale)) fail(w + ": scale must be finite");
  if (!(opt.window > 0)) {
    std::ostringstream os;
    os << w << ": window must be > 0 (inf: none), got " << opt.window;
    fail(os.str());
  }
  if (!(opt.softcap >= 0) || !std::isfinite(opt.softcap)) {
    std::ostringstream os;
    os << w << ": softcap must be finite and >= 0 (0: none), got " << opt.softcap;
    fail(os.str());
  }
  auto per_head = [&](const std::vector<double>& x, const char* what) {
    if (x.empty()) return;
    if (Index(x.size()) != Hq)
      fail(w + ": " + std::to_string(x.size()) + " " + what + " for " + std::to_string(Hq) +
           " query heads (give one per query head, or none)");
    for (double m : x) require_finite(m, "attention", what);
  };
  per_head(opt.alibi_slopes, "ALiBi slopes");
  per_head(opt.sinks, "sink logits");
  if (opt.threads < 0) fail(w + ": threads must be >= 0");
  if (opt.query_tile < 0 || opt.key_tile < 0) fail(w + ": tile sizes must be >= 0");
  check_position_span(tq, q.tokens(), tk, k.tokens(), w);
}

template <class C, class E, class Tq, class Tk, class Tv, class To>
void run_attention(const E& enc, const TensorView<Tq>& q, const Positions& tq,
                   const TensorView<Tk>& k, const Positions& tk, const TensorView<Tv>& v,
                   const TensorView<To>& out, const ScoreOptions& so, const SoftmaxOptions& sm,
                   double* lse) {
  AttentionSink<C, Tv, To> sink(v, out, lse, sm);
  TileRun<C, E, Tq, Tk, AttentionSink<C, Tv, To>> run(enc, q, tq, k, tk, sink, so);
  sink.prepare(run);
  run.run();
}

}  // namespace tiled
}  // namespace detail

/// out[i,h,:] = Σ_j softmax_j(x_ij) v[j,h/G,:] with x_ij = cap(scale q^T A(t_i − s_j) k) −
/// m_h (t_i − s_j), masked and with sinks as set in `opt` (see the top of this file).
/// q: [nq, Hq, d], k: [nk, Hk, d], v: [nk, Hk, dv] (float, double, Eigen::half or
/// Eigen::bfloat16, const or not), out: [nq, Hq, dv] of any of these, not overlapping q, k,
/// v. Arithmetic: double if q, k or v stores double, float otherwise. A row with no visible
/// key gives zeros (lse −inf, or σ_h with a sink); a NaN in a visible logit or value (q, k,
/// v, or inf − inf) makes the whole row NaN, out and lse; masked keys are not seen
/// (docs/kernels-attention.md, "NaN and infinities"). Throws peal::invalid_argument on
/// inconsistent extents, positions or options, on overlapping views and on keys_encoded
/// for an encoding whose G(s) is not bounded.
template <class E, class Tq, class Tk, class Tv, class To>
void attention(const E& enc, TensorView<Tq> q, const Positions& tq, TensorView<Tk> k,
               const Positions& tk, TensorView<Tv> v, TensorView<To> out,
               const AttentionOptions& opt = {}) {
  namespace sk = detail::tiled;
  static_assert(sk::is_storage<std::remove_cv_t<Tq>>::value &&
                    sk::is_storage<std::remove_cv_t<Tk>>::value &&
                    sk::is_storage<std::remove_cv_t<Tv>>::value,
                "peal::attention: q, k and v must store float, double, Eigen::half or "
                "Eigen::bfloat16");
  static_assert(sk::is_storage<To>::value && !std::is_const<To>::value,
                "peal::attention: out must be a writable view of float, double, Eigen::half "
                "or Eigen::bfloat16");
  sk::check_attention(enc, q, tq, k, tk, v, out, opt);
  using C = std::conditional_t<std::is_same<std::remove_cv_t<Tv>, double>::value, double,
                               sk::arith_t<Tq, Tk>>;
  if (opt.keys_encoded && !detail::coders::is_pure_rotation<C>(enc))
    detail::fail(
        "attention: keys_encoded needs a pure rotation (every block a rotation with a = 0, no "
        "Jordan part): for this encoding G(s) = A(-s) grows like e^{rate |s|} or polynomially "
        "in s, so keys stored as G(s) k overflow or lose precision at large positions. Keep "
        "the raw keys with their positions in the cache (keys_encoded = false): attention "
        "rebases them per tile");
  if (q.tokens() == 0 || q.heads() == 0) return;
  ScoreOptions so;
  so.causal = opt.causal;
  so.scale = opt.scale ? *opt.scale : 1.0 / std::sqrt(double(std::max<Index>(q.dim(), 1)));
  so.threads = opt.threads;
  so.query_tile = opt.query_tile;
  so.key_tile = opt.key_tile;
  sk::SoftmaxOptions sm;
  sm.causal = opt.causal;
  sm.window = opt.window;
  sm.softcap = opt.softcap;
  sm.alibi_slopes = opt.alibi_slopes;
  sm.sinks = opt.sinks;
  if (!opt.keys_encoded) {  // read-only input views: one kernel per storage (detail::ro)
    if constexpr (detail::is_basis_change<E>::value) {  // E's kernel on P^T q, P^{-1} k
      if (detail::basis_rows_first<C>(q.dim())) {
        std::vector<C> qb, kb;
        return sk::run_attention<C>(enc.inner(), detail::basis_rows<C>(enc, q, true, qb), tq,
                                    detail::basis_rows<C>(enc, k, false, kb), tk, detail::ro(v),
                                    out, so, sm, opt.lse);
      }
    }
    return sk::run_attention<C>(enc, detail::ro(q), tq, detail::ro(k), tk, detail::ro(v), out, so, sm,
                                opt.lse);
  }
  // The cache holds G(s_j) k_j: score = (F(t_i) q_i)^T (G(s_j) k_j), an identity encoding on
  // the encoded queries (one copy of q in the arithmetic type).
  const Index nq = q.tokens(), Hq = q.heads(), d = q.dim();
  std::vector<C> qe(std::size_t(nq * Hq * d));
  const TensorView<C> qv(qe.data(), nq, Hq, d);
  encode_queries(enc, q, qv, tq);
  const PassThrough<double> id{int(d)};
  sk::run_attention<C>(id, TensorView<const C>(qe.data(), nq, Hq, d), tq, detail::ro(k), tk,
                       detail::ro(v), out, so, sm, opt.lse);
}

// ---- One encoding per query head (per_head.hpp): head h's fused kernel on query head h, its
// key head's keys and values, its ALiBi slope and sink; lse gathered per head. Points:
// scores_nd.hpp.
namespace detail {
namespace per_head {

template <class E, class Tq, class Tk, class Tv, class To, class Pos>
void attention(const PerHead<E>& enc, const TensorView<Tq>& q, const Pos& tq,
               const TensorView<Tk>& k, const Pos& tk, const TensorView<Tv>& v,
               const TensorView<To>& out, const AttentionOptions& opt) {
  const Index hq = q.heads(), nq = q.tokens(), g = group_size(enc, hq, k.heads(), "attention");
  if (v.heads() != k.heads() || out.heads() != hq)
    fail("attention: v must have the key heads and out the query heads");
  // Whole views (and lse, which the heads' calls do not see), before head 0 writes.
  check_attention_aliasing(q, k, v, out, opt.lse, "attention");
  std::vector<double> lse(opt.lse ? std::size_t(nq) : 0);
  for (Index h = 0; h < hq; ++h) {
    AttentionOptions o = opt;
    o.alibi_slopes = pick(opt.alibi_slopes, h, hq, "attention", "alibi_slopes");
    o.sinks = pick(opt.sinks, h, hq, "attention", "sinks");
    o.lse = opt.lse ? lse.data() : nullptr;
    // Unqualified: argument-dependent lookup at instantiation finds scores_nd.hpp's N-D overload.
    attention(enc.head(int(h)), slice(q, h), tq, slice(k, h / g), tk, slice(v, h / g),
                    slice(out, h), o);
    if (opt.lse)
      for (Index i = 0; i < nq; ++i) opt.lse[i * hq + h] = lse[std::size_t(i)];
  }
}

}  // namespace per_head
}  // namespace detail

template <class E, class Tq, class Tk, class Tv, class To>
void attention(const PerHead<E>& enc, TensorView<Tq> q, const Positions& tq, TensorView<Tk> k,
               const Positions& tk, TensorView<Tv> v, TensorView<To> out,
               const AttentionOptions& opt = {}) {
  detail::per_head::attention(enc, q, tq, k, tk, v, out, opt);
}

}  // namespace peal
