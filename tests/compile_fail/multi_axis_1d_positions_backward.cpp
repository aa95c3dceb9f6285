// Must not compile: the encode backward of a MultiAxis takes N-D points (PositionsND); given
// 1-D Positions, encode_queries_backward says so with a static_assert instead of failing deep
// inside derivatives.hpp (ctest multi_axis_1d_positions_backward_does_not_compile).
#include <peal/peal.hpp>

#include <vector>

int main() {
  using Axis = peal::Bank<peal::RotationBlock<double>>;
  const Axis a({peal::RotationBlock<double>(0.5L)});
  const peal::MultiAxis<Axis> m({a, a});
  std::vector<double> x(2), p(1, 0.0);
  peal::encode_queries_backward(m, peal::TensorView<const double>(x.data(), 1, 1, 2),
                                peal::Positions(p), peal::TensorView<const double>(x.data(), 1, 1, 2),
                                peal::TensorView<double>());
}
