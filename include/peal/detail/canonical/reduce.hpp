// The reduction of canonical_form (docs/canonical-form.md §1–§4), in long double: from a real
// generator X to its pieces, each a canonical block (real eigenvalue, rotation, Jordan chain,
// rotation-Jordan chain, pass-through coordinate) with the columns of P that carry it, so that
// X P_piece = P_piece J_piece. Steps: the real Schur form T = Qᵀ X Q (schur.hpp); the
// skew-symmetric path (T block diagonal: pure rotations with an orthogonal P); otherwise
// groups of eigenvalues decoupled by Sylvester equations (decouple.hpp), merged while the
// coupling exceeds its bound and the merged eigenvalues lie within the cluster tolerance;
// then each group: one eigenvalue (real, or a pair), or a cluster whose Jordan chains come
// from jordan_chains.hpp. Every decision is written into `decisions`, naming its tolerance.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <complex>
#include <sstream>
#include <string>
#include <vector>

#include "decouple.hpp"
#include "jordan_chains.hpp"
#include "schur.hpp"
#include "small_linear.hpp"

namespace peal {
namespace detail {
namespace canonical {

/// Resolved tolerances, all relative to ‖X‖_F (coupling: an absolute bound on ‖Z_ij‖_F).
struct Tolerances {
  W cluster, coupling, rank, zero, skew;
};

enum class PieceKind { Real, Rotation, Jordan, RotationJordan, PassThrough };

struct Piece {
  PieceKind kind;
  int length;          // chain length (1 for Real, Rotation, PassThrough)
  W lambda, omega, a;  // lambda for real kinds; omega > 0 and a for rotations
  Mat<W> cols;         // the columns of P (n × size)
};

struct Reduction {
  std::vector<Piece> pieces;
  std::vector<std::string> decisions, warnings;
  bool skew = false;
  W skew_defect = 0, norm = 0;
};

inline std::string fmt(W x) {
  std::ostringstream os;
  os.precision(4);
  os << double(x);
  return os.str();
}
template <class Rl>
std::string fmt_ev(const std::complex<Rl>& z) {
  return z.imag() == 0 ? fmt(z.real()) : fmt(z.real()) + " ± " + fmt(z.imag()) + "i";
}

template <class Rl>
void scale_piece(Piece& p) {
  const Rl rms = p.cols.norm() / std::sqrt(Rl(p.cols.cols()));
  if (rms > 0) p.cols /= rms;
}

/// Eigenvalue (Im ≥ 0) of a diagonal block of the real Schur form.
template <class Rl>
std::complex<Rl> block_eigenvalue(const Mat<Rl>& T, const SchurBlock& b) {
  const int i = b.start;
  if (b.size == 1) return {T(i, i), 0};
  const Rl a = (T(i, i) + T(i + 1, i + 1)) / 2, h = (T(i, i) - T(i + 1, i + 1)) / 2;
  const Rl w2 = -T(i, i + 1) * T(i + 1, i) - h * h;
  return {a, std::sqrt(std::max(w2, Rl(0)))};
}

template <class Rl>
Reduction skew_path(const Mat<Rl>& X, const Tolerances& tol, Reduction r) {
  const Eigen::Index n = X.rows();
  const Mat<Rl> Xs = (X - X.transpose()) / 2;
  const Schur<Rl> rs = real_schur<Rl>(Xs);
  const Mat<Rl>& T = rs.T;
  const Mat<Rl>& Q = rs.Q;
  int zeros = 0, small = 0;
  for (Eigen::Index i = 0; i < n;) {
    if (i + 1 < n && T(i + 1, i) != 0) {
      const Rl beta = (T(i, i + 1) - T(i + 1, i)) / 2;
      if (std::abs(beta) <= tol.zero * r.norm) {
        small += 2;
        for (int c = 0; c < 2; ++c)
          r.pieces.push_back({PieceKind::PassThrough, 1, 0, 0, 0, Mat<Rl>(Q.col(i + c))});
      } else {
        Mat<Rl> cols(n, 2);
        cols.col(0) = Q.col(beta > 0 ? i : i + 1);
        cols.col(1) = Q.col(beta > 0 ? i + 1 : i);
        r.pieces.push_back({PieceKind::Rotation, 1, 0, std::abs(beta), 0, cols});
      }
      i += 2;
    } else {
      ++zeros;
      r.pieces.push_back({PieceKind::PassThrough, 1, 0, 0, 0, Mat<Rl>(Q.col(i))});
      i += 1;
    }
  }
  r.decisions.push_back("skew-symmetric within the skew tolerance (‖X + Xᵀ‖/‖X‖ = " +
                        fmt(r.skew_defect) + " ≤ " + fmt(tol.skew) +
                        "): X replaced by (X − Xᵀ)/2, pure rotations (a = 0) with an orthogonal P");
  if (zeros)
    r.decisions.push_back(std::to_string(zeros) + " zero eigenvalue(s) of the skew part: pass-through");
  if (small)
    r.decisions.push_back(std::to_string(small / 2) + " rotation(s) with ω ≤ zero tolerance " +
                          fmt(tol.zero) + "·‖X‖: pass-through");
  return r;
}

template <class Rl>
Reduction reduce(const Mat<Rl>& X, const Tolerances& tol) {
  const Eigen::Index n = X.rows();
  Reduction r;
  r.norm = X.norm();
  const Rl nu = r.norm;
  if (nu == 0) {
    for (Eigen::Index i = 0; i < n; ++i)
      r.pieces.push_back({PieceKind::PassThrough, 1, 0, 0, 0, Mat<Rl>(Mat<Rl>::Identity(n, n).col(i))});
    r.decisions.push_back("X = 0: the identity encoding (every coordinate passes through)");
    return r;
  }
  r.skew_defect = (X + X.transpose()).norm() / nu;
  if (r.skew_defect <= tol.skew) {
    r.skew = true;
    return skew_path(X, tol, std::move(r));
  }

  const Schur<Rl> rs = real_schur<Rl>(X);
  const Mat<Rl>& T = rs.T;
  const Mat<Rl>& Q = rs.Q;
  std::vector<SchurBlock> blocks;
  for (int i = 0; i < int(n);) {
    const int s = (i + 1 < int(n) && T(i + 1, i) != 0) ? 2 : 1;
    blocks.push_back({i, s});
    i += s;
  }
  const int K = int(blocks.size());
  std::vector<std::complex<Rl>> ev(static_cast<std::size_t>(K));
  for (int k = 0; k < K; ++k) ev[std::size_t(k)] = block_eigenvalue(T, blocks[std::size_t(k)]);
  std::vector<int> label(static_cast<std::size_t>(K));
  for (int k = 0; k < K; ++k) label[std::size_t(k)] = k;

  auto members = [&](int g) {
    std::vector<int> m;
    for (int k = 0; k < K; ++k)
      if (label[std::size_t(k)] == g) m.push_back(k);
    return m;
  };
  auto center = [&](const std::vector<int>& m) {
    std::complex<Rl> mu = 0;
    for (int k : m) mu += ev[std::size_t(k)];
    return mu / Rl(m.size());
  };
  auto spread = [&](const std::vector<int>& m) {
    const std::complex<Rl> mu = center(m);
    Rl s = 0;
    for (int k : m)
      s = std::max(s, std::min(std::abs(ev[std::size_t(k)] - mu),
                               std::abs(ev[std::size_t(k)] - std::conj(mu))));
    return s;
  };
  auto mergeable = [&](int g1, int g2) {
    std::vector<int> m = members(g1), m2 = members(g2);
    m.insert(m.end(), m2.begin(), m2.end());
    return spread(m) <= tol.cluster * nu;
  };
  const Rl tiny = std::numeric_limits<Rl>::epsilon() * nu;
  Decoupled<Rl> dec;
  for (int iter = 0;; ++iter) {
    dec = decouple<Rl>(T, blocks, label, tol.coupling, tiny, mergeable);
    if (dec.viol_i < 0 || iter > K) break;
    const int gi = label[std::size_t(dec.viol_i)], gj = label[std::size_t(dec.viol_j)];
    for (auto& l : label)
      if (l == gj) l = gi;
    r.decisions.push_back("eigenvalues " + fmt_ev(ev[std::size_t(dec.viol_i)]) + " and " +
                          fmt_ev(ev[std::size_t(dec.viol_j)]) +
                          " merged into one cluster: their decoupling needs ‖Z‖ = " +
                          fmt(dec.viol_coupling) + " > coupling bound " + fmt(tol.coupling) +
                          ", and the merged cluster lies within the cluster tolerance " +
                          fmt(tol.cluster) + "·‖X‖");
  }
  if (dec.forced_i >= 0)
    r.decisions.push_back("eigenvalues " + fmt_ev(ev[std::size_t(dec.forced_i)]) + " and " +
                         fmt_ev(ev[std::size_t(dec.forced_j)]) +
                         " are strongly coupled (‖Z‖ = " + fmt(dec.forced_coupling) +
                         " > coupling bound " + fmt(tol.coupling) +
                         ") but farther apart than the cluster tolerance: kept as separate blocks, "
                         "at the cost of the conditioning of P");
  const Mat<Rl> QZ = Q.lazyProduct(dec.Z);

  std::vector<int> seen;
  for (int k = 0; k < K; ++k) {
    const int g = label[std::size_t(k)];
    if (std::find(seen.begin(), seen.end(), g) != seen.end()) continue;
    seen.push_back(g);
    const std::vector<int> mem = members(g);
    std::vector<Eigen::Index> idx;
    for (int b : mem)
      for (int c = 0; c < blocks[std::size_t(b)].size; ++c) idx.push_back(blocks[std::size_t(b)].start + c);
    const int m = int(idx.size());
    Mat<Rl> V(n, m), Dg(m, m);
    for (int c = 0; c < m; ++c) V.col(c) = QZ.col(idx[std::size_t(c)]);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j) Dg(i, j) = dec.D(idx[std::size_t(i)], idx[std::size_t(j)]);
    auto snap = [&](Rl x) { return std::abs(x) <= tol.zero * nu ? Rl(0) : x; };

    if (mem.size() == 1 && m == 1) {
      const Rl lambda = snap(Dg(0, 0));
      Piece p{lambda == 0 ? PieceKind::PassThrough : PieceKind::Real, 1, lambda, 0, 0, V};
      scale_piece<Rl>(p);
      r.pieces.push_back(p);
      continue;
    }
    std::ostringstream os;
    os.precision(4);
    if (mem.size() == 1 && m == 2) {
      // A complex pair: the basis [Re z, Im z] of its eigenvector z brings the Schur block to
      // [[a, ω], [−ω, a]]. A pair with ω within the cluster tolerance whose basis is
      // ill-conditioned (κ₂ above the coupling bound) is a perturbed real Jordan chain: it
      // goes to the cluster path below.
      const std::complex<Rl> mu = ev[std::size_t(mem[0])];
      const std::complex<Rl> z1[2] = {Dg(0, 1), mu - Dg(0, 0)}, z2[2] = {mu - Dg(1, 1), Dg(1, 0)};
      const bool first = std::norm(z1[0]) + std::norm(z1[1]) >= std::norm(z2[0]) + std::norm(z2[1]);
      const std::complex<Rl>* z = first ? z1 : z2;
      Mat<Rl> C(2, 2);
      C << z[0].real(), z[0].imag(), z[1].real(), z[1].imag();
      const Rl det = std::abs(C(0, 0) * C(1, 1) - C(0, 1) * C(1, 0)), t = C.squaredNorm() / det;
      const Rl kappa_c = det > 0 ? (t + std::sqrt(std::max(t * t - 4, Rl(0)))) / 2
                                 : std::numeric_limits<Rl>::infinity();
      const bool tiny_omega = mu.imag() <= tol.zero * nu;
      if (!tiny_omega && !(kappa_c > tol.coupling && mu.imag() <= tol.cluster * nu)) {
        Piece p{PieceKind::Rotation, 1, 0, mu.imag(), snap(mu.real()), Mat<Rl>(V.lazyProduct(C))};
        scale_piece<Rl>(p);
        r.pieces.push_back(p);
        continue;
      }
      os << "the pair " << double(mu.real()) << " ± " << double(mu.imag()) << "i";
      if (tiny_omega)
        os << " has ω within the zero tolerance " << double(tol.zero) << "·‖X‖: a real cluster; ";
      else
        os << " has a basis of κ₂ = " << double(kappa_c) << " > coupling bound "
           << double(tol.coupling) << " and ω within the cluster tolerance "
           << double(tol.cluster) << "·‖X‖: a real cluster; ";
    }
    // A cluster: one eigenvalue (real) or one pair, with its Jordan chains.
    const std::complex<Rl> mu = center(mem);
    const bool real_cluster = (m % 2 == 1) || std::abs(mu.imag()) <= tol.cluster * nu;
    if (real_cluster) {
      const Rl lam = Dg.trace() / Rl(m);
      // One (complex) instantiation of the chain code for both kinds of cluster: on a real N
      // every rotation of the Jacobi SVD is real, so the chain vectors come out real.
      Mat<std::complex<Rl>> Nr = Dg.template cast<std::complex<Rl>>();
      for (int i = 0; i < m; ++i) Nr(i, i) -= lam;
      const auto res = jordan_chains<std::complex<Rl>>(Nr, m, tol.rank * nu);
      const Rl lambda = snap(lam);
      os << "cluster of " << m << " eigenvalue(s) at λ = " << double(lambda)
         << " (spread " << double(spread(mem)) << "): ranks of (T − λI)^k =";
      for (int x : res.ranks) os << " " << x;
      os << " with rank tolerance " << double(tol.rank) << "·‖X‖ → chains of length";
      for (const auto& ch : res.chains) {
        os << " " << ch.length;
        Piece p{ch.length == 1 ? (lambda == 0 ? PieceKind::PassThrough : PieceKind::Real)
                               : PieceKind::Jordan,
                ch.length, lambda, 0, 0, Mat<Rl>(V.lazyProduct(Mat<Rl>(ch.vectors.real())))};
        scale_piece<Rl>(p);
        r.pieces.push_back(p);
      }
      if (std::abs(mu.imag()) > 0) os << " (complex parts |Im λ| ≤ " << double(tol.cluster) << "·‖X‖ dropped)";
      if (res.repaired) os << " (ranks repaired towards longer chains)";
    } else {
      const std::complex<Rl> muc(Dg.trace() / Rl(m), mu.imag());
      Mat<std::complex<Rl>> Nc = Dg.template cast<std::complex<Rl>>();
      for (int i = 0; i < m; ++i) Nc(i, i) -= muc;
      const auto res = jordan_chains<std::complex<Rl>>(Nc, m / 2, tol.rank * nu);
      const Rl a = snap(muc.real()), omega = muc.imag();
      os << "cluster of " << m / 2 << " pair(s) at " << double(a) << " ± " << double(omega)
         << "i (spread " << double(spread(mem)) << "): ranks of (T − μI)^k =";
      for (int x : res.ranks) os << " " << x;
      os << " with rank tolerance " << double(tol.rank) << "·‖X‖ → chains of length";
      for (const auto& ch : res.chains) {
        os << " " << ch.length;
        Mat<Rl> C(m, 2 * ch.length);
        for (int j = 0; j < ch.length; ++j) {
          C.col(2 * j) = ch.vectors.col(j).real();
          C.col(2 * j + 1) = ch.vectors.col(j).imag();
        }
        Piece p{ch.length == 1 ? PieceKind::Rotation : PieceKind::RotationJordan, ch.length, 0,
                omega, a, Mat<Rl>(V.lazyProduct(C))};
        scale_piece<Rl>(p);
        r.pieces.push_back(p);
      }
      if (res.repaired) os << " (ranks repaired towards longer chains)";
    }
    r.decisions.push_back(os.str());
  }
  int snapped = 0;
  for (int k = 0; k < K; ++k)
    if (std::abs(ev[std::size_t(k)].real()) <= tol.zero * nu && ev[std::size_t(k)].real() != 0) ++snapped;
  if (snapped)
    r.decisions.push_back(std::to_string(snapped) + " eigenvalue(s) with |Re λ| ≤ zero tolerance " +
                          fmt(tol.zero) + "·‖X‖ set to Re λ = 0");
  return r;
}

}  // namespace canonical
}  // namespace detail
}  // namespace peal
