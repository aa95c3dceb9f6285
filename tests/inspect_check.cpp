// ctest peal_inspect_configs: writes model configs, runs peal_inspect on each, parses its
// output and checks it against peal's own frequencies (rope_frequencies on a RopeConfig built
// here by hand, not read from the file) and against the band rules recomputed from the
// published formulas (Llama 3 wavelength thresholds, YaRN's correction range).
//
//   peal_inspect_check <path of peal_inspect> <scratch directory>
//
// Configs: Llama 3.1 (llama3), Qwen2-7B with YaRN (factor 4), Phi-3-mini-128k-style LongRoPE
// (head_dim 96; the factor lists are illustrative, not the model's), a Qwen2-VL GGUF file
// (detected by its magic; M-RoPE axes), a BLOOM GGUF (no RoPE), and broken configs that must fail
// naming the key and the file.
// Matrices (--generator, --transition; issue 23 §5): a skew-symmetric X as text, as .npy <f8 and
// as a Fortran-order <f4 (rotations only, the frequencies and wavelengths), a constructed
// X = P J P⁻¹ with a decay, a growth, a damped rotation and a Jordan chain of length 3 (the
// blocks' parameters, decay lengths, the growth warning), a transition M with a rotation by π
// (the eigenvalues of M named), and the refusals, each naming the file and the line or entry:
// ragged, NaN, non-numeric and non-square text, big-endian, object, integer, 3-D, truncated and
// 2000 x 2000 .npy files, the library's own refusals (a chain of length 5, no real logarithm).
#include <Eigen/Core>
#include <Eigen/QR>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <peal/presets/mrope.hpp>
#include <peal/presets/rope.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gguf_writer.hpp"

namespace {

int g_failures = 0;
std::string g_exe, g_dir;

void fail(const std::string& what) {
  std::printf("FAIL: %s\n", what.c_str());
  ++g_failures;
}
void expect(bool ok, const std::string& what) {
  if (!ok) fail(what);
}
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Run {
  int status;
  std::string out, err;
};

Run run(const std::string& args, const std::string& tag) {
  const std::string out = g_dir + "/" + tag + ".out", err = g_dir + "/" + tag + ".err";
  const std::string cmd = "\"" + g_exe + "\" " + args + " >\"" + out + "\" 2>\"" + err + "\"";
  const int rc = std::system(cmd.c_str());
  return {rc, slurp(out), slurp(err)};
}

std::string write(const std::string& name, const std::string& text) {
  const std::string path = g_dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

struct Row {
  int i;
  long double omega, wavelength, factor;
  std::string band, axis;
};

// Calls row(first word, the rest) for each line after the header line whose first word is
// `header`, up to the first blank line (the report's tables: "pair ...", "block ...").
template <class F>
void for_rows(const std::string& out, const std::string& header, F&& row) {
  std::istringstream in(out);
  std::string line;
  bool on = false;
  while (std::getline(in, line)) {
    std::istringstream is(line);
    std::string first;
    is >> first;
    if (first == header) {
      on = true;
      continue;
    }
    if (!on) continue;
    if (first.empty()) break;
    row(first, is);
  }
}

// The pair table.
std::vector<Row> table(const std::string& out) {
  std::vector<Row> rows;
  for_rows(out, "pair", [&](const std::string& first, std::istringstream& is) {
    Row r;
    r.i = std::atoi(first.c_str());
    std::string w, l, f;
    is >> w >> l >> f >> r.band >> r.axis;
    r.omega = std::strtold(w.c_str(), nullptr);
    r.wavelength = std::strtold(l.c_str(), nullptr);
    r.factor = std::strtold(f.c_str(), nullptr);
    rows.push_back(r);
  });
  return rows;
}

// The value printed after a label at the start of a line ("attention_factor   1.13...").
std::string value(const std::string& out, const std::string& label) {
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, label.size(), label) == 0 && line.size() > label.size() &&
        line[label.size()] == ' ') {
      std::istringstream is(line.substr(label.size()));
      std::string v;
      is >> v;
      return v;
    }
  return "(missing)";
}

const long double kPi = std::acos(-1.0L);

