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
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>

#include "attention_backward_check.hpp"
#include "toy_block.hpp"

using namespace peal_test;
using namespace peal_test::attention_backward_check;

TEST_CASE("attention backward: the shards' share of a causal staircase", "[attention_backward]") {
  using peal::detail::backward_run::shard_count;
  using peal::detail::backward_run::shard_of;
  // Tiles dealt back and forth: over every 2S tiles each shard gets tiles I and 2S − 1 − I,
  // the same causal work (I + 1/2 per tile) for every shard.
  for (Index S : {1, 2, 3, 4}) {
    std::vector<double> work(std::size_t(S), 0.0);
    for (Index I = 0; I < 4 * S; ++I) {
      const Index s = shard_of(I, S);
      REQUIRE((s >= 0 && s < S));
      work[std::size_t(s)] += double(I) + 0.5;
    }
    for (double w : work) CHECK(w == work[0]);
  }
  CHECK(shard_of(0, 4) == 0);
  CHECK(shard_of(3, 4) == 3);
  CHECK(shard_of(4, 4) == 3);
  CHECK(shard_of(7, 4) == 0);
  CHECK(shard_of(8, 4) == 0);
  // One shard per tile without a staircase, one per two tiles with it; at most kMaxShards and
  // within the byte budget.
  CHECK(shard_count(3, 1.0, false) == 3);
  CHECK(shard_count(3, 1.0, true) == 2);
  CHECK(shard_count(4, 1.0, true) == 2);
  CHECK(shard_count(1, 1.0, true) == 1);
  CHECK(shard_count(16, 1.0, true) == peal::detail::backward_run::kMaxShards);
  CHECK(shard_count(16, peal::detail::backward_run::kShardBytes / 2, false) == 2);
  CHECK(shard_count(16, 2 * peal::detail::backward_run::kShardBytes, false) == 1);
}

TEST_CASE("attention backward: the per-thread buffers are 64-byte aligned", "[attention_backward]") {
  // The bits of Eigen's loops over them must not depend on where the heap put them
  // (detail/tiled/backward_run.hpp, Buffer): large blocks are mmap'd 16 bytes past a page.
  namespace br = peal::detail::backward_run;
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; };
  auto& w = br::Workspace<float>::local();
  for (Index n : {Index(3), Index(1) << 20}) {
    br::at_least(w.khat, n), br::at_least(w.dkhat, n), br::at_least(w.qhat, n);
    br::at_least(w.dqhat, n), br::at_least(w.xbuf, n);
    CHECK(aligned(w.khat.data()));
    CHECK(aligned(w.dkhat.data()));
    CHECK(aligned(w.qhat.data()));
    CHECK(aligned(w.dqhat.data()));
    CHECK(aligned(w.xbuf.data()));
    auto& e = peal::detail::attention_backward::Work<float>::local();
    br::at_least(e.dout, n), br::at_least(e.vd, n), br::at_least(e.dvacc, n);
    CHECK(aligned(e.dout.data()));
    CHECK(aligned(e.vd.data()));
    CHECK(aligned(e.dvacc.data()));
  }
}

TEST_CASE("attention backward: rebased tiles, GQA, causal and windowed masks, ALiBi",
          "[attention_backward]") {
  // The Jordan chain limits a tile to a half-spread of ~256: several tiles per side, Δ ≠ 0.
  const Shape wide{6, 9, 4, 2, 5, 0, 3000, true, 1500, 0, true, false, false};
  check_attention_backward<MixedFam>(wide, Regime::Large, 2, 3);
  const Shape small{7, 8, 2, 1, 3, -3, 3, false, kNone, 0, true, true, false};
  check_attention_backward<BasisChangeFam>(small, Regime::Random, 2, 4);
  // Every input and output through strided views (element stride 2, gaps between tokens
  // and heads): the same results, and nothing written between the elements.
  check_attention_backward<MixedFam>(wide, Regime::Large, 2, 3, true);
  check_attention_backward<BasisChangeFam>(small, Regime::Random, 2, 4, true);
}

TEST_CASE("attention backward: a block type peal does not know",
          "[attention_backward][protocol]") {
  // tests/toy_block.hpp: its traits and dA(τ, k) only; no Jordan chain (p = 0).
  const Shape wide{6, 9, 4, 2, 5, 0, 3000, true, 1500, 0, true, false, false};
  check_attention_backward<ToyFam>(wide, Regime::Large, 0, 15);
  const Shape small{7, 8, 2, 1, 3, -3, 3, false, kNone, 0, true, true, false};
  check_attention_backward<ToyFam>(small, Regime::Random, 0, 16);
}

TEST_CASE("attention backward: one encoding per query head (PerHead)", "[attention_backward]") {
  // Four heads with their own parameters over two key heads: each head's lse column, ALiBi
  // slope and sink, parameters in its block of the layout, dk and dv summed over each group;
  // strided views too.
  const Shape wide{6, 9, 4, 2, 5, 0, 3000, true, 1500, 0, true, true, false};
  check_attention_backward<PerHeadFam<MixedFam, 4>>(wide, Regime::Large, 2, 23);
  check_attention_backward<PerHeadFam<MixedFam, 4>>(wide, Regime::Large, 2, 24, true);
}

TEST_CASE("attention backward: no queries, no gradient", "[attention_backward]") {
  // No queries: dk and dv are 0 (written, not left as they were).
  const Shape sh{3, 4, 2, 1, 2, 0, 10, true, kNone, 0, false, false, false};
  auto c = Problem<MixedFam>::make(sh, Regime::Random, 27);
  std::vector<double> dk(c.k.size(), 7.0), dv(c.v.size(), 7.0), none_lse, none_pos;
  peal::attention_backward(c.enc, TensorView<const double>(c.q.data(), 0, 2, c.d),
                           peal::Positions(none_pos), TensorView<const double>(c.k.data(), 4, 1, c.d),
                           peal::Positions(c.tk), TensorView<const double>(c.v.data(), 4, 1, 2),
                           TensorView<const double>(c.out.data(), 0, 2, 2), none_lse,
                           TensorView<const double>(c.dout.data(), 0, 2, 2), TensorView<double>(),
                           TensorView<double>(dk.data(), 4, 1, c.d),
                           TensorView<double>(dv.data(), 4, 1, 2), c.opt);
  CHECK(std::all_of(dk.begin(), dk.end(), [](double x) { return x == 0.0; }));
  CHECK(std::all_of(dv.begin(), dv.end(), [](double x) { return x == 0.0; }));
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
