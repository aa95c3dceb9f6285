// Tests of include/peal/scores.hpp: the fused, rebased scores kernel against the per-pair
// form q_i^T A(t_i - s_j) k_j (the encoding's own score(), evaluated in double through the
// lag t - s, never through F(t) and G(s)), over awkward sizes, misaligned and strided views,
// every option and all storage types. The tolerance below is that of
// tests/test_scores_numerics.cpp too (the rest of these tests; see the end of this header).
//
// Tolerance (per element; M_ij = |scale| γ^τ |q_i| ‖A(τ)‖ |k_j|, τ = t_i - s_j; each term
// derived in tests/tolerances.hpp, "Batch kernels"):
//   |out - ref| <= Tol<C>::fused_score(d) ρ M_ij + Tol<Out>::alibi_bias(|m| (|τ| + w))
//                  + Tol<Out>::stored() |ref| + floor
// C: the arithmetic type (float for float/half/bfloat16 storage, double when q or k stores
//   double), passed as its epsilon eps_c = Tol<C>::eps (eps_f, eps_d below); fused_score is
//   2 (d + 16) eps_C. ‖A(τ)‖ is bounded above by max(‖A‖_1, ‖A‖_inf) (which bounds the
//   2-norm).
// ρ: 1 for diagonalisable encodings; (1 + 2 h_q + 2 h_k)^p for Jordan chains of length p + 1,
//   h the half-spread of the tiles (docs/kernels-scores.md, "Rebasing").
// The ALiBi term -m τ is formed as -m (t_i - T) - m (T - s_j) around the tile anchor T, w the
//   tile width. stored(): the final rounding to the output type (float out with double
//   arithmetic). floor: absolute slack (Tol<float>::flushed()) for scores that underflow.
//
// This file: awkward sizes, views, options, storage types, compositions and a user encoding,
// threads, table reuse, validation, outputs overlapping the inputs and tile sizes. The
// per-pair polynomial parts (JordanBlock<M >= 2), the tile plan, numerics at extreme positions
// and steep decays: tests/test_scores_numerics.cpp. Shared helpers: tests/scores_check.hpp.
#include "scores_check.hpp"

// ---- Awkward sizes, dims, layouts ---------------------------------------------------------

TEST_CASE("scores: RoPE banks (both layouts) and partial rotary over awkward sizes", "[scores]") {
  std::mt19937 rng(20240601);
  const std::vector<std::pair<Index, Index>> sizes = {
      {1, 1}, {3, 7}, {7, 3}, {17, 63}, {63, 65}, {65, 17}, {257, 17}, {17, 257}, {257, 257}};
  for (int d : {2, 6, 64, 128}) {
    for (auto layout : {peal::Layout::Interleaved, peal::Layout::HalfSplit}) {
      const RotBank enc = rope_bank(d / 2, layout);
      for (auto [nq, nk] : sizes) {
        // Keep the per-pair reference cheap (also in unoptimised builds): 257 x 257 for d = 2,
        // 257 x 17 for d = 6, up to 65 x 63 for d = 64 and 128.
        if ((nq * nk > 257 * 17 && d > 2) || (nq * nk > 65 * 63 && d > 6)) continue;
        const Index H = nq * nk > 4096 ? 1 : 2;
        CAPTURE(d, int(layout), nq, nk);
        Case<float, RotBank> c(enc, nq, nk, H, H, Positions::sequence(double(nk - nq)),
                               Positions::sequence(0.0), Layout::dense, Layout::dense, rng);
        ScoreOptions opt;
        c.run_and_check<float>(opt, 0, eps_f);
        ScoreOptions small;  // many partial tiles even at these sizes
        small.query_tile = 16;
        small.key_tile = 32;
        small.causal = true;
        c.run_and_check<float>(small, 0, eps_f);
      }
    }
  }
  // Partial rotary: rotate the first 4 of 6 (or 48 of 64) coordinates, pass the rest.
  for (int d : {6, 64}) {
    const int rot = d == 6 ? 4 : 48;
    for (auto layout : {peal::Layout::Interleaved, peal::Layout::HalfSplit}) {
      const auto enc =
          peal::compose(rope_bank(rot / 2, layout), peal::PassThrough<double>(d - rot));
      for (auto [nq, nk] : std::vector<std::pair<Index, Index>>{{7, 3}, {63, 65}, {257, 17}}) {
        if (d == 64 && nq == 257) continue;
        CAPTURE(d, int(layout), nq, nk);
        Case<float, decltype(enc)> c(enc, nq, nk, 2, 1, Positions::sequence(5.0),
                                     Positions::sequence(0.0), Layout::dense, Layout::dense, rng);
        ScoreOptions opt;
        opt.causal = true;
        c.run_and_check<float>(opt, 0, eps_f);
        opt.query_tile = 7;
        opt.key_tile = 9;
        c.run_and_check<float>(opt, 1, eps_f);
      }
    }
  }
}

