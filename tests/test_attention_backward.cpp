// Tests of include/peal/attention_backward.hpp: attention_backward against the per-pair
// formula of the long double twin. The reference forms, per query head h and query i, the
// logits x_ij = cap(scale q_iᵀ A(τ) k_j) − m_h τ over the visible keys (causal, window), the
// sink σ_h, lse_i, P_ij, out_i; and from dO: D_i = dO_i · out_i, dV_j = Σ_i P_ij dO_i,
// dx_ij = P_ij (dO_i · v_j − D_i), W_ij = dx_ij cap'(y_ij) scale, then the scores backward's
// sums (dq, dk, ∂L/∂θ with the dense ∂A(τ)/∂θ, ∂L/∂t and ∂L/∂s with X A(τ) and −m dx),
// ∂L/∂m_h = −Σ dx τ and ∂L/∂σ_h = −Σ_i e^{σ_h − lse_i} D_i. The kernel gets out and lse of the
// reference rounded to double, so the test measures the backward alone. A mixed composition
// with a Jordan chain over 3000 positions (anchored tiles, Δ ≠ 0), RoPE near 1.7e9 with sinks and
// a softcap, keys stored encoded; grouped-query heads, causal and windowed masks, ALiBi slopes.
//
// Tolerance (tests/tolerances.hpp, Tol<C>::score_gradient in the arithmetic type C, float for
// float storage; the positions' phase term in double): each result is a sum over
// pairs; a pair's W carries the logit's error δ = rel · scale M_ij (M_ij = |q|₁ κ² ‖A(τ)‖ |k|₁)
// through P (|∂W| ≤ scale P (|dP| + |D|) δ) and the products' (dv + 8) ε; the sums add the
// relative factor rel of the scores backward. Bounds are Σ over pairs of those magnitudes,
// plus Tol<C>::flushed() absolute: weights P below C's normal range (e^-700 and less in double
// over 3000 positions of a growing composition) flush to 0.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <peal/attention_backward.hpp>
#include <random>
#include <vector>

#include "derivative_check.hpp"
#include "families.hpp"
#include "tolerances.hpp"

using namespace peal_test;

namespace {

using LD = long double;
using MLD = peal::Matrix<LD>;
using VLD = peal::Vector<LD>;
using peal::Index;
using peal::TensorView;
using peal_test::derivative_check::kappa2;
using peal_test::derivative_check::max_abs;

struct Shape {
  int nq, nk, Hq, Hk, dv;
  double lo, hi;
  bool causal;
  double window, softcap;
  bool alibi, sinks, keys_encoded;
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
    c.reference();
    return c;
  }

  VLD row(const std::vector<double>& x, int i, int h, int H, int n) const {
    VLD r(n);
    for (int e = 0; e < n; ++e) r(e) = LD(x[std::size_t((i * H + h) * n + e)]);
    return r;
  }
  bool masked(LD t, LD s) const { return (sh.causal && s > t) || !(t - s < LD(sh.window)); }

