// _peal_torch's kernels over a batch (python/src/module.hpp) for one storage type T: softmax
// attention (include/peal/attention.hpp, include/peal/attention_backward.hpp), linear attention
// (include/peal/linear_attention.hpp, include/peal/linear_attention_backward.hpp) and encode
// (include/peal/encode.hpp, include/peal/encode_backward.hpp), forward and backward; attention
// and encode also over N-D points (include/peal/scores_nd.hpp, include/peal/scores_nd_backward.hpp;
// module.hpp's Points). Included by module.cpp (float32), float64.cpp, points.cpp and
// points_float64.cpp only.
#pragma once

#include <peal/attention.hpp>
#include <peal/attention_backward.hpp>
#include <peal/encode.hpp>
#include <peal/encode_backward.hpp>
#include <peal/linear_attention.hpp>
#include <peal/linear_attention_backward.hpp>
#include <peal/parameters.hpp>
#include <peal/scores_nd.hpp>
#include <peal/scores_nd_backward.hpp>
#include <string>
#include <vector>

#include "module.hpp"

namespace peal_torch {

inline peal::AttentionOptions attention_options(const Options& o) {
  peal::AttentionOptions a;
  a.causal = o.causal;
  a.window = o.window;
  a.alibi_slopes = vec(o.alibi_slopes, "alibi_slopes");
  a.softcap = o.softcap;
  a.sinks = vec(o.sinks, "sinks");
  a.scale = o.scale;
  a.threads = o.threads;
  return a;
}

// out [B, nq, Hq, dv] and lse [B, nq, Hq] (float64). G: 1-D positions (Line) or N-D points
// (Points; module.hpp).
template <class T, class G>
py::tuple attention_forward(const In<T>& q, const In<double>& tq, const In<T>& k,
                            const In<double>& tk, const In<T>& v, const Blocks& blocks,
                            const Options& o) {
  const auto qb = batch(q, "q"), kb = batch(k, "k"), vb = batch(v, "v");
  same_batch(qb.batch, kb.batch, vb.batch);
  const typename G::Enc enc = G::encoding(blocks, qb.dim);
  const peal::AttentionOptions opt = attention_options(o);
  const Index B = qb.batch;
  auto out = empty_batch<T>(B, qb.tokens, qb.heads, vb.dim);
  py::array_t<double> lse({py::ssize_t(B), py::ssize_t(qb.tokens), py::ssize_t(qb.heads)});
  const auto pq = G::positions(tq, "tq", B, qb.tokens), pk = G::positions(tk, "tk", B, kb.tokens);
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
template <class T, class G>
py::tuple attention_backward(const In<T>& q, const In<double>& tq, const In<T>& k,
                             const In<double>& tk, const In<T>& v, const Blocks& blocks, const Options& o,
                             const In<T>& out, const In<double>& lse, const In<T>& d_out,
                             const Wants& w) {
  const auto qb = batch(q, "q"), kb = batch(k, "k"), vb = batch(v, "v");
  const auto outb = batch(out, "out"), dob = batch(d_out, "d_out");
  same_batch(qb.batch, kb.batch, vb.batch);
  const Index B = qb.batch;
  if (outb.batch != B || dob.batch != B) fail("out and d_out must have q's batch size");
  const typename G::Enc enc = G::encoding(blocks, qb.dim);
  const peal::AttentionOptions opt = attention_options(o);
  if (lse.ndim() != 3 || lse.shape(0) != B || lse.shape(1) != qb.tokens || lse.shape(2) != qb.heads)
    fail("lse must be [batch, tokens, heads] of q");
  const Index lse_n = qb.tokens * qb.heads;
  const double* lse_p = lse.data();
  const auto pq = G::positions(tq, "tq", B, qb.tokens), pk = G::positions(tk, "tk", B, kb.tokens);
  BatchGradients<T> g(w, qb, kb, vb, std::size_t(peal::parameter_count(enc)), G::per_token(enc));
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
template <class T, class G>
py::array_t<T> encode_forward(const In<T>& x, const In<double>& t, const Blocks& blocks, bool query) {
  const auto xb = batch(x, "x");
  const typename G::Enc enc = G::encoding(blocks, xb.dim);
  auto y = empty_batch<T>(xb.batch, xb.tokens, xb.heads, xb.dim);
  const auto yb = batch(y);
  const auto p = G::positions(t, "t", xb.batch, xb.tokens);
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
template <class T, class G>
py::tuple encode_backward(const In<T>& x, const In<double>& t, const Blocks& blocks, bool query,
                          const In<T>& dy,
                          bool want_x, bool want_parameters, bool want_t) {
  const auto xb = batch(x, "x"), dyb = batch(dy, "dy");
  if (dyb.batch != xb.batch) fail("dy must have x's batch size");
  const Index B = xb.batch;
  const typename G::Enc enc = G::encoding(blocks, xb.dim);
  auto dx = empty_batch<T>(B, want_x ? xb.tokens : 0, xb.heads, xb.dim);
  const auto dxb = batch(dx);
  std::vector<double> g_par(std::size_t(peal::parameter_count(enc)));
  const Index nt = xb.tokens * G::per_token(enc);  // position-gradient entries per element
  std::vector<std::vector<double>> g_t(std::size_t(B), std::vector<double>(static_cast<std::size_t>(nt)));
  const auto p = G::positions(t, "t", B, xb.tokens);
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
                        maybe(want_t, array2(g_t, nt)));
}

// One name per storage type (attention_forward_float32, ...): the Python side picks by the
// tensors' dtype, so that forcecast never converts a float64 tensor to float32 or back.
template <class T>
void bind_storage(py::module_& m, const std::string& dtype) {
  m.def(("attention_forward_" + dtype).c_str(), &attention_forward<T, Line>);
  m.def(("attention_backward_" + dtype).c_str(), &attention_backward<T, Line>);
  m.def(("linear_forward_" + dtype).c_str(), &linear_forward<T>);
  m.def(("linear_backward_" + dtype).c_str(), &linear_backward<T>);
  m.def(("encode_forward_" + dtype).c_str(), &encode_forward<T, Line>);
  m.def(("encode_backward_" + dtype).c_str(), &encode_backward<T, Line>);
}

// The kernels over N-D points (attention_forward_points_float32, ...; peal has no linear
// attention over points).
template <class T>
void bind_point_kernels(py::module_& m, const std::string& dtype) {
  m.def(("attention_forward_points_" + dtype).c_str(), &attention_forward<T, Points>);
  m.def(("attention_backward_points_" + dtype).c_str(), &attention_backward<T, Points>);
  m.def(("encode_forward_points_" + dtype).c_str(), &encode_forward<T, Points>);
  m.def(("encode_backward_points_" + dtype).c_str(), &encode_backward<T, Points>);
}

}  // namespace peal_torch
