// canonical_form (include/peal/canonical_form.hpp, docs/canonical-form.md): constructed
// generators X = P J P⁻¹ with every block type and a random P of κ₂ = 10, a random
// skew-symmetric X, nearly defective and bad input. References: the known J (its blocks and
// parameters) and Eigen's MatrixExponential of τX in long double; the kernels against the
// dense per-pair qᵀ exp((t − s)X) k.
//
// Bounds (CanonicalTol below; u = ε_S / 2 of the input's scalar type, κ = κ₂(P) of the
// constructed basis, n the size, ν = ‖X‖_F):
//   X itself is the rounding of P J P⁻¹ to S: a backward error ‖E‖ ≤ n u κ ν (each entry a
//   sum of n products of entries of size κ ν / n, rounded once). An eigenvalue of a
//   diagonalisable X moves by at most κ ‖E‖ (Bauer–Fike), and the mean of a cluster (the trace
//   of its block, which is what canonical_form reports for a chain) by as much per eigenvalue:
//     parameter(S)  = 16 n κ² u ν     (factor 16: the long double reduction and the
//                                      rounding of J's parameters to S, with slack);
//   A(τ) is compared with Eigen's exp(τX) of the rounded X itself, so X's rounding does not
//   enter: what remains is the encoding's own evaluation, P̂ A_Ĵ(τ) P̂⁻¹ in S with P̂, P̂⁻¹ and
//   Ĵ's parameters rounded to S. With Σ(τ) = ‖ |P̂| |A_Ĵ(τ)| |P̂⁻¹| ‖_F (the size of the terms
//   of that product, from the returned encoding), the two n-term products cost n u Σ
//   (Higham, Thm 3.5), and a parameter rounded to S (relative u, |θ| ≤ ν) moves A_Ĵ(τ) by
//   ≤ |τ| u ν |A_Ĵ(τ)| to first order, which the long double reduction's backward error
//   (residual ~ u_long ν) does not exceed; factor 8 of slack (P̂⁻¹ from LU, n u κ):
//     expm(S, τ)    = 8 u (n + |τ| ν) Σ(τ)              in the Frobenius norm,
//   and a score of unit-size rows through the kernels adds the fused product's 2 (n + 16) u
//   (Tol::fused_score) relative to the same terms: 8 u (2 n + 16 + |τ| ν) ‖q‖ Σ(τ) ‖k‖.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <map>
#include <random>
#include <unsupported/Eigen/MatrixFunctions>
#include <vector>

#include <peal/attention.hpp>
#include <peal/canonical_form.hpp>
#include <peal/encode.hpp>
#include <peal/linear_attention.hpp>
#include <peal/scores.hpp>

#include "canonical_bases.hpp"
#include "families.hpp"
#include "tolerances.hpp"

