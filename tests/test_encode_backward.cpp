// Tests of include/peal/encode_backward.hpp: encode_queries_backward and encode_keys_backward
// for compositions, a basis change, RoPE (partial rotary, at positions near 1.7e9), xPos, RetNet
// and ALiBi's Jordan block, and PerHead (its heads' backward on their
// slices, bitwise; its loss derivative), float and double storage, irregular positions: dq / dk against
// F(t)ᵀ G and G(s)ᵀ G of the long double twin, the parameter and position gradients against
// the dense derivatives of the twin (derivatives.hpp, themselves checked against central
// differences in test_derivatives.cpp) and, end to end, against a central difference of the
// loss L(θ) = Σ ⟨G, encoded rows⟩; in place = out of place bitwise; gradients add up; bad
// input throws and writes nothing. The rotation banks' fused pass: dq bitwise the forward
// kernel at the negated positions, in place, its gradients against the staged path, threads.
//
// Storage: double for every family, float for a composition, RoPE and xPos (check_family).
// Tolerances (tests/tolerances.hpp): dq, dk per element as the encode kernels they run
// (Tol<C>::encode, C the arithmetic type); each parameter or position gradient
// Σ_i (Tol<double>::derivative(n, x_i) + Tol<double>::roundings(tokens)) M_i, M_i = Σ_h
// |u_h|₁ |v_h|₁ (1 + |τ_i|) κ² ‖A(τ_i)‖_max (the bound of test_derivatives.cpp per token,
// summed over tokens in double).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <peal/encode_backward.hpp>
#include <peal/per_head.hpp>
#include <random>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "derivative_check.hpp"
#include "families.hpp"
#include "tolerances.hpp"

using namespace peal_test;

namespace {

using LD = long double;
using MLD = peal::Matrix<LD>;
using peal::Index;
using peal::TensorView;

using peal_test::derivative_check::kappa2;   // (‖P‖∞ ‖P⁻¹‖∞)², 1 without a basis change
using peal_test::derivative_check::max_abs;

template <class T>
LD ld(T x) {
  return LD(peal::detail::to_arith<double>(x));
}

enum class Side { query, key };

// ∂F(t)/∂θ_k or ∂G(s)/∂θ_k (d), and ∂F/∂t or ∂G/∂s (dpos), dense, in long double.
struct Factor {
  std::vector<MLD> d;
  MLD dpos;
};
// F(t) = A(t)ᵀ, G(s) = A(−s): the derivatives of A (derivatives.hpp, checked against central
// differences in test_derivatives.cpp), transposed for F; ∂G/∂s = −X A(−s).
template <class E>
Factor factor_derivatives(const E& e, Side side, LD p) {
  Factor f;
  const LD tau = side == Side::query ? p : -p;
  for (const MLD& m : peal::dA(e, tau)) f.d.push_back(side == Side::query ? MLD(m.transpose()) : m);
  const MLD xa = peal::dA_dtau(e, tau);
  f.dpos = side == Side::query ? MLD(xa.transpose()) : MLD(-xa);
  return f;
}
// A basis change: F(t) = A_J(t)ᵀ Pᵀ, G(s) = A_J(−s) P⁻¹ (basis_change.hpp), so
// ∂F/∂θ_J = ∂A_J(t)ᵀ Pᵀ, ∂F/∂P_ij = A_J(t)ᵀ E_ji; ∂G/∂θ_J = ∂A_J(−s) P⁻¹,
// ∂G/∂P_ij = −A_J(−s) P⁻¹ E_ij P⁻¹ (d(P⁻¹) = −P⁻¹ dP P⁻¹).
template <class I>
Factor factor_derivatives(const peal::BasisChange<I>& e, Side side, LD p) {
  const bool q = side == Side::query;
  const LD tau = q ? p : -p;
  const MLD P = e.P(), Pi = e.P_inverse(), aj = e.inner().A(tau);
  Factor f;
  for (const MLD& m : peal::dA(e.inner(), tau))
    f.d.push_back(q ? MLD(m.transpose() * P.transpose()) : MLD(m * Pi));
  const int n = e.dim();
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      MLD E = MLD::Zero(n, n);
      E(i, j) = 1;
      f.d.push_back(q ? MLD(aj.transpose() * E.transpose()) : MLD(-(aj * Pi * E * Pi)));
    }
  const MLD xa = peal::dA_dtau(e.inner(), tau);
  f.dpos = q ? MLD(xa.transpose() * P.transpose()) : MLD(-(xa * Pi));
  return f;
}

template <class Fam, class T>
struct Setup {
  using E = decltype(Fam::template build<double>(std::declval<Draw&>()));
  using EL = decltype(Fam::template build<LD>(std::declval<Draw&>()));
  E enc;
  EL twin;
  int tokens, heads, dim;
  std::vector<double> pos;
  std::vector<T> x, g;