// Compares the table with rope_frequencies(config, seq_len): omega printed with 18 digits,
// the factor with 12 decimals (printing error 5e-13). `bands(i, wavelength_default)` gives the
// expected band.
template <class Bands>
void check_table(const std::string& tag, const std::string& out, const peal::RopeConfig& c,
                 double seq_len, Bands bands) {
  const auto rows = table(out);
  peal::RopeConfig plain = c;
  plain.scaling = peal::RopeScaling{};
  plain.frequency_factors.clear();
  peal::RopeConfig used = c;
  used.scaling.mrope_section.clear();
  const auto f = peal::rope_frequencies(used, seq_len), d = peal::rope_frequencies(plain);
  if (rows.size() != f.inv_freq.size()) {
    fail(tag + ": " + std::to_string(rows.size()) + " table rows, expected " +
         std::to_string(f.inv_freq.size()));
    return;
  }
  int mismatches = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const long double w = f.inv_freq[i], wd = d.inv_freq[i];
    const std::string at = tag + " pair " + std::to_string(i);
    bool ok = r.i == int(i);
    ok = ok && std::fabs(r.omega - w) <= 1e-16L * w;
    ok = ok && std::fabs(r.wavelength - 2 * kPi / w) <= 1e-16L * (2 * kPi / w);
    ok = ok && std::fabs(r.factor - wd / w) <= 1e-12L * (1 + wd / w);
    const std::string want = bands(int(i), 2 * kPi / wd);
    if (!ok || r.band != want) {
      if (++mismatches <= 5)
        fail(at + ": printed " + std::to_string(double(r.omega)) + " " +
             std::to_string(double(r.factor)) + " " + r.band + ", peal " +
             std::to_string(double(w)) + " " + std::to_string(double(wd / w)) + " " + want);
    }
  }
  std::printf("%s: %zu pairs checked, %d mismatches\n", tag.c_str(), rows.size(), mismatches);
}

