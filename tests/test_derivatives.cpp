// Tests of include/peal/derivatives.hpp: ∂A(τ)/∂θ_k and ∂A(τ)/∂τ of every block type, of
// banks in both layouts and of the presets of tests/families.hpp (RoPE with scaling and
// partial rotary, xPos, RetNet, ALiBi's Jordan block) against a fourth-order central difference
// of the long double twin, in the regimes of the property suite (zero, tiny, random and large
// parameters and times), and the bilinear form the kernels use against the dense matrices
// (tests/derivative_check.hpp). The compositions are in test_derivatives_compositions.cpp.
#include <cmath>
#include <tuple>

#include "derivative_check.hpp"

using namespace peal_test;
using peal_test::derivative_check::run_family;

namespace {

using RotationBank = BankFam<RotationFam, peal::Layout::HalfSplit, 4>;
using JordanBank = BankFam<JordanFam<2>, peal::Layout::Interleaved, 3>;
using RopeDefault = RopeFam<peal::RopeType::Default, peal::Layout::HalfSplit, 16>;
using RopeYarnPartial = RopeFam<peal::RopeType::Yarn, peal::Layout::Interleaved, 16, 50>;
using RopeLlama3 = RopeFam<peal::RopeType::Llama3, peal::Layout::HalfSplit, 32>;
using BlockCases = std::tuple<RealFam, RotationFam, JordanFam<1>, JordanFam<3>,
                              RotationJordanFam<1>, RotationJordanFam<3>>;
using BankCases = std::tuple<RotationBank, JordanBank>;
using PresetCases =
    std::tuple<RopeDefault, RopeYarnPartial, RopeLlama3, XposFam, RetNetFam<1>, AlibiFam>;

}  // namespace

TEMPLATE_LIST_TEST_CASE("derivatives: blocks against central differences", "[derivatives]",
                        BlockCases) {
  run_family<TestType>();
}
TEMPLATE_LIST_TEST_CASE("derivatives: banks against central differences", "[derivatives]",
                        BankCases) {
  run_family<TestType>();
}
TEMPLATE_LIST_TEST_CASE("derivatives: presets against central differences", "[derivatives]",
                        PresetCases) {
  run_family<TestType>();
}

TEST_CASE("derivatives: the closed forms of the blocks at a stated point", "[derivatives]") {
  // RotationBlock{ω = 0.5, a = −0.1} at τ = 2: A = e^{−0.2} [[c, s], [−s, c]], c = cos 1,
  // s = sin 1; ∂/∂ω = 2 e^{−0.2} [[−s, c], [−c, −s]], ∂/∂a = 2 A.
  const peal::RotationBlock<double> r(0.5L, -0.1);
  const auto d = peal::dA(r, 2.0);
  const double g = std::exp(-0.2), c = std::cos(1.0), s = std::sin(1.0);
  CHECK(d[0](0, 0) == Approx(-2 * g * s).epsilon(1e-15));
  CHECK(d[0](0, 1) == Approx(2 * g * c).epsilon(1e-15));
  CHECK(d[0](1, 0) == Approx(-2 * g * c).epsilon(1e-15));
  CHECK(d[1](0, 1) == Approx(2 * g * s).epsilon(1e-15));
  // JordanBlock<2>{0} (ALiBi's): A = [[1, τ], [0, 1]], ∂/∂λ = τ A.
  const auto j = peal::dA(peal::JordanBlock<2, double>(0.0), 3.0);
  CHECK(j[0](0, 0) == 3.0);
  CHECK(j[0](0, 1) == 9.0);
  CHECK(j[0](1, 0) == 0.0);
  CHECK_THROWS_AS(peal::dA(r, std::nan("")), peal::invalid_argument);
}
