// The rows of a view taken into a basis change's coordinates once, before the fused kernels
// (scores.hpp, attention.hpp): q^T P A_J(t − s) P^{-1} k = (P^T q)^T A_J(t − s) (P^{-1} k), so
// BasisChange<E>'s scores and attention are E's on the rows P^T q and P^{-1} k. Inside the tiles
// the BasisChange coder would apply its d x d product to every query row once per query block
// and to every key row once per key tile and query block: d² against the tile's ~n d per row,
// a quarter of the products at d = 128, n = 512 (bench/README.md, "Canonical form"). Here each
// row's product is done once, as one GEMM over all rows.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "../basis_change.hpp"
#include "../view.hpp"
#include "half_rows.hpp"
#include "storage.hpp"

namespace peal {
namespace detail {

/// Whether scores and attention take the rows into the basis before the tiles: when P (d² values
/// of C) passes 32 KiB it no longer stays in L1 beside a tile's rows, and the coder's product
/// per row streams it from L2 for every row. Measured (bench/README.md, "Canonical form", causal
/// prefill, f32, 4 heads, attention over the same bank without the basis): d = 128 (64 KiB)
/// 0.58 → 0.75 of the bank's rate at n = 512, 0.81 → 0.82 at n = 2048; d = 64 (16 KiB) 0.83 →
/// 0.73 at n = 512 before the tiles, so smaller bases stay in the coder.
template <class C>
bool basis_rows_first(Index d) {
  return double(d) * double(d) * double(sizeof(C)) > 32768.0;
}

/// x [n, H, d] (any storage and strides) as rows in C times P (queries: (P^T x)^T = x^T P) or
/// P^{-T} (keys: (P^{-1} x)^T), into buf; the contiguous view of buf. Rows of C that lie at a
/// constant stride (a packed [n, H, d] view, or one head's slice) are read in place by the
/// GEMM; others are converted first (half-like rows by detail/half_rows.hpp).
template <class C, class E, class T>
TensorView<const C> basis_rows(const BasisChange<E>& b, const TensorView<T>& x, bool queries,
                               std::vector<C>& buf) {
  using RowMat = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Rows = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
  const Index n = x.tokens(), H = x.heads(), d = x.dim(), rows = n * H;
  const Strides& st = x.strides();
  buf.resize(static_cast<std::size_t>(rows * d));
  if (rows == 0 || d == 0) return TensorView<const C>(buf.data(), n, H, d);
  const Matrix<C> M = queries ? Matrix<C>(b.P().template cast<C>())
                              : Matrix<C>(b.P_inverse().transpose().template cast<C>());
  Eigen::Map<RowMat> out(buf.data(), rows, d);
  const bool in_place = std::is_same<std::remove_cv_t<T>, C>::value && st.elem == 1 &&
                        (n == 1 || st.token == H * st.head) && st.head >= d;
  if (in_place) {
    const C* base = reinterpret_cast<const C*>(x.vector(0, 0));
    out.noalias() = Rows(base, rows, d, Eigen::OuterStride<>(st.head)) * M;
  } else {
    std::vector<C> raw(buf.size());
    for (Index i = 0; i < n; ++i)
      for (Index h = 0; h < H; ++h) {
        const auto* src = x.vector(i, h);
        C* o = raw.data() + (i * H + h) * d;
        if (st.elem == 1)
          load_row(src, o, d);
        else
          for (Index e = 0; e < d; ++e) o[e] = to_arith<C>(src[e * st.elem]);
      }
    out.noalias() = Eigen::Map<const RowMat>(raw.data(), rows, d) * M;
  }
  return TensorView<const C>(buf.data(), n, H, d);
}

}  // namespace detail
}  // namespace peal