  static Setup make(int tokens, int heads, double lo, double hi, std::uint64_t seed) {
    std::mt19937_64 re(seed), rl(seed), rr(seed + 5);
    // Large: rates ~1e-3, so that compositions stay in range over thousands of positions.
    const Regime regime = hi - lo > 10 ? Regime::Large : Regime::Random;
    Draw de{re, regime}, dl{rl, regime};
    auto e = Fam::template build<double>(de);
    auto tw = peal::with_parameters(Fam::template build<LD>(dl), peal::parameters(e).values);
    Setup s{std::move(e), std::move(tw), tokens, heads, 0, {}, {}, {}};
    s.dim = s.enc.dim();
    std::uniform_real_distribution<double> u(-1, 1), p(lo, hi);
    for (int i = 0; i < tokens; ++i) s.pos.push_back(p(rr));
    const std::size_t n = std::size_t(tokens) * std::size_t(heads) * std::size_t(s.dim);
    for (std::size_t i = 0; i < n; ++i) s.x.push_back(T(u(rr))), s.g.push_back(T(u(rr)));
    return s;
  }
  TensorView<const T> view(const std::vector<T>& v) const {
    return TensorView<const T>(v.data(), tokens, heads, dim);
  }
};

// The encoding of head h: the encoding itself, or head h of a PerHead.
template <class E>
const E& at(const E& e, int) {
  return e;
}
template <class E>
const E& at(const peal::PerHead<E>& e, int h) {
  return e.head(h);
}

// A family drawn once per head, as a PerHead (RoPE-Mixed: frequencies per head); two heads,
// the head count of check_loss_difference's rows.
template <class Fam>
struct PerHeadOf {
  static constexpr const char* name = "PerHead";
  template <class S>
  static auto build(Draw& d) {
    using E = decltype(Fam::template build<S>(d));
    std::vector<E> heads;
    for (int h = 0; h < 2; ++h) heads.push_back(Fam::template build<S>(d));
    return peal::PerHead<E>(std::move(heads));
  }
};

// One call of the backward of `side`, checked against the long double references.
template <class Fam, class T>
void check_backward(Side side, int tokens, int heads, double lo, double hi, std::uint64_t seed) {
  auto s = Setup<Fam, T>::make(tokens, heads, lo, hi, seed);
  const int n = s.dim, P = peal::parameter_count(s.enc);
  std::vector<T> dx(s.x.size());
  std::vector<double> gp(std::size_t(P), 0.0), gt(std::size_t(tokens), 0.0);
  TensorView<T> out(dx.data(), tokens, heads, n);
  const peal::Positions pos(s.pos);
  if (side == Side::query)
    peal::encode_queries_backward(s.enc, s.view(s.x), pos, s.view(s.g), out, {&gp, &gt});
  else
    peal::encode_keys_backward(s.enc, s.view(s.x), pos, s.view(s.g), out, {&gp, &gt});

  using C = peal::detail::arith_t<T, T>;
  std::vector<LD> rp(std::size_t(P), 0), tp(std::size_t(P), 0);
  const LD k2 = kappa2(s.twin), xn = max_abs(MLD(s.twin.generator()));
  for (int i = 0; i < tokens; ++i) {
    const LD p = LD(s.pos[std::size_t(i)]), tau = side == Side::query ? p : -p;
    // The encoded row is M x, M = F(t) or G(s); its derivatives in θ and in the position.
    const MLD M = side == Side::query ? MLD(s.twin.F(p)) : MLD(s.twin.G(p));
    const Factor f = factor_derivatives(s.twin, side, p);
    const MLD a = s.twin.A(tau);
    const LD m = (1 + std::abs(tau)) * k2 * max_abs(a), x = xn * std::abs(tau) * n;
    LD rt = 0, mt = 0;
    for (int h = 0; h < heads; ++h) {
      peal::Vector<LD> xv(n), gv(n);
      for (int j = 0; j < n; ++j) xv(j) = ld(s.x[std::size_t((i * heads + h) * n + j)]),
                                  gv(j) = ld(s.g[std::size_t((i * heads + h) * n + j)]);
      const peal::Vector<LD> ref = M.transpose() * gv;  // dq = F(t)ᵀ g, dk = G(s)ᵀ g
      const MLD aa = M.transpose().cwiseAbs();
      const peal::Vector<LD> mag = aa * gv.cwiseAbs();
      for (int j = 0; j < n; ++j) {
        const LD tol = Tol<C>::encode(n, mag(j), ref(j), Tol<C>::template storage_eps<T>(),
                                      LD(Tol<T>::underflow()), Tol<double>::phase(x) * k2,
                                      Tol<double>::angle_eps() * aa.row(j).sum() * gv.cwiseAbs().sum());
        const LD got = ld(out(i, h, j));
        INFO(Fam::name << " token " << i << " head " << h << " elem " << j << ": " << double(got)
                       << " vs " << double(ref(j)));
        CHECK(std::abs(got - ref(j)) <= tol);
      }
      for (int k = 0; k < P; ++k) rp[std::size_t(k)] += gv.dot(f.d[std::size_t(k)] * xv);
      const LD mi = xv.cwiseAbs().sum() * gv.cwiseAbs().sum();
      for (int k = 0; k < P; ++k)
        tp[std::size_t(k)] += (Tol<double>::derivative(n, x) + Tol<double>::roundings(tokens)) * mi * m;
      rt += gv.dot(f.dpos * xv);
      mt += mi * (1 + xn) * n * k2 * max_abs(a);
    }
    INFO(Fam::name << " position gradient of token " << i);
    CHECK(std::abs(LD(gt[std::size_t(i)]) - rt) <= Tol<double>::derivative(n, x) * mt);
  }
  const peal::ParameterSet names = peal::parameters(s.enc);
  for (int k = 0; k < P; ++k) {
    INFO(Fam::name << " " << names.names[std::size_t(k)] << ": " << gp[std::size_t(k)] << " vs "
                   << double(rp[std::size_t(k)]));
    CHECK(std::abs(LD(gp[std::size_t(k)]) - rp[std::size_t(k)]) <= tp[std::size_t(k)]);
  }
}

