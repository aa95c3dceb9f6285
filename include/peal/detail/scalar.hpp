// Scalar plumbing shared by every encoding: the parameter/position type of a scalar, the
// dense matrix types, and adapters that let encode_* take any Eigen vector or contiguous
// container.
#pragma once

#include <Eigen/Core>
#include <array>
#include <type_traits>
#include <vector>

namespace peal {
namespace detail {

// Parameters and positions are held in at least double precision whatever the matrix
// scalar (docs/design.md §1): a float RoPE at position 2^40 needs a 64-bit angle.
template <class S>
struct scalar_traits {
  static_assert(std::is_same<S, float>::value || std::is_same<S, double>::value,
                "peal: the algebra is defined for float, double and long double");
  using real = double;
};
template <>
struct scalar_traits<long double> {
  using real = long double;
};

template <class T>
struct is_eigen_dense : std::is_base_of<Eigen::DenseBase<std::decay_t<T>>, std::decay_t<T>> {};

template <class T>
struct is_std_vector : std::false_type {};
template <class T, class A>
struct is_std_vector<std::vector<T, A>> : std::true_type {};
template <class T>
struct is_std_array : std::false_type {};
template <class T, std::size_t N>
struct is_std_array<std::array<T, N>> : std::true_type {};

// A writable Eigen view of v: Eigen objects pass through, contiguous std containers are
// mapped. Sizes are checked by the caller.
template <class V>
decltype(auto) as_eigen(V& v) {
  using D = std::remove_const_t<V>;
  if constexpr (is_eigen_dense<D>::value) {
    return v.derived();
  } else if constexpr (is_std_vector<D>::value || is_std_array<D>::value) {
    using T = typename D::value_type;
    using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
    using M = std::conditional_t<std::is_const<V>::value, Eigen::Map<const Vec>, Eigen::Map<Vec>>;
    return M(v.data(), static_cast<Eigen::Index>(v.size()));
  } else {
    static_assert(is_eigen_dense<D>::value, "peal: pass an Eigen vector, std::vector or std::array");
  }
}

}  // namespace detail

/// Position/parameter type for an encoding of scalar S (double, or long double).
template <class S>
using real_t = typename detail::scalar_traits<S>::real;

template <class S>
using Matrix = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;
template <class S>
using Vector = Eigen::Matrix<S, Eigen::Dynamic, 1>;

}  // namespace peal
