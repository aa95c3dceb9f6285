// Tests of include/peal/encode.hpp: every dispatch path (rotation banks in both layouts,
// real banks, pass-through, block-diagonal compositions, basis change, the dense generic
// path) against the scalar reference, i.e. the encoding's own encode_query / encode_key on
// an Eigen vector of double, over awkward sizes, misaligned and strided views, all four
// storage types and both kinds of positions.
//
// Tolerance (per element j of one encoded vector y = M x, M = F(t) or G(s) in double;
// tests/tolerances.hpp, "Batch kernels", derives each term):
//   |y_kernel - y_ref|_j <= Tol<A>::kernel_entry(k_j) (|M| |x|)_j + Tol<T>::stored() |y_ref|_j
//                           + Tol<T>::underflow()
// (8 k_j eps_A, eps_T, denorm_min_T) with A the arithmetic type (float for float/half/bf16
// storage, double when either side stores double), T the storage type of the result and
// k_j the non-zeros in row j of M (2 for a rotation pair, 1 for a scale, up to d for the
// dense path). The input is converted to double exactly, so it adds nothing.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <limits>
#include <peal/encode.hpp>
#include <peal/jordan_block.hpp>
#include <peal/peal.hpp>
#include <peal/rotation_jordan_block.hpp>
#include <random>
#include <string>
#include <vector>

#include "tolerances.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

using peal::Index;
using peal::Layout;
using peal::Positions;
using peal::Strides;
using peal::TensorView;
using peal_test::Tol;

enum class Side { Query, Key };

// Machine epsilon of the storage type (Tol spells it out for half: 2^-10).
template <class T>
double storage_eps() {
  return double(Tol<T>::eps);
}
// Epsilon of the arithmetic type of storage T.
template <class T>
double arith_eps() {
  return double(Tol<peal::detail::arith_t<T, T>>::eps);
}
// Storage <-> double through the library's own conversions (detail/storage.hpp).
template <class T>
double to_d(T x) {
  return peal::detail::to_arith<double>(x);
}
template <class T>
T from_d(double x) {
  return peal::detail::from_arith<T>(x);
}

// RoPE: omega_i = theta^(-2i/d), a = 0.
inline peal::Bank<peal::RotationBlock<double>> rope_bank(int d, double theta, Layout layout,
                                                         double decay = 0) {
  std::vector<peal::RotationBlock<double>> b;
  for (int i = 0; i < d / 2; ++i)
    b.emplace_back(std::pow(static_cast<long double>(theta), -2.0L * i / d),
                   decay == 0 ? 0.0 : decay * (1.0 + double(i) / d));
  return peal::Bank<peal::RotationBlock<double>>(b, layout);
}
// YaRN-like frequencies: low frequencies divided by `factor`, high ones kept, a linear
// ramp between (Peng et al. 2023); the exact ramp does not matter here.
inline peal::Bank<peal::RotationBlock<double>> yarn_bank(int d, Layout layout) {
  std::vector<peal::RotationBlock<double>> b;
  const long double factor = 8;
  for (int i = 0; i < d / 2; ++i) {
    const long double w = std::pow(10000.0L, -2.0L * i / d);
    const long double gamma = std::clamp((long double)(i) / (d / 2 - 1), 0.0L, 1.0L);
    b.emplace_back(w * ((1 - gamma) + gamma / factor));
  }
  return peal::Bank<peal::RotationBlock<double>>(b, layout);
}

// Irregular real timestamps: base + cumulative random gaps in (0.05, 3.7).
inline std::vector<double> irregular(Index n, double base, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> gap(0.05, 3.7);
  std::vector<double> p(static_cast<std::size_t>(n));
  double t = base;
  for (auto& x : p) x = (t += gap(rng));
  return p;
}

// Geometry of a view inside a larger buffer: offset of element (0,0,0) and strides.
struct Geometry {
  Index tokens, heads, dim;
  Strides str;
  Index offset;
  Index size() const {
    if (tokens == 0 || heads == 0 || dim == 0) return offset + 1;
    return offset + (tokens - 1) * str.token + (heads - 1) * str.head + (dim - 1) * str.elem + 1;
  }
  Index at(Index t, Index h, Index j) const {
    return offset + t * str.token + h * str.head + j * str.elem;
  }
};
inline Geometry packed(Index tokens, Index heads, Index dim, Index offset = 0) {
  return {tokens, heads, dim, Strides{heads * dim, dim, 1}, offset};
}
// Padding between heads and tokens, element stride es.
inline Geometry padded(Index tokens, Index heads, Index dim, Index es, Index offset = 1) {
  const Index hs = dim * es + 3;
  return {tokens, heads, dim, Strides{heads * hs + 5, hs, es}, offset};
}

template <class T>
std::vector<T> random_buffer(Index n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> b(static_cast<std::size_t>(n));
  for (auto& x : b) x = from_d<T>(u(rng));
  return b;
}

// The non-zeros of M = F(t) = A(t)^T (queries) or G(s) = A(-s) (keys), by row, read from the
// encoding's own A(tau) (encoding.hpp: F(t) is A(t)^T by definition). One dense A per
// token, scanned once; the tolerance's |M| |x| is then a sum over the row's non-zeros (2 d
// products per head for a 128-dim rotation bank, not d^2; under ASan the dense product per
// head and the copy F = A^T made this reference most of the file's run time).
struct SparseRows {
  std::vector<int> start, col;  // row j: col[start[j] .. start[j + 1])
  std::vector<double> mag;      // |M(j, col)|
  template <class E>
  void build(const E& enc, Side side, double pos) {
    const Eigen::MatrixXd a = side == Side::Query ? enc.A(pos) : enc.G(pos);
    const int d = int(a.rows());
    start.assign(std::size_t(d) + 1, 0);
    col.clear();
    mag.clear();
    // Query: row j of M = A^T is column j of A (contiguous); key: row j of A. Through the
    // raw column-major data: Eigen's checked operator() was a fifth of this under ASan.
    const double* p = a.data();
    const std::ptrdiff_t along = side == Side::Query ? 1 : d, across = side == Side::Query ? d : 1;
    for (int j = 0; j < d; ++j) {
      for (int c = 0; c < d; ++c) {
        const double v = p[j * across + c * along];
        if (v != 0) {
          col.push_back(c);
          mag.push_back(std::abs(v));
        }
      }
      start[std::size_t(j) + 1] = int(col.size());
    }
  }
  int nonzeros(int j) const { return start[std::size_t(j) + 1] - start[std::size_t(j)]; }
  // (|M| |x|)_j
  double magnitude(int j, const Eigen::VectorXd& x) const {
    double m = 0;
    for (int i = start[std::size_t(j)]; i < start[std::size_t(j) + 1]; ++i)
      m += mag[std::size_t(i)] * std::abs(x(col[std::size_t(i)]));
    return m;
  }
};

