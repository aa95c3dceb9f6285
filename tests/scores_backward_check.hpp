// The long double reference of scores_backward and the check of one call against it, shared
// by tests/test_scores_backward.cpp (rebased compositions, bad input) and
// tests/test_scores_backward_presets.cpp (RoPE, xPos, ALiBi; float storage and arithmetic),
// split so that neither TU passes 1.5 GB of compile (docs/build-cost.md). The derivation of the
// reference and of the tolerance is at the top of tests/test_scores_backward.cpp.
#pragma once

#include <algorithm>

#include <catch2/catch.hpp>
#include <cmath>
#include <peal/scores_backward.hpp>
#include <random>
#include <vector>

#include "derivative_check.hpp"
#include "families.hpp"
#include "strided_views.hpp"
#include "tolerances.hpp"

namespace peal_test {
namespace scores_backward_check {

using LD = long double;
using MLD = peal::Matrix<LD>;
using VLD = peal::Vector<LD>;
using peal::Index;
using peal::TensorView;
using peal_test::derivative_check::head_of;
using peal_test::derivative_check::head_offset;
using peal_test::derivative_check::heads_kappa2;
using peal_test::derivative_check::heads_xmax;
using peal_test::derivative_check::kappa2;
using peal_test::derivative_check::PerHeadFam;
using peal_test::derivative_check::check_all;
using peal_test::derivative_check::max_abs;

struct Shape {
  int nq, nk, Hq, Hk;
  double lo, hi;
  bool causal, alibi, decay;
  bool sorted = false;  // positions in order: a causal call cuts its tiles (row blocks)
};

template <class Fam>
struct Problem {
  using E = decltype(Fam::template build<double>(std::declval<Draw&>()));
  using EL = decltype(Fam::template build<LD>(std::declval<Draw&>()));
  E enc;
  EL twin;
  Shape sh;
  int d;
  std::vector<double> tq, tk, q, k, ds;
  peal::ScoreOptions opt;

