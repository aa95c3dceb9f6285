// The epilogue of the tile driver (detail/tiled/tile_run.hpp): what a finished score tile gets
// after its GEMM, pair by pair, from the options of a run (ScoreOptions) and the positions:
// the per-pair decay γ_h^(t_i − s_j) of a steep decay, the ALiBi bias −m_h (t_i − s_j), the
// causal mask (and a sink's window), and the tiles whose decays all underflow. One type per
// run, whatever its encoding and storage: it reads positions and options, never q or k
// (except to mark their non-finite rows once). docs/kernels-scores.md §4.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../../positions.hpp"
#include "../../score_options.hpp"
#include "../../view.hpp"
#include "../compiler.hpp"
#include "../math/exp_kernel.hpp"
#include "../math/exp_poly.hpp"
#include "../storage.hpp"
#include "tile_plan.hpp"

namespace peal {
namespace detail {
namespace tiled {

/// f[j] = e^{lam (t − s[j])}, j < n: the per-pair decays of a steep γ, with the exponent
/// formed as the reference forms it. A row whose exponents all lie outside [−746, 710]
/// (where e^x is 0, resp. inf, in double: most rows of a tile far from the diagonal when γ
/// is tiny) takes a select instead of the exp; otherwise the vectorizable exp
/// (detail/math/exp_kernel.hpp), in chunks of constant trip count so that it vectorizes at -O2
/// too (the cheap loops vectorize at -O3).
inline void decay_row(double lam, double t, const double* PEAL_RESTRICT s, Index n,
                      double* PEAL_RESTRICT f) {
  for (Index j = 0; j < n; ++j) f[j] = lam * (t - s[j]);
  unsigned finite = 0;  // some e^{f[j]} neither 0 nor inf (an OR of integer flags vectorizes)
  for (Index j = 0; j < n; ++j) finite |= unsigned(f[j] > -746.0) & unsigned(f[j] < 710.0);
  if (finite == 0) {
    constexpr double inf = std::numeric_limits<double>::infinity();
    for (Index j = 0; j < n; ++j) f[j] = f[j] < 0 ? 0.0 : inf;
    return;
  }
  Index j = 0;
  for (; j + 8 <= n; j += 8)
    for (Index e = 0; e < 8; ++e) f[j + e] = exp_kernel(f[j + e]);
  for (; j < n; ++j) f[j] = exp_kernel(f[j]);
}

/// scale·γ_h^τ·v − m_h τ: the options applied to a score v = q^T A(τ) k. γ^τ by mul_exp
/// (detail/math/exp_poly.hpp), so that past the range a zero score stays 0 (not 0·inf) and only
/// a product beyond the range is ±inf.
inline double finish_score(double v, Index h, double tau, const ScoreOptions& opt) {
  v *= opt.scale;
  if (!opt.decay.empty()) v = mul_exp(v, std::log(opt.decay[std::size_t(h)]) * tau);
  if (!opt.alibi_slopes.empty()) v -= opt.alibi_slopes[std::size_t(h)] * tau;
  return v;
}

/// Which pairs of a tile the causal mask (or a sink's window) removes.
enum class TileMask {
  none,     // no pair
  partial,  // some pairs: the epilogue (or a sink that masks by itself) sets them to −∞
  all       // every pair: the tile is not computed
};

/// Per (token, head) of v: 1 where the row holds a NaN or an infinity.
template <class T>
std::vector<char> nonfinite_rows(const TensorView<T>& v, Index d) {
  const Index n = v.tokens(), H = v.heads();
  std::vector<char> bad(std::size_t(n * H), 0);
  for (Index i = 0; i < n; ++i)
    for (Index h = 0; h < H; ++h) {
      int b = 0;  // x - x is 0 for finite x, NaN for NaN and ±inf: a branch-free OR
      for (Index c = 0; c < d; ++c) {
        const double x = to_arith<double>(v(i, h, c));
        b |= !(x - x == 0);
      }
      bad[std::size_t(i * H + h)] = char(b);
    }
  return bad;
}

/// The options and positions of a run, and what they do to a tile.
class Epilogue {
 public:
  Epilogue(const Positions& tq, Index nq, const Positions& tk, Index nk, const ScoreOptions& opt,
           Index heads, double window)
      : opt_(&opt), window_(window) {
    t_.resize(std::size_t(nq));
    s_.resize(std::size_t(nk));
    for (Index i = 0; i < nq; ++i) t_[std::size_t(i)] = tq[i];
    for (Index j = 0; j < nk; ++j) s_[std::size_t(j)] = tk[j];
    has_decay_ = !opt.decay.empty();
    lam_.assign(std::size_t(heads), 0.0);
    if (has_decay_)
      for (Index h = 0; h < heads; ++h) {
        lam_[std::size_t(h)] = std::log(opt.decay[std::size_t(h)]);
        decay_rate_ = std::max(decay_rate_, std::abs(lam_[std::size_t(h)]));
      }
    has_alibi_ = !opt.alibi_slopes.empty();
  }

