// peal::compiled: the kernels of include/peal/compiled.hpp for float storage, explicitly
// instantiated (one TU per storage, so that the library compiles in parallel).
#define PEAL_COMPILED_SOURCE
#include <peal/compiled.hpp>

PEAL_COMPILED_STORAGE(, float, float)
PEAL_COMPILED_SMALL_PRODUCTS(, float)