namespace {

using peal::CanonicalBlock;
using Kind = CanonicalBlock::Kind;
using MatL = Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic>;
using Catch::Matchers::Contains;
using peal_test::canonical::Basis;
using peal_test::canonical::random_basis;
using peal_test::canonical::random_orthogonal;
using peal_test::canonical::terms;

template <class S>
struct CanonicalTol {
  static constexpr long double u = peal_test::Tol<S>::eps / 2;
  static long double parameter(int n, long double kappa, long double nu) {
    return 16.0L * n * kappa * kappa * u * nu;
  }
  static long double expm(int n, long double nu, long double tau, long double Sigma) {
    return 8.0L * u * (n + std::abs(tau) * nu) * Sigma;
  }
  static long double score(int n, long double nu, long double tau, long double Sigma) {
    return 8.0L * u * (2 * n + 16 + std::abs(tau) * nu) * Sigma;
  }
};

/// One block of a constructed J (the expected canonical form).
struct Want {
  Kind kind;
  int length;
  long double lambda, omega, a;
  int size() const {
    return (kind == Kind::Rotation || kind == Kind::RotationJordan) ? 2 * length : length;
  }
};

/// J in long double from the wanted blocks (the generator table of docs/design.md §1).
MatL make_J(const std::vector<Want>& ws) {
  int n = 0;
  for (const auto& w : ws) n += w.size();
  MatL J = MatL::Zero(n, n);
  int o = 0;
  for (const auto& w : ws) {
    const bool rot = w.kind == Kind::Rotation || w.kind == Kind::RotationJordan;
    for (int b = 0; b < w.length; ++b) {
      if (rot) {
        const int c = o + 2 * b;
        J(c, c) = J(c + 1, c + 1) = w.a;
        J(c, c + 1) = w.omega, J(c + 1, c) = -w.omega;
        if (b > 0) J(c - 2, c) = J(c - 1, c + 1) = 1;
      } else {
        J(o + b, o + b) = w.lambda;
        if (b > 0) J(o + b - 1, o + b) = 1;
      }
    }
    o += w.size();
  }
  return J;
}

int kind_order(Kind k) {
  switch (k) {
    case Kind::Real: return 0;
    case Kind::Rotation: return 1;
    case Kind::Jordan: return 2;
    case Kind::RotationJordan: return 3;
    default: return 4;
  }
}
/// The fixed order of CanonicalEncoding's parts, then by parameters.
bool before(const Want& x, const Want& y) {
  if (kind_order(x.kind) != kind_order(y.kind)) return kind_order(x.kind) < kind_order(y.kind);
  if (x.length != y.length) return x.length < y.length;
  if (x.lambda != y.lambda) return x.lambda < y.lambda;
  if (x.omega != y.omega) return x.omega < y.omega;
  return x.a < y.a;
}

/// The blocks found equal the wanted ones: kinds, lengths, positions, parameters within tol.
template <class S>
void check_blocks(const peal::CanonicalReport& rep, std::vector<Want> want, long double tol) {
  std::sort(want.begin(), want.end(), before);
  std::vector<Want> got;
  for (const auto& b : rep.blocks) got.push_back({b.kind, b.length, b.lambda, b.omega, b.a});
  REQUIRE(got.size() == want.size());
  // the kernel order is fixed by kind and length; within those, match by parameters
  std::vector<Want> gs = got;
  std::sort(gs.begin(), gs.end(), before);
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("block " << i << ": kind " << int(want[i].kind) << " length " << want[i].length);
    CHECK(gs[i].kind == want[i].kind);
    CHECK(gs[i].length == want[i].length);
    CHECK(std::abs(gs[i].lambda - want[i].lambda) <= tol);
    CHECK(std::abs(gs[i].omega - want[i].omega) <= tol);
    CHECK(std::abs(gs[i].a - want[i].a) <= tol);
  }
  for (std::size_t i = 1; i < got.size(); ++i)  // blocks come in the fixed order
    CHECK(std::make_pair(kind_order(got[i - 1].kind), got[i - 1].length) <=
          std::make_pair(kind_order(got[i].kind), got[i].length));
  int first = 0;
  for (const auto& b : rep.blocks) {
    CHECK(b.first == first);
    first += b.size;
  }
}

/// A(τ) of the canonical encoding against Eigen's exp(τX) (long double), Frobenius norm.
template <class E>
long double expm_error(const E& enc, const MatL& Xl, long double tau) {
  const MatL ref = (MatL(Xl * tau)).exp();
  const MatL got = enc.A(typename E::Real(tau)).template cast<long double>();
  return (got - ref).norm();
}

const std::vector<Want> every_block = {
    {Kind::Real, 1, -0.5L, 0, 0},          {Kind::Real, 1, -0.5L, 0, 0},  // repeated, separate
    {Kind::Real, 1, 0.3L, 0, 0},           {Kind::Real, 1, -0.2L, 0, 0},  // beside J2(-0.2)
    {Kind::PassThrough, 1, 0, 0, 0},                                       // beside J3(0)
    {Kind::Rotation, 1, 0, 1.3L, 0},       {Kind::Rotation, 1, 0, 0.7L, -0.05L},
    {Kind::Jordan, 2, -0.2L, 0, 0},        {Kind::Jordan, 3, 0, 0, 0},
    {Kind::Jordan, 4, 0.1L, 0, 0},         {Kind::RotationJordan, 2, 0, 0.9L, -0.1L}};

