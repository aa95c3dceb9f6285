// The products of detail/small_products.hpp on at most kSmallRows rows (decoding: the G query
// rows that share a KV head; in chunks of 4, 2 and 1 rows), small::abt and small::ab behind
// gemm_abt and gemm_ab, against a long double reference, over every row count m = 1..8 (and 9, 12: Eigen's blocked path behind the
// same calls), awkward n and k (1, 3, 17, 127, 128, 129 and 0), leading dimensions past the
// rows and starts off the packet alignment.
//
// Bound, per element of res += alpha A B^T (or A B) with k terms, from fl(x op y) =
// (x op y)(1 + d), |d| <= u (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed.,
// §3.1-3.5): in any order of the sum (packet lanes, the horizontal sums, the scalar tail;
// fused or separate multiply-adds) a term a_ie b_e meets at most k roundings (its product
// and its additions), alpha s (or alpha a_ie) and res + ... one more each, so
//   |fl(res') - res'| <= gamma_{k+2} (|res| + |alpha| sum_e |a_ie| |b_e|),
// plus the same bound in long double for the reference's own rounding. No slack: the bound is
// rigorous (Tol<S>::gamma, tests/tolerances.hpp).
//
// Also checked: elements outside the result (past n within ldr) are untouched, and, with SIMD
// packets, a row's result is bitwise the same computed alone, at another alignment and
// stride, as with the other rows (the kernels' stated contract: one sequence of operations
// per element).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <peal/detail/eigen_gemm.hpp>
#include <random>
#include <vector>

#include "tolerances.hpp"

