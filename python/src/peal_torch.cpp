// _peal_torch: the compiled half of the PyTorch op (python/peal_torch/__init__.py holds the
// autograd glue). peal's fused attention, linear attention and encode, forward and backward,
// for a rotation
// bank with learnable frequencies ω and dampings a (RoPE: a = 0; xPos / RetNet-like: a < 0)
// on the first 2n coordinates of each head and the identity on the rest:
//
//     A(τ) = diag(e^{a_i τ} R(ω_i τ)) ⊕ I,   the encoding BlockDiagonal<Bank<RotationBlock>,
//     PassThrough> that peal::RopeEncoding is (include/peal/presets/rope.hpp),
//
// over NumPy arrays that share memory with the torch tensors (inputs c-contiguous, converted
// when they are not; outputs allocated here). peal's checks run first: bad input raises
// ValueError (peal::invalid_argument) before anything is written. The GIL is released while
// the kernels run.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <limits>
#include <optional>
#include <peal/attention.hpp>
#include <peal/attention_backward.hpp>
#include <peal/encode.hpp>
#include <peal/encode_backward.hpp>
#include <peal/linear_attention.hpp>
#include <peal/linear_attention_backward.hpp>
#include <peal/parameters.hpp>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

using Encoding = peal::BlockDiagonal<peal::Bank<peal::RotationBlock<double>>, peal::PassThrough<double>>;
template <class T>
using In = py::array_t<T, py::array::c_style | py::array::forcecast>;
using peal::Index;
using peal::Positions;
using peal::TensorView;

[[noreturn]] void fail(const std::string& what) { throw peal::invalid_argument("peal_torch: " + what); }

// A tensor of shape [tokens, heads, dim].
template <class T>
TensorView<const T> rows(const In<T>& a, const char* name) {
  if (a.ndim() != 3) fail(std::string(name) + " must be [tokens, heads, dim]");
  return TensorView<const T>(a.data(), Index(a.shape(0)), Index(a.shape(1)), Index(a.shape(2)));
}

template <class T>
py::array_t<T> empty_rows(Index tokens, Index heads, Index dim) {
  return py::array_t<T>({py::ssize_t(tokens), py::ssize_t(heads), py::ssize_t(dim)});
}

template <class T>
TensorView<T> rows(py::array_t<T>& a) {
  return TensorView<T>(a.mutable_data(), Index(a.shape(0)), Index(a.shape(1)), Index(a.shape(2)));
}

Positions positions(const In<double>& t, const char* name) {
  if (t.ndim() != 1) fail(std::string(name) + " must be 1-D");
  return Positions(t.data(), Index(t.shape(0)));
}

std::vector<double> vec(const std::optional<In<double>>& a, const char* name) {
  if (!a) return {};
  if (a->ndim() != 1) fail(std::string(name) + " must be 1-D");
  return std::vector<double>(a->data(), a->data() + a->shape(0));
}