TEST_CASE("canonical_form: every block type through a random basis of condition 10",
          "[canonical]") {
  std::mt19937 rng(23);
  const MatL J = make_J(every_block);
  const int n = int(J.rows());
  const long double kappa = 10;
  const Basis B = random_basis(n, kappa, rng);
  const Eigen::MatrixXd X = (B.P * J * B.Pinv).cast<double>();
  const MatL Xl = X.cast<long double>();
  const long double nu = Xl.norm();
  const auto cf = peal::canonical_form(X);
  INFO(cf.summary());
  check_blocks<double>(cf.report, every_block, CanonicalTol<double>::parameter(n, kappa, nu));
  CHECK(cf.encoding.dim() == n);
  CHECK(cf.report.residual <= 16 * n * kappa * CanonicalTol<double>::u);
  CHECK(cf.report.kappa < 2 * kappa);  // the blocks, not an ill-conditioned splitting
  CHECK_THAT(cf.report.classification, Contains("polynomial growth of degree 3"));
  CHECK_THAT(cf.report.classification, Contains("a Jordan chain of length 4"));
  REQUIRE_FALSE(cf.report.warnings.empty());  // growth: λ = 0.3, 0.1
  CHECK_THAT(cf.report.warnings[0], Contains("growth"));
  for (long double tau : {-3.0L, 0.5L, 7.0L}) {
    INFO("tau = " << double(tau));
    CHECK(expm_error(cf.encoding, Xl, tau) <=
          CanonicalTol<double>::expm(n, nu, tau, terms(cf.encoding, tau)));
  }
}

TEST_CASE("canonical_form: the classification counts each block once", "[canonical]") {
  // A damped rotation-Jordan chain is a chain, not one of the rotations; the damping range is
  // that of the rotations (all damped here: its upper end is below 0, not 0).
  const std::vector<Want> ws = {{Kind::Rotation, 1, 0, 1.0L, -0.02L},
                                {Kind::Rotation, 1, 0, 2.0L, -0.05L},
                                {Kind::RotationJordan, 2, 0, 3.0L, -0.1L}};
  const Eigen::MatrixXd X = make_J(ws).cast<double>();
  const auto cf = peal::canonical_form(X);
  INFO(cf.summary());
  CHECK_THAT(cf.report.classification, Contains("2 rotations (2 damped, a ∈ [-0.05, -0.02])"));
  CHECK_THAT(cf.report.classification, Contains("a Jordan chain of length 2 at the pair -0.1 ± 3i"));
}

TEST_CASE("canonical_form: float input", "[canonical]") {
  std::mt19937 rng(5);
  const std::vector<Want> ws = {{Kind::Real, 1, -0.4L, 0, 0},
                                {Kind::Rotation, 1, 0, 1.1L, -0.02L},
                                {Kind::Jordan, 2, 0, 0, 0}};
  const MatL J = make_J(ws);
  const int n = int(J.rows());
  const Basis B = random_basis(n, 10, rng);
  const Eigen::MatrixXf X = (B.P * J * B.Pinv).cast<float>();
  const MatL Xl = X.cast<long double>();
  const auto cf = peal::canonical_form(X);
  INFO(cf.summary());
  check_blocks<float>(cf.report, ws, CanonicalTol<float>::parameter(n, 10, Xl.norm()));
  // The encoding's X = P J P⁻¹ (evaluated in float) against the input; A(τ) of the same
  // blocks is checked in double above (the closed forms per type: test_properties_*.cpp).
  CHECK((cf.encoding.generator().template cast<long double>() - Xl).norm() <=
        CanonicalTol<float>::parameter(n, 10, Xl.norm()));
}

TEST_CASE("canonical_form: a skew-symmetric generator gives pure rotations, orthogonal P",
          "[canonical]") {
  std::mt19937 rng(64);
  std::normal_distribution<double> g;
  const int n = 64;
  Eigen::MatrixXd A(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) A(i, j) = g(rng) / std::sqrt(double(n));
  const Eigen::MatrixXd X = A - A.transpose();
  const MatL Xl = X.cast<long double>();
  const long double nu = Xl.norm();
  const auto cf = peal::canonical_form(X);
  INFO(cf.summary());
  CHECK(cf.report.skew_symmetric);
  CHECK(cf.report.warnings.empty());
  int rotations = 0;
  for (const auto& b : cf.report.blocks) {
    CHECK(b.kind == Kind::Rotation);
    CHECK(b.a == 0);
    CHECK(b.omega > 0);
    rotations += b.kind == Kind::Rotation;
  }
  CHECK(rotations == n / 2);
  const Eigen::MatrixXd& P = cf.encoding.P();
  CHECK((P.transpose() * P - Eigen::MatrixXd::Identity(n, n)).cwiseAbs().maxCoeff() <= 1e-13);
  CHECK(cf.report.kappa <= 1 + 1e-13);
  CHECK(cf.report.residual <= 16 * n * CanonicalTol<double>::u);
  // F(t) = G(t) for a pure rotation in an orthogonal basis: norms are kept.
  CHECK((cf.encoding.F(3.5) - cf.encoding.G(3.5)).cwiseAbs().maxCoeff() <= 1e-12);
  for (long double tau : {-3.0L, 0.5L, 7.0L, 1e4L}) {
    INFO("tau = " << double(tau));
    CHECK(expm_error(cf.encoding, Xl, tau) <=
          CanonicalTol<double>::expm(n, nu, tau, terms(cf.encoding, tau)));
  }
}

