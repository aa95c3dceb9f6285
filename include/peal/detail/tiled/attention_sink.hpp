// The sink of peal::attention (attention.hpp) for the tile driver (detail/tiled/tile_run.hpp):
// every finished tile of logits is folded into an online softmax times V, FlashAttention-2
// style (Dao 2023, Algorithm 1): per query row a running maximum m, a running sum l and an
// unnormalised output O,
//     m' = max(m, max_j x_j),  P_j = e^{x_j − m'},  l' = e^{m − m'} l + Σ_j P_j,
//     O' = e^{m − m'} O + P V_J,
// and at the end out = O / l, lse = m + ln l. No logit matrix beyond one tile exists.
//
// Per tile, in this order: softcap c tanh(x/c) (Gemma 2) of the scaled score, the masks
// (causal s_j > t_i, window t_i − s_j ≥ W) from positions, then the ALiBi bias b_ij =
// −m_h (t_i − s_j), which stays in double: the row maximum of x + b and the exponent
// (b − m) + x are formed in double, so a bias of any size (long or irregular gaps) costs no
// precision in the arithmetic type C; only the exponent near 0 is rounded to C.
//
// A +inf logit (a growing encoding past the range of C) is the limit of the softmax: the
// +inf keys share the weight equally. A row with no visible key keeps m = −inf, l = 0 and
// gives out = 0, lse = −inf (or the sink logit alone: lse = σ_h, out = 0).
//
// NaN (docs/kernels-attention.md, "NaN and infinities"): a NaN logit a row can see, or a NaN
// that P V gives its O, makes the whole row NaN (out and lse). The hot path pays nothing for
// it: a NaN logit reaches l through Σ_j P_j (e^NaN = NaN) and stays there (NaN · corr + ...);
// only the rare branches that do not form that sum (nothing visible yet, +inf logits) look
// for it. m itself never becomes NaN (std::max(m, NaN) = m), so the rescaling stays finite.
// Masked keys are not seen: in a tile cut by a mask, V rows holding inf or NaN are taken out
// of the GEMM (the weight 0 of a masked key times inf or NaN would be NaN) and added back to
// the rows that see them (nonfinite_values).
//
// Masked pairs (causal, window) are computed along their staircase: the driver hands the
// strips of each tile pair (detail/tiled/tile_plan.hpp, plan_strips: runs of query rows and
// the key columns they may see); the softmax and P V read those only, and positions are
// compared only in the columns a mask cuts (TileStrip::m0, m1: a strip's diagonal step).
//
// Decoding (key splits, RunPlan::splits in detail/tiled/tile_plan.hpp): each range of key tiles
// leaves its own (m, l, O) for the rows of its unit; finish() merges them with the log-sum-exp rule
//     m* = max_s m_s,  l* = Σ_s e^{m_s − m*} l_s,  O* = Σ_s e^{m_s − m*} O_s,
// in a fixed order, so results do not depend on the number of threads.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "../../view.hpp"
#include "../eigen_gemm.hpp"
#include "../half_rows.hpp"
#include "../storage.hpp"
#include "arena.hpp"
#include "tile_plan.hpp"
#include "tile_sink.hpp"

namespace peal {
namespace detail {
namespace tiled {

/// What the attention sink applies to the logits (attention.hpp fills it from AttentionOptions).
struct SoftmaxOptions {
  bool causal = false;
  double window = std::numeric_limits<double>::infinity();
  double softcap = 0;                // 0: none
  std::vector<double> alibi_slopes;  // per query head, or empty
  std::vector<double> sinks;         // per query head, or empty
};

template <class C, class Tv, class To>
class AttentionSink : public InPlaceSink<C> {
  using TV = std::remove_cv_t<Tv>;
  // What a staged V tile holds (key_block): half-like values converted to C as they are
  // staged, so that the products read them in place.
  using VS = std::conditional_t<is_half_like<TV>, C, TV>;

 public:
  static constexpr bool splits_keys = true;
  static constexpr bool applies_masks = true;
  static constexpr bool takes_strips = true;

  AttentionSink(const TensorView<Tv>& v, const TensorView<To>& out, double* lse,
                const SoftmaxOptions& opt)
      : v_(v), out_(out), lse_(lse), opt_(opt), dv_(v.dim()) {}

