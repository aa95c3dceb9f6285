// from_transition (include/peal/from_transition.hpp, docs/canonical-form.md §8): transition
// matrices M = P J_M P⁻¹ constructed with a random P of κ₂ = 10 and every kind of block of M
// (μ > 0, complex pairs with θ up to near π, pairs of negative eigenvalues and of negative
// Jordan chains, Jordan chains at μ > 0 and at a complex pair), orthogonal M, M = I, 1 × 1,
// the padding of an unpaired negative eigenvalue, and bad input. References: the known blocks
// of log J_M (principal branch), M itself (A(1) = M), and Mⁿ by binary powering in long double
// of the rounded M (A(n) = Mⁿ, n up to 10⁶).
//
// Bounds (u = ε_S / 2 of the input's scalar type, κ = κ₂(P) of the constructed basis, d the
// size, ν_M = ‖M‖_F, ν_X = ‖X‖_F of X = log M as reported, μ_min the smallest |eigenvalue|):
//   parameters: M is the rounding of P J_M P⁻¹ to S, a backward error ‖E‖ ≤ d u κ ν_M, which
//     moves an eigenvalue of a diagonalisable M (and the mean of a cluster) by ≤ κ ‖E‖
//     (Bauer–Fike); log moves it by 1/|μ| times that (the log-modulus and the angle alike):
//       parameter = 16 d κ² u ν_M / μ_min   (the 16 of test_canonical_form.cpp's bound);
//   A(1) against M: the decomposition is M' = P J_M P⁻¹ with ‖M' − M‖ ≤ residual ν_M (reported,
//     checked ≤ 16 d κ u like canonical_form's), then the encoding's own evaluation in S:
//       A1 = 16 d κ u ν_M + 8 u (d + ν_X) Σ(1),   Σ(τ) = ‖ |P̂| |A_Ĵ(τ)| |P̂⁻¹| ‖_F;
//   A(n) against Mⁿ, M with semisimple eigenvalues of modulus ~1: the encoding's evaluation
//     8 u (d + n ν_X) Σ(n) (canonical_form's expm bound at τ = n: the products and a phase
//     rounded to S); the parameters of M' instead of M, which run for n steps: n δ Σ(n) with
//     δ the largest parameter moved on purpose, read from the report (a log-modulus set to 0
//     within the zero tolerance: the block's a or λ against log|μ| of its source; two negative
//     eigenvalues paired at their mean: split / (2 |μ|)), plus the decomposition's long double
//     backward error moving an eigenvalue's logarithm by κ² ε_long ν_M / μ_min; and the
//     reference's own rounding, N = n products of d × d matrices in long double, norm-wise
//     through κ₂(P̂): matrix_chain(n, d)_long κ₂(P̂)² Σ(n).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <random>
#include <vector>

#include <peal/from_transition.hpp>

#include "canonical_bases.hpp"
#include "tolerances.hpp"

