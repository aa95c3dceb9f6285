// Entry points of tests/test_angle_nofma.cpp: the angle code of detail/math/angle.hpp and
// detail/math/sincos.hpp compiled WITHOUT hardware FMA (Dekker's products, no fused operations)
// inside the same test binary, so tests/test_angle.cpp can run every check on both builds
// and compare them. (They do not collide with the FMA build: detail/math/angle.hpp puts its
// FMA-dependent code in an inline namespace named after PEAL_DETAIL_HAS_FMA.)
#pragma once

namespace peal_test_nofma {

/// PEAL_DETAIL_HAS_FMA == 0 in that translation unit (Dekker's products). On x86 its code is
/// compiled under target("no-fma,no-avx512f"), elsewhere with FP contraction off.
bool built_without_fma();
double reduced_angle(double w_hi, double w_lo, double t);
double reduced_angle_cody_waite(double w_hi, double w_lo, double t);
double reduced_angle_turns(double w_hi, double w_lo, double t);
double reduced_angle_exact(double w_hi, double w_lo, double t);
long double reduced_angle_ld(long double w, long double t);
void sincos_reduced(double r, double& s, double& c);
void angles_sincos(const double* w_hi, const double* w_lo, double t, int n, double* s, double* c);
void angles_sincos(const double* w_hi, const double* w_lo, double t, int n, float* s, float* c);

}  // namespace peal_test_nofma
