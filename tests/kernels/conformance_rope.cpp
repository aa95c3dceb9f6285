// The conformance suite's kernels (KernelsOf, tests/conformance_kernels.hpp) for RopeEncoding
// (every RoPE family of test_conformance_rope.cpp and test_conformance_rope_scaling.cpp: one type).
// One line per encoding type: an explicit instantiation is defined once in the program.
#include "../conformance_kernels.hpp"

using namespace peal_test;
using peal::Layout;
using peal::RopeType;

PEAL_CONFORMANCE_KERNELS(RopeFam<RopeType::Default, Layout::HalfSplit, 64>);
