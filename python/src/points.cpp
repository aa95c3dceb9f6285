// _peal_torch's float32 kernels over N-D points (python/src/kernels.hpp with module.hpp's
// Points), at -O3 as module.cpp's; the float64 ones in points_float64.cpp. Both storage types
// in one TU took 38.7 s and 1.52 GB of g++ -O2; apart, 29 s / 1.24 GB (-O3) and 23 s / 1.09 GB.
#include "kernels.hpp"

void peal_torch::bind_points(py::module_& m) {
  bind_point_kernels<float>(m, "float32");
  bind_points_float64(m);
}
