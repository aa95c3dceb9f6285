// Fused attention scores (docs/design.md §1-2, docs/kernels-scores.md):
//
//   out[h][i][j] = scale · γ_h^(t_i − s_j) · q_{i,h}ᵀ A(t_i − s_j) k_{j,h/G}  −  m_h (t_i − s_j)
//
// and −∞ where `causal` and s_j > t_i. q is [nq, Hq, d], k is [nk, Hk, d] with Hq = G·Hk
// (grouped-query attention: query head h reads key head h / G), out is [Hq, nq, nk]
// (a TensorView with tokens = Hq, heads = nq, dim = nk). γ_h (RetNet-style scalar decay)
// and m_h (ALiBi slope, Press et al. 2022, added after scaling) are optional per-head
// options; A(τ) = exp(τX) is any peal encoding.
//
// Fused: no encoded copy of Q or K is ever materialised. The work is tiled (by default
// TQ = clamp(128 KiB / (d sizeof C), 16, 256) queries x TK = clamp(256 KiB / (d sizeof C),
// 32, 512) keys, C the arithmetic type: 256 x 512 for d <= 128 in float); the rows of a
// tile are encoded into small contiguous buffers of the arithmetic type and multiplied with
// Eigen's GEMM kernel, which writes into `out` directly when `out` is laid out as a matrix
// of the arithmetic type (starting from the ALiBi bias instead of zeros); the mask runs on
// the tile while it is in cache. Working memory is bounded by the tile sizes and by the
// rows actually present (docs/kernels-scores.md §2).
//
// Rebased (docs/design.md §1 "Numerical stability"): for a query tile I with anchor T_I and
// a key tile J with anchor S_J the kernel evaluates
//     q̂_i = A(t_i − T_I)ᵀ q_i,   k̃_j = A(S_J − s_j) k_j,   q̃_i = A(T_I − S_J)ᵀ q̂_i,
// so q̃_iᵀ k̃_j = q_iᵀ A(t_i − s_j) k_j exactly in exact arithmetic (A(a)A(b) = A(a + b)),
// and only differences of positions enter, never F(t) or G(s) at absolute time. q̂ and k̃
// come from per-tile tables relative to the tile's own anchor (one table shared by every
// tile when positions are evenly spaced); the cross factor A(T_I − S_J) is one constant
// per block and tile pair. Tiles are split so that every |t − anchor| stays below a
// half-spread h chosen from the generator:
//     ρ · h ≤ θ_exp        ρ = max |Re λ(X)| + max_h |ln γ_h|   (growth/decay factors)
//     (1 + 4h)^p ≤ P       p = longest Jordan chain − 1 in the GEMM (polynomial factors)
// with (θ_exp, P) = (16 ln 2, 2^12) in float and (128 ln 2, 2^20) in double arithmetic
// (rebase_limits). The result is accurate relative to |q| ‖A(t−s)‖ |k| at any absolute time
// and sequence length; docs/kernels-scores.md §3 has the error analysis behind these
// numbers. A tile may shrink to one token (irregular timestamps, long gaps, fast decay).
// Pure rotations (every Re λ = 0, no Jordan chain: RoPE) use anchor 0 for their
// coefficients: each query tile is encoded once, each key tile once per block of query
// tiles, nothing per tile pair; a scalar decay on top is rebased through row scales and
// the GEMM's alpha. A scalar decay so steep that its rate would cut the tiles (more than
// kPairDecaySplit times as many) is applied per pair in the epilogue instead,
// exp(ln γ (t_i − s_j)) in double (docs/kernels-scores.md §4).
//
// Polynomial parts (detail/coders/poly_parts.hpp): the real JordanBlock<M ≥ 2> parts of a
// BlockDiagonal are left out of the GEMM (their coordinates of the encoded rows are zero)
// and evaluated per pair, e^{λτ} Σ_m τ^m/m! Σ_a q_{i,a} k_{j,a+m}, into each tile before its
// GEMM accumulates into it. Every term is bounded by |q| ‖A(τ)‖ |k|, so their chain length
// does not limit the tiles (their λ still enters ρ: e^{λτ} is rebased like any growth).
//
// Arithmetic: double if q or k stores double, float otherwise (float, Eigen::half,
// Eigen::bfloat16 storage). Positions and parameters are doubles; angles are reduced exactly
// (detail/math/angle.hpp). With OpenMP, (query block, key head) units run on `threads` threads;
// results do not depend on the thread count.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "detail/basis_rows.hpp"
#include "detail/overlap.hpp"
#include "detail/storage.hpp"
#include "detail/tiled/scores_sink.hpp"
#include "detail/tiled/tile_run.hpp"
#include "errors.hpp"
#include "per_head.hpp"
#include "positions.hpp"
#include "score_options.hpp"
#include "view.hpp"

