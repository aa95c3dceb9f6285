// The derivative checks of tests/test_derivatives*.cpp (include/peal/derivatives.hpp): for a
// family of tests/families.hpp, ∂A(τ)/∂θ_k and ∂A/∂τ of its float, double and long double
// encodings against a fourth-order central difference of their long double twin, and the
// kernels' bilinear forms against the dense matrices. Tolerances: Tol<S>::derivative_tol
// (tests/tolerances.hpp).
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <peal/derivatives.hpp>
#include <random>
#include <string>
#include <vector>

#include "families.hpp"
#include "tolerances.hpp"

namespace peal_test {
namespace derivative_check {


using LD = long double;
using MLD = peal::Matrix<LD>;

inline LD max_abs(const MLD& m) { return m.size() ? m.cwiseAbs().maxCoeff() : LD(0); }

// Each got[x] within rel · mag[x] + floor of ref[x] (the backward tests' comparison: mag holds
// the magnitudes of the terms each reference result sums).
template <class T>
void check_all(const char* what, const std::vector<T>& got, const std::vector<LD>& ref,
               const std::vector<LD>& mag, LD rel, LD floor = 0) {
  REQUIRE(got.size() == ref.size());
  for (std::size_t x = 0; x < got.size(); ++x) {
    INFO(what << "[" << x << "]: " << double(got[x]) << " vs " << double(ref[x]) << ", bound "
              << double(rel * mag[x] + floor));
    CHECK(std::abs(LD(got[x]) - ref[x]) <= rel * mag[x] + floor);
  }
}

// (‖P‖∞ ‖P⁻¹‖∞)²: the max-norm bounds here use the ∞-norm condition number (property_suite.hpp's
// PropertyCase::kappa is the Frobenius one, for its Frobenius bounds), squared for P A_J P⁻¹.
template <class E>
LD kappa2(const E&) {
  return 1;
}
template <class I>
LD kappa2(const peal::BasisChange<I>& b) {
  const LD k = LD(b.P().cwiseAbs().rowwise().sum().maxCoeff()) *
               LD(b.P_inverse().cwiseAbs().rowwise().sum().maxCoeff());
  return k * k;
}

// Query head h's encoding and where its parameters start in the layout of parameters(enc):
// a PerHead's head h after the heads before it ("head[h]."), any other encoding itself at 0.
template <class E>
const E& head_of(const E& e, int) {
  return e;
}
template <class E>
const E& head_of(const peal::PerHead<E>& e, int h) {
  return e.head(h);
}
template <class E>
int head_offset(const E&, int) {
  return 0;
}
template <class E>
int head_offset(const peal::PerHead<E>& e, int h) {
  int o = 0;
  for (int i = 0; i < h; ++i) o += peal::parameter_count(e.head(i));
  return o;
}
// The bounds' sizes over every head: (‖P‖∞ ‖P⁻¹‖∞)² and max |X|.
template <class E>
LD heads_kappa2(const E& e, int heads) {
  LD k = 0;
  for (int h = 0; h < heads; ++h) k = std::max(k, kappa2(head_of(e, h)));
  return k;
}
template <class E>
LD heads_xmax(const E& e, int heads) {
  LD x = 0;
  for (int h = 0; h < heads; ++h) x = std::max(x, max_abs(MLD(head_of(e, h).generator())));
  return x;
}

/// PerHead of H encodings of a family, drawn one after the other (head h: the family's h-th
/// draw), for the backward kernels' per-head overloads.
template <class Fam, int H>
struct PerHeadFam {
  static constexpr const char* name = "PerHead";
  template <class S>
  static auto build(Draw& d) {
    using E = decltype(Fam::template build<S>(d));
    std::vector<E> heads;
    for (int h = 0; h < H; ++h) heads.push_back(Fam::template build<S>(d));
    return peal::PerHead<E>(std::move(heads));
  }
};

// D(h) = (8 (f(h) − f(−h)) − (f(2h) − f(−2h))) / 12h for f(δ) = A at the perturbed argument.
template <class F>
MLD stencil(F&& f, LD h) {
  return (8 * (f(h) - f(-h)) - (f(2 * h) - f(-2 * h))) / (12 * h);
}

struct Checked {
  int matrices = 0;
  LD worst = 0;  // largest error / tolerance
};

// The long double side, once per twin (its type is the same for every S): the stencils at h
// and 2h for every parameter and for τ. The step is S's: Tol<S>::derivative_step is the same
// for every S (it depends on ε_long only).
struct Reference {
  std::vector<MLD> dh, d2h;  // per parameter
  std::vector<LD> h;
  MLD th, t2h;               // in τ
  LD h_tau = 0, a_max = 0, k2 = 1, xn = 0;
  int n = 0;
  std::vector<std::string> names;
};

// Parameters k with k % sample == phase (all when sample is 1): a basis change has d² + a few
// parameters, and run_family rotates the phase so that every one is checked.
template <class EL>
Reference reference(const EL& twin, LD tau, int sample = 1, int phase = 0) {
  Reference r;
  const peal::ParameterSet p = peal::parameters(twin);
  r.names = p.names;
  r.n = twin.dim();
  r.a_max = max_abs(MLD(twin.A(tau)));
  r.k2 = kappa2(twin);
  r.xn = max_abs(MLD(twin.generator()));
  const LD h0 = Tol<double>::derivative_step(tau);
  for (std::size_t k = 0; k < p.size(); ++k) {
    if (int(k % std::size_t(sample)) != phase) {  // not checked this time
      r.h.push_back(0), r.dh.emplace_back(), r.d2h.emplace_back();
      continue;
    }
    auto at = [&](LD delta) {
      std::vector<LD> th = p.values;
      th[k] += delta;
      return MLD(peal::with_parameters(twin, th).A(tau));
    };
    // A stencil of 4h around θ_k keeps its sign (RoPE frequencies must stay positive).
    const LD a = std::abs(p.values[k]), h = a > 0 ? std::min(h0, a / 8) : h0;
    r.h.push_back(h);
    r.dh.push_back(stencil(at, h));
    r.d2h.push_back(stencil(at, 2 * h));
  }
  auto at_tau = [&](LD delta) { return MLD(twin.A(tau + delta)); };
  r.h_tau = h0;
  r.th = stencil(at_tau, h0);
  r.t2h = stencil(at_tau, 2 * h0);
  return r;
}

// Compares ∂A(τ)/∂θ_k and ∂A/∂τ of enc (in S) with the reference of its long double twin.
template <class E>
void check_parameters(const E& enc, const Reference& r, LD tau, Checked& c) {
  using S = typename E::Scalar;
  const auto d = peal::dA(enc, peal::real_t<S>(tau));
  REQUIRE(d.size() == r.dh.size());
  const int n = r.n;
  const LD x = r.xn * std::abs(tau) * n, m = (1 + std::abs(tau)) * r.k2 * r.a_max;
  for (std::size_t k = 0; k < d.size(); ++k) {
    if (r.h[k] == 0) continue;  // not sampled
    const LD err = max_abs(d[k].template cast<LD>() - r.dh[k]);
    const LD tol = Tol<S>::derivative_tol(n, x, m, r.k2 * r.a_max, r.h[k], max_abs(r.dh[k] - r.d2h[k]));
    INFO(r.names[k] << " at tau = " << double(tau) << ": error " << double(err) << ", tolerance "
                    << double(tol));
    CHECK(err <= tol);
    c.worst = std::max(c.worst, err / tol);
    ++c.matrices;
  }
  // ∂A/∂τ = X A(τ), against the same stencil in τ.
  const MLD mine = peal::dA_dtau(enc, peal::real_t<S>(tau)).template cast<LD>();
  const LD tol = Tol<S>::derivative_tol(n, x, (1 + r.xn) * r.k2 * r.a_max * n, r.k2 * r.a_max,
                                        r.h_tau, max_abs(r.th - r.t2h));
  INFO("d/dtau at tau = " << double(tau));
  CHECK(max_abs(mine - r.th) <= tol);
}

// Σ_h u_hᵀ ∂A/∂θ_k v_h from the kernels' bilinear form against the dense matrices, 3 heads.
template <class E>
void check_bilinear(const E& enc, LD tau, std::mt19937_64& rng) {
  using S = typename E::Scalar;
  using R = peal::real_t<S>;
  using MR = Eigen::Matrix<R, Eigen::Dynamic, Eigen::Dynamic>;
  const int n = enc.dim(), H = 3;
  std::uniform_real_distribution<double> u(-1, 1);
  MR U(n, H), V(n, H);
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < H; ++h) U(i, h) = R(u(rng)), V(i, h) = R(u(rng));
  const auto d = peal::dA(enc, R(tau));
  std::vector<R> g(d.size(), R(0));
  peal::encoding_derivatives<E>::bilinear(enc, R(tau), U, V, g.data(), 1);
  const MLD a = MLD(enc.A(R(tau)).template cast<LD>());
  const LD m = (1 + std::abs(tau)) * kappa2(enc) * max_abs(a);
  const LD mag = LD(U.cwiseAbs().sum()) * LD(V.cwiseAbs().sum()) * m;
  for (std::size_t k = 0; k < d.size(); ++k) {
    const MLD dk = d[k].template cast<LD>();
    const LD ref = (U.template cast<LD>().array() * (dk * V.template cast<LD>()).array()).sum();
    CHECK(std::abs(LD(g[k]) - ref) <= Tol<S>::entry(n) * mag);
  }
  const MLD xa = MLD(peal::dA_dtau(enc, R(tau)).template cast<LD>());
  const LD ref = (U.template cast<LD>().array() * (xa * V.template cast<LD>()).array()).sum();
  const LD xn = max_abs(MLD(enc.generator().template cast<LD>()));
  CHECK(std::abs(LD(peal::encoding_derivatives<E>::tau_form(enc, R(tau), U, V)) - ref) <=
        Tol<S>::entry(n) * LD(U.cwiseAbs().sum()) * LD(V.cwiseAbs().sum()) * (1 + xn) * n *
            kappa2(enc) * max_abs(a));
}

// One family in float (unless WithFloat is false), double and long double: each encoding's
// long double twin (with its parameters exactly: float P entries, double rates) gives the
// reference. Sample > 1: each case checks every sample-th parameter, from a phase that moves
// with the case (12 cases per scalar: every parameter is checked 12 / sample times).
template <class Fam, bool WithFloat = true, int Sample = 1>
void run_family() {
  Checked c;
  for (Regime regime : {Regime::Zero, Regime::Tiny, Regime::Random, Regime::Large}) {
    for (int trial = 0; trial < 3; ++trial) {
      const auto seed = std::uint64_t(1000 * int(regime) + trial + 17);
      INFO(Fam::name << ", regime " << int(regime) << ", trial " << trial);
      auto run = [&](auto scalar) {
        using S = decltype(scalar);
        std::mt19937_64 rng_e(seed), rng_l(seed), rng_t(seed + 77);
        Draw de{rng_e, regime}, dl{rng_l, regime}, dt{rng_t, regime};
        const auto enc = Fam::template build<S>(de);
        const auto twin = peal::with_parameters(Fam::template build<LD>(dl),
                                                peal::parameters(enc).values);
        const LD tau = LD(peal::real_t<S>(dt.time()));
        INFO("scalar of " << sizeof(S) << " bytes");
        const int phase = (4 * trial + int(regime)) % Sample;
        check_parameters(enc, reference(twin, tau, Sample, phase), tau, c);
        check_bilinear(enc, tau, rng_t);
      };
      if constexpr (WithFloat) run(float());
      run(double());
      run(LD());
    }
  }
  INFO("worst error / tolerance " << double(c.worst));
  CHECK(c.matrices > 0);
}

}  // namespace derivative_check
}  // namespace peal_test
