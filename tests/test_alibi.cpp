// ALiBi (include/peal/presets/alibi.hpp) against tests/reference/preset_reference.hpp
// (docs/presets.md §8): slopes, the additive bias, and the exact Jordan construction
// (docs/design.md §1), including why kernels rebase it at large positions.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <peal/peal.hpp>
#include <peal/scores.hpp>
#include <random>
#include <vector>

#include "kernel_catalogue.hpp"
#include "reference/preset_reference.hpp"
#include "tolerances.hpp"

namespace {
using LD = long double;
using peal_test::Tol;
}

TEST_CASE("alibi: slopes match Press et al. (and MPT) for powers of two and not", "[alibi]") {
  for (int n : {1, 2, 3, 5, 8, 12, 16, 20, 40, 64, 96, 112}) {
    CAPTURE(n);
    const auto m = peal::alibi_slopes(n);
    const auto ref = peal_ref::alibi_slopes(n);
    const auto mpt = peal_ref::alibi_slopes_mpt(n);
    REQUIRE(m.size() == std::size_t(n));
    for (int h = 0; h < n; ++h) {
      CAPTURE(h);
      // exp2 of an exactly representable exponent, correctly rounded to double.
      REQUIRE(m[std::size_t(h)] == static_cast<double>(ref[std::size_t(h)]));
      // MPT's formula in long double against peal's correctly rounded slope: one rounding.
      REQUIRE(std::fabs(LD(m[std::size_t(h)]) - mpt[std::size_t(h)]) <=
              Tol<double>::roundings(1) * mpt[std::size_t(h)]);
    }
  }
  // Documented examples (docs/presets.md §8).
  const auto m8 = peal::alibi_slopes(8);
  for (int h = 0; h < 8; ++h) REQUIRE(m8[std::size_t(h)] == std::ldexp(1.0, -(h + 1)));
  const auto m12 = peal::alibi_slopes(12);
  REQUIRE(m12[7] == std::ldexp(1.0, -8));
  // 2^-0.5 and 2^-3.5 correctly rounded, like every slope above (the old relative 1e-16,
  // below half an ulp, already meant equality).
  REQUIRE(m12[8] == static_cast<double>(std::pow(2.0L, -0.5L)));
  REQUIRE(m12[11] == static_cast<double>(std::pow(2.0L, -3.5L)));
  REQUIRE(peal::alibi_slopes(1)[0] == std::ldexp(1.0, -8));
  REQUIRE_THROWS_AS(peal::alibi_slopes(0), peal::invalid_argument);
  REQUIRE_THROWS_AS(peal::alibi_slopes(-3), peal::invalid_argument);
}

TEST_CASE("alibi: the Jordan construction adds -m (t - s) exactly", "[alibi]") {
  const auto slopes = peal::alibi_slopes(12);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(-3000, 3000);
  for (double m : slopes) {
    const auto a = peal::alibi<double>(m);
    const auto af = peal::alibi<float>(m);
    REQUIRE(a.slope() == m);
    REQUIRE(a.encoding().dim() == 2);
    REQUIRE(a.encoding().lambda() == 0.0);
    // A(tau) = [[1, tau], [0, 1]].
    const auto A = a.encoding().A(2.5);
    REQUIRE(A(0, 0) == 1.0);
    REQUIRE(A(0, 1) == 2.5);
    REQUIRE(A(1, 0) == 0.0);
    REQUIRE(A(1, 1) == 1.0);
    for (int trial = 0; trial < 20; ++trial) {
      const double t = std::round(u(rng)), s = std::round(u(rng));
      const LD ref = peal_ref::alibi_bias(m, t, s);
      CAPTURE(m, t, s);
      REQUIRE(peal::alibi_bias(m, t, s) == static_cast<double>(ref));
      // -m (t - s): t - s exact, m (in float: rounded) times it rounded once.
      REQUIRE(std::fabs(LD(a.bias(t, s)) - ref) <= Tol<double>::roundings(2) * std::fabs(ref));
      REQUIRE(std::fabs(LD(af.bias(t, s)) - ref) <= Tol<float>::roundings(2) * std::fabs(ref));
      // The global factorization at small positions: F(t)(1,0) . G(s)(0,-m).
      Eigen::Vector2d qa = a.query_augmentation(), ka = a.key_augmentation();
      a.encoding().encode_query(qa, t);
      a.encoding().encode_key(ka, s);
      REQUIRE(qa(0) == 1.0);
      REQUIRE(qa(1) == t);
      REQUIRE(std::fabs(LD(qa.dot(ka)) - ref) <=
              Tol<double>::entry(2) * (std::fabs(m * t) + std::fabs(m * s)));
    }
  }
  REQUIRE_THROWS_AS(peal::alibi<double>(std::nan("")), peal::invalid_argument);
}

