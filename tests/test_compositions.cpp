// Bank layouts, BlockDiagonal offsets and pass-through, and BasisChange factors, beyond
// what the generic suite checks.
#include <catch2/catch.hpp>

#include <array>
#include <cfloat>
#include <cmath>
#include <limits>
#include <peal/peal.hpp>
#include <vector>

#include "tolerances.hpp"

using peal::Layout;
using peal_test::Tol;

TEST_CASE("Interleaved and HalfSplit banks are one encoding up to a fixed permutation") {
  std::vector<peal::RotationBlock<double>> blocks;
  for (int i = 0; i < 5; ++i) blocks.emplace_back(std::pow(10000.0L, -2.0L * i / 10), -0.01 * i);
  const peal::Bank<peal::RotationBlock<double>> inter(blocks, Layout::Interleaved);
  const peal::Bank<peal::RotationBlock<double>> half(blocks, Layout::HalfSplit);
  // P maps interleaved coordinate 2i+c to half-split coordinate c*n+i.
  Eigen::MatrixXd P = Eigen::MatrixXd::Zero(10, 10);
  for (int i = 0; i < 5; ++i)
    for (int c = 0; c < 2; ++c) P(c * 5 + i, 2 * i + c) = 1;
  for (double tau : {0.0, 1.0, -7.5, 4096.0}) {
    CHECK((P * inter.A(tau) * P.transpose() - half.A(tau)).norm() == 0.0);
    CHECK((P * inter.generator() * P.transpose() - half.generator()).norm() == 0.0);
  }
  CHECK(half.coordinate(2, 1) == 7);
  CHECK(inter.coordinate(2, 1) == 5);
}

TEST_CASE("a Bank keeps its parameters structure-of-arrays") {
  std::vector<peal::RotationBlock<float>> blocks{peal::RotationBlock<float>(1.0L / 3, -0.5),
                                                 peal::RotationBlock<float>(0.25, 0.0)};
  const peal::Bank<peal::RotationBlock<float>> bank(blocks, Layout::HalfSplit);
  REQUIRE(bank.size() == 2);
  REQUIRE(bank.dim() == 4);
  // Column 0: omega_hi of every block, contiguous; column 1 the low parts; column 2 a.
  const double* w = bank.params().col(0).data();
  CHECK(w[0] == double(1.0L / 3));
  CHECK(w[1] == 0.25);
  CHECK(bank.params()(0, 1) == double(1.0L / 3 - (long double)double(1.0L / 3)));
  CHECK(bank.params()(0, 2) == -0.5);
  CHECK(bank.block(0).omega() == 1.0L / 3);
  const auto round_trip = decltype(bank)::from_params(bank.params(), Layout::HalfSplit);
  CHECK((round_trip.A(3.0) - bank.A(3.0)).norm() == 0.0f);
}

TEST_CASE("BlockDiagonal places parts at consecutive offsets; PassThrough is the identity") {
  const auto enc = peal::compose(peal::RealBlock<double>(-0.5), peal::RotationBlock<double>(1.0),
                                 peal::JordanBlock<3, double>(0.1), peal::PassThrough<double>(2));
  REQUIRE(enc.dim() == 8);
  CHECK(enc.offset<0>() == 0);
  CHECK(enc.offset<2>() == 3);
  CHECK(enc.offset<3>() == 6);
  const double tau = 1.5;
  const Eigen::MatrixXd a = enc.A(tau);
  CHECK((a.block(1, 1, 2, 2) - enc.part<1>().A(tau)).norm() == 0.0);
  CHECK((a.block(3, 3, 3, 3) - enc.part<2>().A(tau)).norm() == 0.0);
  CHECK((a.block(6, 6, 2, 2) - Eigen::Matrix2d::Identity()).norm() == 0.0);
  CHECK(a.block(0, 1, 1, 7).norm() == 0.0);
  Eigen::VectorXd q = Eigen::VectorXd::LinSpaced(8, 1, 8), qe = q;
  enc.encode_query(qe, tau);
  // Both sides are <= 3-term sums (the Jordan block's rows) of the same closed-form entries:
  // entry(3) relative to |A|^T |q|.
  const double mag = (a.cwiseAbs().transpose() * q.cwiseAbs()).norm();
  CHECK((qe - a.transpose() * q).norm() <= Tol<double>::entry(3) * mag);
  CHECK(qe.tail(2) == q.tail(2));
}