  /// Per-thread memory: V of one key tile, (m, l, O) of one unit's rows, the PV packing.
  struct Work {
    Buf<C> vtile, o, blockA, blockB;
    Buf<double> m, l, bias;
    eigen_gemm::GemmBlocking<C> blocking;
    Index I0 = 0, kh = 0;
    const C* vrows = nullptr;  // V of the current key tile: vtile, vstage or the view itself
    Index ldv = 0;
    // Or, decoding a half-precision cache (direct_values), the view's own rows of the key
    // tile's head, ld ldv, converted in the products' registers.
    const TV* vraw = nullptr;
    Buf<VS> vstage;     // every head's V rows of a key tile (key_block)
    Index staged = -1;                  // the key tile in vstage, or −1
    int vfinite = -1;                   // V of the current key tile all finite: 1, 0, or −1 unknown
    const TileStrip* strips = nullptr;  // the strips of the current tile pair (strips())
    Index nstrips = 0;
    template <class Run>
    void carve(Arena& a, const Run& r) {
      const Index TQm = r.query_plan().max_rows, TKm = r.key_plan().max_rows;
      const Index dv = r.sink().dv_, G = r.group();
      const Index rows = r.max_block_rows() * G * r.head_slots();
      Index kc = std::max<Index>(TKm, 1), mc = std::max<Index>(TQm * G, 1), nc = std::max<Index>(dv, 1);
      eigen_gemm::product_blocking_sizes<C>(kc, mc, nc);
      vtile = a.take<C>(TKm * dv);
      o = a.take<C>(rows * dv);
      m = a.take<double>(rows);
      l = a.take<double>(rows);
      bias = a.take<double>(TKm);
      vstage = a.take<VS>(r.sink().stages(r) ? TKm * r.key_heads() * dv : 0);
      blockA = a.take<C>(kc * mc);
      blockB = a.take<C>(kc * nc);
      blocking = eigen_gemm::GemmBlocking<C>(mc, nc, kc, blockA.data(), blockB.data());
    }
  };

  /// Before the run: room for the partial results of key splits (decoding).
  template <class Run>
  void prepare(const Run& r) {
    splits_ = r.key_splits();
    if (splits_ <= 1) return;
    const Index rows = r.queries() * r.query_heads();
    part_o_.assign(std::size_t(splits_ * rows * dv_), C(0));
    part_m_.assign(std::size_t(splits_ * rows), -kInf);
    part_l_.assign(std::size_t(splits_ * rows), 0.0);
  }

  double window() const { return opt_.window; }
  /// The strips of the next tile pair (the driver's memory, valid for its tiles).
  void strips(Work& w, const TileStrip* s, Index n) const { w.strips = s, w.nstrips = n; }
  template <class Run>
  void masked(const Run&, Work&, Index, Index, Index) const {}  // contributes nothing

  template <class Run>
  void unit_begin(const Run& r, Work& w, Index kh, Index I0, Index I1, Index) const {
    const auto& qp = r.query_plan();
    const Index rows = (qp.begin[std::size_t(I1)] - qp.begin[std::size_t(I0)]) * r.group();
    const Index s = slot(r, kh);
    w.I0 = I0, w.kh = kh, w.staged = -1;
    std::fill_n(w.o.data() + s * dv_, rows * dv_, C(0));
    std::fill_n(w.m.data() + s, rows, -kInf);
    std::fill_n(w.l.data() + s, rows, 0.0);
  }

  /// Decoding with packed heads (TileRun::head_slots() > 1): V rows of every head of key tile
  /// J, one contiguous copy per token (the reason is at TileRun's across_), half-like values
  /// converted to C on the way (detail/half_rows.hpp).
  template <class Run>
  void key_block(const Run& r, Work& w, Index J) const {
    if (!stages(r)) return;
    const auto& kp = r.key_plan();
    const Index j0 = kp.begin[std::size_t(J)], n = kp.rows(J), row = r.key_heads() * dv_;
    for (Index j = 0; j < n; ++j) load_row(v_.vector(j0 + j, 0), w.vstage.data() + j * row, row);
    w.staged = J;
  }