void llama31() {
  const std::string path = write("llama31.json", R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
  const Run r = run("\"" + path + "\"", "llama31");
  expect(r.status == 0, "llama31: exit status " + std::to_string(r.status) + ": " + r.err);
  // The same config through a pipe: the GGUF check must not consume it (it read the magic
  // from the pipe, and the JSON reader then saw nothing). The outputs agree but for the path.
  auto body = [](const std::string& out) { return out.substr(std::min(out.size(), out.find('\n'))); };
  const Run piped = run("/dev/stdin <\"" + path + "\"", "llama31_file_stdin");
  expect(piped.status == 0 && body(piped.out) == body(r.out), "llama31 from stdin (a file): " + piped.err);
  {
    const std::string out = g_dir + "/llama31_pipe.out", err = g_dir + "/llama31_pipe.err";
    const std::string cmd = "cat \"" + path + "\" | \"" + g_exe + "\" /dev/stdin >\"" + out +
                            "\" 2>\"" + err + "\"";
    const int rc = std::system(cmd.c_str());
    expect(rc == 0 && body(slurp(out)) == body(r.out), "llama31 through a pipe: " + slurp(err));
  }
  peal::RopeConfig c;
  c.head_dim = 128;
  c.rope_theta = 5e5;
  c.max_position_embeddings = 131072;
  c.scaling.type = peal::RopeType::Llama3;
  c.scaling.factor = 8;
  c.scaling.low_freq_factor = 1;
  c.scaling.high_freq_factor = 4;
  c.scaling.original_max_position_embeddings = 8192;
  // Llama 3: wavelength < 8192/4 kept, > 8192/1 scaled, else interpolated.
  check_table("llama31", r.out, c, 131072, [](int, long double wl) {
    return wl < 2048 ? "kept" : wl > 8192 ? "scaled" : "interpolated";
  });
  expect(value(r.out, "rotary_dim") == "128", "llama31: rotary_dim");
  expect(value(r.out, "rope_type") == "llama3", "llama31: rope_type");
  expect(value(r.out, "attention_factor") == "1", "llama31: attention_factor");
  expect(value(r.out, "trained context") == "8192", "llama31: trained context");
  expect(contains(r.out, "layout                               half-split"), "llama31: layout");
  // Default wavelengths 2 pi 5e5^(i/64) exceed 8192 from i = 35 on; scaled ones from i = 32.
  expect(contains(r.out, "warning: 32 of 64 pairs (the first: pair 32) have a wavelength"),
         "llama31: trained-context warning");

  // --plot writes the data (and the PNG when gnuplot is there).
  const std::string png = g_dir + "/llama31.png";
  const Run p = run("\"" + path + "\" --plot \"" + png + "\"", "llama31_plot");
  expect(p.status == 0, "llama31 --plot: exit status " + std::to_string(p.status) + ": " + p.err);
  const std::string dat = slurp(png + ".dat");
  std::istringstream in(dat);
  std::string line;
  int rows = 0;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') ++rows;
  expect(rows == 64, "llama31 --plot: " + std::to_string(rows) + " data rows, expected 64");
  if (std::system("gnuplot --version >/dev/null 2>&1") == 0)
    expect(std::filesystem::exists(png) && std::filesystem::file_size(png) > 1000,
           "llama31 --plot: no PNG although gnuplot is installed");
}

void qwen2_yarn() {
  const std::string path = write("qwen2_yarn.json", R"({
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
    "num_attention_heads": 28, "num_key_value_heads": 4, "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}})");
  const Run r = run("\"" + path + "\" --seq-len 131072", "qwen2_yarn");
  expect(r.status == 0, "qwen2_yarn: exit status " + std::to_string(r.status) + ": " + r.err);
  peal::RopeConfig c;
  c.head_dim = 128;
  c.rope_theta = 1e6;
  c.max_position_embeddings = 32768;
  c.scaling.type = peal::RopeType::Yarn;
  c.scaling.factor = 4;
  c.scaling.original_max_position_embeddings = 32768;
  // YaRN: low = floor(c(32)), high = ceil(c(1)), c(r) = D ln(L0 / (2 pi r)) / (2 ln theta);
  // pairs <= low kept, >= high scaled, between interpolated.
  const auto corr = [](long double rr) {
    return 128 * std::log(32768 / (rr * 2 * kPi)) / (2 * std::log(1e6L));
  };
  const long double lo = std::floor(corr(32)), hi = std::ceil(corr(1));
  check_table("qwen2_yarn", r.out, c, 131072, [&](int i, long double) {
    return i <= lo ? "kept" : i >= hi ? "scaled" : "interpolated";
  });
  const long double af = 0.1L * std::log(4.0L) + 1;  // YaRN get_mscale(4)
  expect(std::fabs(std::strtold(value(r.out, "attention_factor").c_str(), nullptr) - af) < 1e-9L,
         "qwen2_yarn: attention_factor " + value(r.out, "attention_factor"));
  expect(value(r.out, "seq_len") == "131072", "qwen2_yarn: seq_len");
  expect(contains(r.out, "warning: seq_len 131072 exceeds max_position_embeddings 32768"),
         "qwen2_yarn: seq_len warning");
  expect(contains(r.out, "  beta_fast                          (absent: 32)"),
         "qwen2_yarn: beta_fast default shown");
}

std::string list(const std::vector<double>& v) {
  std::ostringstream os;
  os.precision(17);
  os << "[";
  for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os.str() + "]";
}

void phi3_longrope() {
  // Phi-3-mini-128k-instruct's shape (hidden 3072, 32 heads: head_dim 96, 48 pairs,
  // original 4096, max 131072); the lists are illustrative, not the model's.
  std::vector<double> sf(48), lf(48);
  for (int i = 0; i < 48; ++i) {
    sf[std::size_t(i)] = 1.0 + 0.05 * i / 47;
    lf[std::size_t(i)] = 1.0 + 30.0 * std::pow(i / 47.0, 2);
  }
  const std::string path =
      write("phi3.json", std::string(R"({"architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
    "hidden_size": 3072, "num_attention_heads": 32, "max_position_embeddings": 131072,
    "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
    "rope_scaling": {"type": "longrope", "short_factor": )") +
                             list(sf) + R"(, "long_factor": )" + list(lf) + "}}");
  peal::RopeConfig c;
  c.head_dim = 96;
  c.rope_theta = 1e4;
  c.max_position_embeddings = 131072;
  c.scaling.type = peal::RopeType::LongRope;
  c.scaling.original_max_position_embeddings = 4096;
  c.scaling.short_factor = sf;
  c.scaling.long_factor = lf;
  for (double L : {131072.0, 2048.0}) {
    const std::string tag = L > 4096 ? "phi3_long" : "phi3_short";
    const Run r = run("\"" + path + "\" --seq-len " + std::to_string(int(L)), tag);
    expect(r.status == 0, tag + ": exit status " + std::to_string(r.status) + ": " + r.err);
    check_table(tag, r.out, c, L, [&](int, long double) { return L > 4096 ? "long" : "short"; });
    // The factor column is the list entry itself.
    const auto rows = table(r.out);
    for (std::size_t i = 0; i < rows.size() && i < 48; ++i)
      if (std::fabs(rows[i].factor - (L > 4096 ? lf : sf)[i]) > 1e-9L)
        fail(tag + ": factor of pair " + std::to_string(i) + " is not the list entry");
    const long double af = std::sqrt(1 + std::log(32.0L) / std::log(4096.0L));
    expect(std::fabs(std::strtold(value(r.out, "attention_factor").c_str(), nullptr) - af) < 1e-9L,
           tag + ": attention_factor " + value(r.out, "attention_factor"));
    expect(value(r.out, "rotary_dim") == "96", tag + ": rotary_dim");
    expect(value(r.out, "trained context") == "4096", tag + ": trained context");
  }
}

void gguf_qwen2vl() {
  peal_test::GgufBuilder g;
  g.str("general.architecture", "qwen2vl");
  g.u32("qwen2vl.block_count", 28);
  g.u32("qwen2vl.context_length", 32768);
  g.u32("qwen2vl.embedding_length", 3584);
  g.u32("qwen2vl.attention.head_count", 28);
  g.u32("qwen2vl.attention.head_count_kv", 4);
  g.f32("qwen2vl.rope.freq_base", 1000000.0f);
  g.i32_array("qwen2vl.rope.dimension_sections", {16, 24, 24, 0});
  const std::string path = g_dir + "/qwen2vl.gguf";
  peal_test::write_file(path, g.bytes());
  const Run r = run("\"" + path + "\"", "qwen2vl");
  expect(r.status == 0, "qwen2vl gguf: exit status " + std::to_string(r.status) + ": " + r.err);
  expect(contains(r.out, "GGUF v3, architecture qwen2vl"), "qwen2vl gguf: not read as GGUF");
  peal::RopeConfig c;
  c.head_dim = 128;
  c.rope_theta = 1e6;
  check_table("qwen2vl_gguf", r.out, c, 32768, [](int, long double) { return "-"; });
  const auto rows = table(r.out);
  const auto axes = peal::mrope_pair_axes({16, 24, 24}, false, 64);
  int bad = 0;
  for (std::size_t i = 0; i < rows.size() && i < 64; ++i)
    bad += rows[i].axis != std::string(1, "thw"[axes[i]]);
  expect(rows.size() == 64 && bad == 0, "qwen2vl gguf: axis column");
  expect(contains(r.out, "mrope_section                        [16, 24, 24]"),
         "qwen2vl gguf: sections");
}

void gguf_alibi() {  // an architecture without RoPE (llama.cpp's LLAMA_ROPE_TYPE_NONE)
  peal_test::GgufBuilder g;
  g.str("general.architecture", "bloom");
  g.u32("bloom.context_length", 2048);
  g.u32("bloom.embedding_length", 1024);
  g.u32("bloom.attention.head_count", 16);
  g.f32("bloom.attention.max_alibi_bias", 8.0f);
  const std::string path = g_dir + "/bloom.gguf";
  peal_test::write_file(path, g.bytes());
  const Run r = run("\"" + path + "\"", "bloom");
  expect(r.status == 0, "bloom gguf: exit status " + std::to_string(r.status) + ": " + r.err);
  expect(contains(r.out, "no rotary position encoding (ALiBi, max_alibi_bias 8)"),
         "bloom gguf: " + r.out);
}

void errors() {
  // A missing required key: the message names the key and the file.
  const std::string p1 = write("missing.json", R"({"hidden_size": 4096, "num_attention_heads": 32,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192}})");
  const Run r1 = run("\"" + p1 + "\"", "missing");
  expect(r1.status != 0, "missing key: exit status 0");
  expect(contains(r1.err, p1) && contains(r1.err, "low_freq_factor"),
         "missing key: message does not name the key and the file: " + r1.err);
  // A partial rotary factor that leaves an odd dimension: int(64 * 0.4) = 25.
  const std::string p2 = write("odd.json", R"({"hidden_size": 2048, "num_attention_heads": 32,
    "partial_rotary_factor": 0.4})");
  const Run r2 = run("\"" + p2 + "\"", "odd");
  expect(r2.status != 0, "odd rotary dim: exit status 0");
  expect(contains(r2.err, p2) && contains(r2.err, "= 25 must be even"),
         "odd rotary dim: message: " + r2.err);
  // A truncating (even) partial factor is a warning, not an error: int(80 * 0.33) = 26.
  const std::string p3 = write("trunc.json", R"({"hidden_size": 2560, "num_attention_heads": 32,
    "partial_rotary_factor": 0.33})");
  const Run r3 = run("\"" + p3 + "\"", "trunc");
  expect(r3.status == 0, "truncating factor: exit status " + std::to_string(r3.status));
  expect(contains(r3.out, "rotary_dim is its truncation 26") &&
             contains(r3.out, "coordinates 26 .. 79 pass through"),
         "truncating factor: warning missing");
  const Run r4 = run("\"" + g_dir + "/does-not-exist.json\"", "nofile");
  expect(r4.status != 0 && contains(r4.err, "does-not-exist.json"), "missing file: " + r4.err);
  const Run r5 = run("--seq-len -3", "badopt");
  expect(r5.status != 0 && contains(r5.err, "--seq-len"), "bad option: " + r5.err);
}