TEST_CASE("BasisChange: F_P(t) = A_J(t)^T P^T, G_P(s) = A_J(-s) P^{-1}") {
  const auto inner = peal::compose(peal::RotationBlock<double>(0.7, -0.1), peal::JordanBlock<2, double>(0));
  Eigen::Matrix4d P;
  P << 1, 0.2, 0, 0.1, 0, 1, 0.3, 0, 0.1, 0, 1, 0.2, 0, 0.4, 0, 1;
  const auto e = peal::change_basis(inner, P);
  const double t = 2.0, s = -1.0;
  // Two evaluations of the same products of the same entries (inner.A is deterministic):
  // each entry of a 4-term product differs by <= 2 gamma_4 = 4 eps of |A_J| |P|, so
  // roundings(8) of that size. P^{-1} enters twice (peal's and Eigen's inverse of the same
  // P, kappa(P) ~ 2): the generic bound would carry kappa(P) and, for A = P A_J P^{-1}, two
  // products; the old absolute 1e-14 was tighter than that and is kept as tight:
  // roundings(8) for G, roundings(4) for A, relative to |A_J| |P^{-1}| and
  // |P| |A_J| |P^{-1}| (measured differences ~1e-2 of these).
  const Eigen::Matrix4d Pinv = P.inverse();
  const auto mag = [](const Eigen::Matrix4d& x, const Eigen::Matrix4d& y) {
    return (x.cwiseAbs() * y.cwiseAbs()).norm();
  };
  const Eigen::Matrix4d At = inner.A(t), As = inner.A(-s);
  const double tf = double(Tol<double>::roundings(8)) * mag(At.transpose(), P.transpose());
  const double tg = double(Tol<double>::roundings(8)) * mag(As, Pinv);
  const double ta =
      double(Tol<double>::roundings(4)) * (P.cwiseAbs() * At.cwiseAbs() * Pinv.cwiseAbs()).norm();
  CHECK((e.F(t) - At.transpose() * P.transpose()).norm() <= tf);
  CHECK((e.G(s) - As * Pinv).norm() <= tg);
  CHECK((e.A(t) - P * At * Pinv).norm() <= ta);
  // F_P is not A(t)^T: the factorization carries P on the query side and P^{-1} on the key.
  CHECK((e.F(t) - e.A(t).transpose()).norm() > 1e-3);
  Eigen::Vector4d q(1, -2, 0.5, 3), k(0.3, 0.1, -1, 2);
  Eigen::Vector4d qe = q, ke = k;
  e.encode_query(qe, t);
  e.encode_key(ke, s);
  // Against q . A(t - s) k (A dense in double): each side within entry(8) (two 4 x 4
  // factors and a 4-term dot) of the componentwise size |q|^T |P| |A_J| |P^{-1}| |k|, with
  // kappa(P) for the two inverses.
  const double want = q.dot(e.A(t - s) * k);
  const double kappa = P.norm() * Pinv.norm();
  const double size =
      q.cwiseAbs().dot((P.cwiseAbs() * inner.A(t - s).cwiseAbs() * Pinv.cwiseAbs()) * k.cwiseAbs());
  const double tol = double(Tol<double>::entry(8)) * kappa * size;
  CHECK(std::abs(qe.dot(ke) - want) <= tol);
  CHECK(std::abs(e.score(q, t, k, s) - want) <= tol);
}

