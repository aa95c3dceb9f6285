// Address arithmetic of strided [tokens, heads, dim] views (view.hpp) without overflow, and
// the two overlap questions the library asks about them:
//
//  * self_overlaps(extents, strides): can two distinct index triples of one view address
//    the same element? A writable view must be injective. Exact: an alias is a nonzero
//    integer vector d with |d_i| <= n_i - 1 and sum_i s_i d_i = 0. Axes of extent 1 drop
//    out; a zero stride on a longer axis aliases; more index triples than addresses in the
//    span alias (counting); strides that each step over the whole reach of the smaller ones
//    (sorted by |s|) never alias (every common layout); two axes alias iff
//    b/g <= n_a - 1 and a/g <= n_b - 1 (g = gcd(a, b): the solutions of a x = b y are the
//    multiples of (b/g, a/g)); three axes by solving, for each value z of the third axis'
//    difference, the two-axis equation a x + b y = -c z with a modular inverse and an
//    interval (see three_axis_alias). That loop runs over at most
//    min_i (n_i - 1) <= cbrt(n_0 n_1 n_2) <= cbrt(span) values once the counting test has
//    passed, and only for layouts the stepping rule does not settle: at most ~2^20 steps,
//    measured 24 ms for adversarial strides on a [2^20, 2^20, 2^20] view (2^60 elements, no
//    memory behind it), 2^13 steps for one of 2^39 elements.
//
//  * may_overlap(a, b): can two views touch a common byte? Conservative: it compares the
//    byte ranges [lowest, highest] the views touch, so interleaved but disjoint views (two
//    column blocks of one buffer, for instance) count as overlapping. same_elements(a, b):
//    the views address the same elements of the same type in the same order (the in-place
//    case of an out-of-place kernel).
//
//  * The aliasing rules of the kernels, stated once and applied by every entry point and
//    every wrapper of it (per_head.hpp, scores_nd.hpp) to the caller's own views, before
//    anything is written: check_scores_aliasing (out apart from q and k),
//    check_attention_aliasing (out apart from q, k, v; lse apart from out, q, k, v),
//    check_encode_aliasing (destination apart from the source, or the very same view).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <type_traits>

#include "../errors.hpp"