TEST_CASE("scores: misaligned, padded and strided views, every output layout", "[scores]") {
  std::mt19937 rng(7);
  const RotBank enc = xpos_like(16);  // d = 32, decaying: the rebasing path
  Case<float, RotBank> c0(enc, 65, 63, 4, 2, Positions::sequence(100.0, 2.0),
                          Positions::sequence(1.0, 2.0), Layout::dense, Layout::dense, rng);
  for (Layout lq :
       {Layout::dense, Layout::offset_padded, Layout::elem_stride2, Layout::heads_major})
    for (Layout lk : {Layout::dense, Layout::offset_padded, Layout::elem_stride2}) {
      CAPTURE(int(lq), int(lk));
      const Stored<float> q = restride(c0.q, lq), k = restride(c0.k, lk);
      for (int ol = 0; ol < 4; ++ol) {
        CAPTURE(ol);
        ScoreOptions opt;
        opt.scale = 0.125;
        opt.query_tile = 16;
        opt.key_tile = 24;
        c0.run_and_check_views<float>(q.view, k.view, opt, ol, eps_f);
        if (lq == lk) c0.run_and_check_views<double>(q.view, k.view, opt, ol, eps_f);  // double out
      }
    }
  // A pure rotation read in place (dense float q/k, identity-free) and the identity encoding
  // read straight from caller memory (ALiBi-only), on misaligned views.
  const RotBank rope = rope_bank(16);
  Case<float, RotBank> c(rope, 40, 50, 2, 2, Positions::sequence(10.0), Positions::sequence(0.0),
                         Layout::offset_padded, Layout::offset_padded, rng);
  c.run_and_check<float>(ScoreOptions{}, 1, eps_f);
  const peal::PassThrough<double> id(32);
  Case<float, peal::PassThrough<double>> ci(id, 40, 50, 2, 2, Positions::sequence(10.0),
                                            Positions::sequence(0.0), Layout::offset_padded,
                                            Layout::dense, rng);
  ScoreOptions al;
  al.alibi_slopes = {0.5, 0.0625};
  al.causal = true;
  for (int ol = 0; ol < 4; ++ol) ci.run_and_check<float>(al, ol, eps_f);
}

// ---- Options ------------------------------------------------------------------------------