  static Problem make(const Shape& sh, Regime regime, std::uint64_t seed) {
    std::mt19937_64 re(seed), rl(seed), rr(seed + 9);
    Draw de{re, regime}, dl{rl, regime};
    auto e = Fam::template build<double>(de);
    auto tw = peal::with_parameters(Fam::template build<LD>(dl), peal::parameters(e).values);
    Problem p{std::move(e), std::move(tw), sh, 0, {}, {}, {}, {}, {}, {}};
    p.d = p.enc.dim();
    std::uniform_real_distribution<double> u(-1, 1), pos(sh.lo, sh.hi);
    for (int i = 0; i < sh.nq; ++i) p.tq.push_back(pos(rr));
    for (int j = 0; j < sh.nk; ++j) p.tk.push_back(pos(rr));
    if (sh.sorted) std::sort(p.tq.begin(), p.tq.end()), std::sort(p.tk.begin(), p.tk.end());
    for (int i = 0; i < sh.nq * sh.Hq * p.d; ++i) p.q.push_back(u(rr));
    for (int i = 0; i < sh.nk * sh.Hk * p.d; ++i) p.k.push_back(u(rr));
    for (int i = 0; i < sh.Hq * sh.nq * sh.nk; ++i) p.ds.push_back(u(rr));
    p.opt.causal = sh.causal;
    p.opt.scale = 0.37;
    for (int h = 0; h < sh.Hq; ++h) {
      if (sh.alibi) p.opt.alibi_slopes.push_back(0.01 * (h + 1));
      if (sh.decay) p.opt.decay.push_back(1.0 - 1e-4 * (h + 1));
    }
    return p;
  }
  VLD qrow(int i, int h) const {
    VLD v(d);
    for (int e = 0; e < d; ++e) v(e) = LD(q[std::size_t((i * sh.Hq + h) * d + e)]);
    return v;
  }
  VLD krow(int j, int h) const {
    VLD v(d);
    for (int e = 0; e < d; ++e) v(e) = LD(k[std::size_t((j * sh.Hk + h) * d + e)]);
    return v;
  }
};

// The per-pair reference and the bound on each result (tolerance scale, before the relative
// error factor): sums of the terms' magnitudes.
struct Reference {
  std::vector<LD> dq, dk, dtheta, dt, ds, dm, dg;      // values
  std::vector<LD> mq, mk, mtheta, mt, ms, mm, mg;      // Σ |terms|
};

template <class Fam>
Reference reference(const Problem<Fam>& p) {
  const auto& sh = p.sh;
  const int d = p.d, P = peal::parameter_count(p.enc), G = sh.Hq / sh.Hk;
  Reference r;
  auto zeros = [](std::vector<LD>& v, std::size_t n) { v.assign(n, 0); };
  for (auto* v : {&r.dq, &r.mq}) zeros(*v, p.q.size());
  for (auto* v : {&r.dk, &r.mk}) zeros(*v, p.k.size());
  for (auto* v : {&r.dtheta, &r.mtheta}) zeros(*v, std::size_t(P));
  for (auto* v : {&r.dt, &r.mt}) zeros(*v, std::size_t(sh.nq));
  for (auto* v : {&r.ds, &r.ms}) zeros(*v, std::size_t(sh.nk));
  for (auto* v : {&r.dm, &r.mm, &r.dg, &r.mg}) zeros(*v, std::size_t(sh.Hq));
  const LD k2 = heads_kappa2(p.twin, sh.Hq), xn = heads_xmax(p.twin, sh.Hq) * d;
  for (int i = 0; i < sh.nq; ++i)
    for (int j = 0; j < sh.nk; ++j) {
      const LD t = LD(p.tq[std::size_t(i)]), s = LD(p.tk[std::size_t(j)]), tau = t - s;
      if (sh.causal && s > t) continue;
      const void* at = nullptr;  // the encoding A, XA and dA were formed for
      MLD A, XA;
      std::vector<MLD> dA;
      for (int h = 0; h < sh.Hq; ++h) {  // head h's encoding (one for all, or a PerHead's)
        const auto& tw = head_of(p.twin, h);
        const int off = head_offset(p.twin, h), Ph = peal::parameter_count(tw);
        if (at != &tw) A = tw.A(tau), XA = peal::dA_dtau(tw, tau), dA = peal::dA(tw, tau), at = &tw;
        const LD an = max_abs(A) * k2;
        const int kh = h / G;
        const LD gamma = sh.decay ? LD(p.opt.decay[std::size_t(h)]) : 1;
        const LD m = sh.alibi ? LD(p.opt.alibi_slopes[std::size_t(h)]) : 0;
        const LD dsv = LD(p.ds[std::size_t((h * sh.nq + i) * sh.nk + j)]);
        const LD w = dsv * LD(p.opt.scale) * std::pow(gamma, tau);
        const VLD qv = p.qrow(i, h), kv = p.krow(j, kh);
        const VLD ak = A * kv, atq = A.transpose() * qv;
        const LD raw = qv.dot(ak), xr = qv.dot(XA * kv);
        const LD mag = std::abs(w) * qv.cwiseAbs().sum() * an * kv.cwiseAbs().sum();
        for (int e = 0; e < d; ++e) {
          r.dq[std::size_t((i * sh.Hq + h) * d + e)] += w * ak(e);
          r.mq[std::size_t((i * sh.Hq + h) * d + e)] += std::abs(w) * an * kv.cwiseAbs().sum();
          r.dk[std::size_t((j * sh.Hk + kh) * d + e)] += w * atq(e);
          r.mk[std::size_t((j * sh.Hk + kh) * d + e)] += std::abs(w) * an * qv.cwiseAbs().sum();
        }
        for (int x = 0; x < Ph; ++x) {
          r.dtheta[std::size_t(off + x)] += w * qv.dot(dA[std::size_t(x)] * kv);
          r.mtheta[std::size_t(off + x)] += mag * (1 + std::abs(tau));
        }
        const LD dpos = w * (xr + std::log(gamma) * raw) - m * dsv;
        const LD mpos = mag * (1 + xn) + std::abs(m * dsv) + std::abs(w * std::log(gamma) * raw);
        r.dt[std::size_t(i)] += dpos, r.mt[std::size_t(i)] += mpos;
        r.ds[std::size_t(j)] -= dpos, r.ms[std::size_t(j)] += mpos;
        r.dm[std::size_t(h)] -= dsv * tau, r.mm[std::size_t(h)] += std::abs(dsv * tau);
        r.dg[std::size_t(h)] += w * tau / gamma * raw;
        r.mg[std::size_t(h)] += mag * std::abs(tau) / gamma;
      }
    }
  return r;
}

// The relative error of each result (derived at the top of tests/test_scores_backward.cpp):
// the arithmetic's in C (the rebasing budget of C's tiles; p the longest Jordan chain − 1, a
// basis change's 2 (d + 1) extra terms), the positions' and anchors' in double; `position`
// adds the derivative's error for the parameter and position gradients.
struct GradientTolerance {
  LD rel, position;
};
template <class C, class Fam>
GradientTolerance gradient_tolerance(const Problem<Fam>& pr, int p, bool basis) {
  const auto& sh = pr.sh;
  const int d = pr.d;
  LD pmax = 0;
  for (double t : pr.tq) pmax = std::max(pmax, std::abs(LD(t)));
  for (double s : pr.tk) pmax = std::max(pmax, std::abs(LD(s)));
  const LD xn = heads_xmax(pr.twin, sh.Hq) * d;
  const LD rho = Tol<C>::score_rho(p, Tol<C>::poly_half_spread(p), Tol<C>::poly_half_spread(p));
  const LD rel = Tol<C>::score_gradient(d, rho, basis ? 2 * (d + 1) : 0, 0, sh.nq * sh.nk * sh.Hq) +
                 Tol<double>::phase(xn * 4 * pmax);
  return {rel, rel + Tol<double>::derivative(d, xn * 2 * pmax)};
}

// One call with every gradient, against the reference. p: the longest Jordan chain − 1 of the
// encoding; extra: 2 (d + 1) for a basis change (Tol::score).
// T: the storage of q, k and d_scores (the inputs are rounded to it first, so that the
// reference sees what the kernel sees); C, the arithmetic, is float for float storage.
// strided: q, k, d_scores, dq and dk through strided views (tests/strided_views.hpp).
template <class Fam, class T = double>
void check_scores_backward(const Shape& sh, Regime regime, int p, bool basis, std::uint64_t seed,
                           bool strided = false) {
  using C = peal::detail::tiled::arith_t<T, T>;
  auto pr = Problem<Fam>::make(sh, regime, seed);
  for (auto* v : {&pr.q, &pr.k, &pr.ds})
    for (double& x : *v) x = double(T(x));
  const std::vector<T> qs(pr.q.begin(), pr.q.end()), ks(pr.k.begin(), pr.k.end()),
      dss(pr.ds.begin(), pr.ds.end());
  const int d = pr.d, P = peal::parameter_count(pr.enc);
  std::vector<double> dq(pr.q.size(), 7.0), dk(pr.k.size(), 7.0), gp(std::size_t(P), 0.0),
      gt(std::size_t(sh.nq), 0.0), gs(std::size_t(sh.nk), 0.0), gm(std::size_t(sh.Hq), 0.0),
      gg(std::size_t(sh.Hq), 0.0);
  peal::ScoresGradients<double> grads{&gp, &gt, &gs, sh.alibi ? &gm : nullptr,
                                      sh.decay ? &gg : nullptr};
  std::vector<T> q2, k2, ds2;
  std::vector<double> dq2, dk2;
  peal::scores_backward(pr.enc, view_in(strided, qs, q2, sh.nq, sh.Hq, d), peal::Positions(pr.tq),
                        view_in(strided, ks, k2, sh.nk, sh.Hk, d), peal::Positions(pr.tk),
                        view_in(strided, dss, ds2, sh.Hq, sh.nq, sh.nk),
                        view_out(strided, dq, dq2, sh.nq, sh.Hq, d),
                        view_out(strided, dk, dk2, sh.nk, sh.Hk, d), pr.opt, grads);
  read_back(strided, dq, dq2, sh.nq, sh.Hq, d);
  read_back(strided, dk, dk2, sh.nk, sh.Hk, d);
  const Reference r = reference(pr);
  INFO(Fam::name << ", positions [" << sh.lo << ", " << sh.hi << "], " << sizeof(C) * 8
                 << "-bit arithmetic" << (strided ? ", strided views" : ""));
  const GradientTolerance tol = gradient_tolerance<C>(pr, p, basis);
  const LD rel = tol.rel;
  check_all("dq", dq, r.dq, r.mq, rel);
  check_all("dk", dk, r.dk, r.mk, rel);
  check_all("parameter", gp, r.dtheta, r.mtheta, tol.position);
  check_all("query position", gt, r.dt, r.mt, tol.position);
  check_all("key position", gs, r.ds, r.ms, tol.position);
  if (sh.alibi) check_all("ALiBi slope", gm, r.dm, r.mm, Tol<double>::roundings(sh.nq * sh.nk));
  if (sh.decay) check_all("decay", gg, r.dg, r.mg, rel);
  // Any thread count gives the bits of the call above (opt.threads = 0: OpenMP's maximum): the
  // shards of the query tiles depend on the sizes alone (detail/tiled/backward_run.hpp).
  if (!strided)
    for (int threads : {1, 3}) {
      peal::ScoreOptions o = pr.opt;
      o.threads = threads;
      std::vector<double> dq1(dq.size()), dk1(dk.size()), gp1(gp.size()), gt1(gt.size()),
          gs1(gs.size()), gm1(gm.size()), gg1(gg.size());
      peal::scores_backward(pr.enc, peal::TensorView<const T>(qs.data(), sh.nq, sh.Hq, d),
                            peal::Positions(pr.tq), peal::TensorView<const T>(ks.data(), sh.nk, sh.Hk, d),
                            peal::Positions(pr.tk),
                            peal::TensorView<const T>(dss.data(), sh.Hq, sh.nq, sh.nk),
                            peal::TensorView<double>(dq1.data(), sh.nq, sh.Hq, d),
                            peal::TensorView<double>(dk1.data(), sh.nk, sh.Hk, d), o,
                            {&gp1, &gt1, &gs1, sh.alibi ? &gm1 : nullptr, sh.decay ? &gg1 : nullptr});
      INFO(threads << " threads against OpenMP's maximum");
      CHECK(dq1 == dq);
      CHECK(dk1 == dk);
      CHECK(gp1 == gp);
      CHECK(gt1 == gt);
      CHECK(gs1 == gs);
      CHECK(gm1 == gm);
      CHECK(gg1 == gg);
    }
}

using RopePartial = RopeFam<peal::RopeType::Default, peal::Layout::HalfSplit, 16, 50>;

}  // namespace scores_backward_check
}  // namespace peal_test
