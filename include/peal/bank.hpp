// Bank<Block>: a runtime number n of blocks of one type acting on n * Block::Dim
// coordinates, A(tau) = diag(A_1(tau), ..., A_n(tau)) up to the coordinate map of its
// Layout (layout.hpp). Parameters are stored structure-of-arrays (column k of params()
// holds parameter k of every block, contiguous) so kernels vectorize across blocks.
// RoPE is a Bank of RotationBlocks with omega_i = theta^(-2i/d) and a_i = 0.
#pragma once

#include <vector>

#include "encoding.hpp"
#include "layout.hpp"

namespace peal {

template <class Block>
class Bank : public Encoding<Bank<Block>, typename Block::Scalar> {
 public:
  using Scalar = typename Block::Scalar;
  using Real = real_t<Scalar>;
  using BlockType = Block;
  using MatrixType = Matrix<Scalar>;
  using ParamArray = Eigen::Array<Real, Eigen::Dynamic, Block::n_params>;

  Bank() = default;
  explicit Bank(const std::vector<Block>& blocks, Layout layout = Layout::Interleaved)
      : params_(static_cast<Eigen::Index>(blocks.size()), Block::n_params), layout_(layout) {
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const auto p = blocks[i].params();
      for (int k = 0; k < Block::n_params; ++k) params_(Eigen::Index(i), k) = p[k];
    }
  }
  /// From a parameter table (one row per block, columns as Block::params()).
  static Bank from_params(ParamArray params, Layout layout = Layout::Interleaved) {
    Bank b;
    b.params_ = std::move(params);
    b.layout_ = layout;
    for (int i = 0; i < b.size(); ++i) (void)b.block(i);  // validates every row
    return b;
  }

  int size() const { return static_cast<int>(params_.rows()); }
  int dim() const { return size() * Block::Dim; }
  Layout layout() const { return layout_; }
  const ParamArray& params() const { return params_; }

  Block block(int i) const {
    typename Block::Params p;
    for (int k = 0; k < Block::n_params; ++k) p[k] = params_(i, k);
    return Block::from_params(p);
  }
  /// Coordinate of component c of block i.
  int coordinate(int i, int c) const { return peal::coordinate(layout_, size(), Block::Dim, i, c); }

  MatrixType generator() const {
    return assemble([](const Block& b) { return b.generator(); });
  }
  MatrixType A(Real tau) const {
    detail::require_finite(tau, "A", "tau");
    return assemble([tau](const Block& b) { return b.A(tau); });
  }

  template <class V>
  void apply(V&& v, Real tau, bool transpose) const {
    Eigen::Matrix<Scalar, Block::Dim, 1> x;
    for (int i = 0; i < size(); ++i) {
      for (int c = 0; c < Block::Dim; ++c) x(c) = v(coordinate(i, c));
      block(i).apply(x, tau, transpose);
      for (int c = 0; c < Block::Dim; ++c) v(coordinate(i, c)) = x(c);
    }
  }

 private:
  template <class Fn>
  MatrixType assemble(Fn&& per_block) const {
    MatrixType m = MatrixType::Zero(dim(), dim());
    for (int i = 0; i < size(); ++i) {
      const auto b = per_block(block(i));
      for (int r = 0; r < Block::Dim; ++r)
        for (int c = 0; c < Block::Dim; ++c) m(coordinate(i, r), coordinate(i, c)) = b(r, c);
    }
    return m;
  }

  ParamArray params_;
  Layout layout_ = Layout::Interleaved;
};

}  // namespace peal