namespace small_products_test {

using Eigen::Index;
using peal_test::Tol;
namespace eg = peal::detail::eigen_gemm;
using LD = long double;

/// A row-major matrix of rows x cols with leading dimension ld >= cols, starting `skew`
/// elements into its buffer (off the packet alignment); the padding holds a canary.
template <class C>
struct Strided {
  Index rows, cols, ld, skew;
  std::vector<C> buf;
  Strided(Index r, Index c, Index pad, Index sk, std::mt19937& rng)
      : rows(r), cols(c), ld(c + pad), skew(sk), buf(std::size_t(sk + r * (c + pad) + 1), C(7)) {
    std::uniform_real_distribution<double> u(-1, 1);
    for (Index i = 0; i < rows; ++i)
      for (Index j = 0; j < cols; ++j) at(i, j) = C(u(rng));
  }
  C* data() { return buf.data() + skew; }
  C& at(Index i, Index j) { return data()[i * ld + j]; }
};

/// Eigen's packing buffers for the rows > kSmallRows (the small kernels ignore them): aligned
/// (its micro-kernel loads them aligned); a row-major result is Eigen's column-major product
/// of the transposes, so either side may be the packed left-hand side.
template <class C>
struct Workspace {
  std::vector<C, Eigen::aligned_allocator<C>> A, B;
  eg::GemmBlocking<C> blocking;
  Workspace(Index m, Index n, Index k) {
    Index kc = std::max<Index>(k, 1), mc = std::max(m, n), nc = std::max(m, n);
    eg::product_blocking_sizes<C>(kc, mc, nc);
    A.resize(std::size_t(kc * mc)), B.resize(std::size_t(kc * nc));
    blocking = eg::GemmBlocking<C>(mc, nc, kc, A.data(), B.data());
  }
};

/// The bound of the header comment for one element: |res| and |alpha| sum |a||b| given.
template <class C>
LD bound(Index k, LD res, LD alpha_abs_sum) {
  const LD size = std::abs(res) + alpha_abs_sum;
  return (Tol<C>::gamma(int(k) + 2) + Tol<LD>::gamma(int(k) + 2)) * size;
}

/// One product A B^T (b_rows = n rows of k) or A B (b_rows = k rows of n) into res (m x n,
/// row-major, or column-major for A B^T with col_major), checked against long double.
template <class C>
void check_product(bool transposed, bool col_major, Index m, Index n, Index k, std::mt19937& rng) {
  std::uniform_int_distribution<Index> pick_pad(0, 5), pick_skew(0, 15);
  Index pad[3], skew[3];  // drawn in order (the order of a call's arguments is unspecified)
  for (int i = 0; i < 3; ++i) pad[i] = pick_pad(rng), skew[i] = pick_skew(rng);
  const C alpha = C(std::uniform_real_distribution<double>(-2, 2)(rng));
  Strided<C> a(m, k, pad[0], skew[0], rng);
  Strided<C> b(transposed ? n : k, transposed ? k : n, pad[1], skew[1], rng);
  Strided<C> res(col_major ? n : m, col_major ? m : n, pad[2], skew[2], rng);
  Strided<C> res0 = res;  // before the product
  auto bk = [&](Index e, Index j) -> LD { return transposed ? b.at(j, e) : b.at(e, j); };
  auto r_at = [&](Strided<C>& r, Index i, Index j) -> C& {
    return col_major ? r.at(j, i) : r.at(i, j);
  };
  Workspace<C> ws(m, n, k);
  if (transposed && col_major)
    eg::gemm_abt<C, Eigen::ColMajor>(m, n, k, a.data(), a.ld, b.data(), b.ld, res.data(), res.ld,
                                     alpha, ws.blocking);
  else if (transposed)
    eg::gemm_abt<C, Eigen::RowMajor>(m, n, k, a.data(), a.ld, b.data(), b.ld, res.data(), res.ld,
                                     alpha, ws.blocking);
  else
    eg::gemm_ab<C, Eigen::RowMajor>(m, n, k, a.data(), a.ld, b.data(), b.ld, res.data(), res.ld,
                                    alpha, ws.blocking);
  INFO("m " << m << " n " << n << " k " << k << (transposed ? " A B^T" : " A B")
            << (col_major ? " col-major" : ""));
  LD worst = 0;  // largest error / bound
  for (Index i = 0; i < m; ++i)
    for (Index j = 0; j < n; ++j) {
      LD dot = 0, abs_sum = 0;
      for (Index e = 0; e < k; ++e) {
        dot += LD(a.at(i, e)) * bk(e, j);
        abs_sum += std::abs(LD(a.at(i, e)) * bk(e, j));
      }
      const LD r0 = LD(r_at(res0, i, j));
      const LD exact = r0 + LD(alpha) * dot;
      const LD err = std::abs(LD(r_at(res, i, j)) - exact);
      worst = std::max(worst, err / bound<C>(k, r0, std::abs(LD(alpha)) * abs_sum));
    }
  CHECK(worst <= 1);
  // Nothing outside the result changed (padding, the skew before it, the element after it).
  for (Index r = 0; r < res.rows; ++r)
    for (Index c = res.cols; c < res.ld; ++c)
      CHECK(res.at(r, c) == res0.buf[std::size_t(res.skew + r * res.ld + c)]);
  CHECK(std::equal(res.buf.begin(), res.buf.begin() + res.skew, res0.buf.begin()));
  CHECK(res.buf.back() == res0.buf.back());
}

/// Row i of a small product, computed alone (m = 1, a copy of the row at another alignment
/// and stride, a fresh copy of its result row), equals the row computed with the others,
/// bitwise.
template <class C>
void check_rows_alone(bool transposed, Index m, Index n, Index k, std::mt19937& rng) {
  Strided<C> a(m, k, 3, 5, rng);
  Strided<C> b(transposed ? n : k, transposed ? k : n, 1, 2, rng);
  Strided<C> res(m, n, 2, 1, rng);
  const Strided<C> res0 = res;
  Workspace<C> ws(m, n, k);
  auto run = [&](Index rows, C* pa, Index lda, C* pr, Index ldr) {
    if (transposed)
      eg::gemm_abt<C, Eigen::RowMajor>(rows, n, k, pa, lda, b.data(), b.ld, pr, ldr, C(0.75),
                                       ws.blocking);
    else
      eg::gemm_ab<C, Eigen::RowMajor>(rows, n, k, pa, lda, b.data(), b.ld, pr, ldr, C(0.75),
                                      ws.blocking);
  };
  run(m, a.data(), a.ld, res.data(), res.ld);
  for (Index i = 0; i < m; ++i) {
    std::vector<C> ai(std::size_t(k + 1)), ri(std::size_t(n + 3));  // start one element in
    for (Index e = 0; e < k; ++e) ai[std::size_t(e + 1)] = a.at(i, e);
    const C* r0 = res0.buf.data() + res0.skew + i * res0.ld;
    std::copy(r0, r0 + n, ri.begin() + 3);
    run(1, ai.data() + 1, k, ri.data() + 3, n);
    INFO("row " << i << " of m " << m << " n " << n << " k " << k);
    CHECK(std::equal(ri.begin() + 3, ri.end(), res.data() + i * res.ld));
  }
}

template <class C>
void check_all(std::mt19937& rng) {
  const Index awkward[] = {1, 3, 17, 127, 128, 129};
  // Every (n, k) pair of the awkward sizes, the row count cycling through 1..8.
  Index m = 1;
  for (Index n : awkward)
    for (Index k : awkward) {
      check_product<C>(true, false, m, n, k, rng);
      check_product<C>(true, true, 1 + m % 8, n, k, rng);
      check_product<C>(false, false, 1 + (m + 3) % 8, n, k, rng);
      m = 1 + m % 8;
    }
  // Every row count, random sizes; the blocked path beyond kSmallRows; empty depths and results.
  std::uniform_int_distribution<int> pick(0, 5);
  for (Index rows : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12})
    for (int rep = 0; rep < 2; ++rep) {
      const Index n = awkward[pick(rng)], k = awkward[pick(rng)];
      check_product<C>(true, false, rows, n, k, rng);
      check_product<C>(true, true, rows, n, k, rng);
      check_product<C>(false, false, rows, n, k, rng);
    }
  for (Index rows : {1, 4, 8}) {
    check_product<C>(true, false, rows, 17, 0, rng);
    check_product<C>(false, false, rows, 17, 0, rng);
    check_product<C>(true, false, rows, 0, 17, rng);
    check_product<C>(false, false, rows, 0, 17, rng);
  }
  // Bitwise only where every multiply-add is an explicit packet FMA: n and k whole packets,
  // a SIMD build. Scalar a * b + c may be contracted to an FMA or not, by context (GCC's
  // Zen tuning keeps loop-carried chains unfused), so a build without SIMD differs in the
  // last bit between row counts.
  if (eg::packet_size<C> != 1)
    for (Index rows = 1; rows <= eg::kSmallRows; ++rows) {
      check_rows_alone<C>(true, rows, 48, 128, rng);
      check_rows_alone<C>(false, rows, 128, 48, rng);
    }
}

