// peal::linear_attention and peal::LinearState (include/peal/linear_attention.hpp,
// include/peal/linear_state.hpp) against the naive long double double sum of
// tests/linear_suite.hpp, with the bound Tol<C>::linear_out (tests/tolerances.hpp):
//   every storage type (float, double, Eigen::half, Eigen::bfloat16 inputs, float and double
//   outputs) in padded and head-major views; prefill then per-token decode (step, update + read)
//   and two chained calls against one call; read() between updates and advance(); RetNet
//   (gamma = 1 - 2^-5) over 65,536 tokens in float against double; decays so strong that the
//   naive chunk factors overflow float; ties and queries at other times than the keys; the
//   thread count (bitwise); every bad input with its message; and tests that must fail (a
//   reference without the decay, with a decay or a scale slightly off).
// The encoding families: tests/test_linear_families.cpp.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "linear_suite.hpp"

namespace {

using namespace peal_test;
using namespace peal_test::linear;
using Catch::Matchers::Contains;
using peal::Layout;
using peal::LinearState;

constexpr double kRetNetGamma = 1 - 0x1p-5;

peal::RopeConfig rope_config(int head_dim, Layout layout) {
  peal::RopeConfig c;
  c.head_dim = head_dim;
  c.layout = layout;
  return c;
}

/// Packed random values in (-1, 1) rounded to T (and the same values as long double).
template <class T>
struct Packed {
  Index n, H, dim;
  std::vector<T> x;
  Packed(Index n_, Index H_, Index dim_, std::mt19937_64& rng) : n(n_), H(H_), dim(dim_) {
    std::uniform_real_distribution<double> u(-1, 1);
    for (Index i = 0; i < n * H * dim; ++i) x.push_back(peal::detail::from_arith<T>(u(rng)));
  }
  TensorView<const T> view(Index from = 0, Index count = -1) const {
    if (count < 0) count = n - from;
    return TensorView<const T>(x.data() + from * H * dim, count, H, dim);
  }
  std::vector<LD> values() const {
    std::vector<LD> v;
    for (const T& e : x) v.push_back(LD(peal::detail::to_arith<double>(e)));
    return v;
  }
};

/// An output buffer [n, H, dv] of T, NaN-filled.
template <class T>
struct Out {
  Index n, H, dv;
  std::vector<T> x;
  Out(Index n_, Index H_, Index dv_)
      : n(n_), H(H_), dv(dv_), x(std::size_t(n_ * H_ * dv_), T(std::nanf(""))) {}
  TensorView<T> view(Index from = 0, Index count = -1) {
    if (count < 0) count = n - from;
    return TensorView<T>(x.data() + from * H * dv, count, H, dv);
  }
  LD at(Index i, Index h, Index e) const {
    return LD(peal::detail::to_arith<double>(x[std::size_t((i * H + h) * dv + e)]));
  }
};

/// Compares an Out with the reference on rows [from, to) under the larger of the chunkwise
/// bound (chunk) and the recurrent one (chunk 1): a prefill by chunks then token steps.
template <class T>
Check compare_rows(const Reference& r, const Out<T>& out, Index from, Index to, Index d,
                   Index chunk, LD lag_rate, LD spread_w, bool dbl, const std::string& what) {
  Check ck;
  const LD eps_out = Tol<float>::storage_eps<T>();
  for (Index i = from; i < to; ++i)
    for (Index h = 0; h < r.Hq; ++h)
      for (Index e = 0; e < r.dv; ++e) {
        const LD want = r.at(r.out, i, h, e), got = out.at(i, h, e);
        LD tol = 0;
        for (Index c : {chunk, Index(1)}) {
          const Bound b = Bound::of<float>(eps_out, 0, d, c, 1, lag_rate, spread_w);
          tol = std::max(tol, b(want, r.at(r.S, i, h, e), r.at(r.T, i, h, e), r.at(r.L, i, h, e), dbl));
        }
        ++ck.checked;
        if (tol > 0) ck.worst = std::max(ck.worst, std::abs(got - want) / tol);
        if (!(std::abs(got - want) <= tol)) {
          std::ostringstream os;
          os << what << ": out[" << i << "," << h << "," << e << "] = " << double(got) << ", want "
             << double(want) << ", tol " << double(tol);
          ck.add(os.str());
        }
      }
  return ck;
}

template <class X>
bool same_bits(const std::vector<X>& a, const std::vector<X>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(X)) == 0;
}

