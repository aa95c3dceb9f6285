// The data behind docs/pictures/*.png, computed by peal itself (so a picture cannot drift
// from the code). Deterministic: fixed seeds, fixed grids.
//
//   example_pictures DIR    writes DIR/blocks_*.dat, scores.dat, scores_q.dat,
//                           wavelengths.dat, accuracy.dat, mrope.dat (whitespace-separated
//                           columns, '#' header lines; docs/pictures/README.md lists them)
//   example_pictures        computes everything, checks the ALiBi identity, writes nothing
//
// The gnuplot scripts docs/pictures/*.gp draw the files: cmake --build build --target
// peal_pictures. tests/pictures_check.cpp (ctest pictures_data) recomputes values from the
// formulas and checks the files.
#include <cmath>
#include <cstdio>
#include <deque>
#include <exception>
#include <fstream>
#include <iomanip>
#include <peal/peal.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

// Collects one .dat file in memory; written only when a directory was given.
struct Table {
  std::string name;
  std::ostringstream text;
  explicit Table(std::string n) : name(std::move(n)) { text << std::setprecision(12); }
  Table& comment(const std::string& c) {
    text << "# " << c << "\n";
    return *this;
  }
  template <class... T>
  void row(const T&... v) {
    bool first = true;
    ((text << (first ? "" : " ") << v, first = false), ...);
    text << "\n";
  }
};

std::deque<Table> g_tables;  // references stay valid as tables are added
Table& table(const std::string& name) { return g_tables.emplace_back(name); }

// ---- 1. A(tau) of each block type ----------------------------------------------------------
void blocks() {
  // RealBlock: e^{lambda tau}, decay and growth.
  const peal::RealBlock<> decay(-0.5), growth(0.3);
  Table& r = table("blocks_real.dat");
  r.comment("RealBlock A(tau) = e^{lambda tau}: tau, lambda=-0.5, lambda=+0.3");
  for (int i = 0; i <= 80; ++i) {
    const double tau = 4.0 * i / 80;
    r.row(tau, decay.A(tau)(0, 0), growth.A(tau)(0, 0));
  }

  // RotationBlock: A(tau) e_1 = e^{a tau} R(-omega tau) e_1, a circle (a = 0), a spiral (a < 0).
  const peal::RotationBlock<> circle(1.0L, 0.0), spiral(1.0L, -0.15);
  Table& t = table("blocks_rotation.dat");
  t.comment("RotationBlock{omega=1, a} A(tau) (1,0)^T: tau, x y (a=0), x y (a=-0.15)");
  for (int i = 0; i <= 200; ++i) {
    const double tau = 4.0 * std::acos(-1.0) * i / 200;
    const auto c = circle.A(tau), s = spiral.A(tau);
    t.row(tau, c(0, 0), c(1, 0), s(0, 0), s(1, 0));
  }

  // JordanBlock<2>{0}: [[1, tau], [0, 1]] (position of a constant-velocity puck: x(tau) = x0 +
  // v tau); JordanBlock<3>{0}: (1, tau, tau^2/2) (constant acceleration).
  const peal::JordanBlock<2> puck(0.0);
  const peal::JordanBlock<3> accel(0.0);
  Table& j = table("blocks_jordan.dat");
  j.comment("JordanBlock<M>{0} A(tau) entries: tau, J2(0,0) J2(0,1) J2(1,1), J3(0,1) J3(0,2)");
  for (int i = 0; i <= 80; ++i) {
    const double tau = 4.0 * i / 80;
    const auto a2 = puck.A(tau);
    const auto a3 = accel.A(tau);
    j.row(tau, a2(0, 0), a2(0, 1), a2(1, 1), a3(0, 1), a3(0, 2));
  }

  // RotationJordanBlock<2>{1, -0.2}: A(tau) e_3 = (tau e^{a tau} R(-omega tau) e_1, e^{a tau}
  // R(-omega tau) e_1): the top pair rises as tau e^{a tau} and then decays.
  const peal::RotationJordanBlock<2> rj(1.0L, -0.2);
  Table& k = table("blocks_rotation_jordan.dat");
  k.comment("RotationJordanBlock<2>{omega=1, a=-0.2} A(tau) e_3: tau, top x y, bottom x y");
  for (int i = 0; i <= 300; ++i) {
    const double tau = 30.0 * i / 300;
    const auto a = rj.A(tau);
    k.row(tau, a(0, 2), a(1, 2), a(2, 2), a(3, 2));
  }
}

