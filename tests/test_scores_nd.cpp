// scores() and attention() over N-D points (include/peal/scores_nd.hpp) and with per-head
// encodings (include/peal/per_head.hpp), against per-pair long double references: the
// long double encoding's own score q^T A(p_i - p'_j) k_j, and softmax of those logits times
// V. Masks by token order (query i at key index nk - nq + i). Tolerances (tolerances.hpp):
// a logit is an encoded d-term dot product, fused_score(d) plus the encoding of q and k in
// the arithmetic type (kernel_entry(2) each, rotations: 2 non-zeros per row), relative to
// scale |q| |k| (|F q| = |q| for rotations; for RetNet's decay the row scale is <= 1 after
// rebasing); attention outputs by attention_out of that logit error.
#include <catch2/catch.hpp>
#include <cmath>
#include <peal/presets/mrope.hpp>
#include <peal/peal.hpp>
#include <peal/presets/vision_rope.hpp>
#include <random>
#include <vector>

#include "kernel_catalogue.hpp"
#include "tolerances.hpp"

namespace {

using peal_test::Tol;
using LD = long double;
using peal::Index;

struct Batch {
  Index nq, nk, Hq, Hk, d;
  std::vector<float> q, k, v;
  Batch(Index nq_, Index nk_, Index hq, Index hk, Index d_, unsigned seed)
      : nq(nq_), nk(nk_), Hq(hq), Hk(hk), d(d_) {
    std::mt19937_64 g(seed);
    std::uniform_real_distribution<float> u(-1, 1);
    q.resize(std::size_t(nq * Hq * d));
    k.resize(std::size_t(nk * Hk * d));
    v.resize(std::size_t(nk * Hk * d));
    for (auto* x : {&q, &k, &v})
      for (auto& e : *x) e = u(g);
  }
  peal::Vector<LD> row(const std::vector<float>& x, Index i, Index H, Index h) const {
    peal::Vector<LD> r(d);
    for (Index j = 0; j < d; ++j) r(j) = x[std::size_t((i * H + h) * d + j)];
    return r;
  }
};

// Checks scores and attention of `enc` (float storage) against ref_score(h, i, j) in long double.
template <class E, class Pos, class RefScore>
void check_kernels(const E& enc, const Batch& b, const Pos& pq, const Pos& pk, bool causal,
                   RefScore ref_score) {
  const LD scale = 1 / std::sqrt(LD(b.d));
  const Index G = b.Hq / b.Hk, off = b.nk - b.nq;
  const peal::TensorView<const float> q(b.q.data(), b.nq, b.Hq, b.d), k(b.k.data(), b.nk, b.Hk, b.d),
      v(b.v.data(), b.nk, b.Hk, b.d);
  std::vector<double> s(std::size_t(b.Hq * b.nq * b.nk));
  peal::ScoreOptions so;
  so.causal = causal;
  so.scale = double(scale);
  peal::scores(enc, q, pq, k, pk, peal::TensorView<double>(s.data(), b.Hq, b.nq, b.nk), so);
  std::vector<float> out(std::size_t(b.nq * b.Hq * b.d));
  std::vector<double> lse(std::size_t(b.nq * b.Hq));
  peal::AttentionOptions ao;
  ao.causal = causal;
  ao.lse = lse.data();
  peal::attention(enc, q, pq, k, pk, v, peal::TensorView<float>(out.data(), b.nq, b.Hq, b.d), ao);
  const LD logit_tol = Tol<float>::fused_score(b.d) + 2 * Tol<float>::kernel_entry(2);
  int visible_rows = 0;
  for (Index h = 0; h < b.Hq; ++h)
    for (Index i = 0; i < b.nq; ++i) {
      std::vector<LD> x;
      std::vector<Index> js;
      LD delta = 0;
      for (Index j = 0; j < b.nk; ++j) {
        const double got = s[std::size_t((h * b.nq + i) * b.nk + j)];
        if (causal && j > off + i) {
          CHECK(std::isinf(got));
          continue;
        }
        const LD want = scale * ref_score(h, i, j);
        const LD tol = logit_tol * scale * b.row(b.q, i, b.Hq, h).norm() *
                       b.row(b.k, j, b.Hk, h / G).norm();
        CAPTURE(h, i, j);
        CHECK(double(std::fabs((LD)got - want)) <= double(tol));
        x.push_back(want);
        js.push_back(j);
        delta = std::max(delta, tol);
      }
      if (js.empty()) continue;
      ++visible_rows;
      const LD mx = *std::max_element(x.begin(), x.end());
      LD l = 0;
      std::vector<LD> acc(std::size_t(b.d), 0);
      LD V = 0;
      for (std::size_t r = 0; r < js.size(); ++r) {
        const LD p = std::exp(x[r] - mx);
        l += p;
        const auto vr = b.row(b.v, js[r], b.Hk, h / G);
        for (Index e = 0; e < b.d; ++e) acc[std::size_t(e)] += p * vr(e), V = std::max(V, std::fabs(vr(e)));
      }
      for (Index e = 0; e < b.d; ++e) {
        const LD want = acc[std::size_t(e)] / l;
        const LD got = out[std::size_t((i * b.Hq + h) * b.d + e)];
        const LD tol = Tol<float>::attention_out(delta, LD(b.nk), 1, V) + Tol<float>::stored() * std::fabs(want);
        CHECK(double(std::fabs(got - want)) <= double(tol));
      }
      LD L = 0;
      for (LD xr : x) L = std::max(L, std::fabs(xr));
      const LD want_lse = mx + std::log(l);
      CHECK(double(std::fabs((LD)lse[std::size_t(i * b.Hq + h)] - want_lse)) <=
            double(Tol<float>::attention_lse(delta, LD(b.nk), 1, want_lse, L)));
    }
  CHECK(visible_rows > 0);
}

}  // namespace

