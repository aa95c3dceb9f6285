// MultiAxis<E> (include/peal/multi_axis.hpp): the vector group law suite in D = 2 and 3.
// For each family (rotation banks with per-axis omega and a, real banks, Jordan chains,
// rotation-Jordan chains, a composition with pass-through, a bank of a block type peal does
// not know: tests/toy_block.hpp), on random parameters and points
// including large and negative coordinates, in float, double and long double:
//   A(p) against Eigen's expm(sum_a p_a X_a) in long double;  A(p)A(p') = A(p + p');
//   A(p)A(-p) = I;  F(p)^T G(p') = A(p - p');  X_a X_b = X_b X_a;
//   translation invariance of the encoded score along each axis and random directions;
//   the batch kernels over PositionsND (token-major, axis-major, strided, constant shift)
//   against the per-token encode_query / encode_key.
// Tolerances (tests/tolerances.hpp): entry(n) per product, phase(x) and expm(x) with
// x = sum_a |p_a| |X_a| (the phase of the lag in real_t<S>, Eigen's expm error).
#include <catch2/catch.hpp>
#include <cmath>
#include <peal/peal.hpp>
#include <random>
#include <unsupported/Eigen/MatrixFunctions>
#include <vector>

#include "tolerances.hpp"
#include "toy_block.hpp"

