// The sink protocol of the tile driver (detail/tiled/tile_run.hpp), checked by TileRun with
// is_tile_sink, and what the sinks that take the driver's tiles in place share: attention's
// online softmax (detail/tiled/attention_sink.hpp) and linear attention's S V
// (detail/tiled/linear_sink.hpp) both work on the driver's tile buffer, never let the GEMM write
// elsewhere, and multiply each tile into V rows in the arithmetic type. scores' sink:
// detail/tiled/scores_sink.hpp.
//
// A Sink has
//   value_type                    what the epilogue writes (the tile's element type);
//   in_place, splits_keys, applies_masks   (constexpr bool) the sink works on the driver's tile
//                                 buffer; it merges partial results over key ranges; it masks
//                                 partial tiles itself (the epilogue does not);
//   Work                          its per-thread memory, carved by work.carve(arena, run);
//   window()                      pairs with t_i − s_j ≥ window are masked (∞: none);
//   direct_row_major<C>(nk), direct_col_major<C>(), direct<C>(h, i0, j0, rm, ldr)
//                                 a tile the GEMM writes straight into the sink's memory;
//   row(work, tile, h, i0, i, j0, n, st)   where the epilogue writes a row;
//   masked(run, work, h, I, J)    a tile with every pair masked;
//   key_block(run, work, J)       once per key tile before its heads, when a unit holds every
//                                 key head (run.head_slots() > 1);
//   key_tile(run, work, kh, J), tile_done(run, work, tile, h, I, J) (one head's finished
//   tile), group_done(run, work, tile, kh, I, J) (every head of the group),
//   unit_begin/unit_end(run, work, kh, I0, I1, split), finish(run).
// Optionally, takes_strips (constexpr bool, true) and strips(work, const TileStrip*, count):
// the sink computes a tile pair in strips (detail/tiled/tile_plan.hpp, plan_strips). Before
// the tiles of every computed pair the driver hands it the pair's strips (one strip {0, m,
// 0, n} for a pair computed whole); only the pairs inside them hold scores, and tile_done and
// group_done must read nothing else. A pair cut by a mask is then computed along its staircase.
// The members that take the run are templates over it; is_tile_sink checks the others.
#pragma once

#include <Eigen/Core>
#include <type_traits>

#include "../../view.hpp"
#include "../half_rows.hpp"
#include "../storage.hpp"
#include "arena.hpp"

namespace peal {
namespace detail {
namespace tiled {

/// The members of the sink protocol that do not depend on the run (above), as a trait.
template <class S, class = void>
struct is_tile_sink : std::false_type {};
template <class S>
struct is_tile_sink<
    S, std::void_t<typename S::value_type, typename S::Work, decltype(S::in_place),
                   decltype(S::splits_keys), decltype(S::applies_masks),
                   decltype(double(std::declval<const S&>().window()))>>
    : std::bool_constant<std::is_same<std::remove_cv_t<decltype(S::in_place)>, bool>::value &&
                         std::is_same<std::remove_cv_t<decltype(S::splits_keys)>, bool>::value &&
                         std::is_same<std::remove_cv_t<decltype(S::applies_masks)>, bool>::value> {};

/// Whether a sink takes tile pairs in strips (its takes_strips; false when it has none).
template <class S, class = void>
struct takes_strips : std::false_type {};
template <class S>
struct takes_strips<S, std::void_t<decltype(S::takes_strips)>>
    : std::bool_constant<bool(S::takes_strips)> {};

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
      load_row(src, dst, dv);  // half-like rows: detail/half_rows.hpp
    else
      for (Index e = 0; e < dv; ++e) dst[e] = to_arith<C>(src[e * es]);
  }
}

}  // namespace tiled
}  // namespace detail
}  // namespace peal