TEST_CASE("scores_nd: M-RoPE scores and attention over (t, h, w) points", "[scores_nd]") {
  peal::RopeConfig c;
  c.head_dim = 64;
  c.rope_theta = 1e6;
  c.scaling.mrope_section = {8, 12, 12};
  const auto enc = peal::mrope<float>(c);
  const auto el = peal::mrope<long double>(c);
  // A prompt: 3 text tokens, a 2 x 3 image block, 2 text tokens (positions as get_rope_index).
  std::vector<double> p = {0, 0, 0, 1, 1, 1, 2, 2, 2};
  for (int r = 0; r < 2; ++r)
    for (int w = 0; w < 3; ++w) p.insert(p.end(), {3.0, 3.0 + r, 3.0 + w});
  p.insert(p.end(), {6, 6, 6, 7, 7, 7});
  const Index n = Index(p.size() / 3);
  for (bool causal : {false, true}) {
    const Batch b(n, n, 4, 2, 64, causal ? 3u : 4u);
    const peal::PositionsND P(p, 3);
    check_kernels(enc, b, P, P, causal, [&](Index h, Index i, Index j) {
      return el.score(b.row(b.q, i, 4, h), std::vector<double>(p.begin() + 3 * i, p.begin() + 3 * i + 3),
                      b.row(b.k, j, 2, h / 2), std::vector<double>(p.begin() + 3 * j, p.begin() + 3 * j + 3));
    });
  }
  // Decode: the last 2 tokens as queries against all keys, and at large positions.
  std::vector<double> big = p;
  for (auto& x : big) x += 0x1p36;
  const Batch b(2, n, 2, 2, 64, 9);
  const peal::PositionsND pk(big, 3), pq(big.data() + 3 * (n - 2), 2, 3);
  check_kernels(enc, b, pq, pk, true, [&](Index h, Index i, Index j) {
    const Index ii = n - 2 + i;
    return el.score(b.row(b.q, i, 2, h), std::vector<double>(big.begin() + 3 * ii, big.begin() + 3 * ii + 3),
                    b.row(b.k, j, 2, h), std::vector<double>(big.begin() + 3 * j, big.begin() + 3 * j + 3));
  });
}