namespace test_from_transition {
namespace {

using Kind = peal::CanonicalBlock::Kind;
using MatL = Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic>;
using CL = std::complex<long double>;
using Catch::Matchers::Contains;
using peal_test::canonical::Basis;
using peal_test::canonical::random_basis;
using peal_test::canonical::random_orthogonal;
using peal_test::canonical::terms;
constexpr long double kPi = 3.141592653589793238462643383279502884L;
constexpr long double u_d = peal_test::Tol<double>::eps / 2;

/// One block of a constructed M: eigenvalue z, chain length k; pair form (a complex pair, or
/// two interleaved chains at a negative z) or real form.
struct MBlock {
  CL z;
  int k;
  bool pair;
  int size() const { return pair ? 2 * k : k; }
};

/// φ(x + iy) = [[x, y], [−y, x]] entrywise (docs/design.md §1's rotation generator).
MatL phi_of(const Eigen::Matrix<CL, Eigen::Dynamic, Eigen::Dynamic>& A) {
  MatL R(2 * A.rows(), 2 * A.cols());
  for (int i = 0; i < A.rows(); ++i)
    for (int j = 0; j < A.cols(); ++j) {
      R(2 * i, 2 * j) = R(2 * i + 1, 2 * j + 1) = A(i, j).real();
      R(2 * i, 2 * j + 1) = A(i, j).imag();
      R(2 * i + 1, 2 * j) = -A(i, j).imag();
    }
  return R;
}

/// J_M: zI + N per block (real form), or φ(zI + N) (pair form).
MatL make_JM(const std::vector<MBlock>& bs) {
  int n = 0;
  for (const auto& b : bs) n += b.size();
  MatL J = MatL::Zero(n, n);
  int o = 0;
  for (const auto& b : bs) {
    Eigen::Matrix<CL, Eigen::Dynamic, Eigen::Dynamic> C =
        Eigen::Matrix<CL, Eigen::Dynamic, Eigen::Dynamic>::Zero(b.k, b.k);
    for (int i = 0; i < b.k; ++i) {
      C(i, i) = b.z;
      if (i + 1 < b.k) C(i, i + 1) = 1;
    }
    if (b.pair)
      J.block(o, o, b.size(), b.size()) = phi_of(C);
    else
      J.block(o, o, b.k, b.k) = C.real();
    o += b.size();
  }
  return J;
}

/// The expected block of X = log M: principal Log z = log|z| + i arg z, arg ∈ (0, π].
struct Expect {
  Kind kind;
  int length;
  long double lambda, omega, a;
  long double mu_abs;  // |z|, for the parameter bound
};
Expect expected(const MBlock& b) {
  const long double lr = std::log(std::abs(b.z)), arg = std::arg(b.z);
  if (b.pair)
    return {b.k == 1 ? Kind::Rotation : Kind::RotationJordan, b.k, 0, arg, lr, std::abs(b.z)};
  if (b.k == 1 && lr == 0) return {Kind::PassThrough, 1, 0, 0, 0, 1};
  return {b.k == 1 ? Kind::Real : Kind::Jordan, b.k, lr, 0, 0, std::abs(b.z)};
}

/// Mⁿ by binary powering, in long double (products written as lazy products: no GEMM).
MatL ft_power(const MatL& M, long long n) {
  MatL R = MatL::Identity(M.rows(), M.cols()), B = M;
  while (n > 0) {
    if (n & 1) R = MatL(R.lazyProduct(B));
    n >>= 1;
    if (n > 0) B = MatL(B.lazyProduct(B));
  }
  return R;
}

/// A(n) against Mⁿ for small n, any M (chains too): the encoding is M' = M + E, ‖E‖_F ≤ e_norm,
/// and M'ⁿ − Mⁿ = Σ_j M'^j E M^(n−1−j), each power bounded by Σ(j) (|P A_J(j) P⁻¹| ≤
/// |P| |A_J(j)| |P⁻¹|): n e_norm max_j Σ(j) Σ(n−1−j), plus the evaluation 8 u (d + n ν_X) Σ(n).
long double ft_small_power_bound(const peal::TransitionForm<double>& tf, long long n, int d,
                                 long double e_norm) {
  long double worst = 0;
  for (long long j = 0; j < n; ++j)
    worst = std::max(worst, terms(tf.encoding, (long double)j) * terms(tf.encoding, (long double)(n - 1 - j)));
  return 8 * u_d * (d + n * tf.report.norm) * terms(tf.encoding, (long double)n) + n * e_norm * worst;
}

/// Every block found equals one expected (kind, length, parameters within tol / |z|), the
/// source of each block is its eigenvalue of M, blocks in the fixed order, contiguous.
void ft_check_blocks(const peal::TransitionForm<double>& tf, const std::vector<MBlock>& bs,
                     long double tol) {
  const auto& blocks = tf.report.blocks;
  REQUIRE(blocks.size() == bs.size());
  REQUIRE(tf.sources.size() == blocks.size());
  std::vector<bool> used(bs.size(), false);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const auto& b = blocks[i];
    const auto& s = tf.sources[i];
    INFO("block " << i << " kind " << int(b.kind) << " length " << b.length << " lambda "
                  << double(b.lambda) << " omega " << double(b.omega) << " a " << double(b.a)
                  << " from mu " << double(s.mu.real()) << " + " << double(s.mu.imag()) << "i");
    bool found = false;
    for (std::size_t j = 0; j < bs.size() && !found; ++j) {
      if (used[j]) continue;
      const Expect e = expected(bs[j]);
      const long double t = tol / e.mu_abs;
      if (b.kind == e.kind && b.length == e.length && std::abs(b.lambda - e.lambda) <= t &&
          std::abs(b.omega - e.omega) <= t && std::abs(b.a - e.a) <= t &&
          std::abs(s.mu - bs[j].z) <= tol && (s.chains == 2) == (bs[j].pair && bs[j].z.imag() == 0)) {
        used[j] = found = true;
      }
    }
    CHECK(found);
  }
  int first = 0;
  auto order = [](Kind k) { return k == Kind::Real ? 0 : k == Kind::Rotation ? 1 : k == Kind::Jordan ? 2 : k == Kind::RotationJordan ? 3 : 4; };
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    CHECK(blocks[i].first == first);
    first += blocks[i].size;
    if (i > 0)
      CHECK(std::make_pair(order(blocks[i - 1].kind), blocks[i - 1].length) <=
            std::make_pair(order(blocks[i].kind), blocks[i].length));
  }
}

