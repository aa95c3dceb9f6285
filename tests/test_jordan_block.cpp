// JordanBlock and RotationJordanBlock hard cases by name: both sides of the switch between
// direct and log-form evaluation of e^{lambda tau} tau^j / j! (detail/exp_poly.hpp), and
// results that are representable although e^{lambda tau} or tau^j / j! alone is not.
#include <catch2/catch.hpp>

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