// ---- matrices: --generator and --transition ------------------------------------------------

using Mat = Eigen::MatrixXd;

std::string matrix_text(const Mat& X, const std::string& sep) {
  std::string s = "# a generator written by peal_inspect_check\n";
  char buf[40];
  for (Eigen::Index i = 0; i < X.rows(); ++i) {
    for (Eigen::Index j = 0; j < X.cols(); ++j) {
      std::snprintf(buf, sizeof buf, "%.17g", X(i, j));
      s += (j ? sep : std::string()) + buf;
    }
    s += i == 0 ? "   # first row\n" : "\n";
    if (i == 0) s += "\n";  // a blank line is skipped
  }
  return s;
}

std::string write_bytes(const std::string& name, const std::string& bytes) {
  const std::string path = g_dir + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// numpy's .npy format 1.0: magic, version, header length (u16 LE), the header dict padded with
// spaces to a multiple of 64 bytes and ending in '\n', then the data.
std::string npy_header(const std::string& descr, bool fortran, const std::string& shape) {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                  ", 'shape': " + shape + ", }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string s = "\x93NUMPY";
  s += '\x01', s += '\x00';
  s += char(h.size() & 0xff), s += char(h.size() >> 8);
  return s + h;
}

// X as '<f8' or '<f4' (or big-endian '>f8'), in C or Fortran order.
std::string npy(const Mat& X, const std::string& descr, bool fortran) {
  const long d = long(X.rows());
  std::string s =
      npy_header(descr, fortran, "(" + std::to_string(d) + ", " + std::to_string(d) + ")");
  const bool big = descr[0] == '>';
  const int size = descr[2] == '8' ? 8 : 4;
  for (long k = 0; k < d * d; ++k) {
    const double x = fortran ? X(k % d, k / d) : X(k / d, k % d);
    unsigned char b[8];
    if (size == 8) {
      std::uint64_t u;
      std::memcpy(&u, &x, 8);
      for (int i = 0; i < 8; ++i) b[i] = (u >> (8 * i)) & 0xff;
    } else {
      const float f = float(x);
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      for (int i = 0; i < 4; ++i) b[i] = (u >> (8 * i)) & 0xff;
    }
    for (int i = 0; i < size; ++i) s += char(b[big ? size - 1 - i : i]);
  }
  return s;
}

// The rest of the line after a label ("classification   3 rotations, ...").
std::string line_after(const std::string& out, const std::string& label) {
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, label.size(), label) == 0 && line.size() > label.size() &&
        line[label.size()] == ' ') {
      const std::size_t b = line.find_first_not_of(' ', label.size());
      return b == std::string::npos ? "" : line.substr(b);
    }
  return "(missing)";
}

