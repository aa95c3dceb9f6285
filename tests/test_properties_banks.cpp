// The property suite for banks: rotations in both layouts, real blocks, Jordan blocks and
// complex Jordan blocks. Compositions and the basis change: test_properties_compositions.cpp
// (one file held both and passed the minute and 1.5 GB of compile, docs/build-cost.md §3).
#include "property_suite.hpp"

using namespace peal_test;
using peal::Layout;

#define PEAL_SCALARS(F) Case<F, float>, Case<F, double>, Case<F, long double>

using InterleavedRotations = BankFam<RotationFam, Layout::Interleaved>;
using HalfSplitRotations = BankFam<RotationFam, Layout::HalfSplit>;
using RealBank = BankFam<RealFam, Layout::Interleaved>;
using HalfSplitJordans = BankFam<JordanFam<3>, Layout::HalfSplit, 3>;
using RotationJordanBank = BankFam<RotationJordanFam<2>, Layout::Interleaved, 2>;

using BankCases =
    std::tuple<PEAL_SCALARS(InterleavedRotations), PEAL_SCALARS(HalfSplitRotations),
               PEAL_SCALARS(RealBank), PEAL_SCALARS(HalfSplitJordans),
               PEAL_SCALARS(RotationJordanBank)>;

TEMPLATE_LIST_TEST_CASE("group-law suite: banks", "[properties]", BankCases) {
  run_property_suite<TestType>();
}
