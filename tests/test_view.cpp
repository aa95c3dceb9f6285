// Tests of include/peal/view.hpp (TensorView) and include/peal/detail/overlap.hpp: the checks
// a view makes when it is built (extents, null data, address span within ptrdiff_t with
// every product checked, and the exact self-overlap test of a writable view, compared with
// brute force and with an independent solver on large extents), its addressing, and the
// byte-range overlap test the kernels use between their output and their inputs; and the
// bulk row conversions of half-like storage (include/peal/detail/half_rows.hpp) against
// Eigen's scalar conversions, for every 16-bit pattern.
#include <Eigen/Core>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <peal/detail/half_rows.hpp>
#include <peal/detail/overlap.hpp>
#include <peal/view.hpp>
#include <random>
#include <set>
#include <vector>

namespace {

using Catch::Matchers::Contains;
using peal::Index;
using peal::Strides;
using peal::TensorView;

constexpr Index kMax = std::numeric_limits<Index>::max();

/// Brute force: do two distinct index triples of [n0, n1, n2] with strides s address the
/// same element?
bool aliases_brute(const Index n[3], const Index s[3]) {
  std::set<Index> seen;
  for (Index i = 0; i < n[0]; ++i)
    for (Index j = 0; j < n[1]; ++j)
      for (Index k = 0; k < n[2]; ++k)
        if (!seen.insert(i * s[0] + j * s[1] + k * s[2]).second) return true;
  return false;
}

bool writable_accepted(float* p, const Index n[3], const Index s[3]) {
  try {
    TensorView<float> v(p, n[0], n[1], n[2], Strides{s[0], s[1], s[2]});
    return true;
  } catch (const peal::invalid_argument&) {
    return false;
  }
}

}  // namespace

TEST_CASE("TensorView: dense extents whose product overflows are rejected", "[view]") {
  float x = 0;
  // heads * dim = 2^64: the dense token stride does not fit in ptrdiff_t.
  REQUIRE_THROWS_WITH(TensorView<float>(&x, 2, Index(1) << 32, Index(1) << 32),
                      Contains("does not fit"));
  REQUIRE_THROWS_WITH(TensorView<const float>(&x, 2, Index(1) << 32, Index(1) << 32),
                      Contains("does not fit"));
  // heads * dim fits but the span tokens * heads * dim does not.
  REQUIRE_THROWS_WITH(TensorView<float>(&x, Index(1) << 32, Index(1) << 16, Index(1) << 16),
                      Contains("does not fit"));
  // The largest dense view whose byte span fits is accepted; one more token is not.
  const Index fit = kMax / Index(sizeof(float));
  REQUIRE_NOTHROW(TensorView<float>(&x, fit, 1, 1));
  REQUIRE_THROWS_WITH(TensorView<float>(&x, fit + 1, 1, 1), Contains("does not fit"));
  REQUIRE_NOTHROW(TensorView<double>(reinterpret_cast<double*>(&x), 1, 1, kMax / 8));
  REQUIRE_THROWS_WITH(TensorView<double>(reinterpret_cast<double*>(&x), 1, 1, kMax / 8 + 1),
                      Contains("does not fit"));
}

