// Tests of the block protocol (include/peal/block_traits.hpp, docs/design.md "Adding a block
// type"): a block type defined by its class and its peal::block_traits specialisation and
// nothing else (tests/toy_block.hpp) gets every kernel, alone, in a Bank, and composed with
// peal's own blocks. Its families run the suites every built-in block runs
// (tests/test_block_protocol_suites.cpp). Here: the dispatch (the tabulated coder, not the
// per-row fallback), its table caching, the fallback without traits, its parameters,
// derivatives and encode backward, and the traits that block_traits_base gives peal's own
// blocks.
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
#include "toy_block.hpp"

namespace {

using peal::Index;
using peal::Positions;
using peal::ScoreOptions;
using peal_test::Tol;
namespace sk = peal::detail::tiled;
namespace co = peal::detail::coders;
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
std::vector<double> irregular(Index n, double start, std::mt19937& rng) {
  std::uniform_real_distribution<double> gap(0.1, 3.0);
  std::vector<double> p(static_cast<std::size_t>(n));
  double t = start;
  for (auto& x : p) x = t, t += gap(rng);
  return p;
}

}  // namespace

TEST_CASE("block protocol: a block with traits takes the tabulated scores path", "[protocol]") {
  // The traits-driven coder, not the per-row fallback; without traits, the fallback.
  STATIC_REQUIRE(peal::detail::has_block_traits<Toy>::value);
  STATIC_REQUIRE_FALSE(peal::detail::has_block_traits<toy::Untraited>::value);
  STATIC_REQUIRE(std::is_same<co::coder_t<float, Toy>, co::FixedBlocksCoder<float, Toy>>::value);
  STATIC_REQUIRE(std::is_same<co::coder_t<double, peal::Bank<Toy>>,
                              co::FixedBlocksCoder<double, Toy>>::value);
  STATIC_REQUIRE(std::is_same<co::coder_t<float, toy::Untraited>,
                              co::FallbackCoder<float, toy::Untraited>>::value);
  STATIC_REQUIRE(std::is_same<co::coder_t<float, peal::Bank<toy::Untraited>>,
                              co::FallbackCoder<float, peal::Bank<toy::Untraited>>>::value);
  using Mix = peal::BlockDiagonal<peal::Bank<Toy>, peal::PassThrough<double>>;
  STATIC_REQUIRE(std::is_same<typename co::scores_split<float, Mix>::coder,
                              co::BlockDiagonalCoder<float, false, peal::Bank<Toy>,
                                                     peal::PassThrough<double>>>::value);
  // A rotation is not a Jordan chain: never evaluated per pair.
  STATIC_REQUIRE_FALSE(co::scores_split<float, Mix>::value);
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
  const co::FixedBlocksCoder<double, Toy> coder(bank);
  CHECK(coder.rate() == 0.006);
  CHECK(coder.degree() == 0);
  CHECK(coder.dim() == 8);
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
