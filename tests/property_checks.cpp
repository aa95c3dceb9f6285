// The property suite's checks (declared in property_suite.hpp), compiled once per scalar type:
// every check of docs/design.md §1 for one encoding, over the regimes of families.hpp.
#include "property_suite.hpp"

#include <unsupported/Eigen/MatrixFunctions>

#include <algorithm>
#include <cmath>
#include <random>

namespace peal_test {
namespace {

using property_detail::to_long;
long double norm(const LMatrix& m) { return m.norm(); }

// Largest |Re lambda| of X: the growth rate of e^{tau X}. The diagonal of X holds the
// real parts of every canonical block (a, lambda; docs/design.md §1), banks and
// compositions included; a basis change has those of its inner encoding.
template <class S>
long double growth_rate(const PropertyCase<S>& c) {
  const LMatrix& X = c.twin_J.size() > 0 ? c.twin_J : c.twin_X;
  return X.diagonal().cwiseAbs().maxCoeff();
}

// F(t) q . G(s) k with both factors applied in S by encode_query / encode_key, summed in
// long double; w = sum_i (|F(t)| |q|)_i (|G(s)| |k|)_i from the long double twin, the size
// the rounding of the encoded entries is relative to.
template <class S, class R>
long double factored_score(const PropertyCase<S>& c, const peal::Vector<S>& q, R t,
                           const peal::Vector<S>& k, R s, long double& w) {
  peal::Vector<S> qe = q, ke = k;
  c.encode_query(qe, t);
  c.encode_key(ke, s);
  const LVector mq = c.twin_F(t).cwiseAbs() * to_long(q).cwiseAbs();
  const LVector mk = c.twin_G(s).cwiseAbs() * to_long(k).cwiseAbs();
  w = mq.dot(mk);
  return qe.template cast<long double>().dot(ke.template cast<long double>());
}

// Reference exp(tau X) in long double from Eigen's MatrixFunctions. For a basis change
// X = P J P^{-1} at large |tau X| the scaling-and-squaring exponential of the non-normal
// X is itself off by up to ~|tau X| eps kappa(P)^(number of squarings) (each squaring can
// amplify the relative error by kappa); there the reference is P expm(tau J) P^{-1}, with
// expm(tau J) the exponential the suite checks on its own for the inner encoding.
template <class S>
LMatrix reference_exp(const PropertyCase<S>& c, long double tau) {
  const LMatrix& X = c.twin_X;
  if (c.twin_J.size() == 0 || std::abs(tau) * X.norm() <= 64) return (tau * X).exp();
  return c.twin_P * (tau * c.twin_J).exp() * c.twin_P_inverse;
}

}  // namespace

template <class S>
void run_property_checks(const char* name, const PropertyCaseMaker<S>& make) {
  using T = Tol<S>;
  using Real = peal::real_t<S>;
  int shifts_tried = 0, shifts_strong = 0;

  for (Regime regime : {Regime::Zero, Regime::Tiny, Regime::Random, Regime::Large}) {
    for (int trial = 0; trial < 6; ++trial) {
      const auto seed = 1000u * unsigned(regime) + unsigned(trial);
      std::mt19937_64 rng_e(seed), rng_l(seed), rng_t(seed + 77);
      Draw de{rng_e, regime}, dl{rng_l, regime}, dt{rng_t, regime};
      const PropertyCase<S> e = make(de, dl);  // e and its long double twin: same parameters
      const int n = e.n;
      const long double kappa = e.kappa;
      const long double k2 = kappa * kappa;
      const LMatrix& X = e.twin_X;
      const long double xn = X.norm();
      const Real t = Real(dt.time()), s = Real(dt.time()), r = Real(dt.time());
      CAPTURE(name, n, int(regime), trial, double(t), double(s), double(r));
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

      // Translation invariance through the factors that really act: with q~ = F(t) q and
      // k~ = G(s) k encoded in S by encode_query / encode_key,
      //   F(t + c) q . G(s + c) k = F(t) q . G(s) k
      // (a wrong sign or time in either factor breaks it; score() would go through the lag
      // t - s and could not). Shifts c up to 1e6, where F and G stay inside the range of S.
      {
        peal::Vector<S> q(n), k(n);
        for (int i = 0; i < n; ++i) q(i) = S(dt.uniform(-1, 1)), k(i) = S(dt.uniform(-1, 1));
        const long double size = to_long(q).norm() * norm(A(t - s)) * to_long(k).norm();
        const long double rho = growth_rate(e);
        const long double range = T::range_exponent();
        long double w0 = 0;
        const long double ref = factored_score(e, q, t, k, s, w0);
        // The factored path agrees with the reference score at moderate times.
        CHECK(double(std::abs(ref - static_cast<long double>(e.score(q, t, k, s)))) <=
              double(k2 * (T::entry(2 * n) * to_long(q).norm() * norm(A(t)) * norm(A(-s)) *
                               to_long(k).norm() +
                           T::phase(xn * (std::abs(t) + std::abs(s))) * size)));
        for (double c : {0.75, -2.5, 1e3, -1e3, 1e6, -1e6, dt.uniform(-1e6, 1e6)}) {
          const Real tc = t + Real(c), sc = s + Real(c);
          const long double reach = std::max(std::abs(tc), std::abs(sc));
          if (rho * reach > range) continue;  // e^{a t} leaves [max^(-1/4), max^(1/4)]
          const LMatrix Fc = e.twin_F(tc), Gc = e.twin_G(sc);
          const long double cap = std::exp(range);
          if (Fc.cwiseAbs().maxCoeff() > cap || Gc.cwiseAbs().maxCoeff() > cap)
            continue;  // polynomial growth of a Jordan chain past max^(1/4)
          long double wc = 0;
          const long double moved = factored_score(e, q, tc, k, sc, wc);
          const long double tol =
              k2 * (T::encoded_dot(n) * (w0 + wc) +
                    T::phase(xn * (std::abs(tc) + std::abs(sc))) * (size + w0 + wc));
          CAPTURE(c, double(moved), double(ref), double(tol), double(size));
          CHECK(double(std::abs(moved - ref)) <= double(tol));
          shifts_tried += 1;
          shifts_strong += tol <= size / 8;  // a sign flip (an O(size) change) is caught
        }
      }

      // Closed form against Eigen's matrix exponential of tau X, in long double.
      for (Real tau : {t, s, Real(0.5) * t}) {
        const LMatrix ref = reference_exp(e, static_cast<long double>(tau));
        const long double x = xn * std::abs(static_cast<long double>(tau));
        const long double tol = k2 * (T::entry(n) + T::phase(x) + T::expm(x)) * norm(ref);
        CHECK(double(norm(A(tau) - ref)) <= double(tol));
      }

      // The derivative at 0 is X: central difference.
      {
        const Real h = Real(T::diff_step(xn));
        const LMatrix d = (A(h) - A(-h)) / (2.0L * static_cast<long double>(h));
        const long double tol =
            k2 * T::diff_tol(static_cast<long double>(h), xn, n, norm(A(h)), norm(A(-h))) +
            T::entry(n) * xn;  // the generator of the encoding, rounded to S
        CHECK(double(norm(d - to_long(e.generator))) <= double(tol));
      }
    }
  }

  // Every family gets translation checks that can fail on an O(score) error.
  CAPTURE(name, shifts_tried, shifts_strong);
  CHECK(shifts_strong >= 8);

  // Drift: A(delta) applied N = 1e4 times against A(N delta). Componentwise first-order
  // bound for a product of N matrices, Tol::matrix_chain: any systematic error in A(delta)
  // above ~n eps per step is caught.
  {
    std::mt19937_64 rng(4242);
    std::mt19937_64 rng_twin(4242);  // the twin make() builds too; unused here
    Draw d{rng, Regime::Random}, d_twin{rng_twin, Regime::Random};
    const PropertyCase<S> e = make(d, d_twin);
    const int n = e.n;
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
    const long double kappa = e.kappa;
    const LMatrix diff = (to_long(prod) - target).cwiseAbs();
    const LMatrix allowed = (kappa * kappa * T::matrix_chain(N, n)) * bound +
                            LMatrix::Constant(n, n, T::entry(n) * target.norm());
    CAPTURE(name, n);
    CHECK(((diff.array() <= allowed.array())).all());
  }
}

template void run_property_checks<float>(const char*, const PropertyCaseMaker<float>&);
template void run_property_checks<double>(const char*, const PropertyCaseMaker<double>&);
template void run_property_checks<long double>(const char*, const PropertyCaseMaker<long double>&);

}  // namespace peal_test