namespace {

using peal_test::Tol;
using LMatrix = peal::Matrix<long double>;
using LD = long double;

template <class M>
LMatrix to_long(const M& m) {
  return m.template cast<long double>();
}

struct RotFamily {  // rotation bank, per-axis omega and a (a: growth/decay)
  static constexpr const char* name = "rotation bank";
  template <class S>
  static peal::Bank<peal::RotationBlock<S>> axis(std::mt19937_64& g, bool pure) {
    std::uniform_real_distribution<double> w(-1.5, 1.5), a(-0.02, 0.02);
    std::vector<peal::RotationBlock<S>> b;
    for (int i = 0; i < 3; ++i) b.emplace_back((long double)w(g), pure ? 0.0 : a(g));
    return peal::Bank<peal::RotationBlock<S>>(b, peal::Layout::HalfSplit);
  }
};
struct RealFamily {
  static constexpr const char* name = "real bank";
  template <class S>
  static peal::Bank<peal::RealBlock<S>> axis(std::mt19937_64& g, bool) {
    std::uniform_real_distribution<double> l(-0.03, 0.03);
    std::vector<peal::RealBlock<S>> b;
    for (int i = 0; i < 3; ++i) b.emplace_back(l(g));
    return peal::Bank<peal::RealBlock<S>>(b);
  }
};
struct JordanFamily {  // X_a = lambda_a I + N on each chain
  static constexpr const char* name = "Jordan<3> bank";
  template <class S>
  static peal::Bank<peal::JordanBlock<3, S>> axis(std::mt19937_64& g, bool) {
    std::uniform_real_distribution<double> l(-0.02, 0.02);
    std::vector<peal::JordanBlock<3, S>> b;
    for (int i = 0; i < 2; ++i) b.emplace_back(l(g));
    return peal::Bank<peal::JordanBlock<3, S>>(b);
  }
};
struct RotJordanFamily {
  static constexpr const char* name = "rotation-Jordan<2> bank";
  template <class S>
  static peal::Bank<peal::RotationJordanBlock<2, S>> axis(std::mt19937_64& g, bool) {
    std::uniform_real_distribution<double> w(-1, 1), a(-0.02, 0.02);
    std::vector<peal::RotationJordanBlock<2, S>> b;
    for (int i = 0; i < 2; ++i) b.emplace_back((long double)w(g), a(g));
    return peal::Bank<peal::RotationJordanBlock<2, S>>(b);
  }
};
struct ComposedFamily {  // M-RoPE's shape: rotation bank + pass-through
  static constexpr const char* name = "rotation bank + pass-through";
  template <class S>
  static auto axis(std::mt19937_64& g, bool pure) {
    return peal::compose(RotFamily::axis<S>(g, pure), peal::PassThrough<S>(2));
  }
};

struct ToyFamily {  // a user's block (traits only), per-axis a and w
  static constexpr const char* name = "toy bank";
  template <class S>
  static auto axis(std::mt19937_64& g, bool pure) {
    std::uniform_real_distribution<double> w(-1.5, 1.5), a(-0.02, 0.02);
    std::vector<toy::ScaledRotation<S>> b;
    for (int i = 0; i < 3; ++i) {
      const double wi = w(g);
      b.emplace_back(peal::real_t<S>(pure ? 0.0 : a(g)), peal::real_t<S>(wi));
    }
    return peal::compose(peal::Bank<toy::ScaledRotation<S>>(b, peal::Layout::HalfSplit),
                         peal::PassThrough<S>(1));
  }
};

template <class Fam, class S>
auto build(int D, unsigned seed, bool pure) {
  std::mt19937_64 g(seed);
  using Axis = decltype(Fam::template axis<S>(g, pure));
  std::vector<Axis> axes;
  for (int a = 0; a < D; ++a) axes.push_back(Fam::template axis<S>(g, pure));
  return peal::MultiAxis<Axis>(axes);
}

template <class Fam, class S>
void run_suite(int D) {
  using T = Tol<S>;
  using Real = peal::real_t<S>;
  using Point = Eigen::Matrix<Real, Eigen::Dynamic, 1>;
  for (int trial = 0; trial < 4; ++trial) {
    const unsigned seed = 100u * unsigned(D) + unsigned(trial);
    const auto e = build<Fam, S>(D, seed, false);
    const auto el = build<Fam, long double>(D, seed, false);  // same parameters
    const int n = e.dim();
    std::mt19937_64 g(seed + 7);
    std::uniform_real_distribution<double> u(-40, 40);
    Point p(D), p2(D);
    for (int a = 0; a < D; ++a) p(a) = Real(u(g)), p2(a) = Real(u(g));
    if (trial == 3) p(0) = Real(-123.25), p2(D - 1) = Real(97.5);
    CAPTURE(Fam::name, D, trial);
    std::vector<LMatrix> X;
    LD xn = 0;
    for (int a = 0; a < D; ++a) {
      X.push_back(to_long(el.generator(a)));
      xn = std::max(xn, X.back().norm());
    }
    const auto reach = [&](const Point& x) {
      LD r = 0;
      for (int a = 0; a < D; ++a) r += std::abs((LD)x(a));
      return r * xn;
    };
    const auto A = [&](const Point& x) { return to_long(e.A(x)); };

    // The axis generators commute (exactly for these structures).
    for (int a = 0; a < D; ++a)
      for (int b = a + 1; b < D; ++b)
        CHECK(double((X[a] * X[b] - X[b] * X[a]).norm()) <= double(T::entry(n) * xn * xn));

    // Closed form against expm(sum_a p_a X_a), in long double.
    {
      LMatrix Xp = LMatrix::Zero(n, n);
      for (int a = 0; a < D; ++a) Xp += (LD)p(a) * X[a];
      const LMatrix ref = Xp.exp();
      const LD x = reach(p);
      const LD tol = (D * T::entry(n) + T::phase(x) + T::expm(x)) * ref.norm() * D;
      CHECK(double((A(p) - ref).norm()) <= double(tol));
      CHECK(double((to_long(e.generator_at(p)) - Xp).norm()) <= double(T::entry(n) * Xp.norm()));
    }
    // Group law, inverse, F^T G.
    {
      const Point sum = p + p2, diff = p - p2;
      const LD scale = A(p).norm() * A(p2).norm();
      const LD tol = 2 * D * (T::entry(n) * scale + T::phase(reach(p) + reach(p2)) * A(sum).norm());
      CHECK(double((to_long((e.A(p) * e.A(p2)).eval()) - A(sum)).norm()) <= double(tol));
      const Point mp = -p;
      CHECK(double((to_long((e.A(p) * e.A(mp)).eval()) - LMatrix::Identity(n, n)).norm()) <=
            double(2 * D * T::entry(n) * A(p).norm() * A(mp).norm()));
      const LMatrix fg = to_long((e.F(p).transpose() * e.G(p2)).eval());
      CHECK(double((fg - A(diff)).norm()) <= double(tol));
    }
    // Translation invariance of the encoded score, along each axis and random directions.
    {
      peal::Vector<S> q(n), k(n);
      std::uniform_real_distribution<double> c(-1, 1);
      for (int i = 0; i < n; ++i) q(i) = S(c(g)), k(i) = S(c(g));
      const auto encoded = [&](const Point& x, const Point& y) {
        peal::Vector<S> qq = q, kk = k;
        e.encode_query(qq, x);
        e.encode_key(kk, y);
        const peal::Vector<LD> a = qq.template cast<LD>(), b = kk.template cast<LD>();
        return std::pair<LD, LD>{a.dot(b), a.norm() * b.norm()};
      };
      const auto [ref, w0] = encoded(p, p2);
      const LD size = to_long(q).norm() * A(p - p2).norm() * to_long(k).norm();
      int strong = 0;
      for (int dir = 0; dir < D + 2; ++dir) {
        Point delta = Point::Zero(D);
        if (dir < D)
          delta(dir) = Real(dir % 2 ? -30.5 : 25.0);
        else
          for (int a = 0; a < D; ++a) delta(a) = Real(20 * c(g));
        const auto [moved, wc] = encoded(p + delta, p2 + delta);
        const LD tol = 2 * D * (T::encoded_dot(n) * (w0 + wc) +
                                T::phase(reach(p + delta) + reach(p2 + delta)) * (size + w0 + wc));
        CAPTURE(dir, double(moved), double(ref), double(tol));
        CHECK(double(std::abs(moved - ref)) <= double(tol));
        strong += tol <= size / 8;
        // and the reference score (through the lag) agrees
        CHECK(double(std::abs((LD)e.score(q, p + delta, k, p2 + delta) - ref)) <= double(tol));
      }
      CHECK(strong >= 1);
    }
  }
}

}  // namespace