struct BlockRow {
  std::string kind, coords, wavelength, decay, source;  // source: the rest (--transition)
  int length = 0;
  long double omega = 0, re = 0;
};

// The block table (--generator, --transition).
std::vector<BlockRow> block_rows(const std::string& out) {
  std::vector<BlockRow> rows;
  for_rows(out, "block", [&](const std::string&, std::istringstream& is) {
    BlockRow r;
    std::string omega, re;
    is >> r.kind >> r.length >> r.coords >> omega >> re >> r.wavelength >> r.decay;
    r.omega = omega == "-" ? 0 : std::strtold(omega.c_str(), nullptr);
    r.re = std::strtold(re.c_str(), nullptr);
    std::getline(is, r.source);
    rows.push_back(r);
  });
  return rows;
}

bool near(long double got, long double want, long double rel) {
  return std::fabs(got - want) <= rel * std::max(1.0L, std::fabs(want));
}
long double number(const std::string& s) { return std::strtold(s.c_str(), nullptr); }

Mat random_orthogonal(int d, std::mt19937& rng) {
  std::normal_distribution<double> g;
  Mat A(d, d);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) A(i, j) = g(rng);
  return Eigen::HouseholderQR<Mat>(A).householderQ();
}

// The generator of RotationBlock{ω, a} (docs/design.md §1) at rows/columns o, o + 1.
void rotation(Mat& J, int o, double omega, double a) {
  J(o, o) = J(o + 1, o + 1) = a;
  J(o, o + 1) = omega, J(o + 1, o) = -omega;
}

// A skew-symmetric X: rotations at 0.5, 1, 2 and one zero eigenvalue, in a random orthogonal
// basis; its three files must give the same classification and frequencies.
void generator_skew() {
  std::mt19937 rng(23);
  Mat J = Mat::Zero(7, 7);
  rotation(J, 0, 0.5, 0), rotation(J, 2, 1, 0), rotation(J, 4, 2, 0);
  const Mat Q = random_orthogonal(7, rng);
  Mat X = Q * J * Q.transpose();
  X = Mat((X - X.transpose()) / 2);  // exactly skew-symmetric
  struct Case {
    std::string tag, path, format;
    long double tol;
  };
  const std::vector<Case> cases = {
      {"skew_text", write("skew.txt", matrix_text(X, " ")), "(text, 7 x 7; decomposed as double)",
       1e-12L},
      {"skew_csv", write("skew.csv", matrix_text(X, ", ")), "(text, 7 x 7; decomposed as double)",
       1e-12L},
      {"skew_f8", write_bytes("skew_f8.npy", npy(X, "<f8", false)),
       "(npy <f8 C order, 7 x 7; decomposed as double)", 1e-12L},
      {"skew_f4_fortran", write_bytes("skew_f4.npy", npy(X, "<f4", true)),
       "(npy <f4 Fortran order, 7 x 7; decomposed as float)", 1e-5L},
  };
  for (const Case& c : cases) {
    const Run r = run("--generator \"" + c.path + "\"", c.tag);
    expect(r.status == 0, c.tag + ": exit status " + std::to_string(r.status) + ": " + r.err);
    expect(contains(r.out, c.format), c.tag + ": file line: " + line_after(r.out, "file"));
    expect(line_after(r.out, "classification") == "3 rotations, 1 constant coordinate",
           c.tag + ": classification " + line_after(r.out, "classification"));
    expect(line_after(r.out, "skew-symmetric").compare(0, 3, "yes") == 0, c.tag + ": not skew");
    const auto rows = block_rows(r.out);
    std::vector<long double> omegas;
    bool ok = rows.size() == 4;
    for (const BlockRow& b : rows) {
      if (b.kind == "rotation") {
        omegas.push_back(b.omega);
        ok = ok && b.re == 0 && b.decay == "none" && b.length == 1 &&
             near(number(b.wavelength), 2 * kPi / b.omega, 1e-9L);
      } else {
        ok = ok && b.kind == "pass-through" && b.wavelength == "-" && b.decay == "none";
      }
    }
    std::sort(omegas.begin(), omegas.end());
    ok = ok && omegas.size() == 3 && near(omegas[0], 0.5L, c.tol) && near(omegas[1], 1, c.tol) &&
         near(omegas[2], 2, c.tol);
    expect(ok, c.tag + ": block rows:\n" + r.out);
    expect(contains(r.out, "0 warning(s)"), c.tag + ": warnings:\n" + r.out);
  }
}

