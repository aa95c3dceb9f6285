// canonical_form of a commuting family (include/peal/canonical_axes.hpp, docs/canonical-form.md
// §7): constructed X_a = P J_a P⁻¹ (a = 0..2) with one block structure and per-axis parameters
// in a random P of κ₂ = 10, Qwen2-VL's M-RoPE (its three axes' generators), and what is refused.
// References: the known J_a (the blocks' per-axis parameters) and Eigen's MatrixExponential of
// Σ_a p_a X_a in long double; the N-D kernels against the dense qᵀ exp(Σ_a (p − p')_a X_a) k.
//
// Bounds (u = ε_S / 2, n the size, ν_a = ‖X_a‖_F, κ = κ₂(P)): the per-axis parameters come from
// P⁻¹ X_a P in long double, so their error is X_a's rounding to S carried through the basis
// (test_canonical_form.cpp's parameter bound: 16 n κ² u ν_a). A(p) = Π_a P̂ A_Ĵa(p_a) P̂⁻¹ in S
// is D products of test_canonical_form.cpp's kind, each within 8 u (n + |p_a| ν_a) Σ_a(p_a)
// (Σ_a: that file's terms() of axis a) in the Frobenius norm, and a product of D such factors
// within the sum of their errors times the other factors' terms: bounded by
//   expm = 8 u (D n + Σ_a |p_a| ν_a) Π_a Σ_a(p_a);
// a score through the N-D kernels (q and k encoded once, then the identity's fused product)
// adds 2 (n + 16) u of the same terms (Tol::fused_score): 8 u (D n + 2 n + 32 + Σ_a |p_a| ν_a).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <unsupported/Eigen/MatrixFunctions>
#include <vector>

#include <peal/canonical_axes.hpp>
#include <peal/encode.hpp>
#include <peal/presets/mrope.hpp>
#include <peal/presets/vision_rope.hpp>
#include <peal/scores_nd.hpp>

#include "canonical_bases.hpp"
#include "tolerances.hpp"

namespace {

using peal::CanonicalBlock;
using Kind = CanonicalBlock::Kind;
using MatL = Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic>;
using Catch::Matchers::Contains;
using peal_test::canonical::random_basis;
using peal_test::canonical::terms;
constexpr long double u = peal_test::Tol<double>::eps / 2;

/// A rotation (ω_a, a_a per axis) or a real block (λ_a per axis) of the constructed J_a.
struct Part {
  Kind kind;
  std::vector<long double> p1, p2;  // rotation: ω_a, a_a; real: λ_a
  int size() const { return kind == Kind::Rotation ? 2 : 1; }
};

std::vector<MatL> make_J(const std::vector<Part>& parts, int D) {
  int n = 0;
  for (const auto& p : parts) n += p.size();
  std::vector<MatL> J(std::size_t(D), MatL::Zero(n, n));
  for (int a = 0; a < D; ++a) {
    int o = 0;
    for (const auto& p : parts) {
      MatL& Ja = J[std::size_t(a)];
      if (p.kind == Kind::Rotation) {
        Ja(o, o) = Ja(o + 1, o + 1) = p.p2[std::size_t(a)];
        Ja(o, o + 1) = p.p1[std::size_t(a)], Ja(o + 1, o) = -p.p1[std::size_t(a)];
      } else if (p.kind == Kind::Real) {
        Ja(o, o) = p.p1[std::size_t(a)];
      }
      o += p.size();
    }
  }
  return J;
}

MatL combined(const std::vector<MatL>& Xs, const std::vector<long double>& p) {
  MatL X = MatL::Zero(Xs[0].rows(), Xs[0].cols());
  for (std::size_t a = 0; a < Xs.size(); ++a) X += p[a] * Xs[a];
  return X;
}

/// The bound above: 8 u (extra + Σ_a |p_a| ν_a) Π_a Σ_a(p_a).
template <class M>
long double bound(const M& enc, const std::vector<long double>& nu, const std::vector<long double>& p,
                  long double extra) {
  long double scale = 1, spread = extra;
  for (int a = 0; a < enc.axes(); ++a) {
    scale *= terms(enc.axis(a), p[std::size_t(a)]);
    spread += std::abs(p[std::size_t(a)]) * nu[std::size_t(a)];
  }
  return 8 * u * spread * scale;
}

template <class M>
long double expm_error(const M& enc, const std::vector<MatL>& Xl, const std::vector<long double>& p) {
  std::vector<double> pd(p.begin(), p.end());
  const MatL got = enc.A(Eigen::Map<const Eigen::VectorXd>(pd.data(), Eigen::Index(pd.size())))
                       .template cast<long double>();
  return (got - MatL(combined(Xl, p)).exp()).norm();
}

const std::vector<std::vector<long double>> points = {
    {-3, 0.5, 7}, {2, -1, 0}, {0, 0, 0}, {40, -25, 12}, {-0.25, 3, -6}};

}  // namespace

