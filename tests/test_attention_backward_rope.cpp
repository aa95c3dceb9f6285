// Tests of include/peal/attention_backward.hpp: RoPE (sinks, softcap, encoded keys, a window),
// and float and half-precision storage with float arithmetic (the reference, the tolerance and the check:
// tests/attention_backward_check.hpp, derived at the top of tests/test_attention_backward.cpp;
// split from it so that neither TU passes 1.5 GB of compile).
#include <catch2/catch.hpp>

#include "attention_backward_check.hpp"

using namespace peal_test;
using namespace peal_test::attention_backward_check;

TEST_CASE("attention backward: RoPE near 1.7e9 with sinks and a softcap, encoded keys, a window",
          "[attention_backward]") {
  const Shape rope{5, 7, 4, 2, 6, 1.7e9, 1.7e9 + 4096, true, kNone, 2.5, true, true, false};
  check_attention_backward<RopePartial>(rope, Regime::Random, 0, 5);
  Shape enc = rope;
  enc.keys_encoded = true;
  check_attention_backward<RopePartial>(enc, Regime::Random, 0, 6);
  // A window of 16 over 64 positions, both directions visible otherwise: the masked pairs
  // would carry most of the weight.
  const Shape win{6, 8, 2, 2, 4, 0, 64, false, 16, 0, false, false, false};
  check_attention_backward<RopePartial>(win, Regime::Random, 0, 7);
}

TEST_CASE("attention backward: float storage, float arithmetic", "[attention_backward]") {
  // Float's rebasing budget cuts 3000 positions into tiles of half-spread ~16 (Jordan chains).
  const Shape wide{6, 9, 4, 2, 5, 0, 3000, true, 1500, 0, true, false, false};
  check_attention_backward<MixedFam, float>(wide, Regime::Large, 2, 13);
  const Shape rope{5, 7, 4, 2, 6, 1.7e9, 1.7e9 + 4096, true, kNone, 2.5, true, true, false};
  check_attention_backward<RopePartial, float>(rope, Regime::Random, 0, 14);
  check_attention_backward<RopePartial, float>(rope, Regime::Random, 0, 14, true);  // strided
}

// q, k, v, out and d_out in Eigen::half (rounded before the reference sees them; its D_i takes
// out as rounded), float arithmetic: the float tolerance. With dq, dk, dv in Eigen::half too,
// each is the float result rounded once (check_attention_backward). Every option; 2-3 threads.
TEST_CASE("attention backward: half-precision storage", "[attention_backward][half]") {
  const Shape rope{5, 7, 4, 2, 6, 1.7e9, 1.7e9 + 4096, true, kNone, 2.5, true, true, false};
  check_attention_backward<RopePartial, Eigen::half>(rope, Regime::Random, 0, 41);
  const Shape sorted{70, 80, 2, 1, 4, 0, 160, true, 40, 0, true, false, false, true};
  check_attention_backward<RopePartial, Eigen::half>(sorted, Regime::Random, 0, 42);
}

// The out and lse attention_backward takes are the forward's own: peal::attention on the
// reference's inputs (RoPE, ALiBi, sinks, softcap, causal) gives them within rel of the
// reference's (an lse moves by the logits' error, rel relative to their scale; out, a softmax
// average of values in [−1, 1], by as much). One family: the conventions do not depend on it.
TEST_CASE("attention backward: out and lse as the forward returns them", "[attention_backward]") {
  const Shape sh{5, 7, 4, 2, 6, 0, 4096, true, kNone, 2.5, true, true, false};
  auto c = Problem<RopePartial>::make(sh, Regime::Random, 15);
  const int d = c.d;
  std::vector<double> out2(c.out.size()), lse2(c.lse.size());
  peal::AttentionOptions fo = c.opt;
  fo.lse = lse2.data();
  peal::attention(c.enc, TensorView<const double>(c.q.data(), sh.nq, sh.Hq, d),
                  peal::Positions(c.tq), TensorView<const double>(c.k.data(), sh.nk, sh.Hk, d),
                  peal::Positions(c.tk), TensorView<const double>(c.v.data(), sh.nk, sh.Hk, sh.dv),
                  TensorView<double>(out2.data(), sh.nq, sh.Hq, sh.dv), fo);
  LD pmax = 0;
  for (double t : c.tq) pmax = std::max(pmax, std::abs(LD(t)));
  const LD xn = max_abs(MLD(c.twin.generator())) * d;
  const LD rel = Tol<double>::score_gradient(d, 1, 0, 0, sh.nk) + Tol<double>::phase(xn * 4 * pmax);
  for (std::size_t x = 0; x < lse2.size(); ++x) {
    INFO("lse[" << x << "]: forward " << lse2[x] << ", reference " << c.lse[x]);
    CHECK(std::abs(LD(lse2[x]) - LD(c.lse[x])) <= rel * (1 + std::abs(LD(c.lse[x]))));
  }
  for (std::size_t x = 0; x < out2.size(); ++x) CHECK(std::abs(LD(out2[x]) - LD(c.out[x])) <= rel);
}

TEST_CASE("attention backward: causal over sorted positions, in row blocks", "[attention_backward]") {
  // 70 queries and 80 keys in order over [0, 160]: one query tile of two row blocks (64 and 6
  // rows), each stopping at the last key its last row sees, so the blocks' P have two widths
  // (the bits must not depend on the width a buffer had before); ALiBi and sinks.
  const Shape sh{70, 80, 1, 1, 4, 0, 160, true, kNone, 0, true, true, false, true};
  check_attention_backward<RopePartial>(sh, Regime::Random, 0, 31);
  check_attention_backward<RopePartial, float>(sh, Regime::Random, 0, 32);
}

TEST_CASE("attention backward: a causal staircase over shards dealt back and forth",
          "[attention_backward]") {
  // 520 sorted queries (five query tiles of 128 rows, the last of 8, in three shards dealt 0, 1,
  // 2, 2, 1: detail/tiled/backward_run.hpp, shard_of) before 40 sorted keys over the same span:
  // the check's 1 and 3 threads give the bits of OpenMP's maximum, every gradient its
  // reference's (few keys: the long double reference's cost is per pair).
  const Shape sh{520, 40, 1, 1, 4, 0, 1040, true, kNone, 0, false, false, false, true};
  check_attention_backward<RopePartial, float>(sh, Regime::Random, 0, 43);
}

TEST_CASE("attention backward: the passes around the shards on the threads",
          "[attention_backward]") {
  // The row-independent passes before and after the shards (d_out and v converted, D_i, dV
  // written) take the threads from 2^18 entries, and the key tiles (k̂, and the keys' encode
  // backward with its parameter gradient, summed per tile and added in tile order) always
  // (detail/tiled/backward_run.hpp): 2050 queries before 2 keys (d_out: 2050 x 128 entries;
  // float) and 2 queries before 2050 keys (five key tiles; v: 2050 x 128; double, whose bound
  // on the parameter gradient, a sum over every pair, is tight enough to see one key tile's
  // share missing). The check's 1 and 3 threads give the bits of OpenMP's maximum, every
  // gradient its reference's (one head, few pairs: the long double reference's cost is per
  // pair).
  const Shape many_queries{2050, 2, 1, 1, 128, 0, 64, false, kNone, 0, true, true, false};
  check_attention_backward<RopePartial, float>(many_queries, Regime::Random, 0, 44);
  const Shape many_keys{2, 2050, 1, 1, 128, 0, 64, false, kNone, 0, true, true, false};
  check_attention_backward<RopePartial>(many_keys, Regime::Random, 0, 45);
}
