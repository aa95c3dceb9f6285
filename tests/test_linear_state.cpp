// peal::LinearState (include/peal/linear_state.hpp) with peal::linear_attention, against the
// naive long double sum of tests/linear_suite.hpp (bound Tol<C>::linear_out): prefill then
// per-token decode (step, update + read) and two chained calls against one call; a double
// state on double storage; read() between updates and advance(). Its guards (refused
// overlapping views and absurd sizes, a state continues only with its own encoding) and
// concurrent const reads: tests/test_linear_state_guards.cpp. The kernels without a state (and
// the state's bad inputs among every bad input, growth past the range in the state):
// tests/test_linear_attention.cpp. Shared helpers: tests/linear_attention_check.hpp.
#include "linear_attention_check.hpp"

namespace {

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

}  // namespace

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
