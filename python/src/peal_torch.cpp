// _peal_torch: the compiled half of the PyTorch op (python/peal_torch/__init__.py holds the
// autograd glue). peal's fused attention, linear attention and encode, forward and backward,
// for an encoding chosen at run time from three banks of learnable blocks, in this order on the
// coordinates of each head, and the identity on the rest:
//
//     A(τ) = diag(e^{a_i τ} R(ω_i τ)) ⊕ diag(e^{λ_r τ}) ⊕ diag(e^{μ_j τ} [[1, τ], [0, 1]]) ⊕ I,
//
// rotation pairs (ω, a) on the first 2n coordinates (RoPE: a = 0; xPos / RetNet-like: a < 0;
// half-split or interleaved), real blocks λ (decay, growth or constant) on the next m, Jordan
// blocks of size 2 with eigenvalue μ (a score linear in the distance, times e^{μτ}) on the
// next 2j: the encoding BlockDiagonal<Bank<RotationBlock>, Bank<RealBlock>,
// Bank<JordanBlock<2>>, PassThrough> (docs/design.md §1; a bank of zero blocks is empty).
// RoPE is the case m = j = 0, the encoding peal::RopeEncoding is
// (include/peal/presets/rope.hpp) with an empty real and Jordan bank.
//
// The kernels run over NumPy arrays that share memory with the torch tensors (inputs
// c-contiguous, converted when they are not; outputs allocated here), a whole batch
// [batch, tokens, heads, dim] per call (over_batch: its elements side by side on the threads).
// Bad input raises ValueError (peal::invalid_argument): each element's kernel checks its inputs
// before it writes, and the outputs are new arrays, dropped when any element throws. The GIL is
// released while the kernels run.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <limits>
#include <optional>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <peal/attention.hpp>
#include <peal/attention_backward.hpp>
#include <peal/detail/parallel.hpp>
#include <peal/encode.hpp>
#include <peal/encode_backward.hpp>
#include <peal/jordan_block.hpp>
#include <peal/linear_attention.hpp>
#include <peal/linear_attention_backward.hpp>
#include <peal/parameters.hpp>
#include <peal/real_block.hpp>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

using Encoding =
    peal::BlockDiagonal<peal::Bank<peal::RotationBlock<double>>, peal::Bank<peal::RealBlock<double>>,
                        peal::Bank<peal::JordanBlock<2, double>>, peal::PassThrough<double>>;
template <class T>
using In = py::array_t<T, py::array::c_style | py::array::forcecast>;
using peal::Index;
using peal::Positions;
using peal::TensorView;

[[noreturn]] void fail(const std::string& what) { throw peal::invalid_argument("peal_torch: " + what); }

// A batch of tensors [batch, tokens, heads, dim] (c-contiguous): element b as a view.
template <class T>
struct Batch {
  T* data;
  Index batch, tokens, heads, dim;
  TensorView<T> operator[](Index b) const {
    return TensorView<T>(data + b * tokens * heads * dim, tokens, heads, dim);
  }
};

template <class T>
Batch<const T> batch(const In<T>& a, const char* name) {
  if (a.ndim() != 4) fail(std::string(name) + " must be [batch, tokens, heads, dim]");
  return {a.data(), Index(a.shape(0)), Index(a.shape(1)), Index(a.shape(2)), Index(a.shape(3))};
}

// A new [batch, tokens, heads, dim] array (tokens = 0: not wanted).
template <class T>
py::array_t<T> empty_batch(Index b, Index tokens, Index heads, Index dim) {
  return py::array_t<T>({py::ssize_t(b), py::ssize_t(tokens), py::ssize_t(heads), py::ssize_t(dim)});
}

template <class T>
Batch<T> batch(py::array_t<T>& a) {
  return {a.mutable_data(), Index(a.shape(0)), Index(a.shape(1)), Index(a.shape(2)),
          Index(a.shape(3))};
}

// Positions [batch, tokens] (float64).
struct BatchPositions {
  const double* data;
  Index batch, tokens;
  Positions operator[](Index b) const { return Positions(data + b * tokens, tokens); }
};

BatchPositions positions(const In<double>& t, const char* name, Index b, Index tokens) {
  if (t.ndim() != 2 || t.shape(0) != b || t.shape(1) != tokens)
    fail(std::string(name) + " must be [" + std::to_string(b) + ", " + std::to_string(tokens) + "]");
  return {t.data(), b, tokens};
}

