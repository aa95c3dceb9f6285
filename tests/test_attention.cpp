// peal::attention (include/peal/attention.hpp) against an independent long double reference
// written here: softmax over the logits x_ij = cap(scale q^T A(t_i - s_j) k_j) - m_h (t_i - s_j)
// from the long double encoding's own score(), masks and sinks applied as documented, times V.
// Tolerances: Tol<float>::attention_* (tests/tolerances.hpp, derived there). Also: decode rows
// against prefill rows, key splits against no split, keys_encoded against raw keys (RoPE, after
// shift_keys too), long decaying caches at ~1.7e9, rows with no visible key, +inf logits, empty
// extents, the thread count, and every bad input with its message. merge_attention
// (include/peal/merge_attention.hpp): slices of a cache merged against the reference over the
// whole cache, the rule against long double, in place, NaN, empty rows, bad input.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <peal/peal.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "families.hpp"
#include "kernel_catalogue.hpp"
#include "tolerances.hpp"

namespace {

using peal::AttentionOptions;
using peal::Index;
using peal::Positions;
using peal::TensorView;
using Catch::Matchers::Contains;
using LD = long double;
using T = peal_test::Tol<float>;

struct Problem {
  Index nq, nk, Hq, Hk, d, dv;
  std::vector<double> tq, tk;
  std::vector<float> q, k, v;  // packed [n, H, d]
  TensorView<const float> Q() const { return TensorView<const float>(q.data(), nq, Hq, d); }
  TensorView<const float> K() const { return TensorView<const float>(k.data(), nk, Hk, d); }
  TensorView<const float> V() const { return TensorView<const float>(v.data(), nk, Hk, dv); }
};

Problem make_problem(Index nq, Index nk, Index Hq, Index Hk, Index d, Index dv,
                     std::vector<double> tq, std::vector<double> tk, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Problem p{nq, nk, Hq, Hk, d, dv, std::move(tq), std::move(tk), {}, {}, {}};
  p.q.resize(std::size_t(nq * Hq * d));
  p.k.resize(std::size_t(nk * Hk * d));
  p.v.resize(std::size_t(nk * Hk * dv));
  for (auto* x : {&p.q, &p.k, &p.v})
    for (float& e : *x) e = u(rng);
  return p;
}
std::vector<double> range(Index n, double start, double step = 1) {
  std::vector<double> t;
  for (Index i = 0; i < n; ++i) t.push_back(start + step * double(i));
  return t;
}
// Irregular timestamps from `base`: gaps log-uniform in [1e-3, 1e3].
std::vector<double> irregular(Index n, double base, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-3, 3);
  std::vector<double> t;
  for (Index i = 0; i < n; ++i) t.push_back(base += std::pow(10.0, u(rng)));
  return t;
}

struct Run {
  std::vector<float> out;
  std::vector<double> lse;
};
template <class E>
Run run(const E& enc, const Problem& p, AttentionOptions opt, const std::vector<float>* keys = nullptr) {
  Run r;
  r.out.assign(std::size_t(p.nq * p.Hq * p.dv), std::nanf(""));
  r.lse.assign(std::size_t(p.nq * p.Hq), std::nan(""));
  opt.lse = r.lse.data();
  const TensorView<const float> k =
      keys ? TensorView<const float>(keys->data(), p.nk, p.Hk, p.d) : p.K();
  peal::attention(enc, p.Q(), Positions(p.tq), k, Positions(p.tk), p.V(),
                  TensorView<float>(r.out.data(), p.nq, p.Hq, p.dv), opt);
  return r;
}

/// The bound's sizes of an encoding: ||A(tau)||_2, max |Re lambda|, ||X||.
struct Sizes {
  std::vector<LD> a;  // real parts of the blocks (a bank of rotations, or one value)
  LD xnorm = 0;
  LD norm(LD tau) const {  // max_b e^{a_b tau}: one exp, of the largest (smallest) a
    if (a.empty()) return 1;
    const auto mm = std::minmax_element(a.begin(), a.end());
    return std::exp((tau >= 0 ? *mm.second : *mm.first) * tau);
  }
  LD rate() const {
    LD r = 0;
    for (LD x : a) r = std::max(r, std::abs(x));
    return r;
  }
};
template <class S>
Sizes sizes_of(const peal::Bank<peal::RotationBlock<S>>& b) {
  Sizes s;
  for (int i = 0; i < b.size(); ++i) {
    s.a.push_back(LD(b.block(i).a()));
    s.xnorm += 2 * (LD(b.block(i).omega()) * LD(b.block(i).omega()) + s.a.back() * s.a.back());
  }
  s.xnorm = std::sqrt(s.xnorm);
  return s;
}

LD half_spread(const std::vector<double>& t, Index w) {
  LD m = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    LD lo = t[i], hi = t[i];
    for (std::size_t j = i; j < std::min(t.size(), i + std::size_t(w)); ++j)
      lo = std::min(lo, LD(t[j])), hi = std::max(hi, LD(t[j]));
    m = std::max(m, hi - lo);
  }
  return m / 2;
}

/// The reference and the bound (Tol<float>::attention_*, float arithmetic and float output) on
/// `rows` (all if empty); returns the number of mismatches, the first described in `first`.
/// keys: the keys the reference uses (default p.k); encoded_q: the reference score is
/// F(t) q . k (keys_encoded), else el.score(q, t, k, s).
template <class EL>
int check_rows(const EL& el, const Sizes& sz, const Problem& p, const AttentionOptions& opt,
               const Run& got, std::vector<Index> rows, std::string& first,
               bool positions_exact = true, const std::vector<float>* keys = nullptr,
               bool encoded_q = false, Index key_tiles = 0) {
  const Index d = p.d, dv = p.dv, G = p.Hq / p.Hk;
  const LD scale = opt.scale ? LD(*opt.scale) : 1 / std::sqrt(LD(std::max<Index>(d, 1)));
  const Index TQ = opt.query_tile > 0 ? opt.query_tile : 256,
              TK = opt.key_tile > 0 ? opt.key_tile : 512;
  const LD w = half_spread(p.tq, TQ) + half_spread(p.tk, TK);
  const LD n_tile = LD(std::min(TK, p.nk));
  // Key tiles: TK tokens each for a pure rotation (nothing cuts them), else as planned (the
  // caller passes the number of key tiles of TileRun::plan()) or at most one per key.
  const LD n_tiles = key_tiles > 0       ? LD(key_tiles)
                     : sz.rate() == 0 ? LD((p.nk + TK - 1) / TK)
                                      : LD(p.nk);
  const std::vector<float>& kk = keys ? *keys : p.k;
  if (rows.empty())
    for (Index i = 0; i < p.nq; ++i) rows.push_back(i);
  int bad = 0;
  auto fail = [&](const std::string& s) {
    if (!bad++) first = s;
  };
  peal::Vector<LD> qv(d), kv(d);
  // A pure rotation factors exactly around an anchor c: q^T A(t - s) k = (F(t - c) q) . (G(s - c)
  // k), O(n) encodings instead of one score per pair (differences exact in long double).
  const bool factor = sz.a.empty() && !encoded_q;
  const LD c = p.tq.empty() ? 0 : LD(p.tq[0]);
  std::vector<peal::Vector<LD>> kf;
  if (factor)
    for (Index j = 0; j < p.nk * p.Hk; ++j) {
      for (Index e = 0; e < d; ++e) kv(e) = kk[std::size_t(j * d + e)];
      el.encode_key(kv, LD(p.tk[std::size_t(j / p.Hk)]) - c);
      kf.push_back(kv);
    }
  for (Index h = 0; h < p.Hq; ++h) {
    const LD m = opt.alibi_slopes.empty() ? 0 : LD(opt.alibi_slopes[std::size_t(h)]);
    const bool sink = !opt.sinks.empty();
    const LD sigma = sink ? LD(opt.sinks[std::size_t(h)]) : 0;
    for (Index i : rows) {
      const double ti = p.tq[std::size_t(i)];
      for (Index e = 0; e < d; ++e) qv(e) = p.q[std::size_t((i * p.Hq + h) * d + e)];
      peal::Vector<LD> qe = qv;
      if (encoded_q) el.encode_query(qe, LD(ti));
      if (factor) el.encode_query(qe, LD(ti) - c);
      std::vector<LD> x;
      std::vector<Index> js;
      LD delta = 0, L = 0, mx = -INFINITY;
      std::vector<LD> vmax(std::size_t(dv), 0);
      for (Index j = 0; j < p.nk; ++j) {
        const double sj = p.tk[std::size_t(j)];
        if ((opt.causal && sj > ti) || ti - sj >= opt.window) continue;
        for (Index e = 0; e < d; ++e) kv(e) = kk[std::size_t((j * p.Hk + h / G) * d + e)];
        const LD tau = LD(ti) - LD(sj);
        const LD M = std::abs(scale) * (encoded_q ? 1 : sz.norm(tau)) * qv.norm() * kv.norm();
        // A decayed score below 1e-12 ulp is taken as 0, its size M joining the error below.
        const bool tiny = !encoded_q && !factor && M < 1e-12L * T::eps;
        const LD raw = encoded_q || factor ? qe.dot(factor ? kf[std::size_t(j * p.Hk + h / G)] : kv)
                       : tiny      ? 0
                                   : el.score(qv, LD(ti), kv, LD(sj));
        const LD y = scale * raw;
        const LD reach = std::abs(tau) + 2 * w;
        const LD lag = encoded_q ? 0 : sz.rate() * reach + (positions_exact ? 0 : sz.xnorm * reach);
        const LD es = T::score(int(d), 1, 0, M, 0, T::eps, 0, y, lag) + (tiny ? M : 0);
        LD cy = y, move = es;
        if (opt.softcap > 0) {
          const LD c = opt.softcap;
          cy = std::isinf(y) ? std::copysign(c, y) : c * std::tanh(y / c);
          move = std::isinf(y) ? 0
                               : std::max(std::abs(c * std::tanh((y + es) / c) - cy),
                                          std::abs(c * std::tanh((y - es) / c) - cy));
        }
        const LD alibi = std::abs(m) * (std::abs(tau) + 2 * w);
        x.push_back(cy - m * tau);
        js.push_back(j);
        mx = std::max(mx, x.back());
        if (std::isfinite(cy)) {
          L = std::max(L, std::abs(cy) + alibi);
          delta = std::max(delta, T::attention_logit(move, y, cy, opt.softcap > 0, alibi));
        }
        for (Index e = 0; e < dv; ++e)
          vmax[std::size_t(e)] = std::max(vmax[std::size_t(e)],
                                          LD(std::abs(p.v[std::size_t((j * p.Hk + h / G) * dv + e)])));
      }
      std::ostringstream at;
      at << "row " << i << " head " << h << " (t " << ti << "): ";
      const double glse = got.lse[std::size_t(i * p.Hq + h)];
      if (js.empty()) {
        bool ok = sink ? glse == double(sigma) : glse == -HUGE_VAL;
        for (Index e = 0; e < dv; ++e) ok &= got.out[std::size_t((i * p.Hq + h) * dv + e)] == 0;
        if (!ok) fail(at.str() + "no visible key: not 0 / -inf / sigma");
        continue;
      }
      delta += T::attention_exponent(L);
      if (sink) mx = std::max(mx, sigma);
      std::vector<LD> acc(std::size_t(dv), 0);
      LD l = 0;
      const bool inf = std::isinf(mx) && mx > 0;
      for (std::size_t r = 0; r < js.size(); ++r) {
        const LD pr = inf ? (std::isinf(x[r]) && x[r] > 0 ? 1 : 0) : std::exp(x[r] - mx);
        l += pr;
        for (Index e = 0; e < dv; ++e)
          acc[std::size_t(e)] += pr * p.v[std::size_t((js[r] * p.Hk + h / G) * dv + e)];
      }
      if (sink && !inf) l += std::exp(sigma - mx);
      for (Index e = 0; e < dv; ++e) {
        const LD want = acc[std::size_t(e)] / l;
        const LD g = got.out[std::size_t((i * p.Hq + h) * dv + e)];
        const LD tol = T::attention_out(delta, n_tile, n_tiles, vmax[std::size_t(e)]) +
                       T::eps * std::abs(want);
        if (!(std::abs(g - want) <= tol)) {
          std::ostringstream os;
          os << at.str() << "out[" << e << "] " << double(g) << " want " << double(want) << " tol "
             << double(tol);
          fail(os.str());
        }
      }
      const LD want_lse = inf ? mx : mx + std::log(l);
      if (inf) {
        if (!(glse == HUGE_VAL)) fail(at.str() + "lse not +inf");
      } else if (!(std::abs(glse - want_lse) <=
                   T::attention_lse(delta, n_tile, n_tiles, want_lse, L))) {
        std::ostringstream os;
        os << at.str() << "lse " << glse << " want " << double(want_lse);
        fail(os.str());
      }
    }
  }
  return bad;
}

