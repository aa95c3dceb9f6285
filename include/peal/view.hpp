// TensorView<T>: a non-owning view of caller memory laid out as inference engines hold Q
// and K, [tokens, heads, dim], with arbitrary element strides (in the spirit of
// std::mdspan with a layout_stride mapping). T may be const, and is float, double,
// Eigen::half or Eigen::bfloat16 for the kernels.
//
// Construction checks (peal::invalid_argument): extents >= 0; non-null data unless the view
// is empty; every product of a stride and an extent, and their sum, the view's address span,
// fits in ptrdiff_t counted in bytes (so that every address and every difference of two
// addresses of the view is representable); and a writable view is injective: no two distinct
// index triples address the same element (an exact test, detail/overlap.hpp). A const view
// may broadcast (stride 0, e.g. one key head read by several query heads).
#pragma once

#include <Eigen/Core>
#include <array>
#include <cstddef>
#include <sstream>
#include <string>
#include <type_traits>

#include "detail/overlap.hpp"
#include "errors.hpp"

namespace peal {

using Index = std::ptrdiff_t;

/// Element strides of a [tokens, heads, dim] view.
struct Strides {
  Index token, head, elem;
};

template <class T>
class TensorView {
 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;

  TensorView() = default;
  /// Densely packed [tokens, heads, dim].
  TensorView(T* data, Index tokens, Index heads, Index dim)
      : TensorView(data, tokens, heads, dim, dense_strides(tokens, heads, dim)) {}
  /// Arbitrary element strides. Throws on negative extents, null data, an address span
  /// beyond ptrdiff_t, or strides under which two distinct indices of a writable view would
  /// address the same element.
  TensorView(T* data, Index tokens, Index heads, Index dim, Strides strides)
      : data_(data), ext_{tokens, heads, dim}, str_(strides) {
    validate();
  }
  /// From an Eigen matrix or map with one row per token and heads*dim columns (either
  /// storage order, any inner/outer stride).
  template <class Derived, class = std::enable_if_t<std::is_base_of<
                               Eigen::DenseBase<std::decay_t<Derived>>, std::decay_t<Derived>>::value>>
  TensorView(Derived&& m, Index heads) {
    auto& d = m.derived();
    detail::require(heads > 0 && d.cols() % heads == 0,
                    "TensorView: the matrix must have heads*dim columns, heads > 0");
    const Index dim = d.cols() / heads;
    const bool row_major = std::decay_t<Derived>::IsRowMajor;
    const Index row_stride = row_major ? d.outerStride() : d.innerStride();
    const Index col_stride = row_major ? d.innerStride() : d.outerStride();
    const Index col_abs = detail::checked_abs(col_stride);
    const Index head_stride = col_abs < 0 ? -1 : detail::checked_mul(dim, col_abs);
    detail::require(head_stride >= 0,
                    "TensorView: dim times the column stride of the matrix does not fit in "
                    "ptrdiff_t");
    data_ = d.data();
    ext_ = {d.rows(), heads, dim};
    str_ = {row_stride, col_stride < 0 ? -head_stride : head_stride, col_stride};
    validate();
  }

  T* data() const { return data_; }
  Index tokens() const { return ext_[0]; }
  Index heads() const { return ext_[1]; }
  Index dim() const { return ext_[2]; }
  const Strides& strides() const { return str_; }
  bool empty() const { return ext_[0] == 0 || ext_[1] == 0 || ext_[2] == 0; }
  /// The dim elements of one (token, head) are contiguous.
  bool unit_elem_stride() const { return str_.elem == 1; }

  T& operator()(Index t, Index h, Index i) const {
    return data_[t * str_.token + h * str_.head + i * str_.elem];
  }
  T* vector(Index t, Index h) const { return data_ + t * str_.token + h * str_.head; }

  operator TensorView<const T>() const {
    return TensorView<const T>(data_, ext_[0], ext_[1], ext_[2], str_);
  }

 private:
  static void check_extents(Index tokens, Index heads, Index dim) {
    if (tokens < 0 || heads < 0 || dim < 0) {
      std::ostringstream os;
      os << "TensorView: extents must be non-negative, got [" << tokens << ", " << heads << ", "
         << dim << "]";
      detail::fail(os.str());
    }
  }
  static Strides dense_strides(Index tokens, Index heads, Index dim) {
    check_extents(tokens, heads, dim);
    const Index hd = detail::checked_mul(heads, dim);
    if (hd < 0) {
      std::ostringstream os;
      os << "TensorView: heads * dim = " << heads << " * " << dim
         << " (the token stride of a dense view) does not fit in ptrdiff_t";
      detail::fail(os.str());
    }
    return Strides{hd, dim, 1};
  }
  std::string describe() const {
    std::ostringstream os;
    os << "strides {" << str_.token << ", " << str_.head << ", " << str_.elem << "} of a ["
       << ext_[0] << ", " << ext_[1] << ", " << ext_[2] << "] view";
    return os.str();
  }
  void validate() const {
    check_extents(ext_[0], ext_[1], ext_[2]);
    if (empty()) return;
    detail::require(data_ != nullptr, "TensorView: null data with non-zero extents");
    // Every offset t s_t + h s_h + i s_e, and every difference of two, lies within the span.
    const Index str[3] = {str_.token, str_.head, str_.elem};
    const Index span = detail::address_span(ext_.data(), str, 3);
    const Index bytes = span < 0 ? -1 : detail::checked_mul(span + 1, Index(sizeof(T)));
    if (bytes < 0)
      detail::fail("TensorView: the address span of the " + describe() +
                   " does not fit in ptrdiff_t");
    // Injectivity, for writable views only: a const view may broadcast.
    if (std::is_const<T>::value) return;
    if (detail::self_overlaps(ext_.data(), str))
      detail::fail("TensorView: the " + describe() +
                   " make distinct elements overlap (a writable view must address each "
                   "element once)");
  }

  T* data_ = nullptr;
  std::array<Index, 3> ext_{{0, 0, 0}};
  Strides str_{0, 0, 1};
};

template <class T>
TensorView<T> make_view(T* data, Index tokens, Index heads, Index dim) {
  return TensorView<T>(data, tokens, heads, dim);
}
template <class T>
TensorView<T> make_view(T* data, Index tokens, Index heads, Index dim, Strides strides) {
  return TensorView<T>(data, tokens, heads, dim, strides);
}

namespace detail {
/// v as a read-only view. The kernels take their input views through this, so that a
/// writable and a read-only view of one storage run one instantiation (docs/build-cost.md).
template <class T>
TensorView<const T> ro(const TensorView<T>& v) {
  return v;
}
}  // namespace detail

}  // namespace peal