TEST_CASE("scores: causal, scale, ALiBi, decay and grouped-query heads", "[scores]") {
  std::mt19937 rng(99);
  const RotBank rope = rope_bank(8);  // d = 16
  for (Index G : {1, 2, 4}) {
    const Index Hk = 2, Hq = Hk * G;
    // Chunked prefill: 37 queries at the end of 101 keys.
    Case<float, RotBank> c(rope, 37, 101, Hq, Hk, Positions::sequence(64.0),
                           Positions::sequence(0.0), Layout::dense, Layout::dense, rng);
    std::vector<double> slopes, same, diff;
    for (Index h = 0; h < Hq; ++h) {
      slopes.push_back(std::pow(2.0, -double(h + 1)));
      same.push_back(0.9 + 0.02 * double(h / G));  // equal within a group: folded into keys
      diff.push_back(1.0 - std::pow(2.0, -double(h + 3)));  // differ within a group
    }
    for (int variant = 0; variant < 6; ++variant) {
      ScoreOptions opt;
      opt.query_tile = 16;
      opt.key_tile = 32;
      opt.causal = variant % 2 == 0;
      opt.scale = variant >= 2 ? 0.25 : 1.0;
      if (variant >= 2) opt.alibi_slopes = slopes;
      if (variant == 4) opt.decay = same;
      if (variant == 5) opt.decay = diff;
      CAPTURE(G, variant);
      c.run_and_check<float>(opt, 0, eps_f);
      c.run_and_check<double>(opt, 2, eps_f);
    }
  }
  // Scalar decay on a pure rotation equals the same rotation with a = ln γ on every pair.
  {
    const double gamma = 1.0 - std::pow(2.0, -5.0);
    const RotBank decaying = rope_bank(8, peal::Layout::Interleaved, std::log(gamma));
    Case<float, RotBank> a(decaying, 50, 50, 1, 1, Positions::sequence(0.0),
                           Positions::sequence(0.0), Layout::dense, Layout::dense, rng);
    std::vector<float> o1(2500), o2(2500);
    ScoreOptions causal;
    causal.causal = true;
    peal::scores(decaying, TensorView<const float>(a.q.view), a.tq,
                 TensorView<const float>(a.k.view), a.tk, peal::make_view(o1.data(), 1, 50, 50),
                 causal);
    ScoreOptions dec = causal;
    dec.decay = {gamma};
    peal::scores(rope, TensorView<const float>(a.q.view), a.tq, TensorView<const float>(a.k.view),
                 a.tk, peal::make_view(o2.data(), 1, 50, 50), dec);
    // Each within fused_score(16) M of the truth (M from the reference of `decaying`), but
    // kept as tight as the old absolute 1e-4 (1 + |o|), which that doubled bound exceeds by
    // up to 4x: roundings(16) M, an eighth of it (measured differences ~1/16 of that).
    for (std::size_t x = 0; x < o1.size(); ++x) {
      if (std::isinf(o1[x])) {
        CHECK(o1[x] == o2[x]);
        continue;
      }
      const double tol = double(Tol<float>::roundings(16)) * a.ref.mag[x];
      CHECK(std::abs(o1[x] - o2[x]) <= tol);
    }
  }
}

TEST_CASE("scores: storage types and arithmetic", "[scores]") {
  std::mt19937 rng(5);
  const RotBank enc = xpos_like(12);  // d = 24
  const auto tq = Positions::sequence(3.0), tk = Positions::sequence(0.0);
  ScoreOptions opt;
  opt.causal = true;
  opt.alibi_slopes = {0.25, 0.5};
  opt.query_tile = 16;
  opt.key_tile = 16;
  Case<Eigen::half, RotBank> h(enc, 40, 43, 2, 2, tq, tk, Layout::offset_padded, Layout::dense,
                               rng);
  h.run_and_check<float>(opt, 0, eps_f);
  Case<Eigen::bfloat16, RotBank> b(enc, 40, 43, 2, 2, tq, tk, Layout::dense, Layout::elem_stride2,
                                   rng);
  b.run_and_check<double>(opt, 1, eps_f);
  Case<double, RotBank> dd(enc, 40, 43, 2, 2, tq, tk, Layout::offset_padded, Layout::dense, rng);
  dd.run_and_check<double>(opt, 0, eps_d);
  dd.run_and_check<float>(opt, 3, eps_d);  // double arithmetic, float out
  // Mixed: float queries with double keys compute in double.
  Stored<float> qf = make_stored<float>(9, 2, 24, Layout::dense, rng);
  Stored<double> kd = make_stored<double>(11, 2, 24, Layout::dense, rng);
  std::vector<double> out(2 * 9 * 11), want(out.size());
  peal::scores(enc, qf.view, tq, kd.view, tk, peal::make_view(out.data(), 2, 9, 11));
  peal::scores_reference(enc, qf.view, tq, kd.view, tk, peal::make_view(want.data(), 2, 9, 11));
  // Double arithmetic: fused_score(24) in double of |q| ‖A‖ |k| (the reference's magnitudes).
  const Reference mix =
      reference(enc, qf.val, kd.val, 9, 11, 2, 2, 24, positions_of(tq, 9), positions_of(tk, 11));
  for (std::size_t x = 0; x < out.size(); ++x) {
    const double tol = double(Tol<double>::fused_score(24) * mix.mag[x] +
                              Tol<double>::stored() * std::abs(want[x]));
    CHECK(std::abs(out[x] - want[x]) <= tol);
  }
}

