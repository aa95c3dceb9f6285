// peal::linear_attention (include/peal/linear_attention.hpp) against the naive long double
// double sum of tests/linear_suite.hpp, with the bound Tol<C>::linear_out (tests/tolerances.hpp):
//   every storage type (float, double, Eigen::half, Eigen::bfloat16 inputs, float and double
//   outputs) in padded and head-major views; the automatic form against the explicit ones; RetNet
//   (gamma = 1 - 2^-5) over 65,536 tokens in float against double; decays so strong that the
//   naive chunk factors overflow float; ties and queries at other times than the keys; the
//   thread count (bitwise, up to INT_MAX); every bad input with its message (a LinearState's
//   among them); and tests that must fail (a reference without the decay, with a decay or a
//   scale slightly off). Issue 19: a chunk past the keys is one chunk (item 2), any thread count
//   (6), growth past the range is non-finite in every form and the state (9).
// LinearState (prefill then decode and chained calls, read() and advance(), a double state):
// tests/test_linear_state.cpp; its guards (refused overlapping views and absurd sizes, its own
// encoding only (issue 19 item 8)) and concurrent reads: tests/test_linear_state_guards.cpp. The encoding families:
// tests/test_linear_families.cpp. Shared helpers: tests/linear_attention_check.hpp.
#include "linear_attention_check.hpp"

TEST_CASE("linear attention: every storage type in padded and head-major views", "[linear]") {
  std::mt19937_64 rng(501);
  const auto rope = peal::rope<double>(rope_config(32, Layout::HalfSplit));
  const auto rope_l = peal::rope<long double>(rope_config(32, Layout::HalfSplit));
  const auto mixed = mixed_twins(502);
  struct Quad {
    Storage q, k, v, out;
  };
  using S = Storage;
  const Quad quads[] = {{S::f32, S::f32, S::f32, S::f32},
                        {S::f64, S::f64, S::f64, S::f64},
                        {S::f16, S::bf16, S::f16, S::f32},
                        {S::bf16, S::f16, S::bf16, S::f64},
                        {S::f32, S::f32, S::f32, S::f64}};
  int c = 0;
  for (const Quad& qd : quads)
    for (int kind = 0; kind < 2; ++kind, ++c) {
      Setup su;
      su.tq = su.tk = kind ? irregular(65, 1.7e9, rng) : regular(65, 3);
      su.Hq = 4, su.Hk = 2, su.dv = 7;
      su.sq = qd.q, su.sk = qd.k, su.sv = qd.v, su.so = qd.out;
      su.shq = c % 2 ? Shape::padded : Shape::heads_major;
      su.shk = c % 2 ? Shape::heads_major : Shape::padded;
      su.shv = Shape::padded, su.sho = c % 2 ? Shape::heads_major : Shape::padded;
      su.opt.decay = {kRetNetGamma, 1.0, 0.5, 0.9};
      su.every_form();
      for (int e = 0; e < 2; ++e) {
        const FormsResult r = e ? check_forms<true>(mixed.e, mixed.el, su, rng)
                                : check_forms<true>(rope, rope_l, su, rng);
        CAPTURE(c, e);
        INFO(r.check.first);
        CHECK(r.check.bad == 0);
        CHECK(r.check.checked == r.runs * 65 * 4 * 7);
      }
    }
}

TEST_CASE("linear attention: the automatic form equals the explicit forms", "[linear]") {
  std::mt19937_64 rng(503);
  const auto enc = peal::retnet_rotation<double>(32);
  const auto el = peal::retnet_rotation<long double>(32);
  for (Index n : {Index(5), Index(300)}) {
    Setup su;
    su.tq = su.tk = regular(n, 0);
    su.opt.decay = {kRetNetGamma, 0.99};
    su.runs = {{LinearForm::automatic, 0}};
    su.opt.chunk = 0;
    const FormsResult r = check_forms<false>(enc, el, su, rng);
    INFO(r.check.first);
    CHECK(r.check.bad == 0);
    CHECK(r.check.checked > 0);
  }
}

TEST_CASE("linear attention: tests that must fail (a wrong reference is caught)", "[linear]") {
  std::mt19937_64 rng(504);
  const auto tw = mixed_twins(505);
  Setup su;
  su.tq = su.tk = irregular(40, 2.0, rng);
  su.tq[5] = su.tk[4];  // a query tied with a key: the key is visible
  std::sort(su.tq.begin(), su.tq.end());
  su.opt.decay = {0.9, 0.95};
  su.every_form();
  CHECK(check_forms<false>(tw.e, tw.el, su, rng).check.bad == 0);
  LinearAttentionOptions wrong = su.opt;
  wrong.decay.clear();  // the reference without the decay
  CHECK(check_forms<false>(tw.e, tw.el, su, rng, &wrong).check.bad > 0);
  wrong = su.opt;
  wrong.decay = {0.9, 0.9501};  // a decay slightly off
  CHECK(check_forms<false>(tw.e, tw.el, su, rng, &wrong).check.bad > 0);
  wrong = su.opt;
  wrong.scale = 1.0001 / std::sqrt(double(tw.el.dim()));  // a scale slightly off
  CHECK(check_forms<false>(tw.e, tw.el, su, rng, &wrong).check.bad > 0);
}

