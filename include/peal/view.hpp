// TensorView<T>: a non-owning view of caller memory laid out as inference engines hold Q
// and K, [tokens, heads, dim], with arbitrary element strides (in the spirit of
// std::mdspan with a layout_stride mapping). T may be const, and is float, double,
// Eigen::half or Eigen::bfloat16 for the kernels.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cstddef>
#include <sstream>
#include <type_traits>

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
      : TensorView(data, tokens, heads, dim, Strides{heads * dim, dim, 1}) {}
  /// Arbitrary element strides. Throws on negative extents or strides under which two
  /// distinct indices of a writable view would address the same element.
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
    data_ = d.data();
    ext_ = {d.rows(), heads, dim};
    str_ = {row_stride, dim * col_stride, col_stride};
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
  void validate() const {
    detail::require(ext_[0] >= 0 && ext_[1] >= 0 && ext_[2] >= 0,
                    "TensorView: extents must be non-negative");
    if (empty()) return;
    detail::require(data_ != nullptr, "TensorView: null data with non-zero extents");
    // Injectivity: sort the axes of extent > 1 by |stride|; each stride must step over
    // the whole span of the faster axes. Required for writable views only: a const view
    // may broadcast (stride 0), e.g. one key head read by several query heads.
    if (std::is_const<T>::value) return;
    std::array<std::pair<Index, Index>, 3> ax{{{str_.token, ext_[0]}, {str_.head, ext_[1]},
                                               {str_.elem, ext_[2]}}};
    std::sort(ax.begin(), ax.end(), [](auto a, auto b) {
      return std::abs(a.first) < std::abs(b.first);
    });
    Index span = 1;  // elements covered by the faster axes
    for (const auto& [stride, extent] : ax) {
      if (extent == 1) continue;
      if (std::abs(stride) < span) {
        std::ostringstream os;
        os << "TensorView: strides {" << str_.token << ", " << str_.head << ", " << str_.elem
           << "} make distinct elements of a [" << ext_[0] << ", " << ext_[1] << ", " << ext_[2]
           << "] view overlap";
        detail::fail(os.str());
      }
      span = std::abs(stride) * extent;
    }
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

}  // namespace peal
