// ctest pictures_data: runs example_pictures into a directory and checks every data file
// behind docs/pictures/*.png, its shape (rows, columns) and its values against the
// formulas, recomputed here from scratch (this file does not include peal), so a picture
// cannot silently drift from the code or from the mathematics it claims to show.
//
//   peal_pictures_check <path of example_pictures> <output directory>
//
// The files are printed with 12 significant digits: values of size O(1) are compared with
// an absolute tolerance of 1e-9 (1e3 x the printing error; the formulas below are evaluated
// in long double), sizes that grow (wavelengths) relatively at 1e-9.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Rows = std::vector<std::vector<long double>>;
int g_failures = 0;
std::string g_dir;

void fail(const std::string& what) {
  std::printf("FAIL: %s\n", what.c_str());
  ++g_failures;
}

Rows load(const std::string& name, std::size_t rows, std::size_t cols) {
  Rows out;
  std::ifstream in(g_dir + "/" + name);
  if (!in) {
    fail(name + ": cannot open");
    return out;
  }
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream is(line);
    std::vector<long double> r;
    std::string tok;
    while (is >> tok) r.push_back(std::strtold(tok.c_str(), nullptr));
    if (r.size() != cols)
      fail(name + ": a row has " + std::to_string(r.size()) + " columns, expected " +
           std::to_string(cols));
    out.push_back(r);
  }
  if (out.size() != rows)
    fail(name + ": " + std::to_string(out.size()) + " rows, expected " + std::to_string(rows));
  for (auto& r : out) r.resize(cols, NAN);  // shape errors are reported once, above
  std::printf("%s: %zu x %zu\n", name.c_str(), out.size(), cols);
  return out;
}

void near(const std::string& what, long double got, long double want, long double tol) {
  const long double err = std::fabs(got - want);
  if (!(err <= tol)) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s: got %.15Lg, expected %.15Lg (|diff| %.3Lg > %.3Lg)",
                  what.c_str(), got, want, err, tol);
    fail(buf);
  }
}
void rel(const std::string& what, long double got, long double want, long double tol) {
  near(what, got, want, tol * std::fabs(want));
}
std::string at(const char* file, std::size_t row) {
  return std::string(file) + " row " + std::to_string(row);
}

const long double kPi = std::acos(-1.0L);
constexpr long double kTol = 1e-9L;

void check_blocks() {
  const Rows r = load("blocks_real.dat", 81, 3);
  for (std::size_t i = 0; i < r.size(); ++i) {
    const long double tau = r[i][0];
    near(at("blocks_real.dat", i) + " tau", tau, 4.0L * i / 80, kTol);
    near(at("blocks_real.dat", i) + " e^{-0.5 tau}", r[i][1], std::exp(-0.5L * tau), kTol);
    near(at("blocks_real.dat", i) + " e^{0.3 tau}", r[i][2], std::exp(0.3L * tau), kTol);
  }
  const Rows t = load("blocks_rotation.dat", 201, 5);
  for (std::size_t i = 0; i < t.size(); ++i) {
    const long double tau = t[i][0];
    // A(tau) e1 = e^{a tau} R(-tau) e1 = e^{a tau} (cos tau, -sin tau).
    for (int k = 0; k < 2; ++k) {
      const long double a = k == 0 ? 0.0L : -0.15L, g = std::exp(a * tau);
      const long double x = t[i][std::size_t(1 + 2 * k)], y = t[i][std::size_t(2 + 2 * k)];
      near(at("blocks_rotation.dat", i) + " radius e^{a tau}", std::hypot(x, y), g, kTol);
      near(at("blocks_rotation.dat", i) + " x", x, g * std::cos(tau), kTol);
      near(at("blocks_rotation.dat", i) + " y", y, -g * std::sin(tau), kTol);
    }
  }
  const Rows j = load("blocks_jordan.dat", 81, 6);
  for (std::size_t i = 0; i < j.size(); ++i) {
    const long double tau = j[i][0];
    const long double want[] = {1, tau, 1, tau, tau * tau / 2};
    for (int c = 0; c < 5; ++c)
      near(at("blocks_jordan.dat", i) + " column " + std::to_string(c + 2),
           j[i][std::size_t(c + 1)], want[c], kTol);
  }
  const Rows k = load("blocks_rotation_jordan.dat", 301, 5);
  for (std::size_t i = 0; i < k.size(); ++i) {
    const long double tau = k[i][0], g = std::exp(-0.2L * tau);
    const long double c = g * std::cos(tau), s = -g * std::sin(tau);
    near(at("blocks_rotation_jordan.dat", i) + " top x", k[i][1], tau * c, kTol);
    near(at("blocks_rotation_jordan.dat", i) + " top y", k[i][2], tau * s, kTol);
    near(at("blocks_rotation_jordan.dat", i) + " bottom x", k[i][3], c, kTol);
    near(at("blocks_rotation_jordan.dat", i) + " bottom y", k[i][4], s, kTol);
  }
}