TEST_CASE("linear attention: RetNet gamma = 1 - 2^-5 over 65536 tokens, float against double",
          "[linear]") {
  // peal::retnet_rotation with the decay option (one head, d = 32). The double computation's
  // own error is within Tol<double>::linear_out; float must be within Tol<float>::linear_out of
  // the exact sum, so within their sum of the double result. The bound's sizes are linear
  // recurrences over the keys (positions 0, 1, ..., every key visible to its query and J_i = i):
  //   U_e(i) = gamma U_e(i-1) + |k_i| |v_ie|,  S = scale |q_i| U_e(i),
  //   V_e(i) = gamma (V_e(i-1) + U_e(i-1)),   T = L = scale |q_i| V_e(i)  (sum of (i - j) terms).
  const Index n = 65536, d = 32, dv = 32;
  std::mt19937_64 rng(511);
  const Packed<float> q(n, 1, d, rng), k(n, 1, d, rng), v(n, 1, dv, rng);
  std::vector<double> qd(q.x.begin(), q.x.end()), kd(k.x.begin(), k.x.end()), vd(v.x.begin(), v.x.end());
  const auto enc_f = peal::retnet_rotation<float>(int(d));
  const auto enc_d = peal::retnet_rotation<double>(int(d));
  LinearAttentionOptions opt;
  opt.decay = {kRetNetGamma};
  const Positions pos = Positions::sequence(0, 1);
  // The double computation (chunkwise, double storage).
  std::vector<double> ref(std::size_t(n * dv));
  opt.form = LinearForm::chunkwise, opt.chunk = 64;
  peal::linear_attention(enc_d, TensorView<const double>(qd.data(), n, 1, d), pos,
                         TensorView<const double>(kd.data(), n, 1, d), pos,
                         TensorView<const double>(vd.data(), n, 1, dv),
                         TensorView<double>(ref.data(), n, 1, dv), opt);
  std::vector<LD> S(std::size_t(n * dv)), T(std::size_t(n * dv));
  {
    std::vector<LD> U(std::size_t(dv), 0), V(std::size_t(dv), 0);
    const LD g = kRetNetGamma, scale = 1 / std::sqrt(LD(d));
    for (Index i = 0; i < n; ++i) {
      LD kn = 0, qn = 0;
      for (Index e = 0; e < d; ++e)
        kn += LD(k.x[std::size_t(i * d + e)]) * k.x[std::size_t(i * d + e)],
            qn += LD(q.x[std::size_t(i * d + e)]) * q.x[std::size_t(i * d + e)];
      kn = std::sqrt(kn), qn = std::sqrt(qn);
      for (Index e = 0; e < dv; ++e) {
        V[std::size_t(e)] = g * (V[std::size_t(e)] + U[std::size_t(e)]);
        U[std::size_t(e)] = g * U[std::size_t(e)] + kn * std::abs(LD(v.x[std::size_t(i * dv + e)]));
        S[std::size_t(i * dv + e)] = scale * qn * U[std::size_t(e)];
        T[std::size_t(i * dv + e)] = scale * qn * V[std::size_t(e)];
      }
    }
  }
  const LD lag = std::abs(std::log(LD(kRetNetGamma)));
  for (auto form : {LinearForm::chunkwise, LinearForm::recurrent}) {
    opt.form = form;
    opt.chunk = form == LinearForm::chunkwise ? 64 : 0;
    const Index chunk = form == LinearForm::chunkwise ? 64 : 1;
    std::vector<float> out(std::size_t(n * dv), std::nanf(""));
    peal::linear_attention(enc_f, q.view(), pos, k.view(), pos, v.view(),
                           TensorView<float>(out.data(), n, 1, dv), opt);
    Index bad = 0, nonfinite = 0;
    LD worst = 0, worst_rel = 0;
    std::string first;
    for (std::size_t e = 0; e < out.size(); ++e) {
      if (!std::isfinite(out[e])) ++nonfinite;
      const LD s = S[e], tt = T[e];
      const LD tol = Tol<float>::linear_out(d, LD(chunk), 1, s, tt) +
                     Tol<double>::linear_out(d, 64, 1, s, tt) + Tol<float>::eps * std::abs(LD(ref[e])) +
                     Tol<float>::phase(lag) * tt;
      const LD err = std::abs(LD(out[e]) - LD(ref[e]));
      worst = std::max(worst, err / tol);
      worst_rel = std::max(worst_rel, err / s);
      if (!(err <= tol) && !bad++) {
        std::ostringstream os;
        os << form_name(form) << ": out[" << e / dv << "," << e % dv << "] = " << out[e]
           << ", double " << ref[e] << ", tol " << double(tol);
        first = os.str();
      }
    }
    if (std::getenv("PEAL_LINEAR_REPORT"))
      std::printf("RetNet 65536 %s: worst err/tol %.3Lg, worst err/sum|terms| %.3Lg\n",
                  form_name(form), worst, worst_rel);
    CAPTURE(form_name(form), double(worst), double(worst_rel));
    INFO(first);
    CHECK(nonfinite == 0);
    CHECK(bad == 0);
  }
}

