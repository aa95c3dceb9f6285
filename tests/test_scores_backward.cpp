// Tests of include/peal/scores_backward.hpp: scores_backward against the per-pair formula of
// the long double twin. With W_ij = dS_ij scale γ_h^τ (0 where masked), τ = t_i − s_j:
//   dq_ih = Σ_j W_ij A(τ) k_j,  dk_j = Σ_{h of its group} Σ_i W_ij A(τ)ᵀ q_ih,
//   ∂L/∂θ = Σ W_ij q_ihᵀ ∂A(τ)/∂θ k_j   (dense derivatives.hpp, checked in test_derivatives.cpp),
//   ∂L/∂t_i = Σ_j (W_ij (q ᵀX A k + ln γ_h qᵀA k) − m_h dS_ij) = −∂L/∂s_j's terms,
//   ∂L/∂m_h = −Σ dS_ij τ,  ∂L/∂γ_h = Σ W_ij (τ / γ_h) qᵀ A k.
// The kernel never forms A(τ) at absolute time for growing encodings: it cuts the positions
// into anchored tiles (a mixed composition with a Jordan chain over 3000 positions: several
// tiles per side, cross factors A(Δ) ≠ I, and a basis change, whose cross factor is its inner
// encoding's). RoPE with partial rotary near 1.7e9 takes anchor 0. Grouped-query heads, causal
// masks, ALiBi slopes and decays throughout.
//
// Tolerance (tests/tolerances.hpp): each result is a sum of per-pair terms of magnitude
// M_ij = |W_ij| |q|₁ κ² ‖A(τ)‖ |k|₁ times (1 + |τ|) for θ, (1 + n|X|) for positions; a term's
// relative error is the forward score's, Tol<C>::score_gradient(d, ρ, extra, x, N) in the
// arithmetic type C (float for float storage, with float's rebasing budget): the
// fused score's (2 (d + 16) ρ + extra) ε with the rebasing amplification ρ of the Jordan chains,
// the lag and angle terms phase(x), and N roundings of the sums (docs/kernels-scores.md §3).
#include <algorithm>
#include <catch2/catch.hpp>

#include "scores_backward_check.hpp"
#include "toy_block.hpp"

using namespace peal_test;
using namespace peal_test::scores_backward_check;

TEST_CASE("scores backward: rebased tiles, cross factors, a basis change", "[scores_backward]") {
  // A Jordan chain of length 3 limits a tile's half-spread to ~256 (double): 3000 positions
  // give several tiles per side, and anchors Δ = T_I − S_J ≠ 0.
  const Shape wide{6, 8, 4, 2, 0, 3000, false, true, true};
  check_scores_backward<MixedFam>(wide, Regime::Large, 2, false, 3);
  check_scores_backward<BasisChangeFam>(wide, Regime::Large, 2, true, 4);
  const Shape causal{7, 9, 2, 1, -3, 3, true, true, false};
  check_scores_backward<MixedFam>(causal, Regime::Random, 2, false, 5);
  check_scores_backward<MixedFam>(causal, Regime::Random, 2, false, 5, true);  // strided views
  check_scores_backward<NestedFam>(causal, Regime::Random, 2, false, 6);
}

TEST_CASE("scores backward: a block type peal does not know", "[scores_backward][protocol]") {
  // tests/toy_block.hpp: its traits and dA(τ, k) only; no Jordan chain (p = 0). In a Bank and
  // composed, its parameters and encode backward: tests/test_block_protocol.cpp.
  const Shape wide{6, 8, 4, 2, 0, 3000, false, true, true};
  check_scores_backward<ToyFam>(wide, Regime::Large, 0, false, 12);
  const Shape causal{7, 9, 2, 1, -3, 3, true, true, false};
  check_scores_backward<ToyFam>(causal, Regime::Random, 0, false, 13);
}

TEST_CASE("scores backward: one encoding per query head (PerHead)", "[scores_backward]") {
  // Four heads with their own parameters over two key heads: each head's parameters in its
  // block of the layout ("head[h]."), dk summed over the two query heads of its group, each
  // head's ALiBi slope and decay; strided views too.
  const Shape wide{6, 8, 4, 2, 0, 3000, false, true, true};
  check_scores_backward<PerHeadFam<MixedFam, 4>>(wide, Regime::Large, 2, false, 21);
  const Shape causal{7, 9, 4, 2, -3, 3, true, true, false};
  check_scores_backward<PerHeadFam<MixedFam, 4>>(causal, Regime::Random, 2, false, 22, true);
  // Query heads that are not the encoding's heads, a parameter gradient of the wrong size:
  // thrown before head 0 writes anything.
  auto pr = Problem<PerHeadFam<MixedFam, 4>>::make(causal, Regime::Random, 25);
  const auto three = peal::PerHead<typename decltype(pr.enc)::HeadEncoding>(
      {pr.enc.head(0), pr.enc.head(1), pr.enc.head(2)});
  const int d = pr.d, P = peal::parameter_count(pr.enc);
  std::vector<double> dq(pr.q.size(), 7.0), dk(pr.k.size(), 7.0), gp(std::size_t(P), 0.0),
      short_gp(std::size_t(P - 1), 0.0);
  const TensorView<const double> qv(pr.q.data(), 7, 4, d), kv(pr.k.data(), 9, 2, d),
      dsv(pr.ds.data(), 4, 7, 9);
  const TensorView<double> dqv(dq.data(), 7, 4, d), dkv(dk.data(), 9, 2, d);
  const peal::Positions tq(pr.tq), tk(pr.tk);
  CHECK_THROWS_WITH(peal::scores_backward(three, qv, tq, kv, tk, dsv, dqv, dkv, pr.opt, {&gp}),
                    Catch::Contains("q has 4 heads, the per-head encoding 3"));
  CHECK_THROWS_WITH(peal::scores_backward(pr.enc, qv, tq, kv, tk, dsv, dqv, dkv, pr.opt,
                                          {&short_gp}),
                    Catch::Contains("parameter"));
  CHECK(std::all_of(dq.begin(), dq.end(), [](double x) { return x == 7.0; }));
  CHECK(std::all_of(dk.begin(), dk.end(), [](double x) { return x == 7.0; }));
  CHECK(std::all_of(gp.begin(), gp.end(), [](double x) { return x == 0.0; }));
}