TEST_CASE("canonical_form of commuting generators: one basis, per-axis blocks",
          "[canonical][multi_axis]") {
  // Rotations following one axis (M-RoPE's sections), two axes, all three (RoPE-Mixed), with
  // and without damping, and decays; then a constant coordinate.
  const std::vector<Part> parts = {
      {Kind::Rotation, {0.9L, 0, 0}, {0, 0, 0}},
      {Kind::Rotation, {0, 0.6L, 0}, {0, -0.02L, 0}},
      {Kind::Rotation, {0, 0, 1.3L}, {0, 0, 0}},
      {Kind::Rotation, {0.4L, -0.7L, 0}, {-0.01L, 0, 0.03L}},
      {Kind::Rotation, {0.2L, 0.3L, 0.5L}, {0, 0, 0}},
      {Kind::Real, {-0.3L, 0.1L, 0}, {}},
      {Kind::Real, {0, 0, -0.5L}, {}},
      {Kind::PassThrough, {}, {}}};
  const int D = 3;
  std::mt19937 rng(21);
  const std::vector<MatL> J = make_J(parts, D);
  const int n = int(J[0].rows());
  const long double kappa = 10;
  const auto B = random_basis(n, kappa, rng);
  std::vector<Eigen::MatrixXd> Xs;
  std::vector<MatL> Xl;
  std::vector<long double> nu;
  for (int a = 0; a < D; ++a) {
    Xs.push_back((B.P * J[std::size_t(a)] * B.Pinv).cast<double>());
    Xl.push_back(Xs.back().cast<long double>());
    nu.push_back(Xl.back().norm());
  }
  const auto cf = peal::canonical_form(Xs);
  INFO(cf.summary());
  CHECK(cf.encoding.axes() == D);
  CHECK(cf.encoding.dim() == n);
  CHECK(cf.commutator <= 64 * n * u * kappa * kappa);
  // The structure: 5 rotations, 2 decays, 1 constant coordinate, in the parts' order.
  REQUIRE(cf.report.blocks.size() == parts.size());
  int rotations = 0, reals = 0;
  for (const auto& b : cf.report.blocks) {
    rotations += b.kind == Kind::Rotation;
    reals += b.kind == Kind::Real;
  }
  CHECK(rotations == 5);
  CHECK(reals == 2);
  CHECK(cf.report.blocks.back().kind == Kind::PassThrough);
  // Per axis: each constructed part found once, its per-axis parameters within the bound (a
  // rotation's ω up to one sign for all axes: the basis may run the plane the other way).
  const long double nu_max = *std::max_element(nu.begin(), nu.end());
  const long double tol = 16 * n * kappa * kappa * u * nu_max;
  for (const auto& part : parts) {
    if (part.kind == Kind::PassThrough) continue;
    int found = 0;
    for (std::size_t i = 0; i < cf.report.blocks.size(); ++i) {
      if (cf.report.blocks[i].kind != part.kind) continue;
      for (const long double sign : {1.0L, -1.0L}) {
        bool all = true;
        for (int a = 0; a < D; ++a) {
          const auto& b = cf.axes[std::size_t(a)][i];
          if (part.kind == Kind::Rotation)
            all = all && std::abs(b.omega - sign * part.p1[std::size_t(a)]) <= tol &&
                  std::abs(b.a - part.p2[std::size_t(a)]) <= tol;
          else
            all = all && sign > 0 && std::abs(b.lambda - part.p1[std::size_t(a)]) <= tol;
        }
        found += all;
      }
    }
    INFO("part of kind " << int(part.kind) << ", first parameter on axis 0: " << double(part.p1[0]));
    CHECK(found == 1);
  }
  for (int a = 0; a < D; ++a) CHECK(cf.residuals[std::size_t(a)] <= 16 * n * kappa * kappa * u);

  for (const auto& p : points) {
    INFO("p = (" << double(p[0]) << ", " << double(p[1]) << ", " << double(p[2]) << ")");
    CHECK(expm_error(cf.encoding, Xl, p) <= bound(cf.encoding, nu, p, D * n));
  }

  SECTION("encode over points: F(p) q · G(p') k against qᵀ exp(Σ_a (p − p')_a X_a) k") {
    // The encoded rows are in P's coordinates (Π_a F_Ja(p_a) Pᵀ q, as a 1-D BasisChange's):
    // only their products are checked. Applying P once per axis (the axes' kernels in turn)
    // failed this and the scores below.
    std::uniform_real_distribution<double> U(-1, 1);
    std::vector<double> q(static_cast<std::size_t>(n)), k(static_cast<std::size_t>(n));
    for (auto& x : q) x = U(rng);
    for (auto& x : k) x = U(rng);
    for (const auto& p : points) {
      const std::vector<double> pq = {double(p[0]), double(p[1]), double(p[2])},
                                pk = {0.5, -1.0, 2.0};
      std::vector<double> qe = q, ke = k;
      peal::encode_queries(cf.encoding, peal::make_view(qe.data(), 1, 1, n), peal::PositionsND(pq, D));
      peal::encode_keys(cf.encoding, peal::make_view(ke.data(), 1, 1, n), peal::PositionsND(pk, D));
      std::vector<long double> lag(D);
      for (int a = 0; a < D; ++a) lag[std::size_t(a)] = (long double)pq[std::size_t(a)] - pk[std::size_t(a)];
      const MatL A = MatL(combined(Xl, lag)).exp();
      Eigen::Matrix<long double, Eigen::Dynamic, 1> qv(n), kv(n);
      long double got = 0;
      for (int c = 0; c < n; ++c) {
        qv(c) = q[std::size_t(c)], kv(c) = k[std::size_t(c)];
        got += (long double)qe[std::size_t(c)] * ke[std::size_t(c)];
      }
      INFO("p = (" << pq[0] << ", " << pq[1] << ", " << pq[2] << ")");
      CHECK(std::abs(got - qv.dot(A * kv)) <=
            bound(cf.encoding, nu, lag, D * n + 2 * n + 32) * qv.norm() * kv.norm());
    }
  }
  SECTION("F(p)ᵀ G(p') = A(p − p'); per-token encode and the batch kernels agree") {
    // Axes in one basis keep the basis change's factors (F = A_J(p)ᵀ Pᵀ, G = A_J(−p) P⁻¹, as a
    // 1-D BasisChange): the per-token encode_query / encode_key and encode over points give the
    // same rows.
    const std::vector<double> p0 = {1.5, -0.5, 2.0}, p1 = {-1.0, 2.5, 0.25};
    const Eigen::Map<const Eigen::VectorXd> v0(p0.data(), 3), v1(p1.data(), 3);
    std::vector<long double> lag(D);
    for (int a = 0; a < D; ++a) lag[std::size_t(a)] = (long double)p0[std::size_t(a)] - p1[std::size_t(a)];
    const MatL FG = (cf.encoding.F(v0).transpose() * cf.encoding.G(v1)).cast<long double>();
    CHECK((FG - MatL(combined(Xl, lag)).exp()).norm() <= bound(cf.encoding, nu, lag, D * n + 2 * n));
    std::uniform_real_distribution<double> U(-1, 1);
    std::vector<double> x(static_cast<std::size_t>(2 * n));
    for (auto& e : x) e = U(rng);
    std::vector<double> qb = x, kb = x;
    const std::vector<double> pts = {p0[0], p0[1], p0[2], p1[0], p1[1], p1[2]};
    peal::encode_queries(cf.encoding, peal::make_view(qb.data(), 2, 1, n), peal::PositionsND(pts, D));
    peal::encode_keys(cf.encoding, peal::make_view(kb.data(), 2, 1, n), peal::PositionsND(pts, D));
    for (int i = 0; i < 2; ++i) {
      const Eigen::Map<const Eigen::VectorXd> xi(x.data() + i * n, n);
      const auto& pi = i == 0 ? p0 : p1;
      const Eigen::Map<const Eigen::VectorXd> v(pi.data(), 3);
      // Two evaluations of one product of D + 1 factors in double: each within the bound of
      // A(p) above (the rounding of P, its inverse and the factors), times |x|.
      const long double tol = bound(cf.encoding, nu, {pi[0], pi[1], pi[2]}, D * n) * xi.norm();
      Eigen::VectorXd q = xi, k = xi;
      cf.encoding.encode_query(q, v);
      cf.encoding.encode_key(k, v);
      CHECK((q - cf.encoding.F(v) * xi).norm() <= tol);
      CHECK((q - Eigen::Map<const Eigen::VectorXd>(qb.data() + i * n, n)).norm() <= tol);
      CHECK((k - Eigen::Map<const Eigen::VectorXd>(kb.data() + i * n, n)).norm() <= tol);
    }
  }
  SECTION("scores over points against qᵀ exp(Σ_a (p − p')_a X_a) k in long double") {
    const int nq = 4, nk = 5, H = 2;
    std::uniform_real_distribution<double> U(-1, 1);
    std::vector<double> q(std::size_t(nq * H * n)), k(std::size_t(nk * H * n));
    for (auto& x : q) x = U(rng);
    for (auto& x : k) x = U(rng);
    std::vector<double> pq = {1, 0.5, -2, 3, 1, 0, -1.5, 2.5, 4, 0, 0, 1},
                        pk = {0, 0, 0, 2, -1, 1, -3, 0.5, 2, 1, 1, 1, 4.5, -2, 0.25};
    std::vector<double> out(std::size_t(H * nq * nk));
    peal::ScoreOptions so;
    so.scale = 1.0;
    peal::scores(cf.encoding, peal::TensorView<const double>(q.data(), nq, H, n),
                 peal::PositionsND(pq, D), peal::TensorView<const double>(k.data(), nk, H, n),
                 peal::PositionsND(pk, D), peal::make_view(out.data(), H, nq, nk), so);
    for (int i = 0; i < nq; ++i)
      for (int j = 0; j < nk; ++j) {
        std::vector<long double> lag(D);
        for (int a = 0; a < D; ++a)
          lag[std::size_t(a)] = (long double)pq[std::size_t(i * D + a)] - pk[std::size_t(j * D + a)];
        const MatL A = MatL(combined(Xl, lag)).exp();
        const long double b = bound(cf.encoding, nu, lag, D * n + 2 * n + 32);
        for (int h = 0; h < H; ++h) {
          Eigen::Matrix<long double, Eigen::Dynamic, 1> qv(n), kv(n);
          for (int c = 0; c < n; ++c) {
            qv(c) = q[std::size_t((i * H + h) * n + c)];
            kv(c) = k[std::size_t((j * H + h) * n + c)];
          }
          const long double r = qv.dot(A * kv);
          INFO("h " << h << " i " << i << " j " << j);
          CHECK(std::abs(out[std::size_t((h * nq + i) * nk + j)] - r) <= b * qv.norm() * kv.norm());
        }
      }
  }
}

