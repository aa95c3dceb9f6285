// _peal_torch: the compiled half of the PyTorch op (python/peal_torch/__init__.py holds the
// autograd glue). The module's classes and its kernels' bindings: float32's here, float64's
// from float64.cpp, each storage type's kernels compiled in their own TU (python/src/module.hpp,
// python/src/kernels.hpp).
#include "kernels.hpp"

PYBIND11_MODULE(_peal_torch, m) {
  using namespace peal_torch;
  m.doc() = "peal's fused attention, linear attention and encode, forward and "
            "backward (the compiled half of peal_torch)";
  py::class_<Blocks>(m, "Blocks")
      .def(py::init<>())
      .def_readwrite("omega", &Blocks::omega)
      .def_readwrite("a", &Blocks::a)
      .def_readwrite("real", &Blocks::real)
      .def_readwrite("jordan", &Blocks::jordan)
      .def_readwrite("interleaved", &Blocks::interleaved);
  py::class_<Options>(m, "Options")
      .def(py::init<>())
      .def_readwrite("causal", &Options::causal)
      .def_readwrite("window", &Options::window)
      .def_readwrite("alibi_slopes", &Options::alibi_slopes)
      .def_readwrite("sinks", &Options::sinks)
      .def_readwrite("softcap", &Options::softcap)
      .def_readwrite("scale", &Options::scale)
      .def_readwrite("threads", &Options::threads);
  py::class_<Wants>(m, "Wants")
      .def(py::init<>())
      .def_readwrite("q", &Wants::q)
      .def_readwrite("k", &Wants::k)
      .def_readwrite("v", &Wants::v)
      .def_readwrite("parameters", &Wants::parameters)
      .def_readwrite("tq", &Wants::tq)
      .def_readwrite("tk", &Wants::tk)
      .def_readwrite("slopes", &Wants::slopes)
      .def_readwrite("sinks", &Wants::sinks)
      .def_readwrite("decay", &Wants::decay);
  py::class_<LinearOptions>(m, "LinearOptions")
      .def(py::init<>())
      .def_readwrite("decay", &LinearOptions::decay)
      .def_readwrite("scale", &LinearOptions::scale)
      .def_readwrite("form", &LinearOptions::form)
      .def_readwrite("chunk", &LinearOptions::chunk)
      .def_readwrite("threads", &LinearOptions::threads)
      .def_readwrite("normalization", &LinearOptions::normalization);
  m.attr("max_position_axes") = peal::max_position_axes;  // axes= of N-D points: 1 to this
  bind_storage<float>(m, "float32");
  bind_float64(m);
  bind_points(m);
}

