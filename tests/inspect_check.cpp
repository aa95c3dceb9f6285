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
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <peal/presets/mrope.hpp>
#include <peal/presets/rope.hpp>
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

// The table: the lines after the header that starts with "pair".
std::vector<Row> table(const std::string& out) {
  std::vector<Row> rows;
  std::istringstream in(out);
  std::string line;
  bool on = false;
  while (std::getline(in, line)) {
    std::istringstream is(line);
    std::string first;
    is >> first;
    if (first == "pair") {
      on = true;
      continue;
    }
    if (!on) continue;
    if (line.empty()) break;
    Row r;
    r.i = std::atoi(first.c_str());
    std::string w, l, f;
    is >> w >> l >> f >> r.band >> r.axis;
    r.omega = std::strtold(w.c_str(), nullptr);
    r.wavelength = std::strtold(l.c_str(), nullptr);
    r.factor = std::strtold(f.c_str(), nullptr);
    rows.push_back(r);
  }
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
  } catch (const std::exception& e) {
    fail(std::string("exception: ") + e.what());
  }
  std::printf(g_failures ? "%d check(s) FAILED\n" : "all peal_inspect checks passed\n", g_failures);
  return g_failures ? 1 : 0;
}