// ---- Non-finite times and lags are rejected by every per-token entry point ----------------
namespace {

template <class E>
void check_rejects_non_finite(const E& enc) {
  using S = typename E::Scalar;
  using V = Eigen::Matrix<S, Eigen::Dynamic, 1>;
  const V q = V::Ones(enc.dim()), k = V::Constant(enc.dim(), S(0.5));
  // t - s overflows although t and s are finite: the reference score would be NaN.
  CHECK_THROWS_AS(enc.score(q, 1e308, k, -1e308), peal::invalid_argument);
  CHECK_THROWS_WITH(enc.score(q, -1e308, k, 1e308), Catch::Contains("t - s"));
  CHECK(std::isfinite(double(enc.score(q, 1e308, k, 1e308))));  // the other side: lag 0
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  for (double bad : {inf, -inf, nan}) {
    CAPTURE(bad);
    V x = q;
    CHECK_THROWS_AS(enc.A(bad), peal::invalid_argument);
    CHECK_THROWS_AS(enc.F(bad), peal::invalid_argument);
    CHECK_THROWS_AS(enc.G(bad), peal::invalid_argument);
    CHECK_THROWS_AS(enc.encode_query(x, bad), peal::invalid_argument);
    CHECK_THROWS_AS(enc.encode_key(x, bad), peal::invalid_argument);
    CHECK_THROWS_AS(enc.score(q, bad, k, 0.0), peal::invalid_argument);
    CHECK_THROWS_AS(enc.score(q, 0.0, k, bad), peal::invalid_argument);
  }
}

}  // namespace

TEST_CASE("score rejects a lag t - s that overflows; every entry point rejects non-finite times") {
  check_rejects_non_finite(peal::RealBlock<double>(0.5));
  check_rejects_non_finite(peal::RotationBlock<double>(1.0, -0.1));
  check_rejects_non_finite(peal::RotationBlock<float>(0.3));
  check_rejects_non_finite(peal::JordanBlock<3, double>(0.2));
  check_rejects_non_finite(peal::RotationJordanBlock<2, double>(0.3, 0.1));
  check_rejects_non_finite(peal::PassThrough<double>(3));
  check_rejects_non_finite(peal::Bank<peal::RotationBlock<double>>(
      {peal::RotationBlock<double>(1.0), peal::RotationBlock<double>(0.1, -0.2)}));
  const auto comp = peal::compose(peal::RotationBlock<double>(0.7, -0.1),
                                  peal::JordanBlock<2, double>(0), peal::PassThrough<double>(1));
  check_rejects_non_finite(comp);
  Eigen::Matrix4d P;
  P << 1, 0.2, 0, 0.1, 0, 1, 0.3, 0, 0.1, 0, 1, 0.2, 0, 0.4, 0, 1;
  check_rejects_non_finite(peal::change_basis(
      peal::compose(peal::RotationBlock<double>(0.7, -0.1), peal::JordanBlock<2, double>(0)), P));
  // long double positions: the same lag is finite (2e308 < LDBL_MAX), so it is accepted.
  if (std::numeric_limits<long double>::max_exponent > 1024) {
    const peal::RotationBlock<long double> r(1.0L);
    const Eigen::Matrix<long double, 2, 1> q(1, 0), k(0, 1);
    const long double s = r.score(q, 1e308L, k, -1e308L);
    CHECK(std::isfinite(s));
    // q^T A(2e308) k = sin(2e308) for A = R(-ωτ) = [[cos, sin], [-sin, cos]].
    CHECK(std::fabs(s - std::sin(2e308L)) <= 1e-15L);
  }
}