// X = P J P⁻¹ with a decay (λ = −0.5), a growth (0.05), a damped rotation (ω = 0.3, a = −0.1)
// and a Jordan chain of length 3 at −0.2, P of κ₂ = 3.
void generator_jordan() {
  std::mt19937 rng(5);
  Mat J = Mat::Zero(7, 7);
  J(0, 0) = -0.5;
  J(1, 1) = J(2, 2) = J(3, 3) = -0.2, J(1, 2) = J(2, 3) = 1;
  rotation(J, 4, 0.3, -0.1);
  J(6, 6) = 0.05;
  Eigen::VectorXd sv(7);
  sv << 1, 3, 1.5, 2, 1.2, 2.5, 1.8;
  const Mat Q1 = random_orthogonal(7, rng), Q2 = random_orthogonal(7, rng);
  const Mat X = Q1 * sv.asDiagonal() * Q2 * J * Q2.transpose() * sv.cwiseInverse().asDiagonal() *
                Q1.transpose();  // P J P⁻¹, P = Q1 diag(sv) Q2
  const std::string path = write("jordan.txt", matrix_text(X, "\t"));
  const Run r = run("--generator \"" + path + "\"", "jordan");
  expect(r.status == 0, "jordan: exit status " + std::to_string(r.status) + ": " + r.err);
  const std::string cls = line_after(r.out, "classification");
  for (const char* part :
       {"1 rotation (1 damped, a ∈ [-0.1, -0.1])", "1 decay", "1 growth",
        "a Jordan chain of length 3 at λ = -0.2", "polynomial growth of degree 2"})
    expect(contains(cls, part),
           std::string("jordan: classification lacks \"") + part + "\": " + cls);
  int seen = 0;
  for (const BlockRow& b : block_rows(r.out)) {
    const long double tol = 1e-4L;  // the chain's eigenvalue: ~ (κ u)^(1/3) ‖X‖
    if (b.kind == "real" && near(b.re, -0.5L, tol))
      seen += 1, expect(near(number(b.decay), 2, tol) && b.wavelength == "-", "jordan: decay row");
    else if (b.kind == "real" && near(b.re, 0.05L, tol))
      seen += 2, expect(b.decay == "growth", "jordan: growth row says " + b.decay);
    else if (b.kind == "jordan")
      seen += 4, expect(b.length == 3 && near(b.re, -0.2L, tol) && near(number(b.decay), 5, 1e-3L),
                        "jordan: chain row");
    else if (b.kind == "rotation")
      seen += 8, expect(near(b.omega, 0.3L, tol) && near(b.re, -0.1L, tol) &&
                            near(number(b.wavelength), 2 * kPi / b.omega, 1e-9L) &&
                            near(number(b.decay), 1 / -b.re, 1e-9L),
                        "jordan: rotation row");
    else
      seen += 100;
  }
  expect(seen == 15, "jordan: the four blocks, once each:\n" + r.out);
  expect(contains(r.out, "warning: growth") && contains(r.out, "1 warning(s)"),
         "jordan: the growth warning:\n" + r.out);
}

