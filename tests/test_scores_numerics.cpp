// Tests of include/peal/scores.hpp, continued from tests/test_scores.cpp (whose header states
// the tolerance; shared helpers: tests/scores_check.hpp): the JordanBlock<M >= 2> parts of a
// composition evaluated per pair (every option, layout and storage type; which encodings take
// that path), the rebasing tile plan, numerics at extreme positions (RetNet at n = 65536,
// Jordan chains at 1e6, timestamps near 1.7e9, DBL_MAX, results past the range), steep
// decays applied per pair, and a float basis change whose rows go into the basis first.
#include "scores_check.hpp"

// ---- Polynomial parts per pair (detail/coders/poly_parts.hpp) -------------------------------------
//
// In a BlockDiagonal, real JordanBlock<M ≥ 2> parts are evaluated per pair,
// e^{λτ} Σ_m τ^m/m! Σ_a q_a k_{a+m}, and added to the tile before its GEMM. Tolerance: the
// bound of check_scores with ρ = 1, i.e. 2 (d + 16) eps_C |q| ‖A(τ)‖ |k| (+ ALiBi and output
// rounding terms), the same as for rotations, at any tile size and absolute time. Why it
// holds: the GEMM share is the rotation bound (d + ~8) eps_C; the polynomial share, per pair,
// has one rounding of each coefficient f q_a/m! and w k_c (formed in double), one of τ (formed
// exactly as α + β, or as t − s in double; m of them in τ^m, m < M), 2b in the Horner sum of
// the b-th row (b < M) and M in the dot over rows: ≤ (4M − 1) eps_C |q_J|ᵀ|A_J(τ)||k_J|
// ≤ 15 eps_C |q| ‖A(τ)‖ |k| for M ≤ 4 (|A_J(τ)| has the 1- and ∞-norms of A_J(τ), which
// bound its 2-norm); adding it to the GEMM result is one more rounding, and
// (d + 8) + 15 + 1 ≤ 2 (d + 16) for every d. The reference is the encoding's own score() in
// long double, whose error (~d 2^-64) is negligible at eps_C = 2^-23 (float) and 2^-52 (double).

namespace {
namespace sk = peal::detail::tiled;
namespace co = peal::detail::coders;

template <class S>
peal::Bank<peal::RotationBlock<S>> rot_bank(int pairs, peal::Layout layout, double a = 0.0) {
  std::vector<peal::RotationBlock<S>> b;
  for (int i = 0; i < pairs; ++i) b.emplace_back(std::pow(10000.0L, -2.0L * i / (2.0L * pairs)), a);
  return peal::Bank<peal::RotationBlock<S>>(b, layout);
}
/// RoPE + JordanBlock<3>{λ} + a slowly decaying half-split bank + pass-through (d = 17).
template <class S>
auto jordan3_mix(double lambda) {
  return peal::compose(rot_bank<S>(4, peal::Layout::Interleaved), peal::JordanBlock<3, S>(lambda),
                       rot_bank<S>(2, peal::Layout::HalfSplit, -0.003), peal::PassThrough<S>(2));
}
/// Two polynomial parts, the first at offset 0: JordanBlock<4>{λ}, RoPE, JordanBlock<2>{λ/2},
/// one pass-through coordinate (d = 13).
template <class S>
auto jordan4_mix(double lambda) {
  return peal::compose(peal::JordanBlock<4, S>(lambda), rot_bank<S>(3, peal::Layout::HalfSplit),
                       peal::JordanBlock<2, S>(0.5 * lambda), peal::PassThrough<S>(1));
}

/// One problem (storage T, grouped heads Hq = 2 Hk) under every option and output layout:
/// row-major out (direct, and padded), column-major out (direct), heads-innermost out and
/// double out (through the tile buffer), with default and small tiles.
template <class T, class E, class R>
void jordan_variants(const E& enc, const R& ref_enc, Index nq, Index nk, Positions tq, Positions tk,
                     double eps_c, double width, std::mt19937& rng) {
  Case<T, E> c(enc, ref_enc, nq, nk, 4, 2, tq, tk, Layout::dense, Layout::offset_padded, rng);
  const std::vector<double> slopes = {0.5, 0.25, 0.125, 0.0625};
  const std::vector<double> same = {0.97, 0.97, 0.99, 0.99};  // equal within each group of 2
  const std::vector<double> diff = {0.97, 0.995, 0.99, 1.0};
  for (int variant = 0; variant < 5; ++variant) {
    ScoreOptions opt;
    opt.causal = variant % 2 == 1;
    if (variant >= 1) opt.scale = variant == 4 ? -0.5 : 0.125;
    if (variant == 1 || variant == 3) opt.query_tile = 16, opt.key_tile = 24;
    if (variant >= 2) opt.alibi_slopes = slopes;
    if (variant == 2) opt.decay = same;
    if (variant == 3) opt.decay = diff;
    CAPTURE(variant);
    for (int ol = 0; ol < 4; ++ol) {
      CAPTURE(ol);
      c.template run_and_check<float>(opt, ol, eps_c, 1.0, width);
    }
    c.template run_and_check<double>(opt, variant % 4, eps_c, 1.0, width);
  }
}

template <class T>
void jordan_suite(double eps_c) {
  std::mt19937 rng(std::is_same<T, float>::value ? 303 : 304);
  // Irregular timestamps near 1e6 (not representable offsets, gaps in [0.2, 2.2) and one of
  // ~150): τ is formed in double there; evenly spaced ones take the exact α + β path.
  std::vector<double> irr(50);
  std::uniform_real_distribution<double> gap(0.2, 2.2);
  double t = 1e6 - 0.3;
  for (std::size_t i = 0; i < irr.size(); ++i) {
    irr[i] = t;
    t += i == 31 ? 150.0 + gap(rng) : gap(rng);
  }
  for (double lambda : {0.0, -0.02, 0.01}) {
    CAPTURE(lambda);
    const auto e3 = jordan3_mix<double>(lambda);
    const auto r3 = jordan3_mix<long double>(lambda);
    const auto e4 = jordan4_mix<double>(lambda);
    const auto r4 = jordan4_mix<long double>(lambda);
    static_assert(co::scores_split<float, std::remove_cv_t<decltype(e3)>>::value, "per pair");
    static_assert(co::scores_split<double, std::remove_cv_t<decltype(e4)>>::value, "per pair");
    // Near 0: 40 queries at the end of 61 keys (chunked prefill).
    jordan_variants<T>(e3, r3, 40, 61, Positions::sequence(21.0), Positions::sequence(0.0), eps_c,
                       -1, rng);
    jordan_variants<T>(e4, r4, 40, 61, Positions::sequence(21.0), Positions::sequence(0.0), eps_c,
                       -1, rng);
    // Near 1e6, half steps.
    jordan_variants<T>(e3, r3, 33, 70, Positions::sequence(1e6 + 18.5, 0.5),
                       Positions::sequence(1e6, 0.5), eps_c, -1, rng);
    jordan_variants<T>(e4, r4, 33, 70, Positions::sequence(1e6 + 18.5, 0.5),
                       Positions::sequence(1e6, 0.5), eps_c, -1, rng);
    // Irregular.
    const Positions p(irr);
    jordan_variants<T>(e3, r3, 50, 50, p, p, eps_c, 1e3, rng);
    jordan_variants<T>(e4, r4, 50, 50, p, p, eps_c, 1e3, rng);
  }
}

}  // namespace

