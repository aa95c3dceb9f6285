// Tests of the block protocol (include/peal/block_traits.hpp, docs/design.md "Adding a block
// type"): a block type defined here, by its class (deriving from peal::Encoding as the
// built-in blocks do) and its peal::block_traits specialisation and nothing else, gets the
// fused scores kernel's tabulated path (FixedBlocksCoder, not the per-row FallbackCoder) and
// its table caching, alone, in a Bank, and composed with peal's own blocks. Scores are
// compared with a per-pair long double reference (the same block in long double, through
// enc.score: the lag t − s, never F(t) and G(s)); encode_queries/encode_keys with F/G.
//
// Tolerance (per score, as tests/test_scores.cpp): |out − ref| <= Tol<C>::fused_score(d)
// |q_i| ‖A(τ)‖ |k_j| + Tol<Out>::stored() |ref|, ‖A(τ)‖ = max(1, max_b e^{a_b τ}) for these
// block-diagonal rotations and scales (each block's A is e^{aτ} times an orthogonal matrix).
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <peal/encode.hpp>
#include <peal/encode_backward.hpp>
#include <peal/peal.hpp>
#include <peal/scores.hpp>
#include <random>
#include <type_traits>
#include <vector>

#include "kernel_catalogue.hpp"
#include "tolerances.hpp"

namespace toy {

/// ScaledRotation{a, w}: X = [[a, w], [−w, a]], A(τ) = e^{aτ} R(−wτ) = e^{aτ} [[c, s], [−s, c]],
/// (c, s) = (cos wτ, sin wτ). Its own parameter layout (a first, one frequency) and its own
/// angle evaluation (wτ in long double), unknown to peal's kernels.
template <class S = double>
class ScaledRotation : public peal::Encoding<ScaledRotation<S>, S> {
 public:
  using Real = peal::real_t<S>;
  static constexpr int Dim = 2;
  static constexpr int n_params = 2;  // a, w
  using MatrixType = Eigen::Matrix<S, 2, 2>;
  using Params = std::array<Real, n_params>;

  ScaledRotation(Real a, Real w) : a_(a), w_(w) {}
  static ScaledRotation from_params(const Params& p) { return ScaledRotation(p[0], p[1]); }
  Params params() const { return {a_, w_}; }
  Real a() const { return a_; }
  Real w() const { return w_; }
  static constexpr int dim() { return Dim; }

  MatrixType generator() const {
    MatrixType x;
    x << S(a_), S(w_), S(-w_), S(a_);
    return x;
  }
  MatrixType A(Real tau) const {
    const long double th = (long double)w_ * tau, g = std::exp((long double)a_ * tau);
    const long double c = std::cos(th), s = std::sin(th);
    MatrixType m;
    m << S(g * c), S(g * s), S(-g * s), S(g * c);
    return m;
  }
  template <class V>
  void apply(V&& v, Real tau, bool transpose) const {
    const MatrixType m = A(tau);
    const S x0 = v(0), x1 = v(1);
    v(0) = transpose ? m(0, 0) * x0 + m(1, 0) * x1 : m(0, 0) * x0 + m(0, 1) * x1;
    v(1) = transpose ? m(0, 1) * x0 + m(1, 1) * x1 : m(1, 0) * x0 + m(1, 1) * x1;
  }
  /// ∂A(τ)/∂a = τ A(τ) (k = 0); ∂A(τ)/∂w = τ J A(τ), J = [[0, 1], [−1, 0]] (k = 1).
  MatrixType dA(Real tau, int k) const {
    const MatrixType m = A(tau);
    if (k == 0) return MatrixType(m * S(tau));
    MatrixType j;
    j << S(0), S(1), S(-1), S(0);
    return MatrixType(j * m * S(tau));
  }

 private:
  Real a_, w_;
};

/// The same block without traits: peal takes the per-row fallback.
struct Untraited : ScaledRotation<double> {
  using ScaledRotation<double>::ScaledRotation;
  static Untraited from_params(const Params& p) { return Untraited(p[0], p[1]); }
};

}  // namespace toy