TEST_CASE("scores: compositions, Jordan blocks, basis change and a user encoding", "[scores]") {
  std::mt19937 rng(11);
  // Mixed composition; deg 1 Jordan chains (tile spread unrestricted in float: (1 + 4h) <= 2^12).
  const auto mix = peal::compose(rope_bank(4, peal::Layout::HalfSplit, -0.002),
                                 peal::RotationJordanBlock<2, double>(0.3, -0.001),
                                 peal::JordanBlock<2, double>(0.0), peal::RealBlock<double>(-0.01),
                                 peal::PassThrough<double>(3));
  Case<float, decltype(mix)> c(mix, 70, 90, 2, 2, Positions::sequence(20.0),
                               Positions::sequence(0.0), Layout::dense, Layout::dense, rng);
  for (Index tile : {8, 0}) {
    ScoreOptions opt;
    opt.query_tile = tile;
    opt.key_tile = tile;
    const double w = tile ? double(tile) : 256.0;
    c.run_and_check<float>(opt, 0, eps_f, 1 + 2 * w);  // ρ = (1 + 2h_q + 2h_k)^1, h <= w / 2
  }
  // Banks of real and Jordan blocks.
  const peal::Bank<peal::RealBlock<double>> reals(std::vector<peal::RealBlock<double>>{
      peal::RealBlock<double>(-0.05), peal::RealBlock<double>(0.01), peal::RealBlock<double>(0.0)});
  Case<double, decltype(reals)> r(reals, 30, 30, 1, 1, Positions::sequence(0.0),
                                  Positions::sequence(0.0), Layout::dense, Layout::dense, rng);
  r.run_and_check<double>(ScoreOptions{}, 0, eps_d);
  // Basis change: X = P J P^{-1}.
  Eigen::MatrixXd P = Eigen::MatrixXd::Identity(8, 8) + 0.3 * Eigen::MatrixXd::Random(8, 8);
  const auto bc = peal::change_basis(rope_bank(4, peal::Layout::Interleaved, -0.01), P);
  Case<double, decltype(bc)> b(bc, 25, 31, 2, 1, Positions::sequence(7.0), Positions::sequence(0.0),
                               Layout::dense, Layout::offset_padded, rng);
  ScoreOptions bo;
  bo.query_tile = 6;
  bo.key_tile = 10;
  // |q||A||k| is measured in the original basis; P^T and P^{-1} add cond(P) to the error.
  const Eigen::JacobiSVD<Eigen::MatrixXd> svd(P);
  const double cond = svd.singularValues()(0) / svd.singularValues()(7);
  b.run_and_check<double>(bo, 0, eps_d, cond * cond);
  // A single RotationJordanBlock<3>: a chain of length 3 (p = 2), half-step positions.
  const auto lone = peal::RotationJordanBlock<3, double>(0.2, -0.003);
  Case<float, decltype(lone)> l(lone, 21, 22, 1, 1, Positions::sequence(0.5, 0.5),
                                Positions::sequence(0.0, 0.5), Layout::dense, Layout::dense, rng);
  ScoreOptions lo;
  lo.query_tile = 4;
  lo.key_tile = 4;
  l.run_and_check<float>(lo, 0, eps_f, std::pow(1 + 2 * 2.0, 2));
}

namespace {
// A user-defined encoding peal has no coder for: RoPE written by hand (fallback path).
struct MyRope : peal::Encoding<MyRope, double> {
  using MatrixType = peal::Matrix<double>;
  RotBank bank = rope_bank(3);
  int dim() const { return 6; }
  MatrixType generator() const { return bank.generator(); }
  MatrixType A(double tau) const { return bank.A(tau); }
  template <class V>
  void apply(V&& v, double tau, bool transpose) const {
    bank.apply(v, tau, transpose);
  }
};
}  // namespace

TEST_CASE("scores: a user-defined encoding goes through the generic fallback", "[scores]") {
  std::mt19937 rng(3);
  const MyRope enc;
  Case<float, MyRope> c(enc, 33, 29, 2, 2, Positions::sequence(0.0), Positions::sequence(0.0),
                        Layout::dense, Layout::dense, rng);
  ScoreOptions opt;
  opt.causal = true;
  opt.query_tile = 8;
  c.run_and_check<float>(opt, 0, eps_f);
}