TEST_CASE("alibi: augmented vectors compose with a RoPE head", "[alibi]") {
  // compose(rope, alibi.encoding()) acts on [q; 1; 0] and [k; 0; -m]: RoPE score + bias.
  peal::RopeConfig cfg;
  cfg.head_dim = 32;
  const auto rope = peal::rope<double>(cfg);
  const auto a = peal::alibi<double>(peal::alibi_slopes(16)[3]);
  const auto enc = peal::compose(rope.encoding(), a.encoding());
  REQUIRE(enc.dim() == 34);
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<double> u(-1, 1);
  peal::Vector<double> q(32), k(32);
  for (int i = 0; i < 32; ++i) q(i) = u(rng), k(i) = u(rng);
  const auto qa = a.augment_query(q), ka = a.augment_key(k);
  REQUIRE(qa.size() == 34);
  REQUIRE(qa(32) == 1.0);
  REQUIRE(qa(33) == 0.0);
  REQUIRE(ka(32) == 0.0);
  REQUIRE(ka(33) == -a.slope());
  REQUIRE(qa.head(32) == q);
  for (double t : {0.0, 7.0, 4095.0, 1e6}) {
    const double s = t - 5;
    const double expect = rope.score(q, t, k, s) + peal::alibi_bias(a.slope(), t, s);
    // Through the lag: both sides are 34- (32-) term sums of closed-form entries: entry(34)
    // relative to |q|^T |A(t - s)| |k| + |bias|.
    const double m = a.slope();
    const double size =
        q.cwiseAbs().dot(rope.A(t - s).cwiseAbs() * k.cwiseAbs()) + std::abs(m * (t - s));
    const double tol = double(Tol<double>::entry(34)) * size;
    REQUIRE(std::abs(enc.score(qa, t, ka, s) - expect) <= tol);
    // Through the global factors (fine in double at these positions).
    peal::Vector<double> qe = qa, ke = ka;
    enc.encode_query(qe, t);
    enc.encode_key(ke, s);
    // The generic bound, encoded_dot(34) of |F||qa| . |G||ka| >= |m t| + |m s|, is ~60x
    // wider than the old relative 1e-9, which is kept as tight: m = 2^-2 and integer times
    // make the ALiBi products m t, m s exact, so beyond the RoPE part only the few partial
    // sums holding m t or m s round, roundings(2) of |m t| + |m s|.
    const double big = std::abs(m * t) + std::abs(m * s);
    const double tol_g = double(Tol<double>::roundings(2)) * big + tol;
    REQUIRE(std::abs(qe.dot(ke) - expect) <= tol_g);
  }
  // std::vector input.
  const std::vector<float> v(4, 2.0f);
  const auto vf = peal::alibi<float>(0.5).augment_key(v);
  REQUIRE(vf.size() == 6);
  REQUIRE(vf(5) == -0.5f);
}

