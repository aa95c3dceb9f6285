// The generic property suite (the project style, after Sophus' LieGroupTests and manif's
// MANIF_TEST): every check of docs/design.md §1 for one encoding family and scalar, over
// the regimes of families.hpp. Instantiated for every block, banks, compositions and a
// basis change in test_properties_*.cpp.
//
// Two halves, for compile time (docs/build-cost.md §4): here, per family, only the calls into
// the encoding (A, F, G, encode, score, generator, the long double twin), each behind a
// run-time call on dynamic matrices (`PropertyCase`); the checks themselves are compiled once
// per scalar type in tests/property_checks.cpp. The checks see the encoding's own values, so
// what they test is unchanged; only Eigen's products of those values run at dynamic size.
#pragma once

#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <utility>

#include "families.hpp"
#include "tolerances.hpp"

namespace peal_test {

using LMatrix = peal::Matrix<long double>;
using LVector = peal::Vector<long double>;

/// One encoding e (scalar S) and its long double twin el (the same parameters), behind
/// run-time calls.
template <class S>
struct PropertyCase {
  using Real = peal::real_t<S>;
  using Matrix = peal::Matrix<S>;
  using Vector = peal::Vector<S>;

  int n = 0;
  /// Conditioning of the basis for a basis change, ‖P‖ ‖P⁻¹‖ of e (Frobenius); else exactly 1.
  long double kappa = 1.0L;
  std::function<Matrix(Real)> A, F, G;
  Matrix generator;
  std::function<void(Vector&, Real)> encode_query, encode_key;
  std::function<S(const Vector&, Real, const Vector&, Real)> score;

  std::function<LMatrix(long double)> twin_F, twin_G;
  LMatrix twin_X;
  /// The twin's P, P⁻¹ and inner generator J for a basis change (X = P J P⁻¹); else empty.
  LMatrix twin_P, twin_P_inverse, twin_J;
};

/// Builds the pair (e, el) from two draws of the same seed.
template <class S>
using PropertyCaseMaker = std::function<PropertyCase<S>(Draw& de, Draw& dl)>;

/// Every check of the suite (tests/property_checks.cpp), for the family named `name`.
template <class S>
void run_property_checks(const char* name, const PropertyCaseMaker<S>& make);
extern template void run_property_checks<float>(const char*, const PropertyCaseMaker<float>&);
extern template void run_property_checks<double>(const char*, const PropertyCaseMaker<double>&);
extern template void run_property_checks<long double>(const char*,
                                                      const PropertyCaseMaker<long double>&);

namespace property_detail {

template <class M>
LMatrix to_long(const M& m) {
  return m.template cast<long double>();
}

template <class S, class E, class EL>
void set_basis(PropertyCase<S>&, const E&, const EL&) {}
template <class S, class EL, class E>
void set_basis(PropertyCase<S>& c, const peal::BasisChange<E>& e,
               const peal::BasisChange<EL>& el) {
  c.kappa = to_long(e.P()).norm() * to_long(e.P_inverse()).norm();
  c.twin_P = to_long(el.P());
  c.twin_P_inverse = to_long(el.P_inverse());
  c.twin_J = to_long(el.inner().generator());
}

template <class S, class E, class EL>
PropertyCase<S> make_case(E e_value, EL el_value) {
  using C = PropertyCase<S>;
  using Real = typename C::Real;
  using Matrix = typename C::Matrix;
  using Vector = typename C::Vector;
  const auto e = std::make_shared<const E>(std::move(e_value));
  const auto el = std::make_shared<const EL>(std::move(el_value));
  C c;
  c.n = int(e->dim());
  c.A = [e](Real tau) -> Matrix { return e->A(tau); };
  c.F = [e](Real t) -> Matrix { return e->F(t); };
  c.G = [e](Real s) -> Matrix { return e->G(s); };
  c.generator = e->generator();
  c.encode_query = [e](Vector& v, Real t) { e->encode_query(v, t); };
  c.encode_key = [e](Vector& v, Real s) { e->encode_key(v, s); };
  c.score = [e](const Vector& q, Real t, const Vector& k, Real s) -> S {
    return e->score(q, t, k, s);
  };
  c.twin_F = [el](long double t) -> LMatrix { return to_long(el->F(t)); };
  c.twin_G = [el](long double s) -> LMatrix { return to_long(el->G(s)); };
  c.twin_X = to_long(el->generator());
  set_basis(c, *e, *el);
  return c;
}

}  // namespace property_detail

template <class Case>
void run_property_suite() {
  using Fam = typename Case::Family;
  using S = typename Case::Scalar;
  run_property_checks<S>(Fam::name, [](Draw& de, Draw& dl) {
    return property_detail::make_case<S>(Fam::template build<S>(de),
                                         Fam::template build<long double>(dl));
  });
}

}  // namespace peal_test
