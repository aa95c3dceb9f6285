// The state operations of linear attention (linear_attention.hpp, linear_state.hpp), on the
// coder protocol of the fused kernels (detail/coders/coders.hpp): whatever the encoding, its
// coder tabulates A(δ) for a row of δ's and applies it to vectors, so the state needs nothing
// per block type.
//
// A state is M = Σ_j A(T − s_j) k_j v_j^T (d x dv) at its own time T, held transposed,
// W = M^T (dv rows of d: the columns of M contiguous), in the coder's coordinates: a key
// enters as k̂ = coder.apply(A(T − s) table, k) (for a BasisChange this includes P^{-1}), the
// state advances by coder.apply_factor(A(Δ) table) on each row of W, and a query reads
// o = W q̂ with q̂ = coder.apply(A(t − T)^T table, q). Then q̂^T M̂ = q^T A(t − s) k for each
// term, and every lag is ≥ 0 (T ≥ s_j, t ≥ T): with decays every factor is ≤ 1, and nothing
// is ever evaluated at an absolute time.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../view.hpp"
#include "../coders/coders.hpp"
#include "../eigen_gemm.hpp"
#include "../storage.hpp"

namespace peal {
namespace detail {
namespace linear {

using coders::coder_t;
using coders::has_step_rows;

/// The linear kernels' buffers, 64-byte aligned like the tile driver's arena (detail/tiled/arena.hpp).
/// Eigen's vectorised loops peel unaligned leading elements to scalar code, whose rounding can
/// differ from the packet code's (a complex product fused or not): with malloc's 16-byte
/// alignment, the same read of a state gave different bits from call to call as the heap
/// moved (a LinearState read from several threads, or after a matrix() copy). Aligned, the
/// split of every row is fixed by its offset alone.
template <class C>
using Buffer = std::vector<C, Eigen::aligned_allocator<C>>;

/// A packing workspace for Eigen's GEMM of at most m x n x k (owned, reused; aligned as
/// Eigen's packing stores need).
template <class C>
struct GemmSpace {
  Buffer<C> a, b;
  eigen_gemm::GemmBlocking<C> blocking;
  void size(Index m, Index n, Index k) {
    Index kc = std::max<Index>(k, 1), mc = std::max<Index>(m, 1), nc = std::max<Index>(n, 1);
    eigen_gemm::product_blocking_sizes<C>(kc, mc, nc);
    a.resize(std::size_t(kc * mc));
    b.resize(std::size_t(kc * nc));
    blocking = eigen_gemm::GemmBlocking<C>(mc, nc, kc, a.data(), b.data());
  }
};

template <class C, class E>
class StateOps {
 public:
  explicit StateOps(const E& enc)
      : coder_(enc), d_(Index(coder_.dim())), identity_(coder_.identity()),
        bounded_(coders::is_pure_rotation<C>(enc)),
        rel_(coder_.rel_size()), coef_(coder_.coef_size()) {}

  Index dim() const { return d_; }
  Index coef_size() const { return Index(coef_); }
  /// A(δ) bounded for every δ (rotations only: no growth, decay or Jordan chain), so that a
  /// state may be held in the absolute frame A(−T) M (LinearState's decode step).
  bool bounded() const { return bounded_; }

  /// Scratch values apply() and step() need.
  Index scratch_size() const { return 4 * d_ + 4; }

  /// The coder's signature (every parameter its tables depend on; false: none).
  bool signature(std::vector<double>& sig) const { return coder_.signature(sig); }

  /// Coefficient rows of A(delta[r]) (A^T when transpose), r < n, coef_size() apart.
  void coefficients(const double* delta, Index n, C* coef, bool transpose,
                    std::vector<double>& rel) const {
    constexpr Index kRows = 64;
    rel.resize(std::size_t(std::max<Index>(1, std::min(kRows, n)) * std::max(rel_, 1)));
    for (Index r0 = 0; r0 < n; r0 += kRows) {
      const Index m = std::min(kRows, n - r0);
      coder_.relative(delta + r0, m, rel.data(), rel_);
      coder_.compose(nullptr, rel.data(), rel_, m, coef + r0 * coef_, coef_, transpose);
    }
    if constexpr (std::is_same<C, double>::value)
      for (Index r = 0; r < n; ++r) past_range(delta[r], coef + r * coef_);
  }