TEST_CASE("linear attention: decays where the naive chunk factors overflow float", "[linear]") {
  // The naive chunkwise form scales queries by gamma^(t - c) and keys by gamma^(c - s) around a
  // chunk start c; over one chunk of 64 keys the key factor reaches e^{+|ln gamma| span}:
  // gamma = 0.5 at spacing 3 (2^189) and rates up to 10 per unit time at spacing 1 (e^630) are
  // beyond float (3.4e38 = e^88.7): that factor is inf in float. peal must stay finite and exact.
  std::mt19937_64 rng(512);
  const Index chunk = 64;
  {
    const std::vector<double> t = regular(256, 1000, 3);
    const float span = float(t[std::size_t(chunk - 1)] - t[0]);
    const float naive = std::exp(-std::log(0.5f) * span);
    CHECK(std::isinf(naive));
    const auto enc = peal::retnet_rotation<double>(16);
    const auto el = peal::retnet_rotation<long double>(16);
    for (Storage s : {Storage::f32, Storage::f64}) {
      Setup su;
      su.tq = su.tk = t;
      su.sq = su.sk = su.sv = su.so = s;
      su.opt.decay = {0.5, 0.5};
      su.every_form();
      const FormsResult r = check_forms<false>(enc, el, su, rng);
      INFO(r.check.first);
      CHECK(r.check.bad == 0);
    }
  }
  {
    using RB = peal::RealBlock<double>;
    using RBL = peal::RealBlock<long double>;
    const peal::Bank<RB> enc({RB(-10), RB(-5), RB(-1), RB(-0.1)}, Layout::Interleaved);
    const peal::Bank<RBL> el({RBL(-10), RBL(-5), RBL(-1), RBL(-0.1)}, Layout::Interleaved);
    REQUIRE(max_real_part(el) < 0);
    const std::vector<double> t = regular(256, 1.7e9, 1);
    const float naive = std::exp(float(10 * (t[std::size_t(chunk - 1)] - t[0])));
    CHECK(std::isinf(naive));
    for (Storage s : {Storage::f32, Storage::f64}) {
      Setup su;
      su.tq = su.tk = t;
      su.sq = su.sk = su.sv = su.so = s;
      su.runs = {{LinearForm::chunkwise, chunk}, {LinearForm::parallel, 0}, {LinearForm::recurrent, 0}};
      const FormsResult r = check_forms<false>(enc, el, su, rng);
      INFO(r.check.first);
      CHECK(r.check.bad == 0);
      // Finite: every element is within its bound of a finite reference (checked above), and
      // the rows see nonzero terms (the nearest key is at lag 0).
      CHECK(r.check.checked == 3 * 256 * 2 * 5);
    }
  }
}