peal::RopeConfig rope_config(int head_dim, peal::Layout layout, double partial = 1.0) {
  peal::RopeConfig c;
  c.head_dim = head_dim;
  c.layout = layout;
  c.partial_rotary_factor = partial;
  return c;
}

template <class X>
bool same_bits(const std::vector<X>& a, const std::vector<X>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(X)) == 0;
}
LD max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  LD m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, LD(std::abs(a[i] - b[i])));
  return m;
}

/// The tile driver's key splits for this problem (TileRun::plan().splits), or its number of key
/// tiles (tiles = true).
template <class E>
Index key_splits(const E& enc, const Problem& p, const AttentionOptions& opt, int threads,
                 bool tiles = false) {
  namespace sk = peal::detail::tiled;
namespace co = peal::detail::coders;
  std::vector<float> out(std::size_t(p.nq * p.Hq * p.dv));
  using Sink = sk::AttentionSink<float, const float, float>;
  sk::SoftmaxOptions sm;
  Sink sink(p.V(), TensorView<float>(out.data(), p.nq, p.Hq, p.dv), nullptr, sm);
  peal::ScoreOptions so;
  so.threads = threads, so.query_tile = opt.query_tile, so.key_tile = opt.key_tile;
  const Positions tq(p.tq), tk(p.tk);
  sk::TileRun<float, E, const float, const float, Sink> r(enc, p.Q(), tq, p.K(), tk, sink, so);
  return tiles ? r.plan().key.size() : r.plan().splits;
}

}  // namespace