// Checks one encoded result `out` (geometry go) of the input `in` (geometry gi) against
// the scalar reference, and that no element outside the destination view changed.
template <class E, class TS, class TD>
void compare_with_reference(const E& enc, Side side, const std::vector<double>& pos,
                            const std::vector<TS>& in, const Geometry& gi,
                            const std::vector<TD>& out_before, const std::vector<TD>& out,
                            const Geometry& go, double slack = 1) {
  using A = peal::detail::arith_t<TS, TD>;
  // Subnormal results of T (0 for double: through float it rounds away, as it always did).
  const double floor_t = double(static_cast<float>(Tol<TD>::underflow()));
  const int d = int(gi.dim);
  // Which elements belong to the destination view.
  std::vector<char> in_view(out.size(), 0);
  Eigen::VectorXd x(d), ref(d);
  SparseRows M;
  for (Index t = 0; t < gi.tokens; ++t) {
    M.build(enc, side, pos[std::size_t(t)]);
    for (Index h = 0; h < gi.heads; ++h) {
      for (int j = 0; j < d; ++j) x(j) = to_d(in[std::size_t(gi.at(t, h, j))]);
      ref = x;
      if (side == Side::Query)
        enc.encode_query(ref, pos[std::size_t(t)]);
      else
        enc.encode_key(ref, pos[std::size_t(t)]);
      for (int j = 0; j < d; ++j) {
        const std::size_t o = std::size_t(go.at(t, h, j));
        in_view[o] = 1;
        const double got = to_d(out[o]);
        const double mag = M.magnitude(j, x);
        const double tol = slack * double(Tol<A>::kernel_entry(M.nonzeros(j)) * mag +
                                          Tol<TD>::stored() * std::abs(ref(j))) +
                           floor_t;
        if (!(std::abs(got - ref(j)) <= tol)) {
          CAPTURE(t, h, j, pos[std::size_t(t)], got, ref(j), tol, mag);
          FAIL("encoded element differs from the scalar reference");
        }
      }
    }
  }
  for (std::size_t o = 0; o < out.size(); ++o) {
    if (!in_view[o] && !(to_d(out[o]) == to_d(out_before[o]) ||
                         (std::isnan(to_d(out[o])) && std::isnan(to_d(out_before[o]))))) {
      CAPTURE(o);
      FAIL("an element outside the view was written");
    }
  }
}

// Encodes a random [tokens, heads, dim] view (geometry gi) in place, or out of place into
// geometry go, and compares with the reference. Returns the encoded buffer.
template <class T, class E>
void check_encode(const E& enc, Side side, const std::vector<double>& pos_values,
                  const Positions& pos, const Geometry& gi, bool out_of_place, std::mt19937_64& rng,
                  double slack = 1) {
  std::vector<T> in = random_buffer<T>(gi.size(), rng);
  const std::vector<T> original = in;
  if (!out_of_place) {
    TensorView<T> v(in.data() + gi.offset, gi.tokens, gi.heads, gi.dim, gi.str);
    if (side == Side::Query)
      peal::encode_queries(enc, v, pos);
    else
      peal::encode_keys(enc, v, pos);
    compare_with_reference(enc, side, pos_values, original, gi, original, in, gi, slack);
  } else {
    // Destination packed with a misaligned start; the source is read through a const view.
    const Geometry go = packed(gi.tokens, gi.heads, gi.dim, 1);
    std::vector<T> out = random_buffer<T>(go.size(), rng);
    const std::vector<T> out_before = out;
    TensorView<const T> src(in.data() + gi.offset, gi.tokens, gi.heads, gi.dim, gi.str);
    TensorView<T> dst(out.data() + go.offset, go.tokens, go.heads, go.dim, go.str);
    if (side == Side::Query)
      peal::encode_queries(enc, src, dst, pos);
    else
      peal::encode_keys(enc, src, dst, pos);
    REQUIRE(in == original);  // the source is untouched
    compare_with_reference(enc, side, pos_values, original, gi, out_before, out, go, slack);
  }
}

const Index kTokens[] = {1, 3, 7, 17, 63, 65, 257};
const Index kHeads[] = {1, 3};
const int kDims[] = {2, 6, 64, 128};

// Runs check_encode over the awkward sizes for an encoding built per dim. Positions,
// side, placement and misalignment rotate with the case index so every combination is
// reached without the full cross product.
template <class T, class Build>
void sweep(Build&& build, bool allow_large_times, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  int c = 0;
  for (int d : kDims)
    for (Index tokens : kTokens)
      for (Index heads : kHeads) {
        const auto enc = build(d);
        const int dim = int(enc.dim());
        const Side side = (c % 2) ? Side::Key : Side::Query;
        const bool oop = (c / 2) % 2;
        const Index offset = (c / 4) % 2;  // misaligned start every other pair of cases
        const int pos_kind = c % 3;        // 0: irregular span, 1: sequence, 2: large span
        Geometry g = packed(tokens, heads, dim, offset);
        if (c % 5 == 4) g = padded(tokens, heads, dim, 2);  // element stride 2
        if (c % 5 == 2) g = padded(tokens, heads, dim, 1);  // padded token/head strides
        std::vector<double> pv;
        Positions pos = Positions::sequence(0);
        if (pos_kind == 1) {
          pos = Positions::sequence(-3.25, 1.5);
          for (Index i = 0; i < tokens; ++i) pv.push_back(pos[i]);
        } else {
          pv = irregular(tokens, pos_kind == 2 && allow_large_times ? 1.7e9 : -20.5, rng);
          pos = Positions(pv);
        }
        CAPTURE(d, dim, tokens, heads, int(side), oop, offset, pos_kind, g.str.token, g.str.head,
                g.str.elem);
        check_encode<T>(enc, side, pv, pos, g, oop, rng);
        ++c;
      }
}

}  // namespace

#define PEAL_STORAGE_TYPES float, double, Eigen::half, Eigen::bfloat16

TEMPLATE_TEST_CASE("encode: RoPE banks, both layouts, match the reference", "[encode]",
                   PEAL_STORAGE_TYPES) {
  for (Layout layout : {Layout::Interleaved, Layout::HalfSplit}) {
    CAPTURE(int(layout));
    sweep<TestType>([&](int d) { return rope_bank(d, 10000.0, layout); }, true, 11);
  }
}

TEMPLATE_TEST_CASE("encode: decaying rotation banks (xPos/RetNet-like) match the reference",
                   "[encode]", PEAL_STORAGE_TYPES) {
  // a in [-0.008, -0.004]: |a t| stays below ~8 over the positions used (|t| < ~1000), so
  // queries and keys stay representable even in half (max 65504); large |a t| is the
  // overflow test below.
  for (Layout layout : {Layout::Interleaved, Layout::HalfSplit}) {
    CAPTURE(int(layout));
    sweep<TestType>([&](int d) { return rope_bank(d, 10000.0, layout, -0.004); }, false, 12);
  }
}

