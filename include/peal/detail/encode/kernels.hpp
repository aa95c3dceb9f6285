// The per-token kernels of encode_queries, encode_keys and shift_keys (encode.hpp), their
// dispatch and their driver over a batch.
//
// Dispatch (docs/kernels-encode.md): each encoding maps to a per-token kernel
// (prepare(position) once per token, then apply to every head). With double parameters it
// is the encoding's coder, the protocol of the fused kernels (detail/coders/coders.hpp):
// per token one row of its table, then its apply_heads on every head, e.g.
//   Bank<RotationBlock>   one batched sincos of all n frequencies, then a vectorized
//                         rotation (and e^{a t} scale) loop per head, both layouts;
//   Bank<RealBlock>       one batched exp, then a scale loop;
//   BlockDiagonal<...>    each part's coder on its coordinate sub-range, in one pass;
//   BasisChange<E>        P^T (queries) or P^{-1} (keys) then E's coder;
//   a block with traits   the traits' factors; anything else its own apply() per head.
// Long double encodings: the dense F(t) or G(s) built once per token in their precision
// (from the encoding's apply(), no allocation), then a matrix-vector product per head.
// MultiAxis<E> (N-D points): a rotation bank's fused kernel (angles summed over the axes), a
// composition's parts over points, else the axes in turn.
// Views whose element stride is not 1, or whose storage is not the arithmetic type, are
// gathered into a per-call buffer of the arithmetic type and scattered back.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../bank.hpp"
#include "../../basis_change.hpp"
#include "../../block_diagonal.hpp"
#include "../../errors.hpp"
#include "../../multi_axis.hpp"
#include "../../positions.hpp"
#include "../../positions_nd.hpp"
#include "../../real_block.hpp"
#include "../../rotation_block.hpp"
#include "../../view.hpp"
#include "../coders/coders.hpp"
#include "../compiler.hpp"
#include "../math/exp_kernel.hpp"
#include "../math/exp_poly.hpp"
#include "../math/lu_inverse.hpp"
#include "../math/sincos.hpp"
#include "../overlap.hpp"
#include "../parallel.hpp"
#include "../storage.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

// PEAL_NOINLINE, PEAL_PREFETCH, PEAL_RESTRICT: detail/compiler.hpp.

namespace peal {
namespace detail {
namespace encode_kernels {

/// Which factor a kernel applies: F(p) (query), G(p) (key), or the shift that takes
/// G(s) to G(s + p) (A(-p) for every encoding whose G(s) is A(-s); for a basis change
/// G_P(s) = A_J(-s) P^{-1}, the shift is A_J(-p)).
enum class Mode { query, key, shift };

/// Below this many elements per call, OpenMP threads are not started.
inline constexpr Index kParallelMinElements = Index(1) << 16;

using detail::arith_t;
using detail::from_arith;
using detail::is_storage;
using detail::to_arith;

// ---- exp of many arguments at once: detail/math/exp_kernel.hpp (shared with scores.hpp).
using detail::exp_batch;
using detail::exp_kernel;

// ---- Kernels. Interface (A = arithmetic type; a "row" is the `heads` vectors of one token,
// vector h starting at x + h * xs, each contiguous with dim() elements):
//   Kernel(const E& enc, Mode mode)           per-call setup and buffers (may allocate);
//   int dim() const;
//   void prepare(double p);                   coefficients for position p (no allocation;
//                                             prepare(const PointRef&) for N-D points);
//   void inplace(A* x, Index heads, Index xs);                     x_h <- M x_h;
//   void copy(const A* x, Index xs, A* y, Index ys, Index heads);  y_h <- M x_h, x and y
//                                                                  not overlapping.

template <class A, class E, class = void>
struct kernel_for;
template <class A, class E>
using kernel_t = typename kernel_for<A, E>::type;

/// MultiAxis<Bank<RotationBlock>> (N-D points): the angle of pair i is ω_i·p = Σ_a ω_{a,i} p_a,
/// each axis's term reduced exactly (over the pairs where ω_{a,i} is non-zero only: M-RoPE's
/// pairs follow one axis), then one sincos per pair and the loops of detail/coders/row_loops.hpp,
/// as the 1-D coder's apply_heads; the growth is e^{±a_i·p}.
template <class A>
class RotationBankKernel {
 public:
  template <class S>
  RotationBankKernel(const MultiAxis<Bank<RotationBlock<S>>>& m, Mode mode)
      : n_(m.axis(0).size()),
        interleaved_(m.axis(0).layout() == Layout::Interleaved),
        query_(mode == Mode::query),
        sd_(std::size_t(n_)),
        cd_(std::size_t(n_)),
        gd_(std::size_t(n_)),
        cc_(std::size_t(n_) * (interleaved_ ? 2 : 1)),
        ss_(cc_.size()),
        r_(std::size_t(n_)),
        tmp_(std::size_t(n_)),
        e_(std::size_t(n_)) {
    for (int a = 0; a < m.axes(); ++a) {  // the kernel's own compact per-axis tables
      const auto& P = m.axis(a).params();
      Axis ax;
      for (int i = 0; i < n_; ++i)
        if (P(i, 0) != 0 || P(i, 1) != 0) {
          ax.idx.push_back(i);
          ax.hi.push_back(P(i, 0));
          ax.lo.push_back(P(i, 1));
        }
      ax.a.assign(P.col(2).data(), P.col(2).data() + n_);
      ax.growth = !(P.col(2) == 0).all();
      pure_ = pure_ && !ax.growth;
      axes_.push_back(std::move(ax));
    }
  }
  int dim() const { return 2 * n_; }