TEST_CASE("linear attention: ties, and queries at other times than the keys", "[linear]") {
  std::mt19937_64 rng(513);
  const auto tw = mixed_twins(514);
  Setup su;
  su.tk = {0, 0, 1, 1, 1, 2.5, 2.5, 4, 7, 7, 7.25, 9, 12, 12, 12, 12, 15, 20, 20, 21};
  su.tq = {-1, 0, 1, 3, 7, 7.1, 12, 30};  // before every key: nothing visible (out = 0)
  su.Hq = 4, su.Hk = 2, su.dv = 3;
  su.opt.decay = {0.9, 1.0, 0.6, 0.99};
  su.every_form();
  const FormsResult r = check_forms<false>(tw.e, tw.el, su, rng);
  INFO(r.check.first);
  CHECK(r.check.bad == 0);
  // More queries than keys, at irregular times.
  Setup more = su;
  more.tk = irregular(9, 0.5, rng);
  more.tq = irregular(70, 0.0, rng);
  more.every_form();
  const FormsResult r2 = check_forms<false>(tw.e, tw.el, more, rng);
  INFO(r2.check.first);
  CHECK(r2.check.bad == 0);
  // A single key at s == t: out = scale (q^T k) v exactly as the reference; a query just before
  // it sees nothing (0).
  const auto enc = peal::rope<double>(rope_config(8, Layout::Interleaved));
  const std::vector<float> q = {1, 0, 0, 0, 0, 0, 0, 0}, k = {2, 0, 0, 0, 0, 0, 0, 0}, v = {3, -1};
  std::vector<float> out(4, NAN);
  const std::vector<double> tq = {std::nextafter(5.0, 0.0), 5.0}, tk = {5.0};
  const std::vector<float> q2 = {1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
  for (auto form : {LinearForm::parallel, LinearForm::chunkwise, LinearForm::recurrent}) {
    LinearAttentionOptions o;
    o.form = form;
    o.scale = 1.0;
    peal::linear_attention(enc, TensorView<const float>(q2.data(), 2, 1, 8), Positions(tq),
                           TensorView<const float>(k.data(), 1, 1, 8), Positions(tk),
                           TensorView<const float>(v.data(), 1, 1, 2),
                           TensorView<float>(out.data(), 2, 1, 2), o);
    CAPTURE(form_name(form));
    CHECK(out[0] == 0.0f);
    CHECK(out[1] == 0.0f);
    CHECK(out[2] == Approx(6.0).epsilon(1e-6));
    CHECK(out[3] == Approx(-2.0).epsilon(1e-6));
  }
  (void)q;
}

TEST_CASE("linear attention: results do not depend on the thread count", "[linear]") {
  std::mt19937_64 rng(515);
  const auto tw = mixed_twins(516);
  const auto& enc = tw.e;
  const Index n = 600, Hq = 8, Hk = 4, d = enc.dim(), dv = 16;
  const Packed<float> q(n, Hq, d, rng), k(n, Hk, d, rng), v(n, Hk, dv, rng);
  const std::vector<double> t = irregular(n, 10, rng);
  LinearAttentionOptions opt;
  opt.decay = {0.9, 0.95, 0.99, 1, 0.5, 0.7, 0.8, 0.999};
  for (auto form : {LinearForm::automatic, LinearForm::parallel, LinearForm::chunkwise,
                    LinearForm::recurrent}) {
    opt.form = form;
    std::vector<float> a(std::size_t(n * Hq * dv)), b(a.size());
    opt.threads = 1;
    peal::linear_attention(enc, q.view(), Positions(t), k.view(), Positions(t), v.view(),
                           TensorView<float>(a.data(), n, Hq, dv), opt);
    opt.threads = 2;
    peal::linear_attention(enc, q.view(), Positions(t), k.view(), Positions(t), v.view(),
                           TensorView<float>(b.data(), n, Hq, dv), opt);
    CAPTURE(form_name(form));
    CHECK(same_bits(a, b));
  }
}

TEST_CASE("linear attention: bad input throws with a message", "[linear][errors]") {
  const auto enc = peal::rope<double>(rope_config(8, Layout::Interleaved));
  using E = std::decay_t<decltype(enc)>;
  const Index nq = 3, nk = 4, Hq = 4, Hk = 2, d = 8, dv = 5;
  std::vector<float> q(nq * Hq * d, 0.5f), k(nk * Hk * d, 0.5f), v(nk * Hk * dv, 0.5f),
      out(nq * Hq * dv);
  std::vector<double> tq = {1, 2, 3}, tk = {0, 1, 2, 3};
  const TensorView<const float> Q(q.data(), nq, Hq, d), K(k.data(), nk, Hk, d),
      V(v.data(), nk, Hk, dv);
  const TensorView<float> O(out.data(), nq, Hq, dv);
  auto call = [&](const LinearAttentionOptions& o) {
    peal::linear_attention(enc, Q, Positions(tq), K, Positions(tk), V, O, o);
  };
  auto with = [&](auto set) {
    LinearAttentionOptions o;
    set(o);
    return o;
  };
  CHECK_NOTHROW(call({}));
  // Positions: unsorted, NaN, Inf, wrong count.
  {
    std::vector<double> uq = {1, 3, 2}, uk = {0, 2, 1, 3}, nan_q = {1, std::nan(""), 3},
                        inf_k = {0, 1, HUGE_VAL, 3}, two = {1, 2};
    CHECK_THROWS_WITH(peal::linear_attention(enc, Q, Positions(uq), K, Positions(tk), V, O),
                      Contains("non-decreasing"));
    CHECK_THROWS_WITH(peal::linear_attention(enc, Q, Positions(tq), K, Positions(uk), V, O),
                      Contains("non-decreasing"));
    CHECK_THROWS_AS(peal::linear_attention(enc, Q, Positions(uq), K, Positions(tk), V, O),
                    peal::invalid_argument);
    CHECK_THROWS_AS(peal::linear_attention(enc, Q, Positions(nan_q), K, Positions(tk), V, O),
                    peal::invalid_argument);
    CHECK_THROWS_AS(peal::linear_attention(enc, Q, Positions(tq), K, Positions(inf_k), V, O),
                    peal::invalid_argument);
    CHECK_THROWS_AS(peal::linear_attention(enc, Q, Positions(two), K, Positions(tk), V, O),
                    peal::invalid_argument);
    CHECK_THROWS_AS(peal::linear_attention(enc, Q, Positions::sequence(5, -1), K, Positions(tk), V, O),
                    peal::invalid_argument);  // a decreasing sequence
    CHECK_NOTHROW(peal::linear_attention(enc, Q, Positions::sequence(5, 0), K, Positions(tk), V, O));
  }
  // Extents: d, tokens and heads of v, out, Hq % Hk.
  {
    const std::vector<float> q7(nq * Hq * 7);
    CHECK_THROWS_AS(peal::linear_attention(enc, TensorView<const float>(q7.data(), nq, Hq, 7),
                                           Positions(tq), K, Positions(tk), V, O),
                    peal::invalid_argument);
    CHECK_THROWS_AS(peal::linear_attention(enc, Q, Positions(tq), K, Positions(tk),
                                           TensorView<const float>(v.data(), 3, Hk, dv), O),
                    peal::invalid_argument);
    CHECK_THROWS_AS(peal::linear_attention(enc, Q, Positions(tq), K, Positions(tk),
                                           TensorView<const float>(v.data(), nk, 1, dv), O),
                    peal::invalid_argument);
    CHECK_THROWS_AS(peal::linear_attention(enc, Q, Positions(tq), K, Positions(tk), V,
                                           TensorView<float>(out.data(), nq, Hq, dv - 1)),
                    peal::invalid_argument);
    CHECK_THROWS_AS(peal::linear_attention(enc, Q, Positions(tq), K, Positions(tk), V,
                                           TensorView<float>(out.data(), nq - 1, Hq, dv)),
                    peal::invalid_argument);
    CHECK_THROWS_WITH(peal::linear_attention(enc, TensorView<const float>(q.data(), nq, 3, d),
                                             Positions(tq), K, Positions(tk), V,
                                             TensorView<float>(out.data(), nq, 3, dv)),
                      Contains("multiple of the number of key heads"));  // Hq = 3, Hk = 2
  }
  // Options: gamma not in (0, 1], one per query head; chunk < 0; threads < 0; scale finite.
  for (double g : {0.0, 1.5, -0.5, std::nan(""), HUGE_VAL}) {
    CAPTURE(g);
    CHECK_THROWS_AS(call(with([g](LinearAttentionOptions& o) { o.decay = {0.9, g, 0.9, 0.9}; })),
                    peal::invalid_argument);
    CHECK_THROWS_WITH(call(with([g](LinearAttentionOptions& o) { o.decay = {0.9, g, 0.9, 0.9}; })),
                      Contains("(0, 1]"));
  }
  CHECK_NOTHROW(call(with([](LinearAttentionOptions& o) { o.decay = {1, 1, 1e-300, 0.5}; })));
  CHECK_THROWS_AS(call(with([](LinearAttentionOptions& o) { o.decay = {0.9, 0.9}; })),
                  peal::invalid_argument);
  CHECK_THROWS_WITH(call(with([](LinearAttentionOptions& o) { o.chunk = -1; })),
                    Contains("chunk must be >= 0"));
  CHECK_THROWS_AS(call(with([](LinearAttentionOptions& o) {
                    o.chunk = -1, o.form = LinearForm::chunkwise;
                  })),
                  peal::invalid_argument);
  CHECK_THROWS_AS(call(with([](LinearAttentionOptions& o) { o.threads = -1; })),
                  peal::invalid_argument);
  CHECK_THROWS_AS(call(with([](LinearAttentionOptions& o) { o.scale = std::nan(""); })),
                  peal::invalid_argument);
  CHECK_THROWS_AS(call(with([](LinearAttentionOptions& o) { o.scale = HUGE_VAL; })),
                  peal::invalid_argument);
  // Overlaps: out on q, k, v.
  {
    std::vector<float> all(8192, 0.5f);
    const TensorView<const float> Qa(all.data(), nq, Hq, d), Ka(all.data() + 1000, nk, Hk, d),
        Va(all.data() + 2000, nk, Hk, dv);
    auto over = [&](float* o) {
      peal::linear_attention(enc, Qa, Positions(tq), Ka, Positions(tk), Va,
                             TensorView<float>(o, nq, Hq, dv));
    };
    CHECK_NOTHROW(over(all.data() + 4000));
    CHECK_THROWS_AS(over(all.data() + 10), peal::invalid_argument);
    CHECK_THROWS_AS(over(all.data() + 1010), peal::invalid_argument);
    CHECK_THROWS_WITH(over(all.data() + 2010), Contains("out overlaps v"));
    CHECK_THROWS_AS(over(all.data() + 2010), peal::invalid_argument);
  }
  // The state: options mismatch, time after the first position, its own extents.
  {
    LinearAttentionOptions o;
    o.decay = {0.9, 0.9, 0.9, 0.9};
    LinearState<E, float> st(enc, Hq, Hk, dv, o);
    LinearAttentionOptions other = o;
    other.decay = {0.9, 0.9, 0.9, 0.8};
    CHECK_THROWS_WITH(peal::linear_attention(enc, Q, Positions(tq), K, Positions(tk), V, O, other, st),
                      Contains("another scale, decay or normalization"));
    other = o;
    other.scale = 0.25;
    CHECK_THROWS_AS(peal::linear_attention(enc, Q, Positions(tq), K, Positions(tk), V, O, other, st),
                    peal::invalid_argument);
    other = o;
    other.normalization = peal::LinearNorm::retnet;
    CHECK_THROWS_AS(peal::linear_attention(enc, Q, Positions(tq), K, Positions(tk), V, O, other, st),
                    peal::invalid_argument);
    CHECK(st.empty());  // nothing was added by the failed calls
    CHECK_NOTHROW(peal::linear_attention(enc, Q, Positions(tq), K, Positions(tk), V, O, o, st));
    CHECK(st.time() == 3.0);
    // Now the state is at 3: keys or queries before 3 are rejected.
    std::vector<double> later_q = {3, 4, 5}, later_k = {3, 3, 4, 5}, early_k = {2.5, 3, 4, 5},
                        early_q = {2, 4, 5};
    CHECK_THROWS_WITH(peal::linear_attention(enc, Q, Positions(later_q), K, Positions(early_k), V, O, o, st),
                      Contains("is after the first position"));
    CHECK_THROWS_AS(peal::linear_attention(enc, Q, Positions(early_q), K, Positions(later_k), V, O, o, st),
                    peal::invalid_argument);
    CHECK(st.time() == 3.0);
    CHECK_NOTHROW(peal::linear_attention(enc, Q, Positions(later_q), K, Positions(later_k), V, O, o, st));
    // A state of other heads or value size.
    LinearState<E, float> wrong_heads(enc, 2, 2, dv);
    CHECK_THROWS_AS(peal::linear_attention(enc, Q, Positions(tq), K, Positions(tk), V, O,
                                           LinearAttentionOptions{}, wrong_heads),
                    peal::invalid_argument);
    LinearState<E, float> wrong_dv(enc, Hq, Hk, dv + 1, o);
    CHECK_THROWS_AS(peal::linear_attention(enc, Q, Positions(tq), K, Positions(tk), V, O, o, wrong_dv),
                    peal::invalid_argument);
    // The state's own checks.
    CHECK_THROWS_AS(LinearState<E>(enc, 3, 2, dv), peal::invalid_argument);
    CHECK_THROWS_AS(LinearState<E>(enc, Hq, Hk, dv, with([](LinearAttentionOptions& x) {
                                     x.decay = {0.9, 2, 0.9, 0.9};
                                   })),
                    peal::invalid_argument);
    LinearState<E> s2(enc, Hq, Hk, dv);
    CHECK_THROWS_AS(s2.update(TensorView<const float>(k.data(), 2, Hk, d),
                              TensorView<const float>(v.data(), 2, Hk, dv), 0.0),
                    peal::invalid_argument);  // two tokens
    CHECK_THROWS_AS(s2.update(TensorView<const float>(k.data(), 1, Hk, d),
                              TensorView<const float>(v.data(), 1, Hk, dv), std::nan("")),
                    peal::invalid_argument);
  }
}

namespace {

/// out [nq, Hq, dv] of one call, in float storage.
template <class E>
std::vector<float> linear_out(const E& enc, const Packed<float>& q, const std::vector<double>& tq,
                              const Packed<float>& k, const std::vector<double>& tk,
                              const Packed<float>& v, const LinearAttentionOptions& opt) {
  std::vector<float> out(std::size_t(q.n * q.H * v.dim), std::nanf(""));
  peal::linear_attention(enc, q.view(), Positions(tq), k.view(), Positions(tk), v.view(),
                         TensorView<float>(out.data(), q.n, q.H, v.dim), opt);
  return out;
}

/// The same, continuing a fresh state after a prefill of the first `split` tokens with `pre`
/// (the state's options); the outputs of both calls, then every entry of M of every state head.
template <class E>
std::vector<double> continued_out(const E& enc, const Packed<float>& q, const Packed<float>& k,
                                  const Packed<float>& v, const std::vector<double>& t, Index split,
                                  const LinearAttentionOptions& pre,
                                  const LinearAttentionOptions& opt) {
  LinearState<E, float> st(enc, q.H, k.H, v.dim, pre);
  const Index n = q.n;
  Out<float> o(n, q.H, v.dim);
  const std::vector<double> t0(t.begin(), t.begin() + split), t1(t.begin() + split, t.end());
  peal::linear_attention(enc, q.view(0, split), Positions(t0), k.view(0, split), Positions(t0),
                         v.view(0, split), o.view(0, split), pre, st);
  peal::linear_attention(enc, q.view(split), Positions(t1), k.view(split), Positions(t1),
                         v.view(split), o.view(split), opt, st);
  std::vector<double> all(o.x.begin(), o.x.end());
  for (Index s = 0; s < st.heads(); ++s) {
    const auto M = st.matrix(s);
    all.insert(all.end(), M.data(), M.data() + M.size());
  }
  return all;
}

}  // namespace

// Issue 19 item 2: the chunkwise form sized its working memory by `chunk`, not by the keys (300
// tokens with chunk = 1e5 peaked at 464 MB, 1e7 and more ran out of memory, 2^62 overflowed a
// signed product). A chunk at least the number of keys is one chunk: the same bits as chunk = n.
TEST_CASE("linear attention: a chunk larger than the keys acts as one chunk", "[linear][chunk]") {
  std::mt19937_64 rng(517);
  const auto tw = mixed_twins(518);
  const auto& enc = tw.e;
  const Index n = 300, Hq = 2, Hk = 1, d = enc.dim(), dv = 8;
  const Packed<float> q(n, Hq, d, rng), k(n, Hk, d, rng), v(n, Hk, dv, rng);
  const std::vector<double> t = irregular(n, 10, rng);
  LinearAttentionOptions opt;
  opt.decay = {0.97, 1.0};
  opt.form = LinearForm::chunkwise;
  opt.chunk = n;
  const std::vector<float> want = linear_out(enc, q, t, k, t, v, opt);
  const std::vector<double> want_st = continued_out(enc, q, k, v, t, 120, opt, opt);
  const Index big[] = {n + 1, 100000, 100000000, Index(1) << 62,
                       std::numeric_limits<Index>::max()};
  for (Index c : big) {
    CAPTURE(c);
    LinearAttentionOptions o = opt;
    o.chunk = c;
    std::vector<float> got;
    REQUIRE_NOTHROW(got = linear_out(enc, q, t, k, t, v, o));
    CHECK(same_bits(got, want));
    std::vector<double> got_st;
    REQUIRE_NOTHROW(got_st = continued_out(enc, q, k, v, t, 120, o, o));
    CHECK(same_bits(got_st, want_st));
  }
  // RetNet's chunkwise normalisation (a pure rotation): one chunk of every key.
  const auto rot = peal::retnet_rotation<double>(16);
  const Packed<float> q16(n, 1, 16, rng), k16(n, 1, 16, rng);
  LinearAttentionOptions rn;
  rn.decay = {kRetNetGamma};
  rn.form = LinearForm::chunkwise;
  rn.normalization = peal::LinearNorm::retnet;
  rn.chunk = n;
  const std::vector<float> want_rn = linear_out(rot, q16, t, k16, t, v, rn);
  for (Index c : big) {
    CAPTURE(c);
    rn.chunk = c;
    std::vector<float> got;
    REQUIRE_NOTHROW(got = linear_out(rot, q16, t, k16, t, v, rn));
    CHECK(same_bits(got, want_rn));
  }
  // A negative chunk is refused (0 is the automatic size).
  for (Index c : {Index(-1), std::numeric_limits<Index>::min()}) {
    LinearAttentionOptions o = opt;
    o.chunk = c;
    CHECK_THROWS_WITH(linear_out(enc, q, t, k, t, v, o), Contains("chunk must be >= 0"));
  }
}

// Issue 19 item 6: `threads` above 2^29 overflowed a signed product of the tile driver (4 * nt)
// on the way from linear_attention. Any count is accepted and gives the bits of one thread; the
// count a run uses is what its work can use.
TEST_CASE("linear attention: any thread count up to INT_MAX gives the bits of one thread",
          "[linear][threads]") {
  std::mt19937_64 rng(519);
  const auto tw = mixed_twins(520);
  const auto& enc = tw.e;
  const Index n = 200, Hq = 4, Hk = 2, d = enc.dim(), dv = 8;
  const Packed<float> q(n, Hq, d, rng), k(n, Hk, d, rng), v(n, Hk, dv, rng);
  const std::vector<double> t = irregular(n, 10, rng);
  LinearAttentionOptions opt;
  opt.decay = {0.9, 0.95, 0.99, 1};
  opt.chunk = 32;
  const int counts[] = {std::numeric_limits<int>::max(), std::numeric_limits<int>::max() - 1,
                        (1 << 29) + 1, 1 << 30, 3};
  for (auto form : {LinearForm::automatic, LinearForm::parallel, LinearForm::chunkwise,
                    LinearForm::recurrent}) {
    CAPTURE(form_name(form));
    opt.form = form;
    opt.threads = 1;
    const std::vector<float> want = linear_out(enc, q, t, k, t, v, opt);
    const std::vector<double> want_st = continued_out(enc, q, k, v, t, 77, opt, opt);
    for (int c : counts) {
      CAPTURE(c);
      LinearAttentionOptions o = opt;
      o.threads = c;
      CHECK(same_bits(linear_out(enc, q, t, k, t, v, o), want));
      CHECK(same_bits(continued_out(enc, q, k, v, t, 77, o, o), want_st));
#ifdef _OPENMP
      // The count a run may start: at most kMaxThreads (1024), whatever is asked.
      using E = std::decay_t<decltype(enc)>;
      peal::detail::linear::StateData<float> st;
      peal::detail::linear::init_state(st, Hq, Hk, d, dv, o);
      std::vector<float> out(std::size_t(n * Hq * dv));
      const peal::detail::linear::LinearRun<float, E, const float, const float, const float, float>
          run(enc, q.view(), Positions(t), k.view(), Positions(t), v.view(),
              TensorView<float>(out.data(), n, Hq, dv), o, st, false);
      CHECK(run.threads() >= 1);
      CHECK(run.threads() <= std::min(c, peal::detail::linear::kMaxThreads));
#endif
    }
  }
}

namespace {

/// Every way of reading one query at tq against keys at tk (d = 2, dv = 2, one head): the three
/// forms, a state continued by each form with no keys, and LinearState's read, advance + read
/// and step (the last key taken at tq); each an output row [dv] with its name.
template <class C, class E>
std::vector<std::pair<std::string, std::vector<C>>> every_read(const E& enc,
                                                              const std::vector<double>& tk,
                                                              double tq,
                                                              const LinearAttentionOptions& base) {
  const Index nk = Index(tk.size());
  const std::vector<C> q = {1, 0.5}, kv = {1, 0.2, 1, -0.7, 0.5, 0.5},
                       vv = {1, 0.25, -1, 0.5, 2, 1};
  const std::vector<double> tqv = {tq}, empty;
  const TensorView<const C> Q(q.data(), 1, 1, 2), K(kv.data(), nk, 1, 2), V(vv.data(), nk, 1, 2);
  std::vector<std::pair<std::string, std::vector<C>>> r;
  auto row = [&](const std::string& name) -> C* {
    r.emplace_back(name, std::vector<C>(2, C(-7)));
    return r.back().second.data();
  };
  for (auto form : {LinearForm::parallel, LinearForm::chunkwise, LinearForm::recurrent}) {
    LinearAttentionOptions o = base;
    o.form = form;
    peal::linear_attention(enc, Q, Positions(tqv), K, Positions(tk), V,
                           TensorView<C>(row(form_name(form)), 1, 1, 2), o);
    LinearState<E, C> st(enc, 1, 1, 2, base);
    std::vector<C> none(std::size_t(2 * nk));
    peal::linear_attention(enc, TensorView<const C>(q.data(), 0, 1, 2), Positions(empty), K,
                           Positions(tk), V, TensorView<C>(none.data(), 0, 1, 2), o, st);
    peal::linear_attention(enc, Q, Positions(tqv), TensorView<const C>(kv.data(), 0, 1, 2),
                           Positions(empty), TensorView<const C>(vv.data(), 0, 1, 2),
                           TensorView<C>(row(std::string("state, ") + form_name(form)), 1, 1, 2),
                           o, st);
  }
  LinearState<E, C> st(enc, 1, 1, 2, base);
  for (Index j = 0; j < nk; ++j)
    st.update(TensorView<const C>(kv.data() + 2 * j, 1, 1, 2),
              TensorView<const C>(vv.data() + 2 * j, 1, 1, 2), tk[std::size_t(j)]);
  LinearState<E, C> stepped = st;
  st.read(Q, tq, TensorView<C>(row("read"), 1, 1, 2));
  const auto M = st.matrix(0);
  st.advance(tq);
  st.read(Q, tq, TensorView<C>(row("advance + read"), 1, 1, 2));
  const auto M1 = st.matrix(0);
  C* m = row("matrix after advance");
  m[0] = C(M1(0, 0) + M1(1, 0)), m[1] = C(M1(0, 1) + M1(1, 1));
  // step() takes a key at tq: the last key is given again, at tq.
  stepped.step(TensorView<const C>(kv.data() + 2 * (nk - 1), 1, 1, 2),
               TensorView<const C>(vv.data() + 2 * (nk - 1), 1, 1, 2), Q, tq,
               TensorView<C>(row("step"), 1, 1, 2));
  (void)M;
  return r;
}

template <class C>
void check_growth() {
  using RB = peal::RotationBlock<double>;
  using RBL = peal::RotationBlock<long double>;
  const peal::Bank<RB> enc({RB(0.3, 0.5)});
  const peal::Bank<RBL> el({RBL(0.3L, 0.5L)});
  const double far = 1e4;                                  // e^{5000}: past every range
  const double near = std::is_same<C, float>::value ? 100 : 1000;  // e^{50}, e^{500}: within
  LinearAttentionOptions none, decayed;
  decayed.decay = {0.1};  // net rate 0.5 + ln 0.1 < 0, but A(tau) itself is past the range
  for (const auto& tk : {std::vector<double>{0}, std::vector<double>{0, 0.5}}) {
    CAPTURE(tk.size());
    for (const LinearAttentionOptions* o : {&none, &decayed})
      for (const auto& [name, out] : every_read<C>(enc, tk, far, *o)) {
        CAPTURE(name, o->decay.size(), double(out[0]), double(out[1]));
        CHECK_FALSE(std::isfinite(out[0]));
        CHECK_FALSE(std::isfinite(out[1]));
      }
    // Within the range: finite, and the value (the step adds the last key again, at tq).
    const std::vector<LD> q = {1, 0.5}, kv = {1, 0.2, 1, -0.7}, vv = {1, 0.25, -1, 0.5};
    for (const auto& [name, out] : every_read<C>(enc, tk, near, none)) {
      if (name == "matrix after advance") continue;
      LD want[2] = {0, 0}, size = 0;
      const Index nk = Index(tk.size());
      for (Index j = 0; j < nk + (name == "step"); ++j) {
        const Index jj = std::min(j, nk - 1);
        const double s = j < nk ? tk[std::size_t(j)] : near;
        const Eigen::Matrix<LD, 2, 1> qv(q[0], q[1]),
            kj(kv[std::size_t(2 * jj)], kv[std::size_t(2 * jj + 1)]);
        const LD sc = el.score(qv, near, kj, s) / std::sqrt(LD(2));
        for (int e = 0; e < 2; ++e) want[e] += sc * vv[std::size_t(2 * jj + e)];
        size += std::abs(sc);
      }
      CAPTURE(name, double(out[0]), double(want[0]), double(out[1]), double(want[1]));
      for (int e = 0; e < 2; ++e) {
        REQUIRE(std::isfinite(out[std::size_t(e)]));
        CHECK(std::abs(LD(out[std::size_t(e)]) - want[e]) <= 64 * Tol<C>::eps * (1 + near) * size);
      }
    }
  }
}

}  // namespace

// Issue 19 item 9: growth past the range (Bank{RotationBlock(0.3, a = 0.5)}, a key at 0, the
// query at 1e4) gave -inf in the parallel and chunkwise forms, NaN in the recurrent one, and a
// finite number from a double state's advance. The promise (docs/linear-attention.md §3): where
// A(tau) is past the range of the arithmetic type (whatever the decay option), every form and
// the state give a non-finite output (inf or NaN: two overflowing terms give NaN); within it,
// the value.
TEST_CASE("linear attention: growth past the range is non-finite in every form and the state",
          "[linear][growth]") {
  SECTION("float") { check_growth<float>(); }
  SECTION("double") { check_growth<double>(); }
}