TEMPLATE_TEST_CASE("encode: partial rotary compose(Bank<RotationBlock>, PassThrough)", "[encode]",
                   PEAL_STORAGE_TYPES) {
  for (Layout layout : {Layout::Interleaved, Layout::HalfSplit}) {
    CAPTURE(int(layout));
    // rotary part: a quarter of the head (at least one pair), the rest passes through.
    sweep<TestType>(
        [&](int d) {
          const int r = std::max(2, (d / 4) & ~1);
          return peal::compose(rope_bank(r, 10000.0, layout), peal::PassThrough<double>(d - r + 1));
        },
        true, 13);
  }
}

TEMPLATE_TEST_CASE("encode: Bank<RealBlock> scales match the reference", "[encode]",
                   PEAL_STORAGE_TYPES) {
  sweep<TestType>(
      [](int d) {
        std::vector<peal::RealBlock<double>> b;
        for (int i = 0; i < d + 1; ++i)
          b.emplace_back(0.005 * std::sin(1.0 + i));  // |lambda t| < ~5
        return peal::Bank<peal::RealBlock<double>>(b);
      },
      false, 14);
}

TEMPLATE_TEST_CASE("encode: generic path (Jordan blocks, basis change) matches the reference",
                   "[encode]", float, double, Eigen::half) {
  std::mt19937_64 rng(15);
  const auto comp = peal::compose(
      peal::JordanBlock<3, double>(-0.01), peal::RotationJordanBlock<2, double>(0.7, -0.02),
      rope_bank(6, 100.0, Layout::HalfSplit), peal::RealBlock<double>(0.01),
      peal::PassThrough<double>(2),
      peal::Bank<peal::JordanBlock<2, double>>(
          {peal::JordanBlock<2, double>(0.0), peal::JordanBlock<2, double>(-0.01)},
          Layout::HalfSplit));
  Eigen::MatrixXd P = Eigen::MatrixXd::Identity(comp.dim(), comp.dim());
  std::mt19937_64 prng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  for (Index i = 0; i < P.size(); ++i) P(i) += 0.3 * u(prng) / std::sqrt(double(comp.dim()));
  const auto basis = peal::change_basis(comp, P);
  for (Index tokens : {Index(1), Index(7), Index(65)})
    for (Index heads : {Index(1), Index(3)})
      for (int variant = 0; variant < 4; ++variant) {
        const Side side = variant % 2 ? Side::Key : Side::Query;
        const bool oop = variant / 2;
        // Times of order 10: Jordan coefficients tau^2/2 stay moderate in half.
        std::vector<double> pv = irregular(tokens, -12.0, rng);
        for (auto& p : pv) p *= 0.2;
        const Geometry g = variant == 3 ? padded(tokens, heads, comp.dim(), 2)
                                        : packed(tokens, heads, comp.dim(), variant % 2);
        CAPTURE(tokens, heads, variant);
        check_encode<TestType>(comp, side, pv, Positions(pv), g, oop, rng);
        // Basis change: P^T (or P^{-1}) then the composition; P = I + 0.3 U/sqrt(n) is well
        // conditioned, the slack 4 covers the extra product.
        check_encode<TestType>(basis, side, pv, Positions(pv), g, oop, rng, 4);
      }
}

TEST_CASE("encode: out of place equals in place, and mixed storage types", "[encode]") {
  std::mt19937_64 rng(16);
  for (Layout layout : {Layout::Interleaved, Layout::HalfSplit}) {
    const auto enc =
        peal::compose(rope_bank(48, 10000.0, layout, -0.01), peal::PassThrough<double>(16));
    const Index T = 33, H = 3, D = enc.dim();
    const std::vector<double> pv = irregular(T, 5.0, rng);
    for (Side side : {Side::Query, Side::Key}) {
      std::vector<float> a = random_buffer<float>(T * H * D, rng), b(a.size()), c = a;
      TensorView<float> va(a.data(), T, H, D), vb(b.data(), T, H, D);
      TensorView<const float> vc(c.data(), T, H, D);
      if (side == Side::Query) {
        peal::encode_queries(enc, va, pv);
        peal::encode_queries(enc, vc, vb, pv);
      } else {
        peal::encode_keys(enc, va, pv);
        peal::encode_keys(enc, vc, vb, pv);
      }
      // The in-place and out-of-place loops evaluate the same two-term sums, but the
      // compiler may contract them into FMAs differently (-O3 -march=native does): they
      // agree to two roundings of the terms, each at most g = e^{|a| |t|} <= e^{0.015 pmax}
      // times |x| <= 1 (rope_bank: |a_i| = 0.01 (1 + i/d) < 0.015): roundings(2) of 2 g.
      const double gmax = std::exp(0.015 * *std::max_element(pv.begin(), pv.end()));
      for (std::size_t i = 0; i < a.size(); ++i)
        REQUIRE(std::abs(double(a[i]) - double(b[i])) <=
                double(Tol<float>::roundings(2)) * 2 * gmax);
      // The same view as source and destination encodes in place.
      std::vector<float> e = c;
      TensorView<float> ve(e.data(), T, H, D);
      if (side == Side::Query)
        peal::encode_queries(enc, TensorView<const float>(ve), ve, pv);
      else
        peal::encode_keys(enc, TensorView<const float>(ve), ve, pv);
      CHECK(e == a);
      // float -> half and half -> double: arithmetic in float, resp. double.
      std::vector<Eigen::half> h(a.size());
      TensorView<Eigen::half> vh(h.data(), T, H, D);
      if (side == Side::Query)
        peal::encode_queries(enc, vc, vh, pv);
      else
        peal::encode_keys(enc, vc, vh, pv);
      // float -> half: one rounding to half, subnormal halves at fixed spacing.
      for (std::size_t i = 0; i < h.size(); ++i)
        REQUIRE(
            std::abs(double(float(h[i])) - double(a[i])) <=
            double(Tol<Eigen::half>::stored() * std::abs(a[i]) + Tol<Eigen::half>::underflow()));
      std::vector<double> dd(a.size());
      TensorView<double> vd(dd.data(), T, H, D);
      const Geometry g = packed(T, H, D);
      std::vector<Eigen::half> hin = random_buffer<Eigen::half>(T * H * D, rng);
      TensorView<const Eigen::half> vhin(hin.data(), T, H, D);
      const std::vector<double> before(dd);
      if (side == Side::Query)
        peal::encode_queries(enc, vhin, vd, pv);
      else
        peal::encode_keys(enc, vhin, vd, pv);
      compare_with_reference(enc, side, pv, hin, g, before, dd, g);
    }
  }
}

