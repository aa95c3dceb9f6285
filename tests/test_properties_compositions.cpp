// The property suite for banks (both layouts), block-diagonal compositions of every block
// type with pass-through coordinates, and a basis change.
#include "property_suite.hpp"

using namespace peal_test;
using peal::Layout;

#define PEAL_SCALARS(F) Case<F, float>, Case<F, double>, Case<F, long double>

using InterleavedRotations = BankFam<RotationFam, Layout::Interleaved>;
using HalfSplitRotations = BankFam<RotationFam, Layout::HalfSplit>;
using RealBank = BankFam<RealFam, Layout::Interleaved>;
using HalfSplitJordans = BankFam<JordanFam<3>, Layout::HalfSplit, 3>;
using RotationJordanBank = BankFam<RotationJordanFam<2>, Layout::Interleaved, 2>;

using CompositionCases =
    std::tuple<PEAL_SCALARS(InterleavedRotations), PEAL_SCALARS(HalfSplitRotations),
               PEAL_SCALARS(RealBank), PEAL_SCALARS(HalfSplitJordans),
               PEAL_SCALARS(RotationJordanBank), PEAL_SCALARS(MixedFam),
               PEAL_SCALARS(BasisChangeFam)>;

TEMPLATE_LIST_TEST_CASE("group-law suite: banks, compositions, basis change", "[properties]",
                        CompositionCases) {
  run_property_suite<TestType>();
}