  /// V rows of key tile J, head kh, in the arithmetic type (n x dv, row-major).
  template <class Run>
  void key_tile(const Run& r, Work& w, Index kh, Index J) const {
    if (dv_ == 0) return;
    const auto& kp = r.key_plan();
    const Index j0 = kp.begin[std::size_t(J)], n = kp.rows(J);
    w.vraw = nullptr;
    w.vfinite = -1;
    if (half_values && direct_values(r) && (n <= 1 || v_.strides().token >= dv_)) {
      w.vraw = v_.vector(j0, kh), w.ldv = n > 1 ? v_.strides().token : dv_;
      w.vrows = nullptr;
      return;
    }
    if (w.staged == J)
      value_rows(TensorView<const VS>(w.vstage.data(), n, r.key_heads(), dv_), 0, n, kh,
                 w.vtile.data(), w.vrows, w.ldv);
    else
      value_rows(TensorView<const TV>(v_), j0, n, kh, w.vtile.data(), w.vrows, w.ldv);
  }

  /// Head h's logits of tile (I, J) (rows(I) x rows(J), in place) become the weights P of
  /// the online softmax; the running (m, l, O) of its rows are rescaled.
  template <class Run>
  void tile_done(const Run& r, Work& w, C* tile, Index h, Index I, Index J) const {
    const auto& qp = r.query_plan();
    const auto& kp = r.key_plan();
    const Index i0 = qp.begin[std::size_t(I)], m = qp.rows(I);
    const Index j0 = kp.begin[std::size_t(J)], n = kp.rows(J);
    const Index g = h % r.group();
    const Index base = slot(r, h / r.group()) +
                       (qp.begin[std::size_t(I)] - qp.begin[std::size_t(w.I0)]) * r.group() + g * m;
    const bool alibi = !opt_.alibi_slopes.empty() && opt_.alibi_slopes[std::size_t(h)] != 0;
    const double mh = alibi ? opt_.alibi_slopes[std::size_t(h)] : 0.0;
    const C cap = C(opt_.softcap), inv_cap = opt_.softcap > 0 ? C(1 / opt_.softcap) : C(0);
    for (Index k = 0; k < w.nstrips; ++k) {
      // The strip's rows over its columns [c0, c1) (every other pair of these rows is masked).
      const TileStrip& st = w.strips[k];
      const Index c = st.c1 - st.c0;
      const Index js = j0 + st.c0;
      for (Index i = st.r0; i < st.r1; ++i) {
        C* x = tile + i * n + st.c0;
        const double ti = r.t(i0 + i);
        Eigen::Map<Eigen::Array<C, Eigen::Dynamic, 1>> xa(x, c);
        if (opt_.softcap > 0) xa = (xa * inv_cap).tanh() * cap;  // masks are re-applied below
        if (alibi)
          for (Index j = 0; j < c; ++j) w.bias[std::size_t(j)] = -mh * (ti - r.s(js + j));
        for (Index j = st.m0 - st.c0; j < st.m1 - st.c0; ++j) {  // the columns a mask cuts
          const double sj = r.s(js + j);
          if ((opt_.causal && sj > ti) || ti - sj >= opt_.window) x[j] = -kInfC;
        }
        update_row(w, base + i, x, c, alibi ? w.bias.data() : nullptr);
      }
    }
  }

  /// O rows of tile I, every head of the group: O += P V_J, one GEMM (the heads' slices of
  /// P and of O are consecutive, in the same order).
  template <class Run>
  void group_done(const Run& r, Work& w, C* tile, Index kh, Index I, Index J) const {
    const auto& qp = r.query_plan();
    const Index m = qp.rows(I), n = r.key_plan().rows(J), G = r.group();
    if (dv_ == 0 || n == 0) return;
    const Index base = slot(r, kh) + (qp.begin[std::size_t(I)] - qp.begin[std::size_t(w.I0)]) * G;
    bool cut = false;
    for (Index k = 0; k < w.nstrips; ++k) cut |= w.strips[k].cut();
    if (w.vraw) {
      if (!cut && whole_pair(w.strips, w.nstrips, m, n)) {
        if constexpr (half_values)
          eigen_gemm::small::ab<C, TV>(G * m, dv_, n, tile, n, w.vraw, w.ldv,
                                       w.o.data() + base * dv_, dv_, C(1));
        return;
      }
      // A mask cuts the pair (rare in a decode step): the rows as floats, the general path.
      value_rows(TensorView<const TV>(v_), r.key_plan().begin[std::size_t(J)], n, kh,
                 w.vtile.data(), w.vrows, w.ldv);
      w.vraw = nullptr;
    }
    if (cut) {  // a masked key's weight 0 must not meet an inf or NaN value
      if (w.vfinite < 0) w.vfinite = values_finite(w, n);
      if (!w.vfinite) return nonfinite_values(r, w, tile, base, I, J);
    }
    products(w, tile, G, m, n, w.vrows, w.ldv, w.o.data() + base * dv_);
  }

