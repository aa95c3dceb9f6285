// ODR test, translation unit B; see a.cpp.
#include <peal/peal.hpp>

double peal_odr_b() {
  const auto enc = peal::compose(peal::RotationBlock<double>(0.25), peal::JordanBlock<2, double>(0));
  return enc.A(3.0).sum() + peal::detail::reduced_angle(1.0, 0.0, 10.0) +
         double(peal::coordinate(peal::Layout::HalfSplit, 4, 2, 1, 1));
}