/// The mixed composition of families.hpp without growth, and its long double twin.
auto mixed_twins(std::uint64_t seed) {
  auto tw = twins_without_growth<MixedFam>(seed, Regime::Random);
  REQUIRE(tw.found);
  return tw;
}

}  // namespace

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

TEST_CASE("linear attention: prefill then decode, and chained calls, equal one call", "[linear]") {
  std::mt19937_64 rng(506);
  const auto tw = mixed_twins(507);
  const auto& enc = tw.e;
  const OracleOf<std::decay_t<decltype(tw.el)>> o(tw.el);
  const Index n = 100, prefix = 60, Hq = 2, Hk = 1, d = enc.dim(), dv = 6;
  const std::vector<double> t = irregular(n, 1.7e9, rng);
  const Packed<float> q(n, Hq, d, rng), k(n, Hk, d, rng), v(n, Hk, dv, rng);
  LinearAttentionOptions opt;
  opt.decay = {0.97, 1.0};
  opt.form = LinearForm::chunkwise;
  opt.chunk = 16;
  const LD scale = 1 / std::sqrt(LD(d));
  const Inputs in{n, n, Hq, Hk, d, dv, t, t, q.values(), k.values(), v.values()};
  const Reference ref = reference(o, in, opt.decay, scale);
  const LD lag_rate = o.rate + std::abs(std::log(LD(0.97))) + o.xnorm;
  const LD w = spread(t, 16);
  const Positions pt(t);
  Out<float> one(n, Hq, dv);
  peal::linear_attention(enc, q.view(), pt, k.view(), pt, v.view(), one.view(), opt);
  Check c1 = compare_rows(ref, one, 0, n, d, 16, lag_rate, w, false, "one call");
  INFO(c1.first);
  CHECK(c1.bad == 0);
  for (int mode = 0; mode < 3; ++mode) {  // decode by step(); by update() + read(); chained calls
    CAPTURE(mode);
    LinearState<std::decay_t<decltype(enc)>, float> st(enc, Hq, Hk, dv, opt);
    CHECK(st.empty());
    CHECK(std::isnan(st.time()));
    CHECK(st.dim() == d);
    CHECK(st.value_dim() == dv);
    CHECK(st.query_heads() == Hq);
    CHECK(st.key_heads() == Hk);
    Out<float> got(n, Hq, dv);
    const Index split = mode == 2 ? 37 : prefix;
    const std::vector<double> t0(t.begin(), t.begin() + split), t1(t.begin() + split, t.end());
    peal::linear_attention(enc, q.view(0, split), Positions(t0), k.view(0, split), Positions(t0),
                           v.view(0, split), got.view(0, split), opt, st);
    CHECK_FALSE(st.empty());
    CHECK(st.time() == t[std::size_t(split - 1)]);
    if (mode == 2) {
      peal::linear_attention(enc, q.view(split), Positions(t1), k.view(split), Positions(t1),
                             v.view(split), got.view(split), opt, st);
    } else {
      for (Index i = split; i < n; ++i) {
        const double s = t[std::size_t(i)];
        if (mode == 0) {
          st.step(k.view(i, 1), v.view(i, 1), q.view(i, 1), s, got.view(i, 1));
        } else {
          st.update(k.view(i, 1), v.view(i, 1), s);
          st.read(q.view(i, 1), s, got.view(i, 1));
        }
        CHECK(st.time() == s);
      }
    }
    CHECK(st.time() == t.back());
    const Check ck = compare_rows(ref, got, 0, n, d, 16, lag_rate, w, false, "prefill + decode");
    INFO(ck.first);
    CHECK(ck.bad == 0);
    // Against the one call: both within their bound of the reference.
    LD m = 0;
    for (std::size_t e = 0; e < got.x.size(); ++e)
      m = std::max(m, LD(std::abs(got.x[e] - one.x[e])));
    CHECK(std::isfinite(double(m)));
  }
}