// ---- 2. Score against distance ------------------------------------------------------------
int scores() {
  constexpr int d = 128;
  std::mt19937 rng(20240613);
  std::normal_distribution<double> n01(0.0, 1.0);
  Eigen::VectorXd q(d + 3);
  for (int i = 0; i < d + 3; ++i) q(i) = n01(rng);
  q.head(d).normalize();                 // |q_rope| = 1: every 128-dim curve starts at 1
  q.tail(3) *= 0.25 / q.tail(3).norm();  // a smaller Jordan part: its tau^2 term peaks

  const Eigen::VectorXd qd = q.head(d);
  Table& qt = table("scores_q.dat");
  qt.comment(
      "the random vector q = k of scores.dat: index, value (0..127 the head, 128..130"
      " the JordanBlock<3> part)");
  for (int i = 0; i < d + 3; ++i) qt.row(i, q(i));

  peal::RopeConfig cfg;
  cfg.head_dim = d;
  cfg.rope_theta = 1e4;
  const auto rope = peal::rope<double>(cfg);  // half-split, HF's rotate_half
  const auto xp = peal::xpos<double>(d);
  const auto ret = peal::retnet<double>(d, 2);
  const double m = peal::alibi_slopes(8).back();  // 2^-8, the gentlest of 8 heads
  const auto al = peal::alibi<double>(m);
  const auto plain_alibi = peal::compose(peal::PassThrough<double>(d), al.encoding());
  const auto jordan = peal::compose(rope.encoding(), peal::JordanBlock<3>(-1.0 / 16));

  Table& s = table("scores.dat");
  s.comment("score q^T A(t - s) k with q = k (scores_q.dat), t - s = dist, s = 1000");
  s.comment("columns: dist rope xpos retnet_h0 retnet_h1 alibi_jordan alibi_bias jordan3");
  s.comment("rope: theta 1e4, d 128; xpos: d 128, scale_base 512; retnet: heads 0, 1 of 2;");
  s.comment("alibi m = 2^-8 on a plain dot product: the JordanBlock<2> form and q.k - m dist;");
  s.comment("jordan3: compose(rope, JordanBlock<3>{-1/32}) on the 131-dim q");
  double worst = 0;
  for (int i = 0; i <= 256; ++i) {
    const double dist = 2.0 * i, s0 = 1000.0, t0 = s0 + dist;
    const double alibi_j = plain_alibi.score(al.augment_query(qd), t0, al.augment_key(qd), s0);
    const double alibi_b = qd.dot(qd) + peal::alibi_bias(m, t0, s0);
    worst = std::max(worst, std::abs(alibi_j - alibi_b));
    s.row(dist, rope.score(qd, t0, qd, s0), xp.score(qd, t0, qd, s0), ret[0].score(qd, t0, qd, s0),
          ret[1].score(qd, t0, qd, s0), alibi_j, alibi_b, jordan.score(q, t0, q, s0));
  }
  std::printf("scores: ALiBi Jordan form vs bias, worst |difference| %.3g\n", worst);
  return worst < 1e-12 ? 0 : 1;
}

// ---- 3. Wavelengths of a Llama-3.1-style head under each scaling ---------------------------
// An illustrative LongRoPE long_factor (not any model's): 1 for the fastest pairs, rising
// smoothly to 8 for the slowest, f_i = 1 + 7 s^2 (3 - 2 s), s = i / (n - 1).
std::vector<double> illustrative_long_factor(int n) {
  std::vector<double> f(std::size_t(n), 1.0);
  for (int i = 0; i < n; ++i) {
    const double s = double(i) / (n - 1);
    f[std::size_t(i)] = 1.0 + 7.0 * s * s * (3.0 - 2.0 * s);
  }
  return f;
}

void wavelengths() {
  peal::RopeConfig base;
  base.head_dim = 128;
  base.rope_theta = 5e5;
  base.max_position_embeddings = 8192;
  const double L0 = 8192;

  auto with = [&](peal::RopeType type) {
    peal::RopeConfig c = base;
    c.scaling.type = type;
    c.scaling.factor = 8.0;
    c.scaling.original_max_position_embeddings = L0;
    return c;
  };
  peal::RopeConfig linear = with(peal::RopeType::Linear);
  peal::RopeConfig dynamic = with(peal::RopeType::Dynamic);
  peal::RopeConfig yarn = with(peal::RopeType::Yarn);
  peal::RopeConfig llama3 = with(peal::RopeType::Llama3);
  llama3.scaling.low_freq_factor = 1.0;
  llama3.scaling.high_freq_factor = 4.0;
  peal::RopeConfig longrope = with(peal::RopeType::LongRope);
  longrope.max_position_embeddings = 8 * L0;
  longrope.scaling.short_factor = std::vector<double>(64, 1.0);
  longrope.scaling.long_factor = illustrative_long_factor(64);

  const auto w_def = peal::rope_frequencies(base).inv_freq;
  const auto w_lin = peal::rope_frequencies(linear).inv_freq;
  const auto w_dyn = peal::rope_frequencies(dynamic, 2 * L0).inv_freq;  // at 2x trained length
  const auto w_yarn = peal::rope_frequencies(yarn).inv_freq;
  const auto w_l3 = peal::rope_frequencies(llama3).inv_freq;
  const auto w_long = peal::rope_frequencies(longrope, 8 * L0).inv_freq;  // long factors

  Table& t = table("wavelengths.dat");
  t.comment("wavelength 2 pi / omega_i (tokens) of a head d = 128, theta = 5e5, trained 8192");
  t.comment(
      "columns: i default linear(8) dynamic(8, seq 16384) yarn(8) llama3(8, 1, 4) "
      "longrope(illustrative long_factor, seq 65536) long_factor_i");
  const long double two_pi = 2.0L * std::acos(-1.0L);
  const auto lf = illustrative_long_factor(64);
  for (std::size_t i = 0; i < w_def.size(); ++i)
    t.row(i, double(two_pi / w_def[i]), double(two_pi / w_lin[i]), double(two_pi / w_dyn[i]),
          double(two_pi / w_yarn[i]), double(two_pi / w_l3[i]), double(two_pi / w_long[i]), lf[i]);
}