  void prepare(const PointRef& p) {
    if (n_ == 0) return;
    double* PEAL_RESTRICT r = r_.data();
    for (int i = 0; i < n_; ++i) r[i] = 0;
    for (std::size_t a = 0; a < axes_.size(); ++a) {
      const Axis& ax = axes_[a];
      const double pa = p[int(a)];
      const int m = int(ax.idx.size());
      if (pa == 0 || m == 0) continue;
      if (m == n_) {  // every pair follows this axis: no gather
        angles_reduced_add(ax.hi.data(), ax.lo.data(), pa, m, r);
        continue;
      }
      double* PEAL_RESTRICT t = tmp_.data();
      angles_reduced(ax.hi.data(), ax.lo.data(), pa, m, t);
      for (int k = 0; k < m; ++k) r[ax.idx[std::size_t(k)]] += t[k];
    }
    for (int i = 0; i < n_; ++i) sincos_reduced(r[i], sd_[std::size_t(i)], cd_[std::size_t(i)]);
    if (!pure_) {
      double* PEAL_RESTRICT e = e_.data();
      for (int i = 0; i < n_; ++i) e[i] = 0;
      for (std::size_t a = 0; a < axes_.size(); ++a)
        if (axes_[a].growth)
          for (int i = 0; i < n_; ++i) e[i] += axes_[a].a[std::size_t(i)] * p[int(a)];
      exp_batch(e, query_ ? 1.0 : -1.0, n_, gd_.data());
    }
    finish();
  }
  PEAL_NOINLINE void inplace(A* x, Index heads, Index xs) {
    if (big_) return past_range(x, xs, x, xs, heads);
    with_pair_count(n_, [&](auto N) {
      if (interleaved_)
        rotate_heads_interleaved<N()>(x, heads, xs, cc_.data(), ss_.data(), n_);
      else
        rotate_heads_halfsplit<N()>(x, heads, xs, cc_.data(), ss_.data(), n_);
    });
  }
  PEAL_NOINLINE void copy(const A* x, Index xs, A* y, Index ys, Index heads) {
    if (big_) return past_range(x, xs, y, ys, heads);
    with_pair_count(n_, [&](auto N) {
      if (interleaved_)
        rotate_heads_interleaved<N()>(x, xs, y, ys, heads, cc_.data(), ss_.data(), n_);
      else
        rotate_heads_halfsplit<N()>(x, xs, y, ys, heads, cc_.data(), ss_.data(), n_);
    });
  }

 private:
  struct Axis {
    std::vector<int> idx;          // pairs with a non-zero frequency on this axis
    std::vector<double> hi, lo;    // their frequencies (compact)
    std::vector<double> a;         // growth rate of every pair on this axis
    bool growth = false;
  };