namespace peal {

using Index = std::ptrdiff_t;

namespace detail {

inline constexpr Index kIndexMax = std::numeric_limits<Index>::max();

/// a * b for a, b >= 0; -1 when the product exceeds PTRDIFF_MAX.
inline Index checked_mul(Index a, Index b) { return a != 0 && b > kIndexMax / a ? -1 : a * b; }
/// a + b for a, b >= 0; -1 when the sum exceeds PTRDIFF_MAX.
inline Index checked_add(Index a, Index b) { return b > kIndexMax - a ? -1 : a + b; }
/// |a|, or -1 for PTRDIFF_MIN (whose absolute value is not representable).
inline Index checked_abs(Index a) {
  return a == std::numeric_limits<Index>::min() ? -1 : (a < 0 ? -a : a);
}

/// Elements from the lowest to the highest address of a non-empty view, sum_i |s_i| (n_i - 1),
/// or -1 when a product or the sum exceeds PTRDIFF_MAX. Axes of extent 1 do not count
/// (their index is always 0, whatever the stride).
inline Index address_span(const Index* extent, const Index* stride, int axes) {
  Index span = 0;
  for (int i = 0; i < axes; ++i) {
    if (extent[i] <= 1) continue;
    const Index s = checked_abs(stride[i]);
    if (s < 0) return -1;
    const Index p = checked_mul(s, extent[i] - 1);
    if (p < 0) return -1;
    span = checked_add(span, p);
    if (span < 0) return -1;
  }
  return span;
}

namespace overlap {

/// One axis of an alias problem: |stride| > 0 and the largest index difference m = n - 1 > 0.
struct Axis {
  Index s, m;
};

inline Index floor_div(Index a, Index b) {  // b > 0
  const Index q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}
inline Index ceil_div(Index a, Index b) {  // b > 0
  const Index q = a / b;
  return (a % b != 0 && a > 0) ? q + 1 : q;
}
inline Index mod(Index a, Index m) {  // m > 0, result in [0, m)
  const Index r = a % m;
  return r < 0 ? r + m : r;
}
/// a b mod m for 0 <= a, b < m, by doubling (no 128-bit products needed; sums < 2m < 2^64).
inline std::uint64_t mulmod(std::uint64_t a, std::uint64_t b, std::uint64_t m) {
  std::uint64_t r = 0;
  while (b != 0) {
    if (b & 1u) r = r >= m - a ? r - (m - a) : r + a;
    a = a >= m - a ? a - (m - a) : a + a;
    b >>= 1;
  }
  return r;
}
/// a^{-1} mod m for gcd(a, m) = 1, m >= 1 (extended Euclid; 0 when m = 1).
inline Index inverse_mod(Index a, Index m) {
  Index r0 = m, r1 = mod(a, m), t0 = 0, t1 = 1;
  while (r1 != 0) {
    const Index q = r0 / r1;
    const Index r2 = r0 - q * r1, t2 = t0 - q * t1;  // |t| <= m: no overflow
    r0 = r1, r1 = r2, t0 = t1, t1 = t2;
  }
  return m == 1 ? 0 : mod(t0, m);
}

/// Two axes alias iff some nonzero (x, y), |x| <= a.m, |y| <= b.m, has a.s x = b.s y; the
/// solutions are the multiples of (b.s / g, a.s / g), g = gcd.
inline bool two_axis_alias(Axis a, Axis b) {
  const Index g = std::gcd(a.s, b.s);
  return b.s / g <= a.m && a.s / g <= b.m;
}

/// Is there (x, y, z) with |x| <= a.m, |y| <= b.m, 1 <= z <= c.m and a.s x + b.s y + c.s z = 0?
/// With g = gcd(a.s, b.s), a.s = g a1, b.s = g b1: c.s z must be a multiple of g, i.e. z a
/// multiple of z0 = g / gcd(g, c.s); then w = c.s z / g and a1 x + b1 y = -w, so
/// x = -w a1^{-1} (mod b1) and y = (-w - a1 x) / b1 with |y| <= b.m, an interval for x.
/// For each z: the smallest x of the residue class above the interval's lower end.
/// All quantities are bounded by the address span (which fits in ptrdiff_t).
inline bool three_axis_alias(Axis a, Axis b, Axis c) {
  const Index reach = a.s * a.m + b.s * b.m;  // <= span
  const Index zmax = std::min(c.m, reach / c.s);
  const Index g = std::gcd(a.s, b.s), a1 = a.s / g, b1 = b.s / g;
  const Index h = std::gcd(g, c.s), z0 = g / h, w0 = c.s / h;
  if (zmax < z0) return false;
  const auto ub1 = std::uint64_t(b1);
  const std::uint64_t inv = std::uint64_t(inverse_mod(a1, b1));
  const std::uint64_t step = (ub1 - mulmod(std::uint64_t(w0 % b1), inv, ub1)) % ub1;  // -w0/a1
  const Index bm = b1 * b.m;  // |a1 x + w| <= b1 b.m
  std::uint64_t r = 0;        // x mod b1 for the current z
  Index w = 0;
  for (Index z = z0; z <= zmax; z += z0) {
    r = r >= ub1 - step ? r - (ub1 - step) : r + step;
    w += w0;
    const Index lo_sum = checked_add(w, bm);  // -w - bm <= a1 x
    const Index lo = lo_sum < 0 ? -a.m : std::max(-a.m, ceil_div(-lo_sum, a1));
    const Index hi = std::min(a.m, floor_div(bm - w, a1));
    if (lo > hi) continue;
    const Index x = lo + mod(Index(r) - mod(lo, b1), b1);
    if (x <= hi) return true;
  }
  return false;
}

}  // namespace overlap

/// Can two distinct index triples of a view with these extents and strides address the same
/// element? Exact (see the top of this file). The address span must fit in ptrdiff_t
/// (address_span >= 0).
inline bool self_overlaps(const Index extent[3], const Index stride[3]) {
  using overlap::Axis;
  Axis ax[3];
  int k = 0;
  for (int i = 0; i < 3; ++i)
    if (extent[i] == 0) return false;
  for (int i = 0; i < 3; ++i) {
    if (extent[i] == 1) continue;
    const Index s = checked_abs(stride[i]);
    if (s == 0) return true;
    ax[k++] = Axis{s, extent[i] - 1};
  }
  if (k <= 1) return false;
  // Counting: more index triples than addresses from the lowest to the highest.
  Index count = 1, span = 0;
  for (int i = 0; i < k; ++i) {
    count = count < 0 ? -1 : checked_mul(count, ax[i].m + 1);
    span += ax[i].s * ax[i].m;
  }
  if (count < 0 || count - 1 > span) return true;
  // Each stride beyond the reach of the smaller ones: distinct index triples differ first in
  // the axis of largest stride, whose step no combination of the others can cancel.
  std::sort(ax, ax + k, [](Axis x, Axis y) { return x.s < y.s; });
  bool stepping = true;
  Index reach = 0;
  for (int i = 0; i < k; ++i) {
    stepping &= ax[i].s > reach;
    reach += ax[i].s * ax[i].m;
  }
  if (stepping) return false;
  if (k == 2) return overlap::two_axis_alias(ax[0], ax[1]);
  // Three axes: d = 0 on one axis is the two-axis problem of the other two; otherwise (up to
  // the sign of d) that axis' difference runs over 1..zmax. Enumerate the axis with the
  // fewest candidate values.
  int e = 0;
  Index best = kIndexMax;
  for (int i = 0; i < 3; ++i) {
    const Index others = span - ax[i].s * ax[i].m;
    const Index cand = std::min(ax[i].m, others / ax[i].s);
    if (cand < best) best = cand, e = i;
  }
  const Axis& c = ax[e];
  const Axis& a = ax[(e + 1) % 3];
  const Axis& b = ax[(e + 2) % 3];
  return overlap::two_axis_alias(a, b) || overlap::three_axis_alias(a, b, c);
}

/// Byte range [begin, end) that a non-empty view touches (as integers: the views may belong
/// to unrelated objects, whose pointers the language does not order).
template <class V>
void byte_range(const V& v, std::uintptr_t& begin, std::uintptr_t& end) {
  const Index ext[3] = {v.tokens(), v.heads(), v.dim()};
  const Index str[3] = {v.strides().token, v.strides().head, v.strides().elem};
  Index lo = 0, hi = 0;  // element offsets of the lowest and the highest address
  for (int i = 0; i < 3; ++i) {
    if (ext[i] <= 1) continue;
    const Index o = str[i] * (ext[i] - 1);  // fits: the view checked its span
    (o < 0 ? lo : hi) += o;
  }
  constexpr Index size = Index(sizeof(typename V::element_type));
  const auto base = reinterpret_cast<std::uintptr_t>(v.data());
  begin = base + std::uintptr_t(lo * size);  // modular: lo <= 0 moves down
  end = base + std::uintptr_t((hi + 1) * size);
}

/// Might views a and b touch a common byte? Empty views touch nothing. Conservative (the
/// byte ranges [lowest, highest] are compared), exact for views that are contiguous.
template <class VA, class VB>
bool may_overlap(const VA& a, const VB& b) {
  if (a.empty() || b.empty()) return false;
  std::uintptr_t ab, ae, bb, be;
  byte_range(a, ab, ae);
  byte_range(b, bb, be);
  return ab < be && bb < ae;
}

/// Do non-empty views a and b address the same elements of the same type in the same order?
/// (Strides of axes of extent 1 do not matter.)
template <class VA, class VB>
bool same_elements(const VA& a, const VB& b) {
  using A = std::remove_cv_t<typename VA::element_type>;
  using B = std::remove_cv_t<typename VB::element_type>;
  if (!std::is_same<A, B>::value || a.empty() || b.empty()) return false;
  if (static_cast<const void*>(a.data()) != static_cast<const void*>(b.data())) return false;
  const Index ea[3] = {a.tokens(), a.heads(), a.dim()}, eb[3] = {b.tokens(), b.heads(), b.dim()};
  const Index sa[3] = {a.strides().token, a.strides().head, a.strides().elem};
  const Index sb[3] = {b.strides().token, b.strides().head, b.strides().elem};
  for (int i = 0; i < 3; ++i)
    if (ea[i] != eb[i] || (ea[i] > 1 && sa[i] != sb[i])) return false;
  return true;
}

/// n contiguous elements at p, seen as a [n, 1, 1] view by the overlap tests (an option's
/// output array, such as attention's lse).
template <class T>
struct ArrayRun {
  using element_type = T;
  struct Steps {
    Index token, head, elem;
  };
  T* p;
  Index n;
  T* data() const { return p; }
  Index tokens() const { return n; }
  Index heads() const { return 1; }
  Index dim() const { return 1; }
  Steps strides() const { return {1, 1, 1}; }
  bool empty() const { return p == nullptr || n == 0; }
};

/// scores() writes out while q and k are still being read, tile by tile: out must not share
/// memory with them (q and k may overlap each other). Throws peal::invalid_argument.
template <class Q, class K, class O>
void check_scores_aliasing(const Q& q, const K& k, const O& out, const std::string& where) {
  if (may_overlap(out, q))
    fail(where + ": out overlaps q (the output must not share memory with the queries)");
  if (may_overlap(out, k))
    fail(where + ": out overlaps k (the output must not share memory with the keys)");
}

/// attention(): out must not share memory with q, k or v, nor the log-sum-exp output lse
/// (nq Hq doubles, nullptr: none) with out, q, k or v. Throws peal::invalid_argument.
template <class Q, class K, class V, class O>
void check_attention_aliasing(const Q& q, const K& k, const V& v, const O& out, const double* lse,
                              const std::string& where) {
  if (may_overlap(out, q)) fail(where + ": out overlaps q (the output must not share memory)");
  if (may_overlap(out, k)) fail(where + ": out overlaps k (the output must not share memory)");
  if (may_overlap(out, v)) fail(where + ": out overlaps v (the output must not share memory)");
  if (lse == nullptr) return;
  const Index rows = checked_mul(q.tokens(), q.heads());
  if (rows < 0) fail(where + ": lse would hold more than PTRDIFF_MAX values");
  const ArrayRun<const double> l{lse, rows};
  if (may_overlap(out, l) || may_overlap(l, q) || may_overlap(l, k) || may_overlap(l, v))
    fail(where + ": lse overlaps out, q, k or v");
}

/// encode_queries / encode_keys / shift_keys read rows after earlier rows of dst were
/// written: dst must not share memory with src unless it is the very same view (in place).
template <class S, class D>
void check_encode_aliasing(const S& src, const D& dst, const std::string& where) {
  if (!same_elements(src, dst) && may_overlap(src, dst))
    fail(where +
         ": source and destination overlap (out of place they must not share memory; pass "
         "the same view as both to encode in place)");
}

}  // namespace detail
}  // namespace peal