// A preset's axes (skew-symmetric, commuting generators) back through canonical_form: the skew
// path, an orthogonal P (to 16 n u), every block a rotation with a = 0 exactly, the residuals, and
// A(p) against the matrix exponential and against the preset's own A(p), at the first D
// coordinates of two of the points above. Returns the form, and each axis's count of the pairs it turns
// (|ω| above the parameter bound of a κ = 1 basis).
template <class M>
std::pair<peal::CanonicalAxesForm<double>, std::vector<int>> preset_axes(const M& m) {
  const int D = m.axes(), n = m.dim();
  std::vector<Eigen::MatrixXd> Xs;
  std::vector<MatL> Xl;
  std::vector<long double> nu;
  for (int a = 0; a < D; ++a) {
    Xs.push_back(m.generator(a));
    Xl.push_back(Xs.back().cast<long double>());
    nu.push_back(Xl.back().norm());
  }
  auto cf = peal::canonical_form(Xs);
  INFO(cf.summary());
  CHECK(cf.report.skew_symmetric);
  const Eigen::MatrixXd& P = cf.encoding.axis(0).P();
  CHECK((P.transpose() * P - Eigen::MatrixXd::Identity(n, n)).cwiseAbs().maxCoeff() <= 16 * n * u);
  std::vector<int> moving(std::size_t(D), 0);
  for (int a = 0; a < D; ++a) {
    for (const auto& b : cf.axes[std::size_t(a)]) {
      CHECK(b.kind == Kind::Rotation);
      CHECK(b.a == 0);
      moving[std::size_t(a)] += std::abs(b.omega) > 16 * n * u * nu[std::size_t(a)];
    }
    CHECK(cf.residuals[std::size_t(a)] <= 16 * n * u);
  }
  for (const auto& p3 : {points[0], points[3]}) {  // two points: each a d x d long double expm
    const std::vector<long double> p(p3.begin(), p3.begin() + D);
    INFO("p = (" << double(p[0]) << ", " << double(p[1]) << (D > 2 ? ", ..." : "") << ")");
    CHECK(expm_error(cf.encoding, Xl, p) <= bound(cf.encoding, nu, p, D * n));
    Eigen::VectorXd pd(D);
    for (int a = 0; a < D; ++a) pd(a) = double(p[std::size_t(a)]);
    CHECK((cf.encoding.A(pd) - m.A(pd)).norm() <= bound(cf.encoding, nu, p, D * n));
  }
  return {std::move(cf), moving};
}

