// Small dense kernels of the canonical form (docs/canonical-form.md), written out on plain
// loops so that canonical_form.hpp compiles no Eigen decomposition (docs/canonical-form.md §7):
//   jacobi_svd   one-sided Jacobi SVD (Hestenes 1958; Demmel & Veselić 1992): A V = U Σ, the
//                columns of A rotated pairwise until orthogonal; σ = their norms, V the
//                accumulated rotations. Real or complex (the phase of the inner product is
//                taken out before the real rotation). Relative accuracy, O(n³) per sweep;
//                the matrices here are a cluster's (a few times the longest chain).
//   sylvester_small  T_ii Z − Z T_jj = R for 1×1 / 2×2 diagonal blocks of a real Schur form:
//                (I ⊗ T_ii − T_jjᵀ ⊗ I) vec Z = vec R, at most 4×4, Gaussian elimination with
//                complete pivoting (Golub & Van Loan, Matrix Computations, 4th ed., §7.6.3).
//   orthonormalise   modified Gram–Schmidt, run twice ("twice is enough", Giraud et al. 2005).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <utility>
#include <vector>

namespace peal {
namespace detail {
namespace canonical {

using W = long double;  // working precision of the canonical form
using CW = std::complex<long double>;
template <class K>
using Mat = Eigen::Matrix<K, Eigen::Dynamic, Eigen::Dynamic>;
template <class K>
using Vec = Eigen::Matrix<K, Eigen::Dynamic, 1>;

inline W conj_of(W x) { return x; }
inline CW conj_of(const CW& x) { return std::conj(x); }
inline W abs2(W x) { return x * x; }
inline W abs2(const CW& x) { return std::norm(x); }

/// Right singular vectors V (columns) and singular values (descending) of A.
template <class K>
void jacobi_svd(Mat<K> A, Vec<W>& sigma, Mat<K>& V) {
  const Eigen::Index n = A.cols(), r = A.rows();
  V = Mat<K>::Identity(n, n);
  const W tol = 4 * std::numeric_limits<W>::epsilon();
  for (int sweep = 0; sweep < 80; ++sweep) {
    bool rotated = false;
    for (Eigen::Index p = 0; p + 1 < n; ++p)
      for (Eigen::Index q = p + 1; q < n; ++q) {
        W alpha = 0, beta = 0;
        K gamma = K(0);
        for (Eigen::Index i = 0; i < r; ++i) {
          alpha += abs2(A(i, p)), beta += abs2(A(i, q));
          gamma += conj_of(A(i, p)) * A(i, q);
        }
        const W g = std::abs(gamma);
        if (!(g > tol * std::sqrt(alpha * beta)) || g == 0) continue;
        rotated = true;
        const K ph = gamma / g;  // e^{iφ}: a_q e^{-iφ} has a real inner product with a_p
        const W zeta = (beta - alpha) / (2 * g);
        const W t = (zeta >= 0 ? 1 : -1) / (std::abs(zeta) + std::sqrt(1 + zeta * zeta));
        const W c = 1 / std::sqrt(1 + t * t), s = c * t;
        for (Eigen::Index i = 0; i < r; ++i) {
          const K ap = A(i, p), bq = A(i, q) * conj_of(ph);
          A(i, p) = c * ap - s * bq;
          A(i, q) = (s * ap + c * bq) * ph;
        }
        for (Eigen::Index i = 0; i < n; ++i) {
          const K vp = V(i, p), bq = V(i, q) * conj_of(ph);
          V(i, p) = c * vp - s * bq;
          V(i, q) = (s * vp + c * bq) * ph;
        }
      }
    if (!rotated) break;
  }
  sigma.resize(n);
  for (Eigen::Index j = 0; j < n; ++j) {
    W s2 = 0;
    for (Eigen::Index i = 0; i < r; ++i) s2 += abs2(A(i, j));
    sigma(j) = std::sqrt(s2);
  }
  for (Eigen::Index j = 0; j + 1 < n; ++j) {  // selection sort, descending
    Eigen::Index best = j;
    for (Eigen::Index k = j + 1; k < n; ++k)
      if (sigma(k) > sigma(best)) best = k;
    if (best != j) {
      std::swap(sigma(j), sigma(best));
      V.col(j).swap(V.col(best));
    }
  }
}

/// Columns of A made orthonormal (modified Gram–Schmidt twice); columns that vanish
/// relative to their original norm (below 1e3 ε) are dropped.
template <class K>
Mat<K> orthonormalise(const Mat<K>& A) {
  std::vector<Vec<K>> out;
  for (Eigen::Index j = 0; j < A.cols(); ++j) {
    Vec<K> v = A.col(j);
    const W n0 = v.norm();
    if (!(n0 > 0)) continue;
    for (int pass = 0; pass < 2; ++pass)
      for (const auto& u : out) v -= u * u.dot(v);
    const W n1 = v.norm();
    if (n1 > 1e3L * std::numeric_limits<W>::epsilon() * n0) out.push_back(v / n1);
  }
  Mat<K> Q(A.rows(), Eigen::Index(out.size()));
  for (std::size_t j = 0; j < out.size(); ++j) Q.col(Eigen::Index(j)) = out[j];
  return Q;
}

/// Solves A Z − Z B = R, A p×p and B q×q (p, q ≤ 2), R p×q, by the Kronecker system with
/// complete pivoting. Returns false if a pivot is below `tiny` (A and B share an eigenvalue
/// to working precision); Z is then the solution with that pivot replaced by ±tiny.
template <class Rl>
bool sylvester_small(const Mat<Rl>& A, const Mat<Rl>& B, const Mat<Rl>& R, Rl tiny, Mat<Rl>& Z) {
  const int p = int(A.rows()), q = int(B.rows()), n = p * q;
  Rl M[4][4] = {}, rhs[4] = {}, x[4] = {};
  int col[4] = {0, 1, 2, 3};
  // vec index of Z(i, j) = i + j p; (A Z)(i, j) = Σ_k A(i,k) Z(k,j); (Z B)(i,j) = Σ_k Z(i,k) B(k,j)
  for (int j = 0; j < q; ++j)
    for (int i = 0; i < p; ++i) {
      const int row = i + j * p;
      rhs[row] = R(i, j);
      for (int k = 0; k < p; ++k) M[row][k + j * p] += A(i, k);
      for (int k = 0; k < q; ++k) M[row][i + k * p] -= B(k, j);
    }
  bool ok = true;
  for (int k = 0; k < n; ++k) {
    int br = k, bc = k;
    for (int i = k; i < n; ++i)
      for (int j = k; j < n; ++j)
        if (std::abs(M[i][j]) > std::abs(M[br][bc])) br = i, bc = j;
    for (int j = 0; j < n; ++j) std::swap(M[k][j], M[br][j]);
    std::swap(rhs[k], rhs[br]);
    for (int i = 0; i < n; ++i) std::swap(M[i][k], M[i][bc]);
    std::swap(col[k], col[bc]);
    if (!(std::abs(M[k][k]) > tiny)) {
      ok = false;
      M[k][k] = M[k][k] < 0 ? -tiny : tiny;
    }
    for (int i = k + 1; i < n; ++i) {
      const Rl f = M[i][k] / M[k][k];
      for (int j = k; j < n; ++j) M[i][j] -= f * M[k][j];
      rhs[i] -= f * rhs[k];
    }
  }
  for (int k = n - 1; k >= 0; --k) {
    Rl s = rhs[k];
    for (int j = k + 1; j < n; ++j) s -= M[k][j] * x[j];
    x[k] = s / M[k][k];
  }
  Z.resize(p, q);
  for (int k = 0; k < n; ++k) Z(col[k] % p, col[k] / p) = x[k];
  return ok;
}

}  // namespace canonical
}  // namespace detail
}  // namespace peal