TEST_CASE("from_transition: every kind of block of M through a random basis of condition 10",
          "[canonical]") {
  std::mt19937 rng(2023);
  const std::vector<MBlock> bs = {
      {CL(0.5L, 0), 1, false},                                  // decay
      {CL(2.0L, 0), 1, false},                                  // growth
      {std::polar(0.9L, 2.0L), 1, true},                        // damped rotation
      {std::polar(1.1L, kPi - 1e-3L), 1, true},                 // θ near π
      {std::polar(1.0L, 0.4L), 1, true},                        // pure rotation
      {CL(-0.7L, 0), 1, true},                                  // two chains at -0.7: rotation by π
      {CL(-0.5L, 0), 2, true},                                  // two Jordan chains of length 2 at -0.5
      {CL(0.8L, 0), 2, false},                                  // Jordan chain, μ > 0
      {CL(1.2L, 0), 3, false},                                  // Jordan chain of length 3
      {std::polar(0.95L, 1.3L), 2, true}};                      // rotation-Jordan chain
  const MatL JM = make_JM(bs);
  const int d = int(JM.rows());
  const long double kappa = 10;
  const Basis B = random_basis(d, kappa, rng);
  const Eigen::MatrixXd M = (B.P * JM * B.Pinv).cast<double>();
  const MatL Ml = M.cast<long double>();
  const long double nuM = Ml.norm(), mu_min = 0.5L;
  const auto tf = peal::from_transition(M);
  INFO(tf.summary());
  CHECK(tf.encoding.dim() == d);
  CHECK(tf.padding == 0);
  ft_check_blocks(tf, bs, 16.0L * d * kappa * kappa * u_d * nuM / mu_min);
  CHECK(tf.report.residual <= 16 * d * kappa * u_d);
  CHECK(tf.report.kappa < 4 * kappa);  // the chains' S add a little to κ(P) of M's blocks
  CHECK_THAT(tf.report.classification, Contains("a Jordan chain of length 3"));
  bool paired = false;
  for (const auto& s : tf.report.decisions) paired = paired || s.find("rotation by π") != std::string::npos;
  CHECK(paired);
  SECTION("exp(log M) = M") {
    const MatL A1 = tf.encoding.A(1.0).cast<long double>();
    CHECK((A1 - Ml).norm() <=
          16 * d * kappa * u_d * nuM + 8 * u_d * (d + tf.report.norm) * terms(tf.encoding, 1));
    CHECK((tf.encoding.A(0.0) - Eigen::MatrixXd::Identity(d, d)).template cast<long double>().norm() <=
          8 * u_d * d * terms(tf.encoding, 0));  // P̂ P̂⁻¹ in double
  }
  SECTION("A(n) = Mⁿ at small n") {
    for (long long n : {2LL, 7LL}) {
      INFO("n = " << n);
      CHECK((tf.encoding.A(double(n)).cast<long double>() - ft_power(Ml, n)).norm() <=
            ft_small_power_bound(tf, n, d, 16 * d * kappa * u_d * nuM));
    }
  }
}