  // sd/cd hold sin/cos of the angles and, unless pure, gd the factors e^{±growth}: scale
  // (or defer to past_range when a factor leaves the range of A) and lay out the tables.
  void finish() {
    double* PEAL_RESTRICT sd = sd_.data();
    double* PEAL_RESTRICT cd = cd_.data();
    big_ = false;
    if (!pure_) {
      const double* PEAL_RESTRICT g = gd_.data();
      int big = 0;  // a factor beyond the range of A: rows go through past_range()
      for (int i = 0; i < n_; ++i) big |= !(g[i] <= double(std::numeric_limits<A>::max()));
      big_ = big != 0;
      for (int i = 0; i < n_ && !big_; ++i) {
        sd[i] *= g[i];
        cd[i] *= g[i];
      }
    }
    A* PEAL_RESTRICT cc = cc_.data();
    A* PEAL_RESTRICT ss = ss_.data();
    if (interleaved_) {
      for (int i = 0; i < n_; ++i) {
        cc[2 * i] = cc[2 * i + 1] = A(cd[i]);
        ss[2 * i] = A(-sd[i]);
        ss[2 * i + 1] = A(sd[i]);
      }
    } else {
      for (int i = 0; i < n_; ++i) {
        cc[i] = A(cd[i]);
        ss[i] = A(sd[i]);
      }
    }
  }
  // A token whose factor e^{±a p} is beyond the range of A (detail/math/exp_poly.hpp, "Past the
  // range"): rotate in double, then scale exactly, so a zero stays 0 (not inf·0) and a tiny
  // component stays finite when its product is. Not the hot path.
  void past_range(const A* x, Index xs, A* y, Index ys, Index heads) const {
    const int stride = interleaved_ ? 1 : n_, step = interleaved_ ? 2 : 1;
    for (Index h = 0; h < heads; ++h)
      for (int i = 0; i < n_; ++i) {
        const Index j0 = h * xs + Index(step) * i, k0 = h * ys + Index(step) * i;
        const double x0 = double(x[j0]), x1 = double(x[j0 + stride]);
        const double c = cd_[std::size_t(i)], s = sd_[std::size_t(i)];
        const double e = query_ ? e_[std::size_t(i)] : -e_[std::size_t(i)];
        y[k0] = A(detail::mul_exp(c * x0 - s * x1, e));
        y[k0 + stride] = A(detail::mul_exp(s * x0 + c * x1, e));
      }
  }

  int n_;
  bool interleaved_, query_, pure_ = true, big_ = false;
  std::vector<double> sd_, cd_, gd_;
  std::vector<A> cc_, ss_;
  std::vector<Axis> axes_;
  std::vector<double> r_, tmp_, e_;  // angles, one axis's angles, exponents Σ_a a_{a,i} p_a
};

/// Compositions the coders do not take (long double parameters): BlockDiagonal runs part I's
/// kernel on coordinates [offset<I>, offset<I> + dim_I) of every vector of the row, part
/// after part; BasisChange runs P^T or P^{-1}, then E's kernel (its shift is E's own). A
/// composition's encode is not A(t)^T of the composition (F_P(t) = F_J(t) P^T), so the dense
/// kernel of the whole, built from its apply(), would not do.
template <class A, class... Parts>
class BlockDiagonalKernel {
  static constexpr std::size_t N = sizeof...(Parts);

 public:
  BlockDiagonalKernel(const BlockDiagonal<Parts...>& bd, Mode mode)
      : BlockDiagonalKernel(bd, mode, std::make_index_sequence<N>{}) {}
  int dim() const { return dim_; }
  void prepare(double p) {
    std::apply([p](auto&... k) { (k.prepare(p), ...); }, ks_);
  }
  void inplace(A* x, Index heads, Index xs) {
    inplace_impl(x, heads, xs, std::make_index_sequence<N>{});
  }
  void copy(const A* x, Index xs, A* y, Index ys, Index heads) {
    copy_impl(x, xs, y, ys, heads, std::make_index_sequence<N>{});
  }

 private:
  template <std::size_t... I>
  BlockDiagonalKernel(const BlockDiagonal<Parts...>& bd, Mode mode, std::index_sequence<I...>)
      : ks_(kernel_t<A, Parts>(bd.template part<I>(), mode)...),
        off_{{bd.template offset<I>()...}},
        dim_(bd.dim()) {}
  template <std::size_t... I>
  void inplace_impl(A* x, Index heads, Index xs, std::index_sequence<I...>) {
    (std::get<I>(ks_).inplace(x + off_[I], heads, xs), ...);
  }
  template <std::size_t... I>
  void copy_impl(const A* x, Index xs, A* y, Index ys, Index heads, std::index_sequence<I...>) {
    (std::get<I>(ks_).copy(x + off_[I], xs, y + off_[I], ys, heads), ...);
  }

  std::tuple<kernel_t<A, Parts>...> ks_;
  std::array<int, N> off_;
  int dim_;
};

/// The rows of a basis change's kernels into its coordinates: x <- Pᵀ x (queries) or P⁻¹ x
/// (keys) per head, nothing for a shift (BasisChangeKernel in 1-D, MultiAxisBasisKernel over
/// points; B: a BasisChange, or the first axis of a MultiAxis of them, which share P).
template <class A>
class BasisRows {
 public:
  template <class B>
  BasisRows(const B& b, Mode mode) : pre_(mode != Mode::shift), tmp_(b.dim()) {
    if (mode == Mode::query)
      m_ = b.P().transpose().template cast<A>();
    else if (mode == Mode::key)
      m_ = b.P_inverse().template cast<A>();
  }
  void inplace(A* x, Index heads, Index xs) {
    if (!pre_) return;
    for (Index h = 0; h < heads; ++h) {
      Eigen::Map<Vector<A>> xm(x + h * xs, tmp_.size());
      tmp_.noalias() = m_ * xm;
      xm = tmp_;
    }
  }
  /// y <- M x per head; false, with nothing done, for a shift.
  bool copy(const A* x, Index xs, A* y, Index ys, Index heads) const {
    if (!pre_) return false;
    for (Index h = 0; h < heads; ++h)
      Eigen::Map<Vector<A>>(y + h * ys, tmp_.size()).noalias() =
          m_ * Eigen::Map<const Vector<A>>(x + h * xs, tmp_.size());
    return true;
  }

