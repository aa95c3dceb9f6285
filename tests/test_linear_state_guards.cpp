// peal::LinearState (include/peal/linear_state.hpp), its guards and its threads: refused
// overlapping views and absurd sizes; a state continues only with its own encoding (issue 19
// item 8); concurrent const reads of one state, bitwise against one thread. Its results against
// the reference (prefill then decode, chained calls, a double state, read() and advance()):
// tests/test_linear_state.cpp, split from this one for compile time (docs/build-cost.md).
#include "linear_attention_check.hpp"

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

namespace {

/// A user encoding peal has no coder for (the per-row fallback): X = [[a, w], [-w, a]].
class UserRotation : public peal::Encoding<UserRotation, double> {
 public:
  using MatrixType = Eigen::Matrix<double, 2, 2>;
  UserRotation(double a, double w) : a_(a), w_(w) {}
  static constexpr int dim() { return 2; }
  MatrixType generator() const {
    MatrixType x;
    x << a_, w_, -w_, a_;
    return x;
  }
  MatrixType A(double tau) const {
    const double g = std::exp(a_ * tau), c = std::cos(w_ * tau), s = std::sin(w_ * tau);
    MatrixType m;
    m << g * c, g * s, -g * s, g * c;
    return m;
  }
  template <class V>
  void apply(V&& v, double tau, bool transpose) const {
    const double g = std::exp(a_ * tau), c = g * std::cos(w_ * tau), s = g * std::sin(w_ * tau);
    const double x0 = double(v(0)), x1 = double(v(1)), t = transpose ? -s : s;
    using T = std::decay_t<decltype(v(0))>;
    v(0) = T(c * x0 + t * x1);
    v(1) = T(c * x1 - t * x0);
  }

 private:
  double a_, w_;
};

/// Prefill a state of `made` (2 query heads, 1 key head, dv 3) over 6 tokens and one step(),
/// then continue it with `other` over 3 more: the message of the refusal ("" when accepted).
/// A refused call leaves the state as it was: the same matrix, and the next step gives the
/// bits of a state that never saw the call (step() holds a rotation's state in the absolute
/// frame, which a refused call must not convert).
template <class E>
std::string continue_with(const E& made, const E& other) {
  std::mt19937_64 rng(521);
  const Index d = made.dim();
  const Packed<float> q(11, 2, d, rng), k(11, 1, d, rng), v(11, 1, 3, rng);
  const std::vector<double> t0 = regular(6, 0), t1 = regular(3, 7);
  LinearState<E, float> st(made, 2, 1, 3);
  Out<float> o(11, 2, 3), o2(11, 2, 3);
  peal::linear_attention(made, q.view(0, 6), Positions(t0), k.view(0, 6), Positions(t0),
                         v.view(0, 6), o.view(0, 6), LinearAttentionOptions{}, st);
  st.step(k.view(6, 1), v.view(6, 1), q.view(6, 1), 6.0, o.view(6, 1));
  LinearState<E, float> twin = st;
  const auto M = st.matrix(0);
  try {
    peal::linear_attention(other, q.view(7, 3), Positions(t1), k.view(7, 3), Positions(t1),
                           v.view(7, 3), o.view(7, 3), LinearAttentionOptions{}, st);
  } catch (const peal::invalid_argument& e) {
    CHECK(st.time() == 6.0);
    CHECK((st.matrix(0).array() == M.array()).all());
    st.step(k.view(10, 1), v.view(10, 1), q.view(10, 1), 10.0, o.view(10, 1));
    twin.step(k.view(10, 1), v.view(10, 1), q.view(10, 1), 10.0, o2.view(10, 1));
    for (Index e = 0; e < 2 * 3; ++e)
      CHECK(o.x[std::size_t(10 * 6 + e)] == o2.x[std::size_t(10 * 6 + e)]);
    return e.what();
  }
  return "";
}

}  // namespace