/// The key test: A(n) = Mⁿ (binary powering in long double of the rounded M) up to n = 10⁶,
/// for an M with semisimple eigenvalues of modulus 1 or within 10⁻⁶ of it.
void ft_check_powers(const Eigen::MatrixXd& M, const peal::TransitionOptions& o, long double kappa) {
  const MatL Ml = M.cast<long double>();
  const int d = int(M.rows());
  const auto tf = peal::from_transition(M, o);
  INFO(tf.summary());
  const long double nuM = Ml.norm(), nuX = tf.report.norm;
  // δ: the largest parameter moved on purpose, from the report itself: a log-modulus set to 0
  // (the block's a or λ against log|μ| of its source), two negative eigenvalues paired at
  // their mean (split / 2|μ|).
  long double mu_min = 1, delta = 0;
  for (std::size_t i = 0; i < tf.sources.size(); ++i) {
    const auto& s = tf.sources[i];
    const auto& b = tf.report.blocks[i];
    const long double lr = std::log(std::abs(s.mu));
    const bool rot = b.kind == Kind::Rotation || b.kind == Kind::RotationJordan;
    mu_min = std::min(mu_min, (long double)std::abs(s.mu));
    delta = std::max(delta, std::abs((rot ? b.a : b.lambda) - lr) + s.split / (2 * std::abs(s.mu)));
  }
  const long double kP = tf.report.kappa, eps_long = peal_test::Tol<long double>::eps;
  CHECK(tf.report.residual <= 16 * d * kappa * u_d);
  for (long long n : {0LL, 1LL, 2LL, 7LL, 1000LL, 1000000LL}) {
    INFO("n = " << n);
    const MatL ref = ft_power(Ml, n);
    const MatL An = tf.encoding.A(double(n)).cast<long double>();
    const long double Sig = terms(tf.encoding, (long double)n);
    const long double bound =
        (8 * u_d * (d + n * nuX) + n * (delta + kappa * kappa * eps_long * nuM / mu_min) +
         peal_test::Tol<long double>::matrix_chain(int(n), d) * kP * kP) * Sig;
    INFO("error " << double((An - ref).norm()) << " bound " << double(bound));
    CHECK((An - ref).norm() <= bound);
  }
}

TEST_CASE("from_transition: A(n) = M^n up to n = 10^6 (rotations, moduli near 1, a rotation by pi)",
          "[canonical]") {
  std::mt19937 rng(6);
  const std::vector<MBlock> bs = {{std::polar(1.0L, 0.3L), 1, true},
                                  {std::polar(1.0L, 2.9L), 1, true},
                                  {std::polar(1.0L - 1e-6L, kPi - 0.05L), 1, true},
                                  {std::polar(1.0L + 1e-6L, 1.1L), 1, true},
                                  {CL(1.0L + 5e-7L, 0), 1, false},
                                  {CL(0.9L, 0), 1, false},
                                  {CL(-1.0L, 0), 1, true}};  // −1 twice: a rotation by π
  const MatL JM = make_JM(bs);
  const int d = int(JM.rows());
  const Basis B = random_basis(d, 10, rng);
  const Eigen::MatrixXd M = (B.P * JM * B.Pinv).cast<double>();
  SECTION("default tolerances (log-moduli within the zero tolerance set to 0)") {
    ft_check_powers(M, {}, 10);
    const auto tf = peal::from_transition(M);
    ft_check_blocks(tf, bs, 16.0L * d * 100 * u_d * M.cast<long double>().norm() / 0.9L);
  }
  SECTION("zero tolerance 1e-30: every log-modulus as computed") {
    peal::TransitionOptions o;
    o.zero = 1e-30;
    ft_check_powers(M, o, 10);
  }
}

TEST_CASE("from_transition: an orthogonal M gives pure rotations in an orthogonal basis",
          "[canonical]") {
  std::mt19937 rng(9);
  const std::vector<MBlock> bs = {{std::polar(1.0L, 0.5L), 1, true},
                                  {std::polar(1.0L, 1.5L), 1, true},
                                  {std::polar(1.0L, 3.0L), 1, true},
                                  {CL(-1.0L, 0), 1, true},   // −I₂: a rotation by π
                                  {CL(1.0L, 0), 1, false}};  // eigenvalue 1: a constant coordinate
  const MatL JM = make_JM(bs);
  const int d = int(JM.rows());
  const MatL Q = random_orthogonal(d, rng);
  const Eigen::MatrixXd M = (Q * JM * Q.transpose()).cast<double>();
  const auto tf = peal::from_transition(M);
  INFO(tf.summary());
  int rotations = 0, pass = 0;
  for (const auto& b : tf.report.blocks) {
    CHECK((b.kind == Kind::Rotation || b.kind == Kind::PassThrough));
    CHECK(b.a == 0);
    rotations += b.kind == Kind::Rotation;
    pass += b.kind == Kind::PassThrough;
  }
  CHECK(rotations == 4);
  CHECK(pass == 1);
  // M orthogonal to rounding (d u), its eigenvectors orthogonal: κ₂(P) = 1 to the Schur form's
  // rounding in long double and the columns' scaling; X = log M skew-symmetric.
  CHECK(tf.report.kappa <= 1 + 1e-12);
  CHECK(tf.report.skew_symmetric);
  ft_check_blocks(tf, bs, 16.0L * d * u_d * M.cast<long double>().norm());
  ft_check_powers(M, {}, 1);
  // F(t) = G(t): norms kept.
  CHECK((tf.encoding.F(3.0) - tf.encoding.G(3.0)).cwiseAbs().maxCoeff() <= 1e-12);
}