TEMPLATE_TEST_CASE("encode: equally spaced positions at any offset, span and sequence", "[encode]",
                   float, Eigen::half, double) {
  // Token positions base + step * i, as a span and as Positions::sequence, from 0 up to
  // 4.5e15 (where ulp(t) = 0.5): the per-element bound holds at any offset because the
  // angles are reduced exactly; a gap broken inside the run changes nothing.
  std::mt19937_64 rng(18);
  for (Layout layout : {Layout::Interleaved, Layout::HalfSplit}) {
    const auto enc = rope_bank(128, 10000.0, layout, 0.0);
    const auto decay = rope_bank(64, 500.0, layout, -0.003);
    for (double base : {0.0, -77.0, 1.7e9, 4.5e15}) {
      for (double step : {1.0, 0.5, 0.1, -3.0}) {
        const Index T = 97, H = 2;
        std::vector<double> pv(static_cast<std::size_t>(T));
        for (Index i = 0; i < T; ++i) pv[std::size_t(i)] = base + step * double(i);
        CAPTURE(int(layout), base, step);
        check_encode<TestType>(enc, Side::Key, pv, Positions::sequence(base, step),
                               packed(T, H, 128), true, rng);
        if (step == -3.0) pv[40] += 0.25;  // a broken run inside a block
        check_encode<TestType>(enc, Side::Query, pv, Positions(pv), packed(T, H, 128), false, rng);
        if (base == 0.0 || base == -77.0) {
          for (auto& p : pv) p *= 0.3;  // keep |a t| moderate for half
          check_encode<TestType>(decay, Side::Key, pv, Positions(pv), packed(T, H, 64), false, rng);
        }
      }
    }
  }
}

TEST_CASE("encode: views from Eigen matrices", "[encode]") {
  std::mt19937_64 rng(17);
  const auto enc = rope_bank(8, 10000.0, Layout::HalfSplit);
  Eigen::MatrixXf q = Eigen::MatrixXf::Random(5, 2 * 8);  // column major: elem stride 5
  // Pairs (i, i + 4) rotated in float: entry(2) of |F| |x| (the old absolute 16 eps_f with
  // |x| <= 1 is wider: |F| |x| <= |c| + |s| <= sqrt 2).
  const Eigen::MatrixXf q0 = q;
  const std::vector<double> pv = irregular(5, 0.0, rng);
  peal::encode_queries(enc, TensorView<float>(q, 2), pv);
  for (Index t = 0; t < 5; ++t)
    for (Index h = 0; h < 2; ++h) {
      Eigen::VectorXd ref = q0.row(t).segment(h * 8, 8).transpose().cast<double>();
      enc.encode_query(ref, pv[std::size_t(t)]);
      const Eigen::VectorXd got = q.row(t).segment(h * 8, 8).transpose().cast<double>();
      const Eigen::VectorXd x = q0.row(t).segment(h * 8, 8).transpose().cast<double>();
      const Eigen::VectorXd mag =
          Eigen::MatrixXd(enc.F(pv[std::size_t(t)])).cwiseAbs() * x.cwiseAbs();
      CHECK(((got - ref).cwiseAbs().array() <= double(Tol<float>::entry(2)) * mag.array()).all());
    }
}

TEST_CASE("encode: growth at large |a t| overflows by nature (not clamped)", "[encode]") {
  // RetNet-like decay a = ln(1 - 2^-5) ~ -0.0317: the key factor e^{-a s} passes the float
  // range (~3.4e38, |a s| > 88.7) at s ~ 2800. encode applies the global G(s): the result is
  // inf, exactly what the scalar reference gives in float; scores() rebases instead.
  const double a = std::log1p(-1.0 / 32);
  const peal::Bank<peal::RotationBlock<double>> bank({peal::RotationBlock<double>(0.0L, a)});
  std::vector<float> k = {1.0f, 0.0f};
  peal::encode_keys(bank, TensorView<float>(k.data(), 1, 1, 2), std::vector<double>{4000.0});
  CHECK(std::isinf(k[0]));
  std::vector<double> kd = {1.0, 0.0};
  peal::encode_keys(bank, TensorView<double>(kd.data(), 1, 1, 2), std::vector<double>{4000.0});
  // Still finite in double: -a s rounded and its exp, exp_of(|a s|) relative.
  const double want = std::exp(-a * 4000.0);
  CHECK(std::abs(kd[0] - want) <= double(Tol<double>::exp_of(std::abs(a * 4000.0))) * want);
}

TEST_CASE("encode: errors", "[encode]") {
  const auto enc = rope_bank(8, 10000.0, Layout::Interleaved);
  std::vector<float> q(3 * 2 * 8, 1.0f), o(3 * 2 * 10, 0.0f);
  TensorView<float> v(q.data(), 3, 2, 8);
  const std::vector<double> pos3 = {0, 1, 2};

  // dim mismatch
  TensorView<float> wrong_dim(q.data(), 4, 2, 6);
  CHECK_THROWS_AS(peal::encode_queries(enc, wrong_dim, Positions::sequence(0)),
                  peal::invalid_argument);
  CHECK_THROWS_WITH(peal::encode_keys(enc, wrong_dim, Positions::sequence(0)),
                    Catch::Contains("dim 6") && Catch::Contains("size 8"));
  CHECK_THROWS_AS(peal::shift_keys(enc, wrong_dim, 1.0), peal::invalid_argument);
  // positions count mismatch
  CHECK_THROWS_WITH(peal::encode_queries(enc, v, std::vector<double>{0, 1}),
                    Catch::Contains("2 positions for 3 tokens"));
  // NaN / inf position
  const std::vector<double> bad = {0, std::nan(""), 2};
  CHECK_THROWS_WITH(peal::encode_keys(enc, v, bad), Catch::Contains("finite"));
  const std::vector<double> inf = {0, 1, HUGE_VAL};
  CHECK_THROWS_AS(peal::encode_queries(enc, v, inf), peal::invalid_argument);
  CHECK_THROWS_AS(peal::shift_keys(enc, v, std::nan("")), peal::invalid_argument);
  // out-of-place extent mismatch
  TensorView<float> other(o.data(), 3, 2, 10);
  TensorView<float> fewer(o.data(), 2, 2, 8);
  CHECK_THROWS_WITH(peal::encode_queries(enc, TensorView<const float>(v), fewer, pos3),
                    Catch::Contains("[3, 2, 8]") && Catch::Contains("[2, 2, 8]"));
  CHECK_THROWS_AS(peal::encode_keys(enc, v, other, pos3), peal::invalid_argument);
  // Nothing was written by a failed call.
  CHECK(std::all_of(q.begin(), q.end(), [](float x) { return x == 1.0f; }));
  // Empty views are fine.
  TensorView<float> empty(q.data(), 0, 2, 8);
  peal::encode_queries(enc, empty, std::vector<double>{});
  peal::shift_keys(enc, empty, 3.0);
}

