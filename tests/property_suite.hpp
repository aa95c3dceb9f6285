// The generic property suite (STYLE.md, after Sophus' LieGroupTests and manif's
// MANIF_TEST): every check of docs/design.md §1 for one encoding family and scalar, over
// the regimes of families.hpp. Instantiated for every block, banks, compositions and a
// basis change in test_properties_*.cpp.
#pragma once

#include <catch2/catch.hpp>
#include <unsupported/Eigen/MatrixFunctions>

#include <algorithm>
#include <cmath>
#include <random>

#include "families.hpp"
#include "tolerances.hpp"

namespace peal_test {

using LMatrix = peal::Matrix<long double>;
using LVector = peal::Vector<long double>;

template <class M>
LMatrix to_long(const M& m) {
  return m.template cast<long double>();
}
inline long double norm(const LMatrix& m) { return m.norm(); }

// Conditioning of the basis for BasisChange (errors of P A_J P^{-1} scale with it).
template <class E>
long double basis_kappa(const E&) { return 1.0L; }
template <class E>
long double basis_kappa(const peal::BasisChange<E>& e) {
  return to_long(e.P()).norm() * to_long(e.P_inverse()).norm();
}

// Reference exp(tau X) in long double from Eigen's MatrixFunctions. For a basis change
// X = P J P^{-1} at large |tau X| the scaling-and-squaring exponential of the non-normal
// X is itself off by up to ~|tau X| eps kappa(P)^(number of squarings) (each squaring can
// amplify the relative error by kappa); there the reference is P expm(tau J) P^{-1}, with
// expm(tau J) the exponential the suite checks on its own for the inner encoding.
template <class E>
LMatrix reference_exp(const E& e, long double tau) {
  return (tau * to_long(e.generator())).exp();
}
template <class E>
LMatrix reference_exp(const peal::BasisChange<E>& e, long double tau) {
  const LMatrix X = to_long(e.generator());
  if (std::abs(tau) * X.norm() <= 64) return (tau * X).exp();
  const LMatrix J = to_long(e.inner().generator());
  return to_long(e.P()) * (tau * J).exp() * to_long(e.P_inverse());
}

template <class Case>
void run_property_suite() {
  using Fam = typename Case::Family;
  using S = typename Case::Scalar;
  using T = Tol<S>;
  using Real = peal::real_t<S>;

  for (Regime regime : {Regime::Zero, Regime::Tiny, Regime::Random, Regime::Large}) {
    for (int trial = 0; trial < 6; ++trial) {
      const auto seed = 1000u * unsigned(regime) + unsigned(trial);
      std::mt19937_64 rng_e(seed), rng_l(seed), rng_t(seed + 77);
      Draw de{rng_e, regime}, dl{rng_l, regime}, dt{rng_t, regime};
      const auto e = Fam::template build<S>(de);
      const auto el = Fam::template build<long double>(dl);  // same parameters
      const int n = e.dim();
      const long double kappa = basis_kappa(e);
      const long double k2 = kappa * kappa;
      const LMatrix X = to_long(el.generator());
      const long double xn = X.norm();
      const Real t = Real(dt.time()), s = Real(dt.time()), r = Real(dt.time());
      CAPTURE(Fam::name, n, int(regime), trial, double(t), double(s), double(r));
      const auto A = [&](Real tau) { return to_long(e.A(tau)); };

      // A(0) = I: exactly for every closed form (exact 1 and 0 at tau = 0); a basis change
      // P I P^{-1} is rounded, within kappa(P) entry(n).
      if (kappa == 1.0L) {
        REQUIRE((e.A(Real(0)).array() == peal::Matrix<S>::Identity(n, n).array()).all());
      } else {
        CHECK(double(norm(A(Real(0)) - LMatrix::Identity(n, n))) <= double(kappa * T::entry(n)));
      }

      // Group law A(s)A(t) = A(s+t), inverse A(t)A(-t) = I, associativity.
      {
        const LMatrix lhs = to_long((e.A(s) * e.A(t)).eval());
        const long double scale = norm(A(s)) * norm(A(t));
        const long double tol =
            k2 * (T::entry(n) * scale + T::phase(xn * (std::abs(s) + std::abs(t))) * norm(A(s + t)));
        CHECK(double(norm(lhs - A(s + t))) <= double(tol));

        const LMatrix inv = to_long((e.A(t) * e.A(-t)).eval());
        CHECK(double(norm(inv - LMatrix::Identity(n, n))) <=
              double(k2 * T::entry(n) * norm(A(t)) * norm(A(-t))));

        const LMatrix left = to_long(((e.A(r) * e.A(s)) * e.A(t)).eval());
        const LMatrix right = to_long((e.A(r) * (e.A(s) * e.A(t))).eval());
        CHECK(double(norm(left - right)) <=
              double(2 * k2 * T::entry(n) * norm(A(r)) * norm(A(s)) * norm(A(t))));
      }

      // F(t)^T G(s) = A(t - s).
      {
        const LMatrix fg = to_long((e.F(t).transpose() * e.G(s)).eval());
        const long double tol = k2 * (T::entry(n) * norm(A(t)) * norm(A(-s)) +
                                      T::phase(xn * (std::abs(t) + std::abs(s))) * norm(A(t - s)));
        CHECK(double(norm(fg - A(t - s))) <= double(tol));
      }

      // Translation invariance: score(q, t+c, k, s+c) = score(q, t, k, s), relative to the
      // natural size of the score |q| |A(t-s)| |k| (the score itself may cancel to ~0).
      {
        peal::Vector<S> q(n), k(n);
        for (int i = 0; i < n; ++i) q(i) = S(dt.uniform(-1, 1)), k(i) = S(dt.uniform(-1, 1));
        const long double ref = e.score(q, t, k, s);
        const long double size = to_long(q).norm() * norm(A(t - s)) * to_long(k).norm();
        for (double c : {1e3, -1e3, 1e6, -1e6, dt.uniform(-1e6, 1e6)}) {
          const long double moved = e.score(q, t + Real(c), k, s + Real(c));
          const long double tol =
              k2 * (T::entry(2 * n) + T::phase(xn * (std::abs(t) + std::abs(s) + 2 * std::abs(c)))) *
              size;
          CHECK(double(std::abs(moved - ref)) <= double(tol));
        }
        // The factored path agrees with the reference score at moderate times.
        peal::Vector<S> qe = q, ke = k;
        e.encode_query(qe, t);
        e.encode_key(ke, s);
        const long double factored = qe.template cast<long double>().dot(ke.template cast<long double>());
        CHECK(double(std::abs(factored - ref)) <=
              double(k2 * (T::entry(2 * n) * to_long(q).norm() * norm(A(t)) * norm(A(-s)) *
                               to_long(k).norm() +
                           T::phase(xn * (std::abs(t) + std::abs(s))) * size)));
      }

      // Closed form against Eigen's matrix exponential of tau X, in long double.
      for (Real tau : {t, s, Real(0.5) * t}) {
        const LMatrix ref = reference_exp(el, static_cast<long double>(tau));
        const long double x = xn * std::abs(static_cast<long double>(tau));
        const long double tol = k2 * (T::entry(n) + T::phase(x) + T::expm(x)) * norm(ref);
        CHECK(double(norm(A(tau) - ref)) <= double(tol));
      }

      // The derivative at 0 is X: central difference.
      {
        const Real h = Real(T::diff_step(xn));
        const LMatrix d = (A(h) - A(-h)) / (2.0L * static_cast<long double>(h));
        const long double tol = k2 * (static_cast<long double>(h) * h * std::pow(xn, 3) / 3.0L +
                                      (T::entry(n) * (norm(A(h)) + norm(A(-h))) +
                                       T::phase(xn * h) * 2 * norm(A(h))) /
                                          (2.0L * h)) +
                                T::entry(n) * xn;
        CHECK(double(norm(d - to_long(e.generator()))) <= double(tol));
      }
    }
  }

  // Drift: A(delta) applied N = 1e4 times against A(N delta). Componentwise first-order
  // bound for a product of N matrices: |fl(prod) - prod| <= N (n + 2) eps prod|A_i|, so
  // any systematic error in A(delta) above ~n eps per step is caught.
  {
    std::mt19937_64 rng(4242);
    Draw d{rng, Regime::Random};
    const auto e = Fam::template build<S>(d);
    const int n = e.dim();
    const int N = 10000;
    const Real delta = Real(1e-4);
    const peal::Matrix<S> step = e.A(delta);
    peal::Matrix<S> prod = peal::Matrix<S>::Identity(n, n);
    LMatrix bound = LMatrix::Identity(n, n);
    const LMatrix abs_step = to_long(step).cwiseAbs();
    for (int i = 0; i < N; ++i) {
      prod = (step * prod).eval();
      bound = (abs_step * bound).eval();
    }
    const LMatrix target = to_long(e.A(Real(N) * delta));
    const long double kappa = basis_kappa(e);
    const LMatrix diff = (to_long(prod) - target).cwiseAbs();
    const LMatrix allowed =
        (kappa * kappa * 2.0L * N * (n + 2) * T::eps) * bound +
        LMatrix::Constant(n, n, T::entry(n) * target.norm());
    CAPTURE(Fam::name, n);
    CHECK(((diff.array() <= allowed.array())).all());
  }
}

}  // namespace peal_test
