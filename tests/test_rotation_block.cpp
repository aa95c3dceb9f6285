// RotationBlock hard cases by name: omega -> 0, huge |tau| (angles reduced exactly),
// translation invariance of the factored (encode) path at absolute times up to 1.7e9, and
// the RoPE sign convention of docs/design.md §1.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <peal/peal.hpp>

#include "tolerances.hpp"

using peal_test::Tol;

TEST_CASE("RotationBlock encodes a query as R(omega t) q: RoPE") {
  const double w = 0.3, t = 2.0;
  const peal::RotationBlock<double> b(w);
  Eigen::Vector2d q(1.0, 2.0), k(-0.5, 0.25);
  Eigen::Vector2d qe = q, ke = k;
  b.encode_query(qe, t);
  b.encode_key(ke, 5.0);
  // Relative to each entry: roundings(4), as tight as ever (the generic bound
  // entry(2) (|q0 c| + |q1 s|) is ~10x wider at the cancellation in qe(0)). It holds because
  // q and k are exact small binary fractions (the products are exact): what remains is one
  // ulp of cos/sin on either side, the angle w t rounded once, and the final sum.
  const double c = std::cos(w * t), s = std::sin(w * t);
  const double c5 = std::cos(w * 5.0), s5 = std::sin(w * 5.0);
  const double want[4] = {q(0) * c - q(1) * s, q(0) * s + q(1) * c, k(0) * c5 - k(1) * s5,
                          k(0) * s5 + k(1) * c5};
  const double got[4] = {qe(0), qe(1), ke(0), ke(1)};
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i, got[i], want[i]);
    CHECK(std::abs(got[i] - want[i]) <= Tol<double>::roundings(4) * std::abs(want[i]));
  }
}

TEST_CASE("RotationBlock with omega -> 0 and a -> 0") {
  for (double w : {0.0, 1e-300, -1e-300, 1e-17}) {
    const peal::RotationBlock<double> b(w, 0.0);
    const auto a = b.A(1e6);
    // |w tau| <= 1e-11: cos is 1 - O(1e-23), which rounds to exactly 1; sin(w tau) is
    // w tau to ~1e-22 relative, rounded once on both sides.
    CHECK(a(0, 0) == 1.0);
    CHECK(std::cos(w * 1e6) == 1.0);
    CHECK(std::abs(a(0, 1) - std::sin(w * 1e6)) <=
          Tol<double>::roundings(2) * std::abs(std::sin(w * 1e6)));
  }
  // A(1e-8) of omega = a = 1e-8: e^{1e-16} cos(1e-16) = 1 + 1e-16 + O(1e-32) rounds to exactly
  // 1; e^{1e-16} sin(1e-16) = 1e-16 (1 + 1e-16): a few roundings of 1e-16.
  const peal::RotationBlock<double> tiny(1e-8, 1e-8);
  const auto a = tiny.A(1e-8);
  CHECK(a(0, 0) == 1.0);
  CHECK(std::abs(a(0, 1) - 1e-16) <= Tol<double>::roundings(4) * 1e-16);
}

TEST_CASE("RotationBlock angles stay exact at |tau| = 2^40 and beyond") {
  // The float and double blocks reduce (omega_hi + omega_lo) * tau mod 2pi exactly, so
  // A(tau) at 2^40 has entries within a few ulp of the long double block's (whose own
  // angle error is |omega tau| 2^-64 ~ 6e-8 rad at omega = 1: the dominant term).
  for (long double w : {1.0L, 0.1L, 1.0L / 3.0L}) {
    const peal::RotationBlock<double> bd(w);
    const peal::RotationBlock<long double> bl(w);
    for (double tau : {4095.0, 1e6, std::ldexp(1.0, 40), -std::ldexp(1.0, 40)}) {
      // The long double block's angle error, |w tau| eps_long (its phase(|w tau|) / 4,
      // kept as tight as before), plus entry(2) of the double entries (Frobenius norm of
      // the 2x2 difference).
      const long double ref_err = std::abs(w * tau) * Tol<long double>::eps;
      CAPTURE(double(w), tau);
      const long double err = (bd.A(tau).cast<long double>() - bl.A(tau)).norm();
      CHECK(double(err) <= double(ref_err + Tol<double>::entry(2)));
    }
  }
}

TEST_CASE("Pure rotations: the factored score is translation invariant at 1.7e9") {
  // q~ = F(t) q and k~ = G(s) k at absolute times ~1.7e9 (Unix seconds): the only error
  // is the rounding of the times themselves (ulp(1.7e9) = 2.4e-7 s) times omega.
  const peal::Bank<peal::RotationBlock<double>> bank(
      {peal::RotationBlock<double>(1.0), peal::RotationBlock<double>(1e-2),
       peal::RotationBlock<double>(1e-4)},
      peal::Layout::HalfSplit);
  Eigen::VectorXd q = Eigen::VectorXd::LinSpaced(6, -1, 1), k = Eigen::VectorXd::LinSpaced(6, 2, -0.5);
  const double t0 = 1.7e9;
  for (double gap : {0.0, 31.5, -1234.25}) {
    Eigen::VectorXd qa = q, ka = k, qb = q, kb = k;
    bank.encode_query(qa, t0 + gap);
    bank.encode_key(ka, t0);
    bank.encode_query(qb, gap);
    bank.encode_key(kb, 0.0);
    // Both times rounded to double move the lag by lag_rounding (|omega| <= 1); the two
    // 6-term products of exactly rotated unit-scale entries cost entry(6) |q| |k| together.
    const double tol = double(Tol<double>::lag_rounding(t0 + gap, t0) + Tol<double>::entry(6));
    CHECK(std::abs(qa.dot(ka) - qb.dot(kb)) <= q.norm() * k.norm() * tol);
  }
}