TEMPLATE_TEST_CASE("shift_keys: equals encoding at s + delta", "[encode][shift]", float, double) {
  // The shifted key is G(delta) (G(s) k) computed as two products, so its error is bounded
  // by the rounding of both: 2 kernel_entry(k_j) (|G(delta)| |G(s)| |k|)_j + stored() |ref_j|
  // (same model as the header comment, one product after the other). The reference is
  // encoded at fl(s + delta), which moves it by Tol<double>::phase(|s + delta|) of
  // (|X| |G| |k|)_j (it matters only for double).
  using T = TestType;
  std::mt19937_64 rng(21);
  auto run = [&](const auto& enc, double delta) {
    const Index Tn = 17, H = 3, D = enc.dim();
    const std::vector<double> s = irregular(Tn, -30.0, rng);
    std::vector<double> s_shifted(s);
    for (auto& x : s_shifted) x += delta;
    std::vector<T> k = random_buffer<T>(Tn * H * D, rng), direct = k;
    const std::vector<T> raw = k;
    peal::encode_keys(enc, TensorView<T>(k.data(), Tn, H, D), s);
    peal::shift_keys(enc, TensorView<T>(k.data(), Tn, H, D), delta);
    peal::encode_keys(enc, TensorView<T>(direct.data(), Tn, H, D), s_shifted);
    const Geometry g = packed(Tn, H, D);
    compare_with_reference(enc, Side::Key, s_shifted, raw, g, raw, direct, g);
    const Eigen::MatrixXd Gd = enc.G(delta);
    const Eigen::MatrixXd Xabs = Eigen::MatrixXd(enc.generator()).cwiseAbs();
    for (Index t = 0; t < Tn; ++t) {
      const Eigen::MatrixXd Gs = enc.G(s[std::size_t(t)]);
      const Eigen::MatrixXd Gsd = enc.G(s_shifted[std::size_t(t)]);
      const double dtau = double(Tol<double>::phase(std::abs(s_shifted[std::size_t(t)])));
      for (Index h = 0; h < H; ++h) {
        Eigen::VectorXd x(D), got(D);
        for (Index j = 0; j < D; ++j) {
          x(j) = to_d(raw[std::size_t(g.at(t, h, j))]);
          got(j) = to_d(k[std::size_t(g.at(t, h, j))]);
        }
        Eigen::VectorXd ref = x;
        enc.encode_key(ref, s_shifted[std::size_t(t)]);
        const Eigen::VectorXd mag = Gd.cwiseAbs() * (Gs.cwiseAbs() * x.cwiseAbs());
        const Eigen::VectorXd phase = dtau * (Xabs * (Gsd.cwiseAbs() * x.cwiseAbs()));
        for (Index j = 0; j < D; ++j) {
          const int kj = int((Gs.row(j).array() != 0).count());
          const double tol =
              double(2 * Tol<T>::kernel_entry(kj) * mag(j) + Tol<T>::stored() * std::abs(ref(j))) +
              phase(j);
          if (!(std::abs(got(j) - ref(j)) <= tol)) {
            CAPTURE(t, h, j, got(j), ref(j), tol);
            FAIL("shifted key differs from the key encoded at s + delta");
          }
        }
      }
    }
  };
  const auto decay = rope_bank(64, 10000.0, Layout::Interleaved, -0.01);
  const auto partial =
      peal::compose(rope_bank(32, 500.0, Layout::HalfSplit), peal::PassThrough<double>(32));
  const auto jordan =
      peal::compose(peal::JordanBlock<3, double>(-0.01), rope_bank(4, 10.0, Layout::HalfSplit));
  for (double delta : {1.0, -7.25, 0.0, 123.5}) {
    CAPTURE(delta);
    run(rope_bank(128, 10000.0, Layout::Interleaved), delta);
    run(decay, delta);
    run(partial, delta);
    run(jordan, delta);
  }
}

TEMPLATE_TEST_CASE("shift_keys: 1000 shifts by 1 neither drift nor change magnitude",
                   "[encode][shift]", float, double) {
  // Each shift multiplies every pair by the SAME rounded rotation (c~, s~) (one matrix for
  // all tokens and steps), so its errors are systematic, not random, and add up linearly:
  //   magnitude: |c~^2 + s~^2 - 1| <= 2 eps_A and the rotated pair is rounded again,
  //              so each step scales the pair norm by at most 1 + 3 eps_A;
  //   angle:     atan2(s~, c~) differs from omega by at most eps_A per step.
  // After N steps both are bounded by Tol::shift_steps(N) = 3 N eps_A |k| (linear, worst
  // case); compared with a direct encoding at s + N (itself within a few roundings,
  // roundings(8) = 8 eps_A |k|, of the truth) the difference is at most (3 N + 8) eps_A |k|,
  // elementwise, with |k| the norm of the pair.
  using T = TestType;
  const double eps = arith_eps<T>();
  const int N = 1000;
  std::mt19937_64 rng(22);
  for (int which = 0; which < 2; ++which)
    for (Layout layout : {Layout::Interleaved, Layout::HalfSplit}) {
      const auto enc = which == 0 ? rope_bank(128, 10000.0, layout) : yarn_bank(128, layout);
      const Index Tn = 9, H = 2, D = 128, n = 64;
      const std::vector<double> s = irregular(Tn, 1000.0, rng);
      std::vector<double> s_final(s);
      for (auto& x : s_final) x += N;
      std::vector<T> k = random_buffer<T>(Tn * H * D, rng), direct = k;
      TensorView<T> vk(k.data(), Tn, H, D), vd(direct.data(), Tn, H, D);
      peal::encode_keys(enc, vk, s);
      const std::vector<T> k0 = k;
      for (int step = 0; step < N; ++step) peal::shift_keys(enc, vk, 1.0);
      peal::encode_keys(enc, vd, s_final);
      double worst_norm = 0, worst_diff = 0;
      for (Index t = 0; t < Tn; ++t)
        for (Index h = 0; h < H; ++h)
          for (Index i = 0; i < n; ++i) {
            const Index j0 = enc.coordinate(int(i), 0), j1 = enc.coordinate(int(i), 1);
            auto at = [&](const std::vector<T>& v, Index j) {
              return to_d(v[std::size_t((t * H + h) * D + j)]);
            };
            const double r0 = std::hypot(at(k0, j0), at(k0, j1));
            const double rN = std::hypot(at(k, j0), at(k, j1));
            const double diff = std::max(std::abs(at(k, j0) - at(direct, j0)),
                                         std::abs(at(k, j1) - at(direct, j1)));
            worst_norm = std::max(worst_norm, std::abs(rN - r0) / (r0 * eps));
            worst_diff = std::max(worst_diff, diff / (r0 * eps));
          }
      CAPTURE(which, int(layout), worst_norm, worst_diff);
      CHECK(worst_norm * eps <= double(Tol<T>::shift_steps(N)));
      CHECK(worst_diff * eps <= double(Tol<T>::shift_steps(N) + Tol<T>::roundings(8)));
    }
}

