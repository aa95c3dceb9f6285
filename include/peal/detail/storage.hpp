// Storage types of the batch kernels (encode.hpp, scores.hpp): what a view may hold, the
// arithmetic type a pair of storages computes in, and the conversions between them.
// Eigen::half and Eigen::bfloat16 convert through float (their own conversions).
#pragma once

#include <Eigen/Core>
#include <type_traits>

namespace peal {
namespace detail {

/// float, double, Eigen::half or Eigen::bfloat16.
template <class T>
struct is_storage : std::integral_constant<bool, std::is_same<T, float>::value ||
                                                     std::is_same<T, double>::value ||
                                                     std::is_same<T, Eigen::half>::value ||
                                                     std::is_same<T, Eigen::bfloat16>::value> {};

/// Arithmetic type of two storages: double if either stores double, float otherwise (half
/// and bfloat16 are only storage: their arithmetic is float).
template <class T1, class T2>
using arith_t = std::conditional_t<std::is_same<std::remove_cv_t<T1>, double>::value ||
                                       std::is_same<std::remove_cv_t<T2>, double>::value,
                                   double, float>;

template <class T>
inline constexpr bool is_half_like =
    std::is_same<T, Eigen::half>::value || std::is_same<T, Eigen::bfloat16>::value;

/// A stored value in the arithmetic type A.
template <class A, class T>
inline A to_arith(T x) {
  if constexpr (is_half_like<T>)
    return A(static_cast<float>(x));
  else
    return A(x);
}
/// An arithmetic value rounded to the storage type T.
template <class T, class A>
inline T from_arith(A x) {
  if constexpr (is_half_like<T>)
    return T(static_cast<float>(x));
  else
    return T(x);
}

}  // namespace detail
}  // namespace peal
