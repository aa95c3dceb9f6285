// Consumer of peal (installed or via add_subdirectory); see tests/consumer/CMakeLists.txt.
// Computes A(tau) for a composition of all four block types and checks it against Eigen's
// matrix exponential of tau X, as a user's first program would.
#include <cmath>
#include <cstdio>
#include <peal/peal.hpp>
#include <unsupported/Eigen/MatrixFunctions>

// The consumer project sets no C++ standard: peal::peal must request C++17 itself.
static_assert(__cplusplus >= 201703L, "peal::peal must propagate cxx_std_17");

int main() {
  const auto enc = peal::compose(peal::RealBlock<double>(-0.3), peal::RotationBlock<double>(1.1, 0.05),
                                 peal::JordanBlock<3, double>(-0.2),
                                 peal::RotationJordanBlock<2, double>(0.4, -0.1));
  const Eigen::MatrixXd X = enc.generator();
  double worst = 0;
  for (double tau : {-3.0, 0.25, 2.0, 10.0}) {
    const Eigen::MatrixXd ref = (tau * X).exp();
    // Eigen's scaling and squaring: forward error ~ |tau X| eps; 1e-12 relative is ample.
    worst = std::fmax(worst, (enc.A(tau) - ref).norm() / ref.norm());
  }
  std::printf("composition of %d coordinates: max relative |A(tau) - expm(tau X)| = %.2e\n",
              enc.dim(), worst);
  return worst < 1e-12 ? 0 : 1;
}