void same_batch(Index a, Index b, Index c) {
  if (a != b || a != c) fail("q, k and v must have the same batch size");
}

// fn(b, threads) for every batch element b: the elements side by side, one thread each, when
// there are at least as many as threads (the kernels thread within one element over query
// tiles or key heads, which a short sequence has few of: issue 22's training shapes), else one
// after another, each with every thread. The kernels' results do not depend on their thread
// count, so neither do these. The first exception thrown is rethrown after the loop.
template <class Fn>
void over_batch(Index b, int threads, Fn&& fn) {
  if (threads < 0) fail("threads must be >= 0 (0: OpenMP's maximum)");
#ifdef _OPENMP
  // At most the kernels' own bound (detail/tiled/tile_plan.hpp): no count asks OpenMP for
  // millions of threads.
  const int t = std::min(threads > 0 ? threads : omp_get_max_threads(),
                         peal::detail::tiled::kMaxThreads);
#else
  const int t = 1;
#endif
  if (b >= t && t > 1)
    peal::detail::parallel_each(b, t, [&](std::ptrdiff_t x) { fn(Index(x), 1); });
  else
    for (Index x = 0; x < b; ++x) fn(x, t);
}

// A [batch, n] array of the batch's per-element gradients.
py::array_t<double> array2(const std::vector<std::vector<double>>& v, Index n) {
  py::array_t<double> a({py::ssize_t(v.size()), py::ssize_t(n)});
  double* p = a.mutable_data();
  for (const auto& x : v) p = std::copy(x.begin(), x.end(), p);
  return a;
}