// Double storage for every family; float storage (float arithmetic in dq, the staged or the
// direct parameter path over float rows) where With_float: one composition, RoPE, xPos. The
// other families' float paths are the same code (test_encode.cpp checks the forward kernels
// dq runs in every storage), and each float instantiation costs this TU ~4 s of compile.
template <class Fam, bool WithFloat = false>
void check_family(double lo, double hi) {
  for (Side side : {Side::query, Side::key}) {
    check_backward<Fam, double>(side, 7, 3, lo, hi, 11);
    if constexpr (WithFloat) check_backward<Fam, float>(side, 5, 2, lo, hi, 12);
  }
}

// L(θ) = Σ_i Σ_h ⟨g_ih, F_θ(t_i) q_ih⟩ (queries) or ⟨g_ih, G_θ(s_i) k_ih⟩ (keys) in long
// double, its central difference in each θ_k (every sample-th, from 0 for queries and
// sample / 2 for keys) against the parameter gradient.
template <class Fam>
void check_loss_difference(Side side, double lo, double hi, int sample = 1) {
  auto s = Setup<Fam, double>::make(4, 2, lo, hi, 21);
  const int n = s.dim, P = peal::parameter_count(s.enc);
  std::vector<double> gp(std::size_t(P), 0.0);
  const TensorView<double> none;
  if (side == Side::query)
    peal::encode_queries_backward(s.enc, s.view(s.x), peal::Positions(s.pos), s.view(s.g), none, {&gp});
  else
    peal::encode_keys_backward(s.enc, s.view(s.x), peal::Positions(s.pos), s.view(s.g), none, {&gp});
  const std::vector<LD> theta = peal::parameters(s.twin).values;
  auto loss = [&](std::size_t k, LD delta) {
    std::vector<LD> th = theta;
    th[k] += delta;
    const auto e = peal::with_parameters(s.twin, th);
    LD sum = 0;
    for (int i = 0; i < s.tokens; ++i) {
      const LD p = LD(s.pos[std::size_t(i)]);
      for (int h = 0; h < s.heads; ++h) {
        const MLD f = side == Side::query ? MLD(at(e, h).F(p)) : MLD(at(e, h).G(p));
        peal::Vector<LD> xv(n), gv(n);
        for (int j = 0; j < n; ++j) xv(j) = LD(s.x[std::size_t((i * s.heads + h) * n + j)]),
                                    gv(j) = LD(s.g[std::size_t((i * s.heads + h) * n + j)]);
        sum += gv.dot(f * xv);
      }
    }
    return sum;
  };
  // The bound of test_derivatives.cpp (Tol<double>::derivative_tol) over the loss's terms:
  // m = Σ_i Σ_h |x|₁ |g|₁ (1 + |τ_i|) κ² ‖A(τ_i)‖ for the closed form (plus the sum over the
  // tokens and heads in double), a = Σ_i Σ_h |x|₁ |g|₁ κ² ‖A(τ_i)‖ for the stencil's rounding.
  // Per head: a PerHead's heads have their own generator, κ and A.
  LD tmax = 0, m = 0, a = 0, xmax = 0;
  for (int i = 0; i < s.tokens; ++i) {
    const LD p = LD(s.pos[std::size_t(i)]), tau = side == Side::query ? p : -p;
    for (int h = 0; h < s.heads; ++h) {
      const auto& e = at(s.twin, h);
      const LD k2 = kappa2(e), xn = max_abs(MLD(e.generator())), am = max_abs(MLD(e.A(tau)));
      LD xs = 0, gs = 0;
      for (int j = 0; j < n; ++j) xs += std::abs(LD(s.x[std::size_t((i * s.heads + h) * n + j)])),
                                  gs += std::abs(LD(s.g[std::size_t((i * s.heads + h) * n + j)]));
      m += xs * gs * (1 + std::abs(tau)) * k2 * am;
      a += xs * gs * k2 * am;
      xmax = std::max(xmax, xn * std::abs(tau) * n);
    }
    tmax = std::max(tmax, std::abs(p));
  }
  for (int k = side == Side::query ? 0 : sample / 2; k < P; k += sample) {
    const std::size_t kk = std::size_t(k);
    const LD th = std::abs(theta[kk]);
    const LD h0 = Tol<double>::derivative_step(tmax), h = th > 0 ? std::min(h0, th / 8) : h0;
    auto d = [&](LD hh) {
      return (8 * (loss(kk, hh) - loss(kk, -hh)) - (loss(kk, 2 * hh) - loss(kk, -2 * hh))) / (12 * hh);
    };
    const LD dh = d(h), d2h = d(2 * h);
    const LD tol = Tol<double>::derivative_tol(n, xmax, m, a, h, std::abs(dh - d2h)) +
                   Tol<double>::roundings(s.tokens * s.heads) * m;
    INFO(Fam::name << " parameter " << k << ": " << gp[kk] << " vs " << double(dh)
                   << ", tolerance " << double(tol));
    CHECK(std::abs(LD(gp[kk]) - dh) <= tol);
  }
}