 private:
  bool pre_;
  Matrix<A> m_;
  Vector<A> tmp_;
};

/// BasisChange<E>: F_P(t) = F_J(t) P^T, G_P(s) = G_J(s) P^{-1}; the shift is E's own.
template <class A, class E>
class BasisChangeKernel {
 public:
  BasisChangeKernel(const BasisChange<E>& b, Mode mode) : inner_(b.inner(), mode), rows_(b, mode) {}
  int dim() const { return inner_.dim(); }
  void prepare(double p) { inner_.prepare(p); }
  void inplace(A* x, Index heads, Index xs) {
    rows_.inplace(x, heads, xs);
    inner_.inplace(x, heads, xs);
  }
  void copy(const A* x, Index xs, A* y, Index ys, Index heads) {
    if (!rows_.copy(x, xs, y, ys, heads)) return inner_.copy(x, xs, y, ys, heads);
    inner_.inplace(y, heads, ys);
  }

 private:
  kernel_t<A, E> inner_;
  BasisRows<A> rows_;
};

template <class E, class = void>
struct has_apply : std::false_type {};
template <class E>
struct has_apply<E, std::void_t<decltype(std::declval<const E&>().apply(
                        std::declval<Vector<typename E::Scalar>&>(),
                        std::declval<real_t<typename E::Scalar>>(), true))>> : std::true_type {};

/// Encodings the coders do not take (long double parameters, or no apply() on an Eigen map):
/// the dense factor M (F(p), G(p) or the shift) once per token, in the encoding's own
/// precision, then y = M x per head. Built column by column from the encoding's apply() into
/// preallocated storage; encodings without apply() fall back on F()/G() (which may allocate).
template <class A, class E>
class DenseKernel {
  using S = typename E::Scalar;
  using R = real_t<S>;

 public:
  DenseKernel(const E& e, Mode mode)
      : e_(&e), mode_(mode), d_(int(e.dim())), m_(d_, d_), ms_(d_, d_), col_(d_), tmp_(d_) {
    if constexpr (!has_apply<E>::value) {
      if (mode == Mode::shift) {
        S rcond;  // not checked, as before: the shift is G(r) G(0)^{-1} = A(-r) for any G
        g0inv_ = detail::lu_inverse(Matrix<S>(e.G(R(0))), rcond);
      }
    }
  }
  int dim() const { return d_; }
  void prepare(double p) {
    const R r = R(p);
    if constexpr (has_apply<E>::value) {
      // query: F(t) = A(t)^T; key and shift: G(s) = A(-s).
      const bool transpose = mode_ == Mode::query;
      const R tau = transpose ? r : -r;
      for (int j = 0; j < d_; ++j) {
        col_.setZero();
        col_(j) = S(1);
        e_->apply(col_, tau, transpose);
        ms_.col(j) = col_;
      }
      m_ = ms_.template cast<A>();
      // An entry beyond the range of A: M x would meet inf·0; rows then go through the
      // encoding's own apply(), exact past the range (detail/math/exp_poly.hpp). Not the hot path.
      big_ = !m_.allFinite();
      tau_ = tau, transpose_ = transpose;
    } else {
      if (mode_ == Mode::query)
        m_ = Matrix<S>(e_->F(r)).template cast<A>();
      else if (mode_ == Mode::key)
        m_ = Matrix<S>(e_->G(r)).template cast<A>();
      else
        m_ = (Matrix<S>(e_->G(r)) * g0inv_).template cast<A>();
    }
  }
  void inplace(A* x, Index heads, Index xs) {
    if (big_) return past_range(x, xs, x, xs, heads);
    for (Index h = 0; h < heads; ++h) {
      Eigen::Map<Vector<A>> xm(x + h * xs, d_);
      tmp_.noalias() = m_ * xm;
      xm = tmp_;
    }
  }
  void copy(const A* x, Index xs, A* y, Index ys, Index heads) {
    if (big_) return past_range(x, xs, y, ys, heads);
    for (Index h = 0; h < heads; ++h)
      Eigen::Map<Vector<A>>(y + h * ys, d_).noalias() =
          m_ * Eigen::Map<const Vector<A>>(x + h * xs, d_);
  }