void check_scores() {
  const Rows qr = load("scores_q.dat", 131, 2);
  const Rows s = load("scores.dat", 257, 8);
  if (qr.size() != 131 || s.size() != 257) return;
  std::vector<long double> q(131);
  for (std::size_t i = 0; i < 131; ++i) q[i] = qr[i][1];
  long double n2 = 0;
  for (int i = 0; i < 128; ++i) n2 += q[std::size_t(i)] * q[std::size_t(i)];
  near("scores_q.dat |q[0..128)|^2", n2, 1.0L, kTol);
  const int n = 64;
  for (std::size_t r = 0; r < s.size(); ++r) {
    const long double D = s[r][0];
    near(at("scores.dat", r) + " distance", D, 2.0L * r, kTol);
    long double rope = 0, xpos = 0, ret0 = 0, ret1 = 0;
    for (int i = 0; i < n; ++i) {
      const long double w = std::pow(1e4L, -2.0L * i / 128);
      // RoPE, half-split pairs (i, i + 64); xPos and RetNet interleaved (2i, 2i + 1).
      const long double half =
          q[std::size_t(i)] * q[std::size_t(i)] + q[std::size_t(i + n)] * q[std::size_t(i + n)];
      const long double inter = q[std::size_t(2 * i)] * q[std::size_t(2 * i)] +
                                q[std::size_t(2 * i + 1)] * q[std::size_t(2 * i + 1)];
      rope += half * std::cos(w * D);
      const long double zeta = (2.0L * i + 0.4L * 128) / (1.4L * 128);
      xpos += std::pow(zeta, D / 512) * inter * std::cos(w * D);
      const long double wr = std::pow(1e4L, -static_cast<long double>(i) / (n - 1));
      ret0 += std::pow(1.0L - 0x1p-5L, D) * inter * std::cos(wr * D);
      ret1 += std::pow(1.0L - 0x1p-6L, D) * inter * std::cos(wr * D);
    }
    near(at("scores.dat", r) + " RoPE", s[r][1], rope, kTol);
    near(at("scores.dat", r) + " xPos", s[r][2], xpos, kTol);
    near(at("scores.dat", r) + " RetNet head 0", s[r][3], ret0, kTol);
    near(at("scores.dat", r) + " RetNet head 1", s[r][4], ret1, kTol);
    const long double alibi = n2 - 0x1p-8L * D;
    near(at("scores.dat", r) + " ALiBi Jordan form", s[r][5], alibi, kTol);
    near(at("scores.dat", r) + " ALiBi Jordan form == bias", s[r][5], s[r][6], 1e-11L);
    // compose(rope, JordanBlock<3>{-1/16}): q_J^T e^{lambda D}(I + D N + D^2 N^2 / 2) q_J.
    const long double a = q[128], b = q[129], c = q[130];
    const long double jordan =
        std::exp(-D / 16) * (a * a + b * b + c * c + D * (a * b + b * c) + D * D / 2 * a * c);
    near(at("scores.dat", r) + " RoPE + JordanBlock<3>", s[r][7], rope + jordan, kTol);
  }
}

std::vector<long double> long_factor() {  // examples/pictures.cpp's illustrative list
  std::vector<long double> f(64);
  for (int i = 0; i < 64; ++i) {
    const long double s = static_cast<long double>(i) / 63;
    f[std::size_t(i)] = 1 + 7 * s * s * (3 - 2 * s);
  }
  return f;
}