using RopePartial = RopeFam<peal::RopeType::Default, peal::Layout::HalfSplit, 16, 50>;
using RopeYarn = RopeFam<peal::RopeType::Yarn, peal::Layout::Interleaved, 16>;

}  // namespace

TEST_CASE("encode backward: compositions and a basis change", "[encode_backward]") {
  check_family<MixedFam, true>(-3, 3);
  check_family<NestedFam>(-3, 3);
  check_family<BasisChangeFam>(-3, 3);
}

TEST_CASE("encode backward: presets at their positions", "[encode_backward]") {
  check_family<RopePartial, true>(1.7e9, 1.7e9 + 4096);  // near 1.7e9 (Unix time in seconds)
  check_family<RopeYarn>(0, 131072);
  check_family<XposFam, true>(0, 4096);
  check_family<RetNetFam<1>>(0, 500);
  check_family<AlibiFam>(0, 8192);
}

TEST_CASE("encode backward: the parameter gradient is the derivative of the loss",
          "[encode_backward]") {
  for (Side side : {Side::query, Side::key}) {
    check_loss_difference<MixedFam>(side, -3, 3);
    check_loss_difference<BasisChangeFam>(side, -2, 2, 5);  // a fifth of its 336, per side
    check_loss_difference<RopePartial>(side, 1.7e9, 1.7e9 + 64);
    check_loss_difference<AlibiFam>(side, 0, 1000);
    check_loss_difference<PerHeadOf<MixedFam>>(side, -3, 3);
    check_loss_difference<PerHeadOf<RopePartial>>(side, 1.7e9, 1.7e9 + 64);
  }
}

// A PerHead's backward is its heads' backward on their slices: dq per head, the parameter
// gradient block by block in the layout of parameters(), the position gradient summed over the
// heads in head order; bitwise, in place and out of place (the heads' backward is checked
// against the long double references above).
TEST_CASE("encode backward: one encoding per head (PerHead)", "[encode_backward]") {
  // Damped rotation banks drawn per head (RoPE-Mixed with a decay): the tuned rotation path.
  using Fam = PerHeadOf<BankFam<RotationFam, peal::Layout::HalfSplit, 4>>;
  for (Side side : {Side::query, Side::key}) {
    auto s = Setup<Fam, float>::make(6, 2, 0, 4096, 31);
    const int n = s.dim, T = s.tokens, P = peal::parameter_count(s.enc);
    const peal::Positions pos(s.pos);
    auto backward = [&](const auto& e, TensorView<const float> x, TensorView<const float> g,
                        TensorView<float> dx, std::vector<double>* gp, std::vector<double>* gt) {
      if (side == Side::query)
        peal::encode_queries_backward(e, x, pos, g, dx, {gp, gt});
      else
        peal::encode_keys_backward(e, x, pos, g, dx, {gp, gt});
    };
    std::vector<float> dx(s.x.size());
    std::vector<double> gp(std::size_t(P), 0.0), gt(std::size_t(T), 0.0);
    backward(s.enc, s.view(s.x), s.view(s.g), TensorView<float>(dx.data(), T, 2, n), &gp, &gt);

    std::vector<double> rp, rt(std::size_t(T), 0.0);
    for (int h = 0; h < 2; ++h) {
      std::vector<float> xh, gh;
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < n; ++j)
          xh.push_back(s.x[std::size_t((i * 2 + h) * n + j)]),
              gh.push_back(s.g[std::size_t((i * 2 + h) * n + j)]);
      std::vector<float> dh(xh.size());
      std::vector<double> ph(std::size_t(peal::parameter_count(s.enc.head(h))), 0.0);
      backward(s.enc.head(h), TensorView<const float>(xh.data(), T, 1, n),
               TensorView<const float>(gh.data(), T, 1, n), TensorView<float>(dh.data(), T, 1, n),
               &ph, &rt);
      rp.insert(rp.end(), ph.begin(), ph.end());
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < n; ++j)
          CHECK(dx[std::size_t((i * 2 + h) * n + j)] == dh[std::size_t(i * n + j)]);
    }
    CHECK(gp == rp);
    CHECK(gt == rt);

    // In place: dq over the gradient's own view.
    std::vector<float> g2 = s.g;
    std::vector<double> gp2(std::size_t(P), 0.0);
    backward(s.enc, s.view(s.x), TensorView<const float>(g2.data(), T, 2, n),
             TensorView<float>(g2.data(), T, 2, n), &gp2, nullptr);
    CHECK(g2 == dx);
    CHECK(gp2 == gp);
  }
  // Whole views are checked before head 0 writes: a view with another head count, and dq
  // over the gradient shifted by one head (each head's slices alone would not overlap).
  auto s = Setup<Fam, float>::make(4, 2, 0, 64, 33);
  const int n = s.dim;
  const peal::Positions pos(s.pos);
  std::vector<double> gp(std::size_t(peal::parameter_count(s.enc)), 0.0), gt(4, 0.0);
  std::vector<float> x3(std::size_t(4 * 3 * n), 1.0f), big(s.g.size() + std::size_t(n), 7.0f);
  const TensorView<const float> v3(x3.data(), 4, 3, n);
  CHECK_THROWS_AS(peal::encode_queries_backward(s.enc, v3, pos, v3, TensorView<float>(), {&gp}),
                  peal::invalid_argument);
  TensorView<float> g0(big.data(), 4, 2, n), g1(big.data() + n, 4, 2, n);
  CHECK_THROWS_AS(peal::encode_keys_backward(s.enc, s.view(s.x), pos, g0, g1, {&gp, &gt}),
                  peal::invalid_argument);
  for (float v : big) CHECK(v == 7.0f);
  for (double v : gp) CHECK(v == 0.0);
  for (double v : gt) CHECK(v == 0.0);
}