TEST_CASE("TensorView: strides whose address span leaves ptrdiff_t are rejected", "[view]") {
  float x = 0;
  const Index big = Index(1) << 62;
  // |stride| * (extent - 1) = 7 * 2^62 overflows: the addresses t * 2^62 wrap and alias.
  REQUIRE_THROWS_WITH(TensorView<float>(&x, 8, 1, 1, Strides{big, 1, 1}), Contains("does not fit"));
  REQUIRE_THROWS_WITH(TensorView<const float>(&x, 8, 1, 1, Strides{big, 1, 1}),
                      Contains("does not fit"));
  REQUIRE_THROWS_WITH(TensorView<float>(&x, 8, 1, 1, Strides{-big, 1, 1}),
                      Contains("does not fit"));
  // Each product fits, their sum does not.
  const Index third = kMax / 3;
  REQUIRE_THROWS_WITH(TensorView<const char>(reinterpret_cast<const char*>(&x), 2, 2, 2,
                                             Strides{third, third, third * 2}),
                      Contains("does not fit"));
  // The span counts bytes: 2^61 floats cover 2^63 bytes, one more than ptrdiff_t holds.
  REQUIRE_THROWS_WITH(TensorView<float>(&x, 2, 1, 1, Strides{Index(1) << 61, 1, 1}),
                      Contains("does not fit"));
  REQUIRE_THROWS_WITH(TensorView<float>(&x, 2, 1, 1, Strides{(Index(1) << 61) - 1, 1, 1}),
                      Contains("does not fit"));
  REQUIRE_NOTHROW(TensorView<float>(&x, 2, 1, 1, Strides{(Index(1) << 61) - 2, 1, 1}));
  // The most negative stride has no absolute value: rejected on an axis of extent > 1, ignored
  // on an axis of extent 1 (never multiplied by a nonzero index).
  const Index minus = std::numeric_limits<Index>::min();
  REQUIRE_THROWS_WITH(TensorView<float>(&x, 2, 1, 1, Strides{minus, 1, 1}),
                      Contains("does not fit"));
  REQUIRE_NOTHROW(TensorView<float>(&x, 1, 1, 1, Strides{minus, minus, minus}));
}

TEST_CASE("TensorView: the self-overlap test of a writable view is exact", "[view]") {
  std::vector<float> buf(4096);
  float* p = buf.data() + 2048;
  SECTION("hand-picked cases") {
    // [2, 1, 3] with strides {3, 100, 2}: offsets {0, 2, 4, 3, 5, 7}, all distinct (the
    // axis of extent 1 is ignored, and 3 < 2 * 3 does not make the axes overlap).
    REQUIRE_NOTHROW(TensorView<float>(p, 2, 1, 3, Strides{3, 100, 2}));
    // [3, 1, 3]: offsets {0, 3, 6} + {0, 2, 4}, still distinct; [3, 1, 4] reaches
    // 2 * 3 = 3 * 2.
    REQUIRE_NOTHROW(TensorView<float>(p, 3, 1, 3, Strides{3, 100, 2}));
    REQUIRE_THROWS_WITH(TensorView<float>(p, 3, 1, 4, Strides{3, 100, 2}), Contains("overlap"));
    // Negative strides: reversed tokens are fine; {-1, 1} on [2, 2] aliases (-1 + 1 = 0).
    REQUIRE_NOTHROW(TensorView<float>(p, 4, 2, 3, Strides{-6, 3, 1}));
    REQUIRE_NOTHROW(TensorView<float>(p, 4, 2, 3, Strides{6, -3, -1}));
    REQUIRE_THROWS_WITH(TensorView<float>(p, 2, 2, 1, Strides{-1, 1, 1}), Contains("overlap"));
    // Stride 0: an alias for a writable view on an axis of extent > 1, a broadcast for a
    // const view, irrelevant on an axis of extent 1.
    REQUIRE_THROWS_WITH(TensorView<float>(p, 2, 4, 8, Strides{0, 8, 1}), Contains("overlap"));
    REQUIRE_NOTHROW(TensorView<const float>(p, 2, 4, 8, Strides{0, 8, 1}));
    REQUIRE_NOTHROW(TensorView<const float>(p, 3, 4, 8, Strides{8, 0, 1}));
    REQUIRE_NOTHROW(TensorView<const float>(p, 3, 3, 3, Strides{0, 0, 0}));
    REQUIRE_NOTHROW(TensorView<float>(p, 1, 4, 8, Strides{0, 8, 1}));
    // Extents 0: nothing is addressed, any strides; extents 1: a single element.
    REQUIRE_NOTHROW(TensorView<float>(p, 0, 4, 8, Strides{0, 0, 0}));
    REQUIRE_NOTHROW(TensorView<float>(p, 5, 0, 8, Strides{0, 0, 0}));
    REQUIRE_NOTHROW(TensorView<float>(p, 1, 1, 1, Strides{0, 0, 0}));
    // Three axes, none stepping over the span of the others, yet injective:
    // {0, 3} + {0, 2, 4} = {0, 2, 3, 4, 5, 7}, and + 6 misses it. + 5 does not (3 + 2 = 5).
    const Index n_ok[3] = {2, 3, 2}, s_ok[3] = {3, 2, 6};
    REQUIRE(!aliases_brute(n_ok, s_ok));
    REQUIRE_NOTHROW(TensorView<float>(p, 2, 3, 2, Strides{3, 2, 6}));
    const Index n_bad[3] = {2, 3, 2}, s_bad[3] = {3, 2, 5};
    REQUIRE(aliases_brute(n_bad, s_bad));
    REQUIRE_THROWS_WITH(TensorView<float>(p, 2, 3, 2, Strides{3, 2, 5}), Contains("overlap"));
  }
  SECTION("random small views against brute force") {
    std::mt19937 rng(7);
    std::uniform_int_distribution<Index> ext(0, 5), str(-9, 9);
    int valid = 0, aliasing = 0, exotic_valid = 0;
    for (int trial = 0; trial < 30000; ++trial) {
      const Index n[3] = {ext(rng), ext(rng), ext(rng)}, s[3] = {str(rng), str(rng), str(rng)};
      const bool alias = aliases_brute(n, s);
      const bool ok = writable_accepted(p, n, s);
      INFO("extents [" << n[0] << ", " << n[1] << ", " << n[2] << "] strides {" << s[0] << ", "
                       << s[1] << ", " << s[2] << "}");
      REQUIRE(ok == !alias);
      valid += !alias, aliasing += alias;
      // Valid views that the nested-span rule ("each |stride| steps over the span of the
      // faster axes") would reject: the cases that need the exact test.
      if (!alias && n[0] > 1 && n[1] > 1 && n[2] > 1) ++exotic_valid;
      // A const view is never rejected for overlap.
      REQUIRE_NOTHROW(TensorView<const float>(p, n[0], n[1], n[2], Strides{s[0], s[1], s[2]}));
    }
    CHECK(valid > 1000);
    CHECK(aliasing > 1000);
    CHECK(exotic_valid > 100);
  }
}

