// MultiAxis<E>: an encoding of positions p ∈ ℝᴰ (docs/design.md §1, docs/positions-nd.md §1).
//
//   X(p) = Σ_a p_a X_a,   A(p) = exp(X(p)) = Π_a exp(p_a X_a),   A(p) A(p') = A(p + p'),
//
// where X_a is the generator of axis a's encoding E_a. The product form holds because the
// X_a commute, which the constructor checks: the axes are encodings of one type with the
// same block structure (same sizes and layout: a rotation block then has per-axis ω ∈ ℝᴰ and
// a ∈ ℝᴰ, angle ω·p and growth a·p; a real block λ ∈ ℝᴰ), and blocks of the same structure
// commute when their small generators do (checked per block). Then F(p) = A(p)ᵀ,
// G(p) = A(−p) (axes in one basis, BasisChange<E>: the basis change's F = A_J(p)ᵀ Pᵀ and
// G = A_J(−p) P⁻¹), F(p)ᵀ G(p') = A(p − p'), and everything 1-D carries over with vectors:
// the score depends on p − p' only (translation invariance along every direction).
//
// Pairs that follow one axis only (M-RoPE's t/h/w sections, axial ViT RoPE) have ω zero on
// the other axes; RoPE-Mixed has both. D = 1 is the 1-D encoding E itself.
#pragma once

#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bank.hpp"
#include "basis_change.hpp"
#include "block_diagonal.hpp"
#include "errors.hpp"
#include "positions_nd.hpp"

namespace peal {

namespace detail {

// Max-norm commutator test of two dense generators: [X, Y] = 0 up to the rounding of the
// two products (each entry a sum of n products: n eps |X|_max |Y|_max, twice).
template <class M>
bool dense_commute(const M& x, const M& y) {
  using S = typename M::Scalar;
  const long double eps = std::numeric_limits<S>::epsilon();
  const long double nx = x.cwiseAbs().maxCoeff(), ny = y.cwiseAbs().maxCoeff();
  if (nx == 0 || ny == 0) return true;
  const M c = x * y - y * x;
  return (long double)c.cwiseAbs().maxCoeff() <= 4 * (long double)x.rows() * eps * nx * ny;
}

// Largest dense generator checked as a whole (an encoding of a type peal does not know the
// structure of); 1024² entries.
inline constexpr int max_dense_commute_dim = 1024;

template <class E>
bool axes_commute(const E& x, const E& y) {  // any encoding: its dense generators
  if (x.dim() != y.dim()) return false;
  if (x.dim() > max_dense_commute_dim)
    fail("MultiAxis: cannot check that two axes of dimension " + std::to_string(x.dim()) +
         " commute (dense check limited to " + std::to_string(max_dense_commute_dim) +
         "); use banks or compositions, whose blocks are checked one by one");
  return dense_commute(x.generator(), y.generator());
}
template <class S>
bool axes_commute(const PassThrough<S>& x, const PassThrough<S>& y) {
  return x.dim() == y.dim();
}
template <class B>
bool axes_commute(const Bank<B>& x, const Bank<B>& y) {  // block by block, same layout
  if (x.size() != y.size() || x.layout() != y.layout()) return false;
  for (int i = 0; i < x.size(); ++i)
    if (!dense_commute(x.block(i).generator(), y.block(i).generator())) return false;
  return true;
}
template <class... P, std::size_t... I>
bool parts_commute(const BlockDiagonal<P...>& x, const BlockDiagonal<P...>& y,
                   std::index_sequence<I...>) {
  return (axes_commute(x.template part<I>(), y.template part<I>()) && ...);
}
template <class... P>
bool axes_commute(const BlockDiagonal<P...>& x, const BlockDiagonal<P...>& y) {
  return parts_commute(x, y, std::index_sequence_for<P...>{});
}
// Axes in one basis (canonical_axes.hpp): X_a = P J_a P⁻¹ commute when the J_a do. Checked on
// the J_a (exact structure), not on the dense P J_a P⁻¹, whose rounding in S grows with κ(P).
template <class E>
bool axes_commute(const BasisChange<E>& x, const BasisChange<E>& y) {
  return x.P() == y.P() && axes_commute(x.inner(), y.inner());
}

template <class P>
int point_size(const P& p) {
  return int(p.size());
}

}  // namespace detail

template <class E>
class MultiAxis {
 public:
  using AxisEncoding = E;
  using Scalar = typename E::Scalar;
  using Real = real_t<Scalar>;
  using MatrixType = Matrix<Scalar>;
  using Point = Eigen::Matrix<Real, Eigen::Dynamic, 1>;