// The canonical encoding cf of X through every kernel, against q_iᵀ exp((t − s)X) k_j in long
// double (check_through_kernels below: X = P J P⁻¹ constructed, its blocks checked first).
// exp(τX) for the positions' differences (all multiples of 1/2) as powers of exp(X/2) and
// exp(−X/2) (the group law; two matrix exponentials, not one per pair).
void check_kernels(const Eigen::MatrixXd& X, const peal::CanonicalForm<double>& cf,
                   std::mt19937& rng) {
  const int d = int(X.rows()), nq = 5, nk = 6, H = 2;
  const MatL Xl = X.cast<long double>();
  INFO(cf.summary());
  std::uniform_real_distribution<double> U(-1, 1);
  std::vector<double> q(std::size_t(nq * H * d)), k(std::size_t(nk * H * d));
  for (auto& x : q) x = U(rng);
  for (auto& x : k) x = U(rng);
  std::vector<double> tq = {0, 1.5, 3, 4, 9}, tk = {-2, 0, 1, 2.5, 6, 8};
  // reference: q_iᵀ exp((t − s)X) k_j in long double
  const MatL half_up = MatL(Xl / 2).exp(), half_down = MatL(-Xl / 2).exp();
  std::vector<MatL> up{MatL::Identity(d, d)}, down{MatL::Identity(d, d)};  // exp(±m X/2)
  auto expm = [&](long double tau) -> const MatL& {
    const long m = std::lround(2 * tau);
    std::vector<MatL>& pw = m >= 0 ? up : down;
    while (long(pw.size()) <= std::labs(m)) pw.push_back(pw.back() * (m >= 0 ? half_up : half_down));
    return pw[std::size_t(std::labs(m))];
  };
  auto ref = [&](int h, int i, int j, long double& scale) {
    const MatL& A = expm((long double)tq[std::size_t(i)] - tk[std::size_t(j)]);
    Eigen::Matrix<long double, Eigen::Dynamic, 1> qv(d), kv(d);
    for (int c = 0; c < d; ++c) {
      qv(c) = q[std::size_t((i * H + h) * d + c)];
      kv(c) = k[std::size_t((j * H + h) * d + c)];
    }
    scale = qv.norm() * kv.norm();
    return qv.dot(A * kv);
  };
  const long double nu = Xl.norm();
  std::map<long double, long double> sigma;  // terms(τ), d³ long double work: once per lag
  auto bound = [&](int i, int j, long double scale) {
    const long double tau = tq[std::size_t(i)] - tk[std::size_t(j)];
    auto it = sigma.find(tau);
    if (it == sigma.end()) it = sigma.emplace(tau, terms(cf.encoding, tau)).first;
    return CanonicalTol<double>::score(d, nu, tau, it->second) * scale;
  };
  SECTION("encode_queries and encode_keys, then the dot product") {
    std::vector<double> qe = q, ke = k;
    peal::encode_queries(cf.encoding, peal::make_view(qe.data(), nq, H, d), peal::Positions(tq));
    peal::encode_keys(cf.encoding, peal::make_view(ke.data(), nk, H, d), peal::Positions(tk));
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < nq; ++i)
        for (int j = 0; j < nk; ++j) {
          long double scale;
          const long double r = ref(h, i, j, scale);
          long double got = 0;
          for (int c = 0; c < d; ++c)
            got += (long double)qe[std::size_t((i * H + h) * d + c)] * ke[std::size_t((j * H + h) * d + c)];
          INFO("h " << h << " i " << i << " j " << j);
          CHECK(std::abs(got - r) <= bound(i, j, scale));
        }
  }
  SECTION("scores") {
    std::vector<double> out(std::size_t(H * nq * nk));
    peal::scores(cf.encoding, peal::TensorView<const double>(q.data(), nq, H, d),
                 peal::Positions(tq), peal::TensorView<const double>(k.data(), nk, H, d),
                 peal::Positions(tk), peal::make_view(out.data(), H, nq, nk));
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < nq; ++i)
        for (int j = 0; j < nk; ++j) {
          long double scale;
          const long double r = ref(h, i, j, scale);
          INFO("h " << h << " i " << i << " j " << j);
          CHECK(std::abs(out[std::size_t((h * nq + i) * nk + j)] - r) <= bound(i, j, scale));
        }
  }
  // Values and the long double references of the two attentions: the per-pair scores above,
  // softmax (attention) or the plain causal sum (linear attention, s_j <= t_i), times V.
  const int dv = 3;
  std::vector<double> v(std::size_t(nk * H * dv));
  for (auto& x : v) x = U(rng);
  const long double sc = 1 / std::sqrt((long double)d);  // both calls' default scale
  auto vat = [&](int j, int h, int e) { return (long double)v[std::size_t((j * H + h) * dv + e)]; };
  SECTION("attention") {
    std::vector<double> out(std::size_t(nq * H * dv));
    peal::attention(cf.encoding, peal::TensorView<const double>(q.data(), nq, H, d),
                    peal::Positions(tq), peal::TensorView<const double>(k.data(), nk, H, d),
                    peal::Positions(tk), peal::TensorView<const double>(v.data(), nk, H, dv),
                    peal::make_view(out.data(), nq, H, dv), peal::AttentionOptions{});
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < nq; ++i) {
        std::vector<long double> logit(static_cast<std::size_t>(nk));
        long double delta = 0, L = 0, m = -INFINITY, V = 0;
        for (int j = 0; j < nk; ++j) {
          long double scale;
          logit[std::size_t(j)] = sc * ref(h, i, j, scale);
          delta = std::max(delta, sc * bound(i, j, scale));
          L = std::max(L, std::abs(logit[std::size_t(j)]));
          m = std::max(m, logit[std::size_t(j)]);
        }
        delta += peal_test::Tol<double>::attention_exponent(L);  // tests/tolerances.hpp
        for (int e = 0; e < dv; ++e) {
          long double num = 0, den = 0;
          V = 0;
          for (int j = 0; j < nk; ++j) {
            const long double w = std::exp(logit[std::size_t(j)] - m);
            num += w * vat(j, h, e), den += w;
            V = std::max(V, std::abs(vat(j, h, e)));
          }
          const long double r = num / den;
          INFO("h " << h << " i " << i << " e " << e);
          CHECK(std::abs(out[std::size_t((i * H + h) * dv + e)] - r) <=
                peal_test::Tol<double>::attention_out(delta, nk, nk, V) +
                    peal_test::Tol<double>::eps * std::abs(r));
        }
      }
  }
  // The parallel form: the scores' tiles (the bound above per pair) times v_j summed in
  // double, nk + 1 roundings of terms bounded by sc |r_ij| |v_j| (Higham, Thm 3.1), factor 2.
  SECTION("linear attention, parallel form") {
    std::vector<double> out(std::size_t(nq * H * dv));
    peal::LinearAttentionOptions lo;
    lo.form = peal::LinearForm::parallel;
    peal::linear_attention(cf.encoding, peal::TensorView<const double>(q.data(), nq, H, d),
                           peal::Positions(tq), peal::TensorView<const double>(k.data(), nk, H, d),
                           peal::Positions(tk), peal::TensorView<const double>(v.data(), nk, H, dv),
                           peal::make_view(out.data(), nq, H, dv), lo);
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < nq; ++i)
        for (int e = 0; e < dv; ++e) {
          long double r = 0, tol = 0;
          for (int j = 0; j < nk && tk[std::size_t(j)] <= tq[std::size_t(i)]; ++j) {
            long double scale;
            const long double sij = ref(h, i, j, scale), vj = vat(j, h, e);
            r += sc * sij * vj;
            tol += sc * (bound(i, j, scale) + 2 * (nk + 1) * peal_test::Tol<double>::eps *
                                                  std::abs(sij)) * std::abs(vj);
          }
          INFO("h " << h << " i " << i << " e " << e);
          CHECK(std::abs(out[std::size_t((i * H + h) * dv + e)] - r) <=
                tol + peal_test::Tol<double>::eps * std::abs(r));
        }
  }
}