 private:
  void past_range(const A* x, Index xs, A* y, Index ys, Index heads) {
    if constexpr (has_apply<E>::value) {
      for (Index h = 0; h < heads; ++h) {
        col_ = Eigen::Map<const Vector<A>>(x + h * xs, d_).template cast<S>();
        e_->apply(col_, tau_, transpose_);
        Eigen::Map<Vector<A>>(y + h * ys, d_) = col_.template cast<A>();
      }
    }
  }

  const E* e_;
  Mode mode_;
  bool big_ = false, transpose_ = false;
  R tau_ = 0;
  int d_;
  Matrix<A> m_;
  Matrix<S> ms_, g0inv_;
  Vector<S> col_;
  Vector<A> tmp_;
};

/// Whether encode evaluates E through its coder (detail/coders/coders.hpp): double parameters
/// (long double encodings keep their own precision through DenseKernel), and a coder that is
/// not the per-row fallback or, if it is, an apply() on an Eigen map for it to call.
template <class A, class E, class = void>
struct has_coder_kernel : std::false_type {};
template <class A, class E>
struct has_coder_kernel<A, E, std::enable_if_t<std::is_same<real_t<typename E::Scalar>, double>::value>>
    : std::integral_constant<bool, !coders::is_fallback_coder<coders::coder_t<A, E>>::value ||
                                       coders::has_apply_on<E, A>::value> {};

/// Every encoding with double parameters: per token one row of the coder's table, A(p)^T
/// (queries: F(t) = A(t)^T), A(-p) (keys: G(s) = A(-s)) or the shift's A(-p) applied as the
/// coder's factor (a basis change's shift is its inner encoding's), the very tables of the
/// fused kernels (scores, attention, linear attention), then applied to the token's heads
/// (the coder's apply_heads: the hand-vectorised loops of detail/coders/row_loops.hpp for rotation
/// and real banks). This is how a block type gets a fast encode from its traits alone
/// (docs/design.md §5). A row the arithmetic type cannot hold (a magnitude past DBL_MAX, or a
/// coefficient not finite in A) goes through the coder's apply_exact(): the rotation first,
/// the factor by mul_exp, so that 0 stays 0.
template <class A, class E>
class CoderKernel {
  using Coder = coders::coder_t<A, E>;
  static constexpr bool kTables = coders::has_row_tables<Coder, A>::value;

 public:
  CoderKernel(const E& e, Mode mode)
      : coder_(e),
        transpose_(mode == Mode::query),
        factor_(mode == Mode::shift),
        rel_(std::size_t(std::max(coder_.rel_size(), 1))),
        coef_(std::size_t(std::max(coder_.coef_size(), 1))),
        scratch_(4 * std::size_t(std::max(coder_.dim(), 2))) {}
  int dim() const { return coder_.dim(); }
  void prepare(double p) {
    tau_ = transpose_ ? p : -p;
    coder_.relative(&tau_, 1, rel_.data(), coder_.rel_size());
    if constexpr (kTables) {  // the loops' tables straight from the row (rotation banks)
      big_ = coder_.row_tables(rel_.data(), transpose_, scratch_.data(),
                               scratch_.data() + coder_.dim());
      return;
    }
    coder_.compose(nullptr, rel_.data(), coder_.rel_size(), 1, coef_.data(), coder_.coef_size(),
                   transpose_);
    big_ = coder_.out_of_range(rel_.data(), coef_.data());
  }
  void inplace(A* x, Index heads, Index xs) { copy(x, xs, x, xs, heads); }
  void copy(const A* x, Index xs, A* y, Index ys, Index heads) {
    if constexpr (kTables) {
      if (!big_)
        return coder_.apply_tables(scratch_.data(), scratch_.data() + coder_.dim(), x, xs, y,
                                   ys, heads);
    } else if (!big_) {
      return coders::apply_heads(coder_, coef_.data(), x, xs, y, ys, heads, transpose_, factor_,
                                 scratch_.data());
    }
    for (Index h = 0; h < heads; ++h)
      coder_.apply_exact(tau_, rel_.data(), x + h * xs, y + h * ys, transpose_, factor_,
                         scratch_.data());
  }