  /// One encoding per axis, all of the same size and block structure, with commuting
  /// generators (else invalid_argument).
  explicit MultiAxis(std::vector<E> axes) : axes_(std::move(axes)) {
    const int D = int(axes_.size());
    if (D < 1 || D > max_position_axes)
      detail::fail("MultiAxis: the number of axes must be in [1, " +
                   std::to_string(max_position_axes) + "], got " + std::to_string(D));
    for (int a = 1; a < D; ++a)
      if (axes_[std::size_t(a)].dim() != axes_[0].dim())
        detail::fail("MultiAxis: axis " + std::to_string(a) + " acts on size " +
                     std::to_string(axes_[std::size_t(a)].dim()) + ", axis 0 on " +
                     std::to_string(axes_[0].dim()));
    for (int a = 0; a < D; ++a)
      for (int b = a + 1; b < D; ++b)
        if (!detail::axes_commute(axes_[std::size_t(a)], axes_[std::size_t(b)]))
          detail::fail("MultiAxis: the generators of axes " + std::to_string(a) + " and " +
                       std::to_string(b) +
                       " do not commute (they need the same block structure and layout)");
  }

  int axes() const { return int(axes_.size()); }
  int dim() const { return axes_[0].dim(); }
  const E& axis(int a) const { return axes_.at(std::size_t(a)); }
  const std::vector<E>& axis_encodings() const { return axes_; }

  /// X_a, the generator of axis a.
  MatrixType generator(int a) const { return axis(a).generator(); }
  /// X(p) = Σ_a p_a X_a.
  template <class P>
  MatrixType generator_at(const P& p) const {
    check_point(p, "generator_at");
    MatrixType x = MatrixType::Zero(dim(), dim());
    for (int a = 0; a < axes(); ++a) x += Scalar(p[a]) * axis(a).generator();
    return x;
  }
  /// A(p) = exp(X(p)) = Π_a A_a(p_a), closed form.
  template <class P>
  MatrixType A(const P& p) const {
    check_point(p, "A");
    MatrixType m = axis(0).A(Real(p[0]));
    for (int a = 1; a < axes(); ++a) m = (m * axis(a).A(Real(p[a]))).eval();
    return m;
  }
  /// F(p) = A(p)ᵀ and G(p) = A(−p); for axes in one basis (BasisChange<E>, one P), the basis
  /// change's factors, as in 1-D: F(p) = A_J(p)ᵀ Pᵀ, G(p) = A_J(−p) P⁻¹ with A_J(p) the inner
  /// encodings' product (F(p)ᵀ G(p') = A(p − p') either way).
  template <class P>
  MatrixType F(const P& p) const {
    if constexpr (detail::is_basis_change<E>::value)
      return MatrixType(inner_A(p, "F").transpose() * axis(0).P().transpose());
    else
      return MatrixType(A(p).transpose());
  }
  template <class P>
  MatrixType G(const P& p) const {
    if constexpr (detail::is_basis_change<E>::value)
      return MatrixType(inner_A(negated(p, "G"), "G") * axis(0).P_inverse());
    else
      return A(negated(p, "G"));
  }