  /// The plan applies the decay per pair (RunPlan::pair_decay): no row scales, no factor in
  /// the GEMM's alpha, no decay in the polynomial parts; the rows of q and k holding a NaN
  /// or an infinity are found once, for the tiles whose decays all underflow.
  template <class Tq, class Tk>
  void decay_per_pair(const TensorView<Tq>& q, const TensorView<Tk>& k, Index d) {
    pair_decay_ = true;
    has_decay_ = false;
    hq_ = q.heads(), hk_ = k.heads();
    q_bad_ = nonfinite_rows(q, d);
    k_bad_ = nonfinite_rows(k, d);
    any_bad_ = std::find(q_bad_.begin(), q_bad_.end(), 1) != q_bad_.end() ||
               std::find(k_bad_.begin(), k_bad_.end(), 1) != k_bad_.end();
  }

  const ScoreOptions& options() const { return *opt_; }
  const double* t() const { return t_.data(); }
  const double* s() const { return s_.data(); }
  /// ln γ_h (0 without a decay).
  double lam(Index h) const { return lam_[std::size_t(h)]; }
  /// max_h |ln γ_h|.
  double decay_rate() const { return decay_rate_; }
  /// A decay rebased through the tiles (row scales and alpha).
  bool has_decay() const { return has_decay_; }
  bool has_alibi() const { return has_alibi_; }
  /// A decay applied per pair, here.
  bool pair_decay() const { return pair_decay_; }
  double window() const { return window_; }

  /// The mask of tile pair (I, J): by the causal mask or, for a sink with a window W,
  /// because every t_i − s_j ≥ W (a partial window is the sink's).
  TileMask mask(const TilePlan& qp, const TilePlan& kp, Index I, Index J) const {
    if (qp.lo[std::size_t(I)] - kp.hi[std::size_t(J)] >= window_) return TileMask::all;
    if (!opt_->causal) return TileMask::none;
    if (kp.lo[std::size_t(J)] > qp.hi[std::size_t(I)]) return TileMask::all;
    if (kp.hi[std::size_t(J)] <= qp.lo[std::size_t(I)]) return TileMask::none;
    return TileMask::partial;
  }

  /// ALiBi of head h for tile (I, J) into rb (rows), cb (columns); false: no bias for this
  /// head. −m (t_i − s_j) = −m (t_i − T_I) − m (T_I − s_j), both small near the anchor.
  template <class Out>
  bool alibi_bias(const TilePlan& qp, const TilePlan& kp, Index h, Index I, Index J, Out* rb,
                  Out* cb) const {
    if (!has_alibi_ || opt_->alibi_slopes[std::size_t(h)] == 0) return false;
    const Index i0 = qp.begin[std::size_t(I)], m = qp.rows(I);
    const Index j0 = kp.begin[std::size_t(J)], n = kp.rows(J);
    const double mh = opt_->alibi_slopes[std::size_t(h)], T = qp.anchor[std::size_t(I)];
    for (Index i = 0; i < m; ++i) rb[i] = Out(-mh * (t_[std::size_t(i0 + i)] - T));
    for (Index j = 0; j < n; ++j) cb[j] = Out(-mh * (T - s_[std::size_t(j0 + j)]));
    return true;
  }

  /// Per-pair decay: does every γ_h^(t_i − s_j) of tile (I, J) underflow to 0 in double? The
  /// largest is at the smallest t_i − s_j, lo_I − hi_J, and e^x = 0 in double for x < −745.2.
  /// Then every score is ±0 (the reference's score · 0) plus the ALiBi bias, and no mask
  /// applies (every t_i > s_j): the tile is written without its GEMM (underflow_tile).
  bool decay_underflows(const TilePlan& qp, const TilePlan& kp, Index h, Index I, Index J) const {
    return pair_decay_ &&
           lam_[std::size_t(h)] * (qp.lo[std::size_t(I)] - kp.hi[std::size_t(J)]) < -746.0;
  }

