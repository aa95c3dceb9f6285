// canonical_form(X): any real generator X (d × d) as peal's blocks in a basis change,
//   X = P J P⁻¹,  J = diag(real eigenvalues, rotations, Jordan chains, rotation-Jordan chains,
//                          pass-through),  A(τ) = exp(τX) = P A_J(τ) P⁻¹,
// returned as one fixed encoding type (CanonicalEncoding<S>: BasisChange of a BlockDiagonal of
// banks, docs/design.md §1 "Every real X is similar to a block-diagonal matrix of these
// blocks") that every kernel accepts, with a report: the blocks and their parameters, a
// plain-words classification, κ(P), the residual ‖P J P⁻¹ − X‖/‖X‖, which tolerance decided
// what, and warnings. The method (real Schur form, Sylvester decoupling à la Bavely & Stewart
// 1979, Jordan chains from the ranks of powers with a tolerance; Golub & Wilkinson 1976;
// Kågström & Ruhe 1980) and its tolerances are docs/canonical-form.md. Issue 23 §1.
// Its numerics are function templates on plain loops (detail/canonical/), so peal.hpp includes it
// at no measurable cost; they compile only where canonical_form is called.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "bank.hpp"
#include "basis_change.hpp"
#include "block_diagonal.hpp"
#include "detail/canonical/reduce.hpp"
#include "detail/math/lu_inverse.hpp"
#include "errors.hpp"
#include "jordan_block.hpp"
#include "pass_through.hpp"
#include "real_block.hpp"
#include "rotation_block.hpp"
#include "rotation_jordan_block.hpp"

namespace peal {

/// Longest Jordan chain (real or of a complex pair) the fixed type holds; longer chains are
/// refused (a runtime-size block is the next step of issue 23).
inline constexpr int canonical_max_chain = 4;

/// The encoding canonical_form returns: always this type, parts in this order, unused banks
/// empty. Interleaved layouts; X = P J P⁻¹ with the BasisChange conventions.
template <class S>
using CanonicalBlocks =
    BlockDiagonal<Bank<RealBlock<S>>, Bank<RotationBlock<S>>, Bank<JordanBlock<2, S>>,
                  Bank<JordanBlock<3, S>>, Bank<JordanBlock<4, S>>,
                  Bank<RotationJordanBlock<2, S>>, Bank<RotationJordanBlock<3, S>>,
                  Bank<RotationJordanBlock<4, S>>, PassThrough<S>>;
template <class S>
using CanonicalEncoding = BasisChange<CanonicalBlocks<S>>;

/// Tolerances, relative to ‖X‖_F except `coupling`; empty means the default for the scalar
/// type S of X (u = ε_S / 2 its unit roundoff, d the size), docs/canonical-form.md §5.
struct CanonicalOptions {
  /// Eigenvalues this close may become one eigenvalue with a Jordan chain (when they cannot be
  /// decoupled within `coupling`). Default 8 u^(1/4): a chain of length 4 rounded to S splits
  /// its eigenvalue by ~ (κ u)^(1/4).
  std::optional<double> cluster;
  /// Largest accepted ‖Z_ij‖ of the Sylvester decoupling of two eigenvalue blocks (absolute):
  /// above it, eigenvalues within `cluster` are merged. Default min(1e3, u^(-1/4)) (1e3 in
  /// double and long double, 64 in float).
  std::optional<double> coupling;
  /// Singular values of (T − λI)^k below rank ‖X‖ ‖T − λI‖^(k−1) count as zero. Default √u.
  std::optional<double> rank;
  /// |Re λ| (and |λ|) below zero ‖X‖ become exactly 0. Default 64 d u.
  std::optional<double> zero;
  /// ‖X + Xᵀ‖ ≤ skew ‖X‖ takes the skew-symmetric path. Default 64 d u.
  std::optional<double> skew;
  /// κ₂(P) above this is warned about. Default 1 / √u.
  std::optional<double> kappa_warning;
  /// A family (canonical_axes.hpp) commutes when ‖X_a X_b − X_b X_a‖_F ≤ commute ‖X_a‖_F ‖X_b‖_F
  /// for every pair. Default 64 d u (generators rounded to S from commuting ones: ~4 √d u).
  std::optional<double> commute;
};

/// One block found, in the order of CanonicalEncoding's parts.
struct CanonicalBlock {
  enum class Kind { Real, Rotation, Jordan, RotationJordan, PassThrough };
  Kind kind;
  int length;          // Jordan chain length (1: no chain)
  long double lambda;  // real eigenvalue (Real, Jordan; 0 for PassThrough)
  long double omega;   // rotation frequency > 0 (Rotation, RotationJordan)
  long double a;       // growth (> 0) or decay (< 0) of a rotation
  int first;           // first coordinate (column of P) of the block
  int size;            // coordinates: length, or 2 length for the rotation kinds
};

struct CanonicalReport {
  std::vector<CanonicalBlock> blocks;
  std::string classification;  // plain words: "3 rotations (1 damped, a ∈ [...]), ..."
  long double norm = 0;        // ‖X‖_F
  long double kappa = 1;       // κ₂(P) = σ_max(P) / σ_min(P) (long double Jacobi SVD)
  long double residual = 0;    // ‖P J P⁻¹ − X‖_F / ‖X‖_F, in long double
  bool skew_symmetric = false;
  long double skew_defect = 0;  // ‖X + Xᵀ‖_F / ‖X‖_F
  struct {
    double cluster, coupling, rank, zero, skew, kappa_warning;
  } tolerances{};              // the values used
  std::vector<std::string> decisions;  // which tolerance decided what
  std::vector<std::string> warnings;   // growth, ill-conditioned P, large residual

