// A tour of peal's algebra: every canonical block's A(tau) = exp(tau X) at a few tau, a
// RoPE-like bank, and the group law A(s)A(t) = A(s+t) and F(t)^T G(s) = A(t-s) checked
// numerically. The README's main job.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <peal/peal.hpp>
#include <vector>

namespace {

template <class M>
void show(const char* what, double tau, const M& a) {
  std::cout << what << "  A(" << tau << ") =\n" << a << "\n\n";
}

template <class E>
double group_law_error(const E& e, double s, double t) {
  return (e.A(s) * e.A(t) - e.A(s + t)).norm() / (e.A(s).norm() * e.A(t).norm());
}

}  // namespace

int main() {
  std::cout.precision(6);
  std::cout << "peal " << PEAL_VERSION_STRING << ": score(q, t; k, s) = q^T A(t - s) k\n\n";

  // The constant-velocity puck: X = [[0, 1], [0, 0]], A(tau) = [[1, tau], [0, 1]].
  const peal::JordanBlock<2> puck(0.0);
  for (double tau : {0.0, 1.0, 2.5}) show("JordanBlock<2>{0}", tau, puck.A(tau));

  const peal::RealBlock<> decay(-0.1);  // e^{-0.1 tau}
  show("RealBlock{-0.1}", 3.0, decay.A(3.0));

  const peal::RotationBlock<> rope_pair(0.5);  // RoPE pair: e^{0} R(-0.5 tau)
  show("RotationBlock{0.5, 0}", 1.0, rope_pair.A(1.0));

  const peal::RotationBlock<> xpos_pair(0.5, -0.01);  // decaying rotation (xPos/RetNet)
  show("RotationBlock{0.5, -0.01}", 100.0, xpos_pair.A(100.0));

  const peal::JordanBlock<3> quadratic(-0.05);  // e^{-0.05 tau} (1, tau, tau^2/2)
  show("JordanBlock<3>{-0.05}", 2.0, quadratic.A(2.0));

  const peal::RotationJordanBlock<2> damped(1.0, -0.2);
  show("RotationJordanBlock<2>{1, -0.2}", 0.5, damped.A(0.5));

  // A RoPE-like bank: head_dim 8, omega_i = 10000^(-2i/8), GPT-NeoX (half split) layout.
  std::vector<peal::RotationBlock<>> pairs;
  for (int i = 0; i < 4; ++i) pairs.emplace_back(std::pow(10000.0L, -2.0L * i / 8));
  const peal::Bank<peal::RotationBlock<>> rope(pairs, peal::Layout::HalfSplit);
  show("RoPE bank (d = 8, half split)", 3.0, rope.A(3.0));

  // Everything at once, with two pass-through coordinates, and the guarantees.
  const auto all = peal::compose(decay, xpos_pair, quadratic, damped, rope, peal::PassThrough<>(2));
  std::cout << "composition of every block type: dim " << all.dim() << "\n";
  double worst = 0;
  for (double s : {-7.25, 0.5, 1e3})
    for (double t : {-1.0, 0.0, 3.0, 2e3}) {
      worst = std::max(worst, group_law_error(all, s, t));
      const double fg = (all.F(t).transpose() * all.G(s) - all.A(t - s)).norm() /
                        (all.F(t).norm() * all.G(s).norm());
      worst = std::max(worst, fg);
    }
  std::printf("group law and F(t)^T G(s) = A(t - s): worst relative error %.2e\n", worst);

  Eigen::VectorXd q = Eigen::VectorXd::LinSpaced(all.dim(), -1, 1);
  Eigen::VectorXd k = Eigen::VectorXd::LinSpaced(all.dim(), 2, 0);
  const double near = all.score(q, 10.0, k, 4.0), far = all.score(q, 1e6 + 10.0, k, 1e6 + 4.0);
  std::printf("translation invariance: score(q,10;k,4) = %.12f, at +1e6: %.12f\n", near, far);

  const bool ok = worst < 1e-12 && std::abs(near - far) < 1e-6 * std::abs(near);
  std::cout << (ok ? "all checks passed\n" : "CHECK FAILED\n");
  return ok ? 0 : 1;
}