void check_through_kernels(const std::vector<Want>& ws, unsigned seed) {
  std::mt19937 rng(seed);
  const MatL J = make_J(ws);
  const int d = int(J.rows());
  const long double kappa = 10;
  const Basis B = random_basis(d, kappa, rng);
  const Eigen::MatrixXd X = (B.P * J * B.Pinv).cast<double>();
  const auto cf = peal::canonical_form(X);
  INFO(cf.summary());
  check_blocks<double>(cf.report, ws,
                       CanonicalTol<double>::parameter(d, kappa, X.cast<long double>().norm()));
  check_kernels(X, cf, rng);
}

TEST_CASE("canonical_form: the encoding runs through encode, scores, attention and linear attention",
          "[canonical]") {
  check_through_kernels({{Kind::Real, 1, -0.3L, 0, 0},
                         {Kind::Rotation, 1, 0, 0.8L, 0},
                         {Kind::Rotation, 1, 0, 0.25L, -0.05L},
                         {Kind::Jordan, 2, 0, 0, 0},
                         {Kind::RotationJordan, 2, 0, 0.5L, -0.1L},
                         {Kind::PassThrough, 1, 0, 0, 0}},
                        7);
}

TEST_CASE("canonical_form: a basis too large for the tiles (d = 67) runs through every kernel",
          "[canonical]") {
  // d² doubles past 32 KiB: scores and attention take the rows into the basis before the tiles
  // (detail/basis_rows.hpp), the other kernels as above. Six copies of each block type with
  // distinct eigenvalues, one pass-through.
  std::vector<Want> ws;
  for (int c = 0; c < 6; ++c) {
    ws.push_back({Kind::Real, 1, -0.3L - 0.07L * c, 0, 0});
    ws.push_back({Kind::Rotation, 1, 0, 0.8L + 0.13L * c, 0});
    ws.push_back({Kind::Rotation, 1, 0, 0.25L + 0.1L * c, -0.05L});
    ws.push_back({Kind::Jordan, 2, -0.04L * c, 0, 0});
    ws.push_back({Kind::RotationJordan, 2, 0, 0.5L + 0.07L * c, -0.1L});
  }
  ws.push_back({Kind::PassThrough, 1, 0, 0, 0});
  REQUIRE(peal::detail::basis_rows_first<double>(67));
  check_through_kernels(ws, 8);
}