TEST_CASE("encode: the vectorizable exp of the growth factors", "[encode]") {
  // detail::encode_kernels::exp_kernel against std::exp: <= Tol::exp_ulps() = 4 ulp where
  // the result is normal, identical 0 / inf beyond the range, and close in the subnormal
  // range (where the spacing is fixed, compare absolutely against the smallest subnormal).
  using peal::detail::encode_kernels::exp_kernel;
  std::mt19937_64 rng(31);
  std::uniform_real_distribution<double> u(-760, 720);
  double worst = 0;
  auto check = [&](double x) {
    const double ref = std::exp(x), got = exp_kernel(x);
    if (std::isinf(ref) || ref == 0) {
      REQUIRE(got == ref);
    } else if (ref < std::numeric_limits<double>::min()) {
      REQUIRE(std::abs(got - ref) <= 2 * double(Tol<double>::underflow()));
    } else {
      const double ulps = std::abs(got - ref) / (double(Tol<double>::eps) * ref);
      worst = std::max(worst, ulps);
      REQUIRE(ulps <= Tol<double>::exp_ulps());
    }
  };
  for (int i = 0; i < 200000; ++i) check(u(rng));
  for (double x : {0.0, -0.0, 1e-300, -1e-300, 1.0, -1.0, 0.5 * std::log(2.0), 709.78, 709.79,
                   710.0, 1e6, -708.3, -708.5, -744.4, -745.2, -746.0, -1e6})
    check(x);
  CAPTURE(worst);
  CHECK(worst <= Tol<double>::exp_ulps());
}

#ifdef _OPENMP
TEST_CASE("encode: OpenMP threads give bitwise the same result", "[encode]") {
  std::mt19937_64 rng(41);
  const auto enc = peal::compose(rope_bank(64, 10000.0, Layout::Interleaved, -0.002),
                                 peal::PassThrough<double>(8));
  const Index T = 129, H = 8, D = enc.dim();  // 129 * 8 * 72 elements: above the threshold
  REQUIRE(T * H * D >= peal::detail::encode_kernels::kParallelMinElements);
  // Irregular and equal gaps.
  std::vector<double> equal(static_cast<std::size_t>(T));
  for (Index i = 0; i < T; ++i) equal[std::size_t(i)] = 100.0 + 3.0 * double(i);
  for (const std::vector<double>& pv : {irregular(T, 0.0, rng), equal}) {
    const std::vector<float> raw = random_buffer<float>(T * H * D, rng);
    std::vector<float> one = raw, many = raw;
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    peal::encode_keys(enc, TensorView<float>(one.data(), T, H, D), pv);
    omp_set_num_threads(3);
    peal::encode_keys(enc, TensorView<float>(many.data(), T, H, D), pv);
    omp_set_num_threads(saved);
    CHECK(one == many);
  }
}
#endif

// A preset is dispatched as the encoding it is (detail::has_encoding_type, encoding.hpp):
// RopeEncoding gets the BlockDiagonal kernel (fast rotation bank + pass-through), not the
// generic dense one. Checked at compile time.
namespace {
namespace ek = peal::detail::encode_kernels;
using RopeD = peal::RopeEncoding<double>;
static_assert(std::is_same<ek::kernel_t<float, RopeD>, ek::kernel_t<float, RopeD::encoding_type>>::value,
              "RopeEncoding must use its BlockDiagonal's kernel");
static_assert(!std::is_same<ek::kernel_t<float, RopeD>, ek::DenseKernel<float, RopeD>>::value,
              "RopeEncoding must not take the dense fallback");
// Long double parameters stay in long double (the coders tabulate in double), and their
// compositions keep the structural kernels: a basis change's F_J(t) P^T is not A_P(t)^T, so
// the dense kernel of the whole would encode (and shift) the wrong factor.
using BankL = peal::Bank<peal::RotationBlock<long double>>;
static_assert(std::is_same<ek::kernel_t<float, BankL>, ek::DenseKernel<float, BankL>>::value, "");
static_assert(std::is_same<ek::kernel_t<float, peal::BasisChange<BankL>>,
                           ek::BasisChangeKernel<float, BankL>>::value, "");
static_assert(std::is_same<ek::kernel_t<double, peal::BlockDiagonal<BankL, peal::PassThrough<long double>>>,
                           ek::BlockDiagonalKernel<double, BankL, peal::PassThrough<long double>>>::value, "");
static_assert(std::is_same<ek::kernel_t<float, peal::BasisChange<RopeD::encoding_type>>,
                           ek::CoderKernel<float, peal::BasisChange<RopeD::encoding_type>>>::value, "");
}  // namespace

TEST_CASE("encode: RoPE at positions up to DBL_MAX (exact angle reduction)", "[encode][angle]") {
  // The phase ω t is reduced exactly for every finite t (detail/math/angle_exact.hpp). Pair 0 of a
  // RoPE has ω = θ^0 = 1, so its rotation is (cos t, sin t), here against mpmath (200 digits);
  // the other pairs against the per-token API. Before, without FMA these positions gave NaN
  // (Dekker's split overflows) and with FMA wrong angles (0 rad at t = 1e100).
  struct Known {
    double t, sin_t, cos_t;
  };
  const Known known[] = {{1e100, -0.38063773100502866607, 0.92472423875193378588},
                         {1e308, 0.45339649050164911655, -0.89130893768703340790},
                         {-DBL_MAX, -0.0049619547891840617905, -0.99998768942655993746}};
  peal::RopeConfig cfg;
  cfg.head_dim = 8;  // HalfSplit: pair i is (i, i + 4), ω_i = 1e4^(-i/4)
  const auto rope = peal::rope<double>(cfg, 0);
  for (const Known& k : known) {
    CAPTURE(k.t);
    for (int seq = 0; seq < 2; ++seq) {
      std::vector<double> q = {1, 0.5, -0.25, 2, 0, 1.5, 0.75, -1}, ref(q);
      const std::vector<double> span = {k.t};
      const Positions pos = seq ? Positions::sequence(k.t, 1.0) : Positions(span);
      peal::encode_queries(rope, TensorView<double>(q.data(), 1, 1, 8), pos);
      rope.encode_query(ref, k.t);
      for (int j = 0; j < 8; ++j) {
        CHECK(std::isfinite(q[std::size_t(j)]));
        CHECK(std::fabs(q[std::size_t(j)] - ref[std::size_t(j)]) <= 8 * DBL_EPSILON);
      }
      // F(t) q on pair 0: (c x0 - s x1, s x0 + c x1) with (x0, x1) = (1, 0).
      CHECK(std::fabs(q[0] - k.cos_t) <= 4 * DBL_EPSILON);
      CHECK(std::fabs(q[4] - k.sin_t) <= 4 * DBL_EPSILON);
    }
  }
}

