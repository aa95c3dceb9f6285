// merge_attention: softmax attention over a key cache cut into slices (context parallelism,
// ring attention, a cache spread over processes or machines). Each slice's partial result,
// out_p and lse_p from peal::attention on that slice's keys (AttentionOptions::lse), is
// merged into the result over the whole cache by the log-sum-exp rule that attention's own
// key splits use (include/peal/detail/tiled/attention_sink.hpp, finish()):
//
//     M = max_p lse_p,   w_p = e^(lse_p − M),   L = Σ_p w_p  (+ e^(σ_h − M) with a sink),
//     out = Σ_p w_p out_p / L,   lse = M + ln L,
//
// per row (query i, head h), in double, the partials in the order given (so the result does
// not depend on which process finished first). Positions are absolute, so a slice needs no
// re-encoding: each part runs attention on its keys with their own positions (a causal mask
// or a window too: each part masks by the true positions). A part whose row sees no key
// (lse −inf) adds nothing; a NaN in a part's lse or out row makes the merged row NaN, as in
// attention. Sink logits (gpt-oss) belong to the whole softmax, not to a slice: run the parts
// without them and give them here.
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "detail/overlap.hpp"
#include "detail/storage.hpp"
#include "errors.hpp"
#include "view.hpp"

namespace peal {

/// One partial result: attention's out [nq, Hq, dv] over a slice of the keys and its lse
/// (nq Hq doubles, lse[i * Hq + h]).
template <class T>
struct AttentionPartial {
  TensorView<const T> out;
  const double* lse = nullptr;
};

namespace detail {
namespace merge {

template <class T, class To>
void check(const std::vector<AttentionPartial<T>>& parts, const TensorView<To>& out,
           const double* lse, const std::vector<double>& sinks) {
  const std::string w = "merge_attention";
  const Index nq = out.tokens(), Hq = out.heads(), dv = out.dim();
  const Index rows = checked_mul(nq, Hq);
  if (rows < 0) fail(w + ": lse would hold more than PTRDIFF_MAX values");
  const ArrayRun<const double> lse_out{lse, rows};
  if (may_overlap(out, lse_out)) fail(w + ": lse overlaps out");
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const auto& o = parts[p].out;
    const std::string which = w + ": part " + std::to_string(p);
    if (o.tokens() != nq || o.heads() != Hq || o.dim() != dv)
      fail(which + "'s out is [" + std::to_string(o.tokens()) + ", " + std::to_string(o.heads()) +
           ", " + std::to_string(o.dim()) + "], out is [" + std::to_string(nq) + ", " +
           std::to_string(Hq) + ", " + std::to_string(dv) + "]");
    if (rows > 0 && parts[p].lse == nullptr) fail(which + " has no lse");
    // out may be a part's own out (merged in place, each element read before it is
    // written); lse likewise a part's lse. Any other sharing would read merged values.
    const ArrayRun<const double> lp{parts[p].lse, rows};
    if (!same_elements(o, out) && may_overlap(o, out))
      fail(which + "'s out overlaps out (pass the very same view to merge in place)");
    if (may_overlap(lp, out) || may_overlap(o, lse_out))
      fail(which + ": lse and out arrays overlap each other");
    if (lse != nullptr && parts[p].lse != lse && may_overlap(lp, lse_out))
      fail(which + "'s lse overlaps lse (pass the very same array to merge in place)");
  }
  if (!sinks.empty()) {
    if (Index(sinks.size()) != Hq)
      fail(w + ": " + std::to_string(sinks.size()) + " sink logits for " + std::to_string(Hq) +
           " heads (give one per query head, or none)");
    for (double s : sinks) require_finite(s, "merge_attention", "sink logits");
  }
}

}  // namespace merge
}  // namespace detail

/// out (and lse, if not nullptr) = the attention over the union of the parts' keys, from
/// their partial results (header comment). out [nq, Hq, dv] of float, double, Eigen::half or
/// Eigen::bfloat16; every part's out of the same extents; sinks: none, or one logit per head.
/// out may be one part's out and lse one part's lse (in place). Throws
/// peal::invalid_argument on other extents, a missing lse, or memory shared otherwise.
template <class T, class To>
void merge_attention(const std::vector<AttentionPartial<T>>& parts, TensorView<To> out,
                     double* lse = nullptr, const std::vector<double>& sinks = {}) {
  static_assert(detail::is_storage<std::remove_cv_t<T>>::value,
                "peal::merge_attention: the parts must store float, double, Eigen::half or "
                "Eigen::bfloat16");
  static_assert(detail::is_storage<To>::value && !std::is_const<To>::value,
                "peal::merge_attention: out must be a writable view of float, double, "
                "Eigen::half or Eigen::bfloat16");
  detail::merge::check(parts, out, lse, sinks);
  constexpr double inf = std::numeric_limits<double>::infinity();
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  const Index nq = out.tokens(), Hq = out.heads(), dv = out.dim();
  const std::size_t np = parts.size();
  std::vector<double> wt(np);
  for (Index i = 0; i < nq; ++i)
    for (Index h = 0; h < Hq; ++h) {
      const Index row = i * Hq + h;
      double m = -inf;
      bool bad = false;  // a NaN reached some part's row
      for (std::size_t p = 0; p < np; ++p) {
        const double l = parts[p].lse[row];
        bad |= std::isnan(l);
        if (l > m) m = l;
        for (Index e = 0; e < dv; ++e)
          bad |= std::isnan(detail::to_arith<double>(parts[p].out(i, h, e)));
      }
      const bool sink = !sinks.empty();
      const double sg = sink ? sinks[std::size_t(h)] : -inf;
      const double mx = std::max(m, sg);
      double total = 0;
      for (std::size_t p = 0; p < np; ++p) {
        const double l = parts[p].lse[row];
        wt[p] = !(l > -inf) ? 0.0 : l == mx ? 1.0 : std::exp(l - mx);
        total += wt[p];
      }
      if (sink) total += sg == mx ? 1.0 : std::exp(sg - mx);
      double row_lse = -inf, scale = 0;  // no part sees a key and no sink: zeros, lse −inf
      if (bad) {
        row_lse = scale = nan;
      } else if (total > 0) {
        row_lse = mx + std::log(total);
        scale = 1.0 / total;
      }
      // Element by element: each part's element is read before out's (maybe the same) is
      // written.
      for (Index e = 0; e < dv; ++e) {
        double acc = 0;
        for (std::size_t p = 0; p < np; ++p)
          if (wt[p] != 0) acc += wt[p] * detail::to_arith<double>(parts[p].out(i, h, e));
        out(i, h, e) = detail::from_arith<To>(bad ? nan : acc * scale);
      }
      if (lse) lse[row] = row_lse;
    }
}

/// Two partial results (one slice each), merged into out and lse (either may be the first
/// part's: in place).
template <class Ta, class Tb, class To>
void merge_attention(TensorView<Ta> out_a, const double* lse_a, TensorView<Tb> out_b,
                     const double* lse_b, TensorView<To> out, double* lse = nullptr,
                     const std::vector<double>& sinks = {}) {
  static_assert(std::is_same<std::remove_cv_t<Ta>, std::remove_cv_t<Tb>>::value,
                "peal::merge_attention: both parts must store the same type");
  using T = std::remove_cv_t<Ta>;
  const std::vector<AttentionPartial<T>> parts{{detail::ro(out_a), lse_a},
                                                {detail::ro(out_b), lse_b}};
  merge_attention(parts, out, lse, sinks);
}

}  // namespace peal