// The block's batch-kernel facts, beside it (block_traits.hpp).
template <class S>
struct peal::block_traits<toy::ScaledRotation<S>> {
  using B = toy::ScaledRotation<S>;
  static constexpr int dim = 2;
  static constexpr int degree = 0;
  static constexpr bool per_pair_polynomial = false;
  static double rate(const B& b) { return std::abs(double(b.a())); }
  static void factors(const B& b, double d, double& g, double* P) {
    const long double th = (long double)b.w() * d;
    g = std::exp(double(b.a()) * d);
    const double c = double(std::cos(th)), s = double(std::sin(th));
    P[0] = c, P[1] = s, P[2] = -s, P[3] = c;
  }
  static void signature(const B& b, std::vector<double>& sig) {
    sig.push_back(double(b.a()));
    sig.push_back(double(b.w()));
  }
  // Its trainable parameters (parameters.hpp), in its own order: a, then w.
  static constexpr int n_parameters = 2;
  static const char* parameter_name(int k) { return k == 0 ? "a" : "w"; }
  static long double parameter(const B& b, int k) { return k == 0 ? b.a() : b.w(); }
  static B with_parameters(const B&, const long double* th) {
    return B(peal::real_t<S>(th[0]), peal::real_t<S>(th[1]));
  }
};

namespace {

using peal::Index;
using peal::Positions;
using peal::ScoreOptions;
using peal_test::Tol;
namespace sk = peal::detail::scores_kernels;
using Toy = toy::ScaledRotation<double>;
using ToyL = toy::ScaledRotation<long double>;

std::vector<Toy> toy_blocks(int n) {
  std::vector<Toy> b;
  for (int i = 0; i < n; ++i) b.emplace_back(-0.003 * (i % 3), 0.7 / (1 + i));
  return b;
}
std::vector<ToyL> toy_blocks_ld(int n) {
  std::vector<ToyL> b;
  for (const auto& x : toy_blocks(n)) b.emplace_back(x.a(), x.w());
  return b;
}
template <class S>
std::vector<peal::RotationBlock<S>> rope_blocks(int n) {
  std::vector<peal::RotationBlock<S>> b;
  for (int i = 0; i < n; ++i) b.emplace_back(std::pow(10000.0L, -1.0L * i / n), -0.001 * i);
  return b;
}

/// out from peal::scores against the long double per-pair reference of the twin encoding.
template <class T, class E, class EL>
void check_against_reference(const E& enc, const EL& ref_enc, Index nq, Index nk, Index H,
                             const std::vector<double>& tq, const std::vector<double>& tk,
                             double rate, std::mt19937& rng) {
  const Index d = Index(enc.dim());
  std::normal_distribution<double> N(0.0, 1.0);
  std::vector<T> q(std::size_t(nq * H * d)), k(std::size_t(nk * H * d));
  for (auto& x : q) x = T(N(rng));
  for (auto& x : k) x = T(N(rng));
  std::vector<T> out(std::size_t(H * nq * nk));
  ScoreOptions opt;
  opt.query_tile = 16;  // several tiles, regular and not
  opt.key_tile = 32;
  peal::scores(enc, peal::make_view<const T>(q.data(), nq, H, d), Positions(tq),
               peal::make_view<const T>(k.data(), nk, H, d), Positions(tk),
               peal::make_view(out.data(), H, nq, nk), opt);
  using C = sk::arith_t<T, T>;
  const double per_score = double(Tol<C>::fused_score(long(d)));
  Index bad = 0;
  double worst = 0;
  peal::Vector<long double> qv(d), kv(d);
  for (Index h = 0; h < H; ++h)
    for (Index i = 0; i < nq; ++i)
      for (Index j = 0; j < nk; ++j) {
        for (Index e = 0; e < d; ++e) {
          qv(e) = (long double)q[std::size_t((i * H + h) * d + e)];
          kv(e) = (long double)k[std::size_t((j * H + h) * d + e)];
        }
        const double tau = tq[std::size_t(i)] - tk[std::size_t(j)];
        const double want = double(ref_enc.score(qv, tq[std::size_t(i)], kv, tk[std::size_t(j)]));
        const double M = double(qv.norm() * kv.norm()) * std::max(1.0, std::exp(rate * std::abs(tau)));
        const double got = double(out[std::size_t((h * nq + i) * nk + j)]);
        const double err = std::abs(got - want);
        worst = std::max(worst, err / M);
        bad += !(err <= per_score * M + double(Tol<T>::stored()) * std::abs(want));
      }
  INFO("worst |err| / (|q| ||A|| |k|) = " << worst << ", allowed " << per_score);
  CHECK(bad == 0);
}

std::vector<double> regular(Index n, double start, double step) {
  std::vector<double> p(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i) p[std::size_t(i)] = start + step * double(i);
  return p;
}
std::vector<double> irregular(Index n, double start, std::mt19937& rng) {
  std::uniform_real_distribution<double> gap(0.1, 3.0);
  std::vector<double> p(static_cast<std::size_t>(n));
  double t = start;
  for (auto& x : p) x = t, t += gap(rng);
  return p;
}

/// Every configuration of the test for one storage type T.
template <class T>
void check_all(std::mt19937& rng) {
  const Toy lone(-0.01, 0.9);
  const ToyL lone_ld(-0.01, 0.9);
  const peal::Bank<Toy> bank(toy_blocks(5), peal::Layout::HalfSplit);
  const peal::Bank<ToyL> bank_ld(toy_blocks_ld(5), peal::Layout::HalfSplit);
  const auto mix = peal::compose(bank, peal::Bank<peal::RotationBlock<double>>(rope_blocks<double>(3)),
                                 peal::PassThrough<double>(3), lone);
  const auto mix_ld = peal::compose(
      bank_ld, peal::Bank<peal::RotationBlock<long double>>(rope_blocks<long double>(3)),
      peal::PassThrough<long double>(3), lone_ld);
  for (int pos = 0; pos < 2; ++pos) {
    const Index nq = 37, nk = 45;
    const std::vector<double> tq = pos ? irregular(nq, 12.0, rng) : regular(nq, 12.0, 1.0);
    const std::vector<double> tk = pos ? irregular(nk, 0.0, rng) : regular(nk, 0.0, 1.0);
    INFO((pos ? "irregular" : "regular") << " positions");
    {
      INFO("alone");
      check_against_reference<T>(lone, lone_ld, nq, nk, 2, tq, tk, 0.01, rng);
    }
    {
      INFO("in a Bank");
      check_against_reference<T>(bank, bank_ld, nq, nk, 2, tq, tk, 0.006, rng);
    }
    {
      INFO("composed with a RotationBlock bank and PassThrough");
      check_against_reference<T>(mix, mix_ld, nq, nk, 2, tq, tk, 0.01, rng);
    }
  }
}

}  // namespace