namespace peal {
namespace detail {
namespace tiled {

/// The scores driver: TileRun with its sink (the sink is built before the run that uses it).
template <class Out>
struct ScoresOutHolder {
  ScoresOut<Out> sink_out;
};
template <class C, class E, class Tq, class Tk, class Out>
class ScoresRun : private ScoresOutHolder<Out>, public TileRun<C, E, Tq, Tk, ScoresOut<Out>> {
 public:
  ScoresRun(const E& enc, const TensorView<Tq>& q, const Positions& tq, const TensorView<Tk>& k,
            const Positions& tk, const TensorView<Out>& out, const ScoreOptions& opt)
      : ScoresOutHolder<Out>{ScoresOut<Out>{out}},
        TileRun<C, E, Tq, Tk, ScoresOut<Out>>(enc, q, tq, k, tk, this->sink_out, opt) {}
};

// ---- Validation ---------------------------------------------------------------------------
inline std::string extents(Index a, Index b, Index c) {
  std::ostringstream os;
  os << "[" << a << ", " << b << ", " << c << "]";
  return os.str();
}

/// Differences of positions must be finite too (e.g. 1e308 and -1e308 are not): the tile
/// plans and the rebased factors use t_i − s_j and differences within each side.
inline void check_position_span(const Positions& tq, Index nq, const Positions& tk, Index nk,
                                const std::string& w) {
  if (nq <= 0 || nk <= 0) return;
  double tmin = tq[0], tmax = tq[0], smin = tk[0], smax = tk[0];
  for (Index i = 1; i < nq; ++i) tmin = std::min(tmin, tq[i]), tmax = std::max(tmax, tq[i]);
  for (Index j = 1; j < nk; ++j) smin = std::min(smin, tk[j]), smax = std::max(smax, tk[j]);
  if (!std::isfinite(tmax - smin) || !std::isfinite(smax - tmin) || !std::isfinite(tmax - tmin) ||
      !std::isfinite(smax - smin))
    fail(w + ": differences of positions overflow (positions too far apart)");
}

// The scores kernel of one (arithmetic, encoding, storage) combination: scores() calls it with
// read-only views (ro), and peal::compiled (include/peal/compiled.hpp) instantiates it.
template <class C, class E, class Tq, class Tk, class Out>
void run_scores(const E& enc, const TensorView<Tq>& q, const Positions& tq,
                const TensorView<Tk>& k, const Positions& tk, const TensorView<Out>& out,
                const ScoreOptions& opt) {
  ScoresRun<C, E, Tq, Tk, Out> run(enc, q, tq, k, tk, out, opt);
  run.run();
}

template <class E, class Tq, class Tk, class Out>
void check_scores(const E& enc, const TensorView<Tq>& q, const Positions& tq,
                  const TensorView<Tk>& k, const Positions& tk, const TensorView<Out>& out,
                  const ScoreOptions& opt, const char* where) {
  const std::string w(where);
  const Index d = Index(enc.dim());
  if (q.dim() != d || k.dim() != d)
    fail(w + ": queries " + extents(q.tokens(), q.heads(), q.dim()) + " and keys " +
         extents(k.tokens(), k.heads(), k.dim()) + " must have dim " + std::to_string(d) +
         " (the encoding's dim())");
  const Index Hq = q.heads(), Hk = k.heads();
  if (Hq > 0 && (Hk <= 0 || Hq % Hk != 0))
    fail(w + ": the number of query heads (" + std::to_string(Hq) +
         ") must be a multiple of the number of key heads (" + std::to_string(Hk) + ")");
  if (out.tokens() != Hq || out.heads() != q.tokens() || out.dim() != k.tokens())
    fail(w + ": out is " + extents(out.tokens(), out.heads(), out.dim()) +
         ", expected [Hq, nq, nk] = " + extents(Hq, q.tokens(), k.tokens()));
  // out is written while q and k are still being read, tile by tile: it must not share
  // memory with them (byte ranges compared, detail/overlap.hpp). q and k may overlap.
  if (may_overlap(out, q))
    fail(w + ": out overlaps q (the output must not share memory with the queries)");
  if (may_overlap(out, k))
    fail(w + ": out overlaps k (the output must not share memory with the keys)");
  tq.check(q.tokens(), (w + " (query positions)").c_str());
  tk.check(k.tokens(), (w + " (key positions)").c_str());
  if (!std::isfinite(opt.scale)) fail(w + ": scale must be finite");
  if (!opt.alibi_slopes.empty()) {
    if (Index(opt.alibi_slopes.size()) != Hq)
      fail(w + ": " + std::to_string(opt.alibi_slopes.size()) + " ALiBi slopes for " +
           std::to_string(Hq) + " query heads (give one per query head, or none)");
    for (double m : opt.alibi_slopes) require_finite(m, where, "ALiBi slope");
  }
  if (!opt.decay.empty()) {
    if (Index(opt.decay.size()) != Hq)
      fail(w + ": " + std::to_string(opt.decay.size()) + " decays for " + std::to_string(Hq) +
           " query heads (give one per query head, or none)");
    for (double g : opt.decay)
      if (!(g > 0 && g <= 1)) {
        std::ostringstream os;
        os << w << ": decay gamma must be in (0, 1], got " << g;
        fail(os.str());
      }
  }
  if (opt.threads < 0) fail(w + ": threads must be >= 0");
  if (opt.query_tile < 0 || opt.key_tile < 0) fail(w + ": tile sizes must be >= 0");
  check_position_span(tq, q.tokens(), tk, k.tokens(), w);
}

}  // namespace tiled
}  // namespace detail

/// The plain per-pair form of scores(): out[h][i][j] from enc.score(q, t_i, k, s_j) (the
/// encoding's own reference, evaluated through the lag in the encoding's Scalar) for every
/// pair. O(Hq nq nk d) work with a per-pair A(t_i − s_j); for tests and as a baseline.
template <class E, class Tq, class Tk, class Out>
void scores_reference(const E& enc, TensorView<Tq> q, const Positions& tq, TensorView<Tk> k,
                      const Positions& tk, TensorView<Out> out, const ScoreOptions& opt = {}) {
  namespace sk = detail::tiled;
  static_assert(std::is_same<Out, float>::value || std::is_same<Out, double>::value,
                "peal::scores_reference: out must be a writable view of float or double");
  sk::check_scores(enc, q, tq, k, tk, out, opt, "scores_reference");
  const Index nq = q.tokens(), nk = k.tokens(), Hq = q.heads(), d = q.dim();
  if (nq == 0 || nk == 0 || Hq == 0) return;
  const Index G = Hq / k.heads();
  using S = typename E::Scalar;
  Vector<S> qv(d), kv(d);
  for (Index h = 0; h < Hq; ++h)
    for (Index i = 0; i < nq; ++i) {
      for (Index e = 0; e < d; ++e) qv(e) = S(sk::to_arith<double>(q(i, h, e)));
      const double t = tq[i];
      for (Index j = 0; j < nk; ++j) {
        const double s = tk[j];
        if (opt.causal && s > t) {
          out(h, i, j) = -std::numeric_limits<Out>::infinity();
          continue;
        }
        for (Index e = 0; e < d; ++e) kv(e) = S(sk::to_arith<double>(k(j, h / G, e)));
        out(h, i, j) = Out(sk::finish_score(double(enc.score(qv, t, kv, s)), h, t - s, opt));
      }
    }
}

/// out[h][i][j] = scale γ_h^(t_i − s_j) q_{i,h}^T A(t_i − s_j) k_{j,h/G} − m_h (t_i − s_j)
/// (−∞ where causal and s_j > t_i), fused and rebased (see the top of this file).
/// q: [nq, Hq, d], k: [nk, Hk, d] (Hq a multiple of Hk; float, double, Eigen::half or
/// Eigen::bfloat16, const or not), out: [Hq, nq, nk] of float or double, not overlapping
/// q or k. Throws peal::invalid_argument on inconsistent extents, positions or options and
/// on an out that overlaps q or k (byte ranges compared, detail/overlap.hpp).
template <class E, class Tq, class Tk, class Out>
void scores(const E& enc, TensorView<Tq> q, const Positions& tq, TensorView<Tk> k,
            const Positions& tk, TensorView<Out> out, const ScoreOptions& opt = {}) {
  namespace sk = detail::tiled;
  static_assert(
      sk::is_storage<std::remove_cv_t<Tq>>::value && sk::is_storage<std::remove_cv_t<Tk>>::value,
      "peal::scores: q and k must store float, double, Eigen::half or Eigen::bfloat16");
  static_assert(std::is_same<Out, float>::value || std::is_same<Out, double>::value,
                "peal::scores: out must be a writable view of float or double");
  sk::check_scores(enc, q, tq, k, tk, out, opt, "scores");
  if (q.tokens() == 0 || k.tokens() == 0 || q.heads() == 0) return;
  if (q.dim() == 0) return scores_reference(enc, q, tq, k, tk, out, opt);  // bias and mask only
  using C = sk::arith_t<Tq, Tk>;
  if constexpr (detail::is_basis_change<E>::value) {  // E's kernel on P^T q, P^{-1} k
    if (detail::basis_rows_first<C>(q.dim())) {
      std::vector<C> qb, kb;
      return sk::run_scores<C>(enc.inner(), detail::basis_rows<C>(enc, q, true, qb), tq,
                               detail::basis_rows<C>(enc, k, false, kb), tk, out, opt);
    }
  }
  sk::run_scores<C>(enc, detail::ro(q), tq, detail::ro(k), tk, out, opt);
}

// ---- One encoding per query head (per_head.hpp): head h's fused kernel on query head h, its
// key head h / (Hq / Hk), its slice of the output, its ALiBi slope and decay. Points:
// scores_nd.hpp.
namespace detail {
namespace per_head {

template <class E, class Tq, class Tk, class Out, class Pos>
void scores(const PerHead<E>& enc, const TensorView<Tq>& q, const Pos& tq, const TensorView<Tk>& k,
            const Pos& tk, const TensorView<Out>& out, const ScoreOptions& opt) {
  const Index hq = q.heads(), g = group_size(enc, hq, k.heads(), "scores");
  if (out.tokens() != hq)
    fail("scores: out has " + std::to_string(out.tokens()) + " heads, q has " +
         std::to_string(hq));
  check_scores_aliasing(q, k, out, "scores");  // whole views, before head 0 writes
  for (Index h = 0; h < hq; ++h) {
    ScoreOptions o = opt;
    o.alibi_slopes = pick(opt.alibi_slopes, h, hq, "scores", "alibi_slopes");
    o.decay = pick(opt.decay, h, hq, "scores", "decay");
    // Unqualified: found by argument-dependent lookup where it is instantiated, so that the
    // N-D overloads of scores_nd.hpp (declared after this) serve PositionsND.
    scores(enc.head(int(h)), slice(q, h), tq, slice(k, h / g), tk, out_slice(out, h), o);
  }
}

}  // namespace per_head
}  // namespace detail

template <class E, class Tq, class Tk, class Out>
void scores(const PerHead<E>& enc, TensorView<Tq> q, const Positions& tq, TensorView<Tk> k,
            const Positions& tk, TensorView<Out> out, const ScoreOptions& opt = {}) {
  detail::per_head::scores(enc, q, tq, k, tk, out, opt);
}

}  // namespace peal