TEST_CASE("encode backward: in place, accumulation, dq skipped", "[encode_backward]") {
  auto s = Setup<MixedFam, float>::make(6, 3, -2, 2, 31);
  const int n = s.dim, P = peal::parameter_count(s.enc);
  const peal::Positions pos(s.pos);
  std::vector<float> out(s.g.size()), inplace = s.g;
  std::vector<double> g1(std::size_t(P), 0.0), g2(std::size_t(P), 0.0), t1(6, 0.0);
  peal::encode_keys_backward(s.enc, s.view(s.x), pos, s.view(s.g),
                             TensorView<float>(out.data(), 6, 3, n), {&g1, &t1});
  TensorView<float> io(inplace.data(), 6, 3, n);
  peal::encode_keys_backward(s.enc, s.view(s.x), pos, io, io, {&g2});
  CHECK(out == inplace);  // bitwise
  CHECK(g1 == g2);
  // Gradients are added to: over one token each entry receives one sum, so a second call
  // doubles it exactly (0 + c = c, c + c = 2c).
  const TensorView<const float> x1(s.x.data(), 1, 3, n), d1(s.g.data(), 1, 3, n);
  const peal::Positions p1(s.pos.data(), 1);
  std::vector<double> once(std::size_t(P), 0.0), t2(1, 0.0);
  peal::encode_keys_backward(s.enc, x1, p1, d1, TensorView<float>(), {&once, &t2});
  std::vector<double> twice = once, tt = t2;
  peal::encode_keys_backward(s.enc, x1, p1, d1, TensorView<float>(), {&twice, &tt});
  for (int k = 0; k < P; ++k) CHECK(twice[std::size_t(k)] == 2 * once[std::size_t(k)]);
  CHECK(tt[0] == 2 * t2[0]);
  // A sequence of positions gives what its span gives.
  std::vector<double> seq;
  for (int i = 0; i < 6; ++i) seq.push_back(3.5 + 0.25 * i);
  std::vector<float> a(s.g.size()), b(s.g.size());
  std::vector<double> ga(std::size_t(P), 0.0), gb(std::size_t(P), 0.0);
  peal::encode_queries_backward(s.enc, s.view(s.x), peal::Positions(seq), s.view(s.g),
                                TensorView<float>(a.data(), 6, 3, n), {&ga});
  peal::encode_queries_backward(s.enc, s.view(s.x), peal::Positions::sequence(3.5, 0.25),
                                s.view(s.g), TensorView<float>(b.data(), 6, 3, n), {&gb});
  CHECK(a == b);
  CHECK(ga == gb);
}