TEST_CASE("from_transition: a symmetric M with a repeated negative eigenvalue", "[canonical]") {
  std::mt19937 rng(12);
  const std::vector<MBlock> bs = {{CL(2.0L, 0), 1, false}, {CL(0.5L, 0), 1, false},
                                  {CL(-3.0L, 0), 1, true}};  // −3 twice: a rotation by π
  const MatL JM = make_JM(bs);
  const int d = int(JM.rows());
  const MatL Q = random_orthogonal(d, rng);
  const Eigen::MatrixXd M = (Q * JM * Q.transpose()).cast<double>();
  const auto tf = peal::from_transition(M);
  INFO(tf.summary());
  const long double nuM = M.cast<long double>().norm();
  ft_check_blocks(tf, bs, 16.0L * d * u_d * nuM / 0.5L);
  CHECK(tf.report.kappa <= 1 + 1e-12);  // the normal path: P = Q of the Schur form
  CHECK(tf.report.residual <= 16 * d * u_d);
  for (long long n : {1LL, 2LL, 7LL}) {
    INFO("n = " << n);
    CHECK((tf.encoding.A(double(n)).cast<long double>() - ft_power(M.cast<long double>(), n)).norm() <=
          ft_small_power_bound(tf, n, d, 16 * d * u_d * nuM));
  }
}

TEST_CASE("from_transition: M = I, 1 x 1, a Jordan chain at 1", "[canonical]") {
  const auto id = peal::from_transition(Eigen::MatrixXd::Identity(3, 3).eval());
  INFO(id.summary());
  REQUIRE(id.report.blocks.size() == 3);
  for (const auto& b : id.report.blocks) CHECK(b.kind == Kind::PassThrough);
  // P from the cluster's SVD; P̂ P̂⁻¹ in double: γ_d |P̂| |P̂⁻¹| with κ(P) = 1
  CHECK((id.encoding.A(2.5) - Eigen::MatrixXd::Identity(3, 3)).cwiseAbs().maxCoeff() <=
        peal_test::Tol<double>::entry(3));
  CHECK(id.report.residual <= 16 * 3 * u_d);

  const auto three = peal::from_transition(Eigen::MatrixXd::Constant(1, 1, 3.0));
  REQUIRE(three.report.blocks.size() == 1);
  CHECK(three.report.blocks[0].kind == Kind::Real);
  CHECK(std::abs(three.report.blocks[0].lambda - std::log(3.0L)) <= 4 * u_d);
  CHECK(std::abs(three.encoding.A(1.0)(0, 0) - 3.0) <= 16 * u_d * 3);
  CHECK(std::abs(three.encoding.A(20.0)(0, 0) - std::pow(3.0, 20)) <= 16 * u_d * 20 * std::pow(3.0, 20));

  // [[1, 1], [0, 1]]: log M = N, the ALiBi shear (docs/design.md §1): JordanBlock<2>{0}.
  Eigen::MatrixXd S(2, 2);
  S << 1, 1, 0, 1;
  const auto sh = peal::from_transition(S);
  INFO(sh.summary());
  REQUIRE(sh.report.blocks.size() == 1);
  CHECK(sh.report.blocks[0].kind == Kind::Jordan);
  CHECK(sh.report.blocks[0].lambda == 0);
  for (double n : {1.0, 7.0, 1e6}) {
    const Eigen::MatrixXd An = sh.encoding.A(n);
    CHECK(std::abs(An(0, 1) - n) <= 8 * u_d * n);
    CHECK(std::abs(An(0, 0) - 1) <= 8 * u_d);
    CHECK(std::abs(An(1, 0)) <= 8 * u_d);
  }
}