TEST_CASE("scores: JordanBlock<3>/<4> parts per pair in float, every option and layout",
          "[scores][jordan]") {
  jordan_suite<float>(eps_f);
}

TEST_CASE("scores: JordanBlock<3>/<4> parts per pair in double, every option and layout",
          "[scores][jordan]") {
  jordan_suite<double>(eps_d);
}

TEST_CASE("scores: which encodings take the per-pair path; the others stay correct",
          "[scores][jordan]") {
  using J3 = decltype(jordan3_mix<double>(0.0));
  STATIC_REQUIRE(co::scores_split<float, J3>::value);
  STATIC_REQUIRE(
      co::scores_split<float, decltype(peal::compose(peal::JordanBlock<2, double>(0.0),
                                                     peal::PassThrough<double>(2)))>::value);
  // A bare (or banked) Jordan block, a basis change around the composition, a composition
  // nested in another, complex Jordan blocks and JordanBlock<1>: through the GEMM.
  STATIC_REQUIRE_FALSE(co::scores_split<float, peal::JordanBlock<3, double>>::value);
  STATIC_REQUIRE_FALSE(co::scores_split<float, peal::Bank<peal::JordanBlock<3, double>>>::value);
  STATIC_REQUIRE_FALSE(co::scores_split<float, peal::BasisChange<J3>>::value);
  STATIC_REQUIRE_FALSE(
      co::scores_split<float, peal::BlockDiagonal<J3, peal::PassThrough<double>>>::value);
  STATIC_REQUIRE_FALSE(
      co::scores_split<
          float, peal::BlockDiagonal<peal::RotationJordanBlock<2>, peal::JordanBlock<1>>>::value);

  std::mt19937 rng(305);
  // Half and bfloat16 storage (float arithmetic) on the per-pair path, ρ = 1.
  const auto e3 = jordan3_mix<double>(-0.02);
  const auto r3 = jordan3_mix<long double>(-0.02);
  ScoreOptions ho;
  ho.causal = true;
  ho.alibi_slopes = {0.25, 0.5};
  ho.query_tile = 16;
  Case<Eigen::half, J3> ch(e3, r3, 40, 43, 2, 1, Positions::sequence(1e6 + 3.0),
                           Positions::sequence(1e6), Layout::offset_padded, Layout::dense, rng);
  ch.run_and_check<float>(ho, 0, eps_f);
  Case<Eigen::bfloat16, J3> cb(e3, r3, 40, 43, 2, 1, Positions::sequence(3.0),
                               Positions::sequence(0.0), Layout::dense, Layout::elem_stride2, rng);
  cb.run_and_check<double>(ho, 2, eps_f);
  // A bare JordanBlock<3> at t ~ 1e6 in float: tiles capped at (1 + 4h)^2 <= 2^12 (h <= 15.75),
  // ρ = (1 + 2 h_q + 2 h_k)^2 <= 64².
  const peal::JordanBlock<3, double> bare(-0.01);
  Case<float, decltype(bare)> b(bare, 70, 90, 2, 1, Positions::sequence(1e6 + 20.0),
                                Positions::sequence(1e6), Layout::dense, Layout::dense, rng);
  ScoreOptions opt;
  opt.causal = true;
  b.run_and_check<float>(opt, 0, eps_f, 64.0 * 64.0);
  // A basis change around the composition, in double with 8-token tiles: ρ = (1 + 4·3.5)^2
  // for the chain, cond(P)^2 for P^T and P^{-1}.
  const auto inner = jordan3_mix<double>(-0.01);
  Eigen::MatrixXd P = Eigen::MatrixXd::Identity(17, 17) + 0.2 * Eigen::MatrixXd::Random(17, 17);
  const auto bc = peal::change_basis(inner, P);
  Case<double, decltype(bc)> c(bc, 30, 41, 2, 2, Positions::sequence(1e6 + 11.0),
                               Positions::sequence(1e6), Layout::dense, Layout::dense, rng);
  ScoreOptions bo;
  bo.query_tile = 8;
  bo.key_tile = 8;
  bo.alibi_slopes = {0.5, 0.25};
  const Eigen::JacobiSVD<Eigen::MatrixXd> svd(P);
  const double cond = svd.singularValues()(0) / svd.singularValues()(16);
  c.run_and_check<double>(bo, 0, eps_d, 15.0 * 15.0 * cond * cond);
}

