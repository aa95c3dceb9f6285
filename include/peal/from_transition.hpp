// from_transition(M): the encoding of a discrete-time transition M = A(1) (positions are
// integers): A(n) = Mⁿ, and between the integers A(τ) = exp(τX) with X = log M, the principal
// real logarithm, in canonical form (docs/canonical-form.md §8 "Discrete time"; issue 23 §2).
//   A real M has a real logarithm iff it is nonsingular and, at each negative real eigenvalue,
//   the Jordan chains of each length come in pairs (Culver, On the existence and uniqueness of
//   the real logarithm of a matrix, Proc. AMS 17, 1966). Principal branch, per block of M:
//     μ > 0, chain of length k:        log(μI + N) = log μ I + f(N),  f(x) = log(1 + x/μ):
//                                      a JordanBlock{log μ} (RealBlock for k = 1);
//     ρe^{±iθ}, θ ∈ (0, π), length k:  RotationBlock / RotationJordanBlock{ω = θ, a = log ρ};
//     two chains of length k at μ < 0: (−|μ|)ⁿ = |μ|ⁿ cos πn, a rotation by π:
//                                      Rotation(Jordan)Block{ω = π, a = log|μ|}.
//   f(N) = N/μ − N²/(2μ²) + … is similar to N (f'(0) ≠ 0): f(N) S = S N with S the Jordan chain
//   of f(N) ending in e_k, s_j = f(N)^{k−j} e_k, upper triangular. With φ(x + iy) = [[x, y],
//   [−y, x]] (the generator of RotationBlock{ω = y, a = x}, design §1) applied entrywise, a
//   complex chain's block of M is φ(zI + N), its logarithm φ(Log z I + f(N)) =
//   φ(S) φ(Log z I + N) φ(S)⁻¹: the columns of P are those of M's chain times φ(S).
// M is decomposed once, by the reduction of canonical_form (real Schur form, Sylvester
// decoupling, Jordan chains; detail/canonical/), with its tolerances relative to ‖M‖_F; each
// piece's logarithm is taken in closed form in long double, so the blocks of X and the
// eigenvalue of M each came from are known exactly, with no second decomposition of X.
// A negative eigenvalue whose chains do not pair is refused by name (no real logarithm), or,
// with TransitionOptions::pad_unpaired, given the exact integer-position encoding of M padded
// with a copy of each unpaired chain on extra coordinates (queries and keys padded with zeros).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "canonical_form.hpp"
#include "errors.hpp"

namespace peal {

/// canonical_form's tolerances, applied to the decomposition of M (relative to ‖M‖_F), and:
struct TransitionOptions : CanonicalOptions {
  /// A negative eigenvalue whose Jordan chains of some length do not pair has no real
  /// logarithm. false: refused (peal::invalid_argument naming it). true: M is padded with a
  /// copy of each unpaired chain on extra coordinates, d → d + (their lengths), and the padded
  /// matrix M ⊕ (μI + N) has a real logarithm whose A(n) restricted to the first d
  /// coordinates is Mⁿ at every integer n: pad queries and keys with zeros.
  bool pad_unpaired = false;
};

/// Where one block of X = log M came from.
struct TransitionSource {
  std::complex<long double> mu;  // the eigenvalue of M (Im > 0: the pair μ, μ̄)
  int chains = 1;                // 2: two chains of this length at a negative μ, a rotation by π
  long double split = 0;         // two chains: |μ₁ − μ₂| as computed (0 within one cluster)
  bool padded = false;           // the second chain is the padding copy (pad_unpaired)
};

template <class S>
struct TransitionForm {
  /// A(n) = Mⁿ (to rounding), A(τ) = exp(τ log M); dimension d, or d + padding.
  CanonicalEncoding<S> encoding;
  /// The blocks of X = log M in the order of the encoding, κ₂(P), decisions and warnings;
  /// here `norm` = ‖X‖_F, `residual` = ‖P e^J P⁻¹ − M‖_F / ‖M‖_F (M padded if padding), in
  /// long double, and `skew_symmetric`: X is, within the skew tolerance (an orthogonal M).
  CanonicalReport report;
  /// sources[i]: the eigenvalue of M that block i of report.blocks came from.
  std::vector<TransitionSource> sources;
  /// Coordinates added by pad_unpaired (0 otherwise): the encoding acts on d + padding.
  int padding = 0;