TEST_CASE("block protocol: a block with traits takes the tabulated scores path", "[protocol]") {
  // The traits-driven coder, not the per-row fallback; without traits, the fallback.
  STATIC_REQUIRE(peal::detail::has_block_traits<Toy>::value);
  STATIC_REQUIRE_FALSE(peal::detail::has_block_traits<toy::Untraited>::value);
  STATIC_REQUIRE(std::is_same<sk::coder_t<float, Toy>, sk::FixedBlocksCoder<float, Toy>>::value);
  STATIC_REQUIRE(std::is_same<sk::coder_t<double, peal::Bank<Toy>>,
                              sk::FixedBlocksCoder<double, Toy>>::value);
  STATIC_REQUIRE(std::is_same<sk::coder_t<float, toy::Untraited>,
                              sk::FallbackCoder<float, toy::Untraited>>::value);
  STATIC_REQUIRE(std::is_same<sk::coder_t<float, peal::Bank<toy::Untraited>>,
                              sk::FallbackCoder<float, peal::Bank<toy::Untraited>>>::value);
  using Mix = peal::BlockDiagonal<peal::Bank<Toy>, peal::PassThrough<double>>;
  STATIC_REQUIRE(std::is_same<typename sk::scores_split<float, Mix>::coder,
                              sk::BlockDiagonalCoder<float, false, peal::Bank<Toy>,
                                                     peal::PassThrough<double>>>::value);
  // A rotation is not a Jordan chain: never evaluated per pair.
  STATIC_REQUIRE_FALSE(sk::scores_split<float, Mix>::value);
  // encode reads the same coders (CoderKernel): the traits' table alone and in a Bank, the
  // encoding's own apply() per head without traits; a long double encoding keeps its
  // precision in the dense per-token kernel.
  namespace ek = peal::detail::encode_kernels;
  STATIC_REQUIRE(std::is_same<ek::kernel_t<float, Toy>, ek::CoderKernel<float, Toy>>::value);
  STATIC_REQUIRE(std::is_same<ek::kernel_t<double, peal::Bank<Toy>>,
                              ek::CoderKernel<double, peal::Bank<Toy>>>::value);
  STATIC_REQUIRE(std::is_same<ek::kernel_t<float, toy::Untraited>,
                              ek::CoderKernel<float, toy::Untraited>>::value);
  STATIC_REQUIRE(std::is_same<ek::kernel_t<float, Mix>, ek::CoderKernel<float, Mix>>::value);
  STATIC_REQUIRE(std::is_same<ek::kernel_t<float, ToyL>, ek::DenseKernel<float, ToyL>>::value);
  // The traits the coder reads.
  const peal::Bank<Toy> bank(toy_blocks(4));
  const sk::FixedBlocksCoder<double, Toy> coder(bank);
  CHECK(coder.rate() == 0.006);
  CHECK(coder.degree() == 0);
  CHECK(coder.dim() == 8);
}