  /// The unit's rows: final outputs, or this split's partial result.
  template <class Run>
  void unit_end(const Run& r, Work& w, Index kh, Index I0, Index I1, Index split) {
    const auto& qp = r.query_plan();
    const Index G = r.group(), Hq = r.query_heads();
    for (Index I = I0; I < I1; ++I) {
      const Index i0 = qp.begin[std::size_t(I)], m = qp.rows(I);
      const Index base = slot(r, kh) + (i0 - qp.begin[std::size_t(I0)]) * G;
      for (Index g = 0; g < G; ++g)
        for (Index i = 0; i < m; ++i) {
          const Index row = base + g * m + i, h = kh * G + g;
          const C* o = w.o.data() + row * dv_;
          if (splits_ <= 1) {
            finalize(i0 + i, h, w.m[std::size_t(row)], w.l[std::size_t(row)], o);
            continue;
          }
          const Index p = (split * r.queries() + i0 + i) * Hq + h;
          part_m_[std::size_t(p)] = w.m[std::size_t(row)];
          part_l_[std::size_t(p)] = w.l[std::size_t(row)];
          std::copy_n(o, dv_, part_o_.data() + p * dv_);
        }
    }
  }

  /// Key splits: merge the partial results in split order.
  template <class Run>
  void finish(const Run& r) {
    if (splits_ <= 1) return;
    const Index rows = r.queries() * r.query_heads(), Hq = r.query_heads();
    std::vector<C> acc(static_cast<std::size_t>(dv_), C(0));
    for (Index p = 0; p < rows; ++p) {
      double mx = -kInf;
      bool nan = false;  // a split's NaN, also one whose logits are all −inf (skipped below)
      for (Index s = 0; s < splits_; ++s) {
        mx = std::max(mx, part_m_[std::size_t(s * rows + p)]);
        nan |= std::isnan(part_l_[std::size_t(s * rows + p)]) ||
               has_nan(part_o_.data() + (s * rows + p) * dv_);
      }
      double l = 0;
      std::fill(acc.begin(), acc.end(), C(0));
      if (mx > -kInf)
        for (Index s = 0; s < splits_; ++s) {
          const double ms = part_m_[std::size_t(s * rows + p)];
          if (!(ms > -kInf)) continue;
          const double f = ms == mx ? 1.0 : std::exp(ms - mx);
          l += f * part_l_[std::size_t(s * rows + p)];
          const C* o = part_o_.data() + (s * rows + p) * dv_;
          for (Index e = 0; e < dv_; ++e) acc[std::size_t(e)] += C(f) * o[e];
        }
      finalize(p / Hq, p % Hq, mx, nan ? kNaN : l, acc.data());
    }
  }

 private:
  // First row of key head kh's (m, l, O) in a unit's Work (one slot per head when decoding).
  template <class Run>
  static Index slot(const Run& r, Index kh) {
    return r.head_slots() > 1 ? kh * r.max_block_rows() * r.group() : 0;
  }
  // V is staged per key tile when a unit holds every head and a token's heads are packed.
  template <class Run>
  bool stages(const Run& r) const {
    return r.head_slots() > 1 && v_.strides().elem == 1 && v_.strides().head == dv_ &&
           r.key_heads() > 1 && dv_ > 0 && !direct_values(r);
  }
  // Decoding (a query tile's G m rows within the small products' kSmallRows): the products
  // read V's rows where they lie, each once, prefetched ahead (detail/small_products.hpp),
  // instead of staging a copy of every tile; rows of a half-precision V (C = float) are
  // converted in the products' registers (vraw). The same values either way, so the same result.
  template <class Run>
  bool direct_values(const Run& r) const {
    return (half_values || std::is_same<TV, C>::value) && v_.strides().elem == 1 && dv_ > 0 &&
           r.few_rows();
  }
  static constexpr bool half_values = is_half_like<TV> && std::is_same<C, float>::value;

