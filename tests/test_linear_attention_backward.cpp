// Tests of include/peal/linear_attention_backward.hpp: linear_attention_backward against the
// per-pair formula of the long double twin. The forward is out_ih = Σ_{s_j ≤ t_i} S_hij v_j with
// S_hij = scale γ_h^τ q_ihᵀ A(τ) k_j, so with dO = ∂L/∂out:
//   dS_hij = dO_ih · v_j (the scores backward's reference of tests/scores_backward_check.hpp
//   with that dS: dq, dk, ∂L/∂θ, ∂L/∂t, ∂L/∂s, ∂L/∂γ_h),
//   dv_j = Σ_{h of its group} Σ_{i : s_j ≤ t_i} S_hij dO_ih  (formed here in long double).
// Tolerance: the scores backward's (tests/test_scores_backward.cpp), Tol<C>::score_gradient in
// the arithmetic type C of the storage, of each result's terms' magnitudes; dv's terms are
// |S_hij| |dO_ih| with |S| ≤ scale γ^τ |q|₁ κ² ‖A(τ)‖ |k|₁.
#include <algorithm>
#include <catch2/catch.hpp>
#include <peal/linear_attention_backward.hpp>

#include "scores_backward_check.hpp"

using namespace peal_test;
using namespace peal_test::scores_backward_check;