TEST_CASE("scores_nd: keys_encoded (a KV cache encoded once) gives the same attention",
          "[scores_nd]") {
  const auto enc = peal::rope_axial_2d<float>(32);
  const auto p = peal::vit_grid_positions(4, 3);
  const Batch b(12, 12, 2, 2, 32, 5);
  std::vector<float> kc = b.k, o1(b.q.size()), o2(b.q.size());
  const peal::PositionsND P(p, 2);
  peal::encode_keys(enc, peal::TensorView<float>(kc.data(), 12, 2, 32), P);
  const peal::TensorView<const float> q(b.q.data(), 12, 2, 32), v(b.v.data(), 12, 2, 32);
  peal::attention(enc, q, P, peal::TensorView<const float>(b.k.data(), 12, 2, 32), P, v,
                  peal::TensorView<float>(o1.data(), 12, 2, 32));
  peal::AttentionOptions ao;
  ao.keys_encoded = true;
  peal::attention(enc, q, P, peal::TensorView<const float>(kc.data(), 12, 2, 32), P, v,
                  peal::TensorView<float>(o2.data(), 12, 2, 32), ao);
  for (std::size_t i = 0; i < o1.size(); ++i) CHECK(std::fabs(o1[i] - o2[i]) <= 1e-6f);
}

TEST_CASE("per_head: RetNet's per-head decays as one PerHead encoding", "[per_head]") {
  // retnet() returns one encoding per head; PerHead runs each through the fused 1-D kernels.
  const auto heads = peal::retnet<float>(32, 4);
  const auto heads_l = peal::retnet<long double>(32, 4);
  const peal::PerHead<std::decay_t<decltype(heads[0])>> enc(heads);
  std::vector<double> t = {0, 1, 2.5, 3, 7, 7.25, 100, 101};
  const Batch b(8, 8, 4, 2, 32, 17);
  check_kernels(enc, b, peal::Positions(t), peal::Positions(t), true, [&](Index h, Index i, Index j) {
    return heads_l[std::size_t(h)].score(b.row(b.q, i, 4, h), t[std::size_t(i)],
                                         b.row(b.k, j, 2, h / 2), t[std::size_t(j)]);
  });
  // encode_queries per head against each head's own encode_query.
  std::vector<float> x = b.q;
  peal::encode_queries(enc, peal::TensorView<float>(x.data(), 8, 4, 32), peal::Positions(t));
  for (Index i = 0; i < 8; ++i)
    for (Index h = 0; h < 4; ++h) {
      peal::Vector<float> r(32);
      for (Index e = 0; e < 32; ++e) r(e) = b.q[std::size_t((i * 4 + h) * 32 + e)];
      heads[std::size_t(h)].encode_query(r, t[std::size_t(i)]);
      for (Index e = 0; e < 32; ++e)
        CHECK(std::fabs(x[std::size_t((i * 4 + h) * 32 + e)] - r(e)) <=
              float(Tol<float>::kernel_entry(2) + Tol<float>::stored()) * 4 * std::max(1.0f, r.norm()));
    }
}

TEST_CASE("per_head: RoPE-Mixed (per-head 2-D frequencies) through scores and attention",
          "[per_head][scores_nd]") {
  const std::vector<double> alpha = {0.3, 2.1, 4.0, 5.9};
  const auto enc = peal::rope_mixed_2d<float>(32, alpha);
  const auto el = peal::rope_mixed_2d<long double>(32, alpha);
  const auto p = peal::vit_grid_positions(3, 3);
  const Batch b(9, 9, 4, 4, 32, 23);
  const peal::PositionsND P(p, 2);
  check_kernels(enc, b, P, P, false, [&](Index h, Index i, Index j) {
    return el.head(int(h)).score(b.row(b.q, i, 4, h), std::vector<double>{p[std::size_t(2 * i)], p[std::size_t(2 * i + 1)]},
                                 b.row(b.k, j, 4, h), std::vector<double>{p[std::size_t(2 * j)], p[std::size_t(2 * j + 1)]});
  });
}