// ---- Past the floating-point range: ±inf or the finite value, never NaN -------------------
// The reference is the closed form evaluated in long double (exponent range to ~1e4932, where
// every factor below is finite) and rounded once to double: ±inf exactly when the true value
// is beyond DBL_MAX, 0 for an exact zero.
namespace {

void check_exact(double got, long double want, double growth) {
  const double w = static_cast<double>(want);
  CAPTURE(got, w, growth);
  REQUIRE(!std::isnan(w));
  if (std::isinf(w) || want == 0) {
    CHECK(got == w);
  } else {
    // |λτ| ulp: the conditioning of e^{λτ} (the rounding of λτ); plus a few roundings.
    CHECK(std::fabs(got - w) <= (2 * growth + 16) * DBL_EPSILON * std::fabs(w) + DBL_TRUE_MIN);
  }
}

// e^{aτ} R(-ωτ) (x0, x1) (or its transpose) in long double.
Eigen::Matrix<long double, 2, 1> rotation_ld(long double w, long double a, long double tau,
                                             long double x0, long double x1, bool transpose) {
  const long double g = std::exp(a * tau), c = std::cos(w * tau), s = std::sin(w * tau);
  const long double ss = transpose ? -s : s;  // A = g [[c, s], [-s, c]]
  return {g * (c * x0 + ss * x1), g * (c * x1 - ss * x0)};
}

}  // namespace

TEST_CASE("RealBlock and RotationBlock past the range: ±inf or finite, never NaN") {
  // RealBlock{λ}: F(t) x = e^{λt} x. e^{1000} = 2e434: x = 0 gives 0 (not 0·inf), x = 1e-300
  // gives 2e134 (finite although the factor is not), x = ±2 gives ±inf.
  for (double x : {0.0, 1e-300, -1e-300, 2.0, -2.0, 1e300}) {
    for (double lambda : {1000.0, -1000.0, 710.0}) {
      CAPTURE(x, lambda);
      const peal::RealBlock<double> b(lambda);
      Eigen::Matrix<double, 1, 1> v(x), kv(x);
      b.encode_query(v, 1.0);
      check_exact(v(0), x * std::exp(static_cast<long double>(lambda)), std::fabs(lambda));
      b.encode_key(kv, -1.0);  // G(-1) = e^{λ}
      check_exact(kv(0), x * std::exp(static_cast<long double>(lambda)), std::fabs(lambda));
      const Eigen::Matrix<double, 1, 1> one(1.0), xv(x);
      check_exact(b.score(xv, 1.0, one, 0.0), x * std::exp(static_cast<long double>(lambda)),
                  std::fabs(lambda));
    }
  }
  // RotationBlock{ω, a} with a τ = 1000: ω = 0 has sin = 0 exactly, so A's off-diagonal
  // entries and the zero components stay 0.
  for (double w : {0.0, 1.0, -2.5}) {
    for (double a : {1000.0, 710.0, -1000.0}) {
      const peal::RotationBlock<double> b(w, a);
      const auto A = b.A(1.0);
      const auto Ald = rotation_ld(w, a, 1, 1, 0, false), Ald1 = rotation_ld(w, a, 1, 0, 1, false);
      CAPTURE(w, a);
      check_exact(A(0, 0), Ald(0), std::fabs(a));
      check_exact(A(1, 0), Ald(1), std::fabs(a));
      check_exact(A(0, 1), Ald1(0), std::fabs(a));
      check_exact(A(1, 1), Ald1(1), std::fabs(a));
      for (const auto& x : {std::array<double, 2>{1, 0}, {0, 1}, {1e-300, 0}, {3, -2}}) {
        CAPTURE(x[0], x[1]);
        Eigen::Vector2d q(x[0], x[1]), k(x[0], x[1]);
        b.encode_query(q, 1.0);
        const auto rq = rotation_ld(w, a, 1, x[0], x[1], true);
        check_exact(q(0), rq(0), std::fabs(a));
        check_exact(q(1), rq(1), std::fabs(a));
        b.encode_key(k, -1.0);
        const auto rk = rotation_ld(w, a, 1, x[0], x[1], false);
        check_exact(k(0), rk(0), std::fabs(a));
        check_exact(k(1), rk(1), std::fabs(a));
        const Eigen::Vector2d e0(1, 0), xv(x[0], x[1]);
        check_exact(b.score(e0, 1.0, xv, 0.0), rk(0), std::fabs(a));  // e0^T A(1) x
      }
    }
  }
  // float: e^{100} = 2.7e43 is past FLT_MAX, e^{100}·1e-30 = 2.7e13 is not.
  const peal::RotationBlock<float> bf(0.0L, 100.0);
  Eigen::Vector2f qf(1e-30f, 0.0f);
  bf.encode_query(qf, 1.0);
  CHECK(qf(0) == Approx(1e-30 * std::exp(100.0)).epsilon(1e-6));
  CHECK(qf(1) == 0.0f);
}