TEMPLATE_TEST_CASE("multi_axis: vector group law suite, D = 2 and 3", "[multi_axis][properties]",
                   float, double, long double) {
  for (int D : {2, 3}) {
    run_suite<RotFamily, TestType>(D);
    run_suite<RealFamily, TestType>(D);
    run_suite<JordanFamily, TestType>(D);
    run_suite<RotJordanFamily, TestType>(D);
    run_suite<ComposedFamily, TestType>(D);
    run_suite<ToyFamily, TestType>(D);
  }
}

TEST_CASE("multi_axis: D = 1 is the 1-D encoding", "[multi_axis]") {
  const auto e = build<RotFamily, double>(1, 5, false);
  const auto& one = e.axis(0);
  for (double t : {0.0, -3.5, 100.0})
    CHECK((e.A(std::vector<double>{t}) - one.A(t)).cwiseAbs().maxCoeff() == 0.0);
}

TEST_CASE("multi_axis: pure rotations at large coordinates", "[multi_axis]") {
  // |p| up to 2^40 on each axis: the score depends on p - p' only, to the angle accuracy.
  const auto e = build<RotFamily, double>(3, 9, true);
  const auto el = build<RotFamily, long double>(3, 9, true);
  peal::Vector<double> q = peal::Vector<double>::Random(e.dim()), k = peal::Vector<double>::Random(e.dim());
  const std::vector<double> p = {0x1p40, -0x1p39 + 3, 12345.5}, p2 = {0x1p40 - 7, -0x1p39, 12000.0};
  peal::Vector<double> qq = q, kk = k;
  e.encode_query(qq, p);
  e.encode_key(kk, p2);
  const std::vector<long double> lag = {-(long double)-7, 3.0L, 345.5L};
  peal::Vector<long double> kl = k.cast<long double>();
  el.apply(kl, lag, false);
  const LD ref = q.cast<long double>().dot(kl);
  // angles formed exactly per axis: ~1e-15 per pair, a few roundings of the 6-term dot
  CHECK(double(std::abs((LD)qq.dot(kk) - ref)) <= double(Tol<double>::encoded_dot(e.dim()) * 8));
}

