// Jordan chains of one cluster (docs/canonical-form.md §3). N = D_gg − μI (real for a real
// eigenvalue μ, complex for a pair μ = a + iω: then only the μ half of the cluster is
// singular) is nilpotent up to the tolerance. The Weyr characteristic comes from the ranks of
// its powers, counted with the threshold
//   σ_i(N^k) ≤ rank_tol ‖X‖ ‖N‖₂^(k−1)
// (a chain of coupling c has σ(N^k) = c^k: the test is c ≤ rank_tol ‖X‖ at every k):
//   d_k = dim ker N^k,  w_k = d_k − d_{k−1} = number of chains of length ≥ k
// (Golub & Wilkinson 1976, §8; Kågström & Ruhe 1980). w must be non-increasing and sum to the
// cluster's size m; ranks that break this (only near the thresholds) are repaired towards
// longer chains, the conservative side (more polynomial terms, never a dropped coupling).
// The basis, top-down (longest chains first): the new top vectors of length k are the
// directions of ker N^k farthest from ker N^{k−1} plus the level-k vectors of the longer
// chains already chosen (an SVD of the projected kernel basis); a chain is then
// p_j = N^{k−j} v, j = 1..k (N p_1 ≈ 0, N p_j = p_{j−1}: the JordanBlock convention
// X = λI + N with ones on the superdiagonal), scaled so that its vectors have geometric mean
// norm 1 (a common factor commutes with the block).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <vector>

#include "small_linear.hpp"

namespace peal {
namespace detail {
namespace canonical {

template <class K>
struct Chain {
  int length;
  Mat<K> vectors;  // n × length, column j−1 = p_j (column 0 the eigenvector)
};

template <class K>
struct ChainResult {
  std::vector<int> ranks;      // rank of N^k, k = 1.. (as measured)
  std::vector<int> weyr;       // w_k after repair
  bool repaired = false;
  std::vector<Chain<K>> chains;
};

/// m: the number of basis vectors the cluster owns (its size for a real eigenvalue, half of it
/// for a complex pair); rank_abs = rank_tol ‖X‖.
template <class K>
ChainResult<K> jordan_chains(const Mat<K>& N, int m, W rank_abs) {
  const Eigen::Index n = N.rows();
  ChainResult<K> out;
  std::vector<Mat<K>> powers{Mat<K>::Identity(n, n)}, kernels{Mat<K>(n, 0)};
  std::vector<int> d{0};
  W norm_N = 0;
  Mat<K> Nk = Mat<K>::Identity(n, n);
  for (int k = 1; k <= m; ++k) {
    Nk = Mat<K>(Nk.lazyProduct(N));
    Vec<W> s;
    Mat<K> V;
    jacobi_svd(Nk, s, V);
    if (k == 1) norm_N = s.size() ? s(0) : W(0);
    const W thr = rank_abs * std::pow(std::max(norm_N, rank_abs), W(k - 1));
    int rank = 0;
    while (rank < s.size() && s(rank) > thr) ++rank;
    out.ranks.push_back(rank);
    int dk = std::min<int>(int(n) - rank, m);
    dk = std::max(dk, d.back());
    d.push_back(dk);
    powers.push_back(Nk);
    kernels.push_back(V);  // columns sorted by σ descending; the kernel is the tail
    if (dk == m) break;
  }
  // Weyr characteristic, repaired: non-increasing, summing to m.
  std::vector<int> w;
  for (std::size_t k = 1; k < d.size(); ++k) w.push_back(d[k] - d[k - 1]);
  if (w.empty() || w[0] < 1) w.assign(1, 1), out.repaired = true;
  for (std::size_t k = 1; k < w.size(); ++k)
    if (w[k] > w[k - 1]) w[k] = w[k - 1], out.repaired = true;
  int total = 0;
  for (int x : w) total += x;
  while (total > m) {  // cannot happen with d capped at m, kept for safety
    w.back() -= 1, total -= 1, out.repaired = true;
    if (w.back() == 0) w.pop_back();
  }
  for (std::size_t k = 1; total < m; ++k) {  // lengthen the longest chains
    if (k >= w.size()) w.push_back(0);
    const int add = std::min(w[k - 1] - w[k], m - total);
    if (add > 0) w[k] += add, total += add, out.repaired = true;
  }
  while (!w.empty() && w.back() == 0) w.pop_back();
  out.weyr = w;
  const int L = int(w.size());
  // powers of N up to L (the rank loop may have stopped earlier when repaired)
  while (int(powers.size()) <= L) {
    powers.push_back(Mat<K>(powers.back().lazyProduct(N)));
    Vec<W> s;
    Mat<K> V;
    jacobi_svd(powers.back(), s, V);
    kernels.push_back(V);
  }
  std::vector<int> dim_ker(std::size_t(L) + 1, 0);
  for (int k = 1; k <= L; ++k) dim_ker[std::size_t(k)] = dim_ker[std::size_t(k - 1)] + w[std::size_t(k - 1)];
  auto kernel_basis = [&](int k) -> Mat<K> {
    const int dk = dim_ker[std::size_t(k)];
    return kernels[std::size_t(k)].rightCols(dk);
  };
  std::vector<std::pair<int, Vec<K>>> tops;  // (length, top vector)
  for (int k = L; k >= 1; --k) {
    const int ck = w[std::size_t(k - 1)] - (k < L ? w[std::size_t(k)] : 0);
    if (ck <= 0) continue;
    const Mat<K> B = kernel_basis(k);
    Mat<K> S0 = kernel_basis(k - 1);
    std::vector<Vec<K>> level;
    for (const auto& t : tops) level.push_back(powers[std::size_t(t.first - k)].lazyProduct(t.second));
    Mat<K> S(n, S0.cols() + Eigen::Index(level.size()));
    S.leftCols(S0.cols()) = S0;
    for (std::size_t i = 0; i < level.size(); ++i) S.col(S0.cols() + Eigen::Index(i)) = level[i];
    const Mat<K> Sq = orthonormalise<K>(S);
    // B minus its part in span(S); no product when S is empty (a lazy product over an inner
    // dimension of 0 offsets a null pointer: UBSan's report in the sanitizer build).
    const Mat<K> Wp =
        Sq.cols() == 0 ? B : Mat<K>(B - Sq.lazyProduct(Mat<K>(Sq.adjoint().lazyProduct(B))));
    Vec<W> s;
    Mat<K> Y;
    jacobi_svd(Wp, s, Y);
    for (int c = 0; c < ck && c < Y.cols(); ++c) {
      Vec<K> v = B.lazyProduct(Y.col(c));
      v /= v.norm();
      tops.emplace_back(k, v);
    }
  }
  for (const auto& t : tops) {
    const int k = t.first;
    Chain<K> ch{k, Mat<K>(n, k)};
    W logsum = 0;
    for (int j = 1; j <= k; ++j) {
      ch.vectors.col(j - 1) = powers[std::size_t(k - j)].lazyProduct(t.second);
      logsum += std::log(std::max(ch.vectors.col(j - 1).norm(), std::numeric_limits<W>::min()));
    }
    ch.vectors *= K(std::exp(-logsum / k));
    out.chains.push_back(std::move(ch));
  }
  return out;
}

}  // namespace canonical
}  // namespace detail
}  // namespace peal
