// Must not compile: a rotation Jordan block with no rotation pair is rejected at compile
// time. Built by the ctest test rotation_jordan_size_zero_does_not_compile, which expects
// the static_assert message of include/peal/rotation_jordan_block.hpp.
#include <peal/peal.hpp>

int main() {
  const peal::RotationJordanBlock<0, double> empty(0.5L);
  return empty.dim();
}