TEST_CASE("TensorView: the exact test on large extents agrees with a direct solver", "[view]") {
  // Two axes (a, m_a), (b, m_b) and a third of extent 2 with stride c: an alias is a
  // nonzero (x, y, z), |x| <= m_a, |y| <= m_b, z in {-1, 0, 1}, with a x + b y + c z = 0.
  // z = 0 is the two-axis problem; z = 1 is solved here by scanning every x.
  auto direct = [](Index a, Index ma, Index b, Index mb, Index c) {
    for (Index x = -ma; x <= ma; ++x) {
      const Index r = -c - a * x;
      if (r % b == 0 && std::abs(r / b) <= mb) return true;
    }
    const Index g = std::gcd(a, b);
    return b / g <= ma && a / g <= mb;  // z = 0 (shown exact by the brute-force test)
  };
  std::mt19937 rng(11);
  std::uniform_int_distribution<Index> big(100000, 400000), ext(1000, 200000);
  std::vector<float> buf(1);
  int yes = 0, no = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const Index a = big(rng), b = big(rng), c = big(rng);
    const Index na = ext(rng), nb = ext(rng);
    const Index n[3] = {na, nb, 2}, s[3] = {a, b, c};
    const bool alias = direct(a, na - 1, b, nb - 1, c);
    INFO("a " << a << " na " << na << " b " << b << " nb " << nb << " c " << c);
    REQUIRE(writable_accepted(buf.data(), n, s) == !alias);
    yes += alias, no += !alias;
  }
  CHECK(yes > 3);
  CHECK(no > 3);
  // Two large axes, coprime strides, not nested (the second stride is inside the first
  // axis' span): valid exactly when neither index range reaches the other stride.
  const Index m = 1000000;
  float x = 0;
  REQUIRE_NOTHROW(TensorView<float>(&x, m, m + 2, 1, Strides{m + 3, m, 1}));
  REQUIRE_THROWS_WITH(TensorView<float>(&x, m + 4, m + 4, 1, Strides{m + 3, m, 1}),
                      Contains("overlap"));
  // More index triples than addresses in the span: aliasing by counting.
  REQUIRE_THROWS_WITH(TensorView<float>(&x, 1000, 1000, 1000, Strides{1000, 1, 1001}),
                      Contains("overlap"));
}

