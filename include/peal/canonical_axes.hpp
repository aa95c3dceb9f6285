// canonical_form({X_1, ..., X_D}): a family of commuting real generators (one per axis of an
// N-D position: ComRoPE's angle matrices, a learned M-RoPE or LieRE-per-axis) as one basis P
// and, per axis, peal's blocks in it:
//
//   X_a = P J_a P⁻¹ (a = 1..D),  J_a block diagonal with one block structure for every a,
//   A(p) = exp(Σ_a p_a X_a) = P exp(Σ_a p_a J_a) P⁻¹,
//
// returned as a MultiAxis of CanonicalEncoding<S> (multi_axis.hpp), which the N-D kernels
// (encode over points, scores_nd.hpp) accept. Issue 23 §1 ("a family of commuting generators
// ... decomposed with one shared P into a MultiAxis encoding, or refused with the commutator's
// norm when they do not commute"); docs/canonical-form.md §10.
//
// Method: commuting matrices share their invariant subspaces, so the canonical basis of one
// generic combination X = Σ_a c_a X_a / ‖X_a‖ (canonical_form.hpp) block-diagonalises every
// X_a when X's eigenvalues are simple; there X_a restricted to a real eigenvector is a scalar
// λ_a, and restricted to the plane of a complex pair (α ± iω, ω ≠ 0) it commutes with that
// rotation-scaling, so it is one too: a_a I + ω_a [[0, 1], [−1, 0]]. J_a = P⁻¹ X_a P is read
// off those blocks, and ‖P J_a P⁻¹ − X_a‖ / ‖X_a‖ (the axis residual, long double) says whether
// the combination separated everything X_a distinguishes (a repeated eigenvalue of X that X_a
// splits would leave off-block entries); another set of coefficients is tried before refusing.
// Jordan chains are refused: a chain commuting with a chain is a polynomial in its nilpotent
// part, not a JordanBlock per axis, and the N-D kernels refuse chains anyway.
#pragma once

#include <Eigen/Core>
#include <array>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "canonical_form.hpp"
#include "multi_axis.hpp"

namespace peal {

/// What canonical_form returns for a commuting family: the encoding, the report of the
/// combined generator whose basis it uses (its blocks give the structure and P's columns; their
/// parameters are the combination's), each axis's blocks with that axis's parameters (ω may be
/// 0 or negative on an axis), each axis's residual ‖P J_a P⁻¹ − X_a‖_F / ‖X_a‖_F, and the largest
/// commutator ‖X_a X_b − X_b X_a‖_F / (‖X_a‖_F ‖X_b‖_F) over the pairs.
template <class S>
struct CanonicalAxesForm {
  MultiAxis<CanonicalEncoding<S>> encoding;
  CanonicalReport report;
  std::vector<std::vector<CanonicalBlock>> axes;
  std::vector<long double> residuals;
  long double commutator = 0;