TEST_CASE("block protocol: scores of a user block match the per-pair reference, float",
          "[protocol]") {
  std::mt19937 rng(41);
  check_all<float>(rng);
}

TEST_CASE("block protocol: scores of a user block match the per-pair reference, double",
          "[protocol]") {
  std::mt19937 rng(43);
  check_all<double>(rng);
}

TEST_CASE("block protocol: tables of a user block are cached by its signature", "[protocol]") {
  std::mt19937 rng(47);
  const Index n = 40, H = 1;
  std::vector<float> q(std::size_t(n * H * 8)), k(q.size());
  std::normal_distribution<float> N(0.0f, 1.0f);
  for (auto& x : q) x = N(rng);
  for (auto& x : k) x = N(rng);
  auto run = [&](const auto& enc) {
    std::vector<float> o(std::size_t(H * n * n));
    peal::scores(enc, peal::make_view<const float>(q.data(), n, H, 8),
                 Positions::sequence(0.0), peal::make_view<const float>(k.data(), n, H, 8),
                 Positions::sequence(0.0), peal::make_view(o.data(), H, n, n));
    return o;
  };
  std::vector<Toy> other = toy_blocks(4);
  other[2] = Toy(other[2].a(), other[2].w() * 1.01);  // one frequency differs
  const peal::Bank<Toy> a(toy_blocks(4)), b(other);
  const auto a1 = run(a);
  CHECK_FALSE(sk::table_cache<float>().key.empty());  // signature(): cacheable
  const auto b1 = run(b);
  const auto a2 = run(a);
  CHECK(a1 == a2);  // bitwise: the same tables, cached or recomputed
  CHECK(a1 != b1);  // the signature tells the two banks apart
  // Without traits: never cached.
  std::vector<toy::Untraited> u;
  for (const auto& x : toy_blocks(4)) u.emplace_back(x.a(), x.w());
  const auto u1 = run(peal::Bank<toy::Untraited>(u));
  CHECK(sk::table_cache<float>().key.empty());
  // The same scores through the fallback: each within fused_score(8) |q_i| ‖A(τ)‖ |k_j| of the
  // exact value, ‖A(τ)‖ <= e^{0.006 |τ|}.
  Index bad = 0;
  for (Index i = 0; i < n; ++i)
    for (Index j = 0; j < n; ++j) {
      const double qn = Eigen::Map<const Eigen::VectorXf>(q.data() + i * 8, 8).cast<double>().norm();
      const double kn = Eigen::Map<const Eigen::VectorXf>(k.data() + j * 8, 8).cast<double>().norm();
      const double M = qn * kn * std::exp(0.006 * double(std::abs(i - j)));
      const std::size_t x = std::size_t(i * n + j);
      bad += !(std::abs(double(u1[x]) - double(a1[x])) <= 2 * double(Tol<float>::fused_score(8)) * M);
    }
  CHECK(bad == 0);
}