py::array_t<double> array(const std::vector<double>& v) {
  py::array_t<double> a(py::ssize_t(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

// ω_i and a_i (n each, n >= 1, 2n <= head_dim) on the first 2n coordinates, in `layout`.
Encoding encoding(const In<double>& omega, const In<double>& a, Index head_dim, bool interleaved) {
  if (omega.ndim() != 1 || a.ndim() != 1 || omega.shape(0) != a.shape(0) || omega.shape(0) < 1)
    fail("omega and a must be 1-D with the same number (>= 1) of rotary pairs");
  const Index n = Index(omega.shape(0));
  if (2 * n > head_dim)
    fail(std::to_string(n) + " rotary pairs do not fit a head of " + std::to_string(head_dim));
  std::vector<peal::RotationBlock<double>> blocks;
  blocks.reserve(std::size_t(n));
  for (Index i = 0; i < n; ++i) blocks.emplace_back(omega.data()[i], a.data()[i]);
  return Encoding(peal::Bank<peal::RotationBlock<double>>(
                      blocks, interleaved ? peal::Layout::Interleaved : peal::Layout::HalfSplit),
                  peal::PassThrough<double>(int(head_dim - 2 * n)));
}

struct Options {
  bool causal = false;
  double window = std::numeric_limits<double>::infinity();
  std::optional<In<double>> alibi_slopes, sinks;
  double softcap = 0;
  std::optional<double> scale;
  int threads = 0;

  peal::AttentionOptions attention() const {
    peal::AttentionOptions o;
    o.causal = causal;
    o.window = window;
    o.alibi_slopes = vec(alibi_slopes, "alibi_slopes");
    o.softcap = softcap;
    o.sinks = vec(sinks, "sinks");
    o.scale = scale;
    o.threads = threads;
    return o;
  }
};

// out [nq, Hq, dv] and lse [nq, Hq] (float64).
template <class T>
py::tuple attention_forward(const In<T>& q, const In<double>& tq, const In<T>& k,
                            const In<double>& tk, const In<T>& v, const In<double>& omega,
                            const In<double>& a, bool interleaved, const Options& o) {
  const auto qv = rows(q, "q"), kv = rows(k, "k"), vv = rows(v, "v");
  const Encoding enc = encoding(omega, a, qv.dim(), interleaved);
  peal::AttentionOptions opt = o.attention();
  auto out = empty_rows<T>(qv.tokens(), qv.heads(), vv.dim());
  py::array_t<double> lse({py::ssize_t(qv.tokens()), py::ssize_t(qv.heads())});
  opt.lse = lse.mutable_data();
  const Positions pq = positions(tq, "tq"), pk = positions(tk, "tk");
  {
    py::gil_scoped_release unlocked;
    peal::attention(enc, qv, pq, kv, pk, vv, rows(out), opt);
  }
  return py::make_tuple(out, lse);
}

// Which gradients attention_backward returns (None for the others).
struct Wants {
  bool q = true, k = true, v = true, parameters = true, tq = false, tk = false, slopes = false,
       sinks = false, decay = false;
};

// (dq, dk, dv, d_parameters [ω then a], d_tq, d_tk, d_slopes, d_sinks); None where not wanted.
template <class T>
py::tuple attention_backward(const In<T>& q, const In<double>& tq, const In<T>& k,
                             const In<double>& tk, const In<T>& v, const In<double>& omega,
                             const In<double>& a, bool interleaved, const Options& o,
                             const In<T>& out, const In<double>& lse, const In<T>& d_out,
                             const Wants& w) {
  const auto qv = rows(q, "q"), kv = rows(k, "k"), vv = rows(v, "v");
  const Encoding enc = encoding(omega, a, qv.dim(), interleaved);
  const peal::AttentionOptions opt = o.attention();
  if (lse.ndim() != 2) fail("lse must be [tokens, heads]");
  const std::vector<double> lse_v(lse.data(), lse.data() + lse.size());
  const Positions pq = positions(tq, "tq"), pk = positions(tk, "tk");
  py::array_t<T> dq = empty_rows<T>(w.q ? qv.tokens() : 0, qv.heads(), qv.dim());
  py::array_t<T> dk = empty_rows<T>(w.k ? kv.tokens() : 0, kv.heads(), kv.dim());
  py::array_t<T> dv = empty_rows<T>(w.v ? vv.tokens() : 0, vv.heads(), vv.dim());
  std::vector<double> g_par(std::size_t(peal::parameter_count(enc))), g_tq(std::size_t(qv.tokens())),
      g_tk(std::size_t(kv.tokens())), g_slopes(opt.alibi_slopes.size()), g_sinks(opt.sinks.size());
  peal::AttentionGradients<double> grads{w.parameters ? &g_par : nullptr, w.tq ? &g_tq : nullptr,
                                         w.tk ? &g_tk : nullptr,
                                         w.slopes && !g_slopes.empty() ? &g_slopes : nullptr,
                                         w.sinks && !g_sinks.empty() ? &g_sinks : nullptr};
  auto want = [](bool wanted, py::array_t<T>& g) { return wanted ? rows(g) : TensorView<T>(); };
  {
    py::gil_scoped_release unlocked;
    peal::attention_backward(enc, qv, pq, kv, pk, vv, rows(out, "out"), lse_v,
                             rows(d_out, "d_out"), want(w.q, dq), want(w.k, dk), want(w.v, dv),
                             opt, grads);
  }
  auto maybe = [](bool wanted, py::object x) { return wanted ? x : py::object(py::none()); };
  return py::make_tuple(maybe(w.q, dq), maybe(w.k, dk), maybe(w.v, dv),
                        maybe(w.parameters, array(g_par)), maybe(w.tq, array(g_tq)),
                        maybe(w.tk, array(g_tk)), maybe(grads.alibi_slopes, array(g_slopes)),
                        maybe(grads.sinks, array(g_sinks)));
}

struct LinearOptions {
  std::optional<In<double>> decay;
  std::optional<double> scale;
  std::string form = "automatic";
  Index chunk = 0;
  int threads = 0;
  std::string normalization = "none";

  peal::LinearAttentionOptions linear() const {
    peal::LinearAttentionOptions o;
    o.decay = vec(decay, "decay");
    o.scale = scale;
    o.chunk = chunk;
    o.threads = threads;
    if (normalization == "retnet")
      o.normalization = peal::LinearNorm::retnet;
    else if (normalization != "none")
      fail("normalization must be 'none' or 'retnet', not '" + normalization + "'");
    using F = peal::LinearForm;
    static const std::pair<const char*, F> forms[] = {
        {"automatic", F::automatic}, {"parallel", F::parallel}, {"chunkwise", F::chunkwise},
        {"recurrent", F::recurrent}};
    for (const auto& f : forms)
      if (form == f.first) {
        o.form = f.second;
        return o;
      }
    fail("form must be 'automatic', 'parallel', 'chunkwise' or 'recurrent', not '" + form + "'");
  }
};

// Linear attention (normalization none or RetNet's, docs/linear-attention.md §5): out [nq, Hq, dv].
template <class T>
py::array_t<T> linear_forward(const In<T>& q, const In<double>& tq, const In<T>& k,
                              const In<double>& tk, const In<T>& v, const In<double>& omega,
                              const In<double>& a, bool interleaved, const LinearOptions& o) {
  const auto qv = rows(q, "q"), kv = rows(k, "k"), vv = rows(v, "v");
  const Encoding enc = encoding(omega, a, qv.dim(), interleaved);
  const peal::LinearAttentionOptions opt = o.linear();
  auto out = empty_rows<T>(qv.tokens(), qv.heads(), vv.dim());
  const Positions pq = positions(tq, "tq"), pk = positions(tk, "tk");
  {
    py::gil_scoped_release unlocked;
    peal::linear_attention(enc, qv, pq, kv, pk, vv, rows(out), opt);
  }
  return out;
}

// (dq, dk, dv, d_parameters [ω then a], d_tq, d_tk, d_decay); None where not wanted.
template <class T>
py::tuple linear_backward(const In<T>& q, const In<double>& tq, const In<T>& k,
                          const In<double>& tk, const In<T>& v, const In<double>& omega,
                          const In<double>& a, bool interleaved, const LinearOptions& o,
                          const In<T>& d_out, const Wants& w) {
  const auto qv = rows(q, "q"), kv = rows(k, "k"), vv = rows(v, "v");
  const Encoding enc = encoding(omega, a, qv.dim(), interleaved);
  const peal::LinearAttentionOptions opt = o.linear();
  const Positions pq = positions(tq, "tq"), pk = positions(tk, "tk");
  py::array_t<T> dq = empty_rows<T>(w.q ? qv.tokens() : 0, qv.heads(), qv.dim());
  py::array_t<T> dk = empty_rows<T>(w.k ? kv.tokens() : 0, kv.heads(), kv.dim());
  py::array_t<T> dv = empty_rows<T>(w.v ? vv.tokens() : 0, vv.heads(), vv.dim());
  std::vector<double> g_par(std::size_t(peal::parameter_count(enc))), g_tq(std::size_t(qv.tokens())),
      g_tk(std::size_t(kv.tokens())), g_decay(opt.decay.size());
  peal::LinearAttentionGradients<double> grads{
      w.parameters ? &g_par : nullptr, w.tq ? &g_tq : nullptr, w.tk ? &g_tk : nullptr,
      w.decay && !g_decay.empty() ? &g_decay : nullptr};
  auto want = [](bool wanted, py::array_t<T>& g) { return wanted ? rows(g) : TensorView<T>(); };
  {
    py::gil_scoped_release unlocked;
    peal::linear_attention_backward(enc, qv, pq, kv, pk, vv, rows(d_out, "d_out"), want(w.q, dq),
                                    want(w.k, dk), want(w.v, dv), opt, grads);
  }
  auto maybe = [](bool wanted, py::object x) { return wanted ? x : py::object(py::none()); };
  return py::make_tuple(maybe(w.q, dq), maybe(w.k, dk), maybe(w.v, dv),
                        maybe(w.parameters, array(g_par)), maybe(w.tq, array(g_tq)),
                        maybe(w.tk, array(g_tk)), maybe(grads.decay, array(g_decay)));
}

// F(t) x (query) or G(t) x (key), out of place.
template <class T>
py::array_t<T> encode_forward(const In<T>& x, const In<double>& t, const In<double>& omega,
                              const In<double>& a, bool interleaved, bool query) {
  const auto xv = rows(x, "x");
  const Encoding enc = encoding(omega, a, xv.dim(), interleaved);
  auto y = empty_rows<T>(xv.tokens(), xv.heads(), xv.dim());
  const Positions p = positions(t, "t");
  {
    py::gil_scoped_release unlocked;
    if (query)
      peal::encode_queries(enc, xv, rows(y), p);
    else
      peal::encode_keys(enc, xv, rows(y), p);
  }
  return y;
}

// (dx, d_parameters [ω then a], d_t); None where not wanted.
template <class T>
py::tuple encode_backward(const In<T>& x, const In<double>& t, const In<double>& omega,
                          const In<double>& a, bool interleaved, bool query, const In<T>& dy,
                          bool want_x, bool want_parameters, bool want_t) {
  const auto xv = rows(x, "x");
  const Encoding enc = encoding(omega, a, xv.dim(), interleaved);
  auto dx = empty_rows<T>(want_x ? xv.tokens() : 0, xv.heads(), xv.dim());
  std::vector<double> g_par(std::size_t(peal::parameter_count(enc))), g_t(std::size_t(xv.tokens()));
  const peal::EncodeGradients<double> grads{want_parameters ? &g_par : nullptr,
                                            want_t ? &g_t : nullptr};
  const Positions p = positions(t, "t");
  const TensorView<T> dxv = want_x ? rows(dx) : TensorView<T>();
  {
    py::gil_scoped_release unlocked;
    if (query)
      peal::encode_queries_backward(enc, xv, p, rows(dy, "dy"), dxv, grads);
    else
      peal::encode_keys_backward(enc, xv, p, rows(dy, "dy"), dxv, grads);
  }
  auto maybe = [](bool wanted, py::object o) { return wanted ? o : py::object(py::none()); };
  return py::make_tuple(maybe(want_x, dx), maybe(want_parameters, array(g_par)),
                        maybe(want_t, array(g_t)));
}

// One name per storage type (attention_forward_float32, ...): the Python side picks by the
// tensors' dtype, so that forcecast never converts a float64 tensor to float32 or back.
template <class T>
void bind_storage(py::module_& m, const std::string& dtype) {
  m.def(("attention_forward_" + dtype).c_str(), &attention_forward<T>);
  m.def(("attention_backward_" + dtype).c_str(), &attention_backward<T>);
  m.def(("linear_forward_" + dtype).c_str(), &linear_forward<T>);
  m.def(("linear_backward_" + dtype).c_str(), &linear_backward<T>);
  m.def(("encode_forward_" + dtype).c_str(), &encode_forward<T>);
  m.def(("encode_backward_" + dtype).c_str(), &encode_backward<T>);
}

}  // namespace

PYBIND11_MODULE(_peal_torch, m) {
  m.doc() = "peal's fused rotation-bank attention, linear attention and encode, forward and "
            "backward (the compiled half of peal_torch)";
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
  bind_storage<float>(m, "float32");
  bind_storage<double>(m, "float64");
}
