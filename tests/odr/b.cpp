// ODR test, translation unit B; see a.cpp.
#include <peal/peal.hpp>

int peal_odr_b() { return PEAL_VERSION_MAJOR; }
