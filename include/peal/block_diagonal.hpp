// BlockDiagonal<Parts...>: heterogeneous composition, X = diag(X_1, ..., X_k) and so
// A(tau) = diag(A_1(tau), ..., A_k(tau)), the parts taking consecutive coordinate ranges
// in order; a part may be PassThrough<S>{n} (pass_through.hpp), the identity on n
// coordinates. compose(parts...) deduces the types.
#pragma once

#include <tuple>
#include <type_traits>
#include <utility>

#include "encoding.hpp"
#include "pass_through.hpp"

namespace peal {

template <class... Parts>
class BlockDiagonal
    : public Encoding<BlockDiagonal<Parts...>,
                      typename std::tuple_element_t<0, std::tuple<Parts...>>::Scalar> {
  static_assert(sizeof...(Parts) >= 1, "peal: compose at least one part");

 public:
  using Scalar = typename std::tuple_element_t<0, std::tuple<Parts...>>::Scalar;
  using Real = real_t<Scalar>;
  using MatrixType = Matrix<Scalar>;
  static_assert((std::is_same<typename Parts::Scalar, Scalar>::value && ...),
                "peal: every part of a composition must have the same Scalar");

  explicit BlockDiagonal(Parts... parts) : parts_(std::move(parts)...) {}

  int dim() const {
    return std::apply([](const auto&... p) { return (0 + ... + int(p.dim())); }, parts_);
  }
  static constexpr std::size_t num_parts() { return sizeof...(Parts); }
  template <std::size_t I>
  const auto& part() const { return std::get<I>(parts_); }
  /// First coordinate of part I.
  template <std::size_t I>
  int offset() const { return offset_impl(std::make_index_sequence<I>{}); }

  MatrixType generator() const {
    return assemble([](const auto& p) { return p.generator(); });
  }
  MatrixType A(Real tau) const {
    detail::require_finite(tau, "A", "tau");
    return assemble([tau](const auto& p) { return p.A(tau); });
  }

  template <class V>
  void apply(V&& v, Real tau, bool transpose) const {
    int off = 0;
    std::apply(
        [&](const auto&... p) {
          ((p.apply(v.segment(off, int(p.dim())), tau, transpose), off += int(p.dim())), ...);
        },
        parts_);
  }

 private:
  template <std::size_t... Is>
  int offset_impl(std::index_sequence<Is...>) const {
    return (0 + ... + int(std::get<Is>(parts_).dim()));
  }
  template <class Fn>
  MatrixType assemble(Fn&& per_part) const {
    MatrixType m = MatrixType::Zero(dim(), dim());
    int off = 0;
    std::apply(
        [&](const auto&... p) {
          ((place(m, off, per_part(p)), off += int(p.dim())), ...);
        },
        parts_);
    return m;
  }

  // Element-wise on purpose: Eigen's packet copy of a 1x1 fixed block into a dynamic
  // block draws false -Warray-bounds from GCC 12.
  template <class Block>
  static void place(MatrixType& m, int off, const Block& b) {
    for (Eigen::Index r = 0; r < b.rows(); ++r)
      for (Eigen::Index c = 0; c < b.cols(); ++c) m(off + r, off + c) = b(r, c);
  }

  std::tuple<Parts...> parts_;
};

/// Block-diagonal composition of blocks, banks and pass-through parts, in order.
template <class... Parts>
BlockDiagonal<std::decay_t<Parts>...> compose(Parts&&... parts) {
  return BlockDiagonal<std::decay_t<Parts>...>(std::forward<Parts>(parts)...);
}

}  // namespace peal
