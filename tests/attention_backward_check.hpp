// The long double reference of attention_backward and the check of one call against it,
// shared by tests/test_attention_backward.cpp (double storage, bad input) and
// tests/test_attention_backward_rope.cpp (RoPE; float storage and arithmetic), which are split so
// that neither TU passes 1.5 GB of compile (docs/build-cost.md). The derivation of
// the reference and of the tolerance is at the top of tests/test_attention_backward.cpp.
#pragma once

#include <algorithm>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <peal/attention_backward.hpp>
#include <random>
#include <vector>

#include "derivative_check.hpp"
#include "families.hpp"
#include "strided_views.hpp"
#include "tolerances.hpp"

namespace peal_test {
namespace attention_backward_check {

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
  int nq, nk, Hq, Hk, dv;
  double lo, hi;
  bool causal;
  double window, softcap;
  bool alibi, sinks, keys_encoded;
  bool sorted = false;  // positions in order: a causal call cuts its tiles (row blocks)
};

template <class Fam>
struct Problem {
  using E = decltype(Fam::template build<double>(std::declval<Draw&>()));
  using EL = decltype(Fam::template build<LD>(std::declval<Draw&>()));
  E enc;
  EL twin;
  Shape sh;
  int d = 0;
  std::vector<double> tq, tk, q, k, v, dout, out, lse;
  peal::AttentionOptions opt;
  // The reference: results and the magnitudes of their terms.
  std::vector<LD> dq, dk, dv, dth, dt, ds, dm, dsink;
  std::vector<LD> mq, mk, mv, mth, mt, ms, mm, msink;

