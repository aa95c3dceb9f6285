// ODR test, translation unit A (with main). Both TUs include the umbrella header and use
// its non-template functions; a non-inline definition in any peal header makes this fail
// to link (multiple definition), and differing results would mean differing definitions.
#include <peal/peal.hpp>

double peal_odr_b();  // defined in b.cpp

double peal_odr_a() {
  const auto enc = peal::compose(peal::RotationBlock<double>(0.25), peal::JordanBlock<2, double>(0));
  return enc.A(3.0).sum() + peal::detail::reduced_angle(1.0, 0.0, 10.0) +
         double(peal::coordinate(peal::Layout::HalfSplit, 4, 2, 1, 1));
}

int main() { return peal_odr_a() == peal_odr_b() ? 0 : 1; }