TEST_CASE("scores backward: no keys, no gradient", "[scores_backward]") {
  // Scores of no keys are no entries: dq is 0 (written, not left as it was).
  const Shape sh{3, 4, 2, 1, 0, 10, false, false, false};
  auto pr = Problem<MixedFam>::make(sh, Regime::Random, 26);
  std::vector<double> dq(pr.q.size(), 7.0), gp(std::size_t(peal::parameter_count(pr.enc)), 0.0);
  const std::vector<double> none_pos;
  peal::scores_backward(pr.enc, TensorView<const double>(pr.q.data(), 3, 2, pr.d),
                        peal::Positions(pr.tq), TensorView<const double>(pr.k.data(), 0, 1, pr.d),
                        peal::Positions(none_pos), TensorView<const double>(pr.ds.data(), 2, 3, 0),
                        TensorView<double>(dq.data(), 3, 2, pr.d), TensorView<double>(), pr.opt,
                        {&gp});
  CHECK(std::all_of(dq.begin(), dq.end(), [](double x) { return x == 0.0; }));
  CHECK(std::all_of(gp.begin(), gp.end(), [](double x) { return x == 0.0; }));
  // No queries: dk is 0.
  std::vector<double> dk(pr.k.size(), 7.0);
  peal::scores_backward(pr.enc, TensorView<const double>(pr.q.data(), 0, 2, pr.d),
                        peal::Positions(none_pos), TensorView<const double>(pr.k.data(), 4, 1, pr.d),
                        peal::Positions(pr.tk), TensorView<const double>(pr.ds.data(), 2, 0, 4),
                        TensorView<double>(), TensorView<double>(dk.data(), 4, 1, pr.d), pr.opt,
                        {&gp});
  CHECK(std::all_of(dk.begin(), dk.end(), [](double x) { return x == 0.0; }));
}

TEST_CASE("scores backward: bad input throws and writes nothing", "[scores_backward]") {
  const Shape sh{3, 4, 2, 1, 0, 10, false, true, false};
  auto pr = Problem<MixedFam>::make(sh, Regime::Random, 11);
  const int d = pr.d, P = peal::parameter_count(pr.enc);
  std::vector<double> dq(pr.q.size(), 7.0), gp(std::size_t(P), 0.0), gm(2, 0.0), gg(2, 0.0);
  const TensorView<const double> qv(pr.q.data(), 3, 2, d), kv(pr.k.data(), 4, 1, d),
      dsv(pr.ds.data(), 2, 3, 4);
  const TensorView<double> dqv(dq.data(), 3, 2, d), none;
  const peal::Positions tq(pr.tq), tk(pr.tk);
  using peal::invalid_argument;
  // d_scores of the wrong extents; dq of the wrong extents.
  CHECK_THROWS_AS(peal::scores_backward(pr.enc, qv, tq, kv, tk,
                                        TensorView<const double>(pr.ds.data(), 2, 4, 3), dqv, none,
                                        pr.opt, {&gp}),
                  invalid_argument);
  CHECK_THROWS_AS(peal::scores_backward(pr.enc, qv, tq, kv, tk, dsv,
                                        TensorView<double>(dq.data(), 3, 1, d), none, pr.opt, {&gp}),
                  invalid_argument);
  // A decay gradient without decays; gradients of the wrong size.
  CHECK_THROWS_AS(peal::scores_backward(pr.enc, qv, tq, kv, tk, dsv, dqv, none, pr.opt,
                                        {nullptr, nullptr, nullptr, nullptr, &gg}),
                  invalid_argument);
  std::vector<double> short_p(std::size_t(P - 1));
  CHECK_THROWS_AS(peal::scores_backward(pr.enc, qv, tq, kv, tk, dsv, dqv, none, pr.opt, {&short_p}),
                  invalid_argument);
  // dq over q; dq over d_scores; a NaN position.
  std::vector<double> qc = pr.q;
  TensorView<double> qw(qc.data(), 3, 2, d);
  CHECK_THROWS_AS(peal::scores_backward(pr.enc, qw, tq, kv, tk, dsv, qw, none, pr.opt, {&gp}),
                  invalid_argument);
  std::vector<double> big(std::size_t(3 * 2 * d + 24), 7.0);
  CHECK_THROWS_AS(peal::scores_backward(pr.enc, qv, tq, kv, tk,
                                        TensorView<const double>(big.data(), 2, 3, 4),
                                        TensorView<double>(big.data() + 8, 3, 2, d), none, pr.opt,
                                        {&gp}),
                  invalid_argument);
  std::vector<double> bad = pr.tq;
  bad[1] = std::nan("");
  CHECK_THROWS_AS(peal::scores_backward(pr.enc, qv, peal::Positions(bad), kv, tk, dsv, dqv, none,
                                        pr.opt, {&gp, nullptr, nullptr, &gm}),
                  invalid_argument);
  for (double v : dq) CHECK(v == 7.0);
  for (double v : gp) CHECK(v == 0.0);
  for (double v : gm) CHECK(v == 0.0);
  CHECK(qc == pr.q);
}