TEST_CASE("alibi: at t ~ 1e6 the global form m t - m s loses digits in float; rebasing does not",
          "[alibi][numerics]") {
  // Float storage, positions around 1e6, lags 1 .. 64. The exact bias is -m (t - s).
  //  naive:    fl(m t) - fl(m s): each product is rounded at ulp(m t) ~ 0.06 m (m t ~ 7e5);
  //  global:   F(t)(1, 0) = (1, t), G(s)(0, -m) = (m s, -m) stored in float, dot in float:
  //            the same cancellation;
  //  rebased:  anchor t0 (the tile's first query): q~ = A(t - t0)^T (1, 0) = (1, t - t0),
  //            k~ = A(t0 - s)(0, -m) = (-m (t0 - s), -m): the numbers are bounded by the
  //            tile's extent (here 64 + 34 positions), not by t ~ 1e6, so the error is a few
  //            ulps of m (|t - t0| + |t0 - s|) wherever the tile sits (what the scores kernel
  //            does); score() through the lag A(t - s) is accurate relative to the bias.
  const double m = peal::alibi_slopes(12)[8];  // 2^-0.5: not a power of two
  const auto a = peal::alibi<float>(m);
  const auto& J = a.encoding();
  const double t0 = 1000000.0;
  double worst_naive = 0, worst_global = 0, worst_rebased = 0;
  for (int i = 0; i < 64; ++i) {
    for (int lag : {1, 2, 3, 5, 8, 13, 21, 34}) {
      const double t = t0 + i, s = t - lag;
      const LD exact = peal_ref::alibi_bias(m, t, s);
      const float mf = float(m);
      const float naive = mf * float(s) - mf * float(t);  // m s - m t
      Eigen::Vector2f qg = a.query_augmentation(), kg = a.key_augmentation();
      J.encode_query(qg, t);
      J.encode_key(kg, s);
      const float global = qg.dot(kg);
      Eigen::Vector2f qr = a.query_augmentation(), kr = a.key_augmentation();
      J.encode_query(qr, t - t0);  // A(t - t0)^T
      J.encode_key(kr, s - t0);    // A(-(s - t0)) = A(t0 - s)
      const float rebased = qr.dot(kr);
      const auto rel = [&](float x) { return double(std::fabs(LD(x) - exact) / std::fabs(exact)); };
      worst_naive = std::max(worst_naive, rel(naive));
      worst_global = std::max(worst_global, rel(global));
      // Relative to the rebased magnitudes m (|t - t0| + |t0 - s|), position independent.
      const double extent = m * (std::fabs(t - t0) + std::fabs(t0 - s));
      worst_rebased = std::max(worst_rebased, double(std::fabs(LD(rebased) - exact)) / extent);
      // Lag through the algebra directly (score evaluates A(t - s)): also accurate.
      // m rounded to float, times the exact lag, rounded: two roundings.
      REQUIRE(rel(J.score(a.query_augmentation(), t, a.key_augmentation(), s)) <=
              Tol<float>::roundings(2));
    }
  }
  CAPTURE(worst_naive, worst_global, worst_rebased);
  // Naive and global keep only the absolute accuracy of m t ~ 7e5 (ulp 0.0625): an error of
  // a few percent on a bias of ~0.7 at lag 1, i.e. 5 of float's 7 digits lost.
  REQUIRE(worst_naive > 1e-2);
  REQUIRE(worst_global > 1e-2);
  // Rebased: m rounded to float, two products and their sum, relative to the tile-sized
  // magnitudes: four roundings.
  REQUIRE(worst_rebased <= Tol<float>::roundings(4));
}

// ---- The fused scores kernel (include/peal/scores.hpp) ------------------------------------