// from_params (and so Bank::from_params) takes the stored pair (omega_hi, omega_lo); the
// angle reduction (detail/math/angle.hpp) needs it normalised, |omega_lo| <= ulp(omega_hi)/2
// (what split() returns), so anything else is rejected. Both sides of the bound, for
// several exponents, signs, hi = 0, hi = DBL_MAX, and the long double blocks.
namespace {
template <class Block>
void check_normalised_pairs() {
  using R = typename Block::Real;
  using P = typename Block::Params;
  using Catch::Contains;
  const R inf = std::numeric_limits<R>::infinity();
  for (R hi : {R(1), R(0.75), R(-3), R(1e-8), R(0x1p-1000), std::numeric_limits<R>::max()}) {
    const R ah = std::fabs(hi);
    const R ulp = ah == std::numeric_limits<R>::max() ? ah - std::nextafter(ah, R(0))
                                                      : std::nextafter(ah, inf) - ah;
    const R half = ulp / 2;
    CAPTURE(double(hi), double(half));
    for (R sign : {R(1), R(-1)}) {
      REQUIRE_NOTHROW(Block::from_params(P{hi, sign * half, R(0)}));
      REQUIRE(Block::from_params(P{hi, sign * half, R(0)}).params()[1] == sign * half);
      REQUIRE_THROWS_WITH(Block::from_params(P{hi, sign * std::nextafter(half, inf), R(0)}),
                          Contains("omega_lo") && Contains("normalised"));
    }
    REQUIRE_THROWS_AS(Block::from_params(P{hi, hi / 2, R(0)}), peal::invalid_argument);
  }
  // hi = 0: the pair of omega = 0 is (0, 0); any nonzero lo is not normalised.
  REQUIRE_NOTHROW(Block::from_params(P{R(0), R(0), R(0.5)}));
  REQUIRE_THROWS_AS(Block::from_params(P{R(0), std::numeric_limits<R>::denorm_min(), R(0)}),
                    peal::invalid_argument);
  // Through a Bank: every row is validated.
  using Bank = peal::Bank<Block>;
  typename Bank::ParamArray p(2, 3);
  p << R(1), R(0), R(0), R(0.5), R(0.25), R(0);
  REQUIRE_THROWS_WITH(Bank::from_params(p), Contains("omega_lo"));
  p(1, 1) = std::ldexp(R(1), -std::numeric_limits<R>::digits - 1);  // ulp(0.5)/2
  REQUIRE_NOTHROW(Bank::from_params(p));
}
}  // namespace

TEST_CASE("RotationBlock and RotationJordanBlock: from_params needs a normalised (hi, lo)",
          "[rotation][errors]") {
  check_normalised_pairs<peal::RotationBlock<double>>();
  check_normalised_pairs<peal::RotationBlock<float>>();
  check_normalised_pairs<peal::RotationBlock<long double>>();
  check_normalised_pairs<peal::RotationJordanBlock<2, double>>();
  check_normalised_pairs<peal::RotationJordanBlock<3, long double>>();
  // Pairs from the constructor are normalised, so they round-trip.
  for (long double w : {1.0L / 3.0L, 1e-5L / 7.0L, 0.1L}) {
    const peal::RotationBlock<double> b(w);
    REQUIRE_NOTHROW(peal::RotationBlock<double>::from_params(b.params()));
    const peal::RotationJordanBlock<2, double> j(w, -0.25);
    REQUIRE_NOTHROW((peal::RotationJordanBlock<2, double>::from_params(j.params())));
  }
}

TEST_CASE("RotationBlock: an omega finite in long double but not in Real is rejected",
          "[rotation][errors]") {
  using Catch::Contains;
  // 1e320 is a finite long double; as a double it is inf, and the block used to be built
  // with omega_hi = inf (A(0) then threw, encoded vectors were NaN).
  REQUIRE_THROWS_WITH(peal::RotationBlock<double>(1e320L), Contains("omega"));
  REQUIRE_THROWS_WITH(peal::RotationBlock<float>(-1e320L), Contains("omega"));
  REQUIRE_THROWS_WITH((peal::RotationJordanBlock<2, double>(1e320L)), Contains("omega"));
  REQUIRE_NOTHROW(
      peal::RotationBlock<double>(static_cast<long double>(std::numeric_limits<double>::max())));
  REQUIRE_NOTHROW(peal::RotationBlock<long double>(1e320L));  // long double blocks hold it
}