TEST_CASE("TensorView: negative extents, null data and addressing", "[view]") {
  std::vector<float> buf(64);
  REQUIRE_THROWS_WITH(TensorView<float>(buf.data(), -1, 2, 2), Contains("non-negative"));
  REQUIRE_THROWS_WITH(TensorView<float>(buf.data(), 2, -1, 2), Contains("non-negative"));
  REQUIRE_THROWS_WITH(TensorView<float>(buf.data(), 2, 2, -1), Contains("non-negative"));
  REQUIRE_THROWS_WITH(TensorView<float>(buf.data(), 2, 2, -1, Strides{4, 2, 1}),
                      Contains("non-negative"));
  REQUIRE_THROWS_WITH(TensorView<float>(nullptr, 2, 2, 2), Contains("null data"));
  REQUIRE_THROWS_WITH(TensorView<const float>(nullptr, 1, 1, 1), Contains("null data"));
  REQUIRE_NOTHROW(TensorView<float>(nullptr, 0, 2, 2));
  REQUIRE_NOTHROW(TensorView<float>(nullptr, 2, 0, 2));
  REQUIRE_NOTHROW(TensorView<float>(nullptr, 2, 2, 0));
  TensorView<float> e;
  CHECK(e.empty());

  std::iota(buf.begin(), buf.end(), 0.0f);
  // Tokens reversed through a negative stride: data() is token 0, the last row in memory.
  TensorView<float> r(buf.data() + 3 * 6, 4, 2, 3, Strides{-6, 3, 1});
  CHECK(r(0, 0, 0) == 18.0f);
  CHECK(r(3, 1, 2) == 5.0f);
  CHECK(r.vector(1, 1) == buf.data() + 15);
  const TensorView<const float> c = r;
  CHECK(c(2, 0, 1) == 7.0f);
  CHECK(c.strides().token == -6);
  CHECK(c.tokens() == 4);
  CHECK(c.heads() == 2);
  CHECK(c.dim() == 3);
  CHECK(!c.empty());
  CHECK(c.unit_elem_stride());
}

TEST_CASE("TensorView: from Eigen matrices", "[view]") {
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rm(3, 8);
  Eigen::MatrixXf cm(3, 8);
  for (Index i = 0; i < 3; ++i)
    for (Index j = 0; j < 8; ++j) rm(i, j) = cm(i, j) = float(10 * i + j);
  // One row per token, heads * dim columns, either storage order.
  TensorView<float> a(rm, 2), b(cm, 2);
  for (Index t = 0; t < 3; ++t)
    for (Index h = 0; h < 2; ++h)
      for (Index i = 0; i < 4; ++i) {
        CHECK(a(t, h, i) == rm(t, h * 4 + i));
        CHECK(b(t, h, i) == cm(t, h * 4 + i));
      }
  CHECK(a.unit_elem_stride());
  CHECK(!b.unit_elem_stride());
  // A block (outer stride of the whole matrix) and a map with an inner stride.
  TensorView<float> blk(cm.block(1, 4, 2, 4), 1);
  CHECK(blk(1, 0, 3) == cm(2, 7));
  std::vector<float> raw(48);
  std::iota(raw.begin(), raw.end(), 0.0f);
  Eigen::Map<Eigen::MatrixXf, 0, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>> st(
      raw.data(), 3, 4, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(12, 2));
  TensorView<float> sv(st, 2);
  CHECK(sv(2, 1, 1) == st(2, 3));
  const Eigen::MatrixXf& cref = cm;
  TensorView<const float> cv(cref, 4);
  CHECK(cv(2, 3, 1) == cm(2, 7));
  // Rejections: heads must divide the columns and be positive; a writable map whose strides
  // alias is rejected like any other writable view, a const one is a broadcast.
  REQUIRE_THROWS_WITH(TensorView<float>(rm, 3), Contains("heads*dim columns"));
  REQUIRE_THROWS_WITH(TensorView<float>(rm, 0), Contains("heads*dim columns"));
  REQUIRE_THROWS_WITH(TensorView<float>(rm, -2), Contains("heads*dim columns"));
  Eigen::Map<Eigen::MatrixXf, 0, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>> bcast(
      raw.data(), 3, 4, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(0, 1));
  REQUIRE_THROWS_WITH(TensorView<float>(bcast, 1), Contains("overlap"));
  Eigen::Map<const Eigen::MatrixXf, 0, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>> cb(
      raw.data(), 3, 4, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(0, 1));
  REQUIRE_NOTHROW(TensorView<const float>(cb, 1));
  // An empty matrix gives an empty view.
  Eigen::MatrixXf none(0, 8);
  TensorView<float> ev(none, 2);
  CHECK(ev.empty());
  CHECK(ev.dim() == 4);
}