TEST_CASE("canonical_form: a random skew-symmetric generator at d = 128 through every kernel",
          "[canonical]") {
  // LieRE's case at a real head size: pure rotations in an orthogonal basis (P past 32 KiB: the
  // rows into the basis first for scores and attention), against the dense reference.
  // Once for the four sections of check_kernels (Catch runs the case once per section).
  static const Eigen::MatrixXd X = [] {
    std::mt19937 rng(128);
    std::normal_distribution<double> g;
    const int n = 128;
    Eigen::MatrixXd A(n, n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) A(i, j) = g(rng) / std::sqrt(double(n));
    return Eigen::MatrixXd(A - A.transpose());
  }();
  static const auto cf = peal::canonical_form(X);
  REQUIRE(cf.report.skew_symmetric);
  std::mt19937 rng(129);
  check_kernels(X, cf, rng);
}

TEST_CASE("canonical_form: nearly defective generators", "[canonical]") {
  std::mt19937 rng(11);
  const Basis B = random_basis(3, 10, rng);
  auto X_of = [&](long double delta) {
    MatL J = MatL::Zero(3, 3);
    J(0, 0) = -0.5L, J(0, 1) = 1, J(1, 1) = -0.5L + delta, J(2, 2) = 0.2L;
    return Eigen::MatrixXd((B.P * J * B.Pinv).cast<double>());
  };
  SECTION("eigenvalues 1e-9 apart: one well-conditioned chain, decided by the cluster tolerance") {
    const auto cf = peal::canonical_form(X_of(1e-9L));
    INFO(cf.summary());
    REQUIRE(cf.report.blocks.size() == 2);
    CHECK(cf.report.blocks[0].kind == Kind::Real);
    CHECK(cf.report.blocks[1].kind == Kind::Jordan);
    CHECK(cf.report.blocks[1].length == 2);
    CHECK(std::abs(cf.report.blocks[1].lambda - (-0.5L + 0.5e-9L)) <= 1e-12);
    CHECK(cf.report.kappa < 1e3);
    CHECK(cf.report.residual < 1e-8);  // the chain is X + O(δ)
    bool said = false;
    for (const auto& s : cf.report.decisions) said = said || s.find("cluster tolerance") != std::string::npos;
    CHECK(said);
  }
  SECTION("eigenvalues 0.3 apart: separate blocks, no merge") {
    const auto cf = peal::canonical_form(X_of(0.3L));
    INFO(cf.summary());
    CHECK(cf.report.blocks.size() == 3);
    for (const auto& b : cf.report.blocks) CHECK(b.kind == Kind::Real);
    CHECK(cf.report.kappa < 1e3);
    CHECK(cf.report.residual < 1e-14);
  }
  SECTION("a cluster tolerance too small to merge: separated, and the report warns") {
    peal::CanonicalOptions o;
    o.cluster = 1e-12;
    const auto cf = peal::canonical_form(X_of(1e-7L), o);
    INFO(cf.summary());
    CHECK(cf.report.blocks.size() == 3);
    CHECK(cf.report.kappa > 1e6);
    bool coupled = false, ill = false;
    for (const auto& s : cf.report.decisions)
      coupled = coupled || s.find("strongly coupled") != std::string::npos;
    for (const auto& s : cf.report.warnings) ill = ill || s.find("ill-conditioned") != std::string::npos;
    CHECK(coupled);
    CHECK(ill);
  }
}

