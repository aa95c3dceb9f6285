// What the sinks of the tile driver (detail/tile_run.hpp) that take its tiles in place
// share: attention's online softmax (detail/attention_sink.hpp) and linear attention's S V
// (detail/linear_sink.hpp) both work on the driver's tile buffer, never let the GEMM write
// elsewhere, and multiply each tile into V rows in the arithmetic type.
#pragma once

#include <Eigen/Core>
#include <type_traits>

#include "../view.hpp"
#include "storage.hpp"

namespace peal {
namespace detail {
namespace scores_kernels {

/// The members of the sink protocol that an in-place sink answers the same way; a sink
/// derives from it and adds the rest (Work, window, unit_begin, key_tile, tile_done, ...).
template <class C>
struct InPlaceSink {
  using value_type = C;
  static constexpr bool in_place = true;
  template <class>
  bool direct_row_major(Index) const { return false; }
  template <class>
  bool direct_col_major() const { return false; }
  template <class T>
  T* direct(Index, Index, Index, bool, Index&) const { return nullptr; }
  // The epilogue works on the tile buffer itself.
  template <class Work>
  C* row(Work&, C* tile, Index, Index, Index i, Index, Index n, Index& st) const {
    st = 1;
    return tile + i * n;
  }
};

/// Rows [j0, j0 + n) of head h of v (dv values each) as C rows: in place when v stores C
/// contiguously (rows = the view's, ld its token stride), else converted into `buf`.
template <class C, class TV>
void value_rows(const TensorView<TV>& v, Index j0, Index n, Index h, C* buf, const C*& rows,
                Index& ld) {
  using T = std::remove_cv_t<TV>;
  const Index dv = v.dim(), es = v.strides().elem;
  if constexpr (std::is_same<T, C>::value) {
    if (es == 1 && n > 0 && (n == 1 || v.strides().token >= dv)) {
      rows = v.vector(j0, h);
      ld = n > 1 ? v.strides().token : dv;
      return;
    }
  }
  rows = buf;
  ld = dv;
  for (Index j = 0; j < n; ++j) {
    const T* src = v.vector(j0 + j, h);
    C* dst = buf + j * dv;
    if (es == 1)
      Eigen::Map<Eigen::Matrix<C, Eigen::Dynamic, 1>>(dst, dv) =
          Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>(src, dv).template cast<C>();
    else
      for (Index e = 0; e < dv; ++e) dst[e] = to_arith<C>(src[e * es]);
  }
}

}  // namespace scores_kernels
}  // namespace detail
}  // namespace peal