namespace {

template <class Fam>
void check_batch_nd() {
  CAPTURE(Fam::name);
  const auto e = build<Fam, double>(3, 21, false);
  const int n = 5, H = 2, d = e.dim();
  std::mt19937_64 g(3);
  std::uniform_real_distribution<double> u(-50, 50);
  std::vector<double> tok(std::size_t(3 * n)), axm(std::size_t(3 * n));
  for (int i = 0; i < n; ++i)
    for (int a = 0; a < 3; ++a) tok[std::size_t(3 * i + a)] = axm[std::size_t(a * n + i)] = u(g);
  std::vector<float> x(std::size_t(n * H * d));
  for (auto& v : x) v = float(u(g) / 50);
  for (bool query : {true, false}) {
    std::vector<float> y1 = x, y2 = x, y3(x.size());
    const peal::TensorView<float> v1(y1.data(), n, H, d), v2(y2.data(), n, H, d), v3(y3.data(), n, H, d);
    const peal::TensorView<const float> src(x.data(), n, H, d);
    if (query) {
      peal::encode_queries(e, v1, peal::PositionsND(tok, 3));
      peal::encode_queries(e, v2, peal::PositionsND::axis_major(axm.data(), n, 3));
      peal::encode_queries(e, src, v3, peal::PositionsND(tok, 3));
    } else {
      peal::encode_keys(e, v1, peal::PositionsND(tok, 3));
      peal::encode_keys(e, v2, peal::PositionsND::axis_major(axm.data(), n, 3));
      peal::encode_keys(e, src, v3, peal::PositionsND(tok, 3));
    }
    for (int i = 0; i < n; ++i)
      for (int h = 0; h < H; ++h) {
        peal::Vector<double> r(d);
        for (int j = 0; j < d; ++j) r(j) = x[std::size_t((i * H + h) * d + j)];
        const std::vector<double> p = {tok[std::size_t(3 * i)], tok[std::size_t(3 * i + 1)],
                                       tok[std::size_t(3 * i + 2)]};
        if (query) e.encode_query(r, p); else e.encode_key(r, p);
        for (int j = 0; j < d; ++j) {
          const std::size_t at = std::size_t((i * H + h) * d + j);
          const double tol = double(Tol<float>::kernel_entry(2 * 3) + Tol<float>::stored()) *
                             3 * std::max(1.0, r.norm());
          CHECK(std::abs(y1[at] - r(j)) <= tol);
          CHECK(y2[at] == y1[at]);
          CHECK(y3[at] == y1[at]);
        }
      }
  }
  // shift_keys by a vector: keys at p become keys at p + delta.
  std::vector<float> k1 = x, k2 = x;
  const peal::TensorView<float> a(k1.data(), n, H, d), b(k2.data(), n, H, d);
  peal::encode_keys(e, a, peal::PositionsND(tok, 3));
  const std::vector<double> delta = {2.5, -1.0, 7.0};
  peal::shift_keys(e, a, delta);
  std::vector<double> moved = tok;
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < 3; ++c) moved[std::size_t(3 * i + c)] += delta[std::size_t(c)];
  peal::encode_keys(e, b, peal::PositionsND(moved, 3));
  for (std::size_t i = 0; i < k1.size(); ++i) CHECK(std::abs(k1[i] - k2[i]) <= 1e-4f);
}

}  // namespace

TEST_CASE("multi_axis: batch kernels over N-D positions", "[multi_axis][encode]") {
  check_batch_nd<ComposedFamily>();  // the fused N-D rotation kernel
  check_batch_nd<ToyFamily>();       // a user's block: each axis's kernel in turn
}