 private:
  Coder coder_;
  bool transpose_, factor_, big_ = false;
  double tau_ = 0;
  std::vector<double> rel_;
  std::vector<A> coef_, scratch_;
};

/// MultiAxis<E>: the kernel of each axis in turn on the token's row while it is in cache
/// (F(p) = Π_a F_a(p_a): the axes commute). Axis a's kernel sees the coordinate p_a.
template <class A, class E>
class MultiAxisKernel {
 public:
  MultiAxisKernel(const MultiAxis<E>& enc, Mode mode) {
    ks_.reserve(std::size_t(enc.axes()));
    for (int a = 0; a < enc.axes(); ++a) ks_.emplace_back(enc.axis(a), mode);
  }
  int dim() const { return ks_[0].dim(); }
  void prepare(const PointRef& p) {
    for (std::size_t a = 0; a < ks_.size(); ++a) ks_[a].prepare(p[int(a)]);
  }
  void inplace(A* x, Index heads, Index xs) {
    for (auto& k : ks_) k.inplace(x, heads, xs);
  }
  void copy(const A* x, Index xs, A* y, Index ys, Index heads) {
    ks_[0].copy(x, xs, y, ys, heads);
    for (std::size_t a = 1; a < ks_.size(); ++a) ks_[a].inplace(y, heads, ys);
  }

 private:
  std::vector<kernel_t<A, E>> ks_;
};

/// MultiAxis<BlockDiagonal<Parts...>>: part I over points, MultiAxis of the axes' part I,
/// on its coordinate range (the axes share the block structure, so the parts line up).
template <class A, class... Parts>
class MultiAxisPartsKernel {
  static constexpr std::size_t N = sizeof...(Parts);

 public:
  MultiAxisPartsKernel(const MultiAxis<BlockDiagonal<Parts...>>& m, Mode mode)
      : MultiAxisPartsKernel(m, mode, std::make_index_sequence<N>{}) {}
  int dim() const { return dim_; }
  void prepare(const PointRef& p) {
    std::apply([&p](auto&... k) { (k.prepare(p), ...); }, ks_);
  }
  void inplace(A* x, Index heads, Index xs) {
    inplace_impl(x, heads, xs, std::make_index_sequence<N>{});
  }
  void copy(const A* x, Index xs, A* y, Index ys, Index heads) {
    copy_impl(x, xs, y, ys, heads, std::make_index_sequence<N>{});
  }

 private:
  template <std::size_t I, class BD>
  static auto part_axes(const MultiAxis<BD>& m) {
    using P = std::tuple_element_t<I, std::tuple<Parts...>>;
    std::vector<P> parts;
    for (int a = 0; a < m.axes(); ++a) parts.push_back(m.axis(a).template part<I>());
    return MultiAxis<P>(std::move(parts));
  }
  // The part encodings live on the heap, owned here: part kernels may keep pointers into
  // their encoding's parameters, and the heap keeps them valid if this kernel moves.
  template <std::size_t... I>
  MultiAxisPartsKernel(const MultiAxis<BlockDiagonal<Parts...>>& m, Mode mode,
                       std::index_sequence<I...>)
      : parts_(std::make_unique<std::tuple<MultiAxis<Parts>...>>(part_axes<I>(m)...)),
        ks_(kernel_t<A, MultiAxis<Parts>>(std::get<I>(*parts_), mode)...),
        off_{{m.axis(0).template offset<I>()...}},
        dim_(m.dim()) {}
  template <std::size_t... I>
  void inplace_impl(A* x, Index heads, Index xs, std::index_sequence<I...>) {
    (std::get<I>(ks_).inplace(x + off_[I], heads, xs), ...);
  }
  template <std::size_t... I>
  void copy_impl(const A* x, Index xs, A* y, Index ys, Index heads, std::index_sequence<I...>) {
    (std::get<I>(ks_).copy(x + off_[I], xs, y + off_[I], ys, heads), ...);
  }

  std::unique_ptr<std::tuple<MultiAxis<Parts>...>> parts_;
  std::tuple<kernel_t<A, MultiAxis<Parts>>...> ks_;
  std::array<int, N> off_;
  int dim_;
};

/// MultiAxis<BasisChange<E>>: the axes share one P (multi_axis.hpp refuses others), so a row
/// goes into its coordinates once (Pᵀ x for a query, P⁻¹ x for a key) and the inner encodings
/// run over the point as MultiAxis<E>: Π_a F_Ja(p_a) Pᵀ q, the basis-side form BasisChangeKernel
/// gives in 1-D (the scores are qᵀ P Π_a A_Ja(p_a − p'_a) P⁻¹ k). The axes' kernels in turn
/// would apply P once per axis.
template <class A, class E>
class MultiAxisBasisKernel {
 public:
  MultiAxisBasisKernel(const MultiAxis<BasisChange<E>>& m, Mode mode)
      : inner_axes_(std::make_unique<MultiAxis<E>>(inner_axes(m))),
        inner_(*inner_axes_, mode),
        rows_(m.axis(0), mode) {}
  int dim() const { return inner_.dim(); }
  void prepare(const PointRef& p) { inner_.prepare(p); }
  void inplace(A* x, Index heads, Index xs) {
    rows_.inplace(x, heads, xs);
    inner_.inplace(x, heads, xs);
  }
  void copy(const A* x, Index xs, A* y, Index ys, Index heads) {
    if (!rows_.copy(x, xs, y, ys, heads)) return inner_.copy(x, xs, y, ys, heads);
    inner_.inplace(y, heads, ys);
  }