  std::string summary() const {
    std::ostringstream os;
    os.precision(4);
    os << axes.size() << " commuting axes, commutator " << double(commutator) << "; basis of "
       << report.summary();
    for (std::size_t a = 0; a < axes.size(); ++a)
      os << "  axis " << a << ": " << detail::canonical::classify(axes[a]) << " (residual "
         << double(residuals[a]) << ")\n";
    return os.str();
  }
};

namespace detail {
namespace canonical {

// Templates on the working type Rl (always W), so that only a TU that calls them compiles
// their products (peal.hpp includes this header).

/// The largest relative commutator of the family.
template <class Rl>
Rl max_commutator(const std::vector<Mat<Rl>>& Xs, const std::vector<Rl>& norms) {
  Rl worst = 0;
  for (std::size_t a = 0; a < Xs.size(); ++a)
    for (std::size_t b = a + 1; b < Xs.size(); ++b) {
      if (norms[a] == 0 || norms[b] == 0) continue;
      const Mat<Rl> c = Xs[a].lazyProduct(Xs[b]) - Xs[b].lazyProduct(Xs[a]);
      worst = std::max(worst, c.norm() / (norms[a] * norms[b]));
    }
  return worst;
}

/// Axis a's blocks in the analysis' basis: J_a = P⁻¹ X_a P read off the combination's blocks;
/// its residual ‖P J_a P⁻¹ − X_a‖_F / ‖X_a‖_F (0 for X_a = 0 reproduced exactly).
template <class Rl>
std::vector<CanonicalBlock> axis_blocks(const Analysis& an, const Mat<Rl>& Xa, Rl norm,
                                        Rl& residual) {
  using K = CanonicalBlock::Kind;
  const Mat<Rl> Ja = an.Pinv.lazyProduct(Xa).lazyProduct(an.P);
  Mat<Rl> Jb = Mat<Rl>::Zero(Ja.rows(), Ja.cols());
  std::vector<CanonicalBlock> out = an.report.blocks;
  for (auto& b : out) {
    const int o = b.first;
    if (b.kind == K::Rotation) {
      b.a = (Ja(o, o) + Ja(o + 1, o + 1)) / 2;
      b.omega = (Ja(o, o + 1) - Ja(o + 1, o)) / 2;
      Jb(o, o) = Jb(o + 1, o + 1) = b.a;
      Jb(o, o + 1) = b.omega, Jb(o + 1, o) = -b.omega;
    } else if (b.kind == K::Real) {
      b.lambda = Jb(o, o) = Ja(o, o);
    }  // pass-through: J_a = 0 there (the residual checks it)
  }
  const Mat<Rl> back = an.P.lazyProduct(Jb).lazyProduct(an.Pinv);
  residual = norm > 0 ? (back - Xa).norm() / norm : (back - Xa).norm();
  return out;
}

}  // namespace canonical
}  // namespace detail

/// The canonical form of a family of commuting generators, one per axis (float, double or long
/// double; computed in long double): one basis P for every axis, each axis's blocks in it, as a
/// MultiAxis. Throws peal::invalid_argument for an empty family or more than
/// max_position_axes generators, generators of different sizes, any refusal of
/// canonical_form(X) (bad entries, a basis too ill-conditioned), generators that do not commute
/// (the message gives the commutator; the limit is CanonicalOptions::commute), a
/// Jordan chain, or a family no combination separates (the largest axis residual above √u).
template <class S>
CanonicalAxesForm<S> canonical_form(const std::vector<Matrix<S>>& Xs,
                                    const CanonicalOptions& options = {}) {
  using namespace detail::canonical;
  using K = CanonicalBlock::Kind;
  const int D = int(Xs.size());
  if (D < 1 || D > max_position_axes)
    detail::fail("canonical_form: a family needs 1 to " + std::to_string(max_position_axes) +
                 " generators, got " + std::to_string(D));
  const int d = int(Xs[0].rows());
  if (d == 0 || d > 1024)
    detail::fail("canonical_form: generator 0 is " + std::to_string(d) + " x " +
                 std::to_string(Xs[0].cols()) + ": the size must be in [1, 1024]");
  std::vector<Mat<W>> Xw;
  std::vector<W> norms;
  for (int a = 0; a < D; ++a) {
    const Matrix<S>& X = Xs[std::size_t(a)];
    if (X.rows() != d || X.cols() != d)
      detail::fail("canonical_form: generator " + std::to_string(a) + " is " +
                   std::to_string(X.rows()) + " x " + std::to_string(X.cols()) + ", generator 0 is " +
                   std::to_string(d) + " x " + std::to_string(d) + " (square, one size)");
    if (!X.allFinite())
      detail::fail("canonical_form: generator " + std::to_string(a) + " has non-finite entries");
    Xw.push_back(X.template cast<W>());
    norms.push_back(Xw.back().norm());
  }
  const Tolerances tol = resolve<S>(options, d);
  const W u = std::numeric_limits<S>::epsilon() / W(2);
  if (options.commute && !(*options.commute > 0 && std::isfinite(*options.commute)))
    detail::fail("canonical_form: tolerance commute must be finite and > 0");
  const W commute = options.commute ? W(*options.commute) : 64 * W(d) * u;
  const W comm = max_commutator(Xw, norms);
  if (comm > commute)
    detail::fail("canonical_form: the generators do not commute: max ‖X_a X_b − X_b X_a‖_F / "
                 "(‖X_a‖_F ‖X_b‖_F) = " + fmt(comm) + " > " + fmt(commute) +
                 " (the commute tolerance); a MultiAxis needs A(p) = Π_a exp(p_a X_a)");
  const W kappa_warn = options.kappa_warning ? W(*options.kappa_warning) : 1 / std::sqrt(u);
  // Coefficients of the combination: far from rational relations between the axes' spectra.
  static const std::array<W, 3> seeds = {0.7548776662466927L, 0.5698402909980532L,
                                         0.6180339887498949L};
  W worst = 0;
  for (const W g : seeds) {
    Mat<W> X = Mat<W>::Zero(d, d);
    W c = 1;
    for (int a = 0; a < D; ++a, c = c * g + (1 - g) / 3)  // distinct, in (0, 1]
      if (norms[std::size_t(a)] > 0) X += (c / norms[std::size_t(a)]) * Xw[std::size_t(a)];
    Analysis an = analyse<W>(X, tol, u, kappa_warn);
    for (const auto& b : an.report.blocks)
      if (b.length > 1)
        detail::fail("canonical_form: the family's generators have a Jordan chain (length " +
                     std::to_string(b.length) + "); commuting chains are not yet supported "
                     "(docs/canonical-form.md §10)\n" + an.report.summary());
    std::vector<std::vector<CanonicalBlock>> axes;
    std::vector<long double> res;
    worst = 0;
    for (int a = 0; a < D; ++a) {
      W r = 0;
      axes.push_back(axis_blocks(an, Xw[std::size_t(a)], norms[std::size_t(a)], r));
      res.push_back(r);
      worst = std::max(worst, r);
    }
    if (worst > std::sqrt(u)) continue;  // a repeated eigenvalue some axis splits: try again
    // A skew-symmetric axis is a pure rotation in the orthogonal P of the skew path: a = 0
    // exactly, as canonical_form(X) gives it (F = G, norms kept).
    for (int a = 0; a < D; ++a)
      if (an.report.skew_symmetric &&
          (Xw[std::size_t(a)] + Xw[std::size_t(a)].transpose()).norm() <= tol.skew * norms[std::size_t(a)])
        for (auto& b : axes[std::size_t(a)])
          if (b.kind == K::Rotation) b.a = 0;
    std::vector<CanonicalEncoding<S>> encs;
    for (int a = 0; a < D; ++a) encs.push_back(make_encoding<S>(axes[std::size_t(a)], an.P));
    return {MultiAxis<CanonicalEncoding<S>>(std::move(encs)), std::move(an.report),
            std::move(axes), std::move(res), comm};
  }
  detail::fail("canonical_form: no combination of the generators separates what each of them "
               "distinguishes (largest axis residual " + fmt(worst) + " > √u = " +
               fmt(std::sqrt(u)) + "): a repeated eigenvalue of every combination tried");
}

}  // namespace peal
