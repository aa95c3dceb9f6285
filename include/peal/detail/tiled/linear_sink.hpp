// The sink of peal::linear_attention (linear_attention.hpp) for the tile driver
// (detail/tiled/tile_run.hpp): every finished tile of scores S (scale γ^(t_i − s_j) q^T A k, from
// the same rebased tiles as peal::scores) is masked to 0 where s_j > t_i and multiplied into
// V at once, O_I += S V_J: no nq x nk matrix exists. At the end of a unit its rows are
//     out_i = f_i (O_i + B_i) / clamp(f_i A_i, lo, hi)        (each factor optional)
// with B the state's contribution (the chunkwise form's inter-chunk term, computed by the
// caller), f_i a per-row factor and A_i = Σ_j |S_ij| the absolute row sum of this run's
// pairs (RetNet's normalisations, docs/linear-attention.md §5).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "../../view.hpp"
#include "../eigen_gemm.hpp"
#include "../storage.hpp"
#include "arena.hpp"
#include "tile_sink.hpp"

namespace peal {
namespace detail {
namespace tiled {

/// What LinearSink adds to O = S V before writing a row (all optional).
template <class C>
struct LinearRows {
  const C* base = nullptr;     // B: [rows, heads, dv] of the view, row i at base + (i H + h) dv
  const double* f = nullptr;   // f: [rows, heads], f[i H + h]
  bool clamp = false;          // divide by clamp(f A, lo, hi)
  double lo = 1, hi = std::numeric_limits<double>::infinity();
  const double* lo_head = nullptr;  // per head of the view: lo (RetNet's chunk form: K_c)
};

template <class C, class Tv, class To>
class LinearSink : public InPlaceSink<C> {
 public:
  static constexpr bool splits_keys = false;
  static constexpr bool applies_masks = true;

  LinearSink(const TensorView<Tv>& v, const TensorView<To>& out, const LinearRows<C>& rows)
      : v_(v), out_(out), rows_(rows), dv_(v.dim()) {}

  /// Per-thread memory: V of one key tile, O and A of one unit's rows, the S V packing.
  struct Work {
    Buf<C> vtile, o, blockA, blockB;
    Buf<double> asum;
    eigen_gemm::GemmBlocking<C> blocking;
    Index I0 = 0;
    const C* vrows = nullptr;  // V of the current key tile: vtile or the view itself
    Index ldv = 0;
    template <class Run>
    void carve(Arena& a, const Run& r) {
      const Index TQm = r.query_plan().max_rows, TKm = r.key_plan().max_rows;
      const Index dv = r.sink().dv_, G = r.group();
      const Index rows = r.max_block_rows() * G;
      Index kc = std::max<Index>(TKm, 1), mc = std::max<Index>(TQm * G, 1), nc = std::max<Index>(dv, 1);
      eigen_gemm::product_blocking_sizes<C>(kc, mc, nc);
      vtile = a.take<C>(TKm * dv);
      o = a.take<C>(rows * dv);
      asum = a.take<double>(rows);
      blockA = a.take<C>(kc * mc);
      blockB = a.take<C>(kc * nc);
      blocking = eigen_gemm::GemmBlocking<C>(mc, nc, kc, blockA.data(), blockB.data());
    }
  };

  double window() const { return std::numeric_limits<double>::infinity(); }
  template <class Run>
  void masked(const Run&, Work&, Index, Index, Index) const {}  // contributes nothing
  template <class Run>
  void key_block(const Run&, Work&, Index) const {}

  template <class Run>
  void unit_begin(const Run& r, Work& w, Index, Index I0, Index I1, Index) const {
    const auto& qp = r.query_plan();
    const Index rows = (qp.begin[std::size_t(I1)] - qp.begin[std::size_t(I0)]) * r.group();
    w.I0 = I0;
    std::fill_n(w.o.data(), rows * dv_, C(0));
    std::fill_n(w.asum.data(), rows, 0.0);
  }