TEST_CASE("block protocol: encode_queries and encode_keys of a user block match F and G",
          "[protocol]") {
  std::mt19937 rng(53);
  const auto enc = peal::compose(peal::Bank<Toy>(toy_blocks(3)), peal::PassThrough<double>(2));
  const Index n = 9, H = 2, d = Index(enc.dim());
  std::vector<double> tq = irregular(n, -5.0, rng);
  std::normal_distribution<double> N(0.0, 1.0);
  std::vector<double> x(std::size_t(n * H * d));
  for (auto& v : x) v = N(rng);
  std::vector<double> q = x, k = x;
  peal::encode_queries(enc, peal::make_view(q.data(), n, H, d), Positions(tq));
  peal::encode_keys(enc, peal::make_view(k.data(), n, H, d), Positions(tq));
  for (Index i = 0; i < n; ++i) {
    const Eigen::MatrixXd F = enc.F(tq[std::size_t(i)]), G = enc.G(tq[std::size_t(i)]);
    for (Index h = 0; h < H; ++h) {
      const Eigen::Map<const Eigen::VectorXd> xi(x.data() + (i * H + h) * d, d);
      const Eigen::VectorXd fq = F * xi, gk = G * xi;
      const Eigen::VectorXd mq = F.cwiseAbs() * xi.cwiseAbs(), mk = G.cwiseAbs() * xi.cwiseAbs();
      for (Index e = 0; e < d; ++e) {
        const double tol = double(Tol<double>::kernel_entry(2));
        CHECK(std::abs(q[std::size_t((i * H + h) * d + e)] - fq(e)) <= tol * mq(e));
        CHECK(std::abs(k[std::size_t((i * H + h) * d + e)] - gk(e)) <= tol * mk(e));
      }
    }
  }
}

TEST_CASE("block protocol: a user block's parameters, derivatives and encode backward",
          "[protocol]") {
  // The toy block states its parameters and dA(τ, k) beside itself; peal's parameter layout,
  // derivatives and encode backward follow, in a Bank and composed with pass-through.
  const auto enc = peal::compose(peal::Bank<Toy>(toy_blocks(2)), peal::PassThrough<double>(1));
  const auto twin = peal::compose(peal::Bank<ToyL>(toy_blocks_ld(2)), peal::PassThrough<long double>(1));
  const peal::ParameterSet p = peal::parameters(enc);
  CHECK(p.names == std::vector<std::string>{"part[0].block[0].a", "part[0].block[1].a",
                                            "part[0].block[0].w", "part[0].block[1].w"});
  // ∂A/∂θ_k against the fourth-order central difference of the twin (test_derivatives.cpp).
  const double tau = -3.25;
  const auto d = peal::dA(enc, tau);
  const long double h = Tol<double>::derivative_step(tau);
  for (std::size_t k = 0; k < p.size(); ++k) {
    auto at = [&](long double delta) {
      std::vector<long double> th = p.values;
      th[k] += delta;
      return peal::Matrix<long double>(peal::with_parameters(twin, th).A(tau));
    };
    auto cd = [&](long double hh) {
      return peal::Matrix<long double>((8 * (at(hh) - at(-hh)) - (at(2 * hh) - at(-2 * hh))) / (12 * hh));
    };
    const peal::Matrix<long double> dh = cd(h), d2h = cd(2 * h), a = twin.A(tau);
    const long double am = a.cwiseAbs().maxCoeff();
    const long double tol = Tol<double>::derivative_tol(
        5, 0.7L * std::abs(tau) * 5, (1 + std::abs(tau)) * am, am, h,
        (dh - d2h).cwiseAbs().maxCoeff());
    CHECK((d[k].cast<long double>() - dh).cwiseAbs().maxCoeff() <= tol);
  }
  // encode_keys_backward: dk = G(s)ᵀ g and Σ_h g_hᵀ ∂G(s)/∂θ_k k_h from the dense derivatives.
  std::mt19937 rng(71);
  std::normal_distribution<double> N(0.0, 1.0);
  const Index n = 5, H = 2, dm = Index(enc.dim());
  const std::vector<double> s = irregular(n, 2.0, rng);
  std::vector<double> k(std::size_t(n * H * dm)), g(k.size()), dk(k.size());
  for (auto& v : k) v = N(rng);
  for (auto& v : g) v = N(rng);
  std::vector<double> gp(p.size(), 0.0);
  peal::encode_keys_backward(enc, peal::make_view(k.data(), n, H, dm), Positions(s),
                             peal::make_view(g.data(), n, H, dm), peal::make_view(dk.data(), n, H, dm),
                             {&gp});
  std::vector<long double> ref(p.size(), 0.0L), mag(p.size(), 0.0L);
  for (Index i = 0; i < n; ++i) {
    const long double si = s[std::size_t(i)];
    const peal::Matrix<long double> G = twin.G(si);
    const auto dg = peal::dA(twin, -si);
    for (Index hh = 0; hh < H; ++hh) {
      const Eigen::Map<const Eigen::VectorXd> ki(k.data() + (i * H + hh) * dm, dm),
          gi(g.data() + (i * H + hh) * dm, dm);
      const Eigen::VectorXd got = Eigen::Map<const Eigen::VectorXd>(dk.data() + (i * H + hh) * dm, dm);
      const peal::Vector<long double> want = G.transpose() * gi.cast<long double>();
      const peal::Vector<long double> m = G.transpose().cwiseAbs() * gi.cwiseAbs().cast<long double>();
      for (Index e = 0; e < dm; ++e)
        CHECK(std::abs(got(e) - want(e)) <= Tol<double>::kernel_entry(2) * m(e));
      for (std::size_t kk = 0; kk < p.size(); ++kk) {
        ref[kk] += gi.cast<long double>().dot(dg[kk] * ki.cast<long double>());
        mag[kk] += gi.cwiseAbs().sum() * ki.cwiseAbs().sum() * (1 + std::abs(si)) *
                   G.cwiseAbs().maxCoeff();
      }
    }
  }
  for (std::size_t kk = 0; kk < p.size(); ++kk)
    CHECK(std::abs(gp[kk] - ref[kk]) <=
          (Tol<double>::derivative(int(dm), 0.7L * 2 * dm) + Tol<double>::roundings(int(n))) * mag[kk]);
}