TEST_CASE("alibi: fused scores, ScoreOptions slopes vs the Jordan construction, t ~ 1e6",
          "[alibi][scores]") {
  // RoPE (d = 32) + ALiBi on 4 heads, float storage, positions around 1e6. Form A: the
  // kernel's ALiBi epilogue (-m_h (t - s) added after scaling). Form B: the exact Jordan
  // construction compose(rope, JordanBlock<2>{0}) on augmented vectors [q; 1; 0] and
  // [k; 0; -m_h], which the kernel rebases per tile, so it never forms m t - m s at t ~ 1e6.
  const int d = 32, H = 4, nq = 40, nk = 300;
  peal::RopeConfig cfg;
  cfg.head_dim = d;
  const auto rope = peal::rope<float>(cfg);
  const auto slopes = peal::alibi_slopes(H);
  const auto ref_rope = peal_ref::rope_default(d, 10000.0L);
  std::vector<double> tq, tk;
  for (int i = 0; i < nq; ++i) tq.push_back(1e6 + 260 + i);
  for (int j = 0; j < nk; ++j) tk.push_back(1e6 + j);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> q(std::size_t(nq * H * d)), k(std::size_t(nk * H * d));
  for (auto& x : q) x = u(rng);
  for (auto& x : k) x = u(rng);
  // Augmented copies (d + 2 per head).
  const int da = d + 2;
  std::vector<float> qa(std::size_t(nq * H * da)), ka(std::size_t(nk * H * da));
  for (int h = 0; h < H; ++h) {
    const auto a = peal::alibi<float>(slopes[std::size_t(h)]);
    for (int i = 0; i < nq; ++i) {
      const auto v =
          a.augment_query(Eigen::Map<const peal::Vector<float>>(q.data() + (i * H + h) * d, d));
      Eigen::Map<peal::Vector<float>>(qa.data() + (i * H + h) * da, da) = v;
    }
    for (int j = 0; j < nk; ++j) {
      const auto v =
          a.augment_key(Eigen::Map<const peal::Vector<float>>(k.data() + (j * H + h) * d, d));
      Eigen::Map<peal::Vector<float>>(ka.data() + (j * H + h) * da, da) = v;
    }
  }
  std::vector<float> outA(std::size_t(H * nq * nk)), outB(outA.size());
  peal::ScoreOptions optA;
  optA.causal = true;
  optA.alibi_slopes = slopes;
  peal::scores(rope, peal::make_view(q.data(), nq, H, d), peal::Positions(tq),
               peal::make_view(k.data(), nk, H, d), peal::Positions(tk),
               peal::make_view(outA.data(), H, nq, nk), optA);
  peal::ScoreOptions optB;
  optB.causal = true;
  const auto jordan = peal::compose(rope.encoding(), peal::alibi<float>(1.0).encoding());
  peal::scores(jordan, peal::make_view(qa.data(), nq, H, da), peal::Positions(tq),
               peal::make_view(ka.data(), nk, H, da), peal::Positions(tk),
               peal::make_view(outB.data(), H, nq, nk), optB);

  const LD eps = Tol<float>::eps;
  double worstA = 0, worstB = 0;
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < nq; ++i)
      for (int j = 0; j < nk; ++j) {
        const double t = tq[std::size_t(i)], s = tk[std::size_t(j)];
        const std::size_t o = std::size_t((h * nq + i) * nk + j);
        CAPTURE(h, i, j);
        if (s > t) {
          REQUIRE(outA[o] == -std::numeric_limits<float>::infinity());
          REQUIRE(outB[o] == -std::numeric_limits<float>::infinity());
          continue;
        }
        std::vector<LD> qr(static_cast<std::size_t>(d)), kr(static_cast<std::size_t>(d));
        LD M = 0;
        for (int e = 0; e < d; ++e) {
          qr[std::size_t(e)] = q[std::size_t((i * H + h) * d + e)];
          kr[std::size_t(e)] = k[std::size_t((j * H + h) * d + e)];
          M += std::fabs(qr[std::size_t(e)] * kr[std::size_t(e)]);
        }
        peal_ref::apply_rope_halfsplit(qr, ref_rope, t);
        peal_ref::apply_rope_halfsplit(kr, ref_rope, s);
        const LD bias = peal_ref::alibi_bias(slopes[std::size_t(h)], t, s);
        const LD ref = peal_ref::dot(qr, kr) + bias;
        // Scale of the result: the RoPE magnitude plus the bias (|t - s| <= 300 here).
        const LD scale = M + std::fabs(bias);
        const LD eA = std::fabs(LD(outA[o]) - ref), eB = std::fabs(LD(outB[o]) - ref);
        // A (d + 2)-term dot product of encoded float entries (the bias as two terms).
        REQUIRE(eA <= Tol<float>::entry(d + 2) * scale);
        REQUIRE(eB <= Tol<float>::entry(d + 2) * scale);
        worstA = std::max(worstA, double(eA / (eps * scale)));
        worstB = std::max(worstB, double(eB / (eps * scale)));
      }
  // For comparison: the global (un-rebased) Jordan form at these positions is off by
  // ~ulp(m t) ~ 0.03 m (test above), i.e. ~1e5 eps_f of a bias of order 1.
  SUCCEED("worst error / eps_f (scale = sum |q_i k_i| + |bias|): slopes option "
          << worstA << ", Jordan construction " << worstB);
}