TEST_CASE("detail::may_overlap compares the byte ranges the views touch", "[view][overlap]") {
  using peal::detail::may_overlap;
  using peal::detail::same_elements;
  std::vector<float> buf(256);
  float* p = buf.data() + 64;
  const TensorView<float> a(p, 2, 3, 4);  // [p, p + 24)
  CHECK(may_overlap(a, a));
  CHECK(same_elements(a, a));
  CHECK(!may_overlap(a, TensorView<float>(p + 24, 2, 3, 4)));        // adjacent after
  CHECK(!may_overlap(a, TensorView<const float>(p - 24, 2, 3, 4)));  // adjacent before
  CHECK(may_overlap(a, TensorView<float>(p + 23, 2, 3, 4)));         // one element shared
  CHECK(may_overlap(a, TensorView<float>(p - 23, 2, 3, 4)));
  CHECK(may_overlap(a, TensorView<float>(p + 4, 2, 3, 4)));  // four floats in
  CHECK(!same_elements(a, TensorView<float>(p + 4, 2, 3, 4)));
  // Negative strides: the range runs below data().
  const TensorView<float> rev(p + 23, 2, 3, 4, Strides{-12, -4, -1});  // [p, p + 24) again
  CHECK(may_overlap(a, rev));
  CHECK(!same_elements(a, rev));
  CHECK(!may_overlap(rev, TensorView<float>(p + 24, 1, 1, 1)));
  CHECK(may_overlap(rev, TensorView<float>(p + 23, 1, 1, 1)));
  CHECK(!may_overlap(rev, TensorView<float>(p - 1, 1, 1, 1)));
  CHECK(may_overlap(rev, TensorView<float>(p, 1, 1, 1)));
  // Bytes, not elements: a double view overlapping the last float of `a` by half.
  const TensorView<double> d(reinterpret_cast<double*>(p + 22), 1, 1, 1);
  CHECK(may_overlap(a, d));
  CHECK(!may_overlap(a, TensorView<double>(reinterpret_cast<double*>(p + 24), 1, 1, 1)));
  // Same address and layout but another element type is not the same elements.
  const TensorView<const float> ca = a;
  CHECK(same_elements(a, ca));
  // Empty views touch nothing.
  CHECK(!may_overlap(a, TensorView<float>(p, 0, 3, 4)));
  CHECK(!same_elements(a, TensorView<float>(p, 0, 3, 4)));
  // Strides of axes of extent 1 do not matter for sameness.
  const TensorView<float> one(p, 1, 3, 4), one_b(p, 1, 3, 4, Strides{999, 4, 1});
  CHECK(same_elements(one, one_b));
  // Interleaved but disjoint (two column blocks of one buffer): the byte ranges overlap,
  // so the test is conservative and reports an overlap (documented in overlap.hpp).
  const TensorView<float> left(p, 4, 1, 4, Strides{8, 4, 1}),
      right(p + 4, 4, 1, 4, Strides{8, 4, 1});
  CHECK(may_overlap(left, right));
}

// ---- Bulk conversions of half-like rows (detail/half_rows.hpp) ----------------------------