  /// The tile of a decay_underflows() pair: the ALiBi bias (0 without), and NaN where q_i or
  /// k_j holds a NaN or an infinity (the reference's score · 0; docs/kernels-attention.md,
  /// "NaN and infinities"). out_row(i, st) gives row i's memory, elements st apart.
  template <class Out, class RowFn>
  void underflow_tile(const TilePlan& qp, const TilePlan& kp, Index h, Index G, Index I, Index J,
                      Out* rb, Out* cb, RowFn&& out_row) const {
    const Index m = qp.rows(I), n = kp.rows(J);
    const Index i0 = qp.begin[std::size_t(I)], j0 = kp.begin[std::size_t(J)], kh = h / G;
    const bool alibi = alibi_bias(qp, kp, h, I, J, rb, cb);
    for (Index i = 0; i < m; ++i) {
      Index st = 1;
      Out* o = out_row(i, st);
      for (Index j = 0; j < n; ++j) o[j * st] = alibi ? Out(rb[i] + cb[j]) : Out(0);
    }
    if (!any_bad_) return;  // the common case: no row of the call holds a NaN or inf
    const Index Hq = hq_, Hk = hk_;
    const Out nan = std::numeric_limits<Out>::quiet_NaN();
    const char* kbad = k_bad_.data() + j0 * Hk + kh;
    for (Index i = 0; i < m; ++i) {
      Index st = 1;
      Out* o = out_row(i, st);
      const bool qbad = q_bad_[std::size_t((i0 + i) * Hq + h)] != 0;
      for (Index j = 0; j < n; ++j)
        if (qbad || kbad[j * Hk]) o[j * st] = nan;
    }
  }

  /// Row i of a tile written by the GEMM into the sink's memory (row-major, keys
  /// contiguous): its masked pairs to −∞.
  template <class Out>
  void mask_row(Out* PEAL_RESTRICT o, double ti, const double* PEAL_RESTRICT sj, Index n) const {
    const Out ninf = -std::numeric_limits<Out>::infinity();
    for (Index j = 0; j < n; ++j) o[j] = sj[j] > ti ? ninf : o[j];
  }
  /// The same for a column-major tile (row i's pairs ld apart).
  template <class Out>
  void mask_row_strided(Out* o, Index ld, double ti, const double* PEAL_RESTRICT sj,
                        Index n) const {
    const Out ninf = -std::numeric_limits<Out>::infinity();
    for (Index j = 0; j < n; ++j)
      if (sj[j] > ti) o[j * ld] = ninf;
  }
  /// Row i of a buffered tile (src, keys contiguous) into o (elements st apart): the
  /// per-pair decay of head h (f: n doubles of scratch), the ALiBi bias rbi + cb[j], the
  /// mask. src may be o itself (a sink taking the tile in place).
  template <class Out, class C>
  void finish_row(const C* src, Out* o, Index st, Index h, double ti, const double* sj, Index n,
                  bool alibi, Out rbi, const Out* PEAL_RESTRICT cb, bool mask,
                  double* PEAL_RESTRICT f) const {
    const Out ninf = -std::numeric_limits<Out>::infinity();
    if (pair_decay_) {  // γ^(t_i − s_j) = exp(ln γ (t_i − s_j)), as the reference forms it
      decay_row(lam_[std::size_t(h)], ti, sj, n, f);
      for (Index j = 0; j < n; ++j) {
        Out v = Out(double(src[j]) * f[j]);
        if (alibi) v += rbi + cb[j];
        if (mask && sj[j] > ti) v = ninf;
        o[j * st] = v;
      }
      return;
    }
    for (Index j = 0; j < n; ++j) {
      Out v = Out(src[j]);
      if (alibi) v += rbi + cb[j];
      if (mask && sj[j] > ti) v = ninf;
      o[j * st] = v;
    }
  }

 private:
  const ScoreOptions* opt_;
  double window_;
  std::vector<double> t_, s_, lam_;
  double decay_rate_ = 0;
  bool has_decay_ = false, has_alibi_ = false;
  bool pair_decay_ = false;
  std::vector<char> q_bad_, k_bad_;  // pair_decay_: rows with a NaN or inf, [token * H + head]
  Index hq_ = 1, hk_ = 1;            // the heads of q and k (q_bad_, k_bad_)
  bool any_bad_ = false;             // some row of q_bad_ or k_bad_ is set
};

}  // namespace tiled
}  // namespace detail
}  // namespace peal