TEST_CASE("from_transition: an unpaired negative eigenvalue, refused or padded", "[canonical]") {
  std::mt19937 rng(3);
  const Basis B = random_basis(2, 10, rng);
  MatL J = MatL::Zero(2, 2);
  J(0, 0) = -2, J(1, 1) = 3;
  const Eigen::MatrixXd M = (B.P * J * B.Pinv).cast<double>();
  CHECK_THROWS_AS(peal::from_transition(M), peal::invalid_argument);
  CHECK_THROWS_WITH(peal::from_transition(M), Contains("no real logarithm") && Contains("-2") &&
                                                  Contains("multiplicity 1") && Contains("pad_unpaired"));
  CHECK_THROWS_WITH(peal::from_transition(Eigen::MatrixXd::Constant(1, 1, -2.0)),
                    Contains("multiplicity 1"));
  // even multiplicity, unequal chains: J₃(−1) ⊕ (−1) has multiplicity 4 and no real logarithm
  MatL J4 = MatL::Zero(4, 4);
  for (int i = 0; i < 4; ++i) J4(i, i) = -1;
  J4(0, 1) = J4(1, 2) = 1;
  CHECK_THROWS_WITH(peal::from_transition(Eigen::MatrixXd(J4.cast<double>())),
                    Contains("multiplicity 4") && Contains("length 1, 3"));

  SECTION("padded: A(n) restricted to the first d coordinates is Mⁿ at integer n") {
    peal::TransitionOptions o;
    o.pad_unpaired = true;
    const auto tf = peal::from_transition(M, o);
    INFO(tf.summary());
    CHECK(tf.padding == 1);
    CHECK(tf.encoding.dim() == 3);
    int padded = 0;
    for (const auto& s : tf.sources) padded += s.padded;
    CHECK(padded == 1);
    const MatL Ml = M.cast<long double>();
    for (long long n : {0LL, 1LL, 2LL, 7LL, 30LL}) {
      INFO("n = " << n);
      const MatL An = tf.encoding.A(double(n)).cast<long double>();
      CHECK((An.topLeftCorner(2, 2) - ft_power(Ml, n)).norm() <=
            ft_small_power_bound(tf, n, 3, 16 * 2 * 10 * u_d * Ml.norm()));
    }
  }
}

TEST_CASE("from_transition: bad input", "[canonical]") {
  CHECK_THROWS_WITH(peal::from_transition(Eigen::MatrixXd(2, 3)), Contains("square"));
  CHECK_THROWS_WITH(peal::from_transition(Eigen::MatrixXd(0, 0)), Contains("d = 0"));
  Eigen::MatrixXd bad = Eigen::MatrixXd::Identity(3, 3);
  bad(1, 2) = std::nan("");
  CHECK_THROWS_WITH(peal::from_transition(bad), Contains("non-finite"));
  bad(1, 2) = INFINITY;
  CHECK_THROWS_AS(peal::from_transition(bad), peal::invalid_argument);
  Eigen::MatrixXd sing = Eigen::MatrixXd::Identity(3, 3);
  sing(2, 2) = 0;
  sing(0, 2) = 1;
  CHECK_THROWS_WITH(peal::from_transition(sing), Contains("singular"));
  CHECK_THROWS_WITH(peal::from_transition(Eigen::MatrixXd::Zero(2, 2).eval()), Contains("singular"));
  CHECK_THROWS_WITH(peal::from_transition(Eigen::MatrixXd::Identity(1025, 1025).eval()),
                    Contains("1024"));
  peal::TransitionOptions o;
  o.cluster = 0;
  CHECK_THROWS_WITH(peal::from_transition(Eigen::MatrixXd::Identity(2, 2).eval(), o),
                    Contains("from_transition") && Contains("cluster"));
  o.cluster.reset();
  o.kappa_warning = -1;
  CHECK_THROWS_WITH(peal::from_transition(Eigen::MatrixXd::Identity(2, 2).eval(), o),
                    Contains("kappa_warning"));
  MatL J5 = MatL::Identity(5, 5);
  for (int i = 0; i < 4; ++i) J5(i, i + 1) = 1;
  CHECK_THROWS_WITH(peal::from_transition(Eigen::MatrixXd(J5.cast<double>())), Contains("length 5"));
}

}  // namespace
}  // namespace test_from_transition
