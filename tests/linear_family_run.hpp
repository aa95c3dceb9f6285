// The driver of the linear-attention family checks (test_linear_families.cpp,
// test_linear_compositions.cpp): one problem on the twins of a family against the long double
// reference (check_problem), and every size and kind of positions for one family (run_family).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

#include "linear_suite.hpp"

namespace peal_test {
namespace linear {

using peal::Layout;

struct FamilyStats {
  Index problems = 0, runs = 0, skipped_draws = 0;
  LD worst = 0;
  std::string worst_at;
};

/// One problem (n tokens at positions t, queries = keys) on the twins of one family: every form
/// against the reference. c: the case index (storage, views, decays, scale rotate with it).
template <class E, class EL>
inline void check_problem(const E& enc, const EL& el, const std::vector<double>& t, bool sequence,
                          int c, std::mt19937_64& rng, FamilyStats& st) {
  static const Shape shapes[] = {Shape::aligned, Shape::padded, Shape::heads_major,
                                 Shape::elem_stride2, Shape::offset};
  Setup su;
  su.tq = su.tk = t;
  su.q_sequence = su.k_sequence = sequence;
  su.Hq = 2, su.Hk = 1, su.dv = c % 2 ? el.dim() + 3 : 5;
  su.sq = su.sk = su.sv = su.so = c % 3 == 1 ? Storage::f64 : Storage::f32;
  su.shq = shapes[c % 5], su.shk = shapes[(c + 1) % 5], su.shv = shapes[(c + 2) % 5];
  su.sho = shapes[(c + 3) % 5];
  if (c % 3 == 1) su.opt.decay = {1 - std::ldexp(1.0, -5), 1.0};
  if (c % 3 == 2) su.opt.decay = {0.5, 0.99};
  if (c % 4 == 3) su.opt.scale = -0.4;
  su.every_form();
  const FormsResult r = check_forms<false>(enc, el, su, rng);
  ++st.problems;
  st.runs += r.runs;
  if (r.check.worst > st.worst) st.worst = r.check.worst, st.worst_at = r.worst_at;
  INFO(r.check.first);
  CHECK(r.check.bad == 0);
  CHECK(r.check.checked == r.runs * Index(t.size()) * su.Hq * su.dv);
}

/// Every size and kind of positions for one family; big: also n = 1000 (regular and irregular).
template <class Fam>
void run_family(std::uint64_t seed, bool big) {
  std::mt19937_64 rng(seed);
  FamilyStats st;
  int c = int(seed % 7);
  std::vector<Index> sizes = {1, 2, 63, 64, 65};
  if (big) sizes.push_back(1000);
  for (int kind = 0; kind < 3; ++kind)
    for (Index n : sizes) {
      if (n == 1000 && kind == 2) continue;
      const bool seq = kind == 0 && c % 2 == 0;
      const std::vector<double> t = kind == 0   ? regular(n, 0)
                                    : kind == 1 ? irregular(n, -11.7, rng)
                                                : irregular(n, 1.7e9 + 0.3, rng);
      const LD span = t.back() - t.front();
      // Random parameters (real parts up to 0.5) where that keeps some terms above 0 over the
      // span, else the Large regime (real parts up to 5e-4).
      const Regime regime = 0.5L * span <= 40 ? Regime::Random : Regime::Large;
      const auto tw = twins_without_growth<Fam>(rng(), regime);
      CAPTURE(Fam::name, n, kind, tw.draws);
      REQUIRE(tw.found);
      REQUIRE(max_real_part(tw.el) <= 0);
      st.skipped_draws += tw.draws - 1;
      check_problem(tw.e, tw.el, t, seq, c++, rng, st);
    }
  CHECK(st.runs == st.problems * 6);
  if (std::getenv("PEAL_LINEAR_REPORT"))
    std::printf("linear %-20s problems %lld, runs %lld, skipped draws %lld, worst err/tol %.3Lg (%s)\n",
                Fam::name, (long long)st.problems, (long long)st.runs, (long long)st.skipped_draws,
                st.worst, st.worst_at.c_str());
}

}  // namespace linear
}  // namespace peal_test