TEST_CASE("encode: factors past the range give ±inf or the finite value, never NaN", "[encode]") {
  // Every kernel against the per-token API (which test_compositions.cpp and
  // test_jordan_block.cpp check against long double) and against exact values: a factor
  // e^{a t} beyond the range must not turn a zero component into NaN (inf·0), and a tiny
  // component times an overflowing factor stays finite when the product is.
  const double inf = std::numeric_limits<double>::infinity();
  auto same = [](double got, double want) {
    if (std::isinf(want) || want == 0) return got == want;
    return std::fabs(got - want) <= 1e-12 * std::fabs(want);
  };
  auto check_query = [&](const auto& enc, std::vector<double> x, double t) {
    const int d = int(x.size());
    Eigen::VectorXd ref = Eigen::Map<Eigen::VectorXd>(x.data(), d);
    enc.encode_query(ref, t);
    std::vector<double> got = x;
    peal::encode_queries(enc, TensorView<double>(got.data(), 1, 1, d), std::vector<double>{t});
    std::vector<double> strided(2 * std::size_t(d));  // the gather path (element stride 2)
    for (int j = 0; j < d; ++j) strided[std::size_t(2 * j)] = x[std::size_t(j)];
    peal::encode_queries(enc, TensorView<double>(strided.data(), 1, 1, d, Strides{2 * d, 2 * d, 2}),
                         std::vector<double>{t});
    for (int j = 0; j < d; ++j) {
      CAPTURE(j, x[std::size_t(j)], got[std::size_t(j)], ref(j));
      CHECK(!std::isnan(ref(j)));
      CHECK(same(got[std::size_t(j)], ref(j)));
      CHECK(same(strided[std::size_t(2 * j)], ref(j)));
    }
    return got;
  };
  using RB = peal::RotationBlock<double>;
  // Rotation bank: ω = 0 has sin = 0 exactly.
  const peal::Bank<RB> rot({RB(0.0L, 1000.0), RB(1.0L, 0.0), RB(0.5L, 710.0)});
  auto y = check_query(rot, {1, 0, 1, 0, 1e-300, 0}, 1.0);
  CHECK(y[0] == inf);
  CHECK(y[1] == 0);
  CHECK(std::isfinite(y[4]));  // e^{710}·1e-300·cos(0.5) = 1.9e8
  CHECK(y[4] == Approx(std::exp(710.0 - 690.7755278982137) * std::cos(0.5)).epsilon(1e-10));
  check_query(peal::Bank<RB>({RB(0.0L, 1000.0), RB(2.0L, 1000.0)}, Layout::HalfSplit),
              {0, 1, -2, 0}, 1.0);
  // Real bank: 0 stays 0, e^{-1000}·1e300 and e^{710}·1e-300 are finite (the bank overflows:
  // every component goes through the exact form).
  const peal::Bank<peal::RealBlock<double>> real(
      {peal::RealBlock<double>(1000), peal::RealBlock<double>(-1000), peal::RealBlock<double>(710),
       peal::RealBlock<double>(1000)});
  y = check_query(real, {0, 1e300, 1e-300, -2}, 1.0);
  CHECK(y[0] == 0);
  CHECK(y[3] == -inf);
  // Dense kernel (Jordan blocks), alone and inside a composition.
  y = check_query(peal::JordanBlock<2, double>(1000), {1, 0}, 1.0);
  CHECK(y[0] == inf);
  CHECK(y[1] == inf);
  y = check_query(peal::JordanBlock<2, double>(1000), {0, 1}, 1.0);
  CHECK(y[0] == 0);
  check_query(peal::JordanBlock<3, double>(710), {1e-300, 0, 0}, 1.0);
  check_query(peal::RotationJordanBlock<2, double>(0.0L, 1000), {1, 0, 0, 0}, 1.0);
  // (The factors are checked for overflow only: a factor that underflows gives what IEEE
  // arithmetic gives, e^{-1000}·2 = 0 here, as the per-token form does.)
  y = check_query(peal::compose(peal::JordanBlock<2, double>(1000), peal::PassThrough<double>(2),
                                peal::RealBlock<double>(-1000)),
                  {1, 0, 3, 4, 2}, 1.0);
  CHECK(y[2] == 3);
  CHECK(y[3] == 4);
  // Basis change: P^T first, then the inner encoding's exact form; its shift is the inner
  // encoding's alone (a zero stays 0 under an overflowing factor there too).
  using RealBank = peal::Bank<peal::RealBlock<double>>;
  const RealBank inner({peal::RealBlock<double>(1000), peal::RealBlock<double>(-1)});
  Eigen::MatrixXd P(2, 2);
  P << 1, 0.5, 0, 1;
  const peal::BasisChange<RealBank> bc(inner, P);
  y = check_query(bc, {1, 0}, 1.0);
  CHECK(y[0] == inf);
  CHECK(y[1] == Approx(0.5 * std::exp(-1.0)).epsilon(1e-14));
  std::vector<double> k1 = {0, 1}, k2 = k1;
  peal::shift_keys(bc, TensorView<double>(k1.data(), 1, 1, 2), -1.0);  // A_J(1): e^{1000}, e^{-1}
  peal::shift_keys(inner, TensorView<double>(k2.data(), 1, 1, 2), -1.0);
  CHECK(k1[0] == 0);
  CHECK(k1[1] == k2[1]);
  CHECK(k1[1] == Approx(std::exp(-1.0)).epsilon(1e-14));
  // Keys (G(s) = A(-s)) in float storage: a RetNet-like decay at s = 4000 overflows float.
  const double a = std::log1p(-1.0 / 32);
  const peal::Bank<RB> decay({RB(0.0L, a), RB(0.3L, a)});
  std::vector<float> k = {1.0f, 0.0f, 0.0f, 0.0f};
  peal::encode_keys(decay, TensorView<float>(k.data(), 1, 1, 4), std::vector<double>{4000.0});
  CHECK(k[0] == std::numeric_limits<float>::infinity());
  CHECK(k[1] == 0.0f);  // was NaN: 0 · inf
  CHECK(k[2] == 0.0f);
  CHECK(k[3] == 0.0f);
  std::vector<float> kj = {0.0f, 1.0f};
  peal::encode_keys(peal::JordanBlock<2, double>(-100), TensorView<float>(kj.data(), 1, 1, 2),
                    std::vector<double>{1.0});  // G(1) = A(-1) = e^{100} [[1, -1], [0, 1]]
  CHECK(kj[0] == -std::numeric_limits<float>::infinity());
  CHECK(kj[1] == std::numeric_limits<float>::infinity());
}