TEST_CASE("encode backward: strided or mixed-type rows take the staged path, same gradients",
          "[encode_backward]") {
  // RoPE over contiguous rows reads the storage directly (the pair sums of derivatives.hpp);
  // over an element stride of 2 it stages each token in double (the bilinear forms). Both sum
  // the same products in another order: |a − b| <= 2 N eps Σ|terms| (N = tokens x heads x d
  // products per entry, first order), Σ|terms| <= (1 + |t|) Σ |q| |g| per token.
  auto s = Setup<RopeFam<peal::RopeType::Default, peal::Layout::Interleaved, 16>, float>::make(
      6, 3, 0, 5000, 51);
  const int n = s.dim, P = peal::parameter_count(s.enc);
  std::vector<float> xs(2 * s.x.size()), gs(2 * s.g.size());
  for (std::size_t i = 0; i < s.x.size(); ++i) xs[2 * i] = s.x[i], gs[2 * i] = s.g[i];
  const peal::Strides st{2 * 3 * n, 2 * n, 2};
  const TensorView<const float> xv(xs.data(), 6, 3, n, st), gv(gs.data(), 6, 3, n, st);
  std::vector<double> a(std::size_t(P), 0.0), b(std::size_t(P), 0.0), ta(6, 0.0), tb(6, 0.0);
  peal::encode_queries_backward(s.enc, s.view(s.x), peal::Positions(s.pos), s.view(s.g),
                                TensorView<float>(), {&a, &ta});
  peal::encode_queries_backward(s.enc, xv, peal::Positions(s.pos), gv, TensorView<float>(), {&b, &tb});
  LD mag = 0;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 3 * n; ++j)
      mag += (1 + std::abs(LD(s.pos[std::size_t(i)]))) *
             std::abs(LD(s.x[std::size_t(i * 3 * n + j)]) * LD(s.g[std::size_t(i * 3 * n + j)]));
  const LD tol = 2 * 6 * 3 * n * Tol<double>::eps * mag;
  for (int k = 0; k < P; ++k) CHECK(std::abs(LD(a[std::size_t(k)]) - LD(b[std::size_t(k)])) <= tol);
  for (int i = 0; i < 6; ++i) CHECK(std::abs(LD(ta[std::size_t(i)]) - LD(tb[std::size_t(i)])) <= tol);
  // Rows and gradient in different storage types (float q, double G) take the staged path too
  // (this call did not compile before the direct path required one type).
  std::vector<double> gd(s.g.begin(), s.g.end()), c(std::size_t(P), 0.0), tc(6, 0.0);
  peal::encode_queries_backward(s.enc, s.view(s.x), peal::Positions(s.pos),
                                TensorView<const double>(gd.data(), 6, 3, n), TensorView<float>(),
                                {&c, &tc});
  for (int k = 0; k < P; ++k) CHECK(std::abs(LD(a[std::size_t(k)]) - LD(c[std::size_t(k)])) <= tol);
  for (int i = 0; i < 6; ++i) CHECK(std::abs(LD(ta[std::size_t(i)]) - LD(tc[std::size_t(i)])) <= tol);
}