// The tolerance options reach the library: X = Q diag(−1e−6, −0.5) ⊕ R(0.3, 0) Qᵀ. By default
// (zero = 64 d u) the slow decay stays a decay; with --zero 1e-3 (|λ| below 1e−3 ‖X‖ ≈ 6e−4)
// it is exactly 0, a constant coordinate; the tolerances line shows the value used. A value
// that is not a number, or a tolerance without a matrix, is a usage error; a negative one is
// the library's refusal, which names the option (for --transition too).
void generator_tolerances() {
  std::mt19937 rng(31);
  Mat J = Mat::Zero(4, 4);
  J(0, 0) = -1e-6, J(1, 1) = -0.5;
  rotation(J, 2, 0.3, 0);
  const Mat Q = random_orthogonal(4, rng);
  const std::string path = write("slow_decay.txt", matrix_text(Q * J * Q.transpose(), " "));
  const Run d = run("--generator \"" + path + "\"", "tolerance_default");
  expect(d.status == 0 && line_after(d.out, "classification") == "1 rotation, 2 decays",
         "tolerance default: classification " + line_after(d.out, "classification") + d.err);
  const Run z = run("--generator \"" + path + "\" --zero 1e-3 --kappa-warning 50",
                    "tolerance_zero");
  expect(z.status == 0 &&
             line_after(z.out, "classification") == "1 rotation, 1 decay, 1 constant coordinate",
         "--zero 1e-3: classification " + line_after(z.out, "classification") + z.err);
  const std::string tl = line_after(z.out, "tolerances");
  expect(contains(tl, "zero 0.001,") && contains(tl, "kappa_warning 50"),
         "--zero 1e-3 --kappa-warning 50: tolerances line " + tl);
  expect(contains(z.out, "decided: "), "--zero 1e-3: no decided line:\n" + z.out);
  const Run m = run("--transition \"" + path + "\" --zero -1", "tolerance_negative");
  expect(m.status != 0 && contains(m.err, "tolerance zero must be finite and > 0"),
         "--transition --zero -1: " + m.err);
  const Run n = run("--generator \"" + path + "\" --rank x", "tolerance_not_number");
  expect(n.status != 0 && contains(n.err, "--rank must be a number"), "--rank x: " + n.err);
  const Run c = run("--cluster 1e-3", "tolerance_no_matrix");
  expect(c.status != 0 && contains(c.err, "are for --generator"), "--cluster alone: " + c.err);
  const Run t = run("--generator \"" + path + "\" --skew 1e-9 --skew 1e-9", "tolerance_twice");
  expect(t.status != 0 && contains(t.err, "--skew given twice"), "--skew twice: " + t.err);
}

// A transition M = Q (−I₂ ⊕ R(0.5) ⊕ 0.9) Qᵀ: −1 twice is a rotation by π (wavelength 2
// positions), R(0.5) a rotation at 0.5, 0.9 a decay of length 1/|log 0.9|.
void transition_pi() {
  std::mt19937 rng(7);
  Mat B = Mat::Zero(5, 5);
  B(0, 0) = B(1, 1) = -1;
  B(2, 2) = B(3, 3) = std::cos(0.5), B(2, 3) = std::sin(0.5), B(3, 2) = -std::sin(0.5);
  B(4, 4) = 0.9;
  const Mat Q = random_orthogonal(5, rng);
  const Mat M = Q * B * Q.transpose();
  const std::string path = write("transition.txt", matrix_text(M, ","));
  const Run r = run("--transition \"" + path + "\"", "transition");
  expect(r.status == 0, "transition: exit status " + std::to_string(r.status) + ": " + r.err);
  expect(line_after(r.out, "classification") == "2 rotations, 1 decay",
         "transition: classification " + line_after(r.out, "classification"));
  expect(contains(r.out, "mu_of_M"), "transition: no mu_of_M column");
  int seen = 0;
  for (const BlockRow& b : block_rows(r.out)) {
    if (b.kind == "rotation" && near(b.omega, kPi, 1e-9L))
      seen += 1, expect(near(number(b.wavelength), 2, 1e-9L) && b.decay == "none" &&
                            contains(b.source, "-1 (two chains: a rotation by pi"),
                        "transition: the rotation by pi: " + b.source);
    else if (b.kind == "rotation" && near(b.omega, 0.5L, 1e-9L))
      seen += 2, expect(near(number(b.wavelength), 4 * kPi, 1e-9L) &&
                            contains(b.source, "0.8775825619±0.4794255386i"),
                        "transition: the rotation at 0.5: " + b.source);
    else if (b.kind == "real")
      seen += 4,
          expect(near(b.re, std::log(0.9L), 1e-9L) &&
                     near(number(b.decay), -1 / std::log(0.9L), 1e-9L) && contains(b.source, "0.9"),
                 "transition: the decay: " + b.source);
    else
      seen += 100;
  }
  expect(seen == 7, "transition: the three blocks, once each:\n" + r.out);

  // −1 once has no real logarithm: the library's refusal, prefixed by the file; padded on request.
  const std::string p2 = write("unpaired.txt", "-1 0\n0 0.5\n");
  const Run r2 = run("--transition \"" + p2 + "\"", "unpaired");
  expect(r2.status != 0 && contains(r2.err, "peal_inspect: " + p2 + ": ") &&
             contains(r2.err, "no real logarithm"),
         "unpaired: " + r2.err);
  const Run r3 = run("--transition \"" + p2 + "\" --pad-unpaired", "unpaired_padded");
  expect(r3.status == 0 && contains(r3.out, "padding                              1 coordinate(s)"),
         "unpaired --pad-unpaired: " + r3.err + r3.out);
}