  void reference() {
    const int G = sh.Hq / sh.Hk, P = peal::parameter_count(enc), dvn = sh.dv;
    const LD scale = LD(*opt.scale), c = LD(sh.softcap), k2 = kappa2(twin);
    const LD xn = max_abs(MLD(twin.generator())) * d;
    for (auto* x : {&dq, &mq}) x->assign(q.size(), 0);
    for (auto* x : {&dk, &mk}) x->assign(k.size(), 0);
    for (auto* x : {&dv, &mv}) x->assign(v.size(), 0);
    for (auto* x : {&dth, &mth}) x->assign(std::size_t(P), 0);
    for (auto* x : {&dt, &mt}) x->assign(std::size_t(sh.nq), 0);
    for (auto* x : {&ds, &ms}) x->assign(std::size_t(sh.nk), 0);
    for (auto* x : {&dm, &mm, &dsink, &msink}) x->assign(std::size_t(sh.Hq), 0);
    out.assign(std::size_t(sh.nq * sh.Hq * dvn), 0.0);
    lse.assign(std::size_t(sh.nq * sh.Hq), 0.0);
    for (int i = 0; i < sh.nq; ++i)
      for (int h = 0; h < sh.Hq; ++h) {
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
          raw[std::size_t(j)] = qv.dot(MLD(twin.A(t - s)) * kv);  // = (F(t) q)ᵀ (G(s) k)
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
        for (int e = 0; e < dvn; ++e) out[std::size_t((i * sh.Hq + h) * dvn + e)] = double(o(e));
        const LD D = dov.dot(o);
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
          const MLD A = twin.A(tau);
          const LD Mij = qv.cwiseAbs().sum() * max_abs(A) * k2 * kv.cwiseAbs().sum();
          const LD wmag = std::abs(w) + scale * pj * (std::abs(dP) + std::abs(D)) * scale * Mij;
          for (int e = 0; e < dvn; ++e) {
            dv[std::size_t((j * sh.Hk + kh) * dvn + e)] += pj * dov(e);
            mv[std::size_t((j * sh.Hk + kh) * dvn + e)] +=
                pj * std::abs(dov(e)) * (1 + scale * Mij) + pj * std::abs(dov(e));
          }
          // dk: of k, or with keys_encoded of the stored row G(s) k: F(t) q per unit of w.
          const VLD ak = A * kv,
                    atq = sh.keys_encoded ? VLD(MLD(twin.F(t)) * qv) : VLD(A.transpose() * qv);
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
            const std::vector<MLD> dA = peal::dA(twin, t);
            const VLD gk = MLD(twin.G(s)) * kv;
            for (int x2 = 0; x2 < P; ++x2) {
              dth[std::size_t(x2)] += w * qv.dot(dA[std::size_t(x2)] * gk);
              mth[std::size_t(x2)] += mag * (1 + std::abs(t));
            }
            const LD dpos = w * qv.dot(peal::dA_dtau(twin, t) * gk) - m * dx;
            dt[std::size_t(i)] += dpos, mt[std::size_t(i)] += mag * (1 + xn) + std::abs(m * dx);
            ds[std::size_t(j)] += m * dx, ms[std::size_t(j)] += std::abs(m * dx);
          } else {
            const std::vector<MLD> dA = peal::dA(twin, tau);
            for (int x2 = 0; x2 < P; ++x2) {
              dth[std::size_t(x2)] += w * qv.dot(dA[std::size_t(x2)] * kv);
              mth[std::size_t(x2)] += mag * (1 + std::abs(tau));
            }
            const LD dpos = w * qv.dot(peal::dA_dtau(twin, tau) * kv) - m * dx;
            dt[std::size_t(i)] += dpos, mt[std::size_t(i)] += mag * (1 + xn) + std::abs(m * dx);
            ds[std::size_t(j)] -= dpos, ms[std::size_t(j)] += mag * (1 + xn) + std::abs(m * dx);
          }
        }
      }
  }
};

template <class T>
void check_all(const char* what, const std::vector<T>& got, const std::vector<LD>& ref,
               const std::vector<LD>& mag, LD rel, LD floor) {
  REQUIRE(got.size() == ref.size());
  for (std::size_t x = 0; x < got.size(); ++x) {
    INFO(what << "[" << x << "]: " << double(got[x]) << " vs " << double(ref[x]) << ", bound "
              << double(rel * mag[x]));
    CHECK(std::abs(LD(got[x]) - ref[x]) <= rel * mag[x] + floor);
  }
}