TEST_CASE("scores: thread count does not change the result; empty problems", "[scores]") {
  std::mt19937 rng(17);
  const RotBank enc = xpos_like(16);
  // 2 x 4 x 400 x 380 x 32 flops: enough work for the kernel to start two threads.
  Stored<float> q = make_stored<float>(400, 4, 32, Layout::dense, rng);
  Stored<float> k = make_stored<float>(380, 2, 32, Layout::dense, rng);
  std::vector<float> a(4 * 400 * 380), b(a.size());
  ScoreOptions opt;
  opt.causal = true;
  opt.decay = {0.99, 0.98, 0.97, 0.96};
  opt.query_tile = 32;
  opt.key_tile = 64;
  opt.threads = 1;
  peal::scores(enc, q.view, Positions::sequence(0.0), k.view, Positions::sequence(0.0),
               peal::make_view(a.data(), 4, 400, 380), opt);
  opt.threads = 2;
  peal::scores(enc, q.view, Positions::sequence(0.0), k.view, Positions::sequence(0.0),
               peal::make_view(b.data(), 4, 400, 380), opt);
  CHECK(a == b);

  std::vector<float> none;
  Stored<float> q0 = make_stored<float>(0, 4, 32, Layout::dense, rng);
  CHECK_NOTHROW(peal::scores(enc, q0.view, Positions::sequence(0.0), k.view,
                             Positions::sequence(0.0), peal::make_view(none.data(), 4, 0, 380)));
  // d = 0: the score is the ALiBi bias alone.
  const peal::PassThrough<double> empty(0);
  std::vector<float> e(2 * 3 * 4);
  ScoreOptions al;
  al.alibi_slopes = {1.0, 0.5};
  peal::scores(empty, TensorView<const float>(nullptr, 3, 2, 0), Positions::sequence(10.0),
               TensorView<const float>(nullptr, 4, 2, 0), Positions::sequence(0.0),
               peal::make_view(e.data(), 2, 3, 4), al);
  CHECK(e[0] == -10.0f);
  CHECK(e[std::size_t((1 * 3 + 2) * 4 + 3)] == -4.5f);  // -0.5 (12 - 3): exact in float
}

TEST_CASE("scores: shared tables are reused across calls only for the same encoding and tiles",
          "[scores]") {
  std::mt19937 rng(23);
  Stored<float> q = make_stored<float>(70, 2, 16, Layout::dense, rng);
  Stored<float> k = make_stored<float>(90, 2, 16, Layout::dense, rng);
  const RotBank a = rope_bank(8);
  std::vector<Rot> bb = rope_blocks(8);
  bb[3] = Rot(bb[3].omega() * 1.01L, 0.0);  // one frequency differs
  const RotBank b(bb);
  auto run = [&](const RotBank& e, double step) {
    std::vector<float> o(2 * 70 * 90);
    peal::scores(e, q.view, Positions::sequence(0.0, step), k.view, Positions::sequence(0.0, step),
                 peal::make_view(o.data(), 2, 70, 90));
    return o;
  };
  const auto b1 = run(b, 1.0), b_step2 = run(b, 2.0);
  const auto a1 = run(a, 1.0);
  const auto b2 = run(b, 1.0);
  const auto b_step2_again = run(b, 2.0);
  CHECK(b1 == b2);  // bitwise: same tables whether cached or recomputed
  CHECK(b_step2 == b_step2_again);
  CHECK(a1 != b1);
  CHECK(b1 != b_step2);
}

// ---- Validation ---------------------------------------------------------------------------

