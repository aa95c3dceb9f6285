// _peal_torch's kernels with float64 storage (python/src/kernels.hpp), in a TU of their own
// beside module.cpp's float32 ones.
#include "kernels.hpp"

void peal_torch::bind_float64(py::module_& m) { bind_storage<double>(m, "float64"); }