TEST_CASE("scores: a float basis change past 32 KiB takes its rows into the basis first",
          "[scores]") {
  // d = 96: P holds 96² floats (36 KiB), so scores() multiplies the rows by P and P^{-T} once
  // (detail/basis_rows.hpp) and runs the inner bank's tiles on them; the row GEMM reads dense
  // rows in place and copies strided ones first. ρ = cond(P)^2, as for the double case above.
  const int d = 96;
  REQUIRE(!peal::detail::basis_rows_first<float>(90));
  REQUIRE(peal::detail::basis_rows_first<float>(d));
  std::mt19937 rng(306);
  Eigen::MatrixXd P = Eigen::MatrixXd::Identity(d, d) + (0.3 / std::sqrt(double(d))) *
                                                           Eigen::MatrixXd::Random(d, d);
  const auto bc = peal::change_basis(rot_bank<double>(d / 2, peal::Layout::Interleaved, -0.001), P);
  const Eigen::JacobiSVD<Eigen::MatrixXd> svd(P);
  const double cond = svd.singularValues()(0) / svd.singularValues()(d - 1);
  ScoreOptions opt;
  opt.causal = true;
  for (const Layout lq : {Layout::dense, Layout::elem_stride2}) {
    INFO("query layout " << int(lq));
    Case<float, decltype(bc)> c(bc, 37, 45, 4, 2, Positions::sequence(1e4 + 8.0),
                                Positions::sequence(1e4), lq, Layout::offset_padded, rng);
    c.run_and_check<float>(opt, 0, eps_f, cond * cond);
  }
}

// ---- Rebasing: the tile plan ----------------------------------------------------------------

TEST_CASE("scores: tile plan obeys the rebasing thresholds", "[scores][rebase]") {
  // Evenly spaced positions: equal tiles, all regular (one shared relative table).
  std::vector<double> seq(1000);
  for (std::size_t i = 0; i < seq.size(); ++i) seq[i] = 1.7e9 + 3.0 * double(i);
  const auto p = sk::plan_tiles(seq.data(), 1000, 128, std::numeric_limits<double>::infinity());
  REQUIRE(p.size() == 8);
  for (Index I = 0; I < p.size(); ++I) CHECK(p.regular[std::size_t(I)]);
  // A steep decay caps the half-spread: rate * h <= 16 ln 2 in float.
  const double rate = 0.1, h = sk::max_half_spread(rate, 0, sk::rebase_limits<float>::exp_budget,
                                                   sk::rebase_limits<float>::poly_budget);
  CHECK(std::abs(h - 110.9035) <= Tol<double>::printed(4));  // 16 ln 2 / 0.1
  const auto q = sk::plan_tiles(seq.data(), 1000, 128, h);
  for (Index I = 0; I < q.size(); ++I) {
    CHECK(q.hi[std::size_t(I)] - q.lo[std::size_t(I)] <= 2 * h);
    CHECK(q.rows(I) <= 128);
    CHECK(q.regular[std::size_t(I)]);
  }
  CHECK(q.rows(0) == 74);  // 73 steps of 3 = 219 <= 2h = 221.8
  // Jordan chains: (1 + 4h)^p <= 2^12 in float, 2^20 in double.
  // (2^6 - 1) / 4 and (2^10 - 1) / 4, exact up to the few roundings of the root.
  CHECK(std::abs(sk::max_half_spread(0, 2, sk::rebase_limits<float>::exp_budget,
                                     sk::rebase_limits<float>::poly_budget) -
                 15.75) <= Tol<double>::roundings(4) * 15.75);
  CHECK(std::abs(sk::max_half_spread(0, 2, sk::rebase_limits<double>::exp_budget,
                                     sk::rebase_limits<double>::poly_budget) -
                 255.75) <= Tol<double>::roundings(4) * 255.75);
  // Irregular gaps: a gap wider than 2h ends a tile, down to single tokens.
  std::vector<double> gaps = {0, 1, 2, 1000, 2000, 2001, 5000};
  const auto g = sk::plan_tiles(gaps.data(), 7, 128, 10.0);
  REQUIRE(g.size() == 4);
  CHECK(g.rows(0) == 3);
  CHECK(g.rows(1) == 1);
  CHECK(g.rows(2) == 2);
  CHECK(g.rows(3) == 1);
}