// Issue 19 item 8: a state continued with another encoding than its own (RoPE theta 1e4
// continued with 5e5 was accepted, rows off by 2.13) is refused: the encoding's parameters
// (every table parameter, the layout, the basis of a BasisChange) must be the state's exactly.
TEST_CASE("linear attention: a state continues only with its own encoding",
          "[linear][errors][encoding]") {
  using peal::RotationBlock;
  using RB = RotationBlock<double>;
  const auto rope = [](double theta, Layout layout) {
    peal::RopeConfig c = rope_config(16, layout);
    c.rope_theta = theta;
    return peal::rope<double>(c);
  };
  const auto r4 = rope(1e4, Layout::HalfSplit);
  CHECK(continue_with(r4, r4).empty());
  CHECK(continue_with(r4, rope(1e4, Layout::HalfSplit)).empty());  // equal, built twice
  CHECK_THAT(continue_with(r4, rope(5e5, Layout::HalfSplit)), Contains("another encoding"));
  CHECK_THAT(continue_with(r4, rope(1e4, Layout::Interleaved)), Contains("another encoding"));
  // A frequency differing only in its low part, a growth rate, the number of blocks.
  using Bank = peal::Bank<RB>;
  const Bank b({RB(0.3), RB(0.7, -0.01)});
  const Bank lo = Bank::from_params(
      (Bank::ParamArray(2, 3) << 0.3, 0x1p-60, 0, 0.7, 0, -0.01).finished());
  CHECK(continue_with(b, Bank({RB(0.3), RB(0.7, -0.01)})).empty());
  CHECK_THAT(continue_with(b, lo), Contains("another encoding"));
  CHECK_THAT(continue_with(b, Bank({RB(0.3), RB(0.7, -0.02)})), Contains("another encoding"));
  CHECK_THAT(continue_with(b, Bank({RB(0.3), RB(0.7, -0.01), RB(1.1)})), Contains("dim"));
  // A basis P against 2P: the same generator P X P^-1 bit for bit, but the state's sums are in
  // the coordinates P^-1 k.
  peal::Matrix<double> P(4, 4);
  P << 1, 0.2, 0, 0, 0, 1, 0.1, 0, 0.3, 0, 1, 0, 0, 0, 0.25, 1;
  const auto bc = peal::change_basis(b, P);
  const auto bc2 = peal::change_basis(b, peal::Matrix<double>(2 * P));
  REQUIRE((bc.generator().array() == bc2.generator().array()).all());
  CHECK(continue_with(bc, peal::change_basis(b, P)).empty());
  CHECK_THAT(continue_with(bc, bc2), Contains("another encoding"));
  // A part of a composition.
  const auto cb = peal::compose(b, peal::RealBlock<double>(-0.5));
  CHECK(continue_with(cb, peal::compose(b, peal::RealBlock<double>(-0.5))).empty());
  CHECK_THAT(continue_with(cb, peal::compose(b, peal::RealBlock<double>(-0.25))),
             Contains("another encoding"));
  // An encoding peal has no coder for: compared through its generator.
  CHECK(continue_with(UserRotation(-0.1, 0.5), UserRotation(-0.1, 0.5)).empty());
  CHECK_THAT(continue_with(UserRotation(-0.1, 0.5), UserRotation(-0.1, 0.6)),
             Contains("another encoding"));
}

// LinearState's const members (read, matrix, the accessors) change nothing and may run on one
// state from several threads at once (docs/linear-attention.md §1): the same bits as one thread,
// in the relative frame and in the absolute frame step() leaves a rotation's state in.
TEST_CASE("linear attention: concurrent reads of one LinearState", "[linear][threads]") {
  std::mt19937_64 rng(522);
  const auto enc = peal::retnet_rotation<double>(16);
  using E = std::decay_t<decltype(enc)>;
  const Index n = 40, Hq = 2, Hk = 1, d = 16, dv = 8, reads = 64;
  const Packed<float> q(n, Hq, d, rng), k(n, Hk, d, rng), v(n, Hk, dv, rng);
  const std::vector<double> t = irregular(n, 3, rng);
  LinearAttentionOptions opt;
  opt.decay = {kRetNetGamma, 0.9};
  for (int frame = 0; frame < 2; ++frame) {
    CAPTURE(frame);
    LinearState<E, float> st(enc, Hq, Hk, dv, opt);
    Out<float> o(n, Hq, dv);
    const std::vector<double> t0(t.begin(), t.end() - 1);
    peal::linear_attention(enc, q.view(0, n - 1), Positions(t0), k.view(0, n - 1),
                           Positions(t0), v.view(0, n - 1), o.view(0, n - 1), opt, st);
    if (frame == 1)  // step() holds a rotation's state in the absolute frame
      st.step(k.view(n - 1, 1), v.view(n - 1, 1), q.view(n - 1, 1), t.back(), o.view(n - 1, 1));
    const LinearState<E, float>& cst = st;
    std::vector<float> serial(std::size_t(reads * Hq * dv)), shared(serial.size());
    std::vector<double> mserial(std::size_t(reads * d * dv)), mshared(mserial.size());
    auto one = [&](Index r, std::vector<float>& out, std::vector<double>& mat) {
      // A live allocation of a varying size moves where read()'s own buffers land: the bits
      // must not depend on it (they did with 16-byte aligned buffers: Eigen's scalar peel).
      // (No Catch assertion here: this runs inside the parallel loop, and Catch is not
      // thread-safe; a volatile read keeps the allocation from being elided.)
      const std::vector<char> shift(std::size_t(1 + 16 * (r % 4)), char(r));
      static_cast<void>(*static_cast<const volatile char*>(shift.data()));
      cst.read(q.view(r % n, 1), t.back() + 0.25 * double(r),
               TensorView<float>(out.data() + r * Hq * dv, 1, Hq, dv));
      const auto M = cst.matrix(r % cst.heads());
      std::copy(M.data(), M.data() + M.size(), mat.begin() + r * d * dv);
    };
    for (Index r = 0; r < reads; ++r) one(r, serial, mserial);
    std::exception_ptr err;
#ifdef _OPENMP
#pragma omp parallel for num_threads(4) schedule(dynamic, 1)
#endif
    for (Index r = 0; r < reads; ++r) {
      try {
        one(r, shared, mshared);
      } catch (...) {
#ifdef _OPENMP
#pragma omp critical(linear_state_reads)
#endif
        err = std::current_exception();
      }
    }
    if (err) std::rethrow_exception(err);
    CHECK(same_bits(serial, shared));
    CHECK(same_bits(mserial, mshared));
  }
}
