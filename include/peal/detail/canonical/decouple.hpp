// Block diagonalisation of a real Schur form by groups of eigenvalues, without reordering
// (docs/canonical-form.md §2). T = Qᵀ X Q is upper quasi-triangular with diagonal blocks
// T_kk (1×1: a real eigenvalue, 2×2: a complex pair), each carrying a group label g(k). We
// seek Z, unit upper block-triangular, and D, upper block-triangular with D_ij = 0 whenever
// g(i) ≠ g(j), such that T Z = Z D. Block (i, j), i < j, of that equation reads
//   T_ii Z_ij − Z_ij T_jj = D_ij + R_ij,  R_ij = Σ_{i<k<j} Z_ik D_kj − Σ_{i<k≤j} T_ik Z_kj,
// (Z_jj = I, D_ii = T_ii), solved column by column, i from j−1 down: g(i) = g(j) sets
// Z_ij = 0 and D_ij = −R_ij; g(i) ≠ g(j) sets D_ij = 0 and solves the small Sylvester
// equation for Z_ij. For two contiguous groups this is exactly the Sylvester step of
// Bavely & Stewart (1979), T11 Y − Y T22 = −T12; for any labelling it is the unique
// unit-triangular similarity with those zeros, so no Schur reordering is needed: the columns
// of Q Z of one group, in their order, span its invariant subspace and X (QZ)_g = (QZ)_g D_gg.
// ‖Z_ij‖ measures the coupling of the two eigenvalue blocks; above the bound the caller
// merges the groups (Bavely–Stewart's growing of a block) when their eigenvalues are close.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <vector>

#include "small_linear.hpp"

namespace peal {
namespace detail {
namespace canonical {

/// A diagonal block of the real Schur form: its first row and its size (1 or 2).
struct SchurBlock {
  int start, size;
};

/// The largest coupling that was accepted although above the bound (groups too far apart to
/// merge), for the report.
template <class Rl>
struct Decoupled {
  Mat<Rl> Z, D;
  int viol_i = -1, viol_j = -1;  // first mergeable violation (-1: none, Z and D complete)
  Rl viol_coupling = 0;
  Rl forced_coupling = 0;         // largest ‖Z_ij‖ above the bound kept (not mergeable)
  int forced_i = -1, forced_j = -1;
};

/// Computes Z, D for the labels; stops at the first block pair (i, j) of different groups whose
/// coupling ‖Z_ij‖_F exceeds `bound` (or whose Sylvester equation is singular) and for which
/// `mergeable(label_i, label_j)` holds.
template <class Rl, class Mergeable>
Decoupled<Rl> decouple(const Mat<Rl>& T, const std::vector<SchurBlock>& blocks,
                       const std::vector<int>& label, Rl bound, Rl tiny, Mergeable&& mergeable) {
  const Eigen::Index n = T.rows();
  const int K = int(blocks.size());
  Decoupled<Rl> r;
  r.Z = Mat<Rl>::Identity(n, n);
  r.D = Mat<Rl>::Zero(n, n);
  auto blk = [&](Mat<Rl>& M, int i, int j) {
    return M.block(blocks[std::size_t(i)].start, blocks[std::size_t(j)].start,
                   blocks[std::size_t(i)].size, blocks[std::size_t(j)].size);
  };
  auto cblk = [&](const Mat<Rl>& M, int i, int j) {
    return M.block(blocks[std::size_t(i)].start, blocks[std::size_t(j)].start,
                   blocks[std::size_t(i)].size, blocks[std::size_t(j)].size);
  };
  for (int j = 0; j < K; ++j) {
    blk(r.D, j, j) = cblk(T, j, j);
    for (int i = j - 1; i >= 0; --i) {
      Mat<Rl> R = -cblk(T, i, j);
      for (int k = i + 1; k < j; ++k) {
        if (label[std::size_t(i)] != label[std::size_t(k)])
          R += cblk(r.Z, i, k).lazyProduct(cblk(r.D, k, j));
        R -= cblk(T, i, k).lazyProduct(cblk(r.Z, k, j));
      }
      if (label[std::size_t(i)] == label[std::size_t(j)]) {
        blk(r.D, i, j) = -R;
        continue;
      }
      Mat<Rl> Zij;
      const bool ok = sylvester_small<Rl>(Mat<Rl>(cblk(T, i, i)), Mat<Rl>(cblk(T, j, j)), R, tiny, Zij);
      const Rl c = Zij.norm();
      if (!ok || !(c <= bound)) {
        if (mergeable(label[std::size_t(i)], label[std::size_t(j)])) {
          r.viol_i = i, r.viol_j = j, r.viol_coupling = ok ? c : std::numeric_limits<Rl>::infinity();
          return r;
        }
        if (!(c <= r.forced_coupling)) r.forced_coupling = c, r.forced_i = i, r.forced_j = j;
      }
      blk(r.Z, i, j) = Zij;
    }
  }
  return r;
}

}  // namespace canonical
}  // namespace detail
}  // namespace peal
