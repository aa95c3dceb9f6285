// JordanBlock and RotationJordanBlock hard cases by name: both sides of the switch between
// direct and log-form evaluation of e^{lambda tau} tau^j / j! (detail/math/exp_poly.hpp), and
// results that are representable although e^{lambda tau} or tau^j / j! alone is not.
#include <catch2/catch.hpp>

#include <array>
#include <cfloat>
#include <cmath>
#include <peal/peal.hpp>

#include "tolerances.hpp"

namespace {

using peal_test::Tol;

// c_j in long double, whose exponent range (to ~1e4932) holds every factor used below.
long double coefficient_ld(long double lambda, long double tau, int j) {
  long double p = 1;
  for (int i = 1; i <= j; ++i) p = p * tau / i;
  return std::exp(lambda * tau) * p;
}

// Against the long double coefficient: Tol::jordan_coefficient (both evaluation forms,
// direct and log, of exp_poly.hpp); below the normal range, absolutely.
template <int M>
void check_against_long_double(double lambda, double tau) {
  const peal::JordanBlock<M, double> b(lambda);
  const auto a = b.A(tau);
  for (int j = 0; j < M; ++j) {
    const long double ref = coefficient_ld(lambda, tau, j);
    const double rel = double(Tol<double>::jordan_coefficient(std::abs(lambda * tau), j, tau));
    CAPTURE(lambda, tau, j, double(ref), a(0, j), rel);
    if (std::abs(ref) < DBL_MIN) {  // not a normal double: compare absolutely
      CHECK(std::abs(a(0, j) - double(ref)) <= double(Tol<double>::subnormal(rel)));
    } else {
      CHECK(double(std::abs(a(0, j) - ref)) <= rel * double(std::abs(ref)));
    }
  }
}

}  // namespace

TEST_CASE("Jordan coefficients on both sides of the e^{lambda tau} underflow switch") {
  // e^{lambda tau} is normal down to lambda tau = ln(DBL_MIN) = -708.3964...: just above it
  // the direct product is used, just below the log form. tau = 1e3 gives tau^j / j! up to
  // ~8e12, so every coefficient with j >= 1 is a normal double on both sides.
  const double edge = std::log(DBL_MIN);
  for (double x : {edge + 1e-3, edge - 1e-3, edge + 0.5, edge - 0.5})
    check_against_long_double<6>(x / 1e3, 1e3);
}

TEST_CASE("Jordan coefficients representable although a factor overflows") {
  // e^{-800} underflows double; e^{-800} tau^j / j! (tau = 1e3) is ~1e-348 * 8e12 for j = 5:
  // still below DBL_MIN, so the answer is 0 or subnormal, never NaN.
  check_against_long_double<6>(-0.8, 1e3);
  // e^{-720} underflows to a subnormal, but e^{-720} tau^5 / 5! with tau = 1e4 is
  // ~1e-313 * 8e17 = 8e-296: normal, found by the log form.
  check_against_long_double<6>(-0.072, 1e4);
  // tau^j/j! overflows (tau = 1e100, j >= 4) while e^{lambda tau} = e^{-700} is tiny:
  // the product, ~1e-304 * 1e400 / 24, is representable.
  check_against_long_double<6>(-7e-98, 1e100);
  // Growth past the range: e^{800} (1e-3)^j / j! stays above DBL_MAX for j < 3, so the
  // honest answer is +inf, not NaN.
  const auto a = peal::JordanBlock<3, double>(8e5).A(1e-3);
  CHECK(std::isinf(a(0, 0)));
  CHECK(std::isinf(a(0, 2)));
  // Negative tau: signs alternate with j.
  check_against_long_double<6>(1e-3, -2e4);
}

TEST_CASE("float Jordan blocks are computed in double and rounded once") {
  // e^{-100} tau^j / j! with tau = 40: j = 0 (3.7e-44) is subnormal in float, j = 5
  // (3.2e-38) normal; each is the double value rounded once.
  const peal::JordanBlock<6, float> bf(-2.5f);
  const peal::JordanBlock<6, double> bd(-2.5);
  const auto af = bf.A(40.0);
  const auto ad = bd.A(40.0);
  for (int j = 0; j < 6; ++j) CHECK(af(0, j) == static_cast<float>(ad(0, j)));
}

TEST_CASE("RotationJordanBlock<1> is a RotationBlock and <M> stacks Jordan coefficients") {
  const double w = 0.7, a = -0.05;
  const peal::RotationJordanBlock<1, double> rj(w, a);
  const peal::RotationBlock<double> r(w, a);
  // Two closed forms of e^{a tau} R(-w tau): the same exactly reduced angle, e^{a tau} from
  // the Jordan coefficients and from exp, each within an ulp: roundings(2) of |A|.
  for (double tau : {0.0, 1.0, -3.5, 1e4}) {
    CHECK((rj.A(tau) - r.A(tau)).norm() <= Tol<double>::roundings(2) * r.A(tau).norm());
  }
  const peal::RotationJordanBlock<3, double> r3(w, a);
  const double tau = 2.5;
  const auto A3 = r3.A(tau);
  const Eigen::Matrix2d R = r.A(tau);
  // tau^2 / 2 = 3.125 is exact; the coefficient e^{a tau} tau^2 / 2 against e^{a tau} rounded
  // and scaled: a few roundings, roundings(4) of the block.
  const Eigen::Matrix2d want = tau * tau / 2 * R;
  CHECK((A3.block<2, 2>(0, 4) - want).norm() <= Tol<double>::roundings(4) * want.norm());
  CHECK((A3.block<2, 2>(2, 0)).norm() == 0.0);
}