// ---- Numerics -----------------------------------------------------------------------------

TEST_CASE("scores: RetNet decay at n = 65536 in float stays accurate; the global form overflows",
          "[scores][rebase]") {
  // RetNet-like bank: every pair decays with a = ln γ, γ = 1 - 2^-5 (docs/design.md §1).
  const double gamma = 1.0 - std::pow(2.0, -5.0), a = std::log(gamma);
  const int pairs = 16, d = 2 * pairs;
  std::vector<Rot> blocks;
  for (int i = 0; i < pairs; ++i)
    blocks.emplace_back(std::pow(10000.0L, -(long double)i / (pairs - 1)), a);
  const RotBank enc(blocks);
  const Index n = 65536, nq = 32;  // the last 32 queries against every key
  std::mt19937 rng(65536);
  Stored<float> q = make_stored<float>(nq, 1, d, Layout::dense, rng);
  Stored<float> k = make_stored<float>(n, 1, d, Layout::dense, rng);
  const auto tq = Positions::sequence(double(n - nq)), tk = Positions::sequence(0.0);
  std::vector<float> out(std::size_t(nq * n));
  ScoreOptions opt;
  opt.causal = true;
  peal::scores(enc, q.view, tq, k.view, tk, peal::make_view(out.data(), 1, nq, n), opt);

  // Every entry is finite (or -inf where masked): no overflow anywhere.
  Index nonfinite = 0;
  for (Index i = 0; i < nq; ++i)
    for (Index j = 0; j < n; ++j) {
      const float v = out[std::size_t(i * n + j)];
      if (tk[j] > tq[i])
        nonfinite += !(std::isinf(v) && v < 0);
      else
        nonfinite += !std::isfinite(v);
    }
  CHECK(nonfinite == 0);

  // Against the double reference on a band (the last 1024 keys, where scores are not
  // negligible: γ^1024 ≈ 8e-15) and a sample of 256 keys across the whole sequence.
  std::vector<Index> cols;
  for (Index j = n - 1024; j < n; ++j) cols.push_back(j);
  std::uniform_int_distribution<Index> U(0, n - 1025);
  for (int c = 0; c < 256; ++c) cols.push_back(U(rng));
  Eigen::VectorXd qv(d), kv(d);
  double worst = 0;
  Index bad = 0;
  for (Index i = 0; i < nq; ++i) {
    for (Index e = 0; e < d; ++e) qv(e) = q.vec(i, 0)[e];
    for (Index j : cols) {
      if (tk[j] > tq[i]) continue;
      for (Index e = 0; e < d; ++e) kv(e) = k.vec(j, 0)[e];
      const double tau = tq[i] - tk[j];
      const double want = enc.score(qv, tq[i], kv, tk[j]);
      const double M = qv.norm() * std::exp(a * tau) * std::sqrt(2.0) * kv.norm();
      const double err = std::abs(double(out[std::size_t(i * n + j)]) - want);
      const double tol =
          double(Tol<float>::fused_score(d) * M + Tol<float>::flushed() * qv.norm() * kv.norm());
      bad += !(err <= tol);
      if (M > 1e-30) worst = std::max(worst, err / M);
    }
  }
  INFO("worst |err| / (|q| |A| |k|) = " << worst);
  CHECK(bad == 0);

  // The same scores as RetNet is usually written: a pure rotation (a = 0) and the scalar
  // decay γ^(t - s) as an option (rebased through row scales and alpha).
  std::vector<Rot> pure_blocks;
  for (const auto& b : blocks) pure_blocks.emplace_back(b.omega(), 0.0);
  const RotBank pure(pure_blocks);
  std::vector<float> out2(out.size());
  ScoreOptions dec = opt;
  dec.decay = {gamma};
  peal::scores(pure, q.view, tq, k.view, tk, peal::make_view(out2.data(), 1, nq, n), dec);
  Index differ = 0;
  for (Index i = 0; i < nq; ++i) {
    for (Index e = 0; e < d; ++e) qv(e) = q.vec(i, 0)[e];
    for (Index j = 0; j < n; ++j) {
      const float a1 = out[std::size_t(i * n + j)], a2 = out2[std::size_t(i * n + j)];
      if (std::isinf(a1) || std::isinf(a2)) {
        differ += a1 != a2;
        continue;
      }
      for (Index e = 0; e < d; ++e) kv(e) = k.vec(j, 0)[e];
      const double M = qv.norm() * std::exp(a * (tq[i] - tk[j])) * kv.norm();
      // Both within fused_score(d) M of the truth; below FLT_MIN, flushes to 0 may differ.
      differ +=
          !(std::abs(double(a1) - a2) <= double(2 * Tol<float>::fused_score(d) * M +
                                                Tol<float>::flushed() * qv.norm() * kv.norm()));
    }
  }
  CHECK(differ == 0);

  // The global (unrebased) factorisation in float: F(t) q underflows to 0 and G(s) k
  // overflows to inf at these positions, so q̃^T k̃ is NaN even for adjacent tokens.
  std::vector<peal::RotationBlock<float>> fb;
  for (const auto& b : blocks) fb.push_back(peal::RotationBlock<float>::from_params(b.params()));
  const peal::Bank<peal::RotationBlock<float>> encf(fb);
  Eigen::VectorXf qg(d), kg(d);
  for (Index e = 0; e < d; ++e)
    qg(e) = float(q.vec(nq - 1, 0)[e]), kg(e) = float(k.vec(n - 2, 0)[e]);
  encf.encode_query(qg, tq[nq - 1]);  // F(65535): e^{a t} = e^{-2080}
  encf.encode_key(kg, tk[n - 2]);     // G(65534): e^{-a s} = e^{+2080}
  CHECK(qg.cwiseAbs().maxCoeff() == 0.0f);
  CHECK_FALSE(kg.allFinite());
  CHECK_FALSE(std::isfinite(qg.dot(kg)));
  // ... while the fused kernel returns the true score for that pair.
  for (Index e = 0; e < d; ++e) qv(e) = q.vec(nq - 1, 0)[e], kv(e) = k.vec(n - 2, 0)[e];
  // Kept as tight as before (1e-5 |q| |k|): the fused bound without its factor 2 of slack,
  // fused_score(d) / 2 of |q| e^{a τ} |k| (τ = 1; the full bound would be 1.6e-5 |q| |k|).
  const double truth = enc.score(qv, tq[nq - 1], kv, tk[n - 2]);
  const double tol1 = double(Tol<float>::fused_score(d) / 2) * qv.norm() * std::exp(a) * kv.norm();
  CHECK(std::abs(out[std::size_t((nq - 1) * n + (n - 2))] - truth) <= tol1);
}