TEST_CASE("canonical_form of M-RoPE's axes: pure rotations in an orthogonal basis",
          "[canonical][multi_axis]") {
  // Qwen2-VL: head_dim 128, θ = 10⁶, mrope_section [16, 24, 24] (presets/mrope.hpp): each axis
  // turns exactly its section's pairs.
  peal::RopeConfig c;
  c.head_dim = 128;
  c.rope_theta = 1e6;
  c.scaling.mrope_section = {16, 24, 24};
  const auto r = preset_axes(peal::mrope<double>(c));
  CHECK(r.first.report.blocks.size() == 64);
  CHECK(r.second == c.scaling.mrope_section);
}

TEST_CASE("canonical_form of the ViT presets' axes (rope-vit, RoPE-Mixed, DINOv3)", "[canonical][multi_axis]") {
  // rope-vit (presets/vision_rope.hpp), head_dim 64: axial, each pair on x or on y (the same
  // magnitudes on both: the combination separates them); RoPE-Mixed, one head, every pair
  // turning on both axes (directions α and α + π/2).
  const auto axial = preset_axes(peal::rope_axial_2d<double>(64));
  CHECK(axial.second == std::vector<int>{16, 16});
  const auto mixed = preset_axes(peal::rope_mixed_2d<double>(64, {0.7}).head(0));
  CHECK(mixed.second == std::vector<int>{32, 32});
  // DINOv3, head_dim 64: half-split pairs, the first d/4 turning with y, the next d/4 with x, at
  // 2π / period_j (base 100, and the min/max-period form of its larger models).
  peal::Dinov3RopeConfig dino;
  dino.head_dim = 64;
  const auto base = preset_axes(peal::dinov3_rope<double>(dino));
  CHECK(base.second == std::vector<int>{16, 16});
  dino.base.reset();
  dino.min_period = 0.5;
  dino.max_period = 90.0;
  const auto periods = preset_axes(peal::dinov3_rope<double>(dino));
  CHECK(periods.second == std::vector<int>{16, 16});
}