TEST_CASE("canonical_form: zero, 1x1 and bad input", "[canonical]") {
  const auto z = peal::canonical_form(Eigen::MatrixXd::Zero(4, 4).eval());
  CHECK(z.report.blocks.size() == 4);
  for (const auto& b : z.report.blocks) CHECK(b.kind == Kind::PassThrough);
  CHECK(z.encoding.A(5.0).isApprox(Eigen::MatrixXd::Identity(4, 4)));
  const auto one = peal::canonical_form(Eigen::MatrixXd::Constant(1, 1, -2.0));
  REQUIRE(one.report.blocks.size() == 1);
  CHECK(one.report.blocks[0].kind == Kind::Real);
  CHECK(one.report.blocks[0].lambda == -2.0L);
  CHECK(std::abs(one.encoding.A(1.5)(0, 0) - std::exp(-3.0)) <= 4e-16);

  CHECK_THROWS_AS(peal::canonical_form(Eigen::MatrixXd(2, 3)), peal::invalid_argument);
  CHECK_THROWS_WITH(peal::canonical_form(Eigen::MatrixXd(0, 0)), Contains("d = 0"));
  Eigen::MatrixXd bad = Eigen::MatrixXd::Identity(3, 3);
  bad(1, 2) = std::nan("");
  CHECK_THROWS_WITH(peal::canonical_form(bad), Contains("non-finite"));
  bad(1, 2) = INFINITY;
  CHECK_THROWS_AS(peal::canonical_form(bad), peal::invalid_argument);
  peal::CanonicalOptions o;
  o.rank = 0;
  CHECK_THROWS_WITH(peal::canonical_form(Eigen::MatrixXd::Identity(2, 2).eval(), o),
                    Contains("rank"));
  MatL J5 = MatL::Zero(5, 5);
  for (int i = 0; i < 4; ++i) J5(i, i + 1) = 1;
  CHECK_THROWS_WITH(peal::canonical_form(Eigen::MatrixXd(J5.cast<double>())),
                    Contains("length 5"));
}

// The round trip on the generators peal itself builds: X of every conformance family of
// tests/families.hpp (single blocks, banks, compositions, a basis change, the RoPE, xPos, RetNet
// and ALiBi presets) back through canonical_form to an encoding whose A(τ) is exp(τX), whatever
// basis and blocks the report finds, at τ = −3, 0.5, 7. (Here rather than in a TU of its own:
// this TU already instantiates canonical_form and the long double MatrixExponential; +9 s and
// +0.45 GB of g++ -O2, against +15 s beside the property suites, which share the families.)
template <class Fam>
void round_trip(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  peal_test::Draw draw{rng, peal_test::Regime::Random};
  const auto enc = Fam::template build<double>(draw);
  const Eigen::MatrixXd X = enc.generator();
  const MatL Xl = X.cast<long double>();
  const auto cf = peal::canonical_form(X);
  INFO(Fam::name << " (d = " << X.rows() << "): " << cf.summary());
  const int n = int(X.rows());
  const long double nu = Xl.norm();
  for (long double tau : {-3.0L, 0.5L, 7.0L}) {
    INFO("tau = " << double(tau));
    CHECK(expm_error(cf.encoding, Xl, tau) <=
          CanonicalTol<double>::expm(n, nu, tau, terms(cf.encoding, tau)));
  }
}