TEST_CASE("scores: JordanBlock<3> at t ~ 1e6 in float is rebased; the global form cancels",
          "[scores][rebase]") {
  // Quadratic in the distance: A(τ) = [[1, τ, τ²/2], [0, 1, τ], [0, 0, 1]] (λ = -1e-7).
  const auto enc = peal::compose(peal::JordanBlock<3, double>(-1e-7), rope_bank(4));
  const Index d = enc.dim(), nq = 96, nk = 120;
  std::mt19937 rng(1000000);
  const auto tq = Positions::sequence(1e6 + 24.0), tk = Positions::sequence(1e6);
  Case<float, decltype(enc)> c(enc, nq, nk, 1, 1, tq, tk, Layout::dense, Layout::dense, rng);
  // The Jordan part of this composition is evaluated per pair (detail/coders/poly_parts.hpp): no
  // polynomial amplification, ρ = 1, with default (256 x 512) tiles. (Through the GEMM, as a
  // bare JordanBlock<3> still is, float tiles are capped at (1 + 4h)^2 <= 2^12, h <= 15.75.)
  static_assert(co::scores_split<float, std::remove_cv_t<decltype(enc)>>::value, "per pair");
  ScoreOptions opt;
  opt.causal = true;
  c.run_and_check<float>(opt, 0, eps_f, 1.0);

  // Global form: q̃ = F(t) q, k̃ = G(s) k in float. The entries are ~t²/2 = 5e11 and cancel
  // to the true ~τ²/2: the error is ~eps_f t² |q||k|, orders of magnitude above the score.
  std::vector<float> fused(std::size_t(nq * nk));
  peal::scores(enc, TensorView<const float>(c.q.view), tq, TensorView<const float>(c.k.view), tk,
               peal::make_view(fused.data(), 1, nq, nk));
  double worst_global = 0, worst_fused = 0;
  for (Index i = nq - 8; i < nq; ++i) {
    Eigen::VectorXf qi(d);
    for (Index e = 0; e < d; ++e) qi(e) = float(c.q.vec(i, 0)[e]);
    const Eigen::VectorXf qt = Eigen::MatrixXd(enc.F(tq[i])).cast<float>() * qi;
    for (Index j = nk - 8; j < nk; ++j) {
      Eigen::VectorXf kj(d);
      for (Index e = 0; e < d; ++e) kj(e) = float(c.k.vec(j, 0)[e]);
      const Eigen::VectorXf kt = Eigen::MatrixXd(enc.G(tk[j])).cast<float>() * kj;
      const double want = c.ref.get(c.ref.raw, 0, i, j), M = c.ref.get(c.ref.mag, 0, i, j);
      worst_global = std::max(worst_global, std::abs(double(qt.dot(kt)) - want) / M);
      worst_fused =
          std::max(worst_fused, std::abs(double(fused[std::size_t(i * nk + j)]) - want) / M);
    }
  }
  INFO("relative errors: global " << worst_global << ", fused " << worst_fused);
  CHECK(worst_global > 1.0);
  CHECK(worst_fused <= Tol<float>::fused_score(d));  // ρ = 1: the bound of check_scores
}