TEST_CASE("multi_axis: bad input", "[multi_axis][errors]") {
  using B = peal::Bank<peal::RotationBlock<double>>;
  std::vector<peal::RotationBlock<double>> b = {peal::RotationBlock<double>(0.5L)};
  const B half(b, peal::Layout::HalfSplit);
  std::vector<peal::RotationBlock<double>> b2 = {peal::RotationBlock<double>(0.5L),
                                                 peal::RotationBlock<double>(0.25L)};
  const B i2(b2, peal::Layout::Interleaved), h2(b2, peal::Layout::HalfSplit);
  REQUIRE_THROWS_WITH(peal::MultiAxis<B>(std::vector<B>{}), Catch::Contains("number of axes"));
  REQUIRE_THROWS_WITH(peal::MultiAxis<B>({half, h2}), Catch::Contains("acts on size"));
  // Different layouts: the generators do not commute.
  REQUIRE_THROWS_WITH(peal::MultiAxis<B>({i2, h2}), Catch::Contains("do not commute"));
  const peal::MultiAxis<B> m({h2, h2});
  REQUIRE_THROWS_WITH(m.A(std::vector<double>{1.0}), Catch::Contains("2 axes"));
  REQUIRE_THROWS_WITH(m.A(std::vector<double>{1.0, std::nan("")}), Catch::Contains("finite"));
  // apply(), the raw factor, checks its point and vector as A, score and encode_query do (it
  // read p[a] for every axis: a heap-buffer-overflow for a shorter point).
  Eigen::VectorXd w = Eigen::VectorXd::Ones(4), w3 = Eigen::VectorXd::Ones(3);
  REQUIRE_THROWS_WITH(m.apply(w, std::vector<double>{1.0}, false), Catch::Contains("apply: the point has 1 coordinates, the encoding has 2 axes"));
  REQUIRE_THROWS_WITH(m.apply(w, std::vector<double>{1.0, 2.0, 3.0}, true), Catch::Contains("3 coordinates"));
  REQUIRE_THROWS_WITH(m.apply(w, std::vector<double>{1.0, INFINITY}, true), Catch::Contains("finite"));
  REQUIRE_THROWS_WITH(m.apply(w3, std::vector<double>{1.0, 2.0}, false), Catch::Contains("vector has size 3, the encoding acts on size 4"));
  REQUIRE(w == Eigen::VectorXd::Ones(4));  // nothing applied
  REQUIRE_NOTHROW(m.apply(w, std::vector<double>{1.0, 2.0}, false));
  CHECK((w - m.A(std::vector<double>{1.0, 2.0}) * Eigen::VectorXd::Ones(4)).norm() <= 1e-14);
  std::vector<float> x(8);
  const peal::TensorView<float> v(x.data(), 2, 1, 4);
  std::vector<double> p = {1, 2, 3, 4};
  REQUIRE_THROWS_WITH(peal::encode_queries(m, v, peal::PositionsND(p, 1)), Catch::Contains("axes"));
  REQUIRE_THROWS_WITH(peal::encode_queries(m, v, peal::PositionsND(p.data(), 1, 2)),
                      Catch::Contains("1 positions for 2 tokens"));
  p[3] = INFINITY;
  REQUIRE_THROWS_WITH(peal::encode_keys(m, v, peal::PositionsND(p, 2)), Catch::Contains("finite"));
  REQUIRE_THROWS_WITH(peal::shift_keys(m, v, std::vector<double>{1.0}), Catch::Contains("axes"));
  REQUIRE_THROWS_WITH(peal::PositionsND(p.data(), 2, 0), Catch::Contains("number of axes"));
  REQUIRE_THROWS_WITH(peal::PositionsND(std::vector<double>(5), 2), Catch::Contains("multiple"));
}

TEST_CASE("multi_axis: a factor past the range of float (fused N-D rotation kernel)",
          "[multi_axis][encode]") {
  // Key factor e^{-a.p} = e^{100} overflows float: the kernel rotates in double and scales
  // exactly, so a zero stays 0 and the others become ±inf with the sign of the rotated
  // value, never NaN. (The per-token encode_key applies the axes one after the other and may
  // meet inf * 0 there: docs/positions-nd.md, "Limits".)
  using B = peal::Bank<peal::RotationBlock<float>>;
  std::vector<peal::RotationBlock<float>> bx(2, peal::RotationBlock<float>(0.3L, -0.5f)),
      by(2, peal::RotationBlock<float>(0.0L, 0.0f));
  const peal::MultiAxis<B> e({B(bx), B(by)});
  std::vector<float> k = {1, 0, 0, 0};
  const std::vector<double> p = {200.0, 7.0};
  peal::encode_keys(e, peal::TensorView<float>(k.data(), 1, 1, 4), peal::PositionsND(p, 2));
  // pair 0 (coordinates 0, 1, interleaved): (1, 0) rotated by 0.3 * 200 = 60 rad, times e^100
  const double c = std::cos(60.0), sn = std::sin(60.0);
  CHECK(k[0] == (c > 0 ? INFINITY : -INFINITY));
  CHECK(k[1] == (sn > 0 ? INFINITY : -INFINITY));
  CHECK(k[2] == 0.0f);  // pair 1 is (0, 0)
  CHECK(k[3] == 0.0f);
}