  static constexpr double kInf = std::numeric_limits<double>::infinity();
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  static constexpr C kInfC = std::numeric_limits<C>::infinity();

  // o += P V for the G heads' weights P of the current pair (tile: G slices of m x n) and V
  // (n rows, ld ldv): one GEMM for a pair computed whole, else one per strip and head, over
  // the strip's columns only (the same products whatever V holds: rows a NaN does not reach
  // stay bitwise those of a run without it).
  void products(Work& w, const C* tile, Index G, Index m, Index n, const C* vrows, Index ldv,
                C* o) const {
    if (whole_pair(w.strips, w.nstrips, m, n)) {
      eigen_gemm::gemm_ab<C, Eigen::RowMajor>(G * m, dv_, n, tile, n, vrows, ldv, o, dv_, C(1),
                                              w.blocking);
      return;
    }
    for (Index g = 0; g < G; ++g)  // along the staircase: each strip's rows times its V rows
      for_each_strip_block(w.strips, w.nstrips, [&](Index r0, Index r1, Index c0, Index c1) {
        const Index row = g * m + r0;
        eigen_gemm::gemm_ab<C, Eigen::RowMajor>(r1 - r0, dv_, c1 - c0, tile + row * n + c0, n,
                                                vrows + c0 * ldv, ldv, o + row * dv_, dv_, C(1),
                                                w.blocking);
      });
  }
  bool sees(double t, double s) const { return !(opt_.causal && s > t) && t - s < opt_.window; }
  // (An OR of integer flags vectorizes; std::isnan into a bool and Eigen's allFinite ran one
  // element at a time: 6 % of a causal prefill at n = 512, d = 128.)
  bool has_nan(const C* o) const {
    unsigned nan = 0;
    for (Index e = 0; e < dv_; ++e) nan |= unsigned(!(o[e] == o[e]));
    return nan != 0;
  }
  bool finite_row(const C* v) const {
    unsigned bad = 0;  // x − x is 0 for finite x, NaN for NaN and ±inf
    for (Index e = 0; e < dv_; ++e) bad |= unsigned(!(v[e] - v[e] == C(0)));
    return bad == 0;
  }
  int values_finite(const Work& w, Index n) const {
    for (Index j = 0; j < n; ++j)
      if (!finite_row(w.vrows + j * w.ldv)) return 0;
    return 1;
  }

  // O += P V_J for a cut tile whose V has inf or NaN rows: the GEMM without them, then each
  // such row times its weights, for the rows that see its key only (rare: a slow path).
  template <class Run>
  void nonfinite_values(const Run& r, Work& w, const C* tile, Index base, Index I, Index J) const {
    const auto& qp = r.query_plan();
    const Index i0 = qp.begin[std::size_t(I)], m = qp.rows(I);
    const Index j0 = r.key_plan().begin[std::size_t(J)], n = r.key_plan().rows(J), G = r.group();
    std::vector<C> vc(std::size_t(n * dv_));
    std::vector<Index> bad;
    for (Index j = 0; j < n; ++j) {
      const C* v = w.vrows + j * w.ldv;
      if (finite_row(v))
        std::copy_n(v, dv_, vc.data() + j * dv_);
      else
        bad.push_back(j);  // its row of vc stays 0
    }
    C* o = w.o.data() + base * dv_;
    products(w, tile, G, m, n, vc.data(), dv_, o);
    for (Index j : bad) {
      const C* v = w.vrows + j * w.ldv;
      for (Index i = 0; i < m; ++i) {
        if (!sees(r.t(i0 + i), r.s(j0 + j))) continue;
        for (Index g = 0; g < G; ++g) {
          const C p = tile[(g * m + i) * n + j];
          C* oi = o + (g * m + i) * dv_;
          for (Index e = 0; e < dv_; ++e) oi[e] += p * v[e];
        }
      }
    }
  }