TEST_CASE("linear attention: a double state (LinearState<E, double>) on double storage", "[linear]") {
  std::mt19937_64 rng(508);
  const auto enc = peal::retnet_rotation<double>(16);
  const auto el = peal::retnet_rotation<long double>(16);
  const OracleOf<std::decay_t<decltype(el)>> o(el);
  const Index n = 50, Hq = 2, Hk = 2, d = 16, dv = 16;
  const std::vector<double> t = regular(n, 100);
  const Packed<double> q(n, Hq, d, rng), k(n, Hk, d, rng), v(n, Hk, dv, rng);
  LinearAttentionOptions opt;
  opt.decay = {kRetNetGamma, 0.75};
  opt.scale = 0.3;
  const Reference ref = reference(o, Inputs{n, n, Hq, Hk, d, dv, t, t, q.values(), k.values(), v.values()},
                                  opt.decay, 0.3L);
  LinearState<std::decay_t<decltype(enc)>, double> st(enc, Hq, Hk, dv, opt);
  Out<double> got(n, Hq, dv);
  const std::vector<double> t0(t.begin(), t.begin() + 20);
  peal::linear_attention(enc, q.view(0, 20), Positions(t0), k.view(0, 20), Positions(t0),
                         v.view(0, 20), got.view(0, 20), opt, st);
  for (Index i = 20; i < n; ++i)
    st.step(k.view(i, 1), v.view(i, 1), q.view(i, 1), t[std::size_t(i)], got.view(i, 1));
  const LD lag = std::abs(std::log(LD(0.75)));
  const Check ck = compare_rows(ref, got, 0, n, d, 64, lag, 0, true, "double state");
  INFO(ck.first);
  CHECK(ck.bad == 0);
}

