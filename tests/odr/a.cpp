// ODR test, translation unit A (with main). Both TUs include the umbrella header; a
// non-inline definition in any peal header makes this fail to link.
#include <peal/peal.hpp>

int peal_odr_b();  // defined in b.cpp

int peal_odr_a() { return PEAL_VERSION_MAJOR; }

int main() { return peal_odr_a() == peal_odr_b() ? 0 : 1; }