TEST_CASE("block protocol: attention of a user block matches softmax of the reference", "[protocol]") {
  // The same block, through peal::attention (the tile driver's attention sink): softmax of
  // the long double twin's scores times V, causal, at irregular positions, grouped heads.
  std::mt19937 rng(11);
  const peal::Bank<Toy> bank(toy_blocks(4), peal::Layout::Interleaved);
  const peal::Bank<ToyL> bank_ld(toy_blocks_ld(4), peal::Layout::Interleaved);
  const auto mix = peal::compose(bank, peal::PassThrough<double>(2));
  const auto mix_ld = peal::compose(bank_ld, peal::PassThrough<long double>(2));
  const Index n = 70, Hq = 4, Hk = 2, G = Hq / Hk, d = Index(mix.dim()), dv = 5;
  const std::vector<double> t = irregular(n, 3.0, rng);
  std::normal_distribution<double> N(0.0, 1.0);
  std::vector<float> q(std::size_t(n * Hq * d)), k(std::size_t(n * Hk * d)), v(std::size_t(n * Hk * dv));
  for (auto* b : {&q, &k, &v})
    for (auto& x : *b) x = float(N(rng));
  std::vector<float> out(std::size_t(n * Hq * dv));
  peal::AttentionOptions opt;
  opt.causal = true;
  opt.query_tile = 16;
  opt.key_tile = 32;
  peal::attention(mix, peal::make_view<const float>(q.data(), n, Hq, d), Positions(t),
                  peal::make_view<const float>(k.data(), n, Hk, d), Positions(t),
                  peal::make_view<const float>(v.data(), n, Hk, dv),
                  peal::make_view(out.data(), n, Hq, dv), opt);
  using T = Tol<float>;
  const long double scale = 1.0L / std::sqrt((long double)d);
  Index bad = 0;
  peal::Vector<long double> qv(d), kv(d);
  for (Index h = 0; h < Hq; ++h)
    for (Index i = 0; i < n; ++i) {
      for (Index e = 0; e < d; ++e) qv(e) = q[std::size_t((i * Hq + h) * d + e)];
      std::vector<long double> x(std::size_t(n), -INFINITY);
      long double mx = -INFINITY, delta = 0, L = 0;
      for (Index j = 0; j < n && t[std::size_t(j)] <= t[std::size_t(i)]; ++j) {
        for (Index e = 0; e < d; ++e) kv(e) = k[std::size_t((j * Hk + h / G) * d + e)];
        x[std::size_t(j)] = scale * mix_ld.score(qv, t[std::size_t(i)], kv, t[std::size_t(j)]);
        mx = std::max(mx, x[std::size_t(j)]);
        L = std::max(L, std::abs(x[std::size_t(j)]));
        // |q| ||A|| |k| with ||A(tau)|| <= e^{0.006 |tau|} (the bank's rate)
        const long double M = qv.norm() * kv.norm() *
                              std::exp(0.006L * (t[std::size_t(i)] - t[std::size_t(j)]));
        delta = std::max(delta, scale * T::fused_score(long(d)) * M);
      }
      delta += T::attention_exponent(L);
      long double l = 0;
      std::vector<long double> o(std::size_t(dv), 0), vmax(std::size_t(dv), 0);
      for (Index j = 0; j < n; ++j) {
        if (!(x[std::size_t(j)] > -INFINITY)) continue;
        const long double p = std::exp(x[std::size_t(j)] - mx);
        l += p;
        for (Index e = 0; e < dv; ++e) {
          const long double ve = v[std::size_t((j * Hk + h / G) * dv + e)];
          o[std::size_t(e)] += p * ve;
          vmax[std::size_t(e)] = std::max(vmax[std::size_t(e)], std::abs(ve));
        }
      }
      for (Index e = 0; e < dv; ++e) {
        const long double want = o[std::size_t(e)] / l;
        const long double got = out[std::size_t((i * Hq + h) * dv + e)];
        const long double tol = T::attention_out(delta, 32, 3, vmax[std::size_t(e)]) +
                                T::stored() * std::abs(want);
        bad += !(std::abs(got - want) <= tol);
      }
    }
  CHECK(bad == 0);
}

