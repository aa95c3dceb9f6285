// Must not compile: a Jordan block of size 0 is rejected at compile time. Built by the
// ctest test jordan_size_zero_does_not_compile, which expects the static_assert message.
#include <peal/peal.hpp>

int main() {
  const peal::JordanBlock<0, double> empty(0.0);
  return empty.dim();
}