// One call with every gradient against the reference; p the longest Jordan chain − 1, for
// the rebasing amplification of Tol::score.
// T: the storage of q, k, v, out and d_out; C, the arithmetic, is float for float storage.
template <class Fam, class T = double>
void check_attention_backward(const Shape& sh, Regime regime, int p, std::uint64_t seed) {
  using C = peal::detail::scores_kernels::arith_t<T, T>;
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
  peal::attention_backward(
      c.enc, TensorView<const T>(qs.data(), sh.nq, sh.Hq, d), peal::Positions(c.tq),
      TensorView<const T>(ks.data(), sh.nk, sh.Hk, d), peal::Positions(c.tk),
      TensorView<const T>(vs.data(), sh.nk, sh.Hk, sh.dv),
      TensorView<const T>(os.data(), sh.nq, sh.Hq, sh.dv), c.lse,
      TensorView<const T>(ds.data(), sh.nq, sh.Hq, sh.dv),
      TensorView<double>(dq.data(), sh.nq, sh.Hq, d), TensorView<double>(dk.data(), sh.nk, sh.Hk, d),
      TensorView<double>(dv.data(), sh.nk, sh.Hk, sh.dv), c.opt,
      {&gp, &gt, &gs, sh.alibi ? &gm : nullptr, sh.sinks ? &gsk : nullptr});
  INFO(Fam::name << ", positions [" << sh.lo << ", " << sh.hi << "], " << sizeof(C) * 8
                 << "-bit arithmetic");
  LD pmax = 0;
  for (double t : c.tq) pmax = std::max(pmax, std::abs(LD(t)));
  for (double s : c.tk) pmax = std::max(pmax, std::abs(LD(s)));
  const LD xn = max_abs(MLD(c.twin.generator())) * d;
  const LD rho = Tol<C>::score_rho(p, Tol<C>::poly_half_spread(p),
                                   Tol<C>::poly_half_spread(p));
  // The arithmetic's error in C, the positions' and anchors' in double (as scores backward).
  const LD rel = Tol<C>::score_gradient(d, rho, 0, 0, sh.nq * sh.nk * sh.Hq) +
                 Tol<double>::phase(xn * 4 * pmax) + Tol<C>::roundings(sh.dv + 8);
  const LD floor = Tol<C>::flushed();  // P below C's normal range flushes to 0
  const LD relpos = rel + Tol<double>::derivative(d, xn * 2 * pmax);
  // The conventions of out and lse are the forward's own: peal::attention on the same inputs
  // gives them within rel (an lse moves by the logits' error, rel relative to their scale;
  // out, a softmax average of values in [−1, 1], by as much).
  {
    std::vector<double> out2(c.out.size()), lse2(c.lse.size());
    peal::AttentionOptions fo = c.opt;
    fo.lse = lse2.data();
    peal::attention(c.enc, TensorView<const T>(qs.data(), sh.nq, sh.Hq, d),
                    peal::Positions(c.tq), TensorView<const T>(ks.data(), sh.nk, sh.Hk, d),
                    peal::Positions(c.tk), TensorView<const T>(vs.data(), sh.nk, sh.Hk, sh.dv),
                    TensorView<double>(out2.data(), sh.nq, sh.Hq, sh.dv), fo);
    for (std::size_t x = 0; x < lse2.size(); ++x) {
      INFO("lse[" << x << "]: forward " << lse2[x] << ", reference " << c.lse[x]);
      CHECK(std::abs(LD(lse2[x]) - LD(c.lse[x])) <= rel * (1 + std::abs(LD(c.lse[x]))));
    }
    for (std::size_t x = 0; x < out2.size(); ++x)
      CHECK(std::abs(LD(out2[x]) - LD(c.out[x])) <= rel);
  }
  check_all("dv", dv, c.dv, c.mv, rel, floor);
  check_all(sh.keys_encoded ? "dk (of the stored rows G(s) k)" : "dk", dk, c.dk, c.mk, rel, floor);
  check_all("dq", dq, c.dq, c.mq, rel, floor);
  check_all("parameter", gp, c.dth, c.mth, relpos, floor);
  check_all("query position", gt, c.dt, c.mt, relpos, floor);
  check_all("key position", gs, c.ds, c.ms, relpos, floor);
  if (sh.alibi) check_all("ALiBi slope", gm, c.dm, c.mm, rel, floor);
  if (sh.sinks) check_all("sink", gsk, c.dsink, c.msink, rel, floor);
}

using RopePartial = RopeFam<peal::RopeType::Default, peal::Layout::HalfSplit, 16, 50>;
constexpr double kNone = std::numeric_limits<double>::infinity();

}  // namespace

TEST_CASE("attention backward: rebased tiles, GQA, causal and windowed masks, ALiBi",
          "[attention_backward]") {
  // The Jordan chain limits a tile to a half-spread of ~256: several tiles per side, Δ ≠ 0.
  const Shape wide{6, 9, 4, 2, 5, 0, 3000, true, 1500, 0, true, false, false};
  check_attention_backward<MixedFam>(wide, Regime::Large, 2, 3);
  const Shape small{7, 8, 2, 1, 3, -3, 3, false, kNone, 0, true, true, false};
  check_attention_backward<BasisChangeFam>(small, Regime::Random, 2, 4);
}