TEST_CASE("linear attention: read() between updates, advance()", "[linear]") {
  std::mt19937_64 rng(509);
  const auto tw = mixed_twins(510);
  const auto& enc = tw.e;
  const OracleOf<std::decay_t<decltype(tw.el)>> o(tw.el);
  const Index Hq = 2, Hk = 1, d = enc.dim(), dv = 4;
  // Keys at 0, 1.5, 4 (and a tie at 4); queries between them.
  const std::vector<double> tk = {0, 1.5, 4, 4}, tq = {0.7, 2.2, 3.9, 4, 9.25};
  const Packed<float> q(5, Hq, d, rng), k(4, Hk, d, rng), v(4, Hk, dv, rng);
  LinearAttentionOptions opt;
  opt.decay = {0.8, 1.0};
  const Reference ref = reference(
      o, Inputs{5, 4, Hq, Hk, d, dv, tq, tk, q.values(), k.values(), v.values()}, opt.decay,
      1 / std::sqrt(LD(d)));
  const LD lag_rate = o.rate + std::abs(std::log(LD(0.8))) + o.xnorm;
  LinearState<std::decay_t<decltype(enc)>, float> st(enc, Hq, Hk, dv, opt);
  Out<float> got(5, Hq, dv), again(5, Hq, dv);
  st.read(q.view(0, 1), -2.0, got.view(0, 1));  // before any key: zeros
  for (Index e = 0; e < Hq * dv; ++e) CHECK(got.x[std::size_t(e)] == 0.0f);
  CHECK(st.empty());
  {  // advance() on an empty state only sets its time; keys before it are then rejected
    LinearState<std::decay_t<decltype(enc)>, float> s0(enc, Hq, Hk, dv, opt);
    s0.advance(-1.0);
    CHECK(s0.time() == -1.0);
    CHECK(s0.empty());
    CHECK_THROWS_AS(s0.update(k.view(0, 1), v.view(0, 1), -1.5), peal::invalid_argument);
  }
  st.update(k.view(0, 1), v.view(0, 1), 0.0);
  CHECK(st.time() == 0.0);
  st.read(q.view(0, 1), 0.7, got.view(0, 1));
  st.read(q.view(0, 1), 0.7, again.view(0, 1));  // read() leaves the state unchanged
  CHECK(st.time() == 0.0);
  st.update(k.view(1, 1), v.view(1, 1), 1.5);
  st.read(q.view(1, 1), 2.2, got.view(1, 1));
  st.advance(3.0);  // M <- gamma^1.5 A(1.5) M: reads after it see the same sum
  CHECK(st.time() == 3.0);
  st.read(q.view(2, 1), 3.9, got.view(2, 1));
  st.update(k.view(2, 1), v.view(2, 1), 4.0);
  st.update(k.view(3, 1), v.view(3, 1), 4.0);  // a tie: s == time() is allowed
  st.read(q.view(3, 1), 4.0, got.view(3, 1));  // keys at s == t are visible
  st.advance(9.0);
  st.advance(9.0);  // advancing to the current time changes nothing
  st.read(q.view(4, 1), 9.25, got.view(4, 1));
  CHECK(st.time() == 9.0);
  const Check ck = compare_rows(ref, got, 0, 5, d, 1, lag_rate, 6, false, "read/advance");
  INFO(ck.first);
  CHECK(ck.bad == 0);
  for (Index e = 0; e < Hq * dv; ++e) CHECK(got.x[std::size_t(e)] == again.x[std::size_t(e)]);
  // The state goes only forward.
  CHECK_THROWS_AS(st.update(k.view(0, 1), v.view(0, 1), 8.0), peal::invalid_argument);
  CHECK_THROWS_AS(st.read(q.view(0, 1), 8.5, got.view(0, 1)), peal::invalid_argument);
  CHECK_THROWS_AS(st.advance(8.0), peal::invalid_argument);
  CHECK_THROWS_AS(st.advance(std::nan("")), peal::invalid_argument);
  CHECK_THROWS_AS(st.update(k.view(0, 1), v.view(0, 1), HUGE_VAL), peal::invalid_argument);
  CHECK(st.time() == 9.0);
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

// LinearState's per-token calls read q (k, v) head by head while writing out head by head: an
// out sharing memory with them would read outputs as inputs. And a state of absurd size
// (heads x dv x d past the index range) must be refused, not allocated or wrapped.
TEST_CASE("linear attention: LinearState refuses overlapping views and absurd sizes",
          "[linear][errors]") {
  const auto enc = peal::rope<double>(rope_config(8, Layout::Interleaved));
  peal::LinearAttentionOptions opt;
  LinearState<std::decay_t<decltype(enc)>, float> st(enc, 2, 2, 8, opt);
  std::vector<float> buf(64, 0.5f);
  const TensorView<const float> k(buf.data(), 1, 2, 8), v(buf.data() + 16, 1, 2, 8);
  const TensorView<float> out(buf.data() + 32, 1, 2, 8);
  const TensorView<const float> q_ok(buf.data() + 48, 1, 2, 8);
  st.update(k, v, 0.0);
  // out over the queries, the keys, the values.
  const TensorView<const float> q_alias(buf.data() + 32, 1, 2, 8);
  CHECK_THROWS_WITH(st.read(q_alias, 1.0, out), Contains("overlaps"));
  CHECK_THROWS_WITH(st.step(k, v, q_alias, 1.0, out), Contains("overlaps"));
  const TensorView<float> out_on_k(buf.data(), 1, 2, 8);
  CHECK_THROWS_WITH(st.step(k, v, q_ok, 1.0, out_on_k), Contains("overlaps"));
  const TensorView<float> out_on_v(buf.data() + 16, 1, 2, 8);
  CHECK_THROWS_WITH(st.step(k, v, q_ok, 1.0, out_on_v), Contains("overlaps"));
  CHECK_NOTHROW(st.step(k, v, q_ok, 1.0, out));
  // heads x dv x d = 2 x 2^61 x 8 > 2^63.
  const peal::Index huge = peal::Index(1) << 61;
  CHECK_THROWS_AS((LinearState<std::decay_t<decltype(enc)>, float>(enc, 2, 2, huge, opt)),
                  peal::invalid_argument);
}