TEST_CASE("scores: invalid arguments are rejected with clear errors", "[scores]") {
  std::mt19937 rng(1);
  const RotBank enc = rope_bank(4);  // d = 8
  Stored<float> q = make_stored<float>(5, 4, 8, Layout::dense, rng);
  Stored<float> k = make_stored<float>(6, 2, 8, Layout::dense, rng);
  Stored<float> k3 = make_stored<float>(6, 3, 8, Layout::dense, rng);
  Stored<float> k7 = make_stored<float>(6, 2, 7, Layout::dense, rng);
  std::vector<float> o(4 * 5 * 6);
  auto out = peal::make_view(o.data(), 4, 5, 6);
  const auto p = Positions::sequence(0.0);
  using Catch::Matchers::Contains;
  auto call = [&](const ScoreOptions& opt) { peal::scores(enc, q.view, p, k.view, p, out, opt); };
  REQUIRE_NOTHROW(call(ScoreOptions{}));
  REQUIRE_THROWS_WITH(peal::scores(enc, q.view, p, k7.view, p, out), Contains("must have dim 8"));
  REQUIRE_THROWS_WITH(peal::scores(enc, q.view, p, k3.view, p, out),
                      Contains("multiple of the number of key heads"));
  REQUIRE_THROWS_WITH(peal::scores(enc, q.view, p, k.view, p, peal::make_view(o.data(), 4, 6, 5)),
                      Contains("expected [Hq, nq, nk] = [4, 5, 6]"));
  const std::vector<double> three = {0, 1, 2};
  REQUIRE_THROWS_WITH(peal::scores(enc, q.view, Positions(three), k.view, p, out),
                      Contains("3 positions for 5 tokens"));
  std::vector<double> nan5 = {0, 1, std::nan(""), 3, 4};
  REQUIRE_THROWS_AS(peal::scores(enc, q.view, Positions(nan5), k.view, p, out),
                    peal::invalid_argument);
  std::vector<double> far5 = {-1e308, 0, 0, 0, 0};
  std::vector<double> far6 = {1e308, 0, 0, 0, 0, 0};
  REQUIRE_THROWS_WITH(peal::scores(enc, q.view, Positions(far5), k.view, Positions(far6), out),
                      Contains("differences of positions overflow"));
  ScoreOptions o1;
  o1.alibi_slopes = {1, 2};
  REQUIRE_THROWS_WITH(call(o1), Contains("2 ALiBi slopes for 4 query heads"));
  ScoreOptions o2;
  o2.decay = {0.9, 0.9, 0.9};
  REQUIRE_THROWS_WITH(call(o2), Contains("3 decays for 4 query heads"));
  ScoreOptions o3;
  o3.decay = {0.9, 1.5, 0.9, 0.9};
  REQUIRE_THROWS_WITH(call(o3), Contains("decay gamma must be in (0, 1]"));
  o3.decay = {0.9, 0.0, 0.9, 0.9};
  REQUIRE_THROWS_WITH(call(o3), Contains("decay gamma must be in (0, 1]"));
  ScoreOptions o4;
  o4.scale = std::numeric_limits<double>::infinity();
  REQUIRE_THROWS_WITH(call(o4), Contains("scale must be finite"));
  ScoreOptions o5;
  o5.threads = -1;
  REQUIRE_THROWS_AS(call(o5), peal::invalid_argument);
  ScoreOptions o6;
  o6.alibi_slopes = {1, std::nan(""), 1, 1};
  REQUIRE_THROWS_AS(call(o6), peal::invalid_argument);
}