TEST_CASE("scores_nd: growth and decay over points, rebased by one anchor", "[scores_nd]") {
  // Per-axis decaying rotations and real decays (a 2-D "RetNet" over (time, row)), at points
  // near 1.7e9 on the time axis: encoded at p - p0, the factors stay in range.
  using B = peal::Bank<peal::RotationBlock<float>>;
  using BL = peal::Bank<peal::RotationBlock<long double>>;
  std::vector<peal::RotationBlock<float>> t_axis, h_axis;
  std::vector<peal::RotationBlock<long double>> t_l, h_l;
  for (int j = 0; j < 16; ++j) {
    const long double w = std::pow(1e4L, -j / 16.0L);
    const double a = j % 2 ? -0.03 : -0.01, b = j % 3 ? -0.02 : 0.0;
    t_axis.emplace_back(w, float(a));
    h_axis.emplace_back(j % 4 == 0 ? 0.0L : w / 2, float(b));
    t_l.emplace_back(w, (long double)float(a));
    h_l.emplace_back(j % 4 == 0 ? 0.0L : w / 2, (long double)float(b));
  }
  const peal::MultiAxis<B> enc({B(t_axis), B(h_axis)});
  const peal::MultiAxis<BL> el({BL(t_l), BL(h_l)});
  const Index n = 24;
  std::vector<double> p;
  for (Index i = 0; i < n; ++i) p.insert(p.end(), {1.7e9 + 3.0 * double(i), double(i % 5) - 2});
  const Batch b(n, n, 2, 1, 32, 41);
  const peal::PositionsND P(p, 2);
  for (bool causal : {false, true})
    check_kernels(enc, b, P, P, causal, [&](Index h, Index i, Index j) {
      return el.score(b.row(b.q, i, 2, h), std::vector<double>{p[std::size_t(2 * i)], p[std::size_t(2 * i + 1)]},
                      b.row(b.k, j, 1, 0), std::vector<double>{p[std::size_t(2 * j)], p[std::size_t(2 * j + 1)]});
    });
}