namespace {

// block: queries per block of the backward (0: the public function's own choice).
template <class Fam, class T = double>
void check_linear_backward(const Shape& sh, Regime regime, int p, bool basis, std::uint64_t seed,
                           int dvn, peal::Index block = 0) {
  using C = peal::detail::tiled::arith_t<T, T>;
  REQUIRE((sh.causal && !sh.alibi));
  auto pr = Problem<Fam>::make(sh, regime, seed);
  std::sort(pr.tq.begin(), pr.tq.end());  // linear attention: positions sorted by time
  std::sort(pr.tk.begin(), pr.tk.end());
  const int d = pr.d, P = peal::parameter_count(pr.enc), G = sh.Hq / sh.Hk;
  std::mt19937_64 rng(seed + 100);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(std::size_t(sh.nk * sh.Hk * dvn)), dout(std::size_t(sh.nq * sh.Hq * dvn));
  for (auto* x : {&pr.q, &pr.k, &v, &dout})
    for (double& y : *x) y = double(T(x == &pr.q || x == &pr.k ? y : u(rng)));
  // dS = dO · v on the visible pairs: the scores backward's reference then gives dq, dk, θ, t, s, γ.
  for (int h = 0; h < sh.Hq; ++h)
    for (int i = 0; i < sh.nq; ++i)
      for (int j = 0; j < sh.nk; ++j) {
        LD s = 0;
        for (int e = 0; e < dvn; ++e)
          s += LD(dout[std::size_t((i * sh.Hq + h) * dvn + e)]) *
               LD(v[std::size_t((j * sh.Hk + h / G) * dvn + e)]);
        pr.ds[std::size_t((h * sh.nq + i) * sh.nk + j)] = pr.tk[std::size_t(j)] > pr.tq[std::size_t(i)] ? 0.0 : double(s);
      }
  const Reference r = reference(pr);
  // dv, and its terms' magnitudes.
  std::vector<LD> rdv(v.size(), 0), mdv(v.size(), 0);
  const LD k2 = heads_kappa2(pr.twin, sh.Hq);
  for (int h = 0; h < sh.Hq; ++h) {
    const auto& tw = head_of(pr.twin, h);
    for (int i = 0; i < sh.nq; ++i)
      for (int j = 0; j < sh.nk; ++j) {
        const LD t = pr.tq[std::size_t(i)], s = pr.tk[std::size_t(j)], tau = t - s;
        if (s > t) continue;
        const LD gamma = sh.decay ? LD(pr.opt.decay[std::size_t(h)]) : 1;
        const LD f = LD(pr.opt.scale) * std::pow(gamma, tau);
        const MLD A = tw.A(tau);
        const VLD qv = pr.qrow(i, h), kv = pr.krow(j, h / G);
        const LD S = f * qv.dot(A * kv), M = std::abs(f) * qv.cwiseAbs().sum() * max_abs(A) * k2 *
                                                 kv.cwiseAbs().sum();
        for (int e = 0; e < dvn; ++e) {
          const LD o = LD(dout[std::size_t((i * sh.Hq + h) * dvn + e)]);
          rdv[std::size_t((j * sh.Hk + h / G) * dvn + e)] += S * o;
          mdv[std::size_t((j * sh.Hk + h / G) * dvn + e)] += M * std::abs(o);
        }
      }
  }
  const std::vector<T> qs(pr.q.begin(), pr.q.end()), ks(pr.k.begin(), pr.k.end()),
      vs(v.begin(), v.end()), ds(dout.begin(), dout.end());
  std::vector<double> dq(pr.q.size(), 7.0), dk(pr.k.size(), 7.0), dv(v.size(), 7.0),
      gp(std::size_t(P), 0.0), gt(std::size_t(sh.nq), 0.0), gs(std::size_t(sh.nk), 0.0),
      gg(std::size_t(sh.Hq), 0.0);
  peal::LinearAttentionOptions opt;
  opt.scale = pr.opt.scale;
  opt.decay = pr.opt.decay;
  const peal::LinearAttentionGradients<double> grads{&gp, &gt, &gs, sh.decay ? &gg : nullptr};
  const TensorView<const T> qv(qs.data(), sh.nq, sh.Hq, d), kv(ks.data(), sh.nk, sh.Hk, d),
      vv(vs.data(), sh.nk, sh.Hk, dvn), dov(ds.data(), sh.nq, sh.Hq, dvn);
  const TensorView<double> dqv(dq.data(), sh.nq, sh.Hq, d), dkv(dk.data(), sh.nk, sh.Hk, d),
      dvv(dv.data(), sh.nk, sh.Hk, dvn);
  const peal::Positions tq(pr.tq), tk(pr.tk);
  if (block == 0)
    peal::linear_attention_backward(pr.enc, qv, tq, kv, tk, vv, dov, dqv, dkv, dvv, opt, grads);
  else
    peal::detail::linear_backward::run(pr.enc, qv, tq, kv, tk, vv, dov, dqv, dkv, dvv, opt, grads,
                                       block * sh.Hq * sh.nk);
  INFO(Fam::name << ", positions [" << sh.lo << ", " << sh.hi << "], " << sizeof(C) * 8
                 << "-bit arithmetic, blocks of " << block << " queries (0: one)");
  // The scores backward's tolerance, plus dS = dO · v's dv roundings (in double).
  const GradientTolerance tol = gradient_tolerance<C>(pr, p, basis);
  const LD rel = tol.rel + Tol<double>::roundings(dvn);
  check_all("dq", dq, r.dq, r.mq, rel);
  check_all("dk", dk, r.dk, r.mk, rel);
  check_all("dv", dv, rdv, mdv, rel);
  check_all("parameter", gp, r.dtheta, r.mtheta, tol.position + Tol<double>::roundings(dvn));
  check_all("query position", gt, r.dt, r.mt, tol.position + Tol<double>::roundings(dvn));
  check_all("key position", gs, r.ds, r.ms, tol.position + Tol<double>::roundings(dvn));
  if (sh.decay) check_all("decay", gg, r.dg, r.mg, rel);
}

}  // namespace

TEST_CASE("linear attention backward: against the per-pair formula", "[linear_backward]") {
  // A mixed composition with a Jordan chain over 3000 positions (anchored tiles, cross factors),
  // decays, grouped-query heads; its basis change; float storage and arithmetic.
  const Shape wide{6, 8, 4, 2, 0, 3000, true, false, true};
  check_linear_backward<MixedFam>(wide, Regime::Large, 2, false, 31, 5);
  check_linear_backward<BasisChangeFam>(wide, Regime::Large, 2, true, 32, 3);
  const Shape small{7, 9, 2, 1, -3, 3, true, false, true};
  check_linear_backward<MixedFam>(small, Regime::Random, 2, false, 33, 4);
  check_linear_backward<MixedFam, float>(small, Regime::Random, 2, false, 34, 4);
  // Queries in blocks of 2 and of 1: dk, dv and the gradients summed over the blocks.
  check_linear_backward<MixedFam>(wide, Regime::Large, 2, false, 35, 5, 2);
  check_linear_backward<MixedFam>(small, Regime::Random, 2, false, 36, 4, 1);
}