  /// dst row r (d values, ld d) = scale[r] A(δ_r) x_r (A^T when transpose), x_r row b + r of
  /// head h of v; coef: one coefficient row per row (or one for all when shared), nullptr:
  /// identity (no BasisChange either).
  template <class T>
  void load_rows(const TensorView<T>& v, Index b, Index n, Index h, const C* coef, bool shared,
                 bool transpose, const double* scale, C* dst, C* scratch) const {
    const Index es = v.strides().elem;
    for (Index r = 0; r < n; ++r) {
      const auto* src = v.vector(b + r, h);
      C* o = dst + r * d_;
      for (Index e = 0; e < d_; ++e) o[e] = to_arith<C>(src[e * es]);
      if (coef && !identity_) coder_.apply(coef + (shared ? 0 : r * coef_), o, o, transpose, scratch);
      if (scale) {
        const C f = C(scale[r]);
        for (Index e = 0; e < d_; ++e) o[e] *= f;
      }
    }
  }

  /// W (rows of d) <- g A(Δ) W row by row, coef the table of A(Δ) (keys' orientation).
  void advance(C* W, Index rows, const C* coef, C g, C* scratch) const {
    for (Index r = 0; r < rows; ++r) {
      C* w = W + r * d_;
      if (!identity_) coder_.apply_factor(coef, w, w, false, scratch);
      if (g != C(1))
        for (Index e = 0; e < d_; ++e) w[e] *= g;
    }
  }

  /// One token in one pass over W: each row r becomes g A(Δ) w_r + v_r k̂ (coef == nullptr:
  /// no advance; v == nullptr: no key), then o[x dv + r] = w_r · q̂_x for the nq rows q̂ (the
  /// read of the decode step).
  void step(C* W, Index rows, const C* coef, C g, const C* v, const C* k, const C* q, Index nq,
            C* o, C* scratch) const {
    using Row = Eigen::Map<Eigen::Matrix<C, 1, Eigen::Dynamic>>;
    using CRow = Eigen::Map<const Eigen::Matrix<C, 1, Eigen::Dynamic>>;
    if constexpr (has_step_rows<coder_t<C, E>, C>::value) {
      // The decode step of rotations: rotation (times g), rank-1 term and the first read in
      // one pass over W (measured: 2.9x the bare Eigen step with separate passes, 1.9x one row
      // at a time; bench/README.md, "Linear attention").
      if (coef && v && nq >= 1 && !identity_) {
        std::fill_n(o, rows, C(0));
        coder_.step_rows(coef, g, W, d_, rows, v, k, q, o);
        for (Index x = 1; x < nq; ++x)
          for (Index r = 0; r < rows; ++r)
            o[x * rows + r] = Row(W + r * d_, d_).dot(CRow(q + x * d_, d_));
        return;
      }
    }
    for (Index r = 0; r < rows; ++r) {
      C* w = W + r * d_;
      if (coef && !identity_) coder_.apply_factor(coef, w, w, false, scratch);
      Row wr(w, d_);
      if (v) {
        if (g != C(1))
          wr = g * wr + v[r] * CRow(k, d_);
        else
          wr += v[r] * CRow(k, d_);
      } else if (g != C(1)) {
        wr *= g;
      }
      // (Eigen's dot: several accumulators, vectorised; a plain loop is one latency chain.)
      for (Index x = 0; x < nq; ++x) o[x * rows + r] = wr.dot(CRow(q + x * d_, d_));
    }
  }

 private:
  // Growth past the range (docs/linear-attention.md §3). The coders clamp an overflowing
  // magnitude to the largest double, so that composing it with a tiny factor never forms
  // inf · 0; a state composes nothing after its tables, and there the clamp would pass as a
  // finite factor (a double state advanced past the range read -7.6e307, where the parallel
  // form gives NaN). An entry of at least half the largest double is such a clamp (or within a
  // factor 2 of it): it becomes ±inf, as the conversion to float makes it, so that every form
  // and the state give a non-finite output there. (A row of the per-row fallback holds δ
  // itself, left alone when |δ| is that large.)
  void past_range(double delta, double* coef) const {
    constexpr double half = std::numeric_limits<double>::max() / 2;
    if (!(std::abs(delta) < half)) return;
    constexpr double inf = std::numeric_limits<double>::infinity();
    for (int e = 0; e < coef_; ++e)
      if (std::abs(coef[e]) >= half) coef[e] = std::copysign(inf, coef[e]);
  }

  coder_t<C, E> coder_;
  Index d_;
  bool identity_, bounded_;
  int rel_, coef_;
};

}  // namespace linear
}  // namespace detail
}  // namespace peal