namespace {

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// A rotation bank of n pairs, ω in [0.01, 1], a in [−rate, rate].
peal::Bank<peal::RotationBlock<double>> rotation_bank(int n, peal::Layout layout, double rate,
                                                      std::uint64_t seed) {
  std::mt19937_64 r(seed);
  std::uniform_real_distribution<double> w(0.01, 1.0), a(-1, 1);
  std::vector<peal::RotationBlock<double>> blocks;
  for (int i = 0; i < n; ++i) blocks.emplace_back(w(r), rate * a(r));
  return peal::Bank<peal::RotationBlock<double>>(blocks, layout);
}
peal::RopeEncoding<double> partial_rope(int head_dim, double factor, peal::Layout layout) {
  peal::RopeConfig c;
  c.head_dim = head_dim;
  c.partial_rotary_factor = factor;
  c.layout = layout;
  return peal::rope<double>(c);
}
const peal::Bank<peal::RotationBlock<double>>& bank_of(
    const peal::Bank<peal::RotationBlock<double>>& b) {
  return b;
}
const peal::Bank<peal::RotationBlock<double>>& bank_of(const peal::RopeEncoding<double>& e) {
  return e.rotary();
}

// The fused pass of a rotation bank (encode_backward.hpp, rotation_pass: contiguous rows of one
// storage type, gradients wanted) against what it replaces:
//  - dq / dk bitwise the forward kernel at the negated positions (the key kernel at −t, the
//    query kernel at −s), also for tokens whose e^{aτ} leaves the float range (apply_exact);
//  - in place (dq over G's own view) bitwise out of place, gradients included;
//  - the parameter and position gradients against the staged path (element stride 2: rows
//    staged in double, the bilinear forms of derivatives.hpp), which sums the same products in
//    another order: |a − b| ≤ 2 N eps Σ|terms| (N = tokens x heads x d products per entry,
//    first order), each term bounded by (1 + |τ|)(1 + max|ω| + max|a|) e^{max|a τ|} |x| |g|.
template <class T, class E>
void check_fused(const E& enc, Side side, int tokens, int heads, double lo, double hi,
                 std::uint64_t seed) {
  const int n = enc.dim(), P = peal::parameter_count(enc);
  const bool q = side == Side::query;
  std::mt19937_64 r(seed);
  std::uniform_real_distribution<double> u(-1, 1), p(lo, hi);
  std::vector<double> pos, neg;
  for (int i = 0; i < tokens; ++i) pos.push_back(p(r)), neg.push_back(-pos.back());
  const std::size_t N = std::size_t(tokens) * std::size_t(heads) * std::size_t(n);
  std::vector<T> x, g;
  for (std::size_t i = 0; i < N; ++i) x.push_back(T(u(r))), g.push_back(T(u(r)));
  auto backward = [&](TensorView<const T> xv, TensorView<const T> gv, TensorView<T> dv,
                      std::vector<double>* gp, std::vector<double>* gt) {
    if (q)
      peal::encode_queries_backward(enc, xv, peal::Positions(pos), gv, dv, {gp, gt});
    else
      peal::encode_keys_backward(enc, xv, peal::Positions(pos), gv, dv, {gp, gt});
  };
  auto view = [&](std::vector<T>& v) { return TensorView<T>(v.data(), tokens, heads, n); };
  auto cview = [&](const std::vector<T>& v) {
    return TensorView<const T>(v.data(), tokens, heads, n);
  };
  INFO("side " << (q ? "query" : "key") << ", " << heads << " heads, storage size " << sizeof(T)
               << ", dim " << n << ", positions [" << lo << ", " << hi << "]");

  std::vector<T> dx(N), ref(N);
  std::vector<double> gp(std::size_t(P), 0.0), gt(std::size_t(tokens), 0.0);
  backward(cview(x), cview(g), view(dx), &gp, &gt);
  if (q)  // dq = A(t) G = G(−t) G, dk = A(−s)ᵀ G = F(−s) G
    peal::encode_keys(enc, cview(g), view(ref), peal::Positions(neg));
  else
    peal::encode_queries(enc, cview(g), view(ref), peal::Positions(neg));
  CHECK(same_bits(dx, ref));

  std::vector<T> io = g;
  std::vector<double> gp2(std::size_t(P), 0.0), gt2(std::size_t(tokens), 0.0);
  backward(cview(x), cview(io), view(io), &gp2, &gt2);
  CHECK(same_bits(io, dx));
  CHECK(gp2 == gp);
  CHECK(gt2 == gt);

  std::vector<T> xs(2 * N), gs(2 * N);
  for (std::size_t i = 0; i < N; ++i) xs[2 * i] = x[i], gs[2 * i] = g[i];
  const peal::Strides st{2 * heads * n, 2 * n, 2};
  std::vector<double> gp3(std::size_t(P), 0.0), gt3(std::size_t(tokens), 0.0);
  backward(TensorView<const T>(xs.data(), tokens, heads, n, st),
           TensorView<const T>(gs.data(), tokens, heads, n, st), TensorView<T>(), &gp3, &gt3);
  const auto& b = bank_of(enc).params();
  const LD wmax = LD(b.col(0).abs().maxCoeff()), amax = LD(b.col(2).abs().maxCoeff());
  LD mag = 0;
  std::vector<LD> tmag(std::size_t(tokens), 0);
  for (int i = 0; i < tokens; ++i) {
    const LD t = std::abs(LD(pos[std::size_t(i)]));
    LD sum = 0;
    for (int j = 0; j < heads * n; ++j)
      sum +=
          std::abs(ld(x[std::size_t(i * heads * n + j)]) * ld(g[std::size_t(i * heads * n + j)]));
    tmag[std::size_t(i)] = (1 + t) * (1 + wmax + amax) * std::exp(amax * t) * sum;
    mag += tmag[std::size_t(i)];
  }
  const LD tol = 2 * LD(N) * Tol<double>::eps;
  for (int k = 0; k < P; ++k) {
    INFO("parameter " << k << ": " << gp[std::size_t(k)] << " vs staged " << gp3[std::size_t(k)]);
    CHECK(std::abs(LD(gp[std::size_t(k)]) - LD(gp3[std::size_t(k)])) <= tol * mag);
  }
  for (int i = 0; i < tokens; ++i) {
    INFO("position " << i << ": " << gt[std::size_t(i)] << " vs staged " << gt3[std::size_t(i)]);
    CHECK(std::abs(LD(gt[std::size_t(i)]) - LD(gt3[std::size_t(i)])) <= tol * tmag[std::size_t(i)]);
  }
}

template <class T>
void check_fused_storage() {
  using peal::Layout;
  for (Side side : {Side::query, Side::key})
    for (int heads : {1, 5}) {
      // 70 pairs: one chunk of 64 and a tail; 41 interleaved: 82 elements, 64 + 16 + 2.
      check_fused<T>(rotation_bank(70, Layout::HalfSplit, 1e-3, 61), side, 9, heads, 0, 4096,
                     70 + heads);
      check_fused<T>(rotation_bank(41, Layout::Interleaved, 0, 62), side, 9, heads, -1e4, 1e4,
                     70 + heads);
      check_fused<T>(rotation_bank(16, Layout::Interleaved, 1e-3, 63), side, 9, heads, -1e4, 1e4,
                     70 + heads);
      // Partial rotary (pass-through coordinates copied), at positions near 1.7e9.
      check_fused<T>(partial_rope(40, 0.5, Layout::HalfSplit), side, 7, heads, 1.7e9, 1.7e9 + 4096,
                     70 + heads);
      check_fused<T>(partial_rope(24, 0.5, Layout::Interleaved), side, 7, heads, 1.7e9,
                     1.7e9 + 4096, 70 + heads);
      // e^{aτ} past the float range (|a τ| up to 150): those tokens' rows by apply_exact.
      check_fused<T>(rotation_bank(8, Layout::HalfSplit, 0.05, 64), side, 9, heads, -3000, 3000,
                     70 + heads);
    }
}

// Threads (OpenMP): tokens split over threads, each token's parameter forms added in token
// order after them, so any thread count gives the bits of one thread (dq, both gradients).
// T H n >= kParallelMinElements: threads start; T > 4096: more than one block of tokens.
void check_fused_threads(Side side, peal::Layout layout, int T, int H, int n) {
  const auto enc = rotation_bank(n / 2, layout, 1e-3, 81);
  std::mt19937_64 r(82);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(std::size_t(T * H * n)), g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = u(r), g[i] = u(r);
  std::vector<double> pos;
  for (int i = 0; i < T; ++i) pos.push_back(3.0 * i - 50);
  auto run = [&](int threads, std::vector<float>& dx, std::vector<double>& gp,
                 std::vector<double>& gt) {
#ifdef _OPENMP
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
#else
    (void)threads;
#endif
    dx.assign(x.size(), 0.0f), gp.assign(std::size_t(peal::parameter_count(enc)), 0.0);
    gt.assign(std::size_t(T), 0.0);
    const TensorView<const float> xv(x.data(), T, H, n), gv(g.data(), T, H, n);
    if (side == Side::query)
      peal::encode_queries_backward(enc, xv, peal::Positions(pos), gv,
                                    TensorView<float>(dx.data(), T, H, n), {&gp, &gt});
    else
      peal::encode_keys_backward(enc, xv, peal::Positions(pos), gv,
                                 TensorView<float>(dx.data(), T, H, n), {&gp, &gt});
#ifdef _OPENMP
    omp_set_num_threads(before);
#endif
  };
  std::vector<float> d1, d;
  std::vector<double> p1, t1, p, t;
  run(1, d1, p1, t1);
  for (int threads : {2, 3}) {
    run(threads, d, p, t);
    INFO(threads << " threads");
    CHECK(same_bits(d, d1));
    CHECK(same_bits(p, p1));
    CHECK(same_bits(t, t1));
  }
}

}  // namespace

