// _peal_torch's float64 kernels over N-D points (python/src/points.cpp has the float32 ones).
#include "kernels.hpp"

void peal_torch::bind_points_float64(py::module_& m) { bind_point_kernels<double>(m, "float64"); }