TEST_CASE("scores: timestamps near 1.7e9 with irregular gaps on a decaying rotation",
          "[scores][rebase]") {
  // Rotations from 1/30 s to 1/1e6 s, decaying with a time constant of one minute, plus a
  // scalar decay and ALiBi per head. Exponential inter-arrival times (mean 30 s) and a few
  // hour-long gaps: the tile plan splits wherever the spread exceeds 2 h = 2 θ / ρ.
  std::vector<Rot> blocks;
  for (int i = 0; i < 8; ++i)
    blocks.emplace_back(1.0L / (30.0L * std::pow(1e6L / 30.0L, i / 7.0L)), -1.0 / 60.0);
  const RotBank enc(blocks);
  std::mt19937 rng(1700000000);
  std::exponential_distribution<double> gap(1.0 / 30.0);
  const Index n = 200;
  std::vector<double> ts(static_cast<std::size_t>(n));
  double t = 1.7e9;
  for (Index i = 0; i < n; ++i) {
    ts[std::size_t(i)] = t;
    t += (i % 67 == 50) ? 3600.0 + gap(rng) : gap(rng);
  }
  const Positions p(ts);
  Case<float, RotBank> c(enc, n, n, 2, 1, p, p, Layout::dense, Layout::offset_padded, rng);
  ScoreOptions opt;
  opt.causal = true;
  opt.decay = {0.9999, 0.999};
  opt.alibi_slopes = {1e-4, 1e-3};
  c.run_and_check<float>(opt, 0, eps_f, 1, 1e4, double(Tol<float>::flushed()));
  c.run_and_check<double>(opt, 1, eps_f, 1, 1e4, double(Tol<float>::flushed()));
  // The plan really split: rate = 1/60 + |ln 0.999|, h = 16 ln 2 / rate ≈ 657 s.
  const double rate = 1.0 / 60.0 - std::log(0.999);
  const double h = sk::max_half_spread(rate, 0, sk::rebase_limits<float>::exp_budget,
                                       sk::rebase_limits<float>::poly_budget);
  const auto plan = sk::plan_tiles(ts.data(), n, 256, h);
  CHECK(plan.size() > 6);
  for (Index I = 0; I < plan.size(); ++I)
    CHECK(plan.hi[std::size_t(I)] - plan.lo[std::size_t(I)] <= 2 * h);
  // Double storage: double arithmetic, tight tolerance.
  Case<double, RotBank> cd(enc, n, n, 1, 1, p, p, Layout::dense, Layout::dense, rng);
  ScoreOptions od = opt;
  od.decay = {0.9999};
  od.alibi_slopes = {1e-4};
  cd.run_and_check<double>(od, 0, eps_d, 1, 1e4);
}

// A preset is dispatched as the encoding it is (detail::has_encoding_type, encoding.hpp).
namespace {
namespace skd = peal::detail::tiled;
static_assert(std::is_same<skd::coder_t<float, peal::RopeEncoding<double>>,
                           skd::coder_t<float, peal::RopeEncoding<double>::encoding_type>>::value,
              "RopeEncoding must use its BlockDiagonal's coder");
}  // namespace

TEST_CASE("scores: RoPE at positions near DBL_MAX agrees with the per-pair reference",
          "[scores][angle]") {
  // Pure rotations use anchor 0, so the kernel forms R(ω t) and R(ω s) at absolute positions
  // up to 1e308; the reference forms R(ω (t − s)). Both reduce exactly (detail/math/angle_exact.hpp).
  // Pair 0 of the RoPE (coordinates 0 and 4, HalfSplit) has ω = 1: A(τ)_{0,0} = cos τ and
  // A(τ)_{0,4} = sin τ, here against mpmath. Before, without FMA the kernel gave NaN; with FMA
  // every huge angle came out near 0 rad, in the kernel and the reference alike.
  peal::RopeConfig cfg;
  cfg.head_dim = 8;
  const auto rope = peal::rope<double>(cfg, 0);
  struct Lag {
    double t, s, cos_tau, sin_tau;  // τ = fl(t − s)
  };
  const Lag lags[] = {
      {1e300, -1e300, -0.337861644332749667903, 0.941195786905556948272},
      {-DBL_MAX / 2, DBL_MAX / 2, -0.999987689426559937465, -0.0049619547891840617905},
      {1e100, 1e100 - 1e85, 0.214878485736553761895, -0.976640791881828813418},
      {1e308, 1e308, 1.0, 0.0}};
  auto run = [&](const std::vector<double>& q, const std::vector<double>& k, double t, double s) {
    std::vector<double> out(1, 0.0), want(1, 0.0);
    const std::vector<double> tq = {t}, tk = {s};
    peal::scores(rope, TensorView<const double>(q.data(), 1, 1, 8), Positions(tq),
                 TensorView<const double>(k.data(), 1, 1, 8), Positions(tk),
                 TensorView<double>(out.data(), 1, 1, 1));
    peal::scores_reference(rope, TensorView<const double>(q.data(), 1, 1, 8), Positions(tq),
                           TensorView<const double>(k.data(), 1, 1, 8), Positions(tk),
                           TensorView<double>(want.data(), 1, 1, 1));
    return std::make_pair(out[0], want[0]);
  };
  const std::vector<double> e0 = {1, 0, 0, 0, 0, 0, 0, 0}, e4 = {0, 0, 0, 0, 1, 0, 0, 0};
  const std::vector<double> q = {1, 0.5, -0.25, 2, 0, 1.5, 0.75, -1},
                            k = {0.5, -1, 2, 0.25, 1, 0, -0.5, 1.5};
  for (const Lag& l : lags) {
    CAPTURE(l.t, l.s);
    auto c = run(e0, e0, l.t, l.s), sn = run(e0, e4, l.t, l.s), g = run(q, k, l.t, l.s);
    CHECK(std::fabs(c.first - l.cos_tau) <= 8 * DBL_EPSILON);
    CHECK(std::fabs(c.second - l.cos_tau) <= 8 * DBL_EPSILON);
    CHECK(std::fabs(sn.first - l.sin_tau) <= 8 * DBL_EPSILON);
    CHECK(std::fabs(sn.second - l.sin_tau) <= 8 * DBL_EPSILON);
    CHECK(std::isfinite(g.first));
    CHECK(std::fabs(g.first - g.second) <= 64 * DBL_EPSILON * 16);  // |q| |k| ≤ 16
  }
}