void matrix_errors() {
  struct Bad {
    std::string tag, path;
    std::vector<std::string> says;
  };
  Mat X3 = Mat::Zero(3, 3);
  X3(0, 1) = 1, X3(1, 0) = -1;
  std::string truncated = npy(X3, "<f8", false);
  truncated.resize(truncated.size() - 30);
  std::string trailing = npy(X3, "<f8", false) + "extra";
  Mat nan = X3;
  nan(0, 2) = std::nan("");
  Mat chain5 = Mat::Zero(5, 5);  // the nilpotent shift: a Jordan chain of length 5 at 0
  for (int i = 0; i < 4; ++i) chain5(i, i + 1) = 1;
  const std::vector<Bad> bad = {
      {"ragged",
       write("ragged.txt", "1 2 3\n# a comment\n4 5\n7 8 9\n"),
       {"line 3: 2 entries", "ragged"}},
      {"nan_text", write("nan.txt", "1 2\nnan 3\n"), {"line 2", "\"nan\" is not finite"}},
      {"inf_text", write("inf.txt", "1 -inf\n2 3\n"), {"line 1", "\"-inf\" is not finite"}},
      {"word", write("word.txt", "1 2\n3 x4\n"), {"line 2", "\"x4\" is not a number"}},
      {"empty_entry", write("comma.txt", "1,,2\n3,4\n"), {"line 1", "empty entry"}},
      {"non_square_text",
       write("rect.txt", "1 2 3\n4 5 6\n"),
       {"2 rows of 3 entries", "not square"}},
      {"empty_text", write("empty.txt", "# nothing\n\n"), {"no numbers"}},
      {"big_endian", write_bytes("big.npy", npy(X3, ">f8", false)), {"'>f8' is big-endian"}},
      {"object", write_bytes("object.npy", npy_header("|O", false, "(3, 3)")), {"object array"}},
      {"int", write_bytes("int.npy", npy_header("<i8", false, "(3, 3)")), {"'<i8' not supported"}},
      {"three_d",
       write_bytes("3d.npy", npy_header("<f8", false, "(2, 2, 2)")),
       {"(2, 2, 2) is not 2-D"}},
      {"non_square_npy",
       write_bytes("rect.npy", npy_header("<f8", false, "(3, 4)")),
       {"not square"}},
      {"truncated",
       write_bytes("truncated.npy", truncated),
       {"truncated .npy file", "72 bytes of data, 42 present"}},
      {"trailing", write_bytes("trailing.npy", trailing), {"bytes after"}},
      {"huge",
       write_bytes("huge.npy", npy_header("<f8", false, "(2000, 2000)")),
       {"d = 2000 is larger than 1024"}},
      // Fortran order read as such: the NaN at (row 0, column 2), not (row 2, column 0).
      {"nan_fortran",
       write_bytes("nan_f.npy", npy(nan, "<f4", true)),
       {"entry (row 0, column 2) is not finite"}},
      {"nan_c",
       write_bytes("nan_c.npy", npy(nan, "<f8", false)),
       {"entry (row 0, column 2) is not finite"}},
      {"chain5",
       write("chain5.txt", matrix_text(chain5, " ")),
       {"canonical_form", "Jordan chain of length 5"}},
      {"missing", g_dir + "/no-such-matrix.txt", {"cannot open"}},
  };
  for (const Bad& b : bad) {
    const Run r = run("--generator \"" + b.path + "\"", b.tag);
    bool ok = r.status != 0 && contains(r.err, "peal_inspect: " + b.path + ": ");
    for (const std::string& s : b.says) ok = ok && contains(r.err, s);
    expect(ok, b.tag + ": exit status " + std::to_string(r.status) + ", message: " + r.err);
  }
  const Run u1 = run("--generator \"" + g_dir + "/skew.txt\" --seq-len 10", "generator_usage");
  expect(u1.status != 0 && contains(u1.err, "take no config file"),
         "--generator with --seq-len: " + u1.err);
  const Run u2 = run("--generator", "generator_nofile");
  expect(u2.status != 0 && contains(u2.err, "needs a file"),
         "--generator without a file: " + u2.err);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <peal_inspect> <scratch directory>\n", argv[0]);
    return 2;
  }
  g_exe = argv[1];
  g_dir = argv[2];
  std::error_code ec;
  std::filesystem::remove_all(g_dir, ec);
  std::filesystem::create_directories(g_dir, ec);
  if (ec) {
    std::fprintf(stderr, "cannot create %s\n", g_dir.c_str());
    return 2;
  }
  try {
    llama31();
    qwen2_yarn();
    phi3_longrope();
    gguf_qwen2vl();
    gguf_alibi();
    errors();
    generator_skew();
    generator_jordan();
    generator_tolerances();
    transition_pi();
    matrix_errors();
  } catch (const std::exception& e) {
    fail(std::string("exception: ") + e.what());
  }
  std::printf(g_failures ? "%d check(s) FAILED\n" : "all peal_inspect checks passed\n", g_failures);
  return g_failures ? 1 : 0;
}
