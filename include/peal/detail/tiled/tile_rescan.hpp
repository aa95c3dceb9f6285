// The overflow rescan of the tile driver (detail/tiled/tile_run.hpp). A rebased tile carries its
// constant factors (the cross coefficients A(T_I − S_J), alpha with the decay γ^(T_I − S_J))
// through the GEMM; when they are large its scores may leave the range of the arithmetic type
// although the true scores do not. Such tiles are rescanned, their non-finite scores (or all
// of them) recomputed per pair from the encoding's own score(), which is exact past the range
// (±inf, 0 for an exact zero, or the representable value; encoding.hpp). Not the hot path:
// only tiles with factors beyond ~2^704 (double arithmetic) or ~2^32 (float) are scanned.
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include "../../view.hpp"
#include "../scalar.hpp"
#include "../storage.hpp"
#include "tile_epilogue.hpp"
#include "tile_plan.hpp"

namespace peal {
namespace detail {
namespace tiled {

/// What a tile's constant factors ask for.
enum class Rescan {
  none,       // its scores are within the range
  nonfinite,  // its non-finite scores are recomputed
  all         // a coefficient near DBL_MAX, where the coders clamp e^{aδ} to stay finite:
              // every score of the tile is recomputed
};

/// The size of constant factors beyond which a tile in C may hold scores past the range: the
/// rebased rows carry e^θ each (θ = rebase_limits<C>::exp_budget), and 2^64 is left for the
/// data.
template <class C>
double rescan_limit() {
  return std::ldexp(double(std::numeric_limits<C>::max()),
                    -int(2 * rebase_limits<C>::exp_budget / std::log(2.0)) - 64);
}

/// The rescan a tile needs, from its cross coefficients (coef, n of them; nullptr: none) and
/// the GEMM's alpha.
template <class C>
Rescan rescan_needed(const C* coef, int n, double alpha, double limit) {
  constexpr double clamp_zone = std::is_same<C, double>::value
                                    ? std::numeric_limits<double>::max() / 0x1p64
                                    : std::numeric_limits<double>::infinity();
  double cmax = 1;
  if (coef) {
    cmax = 0;
    for (int c = 0; c < n; ++c) {
      const double v = std::abs(double(coef[c]));
      if (!(v < clamp_zone)) return Rescan::all;
      cmax = std::max(cmax, v);
    }
  }
  return std::abs(alpha) * cmax <= limit ? Rescan::none : Rescan::nonfinite;
}

/// The scores of head h's tile (I, J) that are not finite (every one when `all`), again per
/// pair: q_i^T A(t_i − s_j) k_j by enc.score, then the options (finish_score). out_row(i, st)
/// gives row i of the tile, elements st apart; masked pairs stay as they are.
template <class E, class Tq, class Tk, class RowFn>
void rescan_tile(const E& enc, const TensorView<Tq>& q, const TensorView<Tk>& k, const Epilogue& epi,
                 const TilePlan& qp, const TilePlan& kp, Index h, Index G, Index I, Index J,
                 bool all, RowFn&& out_row) {
  using S = typename E::Scalar;
  const Index d = q.dim();
  const Index i0 = qp.begin[std::size_t(I)], m = qp.rows(I);
  const Index j0 = kp.begin[std::size_t(J)], n = kp.rows(J);
  const ScoreOptions& opt = epi.options();
  Vector<S> qv(d), kv(d);
  for (Index i = 0; i < m; ++i) {
    const double t = epi.t()[i0 + i];
    bool loaded = false;
    Index st = 1;
    auto* row = out_row(i, st);
    for (Index j = 0; j < n; ++j) {
      const double s = epi.s()[j0 + j];
      auto& o = row[j * st];
      using Out = std::remove_reference_t<decltype(o)>;
      if ((opt.causal && s > t) || (!all && std::isfinite(double(o)))) continue;
      if (!loaded)
        for (Index e = 0; e < d; ++e) qv(e) = S(to_arith<double>(q(i0 + i, h, e)));
      loaded = true;
      for (Index e = 0; e < d; ++e) kv(e) = S(to_arith<double>(k(j0 + j, h / G, e)));
      o = Out(finish_score(double(enc.score(qv, t, kv, s)), h, t - s, opt));
    }
  }
}

}  // namespace tiled
}  // namespace detail
}  // namespace peal