// ---- Overlap of the output with the inputs ------------------------------------------------
// The kernel reads q and k tile by tile while it writes out: an `out` overlapping `k` gave
// 39,598 wrong scores of 360,000 (errors up to 6.7) without an error. Any overlap of out with
// q or k is rejected, by scores() and scores_reference(), before anything is written; views
// in adjacent memory are accepted.
TEST_CASE("scores: an output overlapping q or k is rejected; adjacent memory is fine",
          "[scores][overlap]") {
  using Catch::Matchers::Contains;
  std::mt19937 rng(5);
  const RotBank enc = rope_bank(8);  // d = 16
  const Index nq = 7, nk = 9, Hq = 2, Hk = 1, d = 16;
  const Index nqv = nq * Hq * d, nkv = nk * Hk * d, nout = Hq * nq * nk;
  std::vector<float> buf(std::size_t(nqv + nout + nkv + 64));
  std::normal_distribution<float> N(0.0f, 1.0f);
  for (auto& x : buf) x = N(rng);
  const std::vector<float> saved = buf;
  // Layout [q | out | k]: out right after q, k right after out.
  float* q0 = buf.data();
  float* o0 = q0 + nqv;
  float* k0 = o0 + nout;
  const TensorView<const float> q(q0, nq, Hq, d), k(k0, nk, Hk, d);
  const auto p = Positions::sequence(3.0);
  auto out_at = [&](float* at) { return TensorView<float>(at, Hq, nq, nk); };
  for (const ScoreOptions& opt :
       {ScoreOptions{}, ScoreOptions{true, 0.25, {0.5, 0.25}, {0.9, 1.0}}}) {
    for (Index shift : {Index(1), Index(-1), Index(-nout + 1), Index(nout - 1)}) {
      INFO("out moved by " << shift);
      const auto out = out_at(o0 + shift);  // into k (shift > 0) or into q (shift < 0)
      const char* which = shift > 0 ? "overlaps k" : "overlaps q";
      CHECK_THROWS_WITH(peal::scores(enc, q, p, k, p, out, opt), Contains(which));
      CHECK_THROWS_WITH(peal::scores_reference(enc, q, p, k, p, out, opt), Contains(which));
    }
    // Exactly on top of q or k (same first element).
    CHECK_THROWS_WITH(peal::scores(enc, q, p, k, p, out_at(q0), opt), Contains("overlaps q"));
    CHECK_THROWS_WITH(peal::scores(enc, q, p, k, p, out_at(k0), opt), Contains("overlaps k"));
    // A strided out over part of k's memory.
    const TensorView<float> inter(k0 + 1, Hq, nq, nk, Strides{nq * nk * 2, 1, nq});
    CHECK_THROWS_WITH(peal::scores(enc, q, p, k, p, inter, opt), Contains("overlaps k"));
    CHECK(std::equal(buf.begin(), buf.end(), saved.begin()));
    // Adjacent: accepted, and the same bits as a separate output.
    std::vector<float> sep(static_cast<std::size_t>(nout));
    peal::scores(enc, q, p, k, p, TensorView<float>(sep.data(), Hq, nq, nk), opt);
    peal::scores(enc, q, p, k, p, out_at(o0), opt);
    CHECK(std::equal(sep.begin(), sep.end(), o0));
    std::vector<double> sepd(static_cast<std::size_t>(nout));
    peal::scores_reference(enc, q, p, k, p, TensorView<double>(sepd.data(), Hq, nq, nk), opt);
    peal::scores_reference(enc, q, p, k, p, out_at(o0), opt);
    for (Index x = 0; x < nout; ++x) CHECK(o0[x] == float(sepd[std::size_t(x)]));
    // q and k may overlap each other (both are read only): the same memory for both.
    std::vector<float> o2(static_cast<std::size_t>(Hq * nq * nq));
    REQUIRE_NOTHROW(peal::scores(enc, q, p, TensorView<const float>(q0, nq, Hq, d), p,
                                 TensorView<float>(o2.data(), Hq, nq, nq), opt));
    buf = saved;
  }
}

// ---- Tile sizes ------------------------------------------------------------------------------
TEST_CASE("scores: negative tile sizes are rejected; explicit tile sizes give the same scores",
          "[scores]") {
  using Catch::Matchers::Contains;
  std::mt19937 rng(9);
  const RotBank enc = rope_bank(4);  // d = 8
  Case<float, RotBank> c(enc, 37, 45, 2, 1, Positions::sequence(0.0), Positions::sequence(0.0),
                         Layout::dense, Layout::dense, rng);
  std::vector<float> o(std::size_t(2 * 37 * 45));
  const TensorView<float> out(o.data(), 2, 37, 45);
  for (Index bad : {Index(-1), Index(-512), std::numeric_limits<Index>::min()}) {
    ScoreOptions oq, ok;
    oq.query_tile = bad;
    ok.key_tile = bad;
    CHECK_THROWS_WITH(peal::scores(enc, c.q.view, c.tq, c.k.view, c.tk, out, oq),
                      Contains("tile sizes must be >= 0"));
    CHECK_THROWS_WITH(peal::scores(enc, c.q.view, c.tq, c.k.view, c.tk, out, ok),
                      Contains("tile sizes must be >= 0"));
    CHECK_THROWS_AS(peal::scores_reference(enc, c.q.view, c.tq, c.k.view, c.tk, out, oq),
                    peal::invalid_argument);
  }
  // 0 is automatic; 1 and sizes that do not divide the token counts are valid.
  for (Index tile : {Index(0), Index(1), Index(7), Index(1000)}) {
    ScoreOptions opt;
    opt.query_tile = tile;
    opt.key_tile = tile == 7 ? 5 : tile;
    c.run_and_check<float>(opt, 0, eps_f);
  }
}