namespace {

template <class H>
H from_bits(std::uint16_t b) {
  return Eigen::numext::bit_cast<H>(b);
}
std::uint32_t float_bits(float x) { return Eigen::numext::bit_cast<std::uint32_t>(x); }
template <class H>
std::uint16_t half_bits(H h) {
  return Eigen::numext::bit_cast<std::uint16_t>(h);
}

// Lengths that reach each part of a conversion: nothing, the scalar tail alone, one 8-wide
// step, the 16-wide body, the 32-wide body (f16 -> f32 with AVX-512), and their tails.
const Index kRowLengths[] = {0, 1, 7, 8, 15, 16, 17, 33};

// Every 16-bit pattern of H converted to float in rows of `len` (one call per row, the rows
// starting one element past an aligned buffer), against Eigen's scalar conversion: the same
// bits, or NaN for NaN. Returns the mismatches; a write past a row's end counts as one.
template <class H, class Convert>
Index to_float_mismatches(Index len, Convert convert) {
  constexpr Index kAll = 65536;
  std::vector<H> src(kAll + 1);
  for (Index b = 0; b < kAll; ++b) src[std::size_t(b + 1)] = from_bits<H>(std::uint16_t(b));
  std::vector<float> dst(std::size_t(kAll + 2), 0.0f);
  const float sentinel = -12345.0f;
  Index bad = 0;
  for (Index r0 = 0; r0 < (len == 0 ? 1 : kAll); r0 += std::max<Index>(len, 1)) {
    const Index n = std::min(len, kAll - r0);
    dst[std::size_t(r0 + 1 + n)] = sentinel;
    convert(src.data() + 1 + r0, dst.data() + 1 + r0, n);
    bad += dst[std::size_t(r0 + 1 + n)] != sentinel;  // (the next row overwrites it)
  }
  for (Index b = 0; b < (len == 0 ? 0 : kAll); ++b) {
    const float want = static_cast<float>(src[std::size_t(b + 1)]), got = dst[std::size_t(b + 1)];
    bad += std::isnan(want) ? !std::isnan(got) : float_bits(want) != float_bits(got);
  }
  return bad;
}

// f32 -> H on floats around every H value: the bits of each of the 65,536 patterns widened
// to float plus the offsets of `near` (exact values, the ties of round-to-nearest-even and
// their neighbours, subnormals, overflow past the largest finite value, NaN payloads), plus
// named hard cases; in rows of `len` against Eigen's scalar H(float).
template <class H, class Convert>
Index from_float_mismatches(Index len, const std::vector<std::uint32_t>& near,
                            const std::vector<float>& named, Convert convert) {
  std::vector<float> src(1, 0.0f);  // one element of offset: misaligned rows
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const std::uint32_t u = float_bits(static_cast<float>(from_bits<H>(std::uint16_t(b))));
    for (std::uint32_t o : near) {
      src.push_back(Eigen::numext::bit_cast<float>(u + o));
      src.push_back(Eigen::numext::bit_cast<float>(u - o));
    }
  }
  src.insert(src.end(), named.begin(), named.end());
  const Index total = Index(src.size()) - 1;
  std::vector<H> dst(std::size_t(total + 2), from_bits<H>(0));
  const H sentinel = from_bits<H>(0x1234);
  Index bad = 0;
  for (Index r0 = 0; r0 < (len == 0 ? 1 : total); r0 += std::max<Index>(len, 1)) {
    const Index n = std::min(len, total - r0);
    dst[std::size_t(r0 + 1 + n)] = sentinel;
    convert(src.data() + 1 + r0, dst.data() + 1 + r0, n);
    bad += half_bits(dst[std::size_t(r0 + 1 + n)]) != half_bits(sentinel);
  }
  for (Index i = 0; i < (len == 0 ? 0 : total); ++i) {
    const H want = H(src[std::size_t(i + 1)]), got = dst[std::size_t(i + 1)];
    bad +=
        Eigen::numext::isnan(want) ? !Eigen::numext::isnan(got) : half_bits(want) != half_bits(got);
  }
  return bad;
}

std::vector<float> hard_floats() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          inf,
                          -inf,
                          std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN(),
                          Eigen::numext::bit_cast<float>(std::uint32_t(0x7f800001)),  // sNaN
                          Eigen::numext::bit_cast<float>(std::uint32_t(0xffc00001)),
                          std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::denorm_min(),
                          65504.0f,
                          65519.996f,
                          65520.0f,
                          -65520.0f,
                          65536.0f,  // f16 overflow
                          1.0f + 0x1p-11f,
                          1.0f + 3 * 0x1p-11f,  // f16 ties
                          0x1p-25f,
                          3 * 0x1p-25f,
                          0x1p-24f,
                          0x1p-14f,
                          0x1p-14f - 0x1p-24f,
                          1.0f + 0x1p-8f,
                          1.0f + 3 * 0x1p-8f,  // bf16 ties
                          0x1p-133f,
                          3 * 0x1p-134f,
                          3.3895314e38f,
                          3.3961776e38f};
  std::mt19937 rng(24);
  for (int i = 0; i < 4096; ++i) x.push_back(Eigen::numext::bit_cast<float>(std::uint32_t(rng())));
  return x;
}

}  // namespace