TEST_CASE("canonical_form of a family: what is refused", "[canonical][multi_axis][errors]") {
  std::mt19937 rng(3);
  std::normal_distribution<double> g;
  auto skew = [&](int n) {
    Eigen::MatrixXd A(n, n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) A(i, j) = g(rng);
    return Eigen::MatrixXd(A - A.transpose());
  };
  // Two random skew generators do not commute; the message gives the commutator.
  CHECK_THROWS_WITH(peal::canonical_form(std::vector<Eigen::MatrixXd>{skew(4), skew(4)}),
                    Contains("do not commute") && Contains("‖X_a X_b − X_b X_a‖_F"));
  // A Jordan chain: N and I + N commute, and every combination is a chain.
  Eigen::MatrixXd N = Eigen::MatrixXd::Zero(3, 3);
  N(0, 1) = N(1, 2) = 1;
  const Eigen::MatrixXd I3 = Eigen::MatrixXd::Identity(3, 3);
  CHECK_THROWS_WITH(peal::canonical_form(std::vector<Eigen::MatrixXd>{N, I3 + N}),
                    Contains("Jordan chain"));
  CHECK_THROWS_WITH(peal::canonical_form(std::vector<Eigen::MatrixXd>{}), Contains("1 to"));
  CHECK_THROWS_WITH(peal::canonical_form(std::vector<Eigen::MatrixXd>{I3, Eigen::MatrixXd(4, 4)}),
                    Contains("generator 1 is 4 x 4"));
  Eigen::MatrixXd bad = I3;
  bad(2, 0) = std::nan("");
  CHECK_THROWS_WITH(peal::canonical_form(std::vector<Eigen::MatrixXd>{I3, bad}),
                    Contains("non-finite"));
  // A MultiAxis of basis changes needs one P for every axis (multi_axis.hpp).
  using Bank = peal::Bank<peal::RotationBlock<double>>;
  const Bank b0({peal::RotationBlock<double>(0.5L)}), b1({peal::RotationBlock<double>(0.3L)});
  Eigen::MatrixXd P1 = Eigen::MatrixXd::Identity(2, 2), P2 = P1;
  P2(0, 1) = 0.25;
  CHECK_THROWS_WITH(peal::MultiAxis<peal::BasisChange<Bank>>(
                        {peal::change_basis(b0, P1), peal::change_basis(b1, P2)}),
                    Contains("do not commute"));
  CHECK_NOTHROW(peal::MultiAxis<peal::BasisChange<Bank>>(
      {peal::change_basis(b0, P2), peal::change_basis(b1, P2)}));
  // One generator: the single form's blocks, as a MultiAxis of one axis.
  const Eigen::MatrixXd X = skew(6);
  const auto one = peal::canonical_form(std::vector<Eigen::MatrixXd>{X});
  CHECK(one.encoding.axes() == 1);
  CHECK((one.encoding.A(Eigen::Matrix<double, 1, 1>(2.5)) - Eigen::MatrixXd((2.5 * X).exp())).norm() <=
        1e-12);
}