TEST_CASE("RotationJordanBlock and compositions past the range: ±inf or finite, never NaN") {
  // RotationJordanBlock<2>{ω, a}: block (i, i+j) = τ^j/j! e^{aτ} R(-ωτ).
  for (double w : {0.0, 0.7}) {
    for (double a : {1000.0, 710.0}) {
      const peal::RotationJordanBlock<2, double> b(w, a);
      const auto A = b.A(1.0);
      CAPTURE(w, a);
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
          const int bi = i / 2, bj = j / 2;
          long double want = 0;
          if (bj >= bi) {
            const auto col = rotation_ld(w, a, 1, j % 2 == 0, j % 2 == 1, false);
            want = col(i % 2);  // τ^(bj-bi)/(bj-bi)! = 1 at τ = 1
          }
          CAPTURE(i, j);
          check_exact(A(i, j), want, std::fabs(a));
        }
      for (const auto& x :
           {std::array<double, 4>{1, 0, 0, 0}, {0, 0, 1, 0}, {1e-300, 0, 0, 2e-300}}) {
        Eigen::Vector4d q(x[0], x[1], x[2], x[3]);
        b.encode_query(q, 1.0);  // F = A^T: block row i = Σ_{j ≤ i} (R^T-side) blocks
        // A^T q: blocks (i, j) of A^T are A(j, i)^T = R(-ωτ)^T e^{aτ} for j ≤ i.
        const auto r0 = rotation_ld(w, a, 1, x[0], x[1], true),
                   r1 = rotation_ld(w, a, 1, x[2], x[3], true);
        CAPTURE(x[0], x[2], x[3]);
        check_exact(q(0), r0(0), std::fabs(a));
        check_exact(q(1), r0(1), std::fabs(a));
        check_exact(q(2), r0(0) + r1(0), std::fabs(a));
        check_exact(q(3), r0(1) + r1(1), std::fabs(a));
      }
    }
  }
  // A composition: the Jordan part overflows, the pass-through and the decaying part do not.
  const auto e = peal::compose(peal::JordanBlock<2, double>(1000), peal::PassThrough<double>(2),
                               peal::RealBlock<double>(-1000));
  Eigen::Matrix<double, 5, 1> q;
  q << 1, 0, 3, 4, 1e300;
  e.encode_query(q, 1.0);  // F(1) = A(1)^T: (e^{1000}, e^{1000}) from (1, 0)
  CHECK(q(0) == std::numeric_limits<double>::infinity());
  CHECK(q(1) == std::numeric_limits<double>::infinity());
  CHECK(q(2) == 3);
  CHECK(q(3) == 4);
  check_exact(q(4), 1e300L * std::exp(-1000.0L), 1000);
  // Its score: the Jordan part's share is exactly 0 when q_J = (0, 1), k_J = (1, 0).
  Eigen::Matrix<double, 5, 1> qs, ks;
  qs << 0, 1, 1, 0, 0;
  ks << 1, 0, 2, 0, 0;
  CHECK(e.score(qs, 1.0, ks, 0.0) == 2.0);
  qs << 1, 0, 1, 0, 0;
  CHECK(e.score(qs, 1.0, ks, 0.0) == std::numeric_limits<double>::infinity());
  qs << -1, 0, 1, 0, 0;
  CHECK(e.score(qs, 1.0, ks, 0.0) == -std::numeric_limits<double>::infinity());
}