// ---- 4. Accuracy against position ----------------------------------------------------------
void accuracy() {
  constexpr int d = 128, half = d / 2;
  peal::RopeConfig cfg;
  cfg.head_dim = d;
  cfg.rope_theta = 1e4;
  const auto rope = peal::rope<float>(cfg);
  const auto& w = rope.inv_freq();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> q0(d);
  for (auto& x : q0) x = u(rng);
  long double norm = 0;
  for (float x : q0) norm += static_cast<long double>(x) * x;
  norm = std::sqrt(norm);

  Table& t = table("accuracy.dat");
  t.comment("relative error |q~ - q~_ref| / |q| of RoPE (d 128, theta 1e4, float q) at t;");
  t.comment(
      "reference: long double angles omega_i t and cosl/sinl; columns: t peal "
      "float32_angle (theta.t formed in float, cosf/sinf)");
  for (int k = 0; k < 64; ++k) {
    const double pos = std::exp2(40.0 * k / 63);  // 1 .. 2^40
    Eigen::VectorXf q = Eigen::Map<const Eigen::VectorXf>(q0.data(), d);
    rope.encode_query(q, pos);
    long double e_peal = 0, e_f32 = 0;
    for (int i = 0; i < half; ++i) {
      const long double ang = w[std::size_t(i)] * static_cast<long double>(pos);
      const long double c = std::cos(ang), s = std::sin(ang);
      const long double x0 = q0[std::size_t(i)], x1 = q0[std::size_t(i + half)];
      const long double r0 = x0 * c - x1 * s, r1 = x0 * s + x1 * c;
      // The engines' formula: inv_freq in float, angle = float(t) * inv_freq in float.
      const float wf = static_cast<float>(w[std::size_t(i)]);
      const float af = static_cast<float>(pos) * wf;
      const float cf = std::cos(af), sf = std::sin(af);
      const float f0 = q0[std::size_t(i)] * cf - q0[std::size_t(i + half)] * sf;
      const float f1 = q0[std::size_t(i)] * sf + q0[std::size_t(i + half)] * cf;
      e_peal += (q(i) - r0) * (q(i) - r0) + (q(i + half) - r1) * (q(i + half) - r1);
      e_f32 += (f0 - r0) * (f0 - r0) + (f1 - r1) * (f1 - r1);
    }
    t.row(pos, double(std::sqrt(e_peal) / norm), double(std::sqrt(e_f32) / norm));
  }
}

// ---- 5. M-RoPE axis of each pair -------------------------------------------------------------
void mrope_axes() {
  peal::RopeConfig q2;
  q2.head_dim = 128;
  q2.rope_theta = 1e6;
  q2.scaling.mrope_section = {16, 24, 24};  // Qwen2-VL
  peal::RopeConfig q3 = q2;
  q3.scaling.mrope_section = {24, 20, 20};  // Qwen3-VL
  q3.scaling.mrope_interleaved = true;
  const auto a2 = peal::mrope<double>(q2).pair_axis();
  const auto a3 = peal::mrope<double>(q3).pair_axis();
  Table& t = table("mrope.dat");
  t.comment(
      "axis (0 t, 1 h, 2 w) of pair j: j qwen2vl([16,24,24]) qwen3vl([24,20,20] "
      "interleaved)");
  for (std::size_t j = 0; j < a2.size(); ++j) t.row(j, a2[j], a3[j]);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    blocks();
    const int rc = scores();
    wavelengths();
    accuracy();
    mrope_axes();
    for (const Table& t : g_tables) {
      if (argc > 1) {
        const std::string path = std::string(argv[1]) + "/" + t.name;
        std::ofstream out(path);
        out << t.text.str();
        if (!out) {
          std::fprintf(stderr, "pictures: cannot write %s\n", path.c_str());
          return 1;
        }
      }
      std::printf("%s %zu bytes%s\n", t.name.c_str(), t.text.str().size(),
                  argc > 1 ? "" : " (not written: no directory given)");
    }
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pictures: %s\n", e.what());
    return 1;
  }
}