TEST_CASE("attention backward: RoPE near 1.7e9 with sinks and a softcap, encoded keys, a window",
          "[attention_backward]") {
  const Shape rope{5, 7, 4, 2, 6, 1.7e9, 1.7e9 + 4096, true, kNone, 2.5, true, true, false};
  check_attention_backward<RopePartial>(rope, Regime::Random, 0, 5);
  Shape enc = rope;
  enc.keys_encoded = true;
  check_attention_backward<RopePartial>(enc, Regime::Random, 0, 6);
  // A window of 16 over 64 positions, both directions visible otherwise: the masked pairs
  // would carry most of the weight.
  const Shape win{6, 8, 2, 2, 4, 0, 64, false, 16, 0, false, false, false};
  check_attention_backward<RopePartial>(win, Regime::Random, 0, 7);
}

TEST_CASE("attention backward: float storage, float arithmetic", "[attention_backward]") {
  // Float's rebasing budget cuts 3000 positions into tiles of half-spread ~16 (Jordan chains).
  const Shape wide{6, 9, 4, 2, 5, 0, 3000, true, 1500, 0, true, false, false};
  check_attention_backward<MixedFam, float>(wide, Regime::Large, 2, 13);
  const Shape rope{5, 7, 4, 2, 6, 1.7e9, 1.7e9 + 4096, true, kNone, 2.5, true, true, false};
  check_attention_backward<RopePartial, float>(rope, Regime::Random, 0, 14);
}

TEST_CASE("attention backward: bad input throws and writes nothing", "[attention_backward]") {
  const Shape sh{3, 4, 2, 1, 2, 0, 10, true, kNone, 0, false, true, false};
  auto c = Problem<MixedFam>::make(sh, Regime::Random, 9);
  const int d = c.d;
  std::vector<double> dq(c.q.size(), 7.0), gs(2, 0.0);
  const TensorView<const double> q(c.q.data(), 3, 2, d), k(c.k.data(), 4, 1, d),
      v(c.v.data(), 4, 1, 2), o(c.out.data(), 3, 2, 2), dO(c.dout.data(), 3, 2, 2);
  const TensorView<double> dqv(dq.data(), 3, 2, d), none;
  const peal::Positions tq(c.tq), tk(c.tk);
  using peal::invalid_argument;
  std::vector<double> short_lse(5);
  CHECK_THROWS_AS(peal::attention_backward(c.enc, q, tq, k, tk, v, o, short_lse, dO, dqv, none,
                                           none, c.opt, {}),
                  invalid_argument);
  CHECK_THROWS_AS(peal::attention_backward(c.enc, q, tq, k, tk, v, o, c.lse,
                                           TensorView<const double>(c.dout.data(), 3, 1, 2), dqv,
                                           none, none, c.opt, {}),
                  invalid_argument);
  std::vector<double> g1(1);
  CHECK_THROWS_AS(peal::attention_backward(c.enc, q, tq, k, tk, v, o, c.lse, dO, dqv, none, none,
                                           c.opt, {nullptr, nullptr, nullptr, nullptr, &g1}),
                  invalid_argument);
  std::vector<double> gm(2);
  CHECK_THROWS_AS(peal::attention_backward(c.enc, q, tq, k, tk, v, o, c.lse, dO, dqv, none, none,
                                           c.opt, {nullptr, nullptr, nullptr, &gm}),
                  invalid_argument);  // no slopes in the options
  std::vector<double> vc = c.v;
  CHECK_THROWS_AS(peal::attention_backward(c.enc, q, tq, k, tk,
                                           TensorView<const double>(vc.data(), 4, 1, 2), o, c.lse,
                                           dO, dqv, none, TensorView<double>(vc.data(), 4, 1, 2),
                                           c.opt, {}),
                  invalid_argument);  // dv over v
  peal::AttentionOptions enc_keys = c.opt;
  enc_keys.keys_encoded = true;  // a damped, Jordan encoding is not a pure rotation
  CHECK_THROWS_AS(peal::attention_backward(c.enc, q, tq, k, tk, v, o, c.lse, dO, dqv, none, none,
                                           enc_keys, {nullptr, nullptr, nullptr, nullptr, &gs}),
                  invalid_argument);
  for (double x : dq) CHECK(x == 7.0);
  for (double x : gs) CHECK(x == 0.0);
  CHECK(vc == c.v);
}