TEST_CASE("scores: results past the range are ±inf or exact, never NaN", "[scores]") {
  // q^T A(t − s) k with e^{λ (t − s)} beyond the double range: +inf or −inf by the sign of the
  // exact score, 0 where the exact score is 0, finite where it is representable; the same
  // from scores_reference. Paths: the per-pair polynomial parts (JordanBlock<M ≥ 2> in a
  // composition), the GEMM with a growing cross factor (real and rotation banks), and a
  // scalar decay towards future keys (γ^(t − s) with t < s).
  const double inf = std::numeric_limits<double>::infinity();
  auto run = [](const auto& enc, std::vector<double> q, double t, std::vector<double> k, double s,
                const ScoreOptions& opt = {}) {
    const Index d = Index(q.size());
    std::vector<double> out(1, 7.0), want(1, 7.0);
    const std::vector<double> tq = {t}, tk = {s};
    peal::scores(enc, TensorView<const double>(q.data(), 1, 1, d), Positions(tq),
                 TensorView<const double>(k.data(), 1, 1, d), Positions(tk),
                 TensorView<double>(out.data(), 1, 1, 1), opt);
    peal::scores_reference(enc, TensorView<const double>(q.data(), 1, 1, d), Positions(tq),
                           TensorView<const double>(k.data(), 1, 1, d), Positions(tk),
                           TensorView<double>(want.data(), 1, 1, 1), opt);
    return std::make_pair(out[0], want[0]);
  };
  auto check = [](std::pair<double, double> got, double exact) {
    CAPTURE(got.first, got.second, exact);
    for (double v : {got.first, got.second}) {
      if (std::isinf(exact) || exact == 0)
        CHECK(v == exact);
      else
        CHECK(std::fabs(v - exact) <= 1e-12 * std::fabs(exact));
    }
  };
  // Polynomial part: A(10) = e^{1000} [[1, 10], [0, 1]] on the Jordan coordinates.
  const auto jp = peal::compose(peal::JordanBlock<2, double>(100), peal::PassThrough<double>(2));
  check(run(jp, {1, 0, 0, 0}, 10, {1, 0, 0, 0}, 0), inf);
  check(run(jp, {-1, 0, 0, 0}, 10, {1, 0, 0, 0}, 0), -inf);
  check(run(jp, {1, 0, 0, 0}, 10, {0, 1, 0, 0}, 0), inf);
  check(run(jp, {0, 1, 0, 0}, 10, {1, 0, 0, 0}, 0), 0);   // A(10)_{1,0} = 0
  check(run(jp, {0, 1, 1, 0}, 10, {1, 0, 2, 0}, 0), 2);   // only the pass-through share
  check(run(jp, {1, 0, 1, 0}, -10, {1, 0, 2, 0}, 0), 2);  // e^{-1000} underflows to 0
  const auto jf = peal::compose(peal::JordanBlock<2, double>(71), peal::PassThrough<double>(2));
  check(run(jf, {1e-300, 0, 0, 0}, 10, {1, 0, 0, 0}, 0), double(1e-300L * std::exp(710.0L)));
  // GEMM path with growth: real bank and growing rotation bank (ω = 0).
  const peal::Bank<peal::RealBlock<double>> real(
      {peal::RealBlock<double>(100), peal::RealBlock<double>(100)});
  check(run(real, {1, 0}, 10, {1, 1}, 0), inf);
  check(run(real, {0, 1}, 10, {1, 0}, 0), 0);
  using RB = peal::RotationBlock<double>;
  const peal::Bank<RB> grow({RB(0.0L, 100.0)});
  check(run(grow, {1, 0}, 10, {1, 0}, 0), inf);
  check(run(grow, {0, 1}, 10, {1, 0}, 0), 0);
  // Scalar decay γ = 1/2 towards a key 2000 positions in the future: γ^(−2000) = 2^2000.
  ScoreOptions opt;
  opt.decay = {0.5};
  const peal::Bank<RB> still({RB(0.0L)});
  check(run(still, {1, 0}, 0, {1, 0}, 2000, opt), inf);
  check(run(still, {1, 0}, 0, {0, 1}, 2000, opt), 0);
}

