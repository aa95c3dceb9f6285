// PassThrough<S>{n}: n coordinates that no position touches, X = 0 and A(tau) = I: the
// non-rotary tail of a partial-rotary head (RopeEncoding), the unrotated coordinates of an MLA
// head (rope_head), and the identity encoding the kernels run on keys already encoded.
#pragma once

#include "encoding.hpp"

namespace peal {

/// n coordinates that no position touches: X = 0, A(tau) = I.
template <class S = double>
class PassThrough : public Encoding<PassThrough<S>, S> {
 public:
  using Real = real_t<S>;
  using MatrixType = Matrix<S>;
  explicit PassThrough(int n) : n_(n) { detail::require(n >= 0, "PassThrough: size must be >= 0"); }
  int dim() const { return n_; }
  MatrixType generator() const { return MatrixType::Zero(n_, n_); }
  MatrixType A(Real tau) const {
    detail::require_finite(tau, "A", "tau");
    return MatrixType::Identity(n_, n_);
  }
  template <class V>
  void apply(V&&, Real, bool) const {}

 private:
  int n_;
};

}  // namespace peal