  /// Everything above as readable lines.
  std::string summary() const {
    std::ostringstream os;
    os.precision(4);
    os << classification << "\n  kappa(P) = " << double(kappa) << ", residual = " << double(residual)
       << (skew_symmetric ? ", skew-symmetric path" : "") << "\n";
    for (const auto& b : blocks) {
      static const char* names[] = {"real", "rotation", "jordan", "rotation-jordan", "pass-through"};
      os << "  [" << b.first << ", " << b.first + b.size << ") " << names[int(b.kind)];
      if (b.length > 1) os << " length " << b.length;
      if (b.kind == CanonicalBlock::Kind::Rotation || b.kind == CanonicalBlock::Kind::RotationJordan)
        os << " omega = " << double(b.omega) << " a = " << double(b.a);
      else if (b.kind != CanonicalBlock::Kind::PassThrough)
        os << " lambda = " << double(b.lambda);
      os << "\n";
    }
    for (const auto& d : decisions) os << "  decided: " << d << "\n";
    for (const auto& w : warnings) os << "  warning: " << w << "\n";
    return os.str();
  }
};

template <class S>
struct CanonicalForm {
  CanonicalEncoding<S> encoding;
  CanonicalReport report;
  std::string summary() const { return report.summary(); }
};

namespace detail {
namespace canonical {

template <class S>
Tolerances resolve(const CanonicalOptions& o, int d) {
  const long double u = std::numeric_limits<S>::epsilon() / 2;
  auto pick = [](const std::optional<double>& v, long double def, const char* name) -> W {
    if (!v) return def;
    if (!(*v > 0) || !std::isfinite(*v)) {
      std::ostringstream os;
      os << "canonical_form: tolerance " << name << " must be finite and > 0, got " << *v;
      fail(os.str());
    }
    return *v;
  };
  return {pick(o.cluster, 8 * std::pow(u, 0.25L), "cluster"),
          pick(o.coupling, std::min(1e3L, std::pow(u, -0.25L)), "coupling"), pick(o.rank, std::sqrt(u), "rank"),
          pick(o.zero, 64.0L * d * u, "zero"), pick(o.skew, 64.0L * d * u, "skew")};
}

inline std::string plural(int n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

inline std::string classify(const std::vector<CanonicalBlock>& blocks) {
  using K = CanonicalBlock::Kind;
  int rot = 0, damped = 0, growing = 0, decays = 0, growths = 0, pass = 0;
  long double amin = 0, amax = 0;  // the rotations' a (chains are listed on their own)
  std::vector<std::string> parts, chains;
  int degree = 0;
  for (const auto& b : blocks) {
    if (b.kind == K::Rotation) {
      amin = rot ? std::min(amin, b.a) : b.a, amax = rot ? std::max(amax, b.a) : b.a;
      ++rot;
      if (b.a != 0) (b.a < 0 ? damped : growing) += 1;
    }
    if (b.kind == K::Real) (b.lambda < 0 ? decays : growths) += 1;
    if (b.kind == K::PassThrough) ++pass;
    if (b.kind == K::Jordan || b.kind == K::RotationJordan) {
      std::ostringstream os;
      os.precision(4);
      os << "a Jordan chain of length " << b.length;
      if (b.kind == K::Jordan)
        os << " at λ = " << double(b.lambda);
      else
        os << " at the pair " << double(b.a) << " ± " << double(b.omega) << "i";
      chains.push_back(os.str());
      degree = std::max(degree, b.length - 1);
    }
  }
  std::ostringstream os;
  os.precision(3);
  if (rot) {
    os << plural(rot, "rotation", "rotations");
    if (damped || growing) {
      os << " (";
      if (damped) os << damped << " damped";
      if (damped && growing) os << ", ";
      if (growing) os << growing << " growing";
      os << ", a ∈ [" << double(amin) << ", " << double(amax) << "])";
    }
    parts.push_back(os.str());
  }
  if (decays) parts.push_back(plural(decays, "decay", "decays"));
  if (growths) parts.push_back(plural(growths, "growth", "growths"));
  if (pass) parts.push_back(plural(pass, "constant coordinate", "constant coordinates"));
  for (auto& c : chains) parts.push_back(c);
  std::string s;
  for (std::size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + parts[i];
  if (degree > 0) s += ": polynomial growth of degree " + std::to_string(degree);
  return s;
}

}  // namespace canonical
}  // namespace detail

namespace detail {
namespace canonical {

/// What canonical_form computes in long double, independent of the scalar type S (one
/// instantiation for every S): the ordered blocks, P and P⁻¹, the report, rcond₁(P), and for
/// each block the index of the piece it came from (from_transition maps them back).
struct Analysis {
  CanonicalReport report;
  Mat<W> P, Pinv, J;  // X = P J P⁻¹, J block diagonal in the order of the blocks
  W rcond = 0;
  std::vector<int> piece;
};

/// The pieces of a reduction as CanonicalEncoding's blocks: P, J, the report. The residual is
/// measured against *Xw when given (canonical_form); from_transition passes none and measures
/// its own. `who` names the caller in the refusals.
template <class Rl>
Analysis assemble(Reduction red, const Mat<Rl>* Xw, const Tolerances& tol, Rl u, Rl kappa_warn,
                  const char* who) {
  using PK = PieceKind;
  int d = 0;
  for (const auto& p : red.pieces) d += int(p.cols.cols());
  for (const auto& p : red.pieces)
    if (p.length > canonical_max_chain) {
      std::ostringstream os;
      os << who << ": X has a Jordan chain of length " << p.length
         << (p.kind == PK::RotationJordan ? " (of a complex pair)" : "")
         << ", longer than the longest supported (" << canonical_max_chain
         << "); a runtime-size block is not yet available (docs/canonical-form.md §6)";
      fail(os.str());
    }
  // Order the pieces as the parts of CanonicalEncoding (stable: Schur order within a part).
  auto slot = [](const Piece& p) {
    switch (p.kind) {
      case PK::Real: return 0;
      case PK::Rotation: return 1;
      case PK::Jordan: return 2 + (p.length - 2);
      case PK::RotationJordan: return 5 + (p.length - 2);
      default: return 8;
    }
  };
  Analysis an;
  CanonicalReport& rep = an.report;
  an.P.resize(d, d);
  an.J = Mat<Rl>::Zero(d, d);
  Mat<Rl>& J = an.J;
  int col = 0;
  for (int s = 0; s < 9; ++s)
    for (std::size_t ip = 0; ip < red.pieces.size(); ++ip) {
      const Piece& p = red.pieces[ip];
      if (slot(p) != s) continue;
      an.piece.push_back(int(ip));
      const int size = int(p.cols.cols());
      an.P.middleCols(col, size) = p.cols;
      const bool rot = p.kind == PK::Rotation || p.kind == PK::RotationJordan;
      for (int b = 0; b < p.length; ++b) {  // J, in long double
        if (rot) {
          const int o = col + 2 * b;
          J(o, o) = J(o + 1, o + 1) = p.a;
          J(o, o + 1) = p.omega, J(o + 1, o) = -p.omega;
          if (b > 0) J(o - 2, o) = J(o - 1, o + 1) = 1;
        } else {
          J(col + b, col + b) = p.lambda;
          if (b > 0) J(col + b - 1, col + b) = 1;
        }
      }
      rep.blocks.push_back({CanonicalBlock::Kind(int(p.kind)), p.length, rot ? 0 : p.lambda,
                            p.omega, p.a, col, size});
      col += size;
    }
  an.Pinv = lu_inverse<Rl>(an.P, an.rcond);
  rep.norm = red.norm;
  {  // κ₂(P) = σ_max / σ_min (one-sided Jacobi, detail/canonical/small_linear.hpp)
    Vec<Rl> sv;
    Mat<std::complex<Rl>> Vs;  // the complex instantiation the chains use: one SVD compiled
    jacobi_svd<std::complex<Rl>>(an.P.template cast<std::complex<Rl>>(), sv, Vs);
    rep.kappa = sv(d - 1) > 0 ? sv(0) / sv(d - 1) : std::numeric_limits<Rl>::infinity();
  }
  if (Xw) {
    const Mat<Rl> back = Mat<Rl>(an.P.lazyProduct(J)).lazyProduct(an.Pinv);
    rep.residual = red.norm > 0 ? (back - *Xw).norm() / red.norm : (back - *Xw).norm();
  }
  rep.skew_symmetric = red.skew;
  rep.skew_defect = red.skew_defect;
  rep.tolerances = {double(tol.cluster), double(tol.coupling), double(tol.rank),
                    double(tol.zero), double(tol.skew), double(kappa_warn)};
  rep.decisions = std::move(red.decisions);
  rep.warnings = std::move(red.warnings);
  rep.classification = classify(rep.blocks);
  for (const auto& b : rep.blocks) {
    const long double re = (b.kind == CanonicalBlock::Kind::Rotation ||
                            b.kind == CanonicalBlock::Kind::RotationJordan) ? b.a : b.lambda;
    if (re > 0) {
      rep.warnings.push_back("growth: Re λ = " + fmt(re) +
                             " > 0, A(τ) grows like e^{Re λ τ} for τ > 0 (and the keys' factor "
                             "G(s) for s < 0)");
      break;
    }
  }
  if (rep.kappa > kappa_warn)
    rep.warnings.push_back("ill-conditioned basis: κ₂(P) = " + fmt(rep.kappa) + " > " +
                           fmt(kappa_warn) + "; scores lose about log10 κ digits");
  if (Xw && rep.residual > std::sqrt(u))
    rep.warnings.push_back("residual ‖P J P⁻¹ − X‖/‖X‖ = " + fmt(rep.residual) +
                           ": the encoding is exp(τX') for a nearby X' (the tolerances above "
                           "decided it), not exp(τX) to rounding");
  if (!(an.rcond > Rl(d) * 2 * u)) {
    std::ostringstream os;
    os << who << ": the basis P of the canonical form has condition number "
       << double(rep.kappa) << ", too large to invert in this scalar type (1/κ₁ ≤ d ε); "
       << "raise the cluster or coupling tolerance to merge the coupled eigenvalues.\n"
       << rep.summary();
    fail(os.str());
  }
  return an;
}

template <class Rl>
Analysis analyse(const Mat<Rl>& Xw, const Tolerances& tol, Rl u, Rl kappa_warn) {
  return assemble<Rl>(reduce<Rl>(Xw, tol), &Xw, tol, u, kappa_warn, "canonical_form");
}

/// The encoding of blocks (in CanonicalEncoding's part order) in the basis P: the blocks'
/// parameters rounded to S, P rounded to S. canonical_form's analysis, and each axis of a
/// commuting family (canonical_axes.hpp).
template <class S>
CanonicalEncoding<S> make_encoding(const std::vector<CanonicalBlock>& blocks, const Mat<W>& P) {
  using K = CanonicalBlock::Kind;
  using R = real_t<S>;
  std::vector<RealBlock<S>> reals;
  std::vector<RotationBlock<S>> rots;
  std::vector<JordanBlock<2, S>> j2;
  std::vector<JordanBlock<3, S>> j3;
  std::vector<JordanBlock<4, S>> j4;
  std::vector<RotationJordanBlock<2, S>> r2;
  std::vector<RotationJordanBlock<3, S>> r3;
  std::vector<RotationJordanBlock<4, S>> r4;
  int npass = 0;
  for (const auto& b : blocks) {
    if (b.kind == K::Real) reals.emplace_back(R(b.lambda));
    if (b.kind == K::Rotation) rots.emplace_back(b.omega, R(b.a));
    if (b.kind == K::Jordan && b.length == 2) j2.emplace_back(R(b.lambda));
    if (b.kind == K::Jordan && b.length == 3) j3.emplace_back(R(b.lambda));
    if (b.kind == K::Jordan && b.length == 4) j4.emplace_back(R(b.lambda));
    if (b.kind == K::RotationJordan && b.length == 2) r2.emplace_back(b.omega, R(b.a));
    if (b.kind == K::RotationJordan && b.length == 3) r3.emplace_back(b.omega, R(b.a));
    if (b.kind == K::RotationJordan && b.length == 4) r4.emplace_back(b.omega, R(b.a));
    if (b.kind == K::PassThrough) ++npass;
  }
  const Layout L = Layout::Interleaved;
  CanonicalBlocks<S> inner(Bank<RealBlock<S>>(reals, L), Bank<RotationBlock<S>>(rots, L),
                           Bank<JordanBlock<2, S>>(j2, L), Bank<JordanBlock<3, S>>(j3, L),
                           Bank<JordanBlock<4, S>>(j4, L), Bank<RotationJordanBlock<2, S>>(r2, L),
                           Bank<RotationJordanBlock<3, S>>(r3, L),
                           Bank<RotationJordanBlock<4, S>>(r4, L), PassThrough<S>(npass));
  return CanonicalEncoding<S>(std::move(inner), P.template cast<S>());
}

}  // namespace canonical
}  // namespace detail

/// The canonical form of a real square generator X (float, double or long double entries;
/// computed in long double). Throws peal::invalid_argument for an empty, non-square, too
/// large (d > 1024) or non-finite X, a tolerance ≤ 0, a Jordan chain longer than
/// canonical_max_chain, or a basis P too ill-conditioned to invert in S.
template <class S>
CanonicalForm<S> canonical_form(const Matrix<S>& X, const CanonicalOptions& options = {}) {
  using namespace detail::canonical;
  static_assert(std::is_floating_point<S>::value, "peal::canonical_form: float, double or long double");
  detail::require(X.rows() == X.cols(), "canonical_form: X must be square");
  detail::require(X.rows() > 0, "canonical_form: X is empty (d = 0)");
  detail::require(X.rows() <= 1024, "canonical_form: X is larger than 1024 x 1024 (the dense "
                                    "long double reduction is O(d^3): minutes at 1024)");
  detail::require(X.allFinite(), "canonical_form: X has non-finite entries");
  const int d = int(X.rows());
  const Tolerances tol = resolve<S>(options, d);
  const W u = std::numeric_limits<S>::epsilon() / W(2);
  if (options.kappa_warning && !(*options.kappa_warning > 0))
    detail::fail("canonical_form: kappa_warning must be > 0");
  const W kappa_warn = options.kappa_warning ? W(*options.kappa_warning) : 1 / std::sqrt(u);
  Analysis an = analyse<W>(Mat<W>(X.template cast<W>()), tol, u, kappa_warn);
  CanonicalEncoding<S> enc = make_encoding<S>(an.report.blocks, an.P);
  return {std::move(enc), std::move(an.report)};
}

/// Any Eigen expression: evaluated to a dense matrix of its scalar first.
template <class Derived>
CanonicalForm<typename Derived::Scalar> canonical_form(const Eigen::MatrixBase<Derived>& X,
                                                       const CanonicalOptions& options = {}) {
  return canonical_form<typename Derived::Scalar>(Matrix<typename Derived::Scalar>(X), options);
}

}  // namespace peal