TEST_CASE("scores_nd / per_head: bad input", "[scores_nd][per_head][errors]") {
  const auto heads = peal::retnet<float>(8, 2);
  const peal::PerHead<std::decay_t<decltype(heads[0])>> ph(heads);
  std::vector<float> x(3 * 3 * 8), o(3 * 3 * 8);
  std::vector<double> s(3 * 3 * 3);
  const peal::TensorView<const float> v3(x.data(), 3, 3, 8);
  const peal::Positions t = peal::Positions::sequence(0);
  REQUIRE_THROWS_WITH(peal::scores(ph, v3, t, v3, t, peal::TensorView<double>(s.data(), 3, 3, 3)),
                      Catch::Contains("q has 3 heads, the per-head encoding 2"));
  REQUIRE_THROWS_WITH(peal::encode_queries(ph, peal::TensorView<float>(o.data(), 3, 3, 8), t),
                      Catch::Contains("3 heads, the per-head encoding 2"));
  // N-D: points spread too far for the decay, keys_encoded with decay, Jordan chains, ALiBi.
  using B = peal::Bank<peal::RotationBlock<float>>;
  std::vector<peal::RotationBlock<float>> blk(4, peal::RotationBlock<float>(0.5L, -0.1f));
  const peal::MultiAxis<B> decay({B(blk), B(blk)});
  std::vector<double> p = {0, 0, 500, 0, 1000, 0};
  const peal::PositionsND P(p, 2);
  const peal::TensorView<const float> q(x.data(), 3, 1, 8);
  std::vector<double> s1(9);
  std::vector<float> o1(24);
  REQUIRE_THROWS_WITH(peal::scores(decay, q, P, q, P, peal::TensorView<double>(s1.data(), 1, 3, 3)),
                      Catch::Contains("spread too far"));
  p = {0, 0, 1, 0, 2, 0};
  peal::AttentionOptions enc_keys;
  enc_keys.keys_encoded = true;
  REQUIRE_THROWS_WITH(peal::attention(decay, q, P, q, P, q, peal::TensorView<float>(o1.data(), 3, 1, 8),
                                      enc_keys),
                      Catch::Contains("keys_encoded needs a pure rotation"));
  using J = peal::Bank<peal::JordanBlock<2, float>>;
  const std::vector<peal::JordanBlock<2, float>> jb(4, peal::JordanBlock<2, float>(0.0f));
  const peal::MultiAxis<J> jordan({J(jb), J(jb)});
  REQUIRE_THROWS_WITH(peal::scores(jordan, q, P, q, P, peal::TensorView<double>(s1.data(), 1, 3, 3)),
                      Catch::Contains("Jordan chain"));
  const auto axial = peal::rope_axial_2d<float>(8);
  peal::ScoreOptions so;
  so.alibi_slopes = {0.5};
  REQUIRE_THROWS_WITH(peal::scores(axial, q, P, q, P, peal::TensorView<double>(s1.data(), 1, 3, 3), so),
                      Catch::Contains("ALiBi"));
  const peal::PositionsND P3(std::vector<double>(9, 0.0), 3);
  REQUIRE_THROWS_WITH(peal::scores(axial, q, P3, q, P3, peal::TensorView<double>(s1.data(), 1, 3, 3)),
                      Catch::Contains("3 axes, the encoding has 2"));
}