  /// v <- A(p) v (transpose: A(p)^T v), in place: each axis's factor in turn. Throws unless
  /// v has dim() entries and p axes() finite coordinates.
  template <class V, class P>
  void apply(V&& v, const P& p, bool transpose) const {
    detail::require_size(Index(v.size()), dim(), "apply");
    check_point(p, "apply");
    apply_checked(v, p, transpose);
  }
  /// q <- F(p) q.
  template <class V, class P>
  void encode_query(V&& q, const P& p) const {
    auto&& m = detail::as_eigen(q);
    detail::require_size(m.size(), dim(), "encode_query");
    check_point(p, "encode_query");
    if constexpr (detail::is_basis_change<E>::value) {  // A_J(p)ᵀ (Pᵀ q)
      Vector<Scalar> y = axis(0).P().transpose() * m.template cast<Scalar>();
      for (int a = 0; a < axes(); ++a) axis(a).inner().apply(y, Real(p[a]), true);
      m = y.template cast<typename std::decay_t<decltype(m)>::Scalar>();
    } else {
      apply_checked(m, p, /*transpose=*/true);
    }
  }
  /// k <- G(p) k.
  template <class V, class P>
  void encode_key(V&& k, const P& p) const {
    auto&& m = detail::as_eigen(k);
    detail::require_size(m.size(), dim(), "encode_key");
    const Point minus = negated(p, "encode_key");
    if constexpr (detail::is_basis_change<E>::value) {  // A_J(−p) (P⁻¹ k)
      Vector<Scalar> y = axis(0).P_inverse() * m.template cast<Scalar>();
      for (int a = 0; a < axes(); ++a) axis(a).inner().apply(y, minus(a), false);
      m = y.template cast<typename std::decay_t<decltype(m)>::Scalar>();
    } else {
      apply_checked(m, minus, /*transpose=*/false);
    }
  }
  /// Reference score q^T A(p - p') k, through the lag vector p - p'.
  template <class VQ, class P, class VK, class P2>
  Scalar score(const VQ& q, const P& p, const VK& k, const P2& p2) const {
    const auto& qm = detail::as_eigen(q);
    const auto& km = detail::as_eigen(k);
    detail::require_size(qm.size(), dim(), "score (query)");
    detail::require_size(km.size(), dim(), "score (key)");
    check_point(p, "score");
    check_point(p2, "score");
    Point lag(axes());
    for (int a = 0; a < axes(); ++a) {
      lag(a) = Real(p[a]) - Real(p2[a]);
      detail::require_finite(lag(a), "score", "p - p'");
    }
    Vector<Scalar> kk = km.template cast<Scalar>();
    apply_checked(kk, lag, /*transpose=*/false);
    return qm.template cast<Scalar>().dot(kk);
  }

  // Braced points: enc.A({t, h, w}).
  MatrixType A(std::initializer_list<Real> p) const { return A(Point(to_point(p))); }
  MatrixType F(std::initializer_list<Real> p) const { return F(Point(to_point(p))); }
  MatrixType G(std::initializer_list<Real> p) const { return G(Point(to_point(p))); }

 private:
  // Π_a A_Ja(p_a) of the axes' inner encodings (axes in one basis).
  template <class P>
  auto inner_A(const P& p, const char* where) const {
    check_point(p, where);
    auto m = axis(0).inner().A(Real(p[0])).eval();
    for (int a = 1; a < axes(); ++a) m = (m * axis(a).inner().A(Real(p[a]))).eval();
    return m;
  }
  // apply() once v and p have been checked (p: axes() finite coordinates).
  template <class V, class P>
  void apply_checked(V&& v, const P& p, bool transpose) const {
    for (int a = 0; a < axes(); ++a) axis(a).apply(v, Real(p[a]), transpose);
  }
  static Point to_point(std::initializer_list<Real> p) {
    Point x(Eigen::Index(p.size()));
    Eigen::Index i = 0;
    for (Real v : p) x(i++) = v;
    return x;
  }
  template <class P>
  void check_point(const P& p, const char* where) const {
    if (detail::point_size(p) != axes())
      detail::fail(std::string(where) + ": the point has " + std::to_string(detail::point_size(p)) +
                   " coordinates, the encoding has " + std::to_string(axes()) + " axes");
    for (int a = 0; a < axes(); ++a) detail::require_finite(Real(p[a]), where, "position");
  }
  template <class P>
  Point negated(const P& p, const char* where) const {
    check_point(p, where);
    Point m(axes());
    for (int a = 0; a < axes(); ++a) m(a) = -Real(p[a]);
    return m;
  }

  std::vector<E> axes_;
};

}  // namespace peal