  std::string summary() const {
    std::ostringstream os;
    os.precision(6);
    os << "X = log M: " << report.summary() << "  eigenvalues of M -> blocks of X:\n";
    for (std::size_t i = 0; i < sources.size() && i < report.blocks.size(); ++i) {
      const auto& s = sources[i];
      const auto& b = report.blocks[i];
      os << "  [" << b.first << ", " << b.first + b.size << ") <- mu = " << double(s.mu.real());
      if (s.mu.imag() != 0) os << " ± " << double(s.mu.imag()) << "i";
      if (s.chains == 2)
        os << (s.padded ? " (one chain and its padding copy" : " (two chains")
           << ": a rotation by pi, split " << double(s.split) << ")";
      os << "\n";
    }
    if (padding) os << "  padded with " << padding << " coordinate(s): pad queries and keys with zeros\n";
    return os.str();
  }
};

namespace detail {
namespace canonical {

// The helpers below are templates on their working type (Rl: always W), so that their types are
// dependent and only a TU that calls from_transition compiles their long double and complex
// products and expression types (peal.hpp includes this header).
/// S (k × k, upper triangular) with f(N) S = S N, f(x) = log(1 + x/z) = Σ_{j≥1} (−1)^{j+1}
/// x^j / (j z^j), N the k × k shift: the Jordan chain of f(N) ending in e_k,
/// column j = f(N)^{k−1−j} e_k (diagonal entries z^{−(k−1−j)}).
template <class Rl = W>
Mat<std::complex<Rl>> log_chain_basis(std::complex<Rl> z, int k) {
  std::vector<std::complex<Rl>> c(std::size_t(k), std::complex<Rl>(0));  // c[j]: of N^j in f(N)
  std::complex<Rl> zinv_j = 1;
  for (int j = 1; j < k; ++j) {
    zinv_j /= z;
    c[std::size_t(j)] = (j % 2 ? Rl(1) : Rl(-1)) * zinv_j / Rl(j);
  }
  Mat<std::complex<Rl>> Sm = Mat<std::complex<Rl>>::Zero(k, k);
  Sm(k - 1, k - 1) = 1;
  for (int j = k - 2; j >= 0; --j)  // column j = f(N) column j + 1 (Toeplitz, plain loops)
    for (int i = 0; i < k; ++i) {
      std::complex<Rl> s = 0;
      for (int l = i + 1; l < k; ++l) s += c[std::size_t(l - i)] * Sm(l, j + 1);
      Sm(i, j) = s;
    }
  return Sm;
}

/// φ applied entrywise: a complex k × k matrix as the real 2k × 2k matrix of 2 × 2 blocks
/// [[Re, Im], [−Im, Re]] (a ring homomorphism: φ(AB) = φ(A) φ(B)).
template <class Rl = W>
Mat<Rl> phi(const Mat<std::complex<Rl>>& A) {
  Mat<Rl> R(2 * A.rows(), 2 * A.cols());
  for (Eigen::Index i = 0; i < A.rows(); ++i)
    for (Eigen::Index j = 0; j < A.cols(); ++j) {
      R(2 * i, 2 * j) = R(2 * i + 1, 2 * j + 1) = A(i, j).real();
      R(2 * i, 2 * j + 1) = A(i, j).imag();
      R(2 * i + 1, 2 * j) = -A(i, j).imag();
    }
  return R;
}

/// e^J for the blocks of a report (closed forms of docs/design.md §1 at τ = 1), long double.
template <class Rl = W>
Mat<Rl> exp_blocks(const std::vector<CanonicalBlock>& blocks, int d) {
  using K = CanonicalBlock::Kind;
  Mat<Rl> E = Mat<Rl>::Zero(d, d);
  for (const auto& b : blocks) {
    const bool rot = b.kind == K::Rotation || b.kind == K::RotationJordan;
    const int o = b.first;
    Rl fact = 1;
    for (int j = 0; j < b.length; ++j) {  // block (i, i + j) = e^θ / j!
      if (j > 0) fact *= Rl(j);
      for (int i = 0; i + j < b.length; ++i) {
        if (rot) {
          const Rl ea = std::exp(b.a) / fact, c = ea * std::cos(b.omega), s = ea * std::sin(b.omega);
          const int r = o + 2 * i, q = o + 2 * (i + j);
          E(r, q) = E(r + 1, q + 1) = c;
          E(r, q + 1) = s, E(r + 1, q) = -s;
        } else {
          E(o + i, o + i + j) = (b.kind == K::PassThrough ? Rl(1) : std::exp(b.lambda)) / fact;
        }
      }
    }
  }
  return E;
}

/// The principal real logarithm of one piece of M: its eigenvalue z (Im z ≥ 0), its chain
/// length k and its columns Q (n × k, or n × 2k in pair form: a complex pair, or two
/// interleaved chains at a negative μ). `zero_abs` = zero ‖M‖_F: a log-modulus within
/// zero_abs / |z| of 0 is set to 0 (an eigenvalue on the unit circle to rounding).
template <class Rl = W>
Piece log_piece(std::complex<Rl> z, int k, const Mat<Rl>& Q, bool pair_form, Rl zero_abs, int& snapped) {
  const Mat<std::complex<Rl>> Sc = log_chain_basis(z, k);
  const Rl r = std::abs(z);
  Rl lr = std::log(r);
  if (lr != 0 && std::abs(lr) <= zero_abs / r) lr = 0, ++snapped;
  Piece p;
  p.length = k;
  if (pair_form) {
    p.kind = k == 1 ? PieceKind::Rotation : PieceKind::RotationJordan;
    p.lambda = 0;
    p.omega = std::atan2(z.imag(), z.real());  // (0, π]; π for a negative μ
    p.a = lr;
    p.cols = Q.lazyProduct(phi(Sc));
  } else {
    p.kind = k == 1 ? (lr == 0 ? PieceKind::PassThrough : PieceKind::Real) : PieceKind::Jordan;
    p.lambda = lr;
    p.omega = p.a = 0;
    p.cols = Q.lazyProduct(Mat<Rl>(Sc.real()));
  }
  scale_piece<Rl>(p);
  return p;
}

/// A normal M (MᵀM = MMᵀ within the skew tolerance: orthogonal, symmetric, scaled rotations)
/// has a block-diagonal real Schur form: its pieces are read off it, 1 × 1 blocks real
/// eigenvalues and 2 × 2 blocks ≈ [[α, β], [−β, α]] pairs α ± |β|i (columns swapped when
/// β < 0, as canonical_form's skew-symmetric path), P = Q orthogonal. The decoupling of the
/// general path would keep two equal eigenvalues split by rounding apart with a coupling of
/// order 1 (an oblique P, F ≠ G for an orthogonal M).
template <class Rl = W>
Reduction normal_path(const Mat<Rl>& M, const Tolerances& tol) {
  Reduction r;
  r.norm = M.norm();
  const Eigen::Index n = M.rows();
  const Schur<Rl> rs = real_schur<Rl>(M);
  const Mat<Rl>& T = rs.T;
  const Mat<Rl>& Q = rs.Q;
  for (Eigen::Index i = 0; i < n;) {
    if (i + 1 < n && T(i + 1, i) != 0) {
      const Rl beta = (T(i, i + 1) - T(i + 1, i)) / 2, alpha = (T(i, i) + T(i + 1, i + 1)) / 2;
      Mat<Rl> cols(n, 2);
      cols.col(0) = Q.col(beta > 0 ? i : i + 1);
      cols.col(1) = Q.col(beta > 0 ? i + 1 : i);
      r.pieces.push_back({PieceKind::Rotation, 1, 0, std::abs(beta),
                          std::abs(alpha) <= tol.zero * r.norm ? Rl(0) : alpha, cols});
      i += 2;
    } else {
      const Rl lambda = T(i, i);
      const bool zero = std::abs(lambda) <= tol.zero * r.norm;
      r.pieces.push_back({zero ? PieceKind::PassThrough : PieceKind::Real, 1, zero ? Rl(0) : lambda, 0, 0,
                          Mat<Rl>(Q.col(i))});
      i += 1;
    }
  }
  return r;
}

}  // namespace canonical
}  // namespace detail

/// The encoding with A(1) = M: X = log M (principal real logarithm) in canonical form, A(n) =
/// Mⁿ at integer n. M real square (float, double or long double entries; computed in long
/// double). Throws peal::invalid_argument for an empty, non-square, too large (d > 1024) or
/// non-finite M, a tolerance ≤ 0, a singular M (an eigenvalue within the zero tolerance of 0:
/// no logarithm), a negative eigenvalue whose Jordan chains of some length do not pair (no real
/// logarithm; unless options.pad_unpaired), a chain longer than canonical_max_chain, or a basis
/// P too ill-conditioned to invert in S.
template <class S>
TransitionForm<S> from_transition(const Matrix<S>& M, const TransitionOptions& options = {}) {
  using namespace detail::canonical;
  static_assert(std::is_floating_point<S>::value, "peal::from_transition: float, double or long double");
  detail::require(M.rows() == M.cols(), "from_transition: M must be square");
  detail::require(M.rows() > 0, "from_transition: M is empty (d = 0)");
  detail::require(M.rows() <= 1024, "from_transition: M is larger than 1024 x 1024 (the dense "
                                    "long double reduction is O(d^3): minutes at 1024)");
  detail::require(M.allFinite(), "from_transition: M has non-finite entries");
  {
    const std::pair<const std::optional<double>*, const char*> given[] = {
        {&options.cluster, "cluster"}, {&options.coupling, "coupling"}, {&options.rank, "rank"},
        {&options.zero, "zero"},       {&options.skew, "skew"},         {&options.kappa_warning, "kappa_warning"}};
    for (const auto& g : given)
      if (*g.first && !(**g.first > 0 && std::isfinite(**g.first))) {
        std::ostringstream os;
        os << "from_transition: tolerance " << g.second << " must be finite and > 0, got " << **g.first;
        detail::fail(os.str());
      }
  }
  const int d = int(M.rows());
  const Tolerances tol = resolve<S>(options, d);
  const W u = std::numeric_limits<S>::epsilon() / W(2);
  const W kappa_warn = options.kappa_warning ? W(*options.kappa_warning) : 1 / std::sqrt(u);
  const Mat<W> Mw = M.template cast<W>();
  const W nm2 = Mw.squaredNorm();
  const W defect = nm2 > 0 ? Mat<W>(Mw.transpose().lazyProduct(Mw) - Mw.lazyProduct(Mw.transpose())).norm() / nm2
                           : W(0);
  const bool normal = nm2 > 0 && defect <= tol.skew;
  const Reduction red = normal ? normal_path(Mw, tol) : reduce<W>(Mw, tol);
  const W nu = red.norm, cl = tol.cluster * nu, zero_abs = tol.zero * nu;

  // Refusals that the pieces of M decide: singular M, chains longer than the fixed type holds.
  int singular = 0;
  for (const Piece& p : red.pieces) {
    if (p.kind == PieceKind::PassThrough) ++singular;
    if (p.length > canonical_max_chain) {
      std::ostringstream os;
      os << "from_transition: M has a Jordan chain of length " << p.length
         << (p.kind == PieceKind::RotationJordan ? " (of a complex pair)" : "")
         << " (and so has log M), longer than the longest supported (" << canonical_max_chain
         << "); a runtime-size block is not yet available (docs/canonical-form.md §6)";
      detail::fail(os.str());
    }
  }
  if (singular) {
    std::ostringstream os;
    os << "from_transition: M is singular: " << singular << " eigenvalue(s) 0 (|μ| within the zero "
       << "tolerance " << fmt(tol.zero) << "·‖M‖_F = " << fmt(zero_abs) << "), and 0 has no logarithm";
    detail::fail(os.str());
  }

  // Negative real pieces, paired by chain length and eigenvalue (within the cluster tolerance).
  std::vector<std::size_t> neg;
  for (std::size_t i = 0; i < red.pieces.size(); ++i) {
    const Piece& p = red.pieces[i];
    if ((p.kind == PieceKind::Real || p.kind == PieceKind::Jordan) && p.lambda < 0) neg.push_back(i);
  }
  std::sort(neg.begin(), neg.end(), [&](std::size_t x, std::size_t y) {
    const Piece &a = red.pieces[x], &b = red.pieces[y];
    return a.length != b.length ? a.length < b.length : a.lambda < b.lambda;
  });
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  std::vector<std::size_t> unpaired;
  for (std::size_t i = 0; i < neg.size();) {
    const Piece& a = red.pieces[neg[i]];
    if (i + 1 < neg.size() && red.pieces[neg[i + 1]].length == a.length &&
        std::abs(red.pieces[neg[i + 1]].lambda - a.lambda) <= cl) {
      pairs.emplace_back(neg[i], neg[i + 1]);
      i += 2;
    } else {
      unpaired.push_back(neg[i]);
      i += 1;
    }
  }
  auto describe = [&](W mu) {  // multiplicity and chain lengths of all negative pieces near mu
    int mult = 0;
    std::string lengths;
    for (std::size_t i : neg)
      if (std::abs(red.pieces[i].lambda - mu) <= cl) {
        mult += red.pieces[i].length;
        lengths += (lengths.empty() ? "" : ", ") + std::to_string(red.pieces[i].length);
      }
    return "the negative eigenvalue " + fmt(mu) + " of multiplicity " + std::to_string(mult) +
           " (Jordan chains of length " + lengths + ")";
  };
  std::vector<std::string> decisions;
  if (normal)
    decisions.push_back("M normal within the skew tolerance (‖MᵀM − MMᵀ‖_F/‖M‖_F² = " + fmt(defect) +
                        " ≤ " + fmt(tol.skew) + "): the blocks read from its real Schur form (block "
                        "diagonal), an orthogonal P");
  if (!unpaired.empty() && !options.pad_unpaired) {
    std::ostringstream os;
    os << "from_transition: M has no real logarithm: ";
    std::vector<W> named;
    for (std::size_t i : unpaired) {
      const W mu = red.pieces[i].lambda;
      bool seen = false;
      for (W x : named) seen = seen || std::abs(x - mu) <= cl;
      if (seen) continue;
      os << (named.empty() ? "" : "; ") << describe(mu);
      named.push_back(mu);
    }
    os << ". A real logarithm needs the Jordan chains of each length at a negative eigenvalue to "
          "come in pairs (Culver 1966; eigenvalues within the cluster tolerance "
       << fmt(tol.cluster) << "·‖M‖_F count as one). At integer positions (−|μ|)ⁿ = |μ|ⁿ cos πn: "
          "TransitionOptions::pad_unpaired gives the exact integer-position encoding of M padded "
          "with a copy of each unpaired chain (a rotation by π per pair; queries and keys padded "
          "with zeros)";
    detail::fail(os.str());
  }
  int padding = 0;
  for (std::size_t i : unpaired) padding += red.pieces[i].length;
  const int D = d + padding;
  auto padded = [&](const Mat<W>& C) {
    Mat<W> R = Mat<W>::Zero(D, C.cols());
    R.topRows(d) = C;
    return R;
  };

  // The logarithm of each piece, with its source.
  Reduction rx;
  std::vector<TransitionSource> src;
  int snapped = 0;
  for (std::size_t i = 0; i < red.pieces.size(); ++i) {
    const Piece& p = red.pieces[i];
    if (std::find(neg.begin(), neg.end(), i) != neg.end()) continue;
    const bool pair = p.kind == PieceKind::Rotation || p.kind == PieceKind::RotationJordan;
    const CW z = pair ? CW(p.a, p.omega) : CW(p.lambda, 0);
    rx.pieces.push_back(log_piece(z, p.length, padded(p.cols), pair, zero_abs, snapped));
    src.push_back({z, 1, 0, false});
  }
  auto interleave = [&](const Mat<W>& A, const Mat<W>& B) {
    Mat<W> C(D, A.cols() + B.cols());
    for (Eigen::Index j = 0; j < A.cols(); ++j) C.col(2 * j) = A.col(j), C.col(2 * j + 1) = B.col(j);
    return C;
  };
  for (const auto& pr : pairs) {
    const Piece &a = red.pieces[pr.first], &b = red.pieces[pr.second];
    const W mu = (a.lambda + b.lambda) / 2;
    rx.pieces.push_back(log_piece(CW(mu, 0), a.length, interleave(padded(a.cols), padded(b.cols)),
                                  true, zero_abs, snapped));
    src.push_back({CW(mu, 0), 2, std::abs(a.lambda - b.lambda), false});
    decisions.push_back("eigenvalue " + fmt(mu) + " of M: two Jordan chains of length " +
                        std::to_string(a.length) + " (eigenvalues " + fmt(a.lambda) + ", " +
                        fmt(b.lambda) + ", within the cluster tolerance " + fmt(tol.cluster) +
                        "·‖M‖_F) paired into a rotation by π with a = log|μ| = " +
                        fmt(std::log(-mu)) + ": (−|μ|)ⁿ = |μ|ⁿ cos πn");
  }
  Mat<W> Mref = Mat<W>::Zero(D, D);  // M, padded with the unpaired chains' blocks μI + N
  Mref.topLeftCorner(d, d) = Mw;
  int off = d;
  for (std::size_t i : unpaired) {
    const Piece& p = red.pieces[i];
    Mat<W> G = Mat<W>::Zero(D, p.length);
    for (int j = 0; j < p.length; ++j) {
      G(off + j, j) = 1;
      Mref(off + j, off + j) = p.lambda;
      if (j > 0) Mref(off + j - 1, off + j) = 1;
    }
    rx.pieces.push_back(log_piece(CW(p.lambda, 0), p.length, interleave(padded(p.cols), G), true,
                                  zero_abs, snapped));
    src.push_back({CW(p.lambda, 0), 2, 0, true});
    decisions.push_back(describe(p.lambda) + " of M has no real logarithm (Culver 1966): padded "
                        "with a copy of a chain of length " + std::to_string(p.length) +
                        " on coordinates [" + std::to_string(off) + ", " +
                        std::to_string(off + p.length) + "), the pair a rotation by π with a = " +
                        fmt(std::log(-p.lambda)) + "; A(n) restricted to the first " +
                        std::to_string(d) + " coordinates is Mⁿ at integer n only");
    off += p.length;
  }
  if (snapped)
    decisions.push_back(std::to_string(snapped) + " eigenvalue(s) of M with |log|μ|| ≤ zero tolerance " +
                        fmt(tol.zero) + "·‖M‖_F/|μ|: on the unit circle, log|μ| set to 0");

  for (const auto& s : red.decisions) rx.decisions.push_back("decomposing M (‖X‖ there is ‖M‖_F): " + s);
  for (auto& s : decisions) rx.decisions.push_back(std::move(s));
  rx.warnings = red.warnings;
  Analysis an = assemble<W>(std::move(rx), nullptr, tol, u, kappa_warn, "from_transition");

  // The report of X = log M: its norm, its skew symmetry, the residual against M.
  CanonicalReport& rep = an.report;
  const Mat<W> X = Mat<W>(an.P.lazyProduct(an.J)).lazyProduct(an.Pinv);
  rep.norm = X.norm();
  rep.skew_defect = rep.norm > 0 ? (X + X.transpose()).norm() / rep.norm : W(0);
  rep.skew_symmetric = rep.skew_defect <= tol.skew;
  const Mat<W> A1 = Mat<W>(an.P.lazyProduct(exp_blocks(rep.blocks, D))).lazyProduct(an.Pinv);
  rep.residual = (A1 - Mref).norm() / Mref.norm();
  if (rep.residual > std::sqrt(u))
    rep.warnings.push_back("residual ‖A(1) − M‖/‖M‖ = " + fmt(rep.residual) +
                           ": the encoding's A(1) is a nearby M' (the tolerances above decided "
                           "it), not M to rounding");
  TransitionForm<S> out{make_encoding<S>(an.report.blocks, an.P), std::move(an.report), {},
                       padding};
  for (int ip : an.piece) out.sources.push_back(src[std::size_t(ip)]);
  return out;
}

/// Any Eigen expression: evaluated to a dense matrix of its scalar first.
template <class Derived>
TransitionForm<typename Derived::Scalar> from_transition(const Eigen::MatrixBase<Derived>& M,
                                                         const TransitionOptions& options = {}) {
  return from_transition<typename Derived::Scalar>(Matrix<typename Derived::Scalar>(M), options);
}

}  // namespace peal
