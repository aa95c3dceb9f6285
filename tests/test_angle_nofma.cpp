// The angle code compiled without FMA (see tests/angle_nofma.hpp); the checks that use it
// are in tests/test_angle.cpp. Standard headers come first, with the default target, so
// that only peal's angle code is compiled under the no-FMA target below.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "angle_nofma.hpp"

#if defined(PEAL_DETAIL_HAS_FMA)
#error "tests/test_angle_nofma.cpp must see peal's angle headers first"
#endif
#define PEAL_DETAIL_HAS_FMA 0  // Dekker's products, whatever the target supports

// No FMA instructions in what follows: neither contraction of Dekker's split (which would
// break it) nor std::fma as an instruction.
#if defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#pragma clang attribute push(__attribute__((target("no-fma,no-avx512f"))), apply_to = function)
#define PEAL_TEST_NOFMA_PUSHED 1
#elif defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#pragma GCC push_options
#pragma GCC target("no-avx512f,no-fma")
#define PEAL_TEST_NOFMA_PUSHED 1
#endif
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <peal/detail/math/angle.hpp>
#include <peal/detail/math/sincos.hpp>

namespace peal_test_nofma {

namespace pd = peal::detail;

bool built_without_fma() { return PEAL_DETAIL_HAS_FMA == 0; }
double reduced_angle(double w_hi, double w_lo, double t) {
  return pd::reduced_angle(w_hi, w_lo, t);
}
double reduced_angle_cody_waite(double w_hi, double w_lo, double t) {
  return pd::reduced_angle_cody_waite(w_hi, w_lo, t);
}
double reduced_angle_turns(double w_hi, double w_lo, double t) {
  return pd::reduced_angle_turns(w_hi, w_lo, t);
}
double reduced_angle_exact(double w_hi, double w_lo, double t) {
  return pd::reduced_angle_exact(w_hi, w_lo, t);
}
long double reduced_angle_ld(long double w, long double t) { return pd::reduced_angle(w, t); }
void sincos_reduced(double r, double& s, double& c) { pd::sincos_reduced(r, s, c); }
void angles_sincos(const double* w_hi, const double* w_lo, double t, int n, double* s, double* c) {
  pd::angles_sincos(w_hi, w_lo, t, n, s, c);
}
void angles_sincos(const double* w_hi, const double* w_lo, double t, int n, float* s, float* c) {
  pd::angles_sincos(w_hi, w_lo, t, n, s, c);
}

}  // namespace peal_test_nofma

#if defined(PEAL_TEST_NOFMA_PUSHED)
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