  // T: the inputs' storage; they are rounded to it before the reference sees them.
  template <class T = double>
  static Problem make(const Shape& sh, Regime regime, std::uint64_t seed) {
    std::mt19937_64 re(seed), rl(seed), rr(seed + 3);
    Draw de{re, regime}, dl{rl, regime};
    auto e = Fam::template build<double>(de);
    auto tw = peal::with_parameters(Fam::template build<LD>(dl), peal::parameters(e).values);
    Problem c{std::move(e), std::move(tw), sh, 0, {}, {}, {}, {}, {}, {}, {}, {}, {},
              {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
    c.d = c.enc.dim();
    std::uniform_real_distribution<double> u(-1, 1), pos(sh.lo, sh.hi);
    for (int i = 0; i < sh.nq; ++i) c.tq.push_back(pos(rr));
    for (int j = 0; j < sh.nk; ++j) c.tk.push_back(pos(rr));
    if (sh.sorted) std::sort(c.tq.begin(), c.tq.end()), std::sort(c.tk.begin(), c.tk.end());
    for (int i = 0; i < sh.nq * sh.Hq * c.d; ++i) c.q.push_back(u(rr));
    for (int i = 0; i < sh.nk * sh.Hk * c.d; ++i) c.k.push_back(u(rr));
    for (int i = 0; i < sh.nk * sh.Hk * sh.dv; ++i) c.v.push_back(u(rr));
    for (int i = 0; i < sh.nq * sh.Hq * sh.dv; ++i) c.dout.push_back(u(rr));
    c.opt.causal = sh.causal;
    c.opt.window = sh.window;
    c.opt.softcap = sh.softcap;
    c.opt.scale = 0.6;
    for (int h = 0; h < sh.Hq; ++h) {
      if (sh.alibi) c.opt.alibi_slopes.push_back(0.02 * (h + 1));
      if (sh.sinks) c.opt.sinks.push_back(0.3 - 0.2 * h);
    }
    c.opt.keys_encoded = sh.keys_encoded;
    for (auto* x : {&c.q, &c.k, &c.v, &c.dout})
      for (double& y : *x) y = double(T(y));
    c.template reference<T>();
    return c;
  }

  VLD row(const std::vector<double>& x, int i, int h, int H, int n) const {
    VLD r(n);
    for (int e = 0; e < n; ++e) r(e) = LD(x[std::size_t((i * H + h) * n + e)]);
    return r;
  }
  bool masked(LD t, LD s) const { return (sh.causal && s > t) || !(t - s < LD(sh.window)); }

  // T: the storage of out as attention_backward receives it; D_i = dO_i · out_i is formed from
  // that rounded out (the backward's input), the rest from the exact softmax.
  template <class T>
  void reference() {
    const int G = sh.Hq / sh.Hk, dvn = sh.dv;
    const LD scale = LD(*opt.scale), c = LD(sh.softcap), k2 = heads_kappa2(twin, sh.Hq);
    const LD xn = heads_xmax(twin, sh.Hq) * d;
    for (auto* x : {&dq, &mq}) x->assign(q.size(), 0);
    for (auto* x : {&dk, &mk}) x->assign(k.size(), 0);
    for (auto* x : {&dv, &mv}) x->assign(v.size(), 0);
    for (auto* x : {&dth, &mth}) x->assign(std::size_t(peal::parameter_count(enc)), 0);
    for (auto* x : {&dt, &mt}) x->assign(std::size_t(sh.nq), 0);
    for (auto* x : {&ds, &ms}) x->assign(std::size_t(sh.nk), 0);
    for (auto* x : {&dm, &mm, &dsink, &msink}) x->assign(std::size_t(sh.Hq), 0);
    out.assign(std::size_t(sh.nq * sh.Hq * dvn), 0.0);
    lse.assign(std::size_t(sh.nq * sh.Hq), 0.0);
    for (int i = 0; i < sh.nq; ++i)
      for (int h = 0; h < sh.Hq; ++h) {
        const auto& tw = head_of(twin, h);  // head h's encoding (one for all, or a PerHead's)
        const int off = head_offset(twin, h), P = peal::parameter_count(tw);
        const int kh = h / G;
        const LD t = LD(tq[std::size_t(i)]);
        const LD m = sh.alibi ? LD(opt.alibi_slopes[std::size_t(h)]) : 0;
        const VLD qv = row(q, i, h, sh.Hq, d), dov = row(dout, i, h, sh.Hq, dvn);
        std::vector<LD> y(std::size_t(sh.nk)), x(std::size_t(sh.nk)), raw(std::size_t(sh.nk));
        LD mx = sh.sinks ? LD(opt.sinks[std::size_t(h)]) : -std::numeric_limits<LD>::infinity();
        for (int j = 0; j < sh.nk; ++j) {
          const LD s = LD(tk[std::size_t(j)]);
          if (masked(t, s)) continue;
          const VLD kv = row(k, j, kh, sh.Hk, d);
          raw[std::size_t(j)] = qv.dot(MLD(tw.A(t - s)) * kv);  // = (F(t) q)ᵀ (G(s) k)
          y[std::size_t(j)] = scale * raw[std::size_t(j)];
          x[std::size_t(j)] = (c > 0 ? c * std::tanh(y[std::size_t(j)] / c) : y[std::size_t(j)]) -
                              m * (t - s);
          mx = std::max(mx, x[std::size_t(j)]);
        }
        LD z = sh.sinks ? std::exp(LD(opt.sinks[std::size_t(h)]) - mx) : 0;
        for (int j = 0; j < sh.nk; ++j)
          if (!masked(t, LD(tk[std::size_t(j)]))) z += std::exp(x[std::size_t(j)] - mx);
        const LD l = z > 0 ? mx + std::log(z) : -std::numeric_limits<LD>::infinity();
        lse[std::size_t(i * sh.Hq + h)] = double(l);
        VLD o = VLD::Zero(dvn);
        std::vector<LD> p(std::size_t(sh.nk), 0);
        for (int j = 0; j < sh.nk; ++j) {
          if (masked(t, LD(tk[std::size_t(j)]))) continue;
          p[std::size_t(j)] = std::exp(x[std::size_t(j)] - l);
          o += p[std::size_t(j)] * row(v, j, kh, sh.Hk, dvn);
        }
        VLD o_in(dvn);
        for (int e = 0; e < dvn; ++e) {
          out[std::size_t((i * sh.Hq + h) * dvn + e)] = double(T(double(o(e))));
          o_in(e) = LD(out[std::size_t((i * sh.Hq + h) * dvn + e)]);
        }
        const LD D = dov.dot(o_in);
        if (sh.sinks && z > 0) {
          const LD ps = std::exp(LD(opt.sinks[std::size_t(h)]) - l);
          dsink[std::size_t(h)] -= ps * D, msink[std::size_t(h)] += ps * std::abs(D);
        }
        for (int j = 0; j < sh.nk; ++j) {
          const LD s = LD(tk[std::size_t(j)]), tau = t - s, pj = p[std::size_t(j)];
          if (masked(t, s)) continue;
          const VLD kv = row(k, j, kh, sh.Hk, d), vv = row(v, j, kh, sh.Hk, dvn);
          const LD dP = dov.dot(vv), dx = pj * (dP - D);
          const LD xc = c > 0 ? c * std::tanh(y[std::size_t(j)] / c) : 0;
          const LD w = dx * (c > 0 ? 1 - (xc / c) * (xc / c) : 1) * scale;
          // The logit's error δ (rel · scale M, rel applied by the caller) reaches W through P.
          const MLD A = tw.A(tau);
          const LD Mij = qv.cwiseAbs().sum() * max_abs(A) * k2 * kv.cwiseAbs().sum();
          const LD wmag = std::abs(w) + scale * pj * (std::abs(dP) + std::abs(D)) * scale * Mij;
          for (int e = 0; e < dvn; ++e) {
            dv[std::size_t((j * sh.Hk + kh) * dvn + e)] += pj * dov(e);
            mv[std::size_t((j * sh.Hk + kh) * dvn + e)] +=
                pj * std::abs(dov(e)) * (1 + scale * Mij) + pj * std::abs(dov(e));
          }
          // dk: of k, or with keys_encoded of the stored row G(s) k: F(t) q per unit of w.
          const VLD ak = A * kv,
                    atq = sh.keys_encoded ? VLD(MLD(tw.F(t)) * qv) : VLD(A.transpose() * qv);
          for (int e = 0; e < d; ++e) {
            dq[std::size_t((i * sh.Hq + h) * d + e)] += w * ak(e);
            mq[std::size_t((i * sh.Hq + h) * d + e)] += wmag * max_abs(A) * k2 * kv.cwiseAbs().sum();
            dk[std::size_t((j * sh.Hk + kh) * d + e)] += w * atq(e);
            mk[std::size_t((j * sh.Hk + kh) * d + e)] += wmag * max_abs(A) * k2 * qv.cwiseAbs().sum();
          }
          const LD mag = wmag * qv.cwiseAbs().sum() * max_abs(A) * k2 * kv.cwiseAbs().sum();
          dm[std::size_t(h)] -= dx * tau;
          mm[std::size_t(h)] += (std::abs(dx) + pj * (std::abs(dP) + std::abs(D)) * scale * Mij) *
                                std::abs(tau);
          if (sh.keys_encoded) {  // θ and t through F(t) q only: qᵀ ∂A(t) (G(s) k)
            const std::vector<MLD> dA = peal::dA(tw, t);
            const VLD gk = MLD(tw.G(s)) * kv;
            for (int x2 = 0; x2 < P; ++x2) {
              dth[std::size_t(off + x2)] += w * qv.dot(dA[std::size_t(x2)] * gk);
              mth[std::size_t(off + x2)] += mag * (1 + std::abs(t));
            }
            const LD dpos = w * qv.dot(peal::dA_dtau(tw, t) * gk) - m * dx;
            dt[std::size_t(i)] += dpos, mt[std::size_t(i)] += mag * (1 + xn) + std::abs(m * dx);
            ds[std::size_t(j)] += m * dx, ms[std::size_t(j)] += std::abs(m * dx);
          } else {
            const std::vector<MLD> dA = peal::dA(tw, tau);
            for (int x2 = 0; x2 < P; ++x2) {
              dth[std::size_t(off + x2)] += w * qv.dot(dA[std::size_t(x2)] * kv);
              mth[std::size_t(off + x2)] += mag * (1 + std::abs(tau));
            }
            const LD dpos = w * qv.dot(peal::dA_dtau(tw, tau) * kv) - m * dx;
            dt[std::size_t(i)] += dpos, mt[std::size_t(i)] += mag * (1 + xn) + std::abs(m * dx);
            ds[std::size_t(j)] -= dpos, ms[std::size_t(j)] += mag * (1 + xn) + std::abs(m * dx);
          }
        }
      }
  }
};

// One call with every gradient against the reference; p the longest Jordan chain − 1, for
// the rebasing amplification of Tol::score.
// T: the storage of q, k, v, out and d_out; C, the arithmetic, is float for float storage.
// strided: every input and output through strided views (padded_strides) instead of dense ones.
template <class Fam, class T = double>
void check_attention_backward(const Shape& sh, Regime regime, int p, std::uint64_t seed,
                              bool strided = false) {
  using C = peal::detail::tiled::arith_t<T, T>;
  auto c = Problem<Fam>::template make<T>(sh, regime, seed);
  const int d = c.d, P = peal::parameter_count(c.enc);
  std::vector<double> dq(c.q.size(), 7.0), dk(c.k.size(), 7.0), dv(c.v.size(), 7.0);
  std::vector<double> gp(std::size_t(P), 0.0), gt(std::size_t(sh.nq), 0.0),
      gs(std::size_t(sh.nk), 0.0), gm(std::size_t(sh.Hq), 0.0), gsk(std::size_t(sh.Hq), 0.0);
  std::vector<double> kin = c.k;
  if (sh.keys_encoded)  // the cache holds G(s) k
    peal::encode_keys(c.enc, TensorView<double>(kin.data(), sh.nk, sh.Hk, d), peal::Positions(c.tk));
  const std::vector<T> qs(c.q.begin(), c.q.end()), ks(kin.begin(), kin.end()),
      vs(c.v.begin(), c.v.end()), os(c.out.begin(), c.out.end()), ds(c.dout.begin(), c.dout.end());
  const auto in = [&](const std::vector<T>& x, std::vector<T>& keep, int n, int H, int w) {
    return view_in(strided, x, keep, n, H, w);
  };
  const auto out = [&](std::vector<double>& x, std::vector<double>& keep, int n, int H, int w) {
    return view_out(strided, x, keep, n, H, w);
  };
  std::vector<T> q2, k2, v2, o2, d2;
  std::vector<double> dq2, dk2, dv2;
  peal::attention_backward(
      c.enc, in(qs, q2, sh.nq, sh.Hq, d), peal::Positions(c.tq), in(ks, k2, sh.nk, sh.Hk, d),
      peal::Positions(c.tk), in(vs, v2, sh.nk, sh.Hk, sh.dv), in(os, o2, sh.nq, sh.Hq, sh.dv),
      c.lse, in(ds, d2, sh.nq, sh.Hq, sh.dv), out(dq, dq2, sh.nq, sh.Hq, d),
      out(dk, dk2, sh.nk, sh.Hk, d), out(dv, dv2, sh.nk, sh.Hk, sh.dv), c.opt,
      {&gp, &gt, &gs, sh.alibi ? &gm : nullptr, sh.sinks ? &gsk : nullptr});
  read_back(strided, dq, dq2, sh.nq, sh.Hq, d);
  read_back(strided, dk, dk2, sh.nk, sh.Hk, d);
  read_back(strided, dv, dv2, sh.nk, sh.Hk, sh.dv);
  INFO(Fam::name << ", positions [" << sh.lo << ", " << sh.hi << "], " << sizeof(C) * 8
                 << "-bit arithmetic" << (strided ? ", strided views" : ""));
  LD pmax = 0;
  for (double t : c.tq) pmax = std::max(pmax, std::abs(LD(t)));
  for (double s : c.tk) pmax = std::max(pmax, std::abs(LD(s)));
  const LD xn = heads_xmax(c.twin, sh.Hq) * d;
  const LD rho = Tol<C>::score_rho(p, Tol<C>::poly_half_spread(p),
                                   Tol<C>::poly_half_spread(p));
  // The arithmetic's error in C, the positions' and anchors' in double (as scores backward).
  const LD rel = Tol<C>::score_gradient(d, rho, 0, 0, sh.nq * sh.nk * sh.Hq) +
                 Tol<double>::phase(xn * 4 * pmax) + Tol<C>::roundings(sh.dv + 8);
  const LD floor = Tol<C>::flushed();  // P below C's normal range flushes to 0
  const LD relpos = rel + Tol<double>::derivative(d, xn * 2 * pmax);
  check_all("dv", dv, c.dv, c.mv, rel, floor);
  check_all(sh.keys_encoded ? "dk (of the stored rows G(s) k)" : "dk", dk, c.dk, c.mk, rel, floor);
  check_all("dq", dq, c.dq, c.mq, rel, floor);
  check_all("parameter", gp, c.dth, c.mth, relpos, floor);
  check_all("query position", gt, c.dt, c.mt, relpos, floor);
  check_all("key position", gs, c.ds, c.ms, relpos, floor);
  if (sh.alibi) check_all("ALiBi slope", gm, c.dm, c.mm, rel, floor);
  if (sh.sinks) check_all("sink", gsk, c.dsink, c.msink, rel, floor);
  // dq, dk and dv stored in T (half-precision storage): each is accumulated in C and rounded
  // once when written, so it is the C value the call above wrote (exact in double) rounded to T.
  if constexpr (peal::detail::is_half_like<T>) {
    std::vector<T> hq(dq.size()), hk(dk.size()), hv(dv.size());
    peal::attention_backward(
        c.enc, TensorView<const T>(qs.data(), sh.nq, sh.Hq, d), peal::Positions(c.tq),
        TensorView<const T>(ks.data(), sh.nk, sh.Hk, d), peal::Positions(c.tk),
        TensorView<const T>(vs.data(), sh.nk, sh.Hk, sh.dv),
        TensorView<const T>(os.data(), sh.nq, sh.Hq, sh.dv), c.lse,
        TensorView<const T>(ds.data(), sh.nq, sh.Hq, sh.dv), TensorView<T>(hq.data(), sh.nq, sh.Hq, d),
        TensorView<T>(hk.data(), sh.nk, sh.Hk, d), TensorView<T>(hv.data(), sh.nk, sh.Hk, sh.dv),
        c.opt);
    const auto rounded_once = [](const std::vector<T>& h, const std::vector<double>& x) {
      std::size_t differ = 0;
      for (std::size_t i = 0; i < h.size(); ++i) {
        const T r(x[i]);
        differ += std::memcmp(&h[i], &r, sizeof(T)) != 0;
      }
      return differ;
    };
    CHECK(rounded_once(hq, dq) == 0);
    CHECK(rounded_once(hk, dk) == 0);
    CHECK(rounded_once(hv, dv) == 0);
  }
  // Any thread count gives the bits of the call above (opt.threads = 0: OpenMP's maximum): the
  // shards of the query tiles depend on the sizes alone (detail/tiled/backward_run.hpp).
  if (!strided)
    for (int threads : {1, 3}) {
      peal::AttentionOptions o = c.opt;
      o.threads = threads;
      std::vector<double> dq1(dq.size()), dk1(dk.size()), dv1(dv.size()), gp1(gp.size()),
          gt1(gt.size()), gs1(gs.size()), gm1(gm.size()), gsk1(gsk.size());
      peal::attention_backward(
          c.enc, TensorView<const T>(qs.data(), sh.nq, sh.Hq, d), peal::Positions(c.tq),
          TensorView<const T>(ks.data(), sh.nk, sh.Hk, d), peal::Positions(c.tk),
          TensorView<const T>(vs.data(), sh.nk, sh.Hk, sh.dv),
          TensorView<const T>(os.data(), sh.nq, sh.Hq, sh.dv), c.lse,
          TensorView<const T>(ds.data(), sh.nq, sh.Hq, sh.dv),
          TensorView<double>(dq1.data(), sh.nq, sh.Hq, d),
          TensorView<double>(dk1.data(), sh.nk, sh.Hk, d),
          TensorView<double>(dv1.data(), sh.nk, sh.Hk, sh.dv), o,
          {&gp1, &gt1, &gs1, sh.alibi ? &gm1 : nullptr, sh.sinks ? &gsk1 : nullptr});
      INFO(threads << " threads against OpenMP's maximum");
      CHECK(dq1 == dq);
      CHECK(dk1 == dk);
      CHECK(dv1 == dv);
      CHECK(gp1 == gp);
      CHECK(gt1 == gt);
      CHECK(gs1 == gs);
      CHECK(gm1 == gm);
      CHECK(gsk1 == gsk);
    }
}

using RopePartial = RopeFam<peal::RopeType::Default, peal::Layout::HalfSplit, 16, 50>;
constexpr double kNone = std::numeric_limits<double>::infinity();

}  // namespace attention_backward_check
}  // namespace peal_test