 private:
  static MultiAxis<E> inner_axes(const MultiAxis<BasisChange<E>>& m) {
    std::vector<E> in;
    for (int a = 0; a < m.axes(); ++a) in.push_back(m.axis(a).inner());
    return MultiAxis<E>(std::move(in));
  }
  // On the heap, owned here (as MultiAxisPartsKernel's parts): the inner kernel may keep
  // pointers into it.
  std::unique_ptr<MultiAxis<E>> inner_axes_;
  kernel_t<A, MultiAxis<E>> inner_;
  BasisRows<A> rows_;
};

// ---- Dispatch: 1-D positions go through the coder of the encoding (one protocol with the
// fused kernels); long double encodings and encodings without a usable apply() through
// DenseKernel, their compositions through the structural kernels above; N-D points have
// their own kernels below.
template <class A, class E, class>
struct kernel_for {
  using type = std::conditional_t<has_coder_kernel<A, E>::value, CoderKernel<A, E>, DenseKernel<A, E>>;
};
template <class A, class... Parts>
struct kernel_for<A, BlockDiagonal<Parts...>> {
  using type = std::conditional_t<has_coder_kernel<A, BlockDiagonal<Parts...>>::value,
                                  CoderKernel<A, BlockDiagonal<Parts...>>,
                                  BlockDiagonalKernel<A, Parts...>>;
};
template <class A, class E>
struct kernel_for<A, BasisChange<E>> {
  using type = std::conditional_t<has_coder_kernel<A, BasisChange<E>>::value,
                                  CoderKernel<A, BasisChange<E>>, BasisChangeKernel<A, E>>;
};
// Over points: the axes' kernels in turn, except for rotation banks (one fused N-D kernel),
// compositions, which are the composition of their parts over points (part I's kernel
// is that of MultiAxis<Part_I>, so M-RoPE's rotation bank gets the fused kernel), and basis
// changes (one P for every axis: the basis once, then the inner encodings over points).
template <class A, class E, class = void>
struct multi_axis_kernel {
  using type = MultiAxisKernel<A, E>;
};
template <class A, class S>
struct multi_axis_kernel<A, Bank<RotationBlock<S>>,
                         std::enable_if_t<std::is_same<real_t<S>, double>::value>> {
  using type = RotationBankKernel<A>;
};
template <class A, class... Parts>
struct multi_axis_kernel<A, BlockDiagonal<Parts...>> {
  using type = MultiAxisPartsKernel<A, Parts...>;
};
template <class A, class E>
struct multi_axis_kernel<A, BasisChange<E>> {
  using type = MultiAxisBasisKernel<A, E>;
};
template <class A, class E>
struct kernel_for<A, MultiAxis<E>> : multi_axis_kernel<A, E> {};
template <class A, class E>  // a preset: the kernel of the encoding it is
struct kernel_for<A, E, std::enable_if_t<has_encoding_type<E>::value>>
    : kernel_for<A, typename E::encoding_type> {};

template <class TS, class TD>
inline void prefetch_row(const TS* s, TD* d, Index bytes) {
  const char* ps = reinterpret_cast<const char*>(s);
  const char* pd = reinterpret_cast<const char*>(d);
  for (Index b = 0; b < bytes; b += 64) {
    PEAL_PREFETCH(ps + b, 0);
    if (pd != ps) PEAL_PREFETCH(pd + b, 1);
  }
}

// ---- Driver: every token and head of src, written to dst (src and dst may be the same
// view). Positions are checked by the caller.
inline bool constant_positions(const Positions& p) { return p.is_sequence() && p.step() == 0; }
inline bool constant_positions(const PositionsND& p) { return p.is_constant(); }

template <class E, class TS, class TD, class Pos>
void run(const E& enc, Mode mode, const TensorView<TS>& src, const TensorView<TD>& dst,
         const Pos& pos) {
  using A = arith_t<TS, TD>;
  using K = kernel_t<A, E>;
  constexpr bool same_types =
      std::is_same<std::remove_cv_t<TS>, A>::value && std::is_same<TD, A>::value;

  const Index T = dst.tokens(), H = dst.heads(), D = dst.dim();
  if (dst.empty()) return;
  const bool direct = same_types && src.strides().elem == 1 && dst.strides().elem == 1;
  const bool constant = constant_positions(pos);  // shift_keys, or one time

  int nthreads = 1;
#ifdef _OPENMP
  if (T > 1 && T * H * D >= kParallelMinElements && !omp_in_parallel())
    nthreads = int(std::min<Index>(omp_get_max_threads(), T));
#endif
  // Per-thread kernels and gather buffers, allocated before any thread starts.
  std::vector<K> kernels;
  kernels.reserve(std::size_t(nthreads));
  for (int i = 0; i < nthreads; ++i) kernels.emplace_back(enc, mode);
  std::vector<A> buffers(direct ? 0 : std::size_t(D) * std::size_t(nthreads));

  // Bytes of a token row to prefetch before prepare(): the first lines of the row, at
  // most 8 KiB (what a core streams in the ~0.2 us a 64-frequency sincos takes).
  const Index row_bytes = (H - 1) * src.strides().head * Index(sizeof(A)) + D * Index(sizeof(A));
  const Index prefetch_bytes =
      (H > 0 && src.strides().head >= 0) ? std::min<Index>(row_bytes, 8192) : 0;
  const Index ses = src.strides().elem, des = dst.strides().elem;
  const Index shs = src.strides().head, dhs = dst.strides().head;
  auto work = [&](int tid, Index t0, Index t1) {
    K& k = kernels[std::size_t(tid)];
    A* buf = direct ? nullptr : buffers.data() + std::size_t(D) * std::size_t(tid);
    if (constant) k.prepare(pos[0]);
    for (Index t = t0; t < t1; ++t) {
      const TS* s = src.vector(t, 0);
      TD* d = dst.vector(t, 0);
      if (!constant) {
        // Start the token's first cache lines on their way before the per-token setup
        // (sincos, exp), during which the loop would otherwise issue no memory traffic.
        if (direct) prefetch_row(s, d, prefetch_bytes);
        k.prepare(pos[t]);
      }
      if constexpr (same_types) {
        if (direct) {
          const bool same = static_cast<const void*>(s) == static_cast<const void*>(d);
          if (same && (H == 1 || shs == dhs))
            k.inplace(d, H, dhs);
          else
            k.copy(s, shs, d, dhs, H);
          continue;
        }
      }
      for (Index h = 0; h < H; ++h) {
        const TS* sh = s + h * shs;
        TD* dh = d + h * dhs;
        for (Index j = 0; j < D; ++j) buf[j] = to_arith<A>(sh[j * ses]);
        k.inplace(buf, 1, D);
        for (Index j = 0; j < D; ++j) dh[j * des] = from_arith<TD>(buf[j]);
      }
    }
  };

#ifdef _OPENMP
  if (nthreads > 1) {
#pragma omp parallel num_threads(nthreads)
    {
      const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
      const Index t0 = T * tid / nt, t1 = T * (tid + 1) / nt;
      work(tid, t0, t1);
    }
    return;
  }
#endif
  const SerialEigen serial;  // a dense kernel's Eigen products on this thread (parallel.hpp)
  work(0, 0, T);
}

template <class E, class TS, class TD>
void check_views(const E& enc, const TensorView<TS>& src, const TensorView<TD>& dst,
                 const char* where) {
  static_assert(is_storage<std::remove_cv_t<TS>>::value && is_storage<std::remove_cv_t<TD>>::value,
                "peal: kernel storage must be float, double, Eigen::half or Eigen::bfloat16");
  static_assert(!std::is_const<TD>::value, "peal: the destination view must be writable");
  if (src.tokens() != dst.tokens() || src.heads() != dst.heads() || src.dim() != dst.dim()) {
    std::ostringstream os;
    os << where << ": source is [" << src.tokens() << ", " << src.heads() << ", " << src.dim()
       << "] but destination is [" << dst.tokens() << ", " << dst.heads() << ", " << dst.dim()
       << "] (tokens, heads, dim must match)";
    fail(os.str());
  }
  if (dst.dim() != Index(enc.dim())) {
    std::ostringstream os;
    os << where << ": view has dim " << dst.dim() << ", the encoding acts on size " << enc.dim();
    fail(os.str());
  }
  // Rows are read after earlier rows of dst were written: dst must not share memory with
  // src, unless it is the very same view (the in-place call). Byte ranges are compared
  // (detail/overlap.hpp), so interleaved but disjoint views are rejected too.
  if (!same_elements(src, dst) && may_overlap(src, dst))
    fail(std::string(where) +
         ": source and destination overlap (out of place they must not share memory; pass "
         "the same view as both to encode in place)");
}

}  // namespace encode_kernels
}  // namespace detail
}  // namespace peal