void check_wavelengths() {
  const Rows w = load("wavelengths.dat", 64, 8);
  const long double theta = 5e5L, L0 = 8192, F = 8;
  // YaRN's correction range (beta_fast 32, beta_slow 1, truncated), pair indices.
  const auto corr = [&](long double r) {
    return 128 * std::log(L0 / (r * 2 * kPi)) / (2 * std::log(theta));
  };
  const long double lo = std::max(0.0L, std::floor(corr(32))),
                    hi = std::min(127.0L, std::ceil(corr(1)));
  const auto lf = long_factor();
  const long double dyn_base = theta * std::pow(F * 2 - (F - 1), 128.0L / 126);
  for (std::size_t i = 0; i < w.size(); ++i) {
    const std::string row = at("wavelengths.dat", i);
    near(row + " index", w[i][0], i, 0);
    const long double def = 2 * kPi * std::pow(theta, 2.0L * i / 128);
    rel(row + " default = 2 pi theta^(2i/D)", w[i][1], def, kTol);
    rel(row + " linear = 8 x default", w[i][2], F * def, kTol);
    rel(row + " dynamic at 2x", w[i][3], 2 * kPi * std::pow(dyn_base, 2.0L * i / 128), kTol);
    const long double ramp = std::min(1.0L, std::max(0.0L, (i - lo) / (hi - lo)));
    const long double wy = (1 / def) * (1 - ramp) + (1 / def / F) * ramp;
    rel(row + " yarn", w[i][4], 1 / wy, kTol);
    long double w3 = 2 * kPi / def;
    if (def > L0 / 1) {
      w3 /= F;
    } else if (def >= L0 / 4) {
      const long double sm = (L0 / def - 1) / (4 - 1);
      w3 = (1 - sm) * w3 / F + sm * w3;
    }
    rel(row + " llama3", w[i][5], 2 * kPi / w3, kTol);
    rel(row + " long_factor list", w[i][7], lf[i], kTol);
    rel(row + " longrope = default x long_factor", w[i][6], def * lf[i], kTol);
  }
  if (w.size() == 64) {
    // The picture's story: the fastest pair is kept by YaRN and Llama 3, the slowest scaled.
    rel("yarn keeps pair 0", w[0][4], w[0][1], kTol);
    rel("llama3 scales pair 63 by 8", w[63][5], 8 * w[63][1], kTol);
    if (!(w[63][1] > L0)) fail("default: the slowest wavelength should exceed 8192");
  }
}

void check_accuracy() {
  const Rows a = load("accuracy.dat", 64, 3);
  for (std::size_t k = 0; k < a.size(); ++k) {
    rel(at("accuracy.dat", k) + " position 2^(40k/63)", a[k][0], std::exp2(40.0L * k / 63), kTol);
    if (!(a[k][1] < 1e-6L)) fail(at("accuracy.dat", k) + ": peal error not < 1e-6");
  }
  if (a.size() == 64) {
    if (!(a[63][2] > 1e-2L)) fail("accuracy.dat: float32-angle error at 2^40 not > 1e-2");
    if (!(a[0][2] < 1e-6L)) fail("accuracy.dat: float32-angle error at t = 1 not < 1e-6");
    std::printf("accuracy at 2^40: peal %.3Lg, float32 angle %.3Lg\n", a[63][1], a[63][2]);
  }
}

void check_mrope() {
  const Rows m = load("mrope.dat", 64, 3);
  int c2[3] = {0, 0, 0}, c3[3] = {0, 0, 0};
  for (std::size_t j = 0; j < m.size(); ++j) {
    const int a2 = int(m[j][1]), a3 = int(m[j][2]);
    const int want2 = j < 16 ? 0 : j < 40 ? 1 : 2;
    const int want3 = (j % 3 == 1 && j < 60) ? 1 : (j % 3 == 2 && j < 60) ? 2 : 0;
    if (a2 != want2) fail(at("mrope.dat", j) + ": Qwen2-VL axis " + std::to_string(a2));
    if (a3 != want3) fail(at("mrope.dat", j) + ": Qwen3-VL axis " + std::to_string(a3));
    if (a2 >= 0 && a2 < 3) ++c2[a2];
    if (a3 >= 0 && a3 < 3) ++c3[a3];
  }
  if (c2[0] != 16 || c2[1] != 24 || c2[2] != 24) fail("mrope.dat: Qwen2-VL counts not 16/24/24");
  if (c3[0] != 24 || c3[1] != 20 || c3[2] != 20) fail("mrope.dat: Qwen3-VL counts not 24/20/20");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <example_pictures> <output directory>\n", argv[0]);
    return 2;
  }
  g_dir = argv[2];
  std::error_code ec;
  std::filesystem::remove_all(g_dir, ec);
  std::filesystem::create_directories(g_dir, ec);
  if (ec) {
    std::fprintf(stderr, "cannot create %s: %s\n", g_dir.c_str(), ec.message().c_str());
    return 2;
  }
  const std::string cmd = "\"" + std::string(argv[1]) + "\" \"" + g_dir + "\"";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "FAIL: %s did not exit 0\n", cmd.c_str());
    return 1;
  }
  check_blocks();
  check_scores();
  check_wavelengths();
  check_accuracy();
  check_mrope();
  std::printf(g_failures ? "%d check(s) FAILED\n" : "all picture data checks passed\n", g_failures);
  return g_failures ? 1 : 0;
}
