// Positions in several dimensions for the batch kernels: token i sits at the point
// p_i ∈ ℝᴰ (t, h, w of a video patch; x, y of an image patch). Held as doubles in caller
// memory, element (i, a) at data[i * token_stride + a * axis_stride]: token-major
// [tokens, D] (the default), axis-major [D, tokens] (transformers' position_ids [3, seq]),
// or one point for every token (token_stride 0: shift_keys by a vector δ).
// The 1-D Positions of positions.hpp stay what D = 1 kernels take.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "errors.hpp"
#include "view.hpp"

namespace peal {

/// Largest number of axes an N-D position may have (images 2, video 3; the bound keeps the
/// per-token work of a kernel O(1)).
inline constexpr int max_position_axes = 16;

namespace detail {
/// One token's point, read in place: p[a] for a < axes().
struct PointRef {
  const double* data;
  Index stride;
  int n;
  double operator[](int a) const { return data[Index(a) * stride]; }
  int size() const { return n; }
};
}  // namespace detail

class PositionsND {
 public:
  /// Token i, axis a at p[i * token_stride + a * axis_stride]; token_stride < 0 means
  /// `axes` (token-major [tokens, axes], contiguous).
  PositionsND(const double* p, Index tokens, int axes, Index token_stride = -1,
              Index axis_stride = 1)
      : data_(p), n_(tokens), d_(axes), ts_(token_stride < 0 ? axes : token_stride),
        as_(axis_stride) {
    if (axes < 1 || axes > max_position_axes)
      detail::fail("PositionsND: the number of axes must be in [1, " +
                   std::to_string(max_position_axes) + "], got " + std::to_string(axes));
    detail::require(tokens >= 0, "PositionsND: tokens must be >= 0");
    detail::require(p != nullptr || tokens == 0, "PositionsND: null data with tokens > 0");
    detail::require(axis_stride >= 0, "PositionsND: axis_stride must be >= 0");
  }
  /// Token-major [tokens, axes] in a vector (size a multiple of axes).
  PositionsND(const std::vector<double>& p, int axes)
      : PositionsND(p.data(), axes > 0 ? Index(p.size()) / axes : 0, axes) {
    if (Index(p.size()) != n_ * Index(d_))
      detail::fail("PositionsND: " + std::to_string(p.size()) + " values are not a multiple of " +
                   std::to_string(axes) + " axes");
  }
  /// Axis-major [axes, tokens] (row a holds axis a of every token).
  static PositionsND axis_major(const double* p, Index tokens, int axes) {
    return PositionsND(p, tokens, axes, 1, tokens);
  }
  /// The same point p[0 .. axes) for any number of tokens (checked for finiteness only).
  static PositionsND constant(const double* p, int axes) {
    PositionsND r(p, 1, axes, 0, 1);
    r.constant_ = true;
    return r;
  }

  int axes() const { return d_; }
  /// Number of tokens (of a constant: any; 1 is reported).
  Index tokens() const { return n_; }
  bool is_constant() const { return constant_; }
  double operator()(Index i, int a) const { return data_[i * ts_ + Index(a) * as_]; }
  detail::PointRef operator[](Index i) const { return {data_ + i * ts_, as_, d_}; }

  /// Throws unless the positions cover `tokens` tokens of `axes` axes and are all finite.
  void check(Index tokens, int axes, const char* where) const {
    if (d_ != axes)
      detail::fail(std::string(where) + ": positions have " + std::to_string(d_) +
                   " axes, the encoding has " + std::to_string(axes));
    if (!constant_ && n_ != tokens)
      detail::fail(std::string(where) + ": " + std::to_string(n_) + " positions for " +
                   std::to_string(tokens) + " tokens");
    const Index n = constant_ ? 1 : n_;
    for (Index i = 0; i < n; ++i)
      for (int a = 0; a < d_; ++a)
        if (!std::isfinite((*this)(i, a)))
          detail::fail(std::string(where) + ": position (token " + std::to_string(i) + ", axis " +
                       std::to_string(a) + ") must be finite, got " +
                       std::to_string((*this)(i, a)));
  }

 private:
  const double* data_;
  Index n_;
  int d_;
  Index ts_, as_;
  bool constant_ = false;
};

}  // namespace peal