// ---- Overlap of source and destination (out of place) ---------------------------------------
// Out of place, the kernels read each source row after earlier rows of the destination were
// written: a destination four floats into the source was wrong by up to 4. Partial overlap is
// rejected before anything is written; the very same view is the in-place call; views in
// adjacent memory are independent.
TEST_CASE("encode: out of place, a destination overlapping the source is rejected",
          "[encode][overlap]") {
  using Catch::Contains;
  std::mt19937_64 rng(77);
  for (Layout layout : {Layout::Interleaved, Layout::HalfSplit}) {
    const auto enc = rope_bank(16, 10000.0, layout);
    const Index T = 5, H = 3, D = enc.dim(), n = T * H * D;
    const std::vector<double> pv = irregular(T, 2.0, rng);
    std::vector<float> buf = random_buffer<float>(3 * n, rng);
    const std::vector<float> saved = buf;
    float* base = buf.data() + n;
    const TensorView<const float> src(base, T, H, D);
    for (Index shift : {Index(4), Index(-4), Index(n - 1), Index(1 - n), Index(0)}) {
      INFO("destination " << shift << " floats from the source");
      if (shift == 0) {  // same memory, another layout (heads reversed): not the same view
        const TensorView<float> dst(base + (H - 1) * D, T, H, D, Strides{H * D, -D, 1});
        CHECK_THROWS_WITH(peal::encode_queries(enc, src, dst, pv), Contains("overlap"));
        continue;
      }
      const TensorView<float> dst(base + shift, T, H, D);
      CHECK_THROWS_WITH(peal::encode_queries(enc, src, dst, pv),
                        Contains("encode_queries") && Contains("overlap"));
      CHECK_THROWS_WITH(peal::encode_keys(enc, src, dst, pv),
                        Contains("encode_keys") && Contains("overlap"));
      CHECK_THROWS_WITH(peal::shift_keys(enc, src, dst, 3.0),
                        Contains("shift_keys") && Contains("overlap"));
    }
    // Another storage type on the same bytes overlaps too (half over the first floats).
    const TensorView<Eigen::half> as_half(reinterpret_cast<Eigen::half*>(base), T, H, D);
    CHECK_THROWS_WITH(peal::encode_keys(enc, src, as_half, pv), Contains("overlap"));
    CHECK(std::equal(buf.begin(), buf.end(), saved.begin()));  // nothing written by a rejected call

    // Adjacent destinations (just before and just after the source) are accepted and give
    // the same bits as a separate destination.
    std::vector<float> sep(std::size_t(n), 0.0f);
    peal::encode_queries(enc, src, TensorView<float>(sep.data(), T, H, D), pv);
    for (float* d : {buf.data(), buf.data() + 2 * n}) {
      peal::encode_queries(enc, src, TensorView<float>(d, T, H, D), pv);
      CHECK(std::equal(sep.begin(), sep.end(), d));
    }
    // The same view as source and destination is the in-place call.
    std::vector<float> a(saved.begin() + n, saved.begin() + 2 * n), b = a;
    const TensorView<float> va(a.data(), T, H, D), vb(b.data(), T, H, D);
    peal::encode_keys(enc, TensorView<const float>(va), va, pv);
    peal::encode_keys(enc, vb, pv);
    CHECK(a == b);
    peal::shift_keys(enc, TensorView<const float>(va), va, 2.5);
    peal::shift_keys(enc, vb, 2.5);
    CHECK(a == b);
    // The same elements with another stride on an axis of extent 1 are the same view too.
    std::vector<float> c1(a.begin(), a.begin() + T * D), c2 = c1;
    const TensorView<float> one(c1.data(), T, 1, D, Strides{D, 999, 1});
    peal::encode_queries(enc, TensorView<const float>(c1.data(), T, 1, D, Strides{D, 5, 1}), one,
                         pv);
    peal::encode_queries(enc, TensorView<float>(c2.data(), T, 1, D), pv);
    CHECK(c1 == c2);
  }
}

// ---- In place and out of place give the same bits --------------------------------------------
// The two overloads run different loops over the same coefficients (encode.hpp, "Inner
// loops"); they must not round differently. With g++ 12 -O3 -march=native the HalfSplit
// loops differed by 1 ulp in ~13 % of the elements (the compiler contracted the two-product
// sums into FMAs differently in the two loops); -O2 happened to agree.
TEMPLATE_TEST_CASE("encode: in place and out of place give the same bits", "[encode]", float,
                   double) {
  using T = TestType;
  std::mt19937_64 rng(91);
  auto check = [&](const auto& enc, const char* what) {
    const Index T_ = 9, H = 3, d = enc.dim();
    std::vector<double> pv = irregular(T_, 0.0, rng);
    pv[0] = 0.0, pv[1] = 1.5, pv[2] = 1000.25, pv[3] = -17.0;
    const std::vector<T> raw = random_buffer<T>(T_ * H * d, rng);
    for (int call = 0; call < 3; ++call) {
      std::vector<T> in = raw, out(raw.size());
      const TensorView<T> vi(in.data(), T_, H, d), vo(out.data(), T_, H, d);
      const TensorView<const T> src(raw.data(), T_, H, d);
      if (call == 0) {
        peal::encode_queries(enc, vi, pv);
        peal::encode_queries(enc, src, vo, pv);
      } else if (call == 1) {
        peal::encode_keys(enc, vi, pv);
        peal::encode_keys(enc, src, vo, pv);
      } else {
        peal::shift_keys(enc, vi, 12.75);
        peal::shift_keys(enc, src, vo, 12.75);
      }
      Index differ = 0;
      for (std::size_t i = 0; i < in.size(); ++i) differ += in[i] != out[i];
      INFO(what << " d " << d << " call " << call << ": " << differ << " of " << in.size()
                << " elements differ");
      CHECK(differ == 0);
    }
  };
  for (Layout layout : {Layout::Interleaved, Layout::HalfSplit}) {
    const char* name = layout == Layout::Interleaved ? "Interleaved" : "HalfSplit";
    for (int d : {2, 16, 40, 64, 96, 128, 130}) {  // fixed and run-time pair counts
      check(rope_bank(d, 10000.0, layout), name);
      check(rope_bank(d, 10000.0, layout, -0.003), name);
      check(peal::compose(rope_bank(d, 10000.0, layout), peal::PassThrough<double>(5)), name);
    }
  }
  std::vector<peal::RealBlock<double>> rb;
  for (int i = 0; i < 37; ++i) rb.emplace_back(0.005 * std::sin(1.0 + i));
  check(peal::Bank<peal::RealBlock<double>>(rb), "RealBlock bank");
  const auto comp = peal::compose(
      peal::JordanBlock<3, double>(-0.01), peal::RotationJordanBlock<2, double>(0.7, -0.02),
      rope_bank(6, 100.0, Layout::HalfSplit), peal::RealBlock<double>(0.01));
  check(comp, "composition with Jordan blocks");
  Eigen::MatrixXd P = Eigen::MatrixXd::Identity(comp.dim(), comp.dim());
  for (Index i = 0; i < P.rows(); ++i) P(i, (i + 1) % P.rows()) = 0.25;
  check(peal::change_basis(comp, P), "basis change");
}