  // One row of logits x + b (n of them; b the ALiBi bias in double, or none) into the
  // running state; x becomes the weights P.
  void update_row(Work& w, Index row, C* x, Index n, const double* b) const {
    Eigen::Map<Eigen::Array<C, Eigen::Dynamic, 1>> xa(x, n);
    double mx = -kInf;
    if (b) {
      for (Index j = 0; j < n; ++j) mx = std::max(mx, double(x[j]) + b[j]);
    } else if (n > 0) {
      mx = double(xa.maxCoeff());
    }
    double& mr = w.m[std::size_t(row)];
    const double mnew = std::max(mr, mx);
    double& lr = w.l[std::size_t(row)];
    if (!(mnew > -kInf)) {  // nothing visible yet, unless a NaN (no maximum) hides in x
      if (xa.hasNaN()) lr = kNaN;
      xa.setZero();
      return;
    }
    const double corr = mr == mnew ? 1.0 : std::exp(mr - mnew);  // mr = −inf: 0
    if (mnew == kInf) {  // +inf logits: the limit of the softmax
      for (Index j = 0; j < n; ++j) x[j] = x[j] == kInfC ? C(1) : std::isnan(x[j]) ? x[j] : C(0);
    } else if (b) {
      for (Index j = 0; j < n; ++j) x[j] = C((b[j] - mnew) + double(x[j]));
      xa = xa.exp();
    } else {
      xa = (xa - C(mnew)).exp();
    }
    lr = lr * corr + double(xa.sum());  // a NaN logit makes it NaN, for good
    if (corr != 1.0) {
      C* o = w.o.data() + row * dv_;
      const C c = C(corr);
      for (Index e = 0; e < dv_; ++e) o[e] *= c;
    }
    mr = mnew;
  }

  // out[i, h, :] = O / l with the sink logit σ_h in the denominator; lse[i, h] = ln Σ. A NaN
  // in l or in O (a NaN logit or value reached the row) makes all of it NaN.
  void finalize(Index i, Index h, double m, double l, const C* o) const {
    double scale = 0, lse = -kInf;
    if (std::isnan(l) || has_nan(o)) {
      scale = lse = kNaN;
    } else if (!opt_.sinks.empty()) {
      const double sg = opt_.sinks[std::size_t(h)];
      const double mx = std::max(m, sg);
      const double fo = !(m > -kInf) ? 0.0 : m == mx ? 1.0 : std::exp(m - mx);
      const double tot = l * fo + (sg == mx ? 1.0 : std::exp(sg - mx));
      scale = fo / tot;
      lse = mx + std::log(tot);
    } else if (l > 0) {
      scale = 1.0 / l;
      lse = m + std::log(l);
    }
    if (lse_) lse_[i * out_.heads() + h] = lse;
    if (dv_ == 0) return;  // (an empty out may have no memory at all)
    const Index es = out_.strides().elem;
    To* dst = out_.vector(i, h);
    if constexpr (is_half_like<std::remove_cv_t<To>> && std::is_same<C, float>::value) {
      if (es == 1) {  // rounded to half-like storage in bulk (detail/half_rows.hpp)
        constexpr Index kChunk = 64;
        C buf[kChunk];
        for (Index e0 = 0; e0 < dv_; e0 += kChunk) {
          const Index m = std::min(kChunk, dv_ - e0);
          for (Index e = 0; e < m; ++e) buf[e] = C(double(o[e0 + e]) * scale);
          store_row(buf, dst + e0, m);
        }
        return;
      }
    }
    for (Index e = 0; e < dv_; ++e) dst[e * es] = from_arith<To>(C(double(o[e]) * scale));
  }

  TensorView<Tv> v_;
  TensorView<To> out_;
  double* lse_;
  const SoftmaxOptions& opt_;
  Index dv_ = 0, splits_ = 1;
  std::vector<C> part_o_;
  std::vector<double> part_m_, part_l_;
};

}  // namespace tiled
}  // namespace detail
}  // namespace peal