TEST_CASE("half rows: f16 and bf16 to float, every bit pattern, as Eigen's conversion",
          "[storage][half]") {
  for (Index len : kRowLengths) {
    INFO("length " << len);
    CHECK(to_float_mismatches<Eigen::half>(len, peal::detail::half_to_float) == 0);
    CHECK(to_float_mismatches<Eigen::bfloat16>(len, peal::detail::bfloat16_to_float) == 0);
    // The generic loader the kernels call (float arithmetic), and its double path.
    CHECK(to_float_mismatches<Eigen::half>(len, [](const Eigen::half* s, float* d, Index n) {
            peal::detail::load_row(s, d, n);
          }) == 0);
    CHECK(
        to_float_mismatches<Eigen::bfloat16>(len, [](const Eigen::bfloat16* s, float* d, Index n) {
          peal::detail::load_row(s, d, n);
        }) == 0);
  }
  const Eigen::bfloat16 b[3] = {Eigen::bfloat16(1.5f), Eigen::bfloat16(-0.0f),
                                Eigen::bfloat16(3e38f)};
  double wide[3];
  peal::detail::load_row(b, wide, 3);
  CHECK(wide[0] == 1.5);
  CHECK(std::signbit(wide[1]));
  CHECK(wide[2] == double(float(b[2])));
}

TEST_CASE("half rows: float to f16 and bf16 round to nearest even, as Eigen's conversion",
          "[storage][half]") {
  const std::vector<float> named = hard_floats();
  // f32 -> f16 drops 13 mantissa bits of a normal f16 (the tie is 0x1000), more of a
  // subnormal; f32 -> bf16 drops 16 (the tie is 0x8000).
  const std::vector<std::uint32_t> near16 = {0,      1,      0x0fff, 0x1000, 0x1001,  0x1fff,
                                             0x2000, 0x2001, 0x4000, 0x8000, 0x10000, 0x3fffff};
  const std::vector<std::uint32_t> near_bf = {0,      1,       0x7fff,  0x8000,  0x8001,
                                              0xffff, 0x10000, 0x18000, 0x3fffff};
  for (Index len : kRowLengths) {
    INFO("length " << len);
    CHECK(from_float_mismatches<Eigen::half>(len, near16, named, peal::detail::float_to_half) == 0);
    CHECK(from_float_mismatches<Eigen::bfloat16>(len, near_bf, named,
                                                 peal::detail::float_to_bfloat16) == 0);
    CHECK(from_float_mismatches<Eigen::half>(len, near16, named,
                                             [](const float* s, Eigen::half* d, Index n) {
                                               peal::detail::store_row(s, d, n);
                                             }) == 0);
  }
  // Named results: ties to even, overflow to inf, NaN stays NaN with its sign (bf16).
  Eigen::half h[4];
  const float hs[4] = {1.0f + 0x1p-11f, 65520.0f, 0x1p-25f, 3 * 0x1p-25f};
  peal::detail::float_to_half(hs, h, 4);
  CHECK(float(h[0]) == 1.0f);
  CHECK(std::isinf(float(h[1])));
  CHECK(float(h[2]) == 0.0f);
  CHECK(float(h[3]) == 0x1p-23f);
  Eigen::bfloat16 bf[17];
  std::vector<float> bs(17, 1.0f + 3 * 0x1p-8f);
  bs[3] = -std::numeric_limits<float>::quiet_NaN();
  bs[16] = std::numeric_limits<float>::quiet_NaN();
  peal::detail::float_to_bfloat16(bs.data(), bf, 17);
  CHECK(float(bf[0]) == 1.0f + 4 * 0x1p-8f);
  CHECK(half_bits(bf[3]) == 0xffc0);
  CHECK(half_bits(bf[16]) == 0x7fc0);
}