TEST_CASE("attention: every option against the long double reference", "[attention]") {
  const auto enc = peal::rope<double>(rope_config(32, peal::Layout::HalfSplit));
  const auto el = peal::rope<long double>(rope_config(32, peal::Layout::HalfSplit));
  const Sizes sz;  // a pure rotation: ||A|| = 1
  for (int pos = 0; pos < 2; ++pos) {
    const Index n = 97;
    const std::vector<double> t = pos ? irregular(n, 1.7e9, 5) : range(n, 0);
    const Problem p = make_problem(n, n, 4, 2, 32, 24, t, t, 11);
    const std::vector<double> sinks = {0.5, -1, 2, 3};
    for (int variant = 0; variant < 9; ++variant) {
      AttentionOptions o;
      switch (variant) {
        case 1: o.causal = true; break;
        case 2: o.window = pos ? 3e3 : 9; o.causal = true; break;
        case 3: o.alibi_slopes = peal::alibi_slopes(4); break;
        case 4: o.softcap = 1.5; break;
        case 5: o.sinks = sinks; break;
        case 6: o.scale = -0.4; break;
        case 7: o.window = pos ? 500 : 5; break;  // no causal mask: future keys stay visible
        case 8:
          o.causal = true, o.window = pos ? 1e4 : 37, o.softcap = 5;
          o.alibi_slopes = peal::alibi_slopes(4), o.sinks = sinks;
          o.query_tile = 7, o.key_tile = 16;
          break;
        default: break;
      }
      CAPTURE(pos, variant);
      const Run r = run(enc, p, o);
      std::string first;
      const int bad = check_rows(el, sz, p, o, r, {}, first, pos == 0);
      INFO(first);
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("attention: causal prefill along the staircase, n around the strip and tile sizes",
          "[attention]") {
  // Tile pairs cut by a mask are computed in strips of query rows, each over the key columns
  // its rows may see (detail/tiled/tile_plan.hpp, plan_strips). Against the reference at n on
  // either side of the strips (32 rows), the query tiles (256) and the key tiles (512), at
  // irregular times: sorted, shuffled (causal by position, not by index), with a window,
  // ALiBi and softcap, GQA (a strip per head of the group), xPos (rebased per tile pair: the
  // product of one head) and tiles that do not line up with the strips.
  const auto enc = peal::rope<double>(rope_config(32, peal::Layout::HalfSplit));
  const auto el = peal::rope<long double>(rope_config(32, peal::Layout::HalfSplit));
  const auto xe = peal::xpos<double>(32);
  const auto xl = peal_test::rotation_bank_as<long double>(xe);
  for (Index n : {1, 63, 64, 65, 511, 512, 513}) {
    for (int variant = 0; variant < 5; ++variant) {
      std::vector<double> t = irregular(n, 1.7e9, unsigned(n + variant));
      std::vector<double> s = t;
      if (variant == 1) {  // queries and keys in another order, each
        std::mt19937 rng{unsigned(n)};
        std::shuffle(t.begin(), t.end(), rng);
        std::shuffle(s.begin(), s.end(), rng);
      }
      const Problem p = make_problem(n, n, 4, 2, 32, 24, t, s, unsigned(7 * n + variant));
      AttentionOptions o;
      o.causal = true;
      if (variant == 2) {
        o.window = 3e3;  // ~20 keys at a mean gap of ~145
        o.alibi_slopes = peal::alibi_slopes(4), o.softcap = 3;
      }
      if (variant == 4) o.query_tile = 100, o.key_tile = 48;
      CAPTURE(n, variant);
      std::string first;
      int bad = 0;
      if (variant == 3) {
        const Run r = run(xe, p, o);
        const Index tiles = key_splits(xe, p, o, 1, true);
        bad = check_rows(xl, sizes_of(xl), p, o, r, {}, first, false, nullptr, false, tiles);
      } else {
        bad = check_rows(el, Sizes{}, p, o, run(enc, p, o), {}, first, false);
      }
      INFO(first);
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("attention: a test that can fail (a wrong option is caught)", "[attention]") {
  const auto enc = peal::rope<double>(rope_config(16, peal::Layout::Interleaved));
  const auto el = peal::rope<long double>(rope_config(16, peal::Layout::Interleaved));
  const Problem p = make_problem(20, 20, 2, 1, 16, 16, range(20, 0), range(20, 0), 3);
  AttentionOptions o, wrong;
  o.causal = true, o.softcap = 2, o.alibi_slopes = {0.5, 0.25};
  std::string first;
  for (int k = 0; k < 3; ++k) {
    wrong = o;
    if (k == 0) wrong.causal = false;
    if (k == 1) wrong.softcap = 2.1;
    if (k == 2) wrong.alibi_slopes = {0.5, 0.2501};
    CHECK(check_rows(el, Sizes{}, p, o, run(enc, p, wrong), {}, first) > 0);
  }
  CHECK(check_rows(el, Sizes{}, p, o, run(enc, p, o), {}, first) == 0);
}

TEST_CASE("attention: decode rows equal the same rows of prefill", "[attention]") {
  const auto enc = peal::rope<double>(rope_config(64, peal::Layout::HalfSplit));
  const auto el = peal::rope<long double>(rope_config(64, peal::Layout::HalfSplit));
  const Index nk = 700, Hq = 8, Hk = 2, d = 64;
  const std::vector<double> tk = irregular(nk, 0, 9);
  const Problem full = make_problem(nk, nk, Hq, Hk, d, d, tk, tk, 21);
  AttentionOptions o;
  o.causal = true, o.sinks = std::vector<double>(Hq, 0.5), o.softcap = 30;
  const Run pre = run(enc, full, o);
  for (Index r = 1; r <= 8; ++r) {  // the last r queries, one decode step of r tokens
    Problem dec = full;
    dec.nq = r;
    dec.tq.assign(tk.end() - r, tk.end());
    dec.q.assign(full.q.end() - r * Hq * d, full.q.end());
    const Run got = run(enc, dec, o);
    std::string first;
    CAPTURE(r, key_splits(enc, dec, o, 1));
    INFO(first);
    CHECK(check_rows(el, Sizes{}, dec, o, got, {}, first, false) == 0);
    // Against prefill: both within the bound of the reference, so within twice of each other.
    LD worst = 0;
    for (Index i = 0; i < r * Hq * d; ++i) {
      const LD a = got.out[std::size_t(i)], b = pre.out[std::size_t((nk - r) * Hq * d + i)];
      worst = std::max(worst, std::abs(a - b));
    }
    CHECK(worst <= 2 * T::attention_out(1e-4L, 512, 2, 1));
    CHECK(worst > 0);  // not the same computation (splits, tiles): the comparison is real
  }
}

// A half-precision KV cache (Eigen::half or Eigen::bfloat16), keys encoded, decoded with q in
// float: the small products read its rows where they lie and convert them in registers (a few
// query rows: detail/small_products.hpp, tile_run.hpp's raw_keys_, attention_sink.hpp's
// direct_values) or go through float copies (nq G > 8: Eigen's GEMM). Every conversion is
// exact, so the result is bitwise that of the same call on the cache's float copy, token-major
// and head-major, whatever path a tile takes: a tile the window cuts, with a NaN value row
// behind the mask, goes through the float copy of that tile.
template <class T>
void check_half_cache(bool head_major, Index nq, Index Hq, Index Hk, bool keys_encoded,
                      AttentionOptions o, bool nan_value) {
  const Index nk = 300, d = 64, dv = 48;
  const auto enc = peal::rope<double>(rope_config(d, peal::Layout::HalfSplit));
  std::mt19937 rng(unsigned(nq * 100 + Hq * 10 + Hk + head_major));
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> q(std::size_t(nq * Hq * d)), kf(std::size_t(nk * Hk * d)),
      vf(std::size_t(nk * Hk * dv));
  for (float& x : q) x = u(rng);
  std::vector<T> kh(kf.size()), vh(vf.size());
  for (std::size_t i = 0; i < kf.size(); ++i) kf[i] = float(kh[i] = T(u(rng)));
  for (std::size_t i = 0; i < vf.size(); ++i) vf[i] = float(vh[i] = T(2 * u(rng)));
  // A NaN value at key 258: masked by the window (o.window = 40 from the query at 299) in a
  // tile the window cuts (keys [256, 288) with o.key_tile = 32), visible without it.
  const std::size_t bad = std::size_t((258 * Hk + Hk - 1) * dv + 3);
  if (nan_value) vf[bad] = float(vh[bad] = T(NAN));
  const std::vector<double> tk = range(nk, 0);
  std::vector<double> tq;
  for (Index i = 0; i < nq; ++i) tq.push_back(tk.back() + double(i));
  auto view = [&](auto* p, Index width) {
    using V = std::remove_pointer_t<decltype(p)>;
    return head_major ? TensorView<V>(p, nk, Hk, width, peal::Strides{width, nk * width, 1})
                      : TensorView<V>(p, nk, Hk, width);
  };
  o.keys_encoded = keys_encoded;
  std::vector<double> lse_h(std::size_t(nq * Hq)), lse_f(lse_h.size());
  std::vector<float> out_h(std::size_t(nq * Hq * dv)), out_f(out_h.size());
  const TensorView<const float> qv(q.data(), nq, Hq, d);
  o.lse = lse_h.data();
  peal::attention(enc, qv, Positions(tq), view(static_cast<const T*>(kh.data()), d), Positions(tk),
                  view(static_cast<const T*>(vh.data()), dv), TensorView<float>(out_h.data(), nq, Hq, dv), o);
  o.lse = lse_f.data();
  peal::attention(enc, qv, Positions(tq), view(static_cast<const float*>(kf.data()), d),
                  Positions(tk), view(static_cast<const float*>(vf.data()), dv),
                  TensorView<float>(out_f.data(), nq, Hq, dv), o);
  CAPTURE(head_major, nq, Hq, Hk, keys_encoded, nan_value, o.window, o.causal);
  CHECK(std::memcmp(out_h.data(), out_f.data(), out_h.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(lse_h.data(), lse_f.data(), lse_h.size() * sizeof(double)) == 0);
  std::size_t nans = 0;
  for (float x : out_h) nans += std::isnan(x);
  CHECK((nans > 0) == (nan_value && !(o.window < 1e3)));  // the NaN row's key visible or not
}

TEST_CASE("attention: half-precision KV caches in decode equal their float copies, bitwise",
          "[attention][half]") {
  AttentionOptions causal, windowed;
  causal.causal = true;
  windowed.causal = true, windowed.window = 40, windowed.key_tile = 32;  // a tile cut by the window
  // Keys encoded (the cache of an engine): the keys' products read the half rows. (Raw keys
  // are rotated per tile, a half row after its conversion in place, a float row out of place:
  // the same rounding bound, not always the same bits; their V side is the same as here.)
  for (bool hm : {false, true})
    for (const auto& shape : {std::array<Index, 3>{1, 8, 2}, std::array<Index, 3>{1, 8, 1},
                              std::array<Index, 3>{2, 8, 2}, std::array<Index, 3>{1, 4, 4},
                              std::array<Index, 3>{3, 8, 2}}) {
      check_half_cache<Eigen::half>(hm, shape[0], shape[1], shape[2], true, causal, false);
      check_half_cache<Eigen::bfloat16>(hm, shape[0], shape[1], shape[2], true, causal, false);
    }
  for (bool hm : {false, true}) {
    check_half_cache<Eigen::half>(hm, 1, 8, 2, true, windowed, false);
    check_half_cache<Eigen::half>(hm, 1, 8, 2, true, causal, true);
    check_half_cache<Eigen::half>(hm, 1, 8, 2, true, windowed, true);
    check_half_cache<Eigen::bfloat16>(hm, 2, 8, 2, true, windowed, true);
  }
}

TEST_CASE("attention: key splits (decode) against one range of key tiles", "[attention]") {
  const auto enc = peal::rope<double>(rope_config(64, peal::Layout::Interleaved));
  const auto el = peal::rope<long double>(rope_config(64, peal::Layout::Interleaved));
  const Problem p = make_problem(1, 300, 4, 1, 64, 48, {299.5}, range(300, 0), 4);
  AttentionOptions split, one;
  split.key_tile = 32;
  one.key_tile = 512;
  for (bool causal : {false, true}) {
    split.causal = one.causal = causal;
    split.sinks = one.sinks = {0, 1, -1, 4};
    REQUIRE(key_splits(enc, p, split, 1) > 1);
    REQUIRE(key_splits(enc, p, split, 1) == key_splits(enc, p, split, 2));
    REQUIRE(key_splits(enc, p, one, 1) == 1);
    const Run a = run(enc, p, split), b = run(enc, p, one);
    std::string first;
    CHECK(check_rows(el, Sizes{}, p, split, a, {}, first) == 0);
    CHECK(check_rows(el, Sizes{}, p, one, b, {}, first) == 0);
    INFO(first);
    CHECK(max_diff(a.out, b.out) <= 2 * T::attention_out(1e-4L, 32, 10, 1));
  }
}

TEST_CASE("attention: keys_encoded equals raw keys for RoPE, also after shift_keys",
          "[attention]") {
  for (peal::Layout layout : {peal::Layout::Interleaved, peal::Layout::HalfSplit})
    for (double partial : {1.0, 0.5}) {
      const auto cfg = rope_config(32, layout, partial);
      const auto enc = peal::rope<double>(cfg);
      const auto el = peal::rope<long double>(cfg);
      const Index nk = 150;
      const std::vector<double> tk = irregular(nk, 1000, 2);
      Problem p = make_problem(5, nk, 4, 2, 32, 32, {}, tk, 6);
      p.tq.assign(tk.end() - 5, tk.end());
      AttentionOptions o;
      o.causal = true, o.key_tile = 32, o.alibi_slopes = peal::alibi_slopes(4);
      std::vector<float> kenc = p.k;
      peal::encode_keys(enc, TensorView<float>(kenc.data(), nk, 2, 32), Positions(p.tk));
      AttentionOptions oe = o;
      oe.keys_encoded = true;
      const Run raw = run(enc, p, o), encd = run(enc, p, oe, &kenc);
      CAPTURE(int(layout), partial);
      std::string first;
      CHECK(check_rows(el, Sizes{}, p, o, raw, {}, first) == 0);
      CHECK(check_rows(el, Sizes{}, p, oe, encd, {}, first, true, &kenc, true) == 0);
      INFO(first);
      CHECK(max_diff(raw.out, encd.out) <= 2 * T::attention_out(1e-4L, 32, 5, 1));
      // shift_keys by delta: the cache now stands for keys at s + delta.
      const double delta = 37.25;
      peal::shift_keys(enc, TensorView<float>(kenc.data(), nk, 2, 32), delta);
      Problem ps = p;
      for (double& s : ps.tk) s += delta;
      for (double& t : ps.tq) t += delta;
      const Run shifted = run(enc, ps, oe, &kenc), raw2 = run(enc, ps, o);
      CHECK(check_rows(el, Sizes{}, ps, oe, shifted, {}, first, false, &kenc, true) == 0);
      INFO(first);
      CHECK(max_diff(raw2.out, shifted.out) <= 2 * T::attention_out(1e-3L, 32, 5, 1));
    }
}

TEST_CASE("attention: decaying encodings over 65536 keys at ~1.7e9", "[attention]") {
  // RetNet (a < 0 per block) and xPos; keys_encoded throws for both (G(s) grows).
  const Index nk = 65536, d = 64;
  const std::vector<double> tk = irregular(nk, 1.7e9, 8);
  const std::vector<Index> rows = {0, 1, 2, 3};
  Problem p = make_problem(4, nk, 2, 1, d, d, {}, tk, 17);
  for (Index i = 0; i < 4; ++i) p.tq.push_back(tk[std::size_t(nk - 1 - 7 * i)]);  // late rows
  p.tq[3] = tk[100];  // an early row: few visible keys
  AttentionOptions o;
  o.causal = true;
  for (int which = 0; which < 2; ++which) {
    const auto enc = which ? peal::xpos<double>(int(d)) : peal::retnet<double>(int(d), 4)[0];
    const auto el = peal_test::rotation_bank_as<long double>(enc);
    const Run r = run(enc, p, o);
    bool finite = true;
    for (float x : r.out) finite &= std::isfinite(x);
    for (double x : r.lse) finite &= std::isfinite(x);
    CAPTURE(which);
    CHECK(finite);
    std::string first;
    const Index tiles = key_splits(enc, p, o, 1, true);
    CAPTURE(tiles);
    CHECK(check_rows(el, sizes_of(el), p, o, r, rows, first, false, nullptr, false, tiles) == 0);
    INFO(first);
    AttentionOptions oe = o;
    oe.keys_encoded = true;
    CHECK_THROWS_WITH(run(enc, p, oe), Contains("keys_encoded needs a pure rotation"));
  }
}

TEST_CASE("attention: rows with no visible key, with and without sinks", "[attention]") {
  const auto enc = peal::rope<double>(rope_config(16, peal::Layout::Interleaved));
  const auto el = peal::rope<long double>(rope_config(16, peal::Layout::Interleaved));
  // Keys at 0, 10, 20, ...; queries between them: with causal and window 3, queries at
  // 10 k + 5 see nothing, those at 10 k + 1 see one key.
  std::vector<double> tq;
  for (int k = 0; k < 8; ++k) tq.push_back(10.0 * k + (k % 2 ? 5 : 1));
  tq.push_back(-1);  // before every key
  const Problem p = make_problem(9, 8, 2, 2, 16, 8, tq, range(8, 0, 10), 12);
  for (bool sinks : {false, true}) {
    AttentionOptions o;
    o.causal = true, o.window = 3, o.key_tile = 2;
    if (sinks) o.sinks = {-0.5, 1.5};
    const Run r = run(enc, p, o);
    std::string first;
    CHECK(check_rows(el, Sizes{}, p, o, r, {}, first) == 0);
    INFO(first);
    for (Index h = 0; h < 2; ++h) {
      CHECK(r.lse[std::size_t(3 * 2 + h)] == (sinks ? o.sinks[std::size_t(h)] : -HUGE_VAL));
      CHECK(r.out[std::size_t((3 * 2 + h) * 8)] == 0.0f);
      CHECK(r.lse[std::size_t(8 * 2 + h)] == (sinks ? o.sinks[std::size_t(h)] : -HUGE_VAL));
      CHECK(std::isfinite(r.lse[std::size_t(0 * 2 + h)]));  // a row that sees its key
      CHECK(r.out[std::size_t((0 * 2 + h) * 8)] != 0.0f);
    }
  }
}

TEST_CASE("attention: +inf logits share the weight equally", "[attention]") {
  // A growing RealBlock at a huge distance: e^{tau} overflows, the score is +inf for q k > 0.
  const peal::RealBlock<double> enc(1.0);
  const peal::RealBlock<long double> el(1.0L);
  Problem p = make_problem(2, 4, 1, 1, 1, 3, {2000, 2000}, {0, 1, 1999, 1999.5}, 1);
  p.q = {1.0f, -1.0f};          // row 1: q k < 0 at the far keys: -inf, the near ones decide
  p.k = {0.5f, 0.25f, 1.0f, -1.0f};
  const Run r = run(enc, p, AttentionOptions{});
  // Row 0: keys 0 and 1 are +inf: out = (v0 + v1) / 2, lse = +inf.
  for (Index e = 0; e < 3; ++e)
    CHECK(r.out[std::size_t(e)] == Approx((p.v[std::size_t(e)] + p.v[std::size_t(3 + e)]) / 2)
                                         .epsilon(double(4 * T::eps)));
  CHECK(r.lse[0] == HUGE_VAL);
  CHECK(std::isfinite(r.lse[1]));
  std::string first;
  CHECK(check_rows(el, Sizes{{1.0L}, 1.0L}, p, AttentionOptions{}, r, {1}, first) == 0);
  INFO(first);
  // With a softcap the logits stay finite: the cap c for both, weights equal again.
  AttentionOptions o;
  o.softcap = 4;
  const Run c = run(enc, p, o);
  CHECK(std::isfinite(c.lse[0]));
  for (Index e = 0; e < 3; ++e) CHECK(std::isfinite(c.out[std::size_t(e)]));
}

TEST_CASE("attention: empty extents (d = 0, nk = 0, nq = 0, dv = 0)", "[attention]") {
  {  // d = 0: every score 0, the softmax is uniform: the mean of v
    const peal::PassThrough<double> enc(0);
    Problem p = make_problem(2, 3, 1, 1, 0, 2, {5, 6}, {1, 2, 3}, 2);
    const Run r = run(enc, p, AttentionOptions{});
    for (Index e = 0; e < 2; ++e) {
      const float mean = (p.v[std::size_t(e)] + p.v[std::size_t(2 + e)] + p.v[std::size_t(4 + e)]) / 3;
      CHECK(r.out[std::size_t(e)] == Approx(mean).epsilon(1e-6));
    }
    CHECK(r.lse[0] == Approx(std::log(3.0)));
  }
  const auto enc = peal::rope<double>(rope_config(8, peal::Layout::Interleaved));
  {  // nk = 0: out = 0, lse = -inf or the sink
    Problem p = make_problem(2, 0, 2, 1, 8, 4, {1, 2}, {}, 2);
    AttentionOptions o;
    Run r = run(enc, p, o);
    for (float x : r.out) CHECK(x == 0.0f);
    for (double x : r.lse) CHECK(x == -HUGE_VAL);
    o.sinks = {0.25, -3};
    r = run(enc, p, o);
    for (float x : r.out) CHECK(x == 0.0f);
    CHECK(r.lse[0] == 0.25);
    CHECK(r.lse[1] == -3);
  }
  {  // nq = 0: nothing written, no throw
    Problem p = make_problem(0, 5, 2, 1, 8, 4, {}, range(5, 0), 2);
    CHECK_NOTHROW(run(enc, p, AttentionOptions{}));
  }
  {  // dv = 0: lse only
    Problem p = make_problem(2, 5, 2, 1, 8, 0, {3, 4}, range(5, 0), 2);
    const Run r = run(enc, p, AttentionOptions{});
    CHECK(std::isfinite(r.lse[0]));
  }
}

TEST_CASE("attention: results do not depend on the thread count", "[attention]") {
  // Prefill with 4 key heads: with one thread the query tiles form one block (4 units, fewer
  // than the split threshold of 8), with two threads two blocks (8 units). The key splits must
  // not follow: they change the order of the sums.
  const auto enc = peal::rope<double>(rope_config(64, peal::Layout::HalfSplit));
  const Index n = 600;
  const Problem p = make_problem(n, n, 8, 4, 64, 64, range(n, 0), range(n, 0), 31);
  AttentionOptions o;
  o.causal = true, o.alibi_slopes = peal::alibi_slopes(8), o.sinks = std::vector<double>(8, 1);
  o.threads = 1;
  const Run a = run(enc, p, o);
  o.threads = 2;
  const Run b = run(enc, p, o);
  CHECK(key_splits(enc, p, o, 1) == key_splits(enc, p, o, 2));
  CHECK(same_bits(a.out, b.out));
  CHECK(same_bits(a.lse, b.lse));
  // Decode: key splits, merged in a fixed order.
  const Problem dp = make_problem(1, 20000, 8, 1, 64, 64, {20000}, range(20000, 0), 32);
  o.key_tile = 32;
  o.threads = 1;
  const Run c = run(enc, dp, o);
  o.threads = 2;
  const Run e = run(enc, dp, o);
  CHECK(key_splits(enc, dp, o, 1) > 1);
  CHECK(same_bits(c.out, e.out));
  CHECK(same_bits(c.lse, e.lse));
}

TEST_CASE("attention: bad input throws with a message", "[attention][errors]") {
  const auto enc = peal::rope<double>(rope_config(8, peal::Layout::Interleaved));
  const Index nq = 3, nk = 4, Hq = 4, Hk = 2, d = 8, dv = 5;
  std::vector<float> q(nq * Hq * d, 0.5f), k(nk * Hk * d, 0.5f), v(nk * Hk * dv, 0.5f),
      out(nq * Hq * dv), big(4096);
  std::vector<double> tq = {1, 2, 3}, tk = {0, 1, 2, 3}, lse(nq * Hq);
  const TensorView<const float> Q(q.data(), nq, Hq, d), K(k.data(), nk, Hk, d),
      V(v.data(), nk, Hk, dv);
  const TensorView<float> O(out.data(), nq, Hq, dv);
  auto call = [&](const AttentionOptions& o) {
    peal::attention(enc, Q, Positions(tq), K, Positions(tk), V, O, o);
  };
  CHECK_NOTHROW(call({}));
  const std::vector<float> q7(nq * Hq * 7);
  CHECK_THROWS_WITH(peal::attention(enc, TensorView<const float>(q7.data(), nq, Hq, 7),
                                    Positions(tq), K, Positions(tk), V, O),
                    Contains("must have dim 8"));
  CHECK_THROWS_AS(peal::attention(enc, TensorView<const float>(q7.data(), nq, Hq, 7),
                                  Positions(tq), K, Positions(tk), V, O),
                  peal::invalid_argument);
  CHECK_THROWS_WITH(peal::attention(enc, TensorView<const float>(q.data(), nq, 3, d),
                                    Positions(tq), K, Positions(tk), V,
                                    TensorView<float>(out.data(), nq, 3, dv)),
                    Contains("must be a multiple of the number of key heads (2)"));
  CHECK_THROWS_WITH(peal::attention(enc, Q, Positions(tq), K, Positions(tk),
                                    TensorView<const float>(v.data(), 3, Hk, dv), O),
                    Contains("must have the keys' tokens and heads"));
  CHECK_THROWS_WITH(peal::attention(enc, Q, Positions(tq), K, Positions(tk),
                                    TensorView<const float>(v.data(), nk, 1, dv), O),
                    Contains("must have the keys' tokens and heads"));
  CHECK_THROWS_WITH(peal::attention(enc, Q, Positions(tq), K, Positions(tk), V,
                                    TensorView<float>(out.data(), nq, Hq, dv - 1)),
                    Contains("expected [nq, Hq, dv]"));
  {  // overlaps: out on q, k, v; lse on out
    std::vector<float> all(8192, 0.5f);
    const TensorView<const float> Qa(all.data(), nq, Hq, d), Ka(all.data() + 1000, nk, Hk, d),
        Va(all.data() + 2000, nk, Hk, dv);
    auto over = [&](float* o, const AttentionOptions& opt) {
      peal::attention(enc, Qa, Positions(tq), Ka, Positions(tk), Va,
                      TensorView<float>(o, nq, Hq, dv), opt);
    };
    CHECK_NOTHROW(over(all.data() + 4000, {}));
    CHECK_THROWS_WITH(over(all.data() + 10, {}), Contains("out overlaps q"));
    CHECK_THROWS_WITH(over(all.data() + 1010, {}), Contains("out overlaps k"));
    CHECK_THROWS_WITH(over(all.data() + 2010, {}), Contains("out overlaps v"));
    AttentionOptions o;
    o.lse = reinterpret_cast<double*>(all.data() + 4000);
    CHECK_THROWS_WITH(over(all.data() + 4000, o), Contains("lse overlaps"));
    o.lse = reinterpret_cast<double*>(all.data() + 2);
    CHECK_THROWS_WITH(over(all.data() + 4000, o), Contains("lse overlaps"));
  }
  {  // positions
    std::vector<double> t2 = {1, 2}, tn = {1, std::nan(""), 3}, ti = {1, HUGE_VAL, 3};
    CHECK_THROWS_WITH(peal::attention(enc, Q, Positions(t2), K, Positions(tk), V, O),
                      Contains("attention (query positions)"));
    CHECK_THROWS_WITH(peal::attention(enc, Q, Positions(tq), K, Positions(t2), V, O),
                      Contains("attention (key positions)"));
    CHECK_THROWS_AS(peal::attention(enc, Q, Positions(tn), K, Positions(tk), V, O),
                    peal::invalid_argument);
    CHECK_THROWS_AS(peal::attention(enc, Q, Positions(ti), K, Positions(tk), V, O),
                    peal::invalid_argument);
    std::vector<double> far = {1.5e308, 1, 2}, neg = {-1.5e308, 0, 1, 2};
    CHECK_THROWS_WITH(peal::attention(enc, Q, Positions(far), K, Positions(neg), V, O),
                      Contains("differences of positions overflow"));
  }
  auto with = [&](auto set) {
    AttentionOptions o;
    set(o);
    return o;
  };
  CHECK_THROWS_WITH(call(with([](AttentionOptions& o) { o.scale = HUGE_VAL; })),
                    Contains("scale must be finite"));
  CHECK_THROWS_WITH(call(with([](AttentionOptions& o) { o.scale = std::nan(""); })),
                    Contains("scale must be finite"));
  CHECK_THROWS_WITH(call(with([](AttentionOptions& o) { o.window = 0; })),
                    Contains("window must be > 0"));
  CHECK_THROWS_WITH(call(with([](AttentionOptions& o) { o.window = -1; })),
                    Contains("window must be > 0"));
  CHECK_THROWS_WITH(call(with([](AttentionOptions& o) { o.window = std::nan(""); })),
                    Contains("window must be > 0"));
  CHECK_NOTHROW(call(with([](AttentionOptions& o) { o.window = 1e-300; })));
  CHECK_THROWS_WITH(call(with([](AttentionOptions& o) { o.softcap = -1; })),
                    Contains("softcap must be finite and >= 0"));
  CHECK_THROWS_WITH(call(with([](AttentionOptions& o) { o.softcap = std::nan(""); })),
                    Contains("softcap must be finite and >= 0"));
  CHECK_THROWS_WITH(call(with([](AttentionOptions& o) { o.softcap = HUGE_VAL; })),
                    Contains("softcap must be finite and >= 0"));
  CHECK_THROWS_WITH(call(with([](AttentionOptions& o) { o.alibi_slopes = {1, 2, 3}; })),
                    Contains("3 ALiBi slopes for 4 query heads"));
  CHECK_THROWS_WITH(call(with([](AttentionOptions& o) { o.alibi_slopes = {1, 2, HUGE_VAL, 3}; })),
                    Contains("ALiBi slopes"));
  CHECK_THROWS_WITH(call(with([](AttentionOptions& o) { o.sinks = {1, 2, 3, 4, 5}; })),
                    Contains("5 sink logits for 4 query heads"));
  CHECK_THROWS_WITH(call(with([](AttentionOptions& o) { o.sinks = {1, std::nan(""), 3, 4}; })),
                    Contains("sink logits"));
  CHECK_THROWS_WITH(call(with([](AttentionOptions& o) { o.threads = -1; })),
                    Contains("threads must be >= 0"));
  CHECK_THROWS_WITH(call(with([](AttentionOptions& o) { o.query_tile = -1; })),
                    Contains("tile sizes must be >= 0"));
  CHECK_THROWS_WITH(call(with([](AttentionOptions& o) { o.key_tile = -2; })),
                    Contains("tile sizes must be >= 0"));
  // keys_encoded: pure rotations only.
  CHECK_NOTHROW(call(with([](AttentionOptions& o) { o.keys_encoded = true; })));
  CHECK_NOTHROW(peal::attention(peal::PassThrough<double>(8), Q, Positions(tq), K, Positions(tk),
                                V, O, with([](AttentionOptions& o) { o.keys_encoded = true; })));
  const auto decay = peal::compose(peal::Bank<peal::RotationBlock<double>>(
                                       {peal::RotationBlock<double>(0.5, -0.01)}, peal::Layout::Interleaved),
                                   peal::PassThrough<double>(6));
  CHECK_THROWS_WITH(peal::attention(decay, Q, Positions(tq), K, Positions(tk), V, O,
                                    with([](AttentionOptions& o) { o.keys_encoded = true; })),
                    Contains("keys_encoded needs a pure rotation"));
  const auto jordan = peal::compose(peal::JordanBlock<2, double>(0.0), peal::PassThrough<double>(6));
  CHECK_THROWS_WITH(peal::attention(jordan, Q, Positions(tq), K, Positions(tk), V, O,
                                    with([](AttentionOptions& o) { o.keys_encoded = true; })),
                    Contains("keys_encoded needs a pure rotation"));
  CHECK_NOTHROW(peal::attention(decay, Q, Positions(tq), K, Positions(tk), V, O));
  (void)big;
}

// NaN inputs (docs/kernels-attention.md, "NaN and infinities"): a NaN reaching any score or
// value a row can see makes the whole row NaN (out and lse) at every tile, thread and key-split
// layout; masked keys are not seen; rows the NaN does not reach are bitwise those of a run
// without it, and within the reference's bound.
namespace {

bool sees(const Problem& p, const AttentionOptions& o, Index i, Index j) {
  const double ti = p.tq[std::size_t(i)], sj = p.tk[std::size_t(j)];
  return !(o.causal && sj > ti) && !(ti - sj >= o.window);
}
// Rows (query tokens) that see one of `keys`.
std::vector<int> seeing(const Problem& p, const AttentionOptions& o, const std::vector<Index>& keys) {
  std::vector<int> hit(std::size_t(p.nq), 0);
  for (Index i = 0; i < p.nq; ++i)
    for (Index j : keys) hit[std::size_t(i)] |= sees(p, o, i, j);
  return hit;
}

// What a row of query token i, head h, must be.
// kOverflow: a NaN row, or a finite nonzero out (the +inf limit, or capped scores); kAny: not
// checked.
enum Want : int { kExact = 0, kNaN = 1, kOverflow = 2, kAny = 3 };

struct Layout {
  Index qt, kt;
  int threads;
};

// `bad` and `clean` (the same problem without the NaN) under every layout; want[i] for the
// rows of query token i (its heads h with heads[h] set, all if empty; the others exact).
template <class E, class EL>
void check_nan_case(const E& enc, const EL& el, const Problem& clean, const Problem& bad,
                    const AttentionOptions& base, const std::vector<int>& want,
                    const std::vector<Layout>& layouts, std::vector<int> heads = {}) {
  if (heads.empty()) heads.assign(std::size_t(bad.Hq), 1);
  for (const Layout& L : layouts) {
    AttentionOptions o = base;
    o.query_tile = L.qt, o.key_tile = L.kt, o.threads = L.threads;
    CAPTURE(L.qt, L.kt, L.threads, key_splits(enc, bad, o, L.threads));
    const Run a = run(enc, bad, o), c = run(enc, clean, o);
    std::vector<Index> exact_rows;
    int wrong = 0, differ = 0, reached = 0;
    std::string first;
    for (Index i = 0; i < bad.nq; ++i) {
      const int w = want[std::size_t(i)];
      if (w == kExact) exact_rows.push_back(i);
      for (Index h = 0; h < bad.Hq; ++h) {
        const std::size_t r = std::size_t(i * bad.Hq + h);
        const float* out = a.out.data() + r * std::size_t(bad.dv);
        const float* cout = c.out.data() + r * std::size_t(bad.dv);
        if (w == kExact || !heads[std::size_t(h)]) {
          if (std::memcmp(out, cout, sizeof(float) * std::size_t(bad.dv)) != 0 ||
              std::memcmp(&a.lse[r], &c.lse[r], sizeof(double)) != 0) {
            if (!differ++) first = "row " + std::to_string(i) + " head " + std::to_string(h) +
                                   " differs from the run without NaN";
          }
          continue;
        }
        ++reached;
        if (w == kAny) continue;
        bool nan = std::isnan(a.lse[r]);
        for (Index e = 0; e < bad.dv; ++e) nan &= std::isnan(out[e]);
        // Overflowed scores that are no NaN: ±inf (the +inf limit), or capped by a softcap.
        bool limit = w == kOverflow && a.lse[r] > -HUGE_VAL, zero = true;
        for (Index e = 0; e < bad.dv; ++e) limit &= std::isfinite(out[e]), zero &= out[e] == 0;
        limit &= !zero;  // not "no visible key" (0, and lse -inf or the sink)
        if (!nan && !limit && !wrong++) {
          std::ostringstream os;
          os << "row " << i << " head " << h << ": lse " << a.lse[r] << " out[0] " << out[0]
             << ", want a NaN row";
          first = os.str();
        }
      }
    }
    INFO(first);
    CHECK(wrong == 0);
    CHECK(differ == 0);
    const bool none = std::all_of(want.begin(), want.end(), [](int x) { return x == kExact; });
    CHECK((none || reached > 0));  // the case reaches the rows it should
    std::string ref;
    const int off = exact_rows.empty() ? 0 : check_rows(el, Sizes{}, bad, o, a, exact_rows, ref);
    INFO(ref);
    CHECK(off == 0);
  }
}

const std::vector<Layout> kPrefillLayouts = {{0, 0, 1}, {0, 0, 2}, {7, 16, 1},
                                             {7, 16, 2}, {64, 100, 2}, {5, 512, 1}};

}  // namespace

TEST_CASE("attention: NaN in q, k or v gives NaN rows (prefill layouts)", "[attention][nan]") {
  const auto enc = peal::rope<double>(rope_config(8, peal::Layout::Interleaved));
  const auto el = peal::rope<long double>(rope_config(8, peal::Layout::Interleaved));
  // 2000 keys, d = 8 (the report's case); 37 queries spread over them, the last before every key.
  std::vector<double> tq;
  for (Index i = 0; i < 36; ++i) tq.push_back(55.0 * double(i) + double(i % 3));
  tq.push_back(-1);
  const Problem clean = make_problem(37, 2000, 2, 1, 8, 8, tq, range(2000, 0), 41);
  const Index d = 8, dv = 8;
  for (int variant = 0; variant < 2; ++variant) {
    AttentionOptions base;
    base.causal = true;
    if (variant == 1) base.alibi_slopes = {0.01, 0.002}, base.softcap = 5, base.sinks = {0.5, -1};
    CAPTURE(variant);
    {
      INFO("NaN in one element of q row 5");
      AttentionOptions o = base;
      Problem p = clean;
      for (Index h = 0; h < 2; ++h) p.q[std::size_t((5 * 2 + h) * d + 3)] = NAN;
      for (Index h = 0; h < 2; ++h) p.q[std::size_t((36 * 2 + h) * d + 1)] = NAN;  // sees no key
      std::vector<int> want(37, kExact);
      want[5] = kNaN;
      check_nan_case(enc, el, clean, p, o, want, kPrefillLayouts);
      o.causal = false;  // now row 36 sees every key
      want[36] = kNaN;
      check_nan_case(enc, el, clean, p, o, want, kPrefillLayouts);
    }
    {
      INFO("NaN in key 0: rows that see it (window 1000) are NaN, the others exact");
      AttentionOptions o = base;
      Problem p = clean;
      p.k[0] = NAN;
      o.window = 1000;
      check_nan_case(enc, el, clean, p, o, seeing(p, o, {0}), kPrefillLayouts);
      o.window = HUGE_VAL, o.causal = false;  // every row sees key 0
      check_nan_case(enc, el, clean, p, o, seeing(p, o, {0}), kPrefillLayouts);
    }
    {
      INFO("NaN in a key of a later tile; earlier rows (a masked future key) exact");
      AttentionOptions o = base;
      Problem p = clean;
      p.k[std::size_t(1500 * d + 7)] = NAN;
      check_nan_case(enc, el, clean, p, o, seeing(p, o, {1500}), kPrefillLayouts);
    }
    {
      INFO("NaN in one value: every element of the rows that see it, and lse");
      AttentionOptions o = base;
      Problem p = clean;
      p.v[std::size_t(700 * dv + 2)] = NAN;
      check_nan_case(enc, el, clean, p, o, seeing(p, o, {700}), kPrefillLayouts);
      p.v[std::size_t(701 * dv + 4)] = -HUGE_VALF;
      check_nan_case(enc, el, clean, p, o, seeing(p, o, {700}), kPrefillLayouts);
      // An infinite value: masked, it changes nothing (0 * inf is no NaN here either).
      p.v[std::size_t(700 * dv + 2)] = HUGE_VALF;
      std::vector<int> want = seeing(p, o, {700});
      for (int& w : want) w = w ? kAny : kExact;
      check_nan_case(enc, el, clean, p, o, want, kPrefillLayouts);
    }
    {
      INFO("q entries of 3e38: scores overflow (inf - inf), never 'no visible key'");
      AttentionOptions o = base;
      Problem p = clean;
      for (Index e = 0; e < 2 * d; ++e) p.q[std::size_t(10 * 2 * d + e)] = 3e38f;
      std::vector<int> want(37, kExact);
      want[10] = kOverflow;
      check_nan_case(enc, el, clean, p, o, want, kPrefillLayouts);
    }
  }
}

TEST_CASE("attention: NaN in decoding (key splits and their merge)", "[attention][nan]") {
  const auto enc = peal::rope<double>(rope_config(8, peal::Layout::HalfSplit));
  const auto el = peal::rope<long double>(rope_config(8, peal::Layout::HalfSplit));
  const Index nk = 4000, Hq = 8, Hk = 2, d = 8, dv = 16;
  const Problem clean = make_problem(3, nk, Hq, Hk, d, dv, {3997, 3998, 3999}, range(nk, 0), 43);
  const std::vector<Layout> layouts = {{0, 32, 1}, {0, 32, 2}, {0, 0, 1}, {0, 100, 2}};
  {
    AttentionOptions o;
    o.key_tile = 32;
    REQUIRE(key_splits(enc, clean, o, 1) > 1);
    REQUIRE(key_splits(enc, clean, o, 2) > 1);
  }
  for (int variant = 0; variant < 2; ++variant) {
    AttentionOptions base;
    base.causal = true;
    if (variant == 1) base.sinks = std::vector<double>(8, 1.0), base.softcap = 3;
    CAPTURE(variant);
    auto key_nan = [&](Index j, Index kh) {
      Problem p = clean;
      p.k[std::size_t((j * Hk + kh) * d + 1)] = NAN;
      return p;
    };
    // One key head's NaN reaches its group's query heads only.
    const std::vector<int> group0 = {1, 1, 1, 1, 0, 0, 0, 0};
    {
      INFO("a NaN key seen by every row, in an early split");
      AttentionOptions o = base;
      check_nan_case(enc, el, clean, key_nan(3, 0), o, {1, 1, 1}, layouts, group0);
    }
    {
      INFO("a NaN key behind the window: every row exact");
      AttentionOptions o = base;
      o.window = 3000;
      check_nan_case(enc, el, clean, key_nan(3, 1), o, {0, 0, 0}, layouts);
    }
    {
      INFO("a NaN key in the last tile, future for rows 0 and 1");
      AttentionOptions o = base;
      check_nan_case(enc, el, clean, key_nan(3999, 0), o, {0, 0, 1}, layouts, group0);
    }
    {
      INFO("the only visible key is NaN (window 0.5): its split alone carries the NaN");
      AttentionOptions o = base;
      o.window = 0.5;
      check_nan_case(enc, el, clean, key_nan(3998, 0), o, {0, 1, 0}, layouts, group0);
    }
    {
      INFO("a NaN value, future for row 0");
      AttentionOptions o = base;
      Problem p = clean;
      p.v[std::size_t((3998 * Hk + 0) * dv + 5)] = NAN;
      check_nan_case(enc, el, clean, p, o, {0, 1, 1}, layouts, group0);
    }
    {
      INFO("NaN in q of row 1");
      AttentionOptions o = base;
      Problem p = clean;
      p.q[std::size_t((1 * Hq + 6) * d)] = NAN;
      check_nan_case(enc, el, clean, p, o, {0, 1, 0}, layouts, {0, 0, 0, 0, 0, 0, 1, 0});
    }
  }
}

TEST_CASE("scores: NaN inputs give NaN in the pairs they reach", "[attention][nan][scores]") {
  const auto enc = peal::rope<double>(rope_config(8, peal::Layout::Interleaved));
  const Index nq = 40, nk = 300, d = 8;
  const Problem clean = make_problem(nq, nk, 2, 1, d, d, range(nq, 260), range(nk, 0), 47);
  Problem p = clean;
  p.q[std::size_t((7 * 2 + 1) * d + 2)] = NAN;  // query 7, head 1
  p.k[std::size_t(120 * d + 5)] = NAN;          // key 120, both heads
  p.k[std::size_t(295 * d)] = NAN;              // key 295: future for queries 0..34
  // With steep decays (γ^τ underflows past τ ≈ 11 and 16) whole tiles are written without
  // their GEMM: their NaN pairs must stay NaN (they were 0).
  for (int run = 0; run < 4; ++run) {
    const Index kt = run % 2 ? 16 : 0;
    const bool steep = run >= 2;
    peal::ScoreOptions o;
    o.causal = true, o.key_tile = kt, o.query_tile = kt / 2;
    if (steep) o.decay = {1e-30, 1e-20};
    std::vector<float> a(std::size_t(2 * nq * nk)), c(a.size());
    peal::scores(enc, p.Q(), Positions(p.tq), p.K(), Positions(p.tk), TensorView<float>(a.data(), 2, nq, nk), o);
    peal::scores(enc, clean.Q(), Positions(clean.tq), clean.K(), Positions(clean.tk),
                 TensorView<float>(c.data(), 2, nq, nk), o);
    int wrong = 0, nans = 0;
    for (Index h = 0; h < 2; ++h)
      for (Index i = 0; i < nq; ++i)
        for (Index j = 0; j < nk; ++j) {
          const std::size_t x = std::size_t((h * nq + i) * nk + j);
          const bool visible = p.tk[std::size_t(j)] <= p.tq[std::size_t(i)];
          const bool reached = visible && ((i == 7 && h == 1) || j == 120 || j == 295);
          nans += reached;
          wrong += reached ? !std::isnan(a[x]) : std::memcmp(&a[x], &c[x], sizeof(float)) != 0;
        }
    CAPTURE(kt, steep);
    CHECK(nans > 0);
    CHECK(wrong == 0);
  }
}

TEST_CASE("attention: NaN through N-D attention and PerHead", "[attention][nan][scores_nd][per_head]") {
  auto nan_row = [](const std::vector<float>& out, const std::vector<double>& lse, Index r, Index dv) {
    bool all = std::isnan(lse[std::size_t(r)]);
    for (Index e = 0; e < dv; ++e) all &= std::isnan(out[std::size_t(r * dv + e)]);
    return all;
  };
  auto same_row = [](const std::vector<float>& a, const std::vector<float>& b, const std::vector<double>& la,
                     const std::vector<double>& lb, Index r, Index dv) {
    return std::memcmp(&a[std::size_t(r * dv)], &b[std::size_t(r * dv)], sizeof(float) * std::size_t(dv)) == 0 &&
           std::memcmp(&la[std::size_t(r)], &lb[std::size_t(r)], sizeof(double)) == 0 &&
           std::isfinite(la[std::size_t(r)]);
  };
  {  // N-D: 2-D axial RoPE over a 4 x 3 grid, masks by token order.
    const auto enc = peal::rope_axial_2d<float>(32);
    const std::vector<double> grid = peal::vit_grid_positions(4, 3);
    const peal::PositionsND P(grid, 2);
    const Problem clean = make_problem(12, 12, 2, 2, 32, 32, {}, {}, 51);
    Problem p = clean;
    p.k[std::size_t((5 * 2 + 1) * 32 + 9)] = NAN;  // token 5, key head 1
    for (bool causal : {false, true})
      for (Index kt : {Index(0), Index(4)}) {
        AttentionOptions o;
        o.causal = causal, o.key_tile = kt, o.query_tile = kt / 2;
        std::vector<float> a(12 * 2 * 32), c(a.size());
        std::vector<double> la(24), lc(24);
        o.lse = la.data();
        peal::attention(enc, p.Q(), P, p.K(), P, p.V(), TensorView<float>(a.data(), 12, 2, 32), o);
        o.lse = lc.data();
        peal::attention(enc, clean.Q(), P, clean.K(), P, clean.V(), TensorView<float>(c.data(), 12, 2, 32), o);
        int wrong = 0;
        for (Index i = 0; i < 12; ++i)
          for (Index h = 0; h < 2; ++h) {
            const bool reached = h == 1 && (!causal || i >= 5);
            wrong += reached ? !nan_row(a, la, i * 2 + h, 32) : !same_row(a, c, la, lc, i * 2 + h, 32);
          }
        CAPTURE(causal, kt);
        CHECK(wrong == 0);
      }
  }
  {  // PerHead: RetNet's per-head decays, NaN in one value of key head 0 (query heads 0, 1).
    const auto heads = peal::retnet<float>(32, 4);
    const peal::PerHead<std::decay_t<decltype(heads[0])>> enc(heads);
    const std::vector<double> t = {0, 1, 2.5, 3, 7, 7.25, 100, 101};
    const Problem clean = make_problem(8, 8, 4, 2, 32, 32, t, t, 53);
    Problem p = clean;
    p.v[std::size_t((3 * 2 + 0) * 32 + 30)] = NAN;
    p.q[std::size_t((1 * 4 + 3) * 32)] = NAN;  // query 1, head 3
    AttentionOptions o;
    o.causal = true;
    std::vector<float> a(8 * 4 * 32), c(a.size());
    std::vector<double> la(32), lc(32);
    o.lse = la.data();
    peal::attention(enc, p.Q(), Positions(t), p.K(), Positions(t), p.V(), TensorView<float>(a.data(), 8, 4, 32), o);
    o.lse = lc.data();
    peal::attention(enc, clean.Q(), Positions(t), clean.K(), Positions(t), clean.V(),
                    TensorView<float>(c.data(), 8, 4, 32), o);
    int wrong = 0;
    for (Index i = 0; i < 8; ++i)
      for (Index h = 0; h < 4; ++h) {
        const bool reached = (h < 2 && i >= 3) || (i == 1 && h == 3);
        wrong += reached ? !nan_row(a, la, i * 4 + h, 32) : !same_row(a, c, la, lc, i * 4 + h, 32);
      }
    CHECK(wrong == 0);
  }
}

// ---- merge_attention (include/peal/merge_attention.hpp) ------------------------------------

namespace {

/// Keys [j0, j1) of p (their positions, keys and values) as a problem of their own.
Problem key_slice(const Problem& p, Index j0, Index j1) {
  Problem s{p.nq, j1 - j0, p.Hq, p.Hk, p.d, p.dv, p.tq, {}, p.q, {}, {}};
  s.tk.assign(p.tk.begin() + j0, p.tk.begin() + j1);
  s.k.assign(p.k.begin() + j0 * p.Hk * p.d, p.k.begin() + j1 * p.Hk * p.d);
  s.v.assign(p.v.begin() + j0 * p.Hk * p.dv, p.v.begin() + j1 * p.Hk * p.dv);
  return s;
}

/// The partial results of the slices [cuts[s], cuts[s + 1]) of p (attention without sinks),
/// merged (with opt's sinks) by merge_attention.
template <class E>
Run merged(const E& enc, const Problem& p, const std::vector<Index>& cuts, AttentionOptions opt,
           std::vector<Run>* partials = nullptr) {
  const std::vector<double> sinks = opt.sinks;
  opt.sinks.clear();
  std::vector<Run> parts;
  for (std::size_t s = 0; s + 1 < cuts.size(); ++s)
    parts.push_back(run(enc, key_slice(p, cuts[s], cuts[s + 1]), opt));
  std::vector<peal::AttentionPartial<float>> views;
  for (const Run& r : parts)
    views.push_back({TensorView<const float>(r.out.data(), p.nq, p.Hq, p.dv), r.lse.data()});
  Run m;
  m.out.assign(std::size_t(p.nq * p.Hq * p.dv), std::nanf(""));
  m.lse.assign(std::size_t(p.nq * p.Hq), std::nan(""));
  peal::merge_attention(views, TensorView<float>(m.out.data(), p.nq, p.Hq, p.dv), m.lse.data(),
                        sinks);
  if (partials) *partials = parts;
  return m;
}

}  // namespace

TEST_CASE("merge_attention: slices of the cache merge into attention over all of it",
          "[attention][merge]") {
  // The long double reference over the whole cache (check_rows) and its bound. Why it holds
  // with each slice counted as its key tiles plus one: part p returns out_p = O_p / l_p and
  // lse_p = m_p + ln l_p from the same l_p, so in w_p out_p = e^(lse_p − M) O_p / l_p the
  // rounding of l_p cancels to first order and O_p's errors are those of its tiles; l_p's
  // relative error stays in L = Σ w_p, as the l of one call does; what is new per part is the
  // rounding of out_p to float and the double exp/log of its weight: one more "tile" each.
  const auto enc = peal::rope<double>(rope_config(32, peal::Layout::HalfSplit));
  const auto el = peal::rope<long double>(rope_config(32, peal::Layout::HalfSplit));
  const Index nk = 60;
  const std::vector<Index> cuts = {0, 17, 40, 60};
  for (Index nq : {Index(1), Index(6)}) {
    const auto tk = irregular(nk, 1e3, 5);
    std::vector<double> tq;
    for (Index i = 0; i < nq; ++i) tq.push_back(tk[std::size_t(nk - 1 - 9 * i)] + 0.25);
    const Problem p = make_problem(nq, nk, 4, 2, 32, 16, tq, tk, 21);
    for (int variant = 0; variant < 5; ++variant) {
      AttentionOptions o;
      o.key_tile = 8;
      if (variant >= 1) o.causal = true;
      if (variant == 2) o.window = tk[40] - tk[25];  // some rows see no key of a slice
      if (variant == 3) o.alibi_slopes = {0.5, 0.25, 0.125, 0.0625}, o.softcap = 5;
      if (variant == 4) o.sinks = {0.5, -1, 2, 0};
      INFO("nq " << nq << ", variant " << variant);
      const Run m = merged(enc, p, cuts, o);
      Index tiles = 0;
      for (std::size_t s = 0; s + 1 < cuts.size(); ++s)
        tiles += (cuts[s + 1] - cuts[s] + 7) / 8 + 1;
      std::string first;
      CHECK(check_rows(el, Sizes{}, p, o, m, {}, first, true, nullptr, false, tiles) == 0);
      INFO(first);
      // One slice: the merge is the identity.
      const Run one = merged(enc, p, {0, nk}, o);
      const Run whole = run(enc, p, o);
      if (o.sinks.empty()) {  // weight e^0 = 1, L = 1: the part's own bits
        CHECK(same_bits(one.out, whole.out));
        CHECK(same_bits(one.lse, whole.lse));
      }
    }
  }
}

TEST_CASE("merge_attention: the formula against long double, in place, NaN and empty rows",
          "[attention][merge]") {
  const auto enc = peal::rope<double>(rope_config(16, peal::Layout::Interleaved));
  const Problem p = make_problem(5, 30, 2, 1, 16, 8, range(5, 25.5), range(30, 0), 3);
  AttentionOptions o;
  o.causal = true;
  std::vector<Run> parts;
  const std::vector<double> sinks = {0.25, -3};
  o.sinks = sinks;
  const Run m = merged(enc, p, {0, 10, 20, 30}, o, &parts);
  // The rule in long double on the same partials: out within one float rounding of it plus
  // double sums of 3 terms (each |w_p out_p| <= 1), lse within a few double ulps.
  for (Index row = 0; row < p.nq * p.Hq; ++row) {
    const Index h = row % p.Hq;
    LD mx = sinks[std::size_t(h)];
    for (const Run& r : parts) mx = std::max(mx, LD(r.lse[std::size_t(row)]));
    LD L = std::exp(LD(sinks[std::size_t(h)]) - mx);
    std::vector<LD> acc(std::size_t(p.dv), 0);
    for (const Run& r : parts) {
      if (!(r.lse[std::size_t(row)] > -HUGE_VAL)) continue;
      const LD wgt = std::exp(LD(r.lse[std::size_t(row)]) - mx);
      L += wgt;
      for (Index e = 0; e < p.dv; ++e) acc[std::size_t(e)] += wgt * r.out[std::size_t(row * p.dv + e)];
    }
    const LD dbl = std::numeric_limits<double>::epsilon();
    CHECK(std::abs(m.lse[std::size_t(row)] - (mx + std::log(L))) <= 8 * dbl * (1 + std::abs(mx)));
    for (Index e = 0; e < p.dv; ++e) {
      const LD want = acc[std::size_t(e)] / L;
      CHECK(std::abs(m.out[std::size_t(row * p.dv + e)] - want) <=
            T::eps * std::abs(want) + 16 * dbl);
    }
  }
  // A part in which a row sees no key (lse −inf, zeros) adds nothing: query 0 (t = 0.5) sees
  // only key 0, of the first slice.
  const auto el = peal::rope<long double>(rope_config(16, peal::Layout::Interleaved));
  const Problem early = make_problem(2, 30, 2, 1, 16, 8, {0.5, 12.5}, range(30, 0), 4);
  std::vector<Run> ep;
  AttentionOptions causal;
  causal.causal = true;
  const Run em = merged(enc, early, {0, 10, 20, 30}, causal, &ep);
  CHECK(ep[2].lse[0] == -HUGE_VAL);
  CHECK(ep[1].lse[0] == -HUGE_VAL);
  CHECK(std::isfinite(em.lse[0]));
  std::string first;
  CHECK(check_rows(el, Sizes{}, early, causal, em, {}, first, true, nullptr, false, 6) == 0);
  INFO(first);
  // No part sees a key: zeros and −inf, or the sink's logit with a sink.
  {
    const Problem none = make_problem(1, 10, 2, 1, 16, 8, {-1}, range(10, 0), 5);
    const Run z = merged(enc, none, {0, 5, 10}, causal);
    CHECK(z.lse[0] == -HUGE_VAL);
    CHECK(z.out[0] == 0.0f);
    AttentionOptions cs = causal;
    cs.sinks = {1.5, -2};
    const Run zs = merged(enc, none, {0, 5, 10}, cs);
    CHECK(zs.lse[0] == 1.5);
    CHECK(zs.lse[1] == -2);
    CHECK(zs.out[0] == 0.0f);
  }
  // In place: out and lse the first part's own arrays, the same bits as out of place.
  {
    std::vector<peal::AttentionPartial<float>> views;
    for (const Run& r : parts)
      views.push_back({TensorView<const float>(r.out.data(), p.nq, p.Hq, p.dv), r.lse.data()});
    Run in = parts[0];
    views[0] = {TensorView<const float>(in.out.data(), p.nq, p.Hq, p.dv), in.lse.data()};
    peal::merge_attention(views, TensorView<float>(in.out.data(), p.nq, p.Hq, p.dv), in.lse.data(),
                          sinks);
    CHECK(same_bits(in.out, m.out));
    CHECK(same_bits(in.lse, m.lse));
    // The two-part form equals the list form.
    Run two, twol;
    two.out.resize(m.out.size()), two.lse.resize(m.lse.size());
    twol = two;
    const auto a = TensorView<const float>(parts[0].out.data(), p.nq, p.Hq, p.dv);
    const auto b = TensorView<const float>(parts[1].out.data(), p.nq, p.Hq, p.dv);
    peal::merge_attention(a, parts[0].lse.data(), b, parts[1].lse.data(),
                          TensorView<float>(two.out.data(), p.nq, p.Hq, p.dv), two.lse.data());
    peal::merge_attention(std::vector<peal::AttentionPartial<float>>{{a, parts[0].lse.data()},
                                                                     {b, parts[1].lse.data()}},
                          TensorView<float>(twol.out.data(), p.nq, p.Hq, p.dv), twol.lse.data());
    CHECK(same_bits(two.out, twol.out));
    CHECK(same_bits(two.lse, twol.lse));
  }
  // A NaN in one part's lse or out row makes that merged row NaN, and only that row.
  for (int where = 0; where < 2; ++where) {
    std::vector<Run> bad = parts;
    if (where == 0)
      bad[1].lse[3] = std::nan("");
    else
      bad[1].out[std::size_t(3 * p.dv + 2)] = std::nanf("");
    std::vector<peal::AttentionPartial<float>> views;
    for (const Run& r : bad)
      views.push_back({TensorView<const float>(r.out.data(), p.nq, p.Hq, p.dv), r.lse.data()});
    Run n = m;
    peal::merge_attention(views, TensorView<float>(n.out.data(), p.nq, p.Hq, p.dv), n.lse.data(),
                          sinks);
    for (Index row = 0; row < p.nq * p.Hq; ++row) {
      const bool hit = row == 3;
      CHECK(std::isnan(n.lse[std::size_t(row)]) == hit);
      for (Index e = 0; e < p.dv; ++e)
        CHECK(std::isnan(n.out[std::size_t(row * p.dv + e)]) == hit);
    }
  }
}

TEST_CASE("merge_attention: half-precision parts, and bad input throws", "[attention][merge][errors]") {
  // Parts stored in Eigen::half merge into float: within the parts' own rounding.
  std::vector<Eigen::half> ha = {Eigen::half(1.0f), Eigen::half(-0.5f)}, hb = {Eigen::half(0.25f), Eigen::half(2.0f)};
  std::vector<double> la = {0.0}, lb = {std::log(3.0)};
  std::vector<float> o(2);
  std::vector<double> l(1);
  peal::merge_attention(TensorView<const Eigen::half>(ha.data(), 1, 1, 2), la.data(),
                        TensorView<const Eigen::half>(hb.data(), 1, 1, 2), lb.data(),
                        TensorView<float>(o.data(), 1, 1, 2), l.data());
  CHECK(o[0] == Approx((1.0 + 3 * 0.25) / 4).epsilon(1e-6));
  CHECK(o[1] == Approx((-0.5 + 3 * 2.0) / 4).epsilon(1e-6));
  CHECK(l[0] == Approx(std::log(4.0)).epsilon(1e-15));

  const Index nq = 2, Hq = 2, dv = 3;
  std::vector<float> a(nq * Hq * dv, 0.5f), b(a), out(a.size()), big(64);
  std::vector<double> lse_a(nq * Hq, 0.0), lse_b(lse_a), lse(lse_a.size());
  const TensorView<const float> A(a.data(), nq, Hq, dv), B(b.data(), nq, Hq, dv);
  const TensorView<float> O(out.data(), nq, Hq, dv);
  using Parts = std::vector<peal::AttentionPartial<float>>;
  CHECK_NOTHROW(peal::merge_attention(Parts{{A, lse_a.data()}, {B, lse_b.data()}}, O, lse.data()));
  CHECK_NOTHROW(peal::merge_attention(Parts{}, O, lse.data()));  // no part: no key seen
  CHECK(lse[0] == -HUGE_VAL);
  CHECK(out[0] == 0.0f);
  const TensorView<const float> B4(b.data(), nq, Hq, 2);
  CHECK_THROWS_WITH(peal::merge_attention(Parts{{A, lse_a.data()}, {B4, lse_b.data()}}, O),
                    Contains("part 1's out is [2, 2, 2], out is [2, 2, 3]"));
  CHECK_THROWS_AS(peal::merge_attention(Parts{{A, lse_a.data()}, {B4, lse_b.data()}}, O),
                  peal::invalid_argument);
  CHECK_THROWS_WITH(peal::merge_attention(Parts{{A, lse_a.data()}, {B, nullptr}}, O),
                    Contains("part 1 has no lse"));
  // out overlapping a part's out without being it (shifted by one element).
  std::copy(a.begin(), a.end(), big.begin());
  const TensorView<const float> shifted(big.data() + 1, nq, Hq, dv);
  CHECK_THROWS_WITH(peal::merge_attention(Parts{{shifted, lse_a.data()}, {B, lse_b.data()}},
                                          TensorView<float>(big.data(), nq, Hq, dv)),
                    Contains("part 0's out overlaps out"));
  CHECK_THROWS_WITH(peal::merge_attention(Parts{{A, lse_a.data()}, {B, lse_b.data()}}, O,
                                          lse_a.data() + 1),
                    Contains("part 0's lse overlaps lse"));
  CHECK_THROWS_WITH(
      peal::merge_attention(Parts{{A, lse_a.data()}, {B, lse_b.data()}}, O, nullptr, {1.0}),
      Contains("1 sink logits for 2 heads"));
  CHECK_THROWS_WITH(peal::merge_attention(Parts{{A, lse_a.data()}, {B, lse_b.data()}}, O, nullptr,
                                          {1.0, std::nan("")}),
                    Contains("sink logits"));
  const TensorView<float> O2(out.data(), nq, Hq, dv);
  CHECK_THROWS_WITH(peal::merge_attention(Parts{{A, reinterpret_cast<const double*>(out.data())},
                                                {B, lse_b.data()}},
                                          O2),
                    Contains("lse and out arrays overlap"));
}