// Outputs that share memory with an input are refused as plain scores / attention refuse them
// (detail/overlap.hpp), through every wrapper, before anything is written: a per-head call
// used to check only head h's slices (its output written over a later head's query), an N-D
// call only its own encoded copies (never the caller's q, k, v against lse).
TEST_CASE("scores_nd / per_head: outputs overlapping an input are refused, nothing written",
          "[scores_nd][per_head][errors][overlap]") {
  using Catch::Contains;
  using peal::TensorView;
  const auto heads = peal::retnet<float>(8, 2);
  const peal::PerHead<std::decay_t<decltype(heads[0])>> ph(heads);
  const peal::Positions t = peal::Positions::sequence(0);
  std::vector<float> kv(3 * 8, 0.5f);  // k and v: [3, 1, 8], apart from everything below
  const TensorView<const float> k(kv.data(), 3, 1, 8);
  // One buffer for q [1, 2, 8] and the output; out head 0 lies on q head 1 only.
  std::vector<float> buf(32);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = 0.01f * float(i);
  const std::vector<float> before = buf;
  const TensorView<const float> q(buf.data(), 1, 2, 8);
  SECTION("per-head scores: out [2, 1, 3] over q head 1") {
    CHECK_THROWS_WITH(peal::scores(ph, q, t, k, t, TensorView<float>(buf.data() + 8, 2, 1, 3)),
                      Contains("scores: out overlaps q"));
  }
  SECTION("per-head attention: out [1, 2, 8] over q head 1") {
    CHECK_THROWS_WITH(peal::attention(ph, q, t, k, t, k, TensorView<float>(buf.data() + 8, 1, 2, 8)),
                      Contains("attention: out overlaps q"));
  }
  SECTION("per-head encode_queries: destination head 0 is source head 1") {
    CHECK_THROWS_WITH(peal::encode_queries(ph, q, TensorView<float>(buf.data() + 8, 1, 2, 8), t),
                      Contains("source and destination overlap"));
  }
  SECTION("per-head attention: lse over q head 1, lse over out head 1") {
    std::vector<double> qd(16, 0.25), od(16);
    const TensorView<const double> q2(qd.data(), 1, 2, 8);
    peal::AttentionOptions o;
    o.lse = qd.data() + 8;
    CHECK_THROWS_WITH(peal::attention(ph, q2, t, k, t, k, TensorView<double>(od.data(), 1, 2, 8), o),
                      Contains("lse overlaps"));
    CHECK(qd == std::vector<double>(16, 0.25));
    CHECK(od == std::vector<double>(16, 0.0));
    o.lse = od.data() + 8;
    CHECK_THROWS_WITH(peal::attention(ph, q2, t, k, t, k, TensorView<double>(od.data(), 1, 2, 8), o),
                      Contains("lse overlaps"));
    CHECK(od == std::vector<double>(16, 0.0));
  }
  // N-D: the kernels run on encoded copies of q and k, so only the caller's views can show
  // the overlap.
  const auto axial = peal::rope_axial_2d<float>(8);
  const std::vector<double> pts = {0, 0, 1, 0, 0, 1};
  const peal::PositionsND P1(pts.data(), 1, 2), P3(pts, 2);
  SECTION("N-D scores and attention: out over q") {
    CHECK_THROWS_WITH(peal::scores(axial, q, P1, k, P3, TensorView<float>(buf.data() + 12, 2, 1, 3)),
                      Contains("scores: out overlaps q"));
    const peal::PositionsND P2(pts.data(), 2, 2);
    CHECK_THROWS_WITH(peal::scores(axial, k, P3, TensorView<const float>(buf.data(), 2, 1, 8), P2,
                                   TensorView<float>(buf.data() + 12, 1, 3, 2)),
                      Contains("scores: out overlaps k"));
    CHECK_THROWS_WITH(
        peal::attention(axial, q, P1, k, P3, k, TensorView<float>(buf.data() + 12, 1, 2, 8)),
        Contains("attention: out overlaps q"));
  }
  SECTION("N-D attention: lse over q, k or v") {
    std::vector<double> qd(16, 0.25), od(16);
    const TensorView<const double> q2(qd.data(), 1, 2, 8);
    peal::AttentionOptions o;
    for (double* at : {qd.data() + 3, qd.data() + 14}) {
      o.lse = at;
      CHECK_THROWS_WITH(
          peal::attention(axial, q2, P1, k, P3, k, TensorView<double>(od.data(), 1, 2, 8), o),
          Contains("lse overlaps"));
    }
    std::vector<double> kd(3 * 8, 0.5);
    o.lse = kd.data() + 5;
    const TensorView<const double> k2(kd.data(), 3, 1, 8);
    CHECK_THROWS_WITH(
        peal::attention(axial, q2, P1, k2, P3, k, TensorView<double>(od.data(), 1, 2, 8), o),
        Contains("lse overlaps"));
    CHECK_THROWS_WITH(
        peal::attention(axial, q2, P1, k, P3, k2, TensorView<double>(od.data(), 1, 2, 8), o),
        Contains("lse overlaps"));
    CHECK(qd == std::vector<double>(16, 0.25));
    CHECK(kd == std::vector<double>(24, 0.5));
    CHECK(od == std::vector<double>(16, 0.0));
  }
  SECTION("per-head N-D (RoPE-Mixed): out head 0 over q head 1") {
    const auto mixed = peal::rope_mixed_2d<float>(8, {0.3, 2.1});
    CHECK_THROWS_WITH(peal::scores(mixed, q, P1, k, P3, TensorView<float>(buf.data() + 8, 2, 1, 3)),
                      Contains("scores: out overlaps q"));
    CHECK_THROWS_WITH(
        peal::attention(mixed, q, P1, k, P3, k, TensorView<float>(buf.data() + 8, 1, 2, 8)),
        Contains("attention: out overlaps q"));
  }
  CHECK(buf == before);
}
