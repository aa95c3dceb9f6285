// The sink of scores() (scores.hpp) for the tile driver (detail/tiled/tile_run.hpp; the protocol:
// detail/tiled/tile_sink.hpp): every finished tile goes to out [Hq, nq, nk].
#pragma once

#include <limits>
#include <type_traits>

#include "../../view.hpp"
#include "arena.hpp"

namespace peal {
namespace detail {
namespace tiled {

/// The sink of scores(): every tile goes to out [Hq, nq, nk]; when out
/// is a matrix of the arithmetic type C in either orientation, the GEMM writes into it
/// directly (starting from the ALiBi bias), otherwise through the tile buffer and the
/// epilogue's conversion; fully masked tiles are filled with −∞.
template <class Out>
struct ScoresOut {
  using value_type = Out;
  static constexpr bool in_place = false;
  static constexpr bool splits_keys = false;
  static constexpr bool applies_masks = false;
  struct Work {
    template <class Run>
    void carve(Arena&, const Run&) {}
  };
  TensorView<Out> out;

  double window() const { return std::numeric_limits<double>::infinity(); }
  template <class C>
  bool direct_row_major(Index nk) const {
    const auto& os = out.strides();
    return std::is_same<Out, C>::value && (os.elem == 1 || nk == 1) && os.head > 0;
  }
  template <class C>
  bool direct_col_major() const {
    const auto& os = out.strides();
    return std::is_same<Out, C>::value && os.head == 1 && os.elem > 0;
  }
  template <class C>
  C* direct(Index h, Index i0, Index j0, bool row_major, Index& ldr) const {
    ldr = row_major ? out.strides().head : out.strides().elem;
    return reinterpret_cast<C*>(&out(h, i0, j0));
  }
  template <class C>
  Out* row(Work&, C*, Index h, Index i0, Index i, Index j0, Index, Index& st) const {
    st = out.strides().elem;
    return &out(h, i0 + i, j0);
  }
  template <class Run>
  void masked(const Run& r, Work&, Index h, Index I, Index J) const {
    const auto& qp = r.query_plan();
    const auto& kp = r.key_plan();
    const Index i0 = qp.begin[std::size_t(I)], m = qp.rows(I);
    const Index j0 = kp.begin[std::size_t(J)], n = kp.rows(J);
    const Out v = -std::numeric_limits<Out>::infinity();
    for (Index i = 0; i < m; ++i)
      for (Index j = 0; j < n; ++j) out(h, i0 + i, j0 + j) = v;
  }
  template <class Run>
  void key_tile(const Run&, Work&, Index, Index) const {}
  template <class Run>
  void key_block(const Run&, Work&, Index) const {}
  template <class Run, class C>
  void tile_done(const Run&, Work&, C*, Index, Index, Index) const {}
  template <class Run, class C>
  void group_done(const Run&, Work&, C*, Index, Index, Index) const {}
  template <class Run>
  void unit_begin(const Run&, Work&, Index, Index, Index, Index) const {}
  template <class Run>
  void unit_end(const Run&, Work&, Index, Index, Index, Index) const {}
  template <class Run>
  void finish(const Run&) const {}
};

}  // namespace tiled
}  // namespace detail
}  // namespace peal