// The sum over the batch of n-entry gradients, in the order of its elements (the same bits for
// any thread count; n zeros for an empty batch).
std::vector<double> summed(const std::vector<std::vector<double>>& v, std::size_t n) {
  std::vector<double> s(n, 0.0);
  for (const auto& x : v)
    for (std::size_t i = 0; i < s.size(); ++i) s[i] += x[i];
  return s;
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

// Which gradients a backward returns (None for the others).
struct Wants {
  bool q = true, k = true, v = true, parameters = true, tq = false, tk = false, slopes = false,
       sinks = false, decay = false;
};

py::object maybe(bool wanted, py::object x) { return wanted ? x : py::object(py::none()); }

// What every backward returns for a batch: dq, dk, dv (new arrays; 0 tokens when not wanted)
// and, per element, the gradients of the parameters and of the query and key positions.
template <class T>
struct BatchGradients {
  const Wants& w;
  std::size_t np;
  Index nq, nk;
  py::array_t<T> dq, dk, dv;
  Batch<T> dqb, dkb, dvb;
  std::vector<std::vector<double>> par, tq, tk;

  BatchGradients(const Wants& wants, const Batch<const T>& q, const Batch<const T>& k,
                 const Batch<const T>& v, std::size_t parameters)
      : w(wants), np(parameters), nq(q.tokens), nk(k.tokens),
        dq(empty_batch<T>(q.batch, w.q ? q.tokens : 0, q.heads, q.dim)),
        dk(empty_batch<T>(q.batch, w.k ? k.tokens : 0, k.heads, k.dim)),
        dv(empty_batch<T>(q.batch, w.v ? v.tokens : 0, v.heads, v.dim)),
        dqb(batch(dq)), dkb(batch(dk)), dvb(batch(dv)),
        par(std::size_t(q.batch), std::vector<double>(parameters)),
        tq(std::size_t(q.batch), std::vector<double>(std::size_t(q.tokens))),
        tk(std::size_t(q.batch), std::vector<double>(std::size_t(k.tokens))) {}

  TensorView<T> dq_of(Index b) const { return w.q ? dqb[b] : TensorView<T>(); }
  TensorView<T> dk_of(Index b) const { return w.k ? dkb[b] : TensorView<T>(); }
  TensorView<T> dv_of(Index b) const { return w.v ? dvb[b] : TensorView<T>(); }
  std::vector<double>* par_of(Index b) { return w.parameters ? &par[std::size_t(b)] : nullptr; }
  std::vector<double>* tq_of(Index b) { return w.tq ? &tq[std::size_t(b)] : nullptr; }
  std::vector<double>* tk_of(Index b) { return w.tk ? &tk[std::size_t(b)] : nullptr; }

  // [dq, dk, dv, d_parameters [ω, a, λ, μ] summed over the batch, d_tq [B, nq], d_tk [B, nk]].
  py::list results() const {
    py::list r;
    r.append(maybe(w.q, dq));
    r.append(maybe(w.k, dk));
    r.append(maybe(w.v, dv));
    r.append(maybe(w.parameters, array(summed(par, np))));
    r.append(maybe(w.tq, array2(tq, nq)));
    r.append(maybe(w.tk, array2(tk, nk)));
    return r;
  }
};

// The encoding's parameters as the Python side gives them (float64, 1-D): ω and a (n each),
// λ of the real blocks (m), μ of the Jordan blocks (j); the rotation pairs' layout.
struct Blocks {
  In<double> omega, a, real, jordan;
  bool interleaved = false;
};

// Each bank from its parameters, in the order of Blocks (2n + m + 2j <= head_dim); the
// parameter gradients come back in the same order: [ω, a, λ, μ].
Encoding encoding(const Blocks& p, Index head_dim) {
  for (const In<double>* x : {&p.omega, &p.a, &p.real, &p.jordan})
    if (x->ndim() != 1) fail("omega, a, real and jordan must be 1-D");
  if (p.omega.shape(0) != p.a.shape(0)) fail("omega and a must have one entry per rotary pair");
  const Index n = Index(p.omega.shape(0)), m = Index(p.real.shape(0)), j = Index(p.jordan.shape(0));
  if (2 * n + m + 2 * j > head_dim)
    fail(std::to_string(n) + " rotary pairs, " + std::to_string(m) + " real blocks and " +
         std::to_string(j) + " Jordan blocks (" + std::to_string(2 * n + m + 2 * j) +
         " coordinates) do not fit a head of " + std::to_string(head_dim));
  std::vector<peal::RotationBlock<double>> rot;
  for (Index i = 0; i < n; ++i) rot.emplace_back(p.omega.data()[i], p.a.data()[i]);
  std::vector<peal::RealBlock<double>> real;
  for (Index i = 0; i < m; ++i) real.emplace_back(p.real.data()[i]);
  std::vector<peal::JordanBlock<2, double>> jordan;
  for (Index i = 0; i < j; ++i) jordan.emplace_back(p.jordan.data()[i]);
  return Encoding(
      peal::Bank<peal::RotationBlock<double>>(
          rot, p.interleaved ? peal::Layout::Interleaved : peal::Layout::HalfSplit),
      peal::Bank<peal::RealBlock<double>>(real), peal::Bank<peal::JordanBlock<2, double>>(jordan),
      peal::PassThrough<double>(int(head_dim - 2 * n - m - 2 * j)));
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

// out [B, nq, Hq, dv] and lse [B, nq, Hq] (float64).
template <class T>
py::tuple attention_forward(const In<T>& q, const In<double>& tq, const In<T>& k,
                            const In<double>& tk, const In<T>& v, const Blocks& blocks,
                            const Options& o) {
  const auto qb = batch(q, "q"), kb = batch(k, "k"), vb = batch(v, "v");
  same_batch(qb.batch, kb.batch, vb.batch);
  const Encoding enc = encoding(blocks, qb.dim);
  const peal::AttentionOptions opt = o.attention();
  const Index B = qb.batch;
  auto out = empty_batch<T>(B, qb.tokens, qb.heads, vb.dim);
  py::array_t<double> lse({py::ssize_t(B), py::ssize_t(qb.tokens), py::ssize_t(qb.heads)});
  const auto pq = positions(tq, "tq", B, qb.tokens), pk = positions(tk, "tk", B, kb.tokens);
  const auto ob = batch(out);
  double* lse_p = lse.mutable_data();
  {
    py::gil_scoped_release unlocked;
    over_batch(B, opt.threads, [&](Index b, int threads) {
      peal::AttentionOptions ob_opt = opt;
      ob_opt.threads = threads;
      ob_opt.lse = lse_p + b * qb.tokens * qb.heads;
      peal::attention(enc, qb[b], pq[b], kb[b], pk[b], vb[b], ob[b], ob_opt);
    });
  }
  return py::make_tuple(out, lse);
}

// (dq, dk, dv [B, n, H, ·], d_parameters [ω, a, λ, μ] summed over the batch, d_tq [B, nq],
// d_tk [B, nk], d_slopes, d_sinks summed); None where not wanted.
template <class T>
py::tuple attention_backward(const In<T>& q, const In<double>& tq, const In<T>& k,
                             const In<double>& tk, const In<T>& v, const Blocks& blocks, const Options& o,
                             const In<T>& out, const In<double>& lse, const In<T>& d_out,
                             const Wants& w) {
  const auto qb = batch(q, "q"), kb = batch(k, "k"), vb = batch(v, "v");
  const auto outb = batch(out, "out"), dob = batch(d_out, "d_out");
  same_batch(qb.batch, kb.batch, vb.batch);
  const Index B = qb.batch;
  if (outb.batch != B || dob.batch != B) fail("out and d_out must have q's batch size");
  const Encoding enc = encoding(blocks, qb.dim);
  const peal::AttentionOptions opt = o.attention();
  if (lse.ndim() != 3 || lse.shape(0) != B || lse.shape(1) != qb.tokens || lse.shape(2) != qb.heads)
    fail("lse must be [batch, tokens, heads] of q");
  const Index lse_n = qb.tokens * qb.heads;
  const double* lse_p = lse.data();
  const auto pq = positions(tq, "tq", B, qb.tokens), pk = positions(tk, "tk", B, kb.tokens);
  BatchGradients<T> g(w, qb, kb, vb, std::size_t(peal::parameter_count(enc)));
  std::vector<std::vector<double>> g_slopes(std::size_t(B), std::vector<double>(opt.alibi_slopes.size())),
      g_sinks(std::size_t(B), std::vector<double>(opt.sinks.size()));
  const bool slopes = w.slopes && !opt.alibi_slopes.empty(), sinks = w.sinks && !opt.sinks.empty();
  {
    py::gil_scoped_release unlocked;
    over_batch(B, opt.threads, [&](Index b, int threads) {
      peal::AttentionOptions bo = opt;
      bo.threads = threads;
      const std::size_t x = std::size_t(b);
      const std::vector<double> lse_b(lse_p + b * lse_n, lse_p + (b + 1) * lse_n);
      const peal::AttentionGradients<double> grads{g.par_of(b), g.tq_of(b), g.tk_of(b),
                                                   slopes ? &g_slopes[x] : nullptr,
                                                   sinks ? &g_sinks[x] : nullptr};
      peal::attention_backward(enc, qb[b], pq[b], kb[b], pk[b], vb[b], outb[b], lse_b, dob[b],
                               g.dq_of(b), g.dk_of(b), g.dv_of(b), bo, grads);
    });
  }
  py::list r = g.results();
  r.append(maybe(slopes, array(summed(g_slopes, opt.alibi_slopes.size()))));
  r.append(maybe(sinks, array(summed(g_sinks, opt.sinks.size()))));
  return py::tuple(r);
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

// Linear attention (normalization none or RetNet's, docs/linear-attention.md §5): out
// [B, nq, Hq, dv].
template <class T>
py::array_t<T> linear_forward(const In<T>& q, const In<double>& tq, const In<T>& k,
                              const In<double>& tk, const In<T>& v, const Blocks& blocks,
                              const LinearOptions& o) {
  const auto qb = batch(q, "q"), kb = batch(k, "k"), vb = batch(v, "v");
  same_batch(qb.batch, kb.batch, vb.batch);
  const Index B = qb.batch;
  const Encoding enc = encoding(blocks, qb.dim);
  const peal::LinearAttentionOptions opt = o.linear();
  auto out = empty_batch<T>(B, qb.tokens, qb.heads, vb.dim);
  const auto ob = batch(out);
  const auto pq = positions(tq, "tq", B, qb.tokens), pk = positions(tk, "tk", B, kb.tokens);
  {
    py::gil_scoped_release unlocked;
    over_batch(B, opt.threads, [&](Index b, int threads) {
      peal::LinearAttentionOptions bo = opt;
      bo.threads = threads;
      peal::linear_attention(enc, qb[b], pq[b], kb[b], pk[b], vb[b], ob[b], bo);
    });
  }
  return out;
}

// (dq, dk, dv, d_parameters [ω, a, λ, μ] summed, d_tq, d_tk, d_decay summed); None where not
// wanted.
template <class T>
py::tuple linear_backward(const In<T>& q, const In<double>& tq, const In<T>& k,
                          const In<double>& tk, const In<T>& v, const Blocks& blocks,
                          const LinearOptions& o,
                          const In<T>& d_out, const Wants& w) {
  const auto qb = batch(q, "q"), kb = batch(k, "k"), vb = batch(v, "v"), dob = batch(d_out, "d_out");
  same_batch(qb.batch, kb.batch, vb.batch);
  const Index B = qb.batch;
  if (dob.batch != B) fail("d_out must have q's batch size");
  const Encoding enc = encoding(blocks, qb.dim);
  const peal::LinearAttentionOptions opt = o.linear();
  const auto pq = positions(tq, "tq", B, qb.tokens), pk = positions(tk, "tk", B, kb.tokens);
  BatchGradients<T> g(w, qb, kb, vb, std::size_t(peal::parameter_count(enc)));
  std::vector<std::vector<double>> g_decay(std::size_t(B), std::vector<double>(opt.decay.size()));
  const bool decay = w.decay && !opt.decay.empty();
  {
    py::gil_scoped_release unlocked;
    over_batch(B, opt.threads, [&](Index b, int threads) {
      peal::LinearAttentionOptions bo = opt;
      bo.threads = threads;
      const std::size_t x = std::size_t(b);
      const peal::LinearAttentionGradients<double> grads{g.par_of(b), g.tq_of(b), g.tk_of(b),
                                                         decay ? &g_decay[x] : nullptr};
      peal::linear_attention_backward(enc, qb[b], pq[b], kb[b], pk[b], vb[b], dob[b], g.dq_of(b),
                                      g.dk_of(b), g.dv_of(b), bo, grads);
    });
  }
  py::list r = g.results();
  r.append(maybe(decay, array(summed(g_decay, opt.decay.size()))));
  return py::tuple(r);
}

// F(t) x (query) or G(t) x (key), out of place: [B, n, H, d]. Encode is memory-bound: the
// batch runs on one thread, as before.
template <class T>
py::array_t<T> encode_forward(const In<T>& x, const In<double>& t, const Blocks& blocks, bool query) {
  const auto xb = batch(x, "x");
  const Encoding enc = encoding(blocks, xb.dim);
  auto y = empty_batch<T>(xb.batch, xb.tokens, xb.heads, xb.dim);
  const auto yb = batch(y);
  const auto p = positions(t, "t", xb.batch, xb.tokens);
  {
    py::gil_scoped_release unlocked;
    for (Index b = 0; b < xb.batch; ++b) {
      if (query)
        peal::encode_queries(enc, xb[b], yb[b], p[b]);
      else
        peal::encode_keys(enc, xb[b], yb[b], p[b]);
    }
  }
  return y;
}

// (dx, d_parameters [ω, a, λ, μ] summed, d_t [B, n]); None where not wanted.
template <class T>
py::tuple encode_backward(const In<T>& x, const In<double>& t, const Blocks& blocks, bool query,
                          const In<T>& dy,
                          bool want_x, bool want_parameters, bool want_t) {
  const auto xb = batch(x, "x"), dyb = batch(dy, "dy");
  if (dyb.batch != xb.batch) fail("dy must have x's batch size");
  const Index B = xb.batch;
  const Encoding enc = encoding(blocks, xb.dim);
  auto dx = empty_batch<T>(B, want_x ? xb.tokens : 0, xb.heads, xb.dim);
  const auto dxb = batch(dx);
  std::vector<double> g_par(std::size_t(peal::parameter_count(enc)));
  std::vector<std::vector<double>> g_t(std::size_t(B), std::vector<double>(std::size_t(xb.tokens)));
  const auto p = positions(t, "t", B, xb.tokens);
  {
    py::gil_scoped_release unlocked;
    for (Index b = 0; b < B; ++b) {  // one parameter sum, in the batch's order
      const peal::EncodeGradients<double> grads{want_parameters ? &g_par : nullptr,
                                                want_t ? &g_t[std::size_t(b)] : nullptr};
      const TensorView<T> dxv = want_x ? dxb[b] : TensorView<T>();
      if (query)
        peal::encode_queries_backward(enc, xb[b], p[b], dyb[b], dxv, grads);
      else
        peal::encode_keys_backward(enc, xb[b], p[b], dyb[b], dxv, grads);
    }
  }
  return py::make_tuple(maybe(want_x, dx), maybe(want_parameters, array(g_par)),
                        maybe(want_t, array2(g_t, xb.tokens)));
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
  bind_storage<float>(m, "float32");
  bind_storage<double>(m, "float64");
}
