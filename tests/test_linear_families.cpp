// peal::linear_attention (include/peal/linear_attention.hpp) on every encoding family of
// tests/families.hpp whose generator has no eigenvalue with a positive real part (decided from
// the encoding: linear_suite.hpp's max_real_part; draws with growth are skipped, and a family
// that always grows is shown to be rejected): the parallel, chunkwise (chunks 1, 7, 64, n) and
// recurrent forms against the naive long double double sum, at n = 1, 2, 63, 64, 65 (1000 for
// three families), regular, irregular (gaps 1e-3 .. 1e3) and large (~1.7e9) positions, GQA
// (Hq = 2 Hk), dv != d, per-head decays and a negative scale, float and double storage in packed,
// padded, offset, element-stride-2 and head-major views. Bound: Tol<C>::linear_out
// (tests/tolerances.hpp). This file: the banks and the rejection of growth; compositions, a basis
// change and the presets: tests/test_linear_compositions.cpp (the driver of both:
// tests/linear_family_run.hpp). Other storage types, the state, and the special cases:
// tests/test_linear_attention.cpp.
#include <Eigen/Eigenvalues>
#include <catch2/catch.hpp>

#include "linear_family_run.hpp"

using namespace peal_test;
using namespace peal_test::linear;
using peal::Layout;

namespace {

// A family whose generator always has an eigenvalue with a positive real part (lambda in
// [0.05, 0.55]): the selection must reject every draw.
struct GrowingFam {
  static constexpr const char* name = "growing RealBlock";
  template <class S>
  static auto build(Draw& d) {
    return peal::compose(peal::RotationBlock<S>(d.omega(), -0.1),
                         peal::RealBlock<S>(0.05 + std::abs(d.real())));
  }
};

}  // namespace

TEST_CASE("linear families: the selection by eigenvalues rejects growth", "[linear]") {
  CAPTURE(GrowingFam::name);
  const auto g = twins_without_growth<GrowingFam>(7, Regime::Random, 64);
  CHECK_FALSE(g.found);
  CHECK(max_real_part(g.el) > 0);
  // The generator's eigenvalues agree with the structural decision (diagonalizable here).
  const auto ev = Eigen::EigenSolver<Eigen::MatrixXd>(peal::Matrix<double>(g.e.generator()))
                      .eigenvalues();
  CHECK(ev.real().maxCoeff() == Approx(double(max_real_part(g.el))).epsilon(1e-12));
  // Mixed draws real parts of both signs: some draws are rejected before one is accepted.
  const auto m = twins_without_growth<MixedFam>(11, Regime::Random);
  CHECK(m.found);
  CHECK(m.draws > 1);
  CHECK(max_real_part(m.el) <= 0);
}

TEST_CASE("linear families: rotation banks", "[linear]") {
  run_family<BankFam<RotationFam, Layout::Interleaved>>(401, false);
  run_family<BankFam<RotationFam, Layout::HalfSplit, 5>>(402, false);
}
TEST_CASE("linear families: real, Jordan and rotation-Jordan banks", "[linear]") {
  run_family<BankFam<RealFam, Layout::Interleaved, 5>>(403, true);
  run_family<BankFam<JordanFam<3>, Layout::HalfSplit, 3>>(404, false);
  run_family<BankFam<RotationJordanFam<2>, Layout::Interleaved, 2>>(405, false);
}