TEST_CASE("canonical_form: the generator of every conformance family back to an encoding",
          "[canonical]") {
  using namespace peal_test;
  using peal::Layout;
  using peal::RopeType;
  round_trip<RealFam>(1);
  round_trip<RotationFam>(2);
  round_trip<JordanFam<2>>(3);
  round_trip<JordanFam<3>>(4);
  round_trip<JordanFam<4>>(5);
  round_trip<RotationJordanFam<2>>(6);
  round_trip<RotationJordanFam<3>>(7);
  round_trip<BankFam<RotationFam, Layout::Interleaved>>(8);
  round_trip<BankFam<RealFam, Layout::Interleaved>>(9);
  round_trip<MixedFam>(10);
  round_trip<NestedFam>(11);
  round_trip<BasisChangeFam>(12);
  round_trip<RopeFam<RopeType::Default, Layout::HalfSplit, 64>>(13);
  round_trip<RopeFam<RopeType::Default, Layout::Interleaved, 48, 75>>(14);
  round_trip<XposFam>(15);
  round_trip<RetNetFam<1>>(16);
  round_trip<AlibiFam>(17);
}

// RoPE's scaled presets at head_dim 128 (rope.hpp): skew-symmetric generators of 64 pairs whose
// frequencies span 1 to ~1e-6 (YaRN's ramp, LongRoPE's per-pair factors past the trained length,
// Llama 3's smooth band; partial rotary for LongRoPE: a constant tail). Back through the skew path:
// an orthogonal P, pure rotations (a = 0 exactly), their frequencies the preset's own
// (rope_frequencies, sorted; relative to ‖X‖: the Schur form's eigenvalue error), and A(τ) as
// in the round trip above, at τ = −3 and 10⁴.
template <class Fam>
void preset_round_trip() {
  std::mt19937_64 rng(1);
  peal_test::Draw draw{rng, peal_test::Regime::Random};
  const auto enc = Fam::template build<double>(draw);
  const Eigen::MatrixXd X = enc.generator();
  const MatL Xl = X.cast<long double>();
  const auto cf = peal::canonical_form(X);
  const int n = int(X.rows());
  const long double nu = Xl.norm();
  INFO(Fam::name << " type " << int(Fam::config().scaling.type) << " (d = " << n << "): "
                 << cf.summary());
  CHECK(cf.report.skew_symmetric);
  const Eigen::MatrixXd& P = cf.encoding.P();
  CHECK((P.transpose() * P - Eigen::MatrixXd::Identity(n, n)).cwiseAbs().maxCoeff() <=
        16 * n * CanonicalTol<double>::u);
  std::vector<long double> found, want;
  int pass = 0;
  for (const auto& b : cf.report.blocks) {
    if (b.kind == Kind::PassThrough) {
      ++pass;
      continue;
    }
    REQUIRE(b.kind == Kind::Rotation);
    CHECK(b.a == 0);
    found.push_back(b.omega);
  }
  const auto f = peal::rope_frequencies(Fam::config(), 8192.0);
  for (long double w : f.inv_freq) want.push_back(w);
  CHECK(pass == n - 2 * int(want.size()));
  REQUIRE(found.size() == want.size());
  std::sort(found.begin(), found.end());
  std::sort(want.begin(), want.end());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("pair " << i << ": " << double(want[i]));
    CHECK(std::abs(found[i] - want[i]) <= CanonicalTol<double>::parameter(n, 1, nu));
  }
  for (long double tau : {-3.0L, 1e4L}) {
    INFO("tau = " << double(tau));
    CHECK(expm_error(cf.encoding, Xl, tau) <=
          CanonicalTol<double>::expm(n, nu, tau, terms(cf.encoding, tau)));
  }
}

TEST_CASE("canonical_form: RoPE with YaRN, LongRoPE and Llama 3 scaling (d = 128) back to pure "
          "rotations", "[canonical]") {
  using namespace peal_test;
  using peal::Layout;
  using peal::RopeType;
  preset_round_trip<RopeFam<RopeType::Yarn, Layout::HalfSplit, 128>>();
  preset_round_trip<RopeFam<RopeType::LongRope, Layout::Interleaved, 128, 75>>();
  preset_round_trip<RopeFam<RopeType::Llama3, Layout::HalfSplit, 128>>();
}

}  // namespace