// ---- Steep decays, per pair -----------------------------------------------------------------
// With γ = 1e-300 the rebasing half-spread |ln γ| h ≤ θ is h = 0.016 in float: tiles of one
// token, a 1 x 1 GEMM per pair, 92x slower than γ = 0.99 at n = 2048 (and the row scales and
// alpha, rounded to float, lost γ^1 = 1e-300 entirely: a double `out` got 0). A decay that
// would cut the tiles is applied per pair, exp(ln γ (t_i − s_j)) in double, as the reference.
// Same tolerance as every other test (relative to scale γ^τ |q| ‖A‖ |k|); floor: the final
// rounding of a float out in its subnormal range (absolute <= denorm_min / 2).
TEST_CASE("scores: steep decays are applied per pair, accurate relative to the true score",
          "[scores][decay]") {
  std::mt19937 rng(2024);
  const double tiny = std::numeric_limits<float>::denorm_min();
  const RotBank rope = rope_bank(8);           // d = 16, pure rotation
  const RotBank xpos = xpos_like(8);           // decaying rotations: two-step tiles
  const auto j3 = jordan3_mix<double>(-0.02);  // a JordanBlock<3> evaluated per pair
  // Causal: γ^τ for τ >= 0 only (no overflow), every head its own γ, grouped heads.
  const std::vector<double> steep = {1e-300, 1e-5, 0.3, 1e-300};
  const std::vector<double> slopes = {0.5, 0.0, 0.25, 1.0};
  auto variants = [&](auto& c, double eps_c) {
    for (int variant = 0; variant < 4; ++variant) {
      ScoreOptions opt;
      opt.causal = true;
      opt.decay = steep;
      opt.scale = variant % 2 ? -0.25 : 1.0;
      if (variant >= 2) opt.alibi_slopes = slopes;
      if (variant == 3) opt.query_tile = 8, opt.key_tile = 16;
      CAPTURE(variant);
      for (int ol = 0; ol < 4; ++ol) {
        CAPTURE(ol);
        c.template run_and_check<float>(opt, ol, eps_c, 1.0, -1, tiny);
        c.template run_and_check<double>(opt, ol, eps_c, 1.0, -1, 0.0);
      }
    }
  };
  {
    Case<float, RotBank> c(rope, 45, 70, 4, 2, Positions::sequence(25.0), Positions::sequence(0.0),
                           Layout::dense, Layout::offset_padded, rng);
    variants(c, eps_f);
  }
  {
    Case<double, RotBank> c(xpos, 33, 41, 4, 2, Positions::sequence(8.5, 0.5),
                            Positions::sequence(0.0, 0.5), Layout::heads_major, Layout::dense, rng);
    variants(c, eps_d);
  }
  {
    Case<float, decltype(j3)> c(j3, 30, 37, 4, 2, Positions::sequence(7.0),
                                Positions::sequence(0.0), Layout::dense, Layout::dense, rng);
    variants(c, eps_f);
  }
  // Irregular timestamps with wide gaps: whole tiles whose decays underflow are written
  // without their GEMM (±0 plus the bias).
  {
    std::vector<double> irr(60);
    double t = 1.7e9;
    for (std::size_t i = 0; i < irr.size(); ++i) irr[i] = (t += (i % 20 == 19) ? 2000.5 : 0.75);
    Case<float, RotBank> c(rope, 60, 60, 4, 2, Positions(irr), Positions(irr), Layout::dense,
                           Layout::dense, rng);
    variants(c, eps_f);
  }
  // Not causal: γ^τ grows for τ < 0; here within float's range (|ln γ τ| <= 4.6 * 9 < 88).
  {
    Case<float, RotBank> c(rope, 20, 20, 1, 1, Positions::sequence(0.0), Positions::sequence(-10.0),
                           Layout::dense, Layout::dense, rng);
    ScoreOptions opt;
    opt.decay = {0.01};  // |ln γ| = 4.6: h = 2.4 in float, tiles of 5 tokens if rebased
    for (int ol = 0; ol < 4; ++ol) {
      c.run_and_check<float>(opt, ol, eps_f, 1.0, -1, tiny);
      c.run_and_check<double>(opt, ol, eps_f);
    }
  }
}

TEST_CASE("scores: a steep decay does not cut the tiles down", "[scores][decay]") {
  // gamma = 1e-300 made |ln gamma| h <= theta give h = 0.016: one-token tiles, a 1 x 1 GEMM
  // per pair (80x slower at n = 2048). The plan must keep the tiles of the undecayed encoding
  // and apply the decay per pair; a mild decay keeps rebasing through the tiles.
  // (Speed itself is measured in bench/bench_scores.cpp, "steep_decay".)
  const Index n = 1024, d = 128;
  const RotBank enc = rope_bank(64);
  std::vector<float> q(std::size_t(n * d), 0.5f), k(q.size(), 0.25f), out(std::size_t(n * n));
  auto plan = [&](double gamma) {
    ScoreOptions opt;
    opt.decay = {gamma};
    opt.threads = 1;
    TensorView<const float> qv(q.data(), n, 1, d), kv(k.data(), n, 1, d);
    TensorView<float> ov(out.data(), 1, n, n);
    sk::ScoresRun<float, RotBank, const float, const float, float> run(
        enc, qv, Positions::sequence(0.0), kv, Positions::sequence(0.0), ov, opt);
    return std::make_tuple(run.plan().query.size(), run.plan().key.size(), run.plan().pair_decay);
  };
  const auto [q0, k0, p0] = plan(1.0);
  const auto [q1, k1, p1] = plan(1e-300);
  const auto [q2, k2, p2] = plan(0.99);
  CHECK(!p0);
  CHECK(p1);
  CHECK(q1 == q0);
  CHECK(k1 == k0);
  CHECK(!p2);
  CHECK(q2 <= 2 * q0);
}