namespace {

// What block_traits_base<B> gives a block: its Dim, and a signature that is its params()
// (so two blocks whose A(δ) differ have different signatures, and tables are not shared).
template <class B>
void check_base_traits(const B& b, const B& other) {
  using T = peal::block_traits<B>;
  STATIC_REQUIRE(T::dim == B::Dim);
  std::vector<double> sig, sig_other;
  T::signature(b, sig);
  T::signature(other, sig_other);
  const auto p = b.params();
  REQUIRE(sig.size() == p.size());
  for (std::size_t i = 0; i < p.size(); ++i) CHECK(sig[i] == double(p[i]));
  CHECK(sig != sig_other);
}

}  // namespace

TEST_CASE("block protocol: the blocks' traits from block_traits_base", "[protocol]") {
  const double up = std::nextafter(0.5, 1.0);  // one ulp apart
  check_base_traits(peal::RealBlock<double>(-0.5), peal::RealBlock<double>(-up));
  check_base_traits(peal::RotationBlock<double>(0.5, -0.01), peal::RotationBlock<double>(up, -0.01));
  check_base_traits(peal::RotationBlock<float>(0.5, -0.01), peal::RotationBlock<float>(0.5, -0.02));
  check_base_traits(peal::JordanBlock<3, double>(-0.5), peal::JordanBlock<3, double>(-up));
  check_base_traits(peal::RotationJordanBlock<2, double>(0.5, 0.0),
                    peal::RotationJordanBlock<2, double>(0.5, -1e-300));
  // What the Jordan blocks state themselves: their degree and, for real chains, per pair.
  using peal::detail::block_degree_of;
  CHECK(block_degree_of(peal::RealBlock<double>(0.1)) == 0);
  CHECK(block_degree_of(peal::RotationBlock<double>(0.1, 0.0)) == 0);
  CHECK(block_degree_of(peal::JordanBlock<3, double>(0.1)) == 2);
  CHECK(block_degree_of(peal::JordanBlock<1, double>(0.1)) == 0);
  CHECK(block_degree_of(peal::RotationJordanBlock<2, double>(0.1, 0.0)) == 1);
  STATIC_REQUIRE(peal::block_traits<peal::JordanBlock<3, double>>::per_pair_polynomial);
  STATIC_REQUIRE_FALSE(peal::block_traits<peal::JordanBlock<1, double>>::per_pair_polynomial);
  STATIC_REQUIRE_FALSE(peal::block_traits<peal::RotationJordanBlock<2, double>>::per_pair_polynomial);
  STATIC_REQUIRE_FALSE(peal::block_traits<peal::RotationBlock<float>>::per_pair_polynomial);
}