/// B stored as Eigen::half or Eigen::bfloat16 (a half-precision KV cache) and converted in
/// registers: bitwise the product over B's float copy (the conversions are exact), for every
/// row count, awkward n and k (the packet body and the scalar tails), strides and alignments.
template <class TB>
void check_half_b(std::mt19937& rng) {
  const Index awkward[] = {1, 3, 17, 127, 128, 129};
  std::uniform_int_distribution<int> pick(0, 5);
  for (int transposed = 0; transposed < 2; ++transposed)
    for (Index m = 1; m <= eg::kSmallRows; ++m)
      for (int rep = 0; rep < 3; ++rep) {
        const Index n = awkward[pick(rng)], k = awkward[pick(rng)], pad = pick(rng), skew = pick(rng);
        Strided<float> a(m, k, 2, 3, rng);
        const Index brows = transposed ? n : k, bcols = transposed ? k : n, ldb = bcols + pad;
        std::vector<TB> bh(std::size_t(skew + brows * ldb));
        std::vector<float> bf(bh.size());
        std::uniform_real_distribution<float> u(-2, 2);
        for (std::size_t e = 0; e < bh.size(); ++e) bf[e] = float(bh[e] = TB(u(rng)));
        Strided<float> r1(m, n, 1, 1, rng);
        Strided<float> r2 = r1;
        if (transposed) {
          eg::small::abt<float, TB>(m, n, k, a.data(), a.ld, bh.data() + skew, ldb, r1.data(), r1.ld,
                                    1, 0.5f);
          eg::small::abt<float>(m, n, k, a.data(), a.ld, bf.data() + skew, ldb, r2.data(), r2.ld, 1,
                                0.5f);
        } else {
          eg::small::ab<float, TB>(m, n, k, a.data(), a.ld, bh.data() + skew, ldb, r1.data(), r1.ld,
                                   0.5f);
          eg::small::ab<float>(m, n, k, a.data(), a.ld, bf.data() + skew, ldb, r2.data(), r2.ld,
                               0.5f);
        }
        INFO((transposed ? "A B^T" : "A B") << " m " << m << " n " << n << " k " << k);
        CHECK(r1.buf == r2.buf);
      }
}

TEST_CASE("small products: B stored in half precision, converted in registers",
          "[small_products][half]") {
  std::mt19937 rng(20261209);
  SECTION("Eigen::half") { check_half_b<Eigen::half>(rng); }
  SECTION("Eigen::bfloat16") { check_half_b<Eigen::bfloat16>(rng); }
}

TEST_CASE("small products: A B^T and A B on <= 8 rows against long double", "[small_products]") {
  std::mt19937 rng(20261208);
  SECTION("float") { check_all<float>(rng); }
  SECTION("double") { check_all<double>(rng); }
}

}  // namespace small_products_test
