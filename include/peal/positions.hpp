// Positions of the tokens of a batch: either any real timestamps (a span of doubles,
// irregular gaps welcome) or the arithmetic sequence start + i*step, for which kernels
// may use faster recurrences. Positions are doubles whatever the storage type of q and
// k (docs/design.md §1).
#pragma once

#include <cmath>
#include <vector>

#include "errors.hpp"
#include "view.hpp"

namespace peal {

class Positions {
 public:
  /// Timestamps p[0..n).
  Positions(const double* p, Index n) : data_(p), n_(n) {
    detail::require(n >= 0 && (p != nullptr || n == 0), "Positions: invalid span");
  }
  Positions(const std::vector<double>& p) : Positions(p.data(), Index(p.size())) {}  // NOLINT
  /// start, start + step, start + 2 step, ... (as many as the view has tokens).
  static Positions sequence(double start, double step = 1.0) {
    detail::require_finite(start, "Positions::sequence", "start");
    detail::require_finite(step, "Positions::sequence", "step");
    Positions p;
    p.start_ = start;
    p.step_ = step;
    return p;
  }

  bool is_sequence() const { return data_ == nullptr && n_ < 0; }
  double start() const { return start_; }
  double step() const { return step_; }
  /// Position of token i: exact for spans, start + i*step (one rounding) for sequences.
  double operator[](Index i) const { return is_sequence() ? start_ + double(i) * step_ : data_[i]; }

  /// Throws unless the positions cover `tokens` tokens and are all finite.
  void check(Index tokens, const char* where) const {
    if (is_sequence()) {
      detail::require_finite(start_ + double(tokens > 0 ? tokens - 1 : 0) * step_, where,
                             "last position of the sequence");
      return;
    }
    if (n_ != tokens) {
      detail::fail(std::string(where) + ": " + std::to_string(n_) + " positions for " +
                   std::to_string(tokens) + " tokens");
    }
    for (Index i = 0; i < n_; ++i) detail::require_finite(data_[i], where, "position");
  }

 private:
  Positions() = default;
  const double* data_ = nullptr;
  Index n_ = -1;
  double start_ = 0, step_ = 0;
};

}  // namespace peal