TEST_CASE("linear attention backward: no keys, no queries, bad input", "[linear_backward]") {
  const Shape sh{3, 4, 2, 1, 0, 10, true, false, true};
  auto pr = Problem<MixedFam>::make(sh, Regime::Random, 37);
  std::sort(pr.tq.begin(), pr.tq.end());
  std::sort(pr.tk.begin(), pr.tk.end());
  const int d = pr.d, P = peal::parameter_count(pr.enc);
  std::vector<double> v(4 * 2, 0.5), dout(3 * 2 * 2, 0.25), dq(pr.q.size(), 7.0), dk(pr.k.size(), 7.0),
      dv(v.size(), 7.0), gp(std::size_t(P), 0.0), short_gp(std::size_t(P + 1), 0.0), none_pos;
  const TensorView<const double> q(pr.q.data(), 3, 2, d), k(pr.k.data(), 4, 1, d),
      vv(v.data(), 4, 1, 2), dO(dout.data(), 3, 2, 2);
  const TensorView<double> dqv(dq.data(), 3, 2, d), dkv(dk.data(), 4, 1, d), dvv(dv.data(), 4, 1, 2),
      none;
  const peal::Positions tq(pr.tq), tk(pr.tk), empty(none_pos);
  peal::LinearAttentionOptions opt;
  opt.decay = pr.opt.decay;
  auto all = [](const std::vector<double>& x, double value) {
    return std::all_of(x.begin(), x.end(), [&](double y) { return y == value; });
  };
  // No keys: dq is 0. No queries: dk and dv are 0.
  peal::linear_attention_backward(pr.enc, q, tq, TensorView<const double>(pr.k.data(), 0, 1, d),
                                  empty, TensorView<const double>(v.data(), 0, 1, 2), dO, dqv,
                                  none, none, opt, {&gp});
  CHECK(all(dq, 0.0));
  peal::linear_attention_backward(pr.enc, TensorView<const double>(pr.q.data(), 0, 2, d), empty,
                                  k, tk, vv, TensorView<const double>(dout.data(), 0, 2, 2), none,
                                  dkv, dvv, opt, {&gp});
  CHECK(all(dk, 0.0));
  CHECK(all(dv, 0.0));
  CHECK(all(gp, 0.0));
  // Bad input: thrown before anything is written.
  std::fill(dq.begin(), dq.end(), 7.0);
  using Catch::Contains;
  peal::LinearAttentionOptions retnet = opt;
  retnet.normalization = peal::LinearNorm::retnet;
  retnet.form = peal::LinearForm::parallel;
  CHECK_THROWS_WITH(peal::linear_attention_backward(pr.enc, q, tq, k, tk, vv, dO, dqv, dkv, dvv,
                                                    retnet, {&gp}),
                    Contains("normalization = retnet is not differentiated"));
  CHECK_THROWS_WITH(peal::linear_attention_backward(pr.enc, q, tq, k, tk, vv, dO, dqv, dkv, dvv,
                                                    opt, {&short_gp}),
                    Contains("parameter gradient has"));
  CHECK_THROWS_WITH(peal::linear_attention_backward(pr.enc, q, tq, k, tk, vv,
                                                    TensorView<const double>(dout.data(), 3, 1, 2),
                                                    dqv, dkv, dvv, opt, {&gp}),
                    Contains("d_out is"));
  CHECK_THROWS_WITH(peal::linear_attention_backward(pr.enc, q, tq, k, tk, vv, dO,
                                                    TensorView<double>(dout.data(), 3, 2, 2), dkv,
                                                    dvv, opt, {&gp}),
                    Contains("dq must have the extents of q"));
  std::vector<double> unsorted = pr.tk;
  std::swap(unsorted[0], unsorted[3]);
  CHECK_THROWS_WITH(peal::linear_attention_backward(pr.enc, q, tq, k, peal::Positions(unsorted),
                                                    vv, dO, dqv, dkv, dvv, opt, {&gp}),
                    Contains("non-decreasing"));
  std::vector<double> dg(2, 0.0);
  peal::LinearAttentionOptions no_decay;
  CHECK_THROWS_WITH(peal::linear_attention_backward(pr.enc, q, tq, k, tk, vv, dO, dqv, dkv, dvv,
                                                    no_decay, {&gp, nullptr, nullptr, &dg}),
                    Contains("decay gradient was asked for"));
  CHECK(all(dq, 7.0));
  CHECK(all(dk, 0.0));  // as the call above left it
  CHECK(all(gp, 0.0));
}