// ---- Past the range: ±inf or the finite value, never NaN (inf·0) --------------------------
namespace {

// y = A(τ) x or A(τ)^T x in long double, A(τ)_{i,i+j} = c_j (coefficient_ld).
template <int M>
std::array<long double, M> jordan_apply_ld(long double lambda, long double tau, const double* x,
                                           bool transpose) {
  std::array<long double, M> y{};
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < M; ++j) {
      const int d = transpose ? i - j : j - i;
      if (d >= 0) y[std::size_t(i)] += coefficient_ld(lambda, tau, d) * x[j];
    }
  return y;
}

void check_exact_jordan(double got, long double want, double growth) {
  const double w = static_cast<double>(want);
  CAPTURE(got, w);
  REQUIRE(!std::isnan(w));
  if (std::isinf(w) || want == 0)
    CHECK(got == w);
  else
    CHECK(std::fabs(got - w) <= (2 * growth + 16) * DBL_EPSILON * std::fabs(w) + DBL_TRUE_MIN);
}

template <int M>
void check_jordan_past_range(double lambda, double tau, const std::array<double, M>& x) {
  CAPTURE(M, lambda, tau);
  const peal::JordanBlock<M, double> b(lambda);
  const double growth = std::fabs(lambda * tau) + M * std::log(std::fabs(tau) + 1) + M;
  Eigen::Matrix<double, M, 1> q, k;
  for (int i = 0; i < M; ++i) q(i) = k(i) = x[std::size_t(i)];
  b.encode_query(q, tau);  // F(τ) x = A(τ)^T x
  b.encode_key(k, -tau);   // G(-τ) x = A(τ) x
  const auto wq = jordan_apply_ld<M>(lambda, tau, x.data(), true);
  const auto wk = jordan_apply_ld<M>(lambda, tau, x.data(), false);
  for (int i = 0; i < M; ++i) {
    CAPTURE(i, x[std::size_t(i)]);
    check_exact_jordan(q(i), wq[std::size_t(i)], growth);
    check_exact_jordan(k(i), wk[std::size_t(i)], growth);
  }
  // A(τ) itself: ±inf entries, 0 below the diagonal.
  const auto a = b.A(tau);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < M; ++j)
      check_exact_jordan(a(i, j), j >= i ? coefficient_ld(lambda, tau, j - i) : 0.0L, growth);
  // score e_0^T A(τ) x.
  Eigen::Matrix<double, M, 1> e0 = Eigen::Matrix<double, M, 1>::Zero(), xv;
  e0(0) = 1;
  for (int i = 0; i < M; ++i) xv(i) = x[std::size_t(i)];
  check_exact_jordan(b.score(e0, tau, xv, 0.0), wk[0], growth);
}

}  // namespace

TEST_CASE("Jordan blocks past the range give ±inf or the finite value, never NaN") {
  // e^{1000} = 2e434: A(1)^T (1, 0) = (inf, inf), not (inf, NaN); zero components stay 0;
  // (1, -1) cancels exactly in the second component of A(1) x.
  check_jordan_past_range<2>(1000, 1, {1, 0});
  check_jordan_past_range<2>(1000, 1, {0, 1});
  check_jordan_past_range<2>(1000, 1, {1, -1});
  check_jordan_past_range<2>(-1000, -1, {1, 0});  // τ < 0: c_1 = -inf
  check_jordan_past_range<2>(-1000, -1, {-2, 3});
  // Finite although every coefficient overflows: e^{710} · 1e-300.
  check_jordan_past_range<3>(710, 1, {1e-300, 0, 0});
  check_jordan_past_range<3>(710, 1, {0, -3e-301, 1e-300});
  // Finite although the coefficient underflows: e^{-1000} · 1e300.
  check_jordan_past_range<3>(-1000, 1, {1e300, 0, 0});
  // τ^j/j! overflows (τ = 1e300, j = 2) while e^{λτ} = 1: (0, 0, 1) only meets c_0 = 1.
  check_jordan_past_range<3>(0, 1e300, {0, 0, 1});
  check_jordan_past_range<3>(0, 1e300, {1, 0, 0});
  check_jordan_past_range<4>(100, 10, {1, 0, 0, 0});
  check_jordan_past_range<4>(100, 10, {0, 1, -1, 0.5});
  // The brief's case: JordanBlock<2>{1000}.encode_query((1, 0), 1) = (inf, inf).
  Eigen::Vector2d q(1, 0);
  peal::JordanBlock<2, double>(1000).encode_query(q, 1.0);
  CHECK(q(0) == std::numeric_limits<double>::infinity());
  CHECK(q(1) == std::numeric_limits<double>::infinity());
  // float: e^{100} > FLT_MAX, e^{100}·1e-30 = 2.7e13 is not.
  Eigen::Vector2f qf(1e-30f, 0);
  peal::JordanBlock<2, float>(100).encode_query(qf, 1.0);
  CHECK(qf(0) == Approx(1e-30 * std::exp(100.0)).epsilon(1e-6));
  CHECK(qf(1) == Approx(1e-30 * std::exp(100.0)).epsilon(1e-6));
  Eigen::Vector2f zf(0, 1);
  peal::JordanBlock<2, float>(100).encode_query(zf, 1.0);
  CHECK(zf(0) == 0.0f);
  CHECK(zf(1) == std::numeric_limits<float>::infinity());
}