TEST_CASE("encode backward: the fused rotation pass", "[encode_backward]") {
  check_fused_storage<float>();
  check_fused_storage<double>();
  check_fused_storage<Eigen::half>();
  for (Side side : {Side::query, Side::key})
    for (peal::Layout layout : {peal::Layout::HalfSplit, peal::Layout::Interleaved})
      check_fused_threads(side, layout, 70, 8, 128);
  check_fused_threads(Side::query, peal::Layout::HalfSplit, 4100, 1, 32);  // two blocks
}

TEST_CASE("encode backward: bad input throws and writes nothing", "[encode_backward]") {
  auto s = Setup<MixedFam, double>::make(4, 2, -2, 2, 41);
  const int n = s.dim, P = peal::parameter_count(s.enc);
  const peal::Positions pos(s.pos);
  std::vector<double> out(s.x.size(), 7.0), gp(std::size_t(P), 0.0), gt(4, 0.0);
  TensorView<double> o(out.data(), 4, 2, n);
  auto untouched = [&] {
    for (double v : out) CHECK(v == 7.0);
    for (double v : gp) CHECK(v == 0.0);
    for (double v : gt) CHECK(v == 0.0);
  };
  using peal::invalid_argument;
  // Extents: the gradient of the encoded rows, dq, the dimension.
  CHECK_THROWS_AS(peal::encode_queries_backward(s.enc, s.view(s.x), pos,
                                                TensorView<const double>(s.g.data(), 4, 1, n), o,
                                                {&gp, &gt}),
                  invalid_argument);
  CHECK_THROWS_AS(peal::encode_queries_backward(s.enc, s.view(s.x), pos, s.view(s.g),
                                                TensorView<double>(out.data(), 2, 2, n), {&gp}),
                  invalid_argument);
  // Gradient vectors of the wrong size.
  std::vector<double> short_p(std::size_t(P - 1)), short_t(3);
  CHECK_THROWS_AS(peal::encode_keys_backward(s.enc, s.view(s.x), pos, s.view(s.g), o, {&short_p}),
                  invalid_argument);
  CHECK_THROWS_AS(peal::encode_keys_backward(s.enc, s.view(s.x), pos, s.view(s.g), o,
                                             {&gp, &short_t}),
                  invalid_argument);
  // Positions: count and NaN.
  std::vector<double> bad = s.pos;
  bad[2] = std::nan("");
  CHECK_THROWS_AS(peal::encode_queries_backward(s.enc, s.view(s.x), peal::Positions(bad),
                                                s.view(s.g), o, {&gp, &gt}),
                  invalid_argument);
  CHECK_THROWS_AS(peal::encode_queries_backward(s.enc, s.view(s.x),
                                                peal::Positions(s.pos.data(), 3), s.view(s.g), o,
                                                {&gp}),
                  invalid_argument);
  // dq over the input q, and dq partly over the gradient of the encoded rows.
  std::vector<double> xs = s.x;
  TensorView<double> xv(xs.data(), 4, 2, n);
  CHECK_THROWS_AS(peal::encode_queries_backward(s.enc, xv, pos, s.view(s.g), xv, {&gp}),
                  invalid_argument);
  std::vector<double> big(s.g.size() + 1);
  TensorView<double> g0(big.data(), 4, 2, n), g1(big.data() + 1, 4, 2, n);
  CHECK_THROWS_AS(peal::encode_queries_backward(s.enc, s.view(s.x), pos, g0, g1, {&gp}),
                  invalid_argument);
  CHECK(xs == s.x);
  untouched();
}