  /// V rows of key tile J, head kh, in the arithmetic type (n x dv, row-major).
  template <class Run>
  void key_tile(const Run& r, Work& w, Index kh, Index J) const {
    if (dv_ == 0) return;
    const auto& kp = r.key_plan();
    value_rows(v_, kp.begin[std::size_t(J)], kp.rows(J), kh, w.vtile.data(), w.vrows, w.ldv);
  }

  /// Head h's scores of tile (I, J), in place: the causal mask (0 for s_j > t_i) where the
  /// tile straddles the diagonal, and the absolute row sums when they are wanted.
  template <class Run>
  void tile_done(const Run& r, Work& w, C* tile, Index h, Index I, Index J) const {
    const auto& qp = r.query_plan();
    const auto& kp = r.key_plan();
    const Index i0 = qp.begin[std::size_t(I)], m = qp.rows(I);
    const Index j0 = kp.begin[std::size_t(J)], n = kp.rows(J);
    const bool causal = kp.hi[std::size_t(J)] > qp.lo[std::size_t(I)];
    const Index base = (i0 - qp.begin[std::size_t(w.I0)]) * r.group() + (h % r.group()) * m;
    for (Index i = 0; i < m; ++i) {
      C* x = tile + i * n;
      if (causal) {
        const double ti = r.t(i0 + i);
        for (Index j = 0; j < n; ++j)
          if (r.s(j0 + j) > ti) x[j] = C(0);
      }
      if (rows_.clamp) {
        double a = 0;
        for (Index j = 0; j < n; ++j) a += std::abs(double(x[j]));
        w.asum[std::size_t(base + i)] += a;
      }
    }
  }

  /// O rows of tile I, every head of the group: O += S V_J, one GEMM (the heads' slices of
  /// S and of O are consecutive, in the same order).
  template <class Run>
  void group_done(const Run& r, Work& w, C* tile, Index, Index I, Index J) const {
    const auto& qp = r.query_plan();
    const Index m = qp.rows(I), n = r.key_plan().rows(J), G = r.group();
    if (dv_ == 0 || n == 0) return;
    const Index base = (qp.begin[std::size_t(I)] - qp.begin[std::size_t(w.I0)]) * G;
    eigen_gemm::gemm_ab<C, Eigen::RowMajor>(G * m, dv_, n, tile, n, w.vrows, w.ldv,
                                            w.o.data() + base * dv_, dv_, C(1), w.blocking);
  }

  /// The unit's rows into out.
  template <class Run>
  void unit_end(const Run& r, Work& w, Index kh, Index I0, Index I1, Index) const {
    const auto& qp = r.query_plan();
    const Index G = r.group(), H = r.query_heads();
    const Index es = out_.strides().elem;
    for (Index I = I0; I < I1; ++I) {
      const Index i0 = qp.begin[std::size_t(I)], m = qp.rows(I);
      const Index base = (i0 - qp.begin[std::size_t(I0)]) * G;
      for (Index g = 0; g < G; ++g)
        for (Index i = 0; i < m; ++i) {
          const Index row = base + g * m + i, h = kh * G + g, at = (i0 + i) * H + h;
          const C* o = w.o.data() + row * dv_;
          const C* b = rows_.base ? rows_.base + at * dv_ : nullptr;
          double f = rows_.f ? rows_.f[at] : 1.0;
          if (rows_.clamp) {
            const double lo = rows_.lo_head ? rows_.lo_head[h] : rows_.lo;
            f /= std::clamp(f * w.asum[std::size_t(row)], lo, std::max(lo, rows_.hi));
          }
          To* dst = out_.vector(i0 + i, h);
          for (Index e = 0; e < dv_; ++e) {
            const C x = b ? o[e] + b[e] : o[e];
            dst[e * es] = from_arith<To>(f == 1.0 ? x : C(double(x) * f));
          }
        }
    }
  }
  template <class Run>
  void finish(const Run&) const {}

 private:
  TensorView<Tv> v_;
  TensorView<To> out_;
  LinearRows<C> rows_;
  Index dv_ = 0;
};

}  // namespace tiled
}  // namespace detail
}  // namespace peal
