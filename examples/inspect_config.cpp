// peal_inspect: what peal understands of a model's positional-encoding configuration, or of
// a generator it did not build.
//
//   peal_inspect config.json [--seq-len N] [--plot wavelengths.png]   a Hugging Face config
//   peal_inspect model.gguf  [--seq-len N] [--plot wavelengths.png]   a GGUF file (by magic)
//   peal_inspect                                                      a built-in Llama 3.1
//   peal_inspect --generator X.txt|X.npy [tolerances]                 A(τ) = exp(τX)
//   peal_inspect --transition M.txt|M.npy [--pad-unpaired] [tolerances] A(n) = Mⁿ, integer n
//
// For a config.json it first prints the model's layers (model_positions_from_hf): the layer
// pattern compressed ("layers 0-4, 6-10: rope theta 10000 ..., sliding window 1024"), where
// each fact came from (config key, class default, architecture table) and the keys read but
// not modelled; --layer-type T picks the layers whose RoPE the rest describes (default: the
// first RoPE layer).
// Prints the head and rotary dimensions, the layout, theta, the scaling type with every
// field it uses (given or defaulted), the attention factor, the M-RoPE sections, then one
// row per rotary pair:
//   i  omega_i  wavelength 2 pi / omega_i (tokens)  factor = omega_default / omega_i  band
// where omega_default = theta^(-2i/D) (no scaling) and band says what the scaling did:
//   kept (factor 1), scaled (factor = rope_scaling.factor), interpolated (in between: YaRN's
//   ramp, Llama 3's smooth band), rebased (dynamic NTK's new theta), short/long (LongRoPE's
//   list in use), "-" for plain RoPE; with M-RoPE a last column gives the axis (t, h, w).
// Warnings: pairs whose wavelength exceeds the trained context, a rotary dimension that
// truncates head_dim * partial_rotary_factor, seq_len past max_position_embeddings.
// Errors (a missing or invalid key, an unreadable file) are the library's messages, which
// name the key, prefixed by the file; exit status 1.
//
// --seq-len N: the length the table is computed for (dynamic NTK, LongRoPE); default
// max_position_embeddings (GGUF: context_length). --plot P: writes P.dat (i, default and
// scaled wavelength) and P.gp, and runs gnuplot on it if gnuplot is installed.
//
// --generator X: a d x d generator (a learned skew-symmetric X, a fitted state-space matrix)
// through peal::canonical_form (docs/canonical-form.md); --transition M: a discrete-time
// transition M = A(1) through peal::from_transition (X = log M; --pad-unpaired passes
// TransitionOptions::pad_unpaired). The file is a text matrix (rows on lines, entries
// separated by whitespace or commas, '#' comments) or a .npy array ('<f8' or '<f4', C or
// Fortran order; told by its magic), read by examples/matrix_file.hpp, d <= 1024. '<f4' data
// is decomposed as float (float tolerances, a float encoding), the rest as double. Prints the
// report's summary (classification, kappa(P), the residual, the tolerances used and what they
// decided), then one row per block:
//   block  kind  length  coords  omega  a|lambda  wavelength 2 pi / omega  decay length 1/|a|
// (positions are the units; decay length "growth" when a or lambda > 0, "none" when 0, "-"
// where it does not apply), for --transition also the eigenvalue of M the block came from;
// then the warnings (growth, an ill-conditioned P, a residual above sqrt(u)). Errors (a ragged
// or non-numeric line, NaN, a non-square or unsupported .npy, the library's refusals) are
// prefixed by the file; exit status 1.
// [tolerances]: --cluster C, --coupling Z, --rank R, --zero E, --skew S, --kappa-warning K set
// the CanonicalOptions of the same names (include/peal/canonical_form.hpp; each a number, which
// the library requires finite and > 0); the report's "tolerances" line shows the values used
// and the "decided" lines what they decided.
//
// Built as the target peal_inspect (examples/CMakeLists.txt); tested by
// tests/inspect_check.cpp (ctest peal_inspect_configs).
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <peal/canonical_form.hpp>
#include <peal/from_transition.hpp>
#include <peal/models/gguf_config.hpp>
#include <peal/models/hf_config.hpp>
#include <peal/presets/mrope.hpp>
#include <peal/presets/rope.hpp>
#include <string>
#include <vector>

#include "matrix_file.hpp"

namespace {

const char* kBuiltin = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 131072,
  "rope_theta": 500000.0,
  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
})";

struct Args {
  std::string path;  // empty: the built-in config
  std::optional<double> seq_len;
  std::string plot;
  std::string layer_type;   // --layer-type: which layers' RoPE the pair table shows
  std::string matrix;       // --generator / --transition: the matrix file
  bool transition = false;  // the matrix is M = A(1), not X
  bool pad_unpaired = false;
  peal::CanonicalOptions tolerances;  // --cluster, --coupling, ... (--generator, --transition)
  bool any_tolerance = false;
};

// The tolerance options and the CanonicalOptions field each one sets.
std::optional<double>* tolerance_option(peal::CanonicalOptions& o, const std::string& flag) {
  if (flag == "--cluster") return &o.cluster;
  if (flag == "--coupling") return &o.coupling;
  if (flag == "--rank") return &o.rank;
  if (flag == "--zero") return &o.zero;
  if (flag == "--skew") return &o.skew;
  if (flag == "--kappa-warning") return &o.kappa_warning;
  return nullptr;
}

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr,
               "peal_inspect: %s\nusage: peal_inspect [config.json | model.gguf] [--seq-len N] "
               "[--plot wavelengths.png] [--layer-type T]\n"
               "       peal_inspect --generator X.txt|X.npy [tolerances]\n"
               "       peal_inspect --transition M.txt|M.npy [--pad-unpaired] [tolerances]\n"
               "       tolerances: [--cluster C] [--coupling Z] [--rank R] [--zero E] [--skew S] "
               "[--kappa-warning K]\n",
               msg);
  std::exit(1);
}

Args parse_args(int argc, char** argv) {
  Args a;
  bool config_options = false;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--generator" || s == "--transition") {
      if (i + 1 >= argc) usage((s + " needs a file").c_str());
      if (!a.matrix.empty()) usage("one of --generator or --transition, once");
      a.matrix = argv[++i];
      a.transition = s == "--transition";
      if (a.matrix.empty()) usage((s + " needs a file").c_str());
    } else if (s == "--pad-unpaired") {
      a.pad_unpaired = true;
    } else if (std::optional<double>* t = tolerance_option(a.tolerances, s)) {
      if (i + 1 >= argc) usage((s + " needs a value").c_str());
      const std::string v = argv[++i];
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0') usage((s + " must be a number, got \"" + v + "\"").c_str());
      if (*t) usage((s + " given twice").c_str());
      *t = x;  // finite and > 0: checked by canonical_form, whose message names the option
      a.any_tolerance = true;
    } else if (s == "--seq-len" || s == "--plot" || s == "--layer-type") {
      config_options = true;
      if (i + 1 >= argc) usage((s + " needs a value").c_str());
      const std::string v = argv[++i];
      if (s == "--layer-type") {
        a.layer_type = v;
        continue;
      }
      if (s == "--plot") {
        a.plot = v;
        continue;
      }
      char* end = nullptr;
      const double n = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(n > 0) || !std::isfinite(n))
        usage(("--seq-len must be a number > 0, got \"" + v + "\"").c_str());
      a.seq_len = n;
    } else if (s == "-h" || s == "--help") {
      usage("inspect a model's RoPE configuration");
    } else if (!s.empty() && s[0] == '-') {
      usage(("unknown option " + s).c_str());
    } else if (a.path.empty()) {
      a.path = s;
    } else {
      usage("only one file");
    }
  }
  if (!a.matrix.empty() && (!a.path.empty() || config_options))
    usage("--generator / --transition take no config file, --seq-len, --plot or --layer-type");
  if (a.pad_unpaired && !a.transition) usage("--pad-unpaired is for --transition");
  if (a.any_tolerance && a.matrix.empty())
    usage("--cluster, --coupling, --rank, --zero, --skew and --kappa-warning are for --generator "
          "and --transition");
  return a;
}

// Only a regular file is looked into: reading the magic from a pipe (`cat config.json |
// peal_inspect /dev/stdin`) would consume it before the JSON reader opens the path again, and
// opening a FIFO without a writer would block. peal's GGUF reader refuses other files anyway.
bool is_gguf(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {0, 0, 0, 0};
  in.read(magic, 4);
  return in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

std::string num(long double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10Lg", x);
  return buf;
}

void field(const char* name, const std::optional<double>& v, const char* dflt) {
  if (v)
    std::printf("  %-34s %s\n", name, num(*v).c_str());
  else
    std::printf("  %-34s (absent: %s)\n", name, dflt);
}

void factor_list(const char* name, const std::optional<std::vector<double>>& v) {
  if (!v) {
    std::printf("  %-34s (absent)\n", name);
    return;
  }
  double lo = INFINITY, hi = -INFINITY;
  for (double x : *v) lo = std::min(lo, x), hi = std::max(hi, x);
  std::printf("  %-34s %zu entries in [%s, %s]\n", name, v->size(), num(lo).c_str(),
              num(hi).c_str());
}

// Every field the scaling type reads, with the value or the default peal (HF) uses.
void print_scaling(const peal::RopeConfig& c, double seq_len) {
  const peal::RopeScaling& s = c.scaling;
  std::printf("rope_type                            %s\n", peal::to_string(s.type));
  switch (s.type) {
    case peal::RopeType::Default:
      break;
    case peal::RopeType::Linear:
      field("factor", s.factor, "required");
      break;
    case peal::RopeType::Dynamic:
      field("factor", s.factor, "required");
      field("max_position_embeddings", c.max_position_embeddings, "required");
      std::printf("  %-34s %s\n", "seq_len (table length)", num(seq_len).c_str());
      break;
    case peal::RopeType::Yarn:
      field("factor", s.factor, "max_position_embeddings / original");
      field("original_max_position_embeddings", s.original_max_position_embeddings,
            "max_position_embeddings");
      field("beta_fast", s.beta_fast, "32");
      field("beta_slow", s.beta_slow, "1");
      std::printf("  %-34s %s\n", "truncate",
                  s.truncate ? (*s.truncate ? "true" : "false") : "(absent: true)");
      field("attention_factor", s.attention_factor, "from mscale / mscale_all_dim");
      field("mscale", s.mscale, "unused");
      field("mscale_all_dim", s.mscale_all_dim, "unused");
      break;
    case peal::RopeType::LongRope:
      factor_list("short_factor", s.short_factor);
      factor_list("long_factor", s.long_factor);
      field("original_max_position_embeddings", s.original_max_position_embeddings,
            "max_position_embeddings");
      field("factor", s.factor, "max_position_embeddings / original");
      field("attention_factor", s.attention_factor, "sqrt(1 + ln(factor) / ln(original))");
      std::printf("  %-34s %s\n", "seq_len (selects the list)", num(seq_len).c_str());
      break;
    case peal::RopeType::Llama3:
      field("factor", s.factor, "required");
      field("low_freq_factor", s.low_freq_factor, "required");
      field("high_freq_factor", s.high_freq_factor, "required");
      field("original_max_position_embeddings", s.original_max_position_embeddings, "required");
      break;
  }
}

const char* band(const peal::RopeConfig& c, double seq_len, long double factor) {
  const auto& s = c.scaling;
  const auto same = [](long double a, long double b) {
    return std::fabs(a - b) <= 1e-12L * std::fabs(b);
  };
  switch (s.type) {
    case peal::RopeType::Default:
      return c.frequency_factors.empty() ? "-" : (same(factor, 1) ? "kept" : "freq_factors");
    case peal::RopeType::Dynamic:
      return same(factor, 1) ? "kept" : "rebased";
    case peal::RopeType::LongRope: {
      const double L0 = s.original_max_position_embeddings ? *s.original_max_position_embeddings
                                                           : *c.max_position_embeddings;
      return seq_len > L0 ? "long" : "short";
    }
    case peal::RopeType::Linear:
    case peal::RopeType::Yarn:
    case peal::RopeType::Llama3: {
      const long double F =
          s.factor ? *s.factor
                   : *c.max_position_embeddings / *s.original_max_position_embeddings;  // yarn only
      if (same(factor, 1)) return "kept";
      if (same(factor, F)) return "scaled";
      return "interpolated";
    }
  }
  return "?";
}

std::string quote_gp(const std::string& s) {  // a gnuplot single-quoted string
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("''") : std::string(1, ch);
  return out + "'";
}

void plot(const std::string& png, const std::vector<long double>& def,
          const std::vector<long double>& w, double trained, const std::string& title) {
  const long double two_pi = 2 * std::acos(-1.0L);
  const std::string dat = png + ".dat", gp = png + ".gp";
  {
    std::ofstream out(dat);
    out << "# i default_wavelength scaled_wavelength\n";
    for (std::size_t i = 0; i < w.size(); ++i)
      out << i << " " << num(two_pi / def[i]) << " " << num(two_pi / w[i]) << "\n";
    if (!out) peal::detail::fail("peal_inspect: cannot write " + dat);
  }
  {
    std::ofstream out(gp);
    out << "set terminal pngcairo size 800,500 noenhanced\nset output " << quote_gp(png)
        << "\nset title " << quote_gp(title) << "\nset logscale y\nset grid\n"
        << "set xlabel 'pair i'\nset ylabel 'wavelength 2 pi / omega_i (tokens)'\n"
        << "set key top left\n";
    if (trained > 0)
      out << "set arrow from graph 0, first " << trained << " to graph 1, first " << trained
          << " nohead dt 2 lc rgb 'red'\n";
    out << "plot " << quote_gp(dat) << " u 1:2 w lp pt 7 ps 0.4 t 'default', '' u 1:3 w l lw 2 "
        << "t 'as configured'\n";
    if (!out) peal::detail::fail("peal_inspect: cannot write " + gp);
  }
  std::printf("\nplot data: %s, script: %s\n", dat.c_str(), gp.c_str());
  if (std::system("gnuplot --version >/dev/null 2>&1") != 0) {
    std::printf("gnuplot not found: run `gnuplot %s` where it is installed\n", gp.c_str());
    return;
  }
  if (gp.find_first_of("\"$`\\") != std::string::npos)
    peal::detail::fail("peal_inspect: not running gnuplot on a path with \", $, ` or \\: " + gp);
  const std::string cmd = "gnuplot \"" + gp + "\"";
  if (std::system(cmd.c_str()) != 0) peal::detail::fail("peal_inspect: gnuplot failed on " + gp);
  std::printf("wrote %s\n", png.c_str());
}

// The per-layer table, the facts with their sources and the keys not modelled; returns the
// layer whose RoPE the pair table shows (the first RoPE layer, or of type `type`), or nullptr.
const peal::LayerPositions* print_model(const peal::ModelPositions& m, const std::string& type) {
  std::printf("model_type                           %s%s\n", m.model_type.c_str(),
              m.architecture_known ? "" : " (not in the architecture table: defaults)");
  std::printf("layers                               %zu\n", m.layers.size());
  for (const std::string& line : peal::describe_layers(m)) std::printf("  %s\n", line.c_str());
  if (m.kv_lora_rank)
    std::printf("MLA                                  kv_lora_rank %d, q_lora_rank %d\n",
                m.kv_lora_rank, m.q_lora_rank);
  std::printf("where the facts came from\n");
  for (const peal::ModelFact& f : m.facts)
    std::printf("  %-34s %s  [%s]\n", f.name.c_str(), f.value.c_str(), f.source.c_str());
  if (m.not_modelled.empty()) {
    std::printf("not modelled                         none\n");
  } else {
    std::printf("not modelled (read, not applied by peal)\n");
    for (const peal::NotModelled& n : m.not_modelled)
      std::printf("  warning: %s = %s: %s\n", n.key.c_str(), n.value.c_str(), n.why.c_str());
  }
  const peal::LayerPositions* shown = nullptr;
  for (const peal::LayerPositions& L : m.layers)
    if ((L.encoding == peal::LayerEncoding::Rope || L.encoding == peal::LayerEncoding::MRope) &&
        (type.empty() || L.layer_type == type)) {
      shown = &L;
      break;
    }
  if (!shown) {
    std::printf("no RoPE layer%s: no pair table\n",
                type.empty() ? "" : (" of type " + type).c_str());
    return nullptr;
  }
  std::printf("table below is of                    layer type %s (--layer-type to choose)\n",
              shown->layer_type.c_str());
  if (shown->rotary_offset)
    std::printf("rotated part                         coordinates [%d, %d) of the %d-dim q/k head\n",
                shown->rotary_offset, shown->qk_head_dim, shown->qk_head_dim);
  return shown;
}

int inspect(const Args& a) {
  peal::RopeConfig cfg;
  std::optional<double> context;  // GGUF context_length
  const std::string name = a.path.empty() ? "(built-in Llama 3.1 config)" : a.path;
  if (!a.path.empty() && is_gguf(a.path)) {
    const peal::GgufConfig g = peal::rope_config_from_gguf(a.path);
    std::printf(
        "file                                 %s (GGUF v%u, architecture %s, llama.cpp "
        "rope type %s)\n",
        name.c_str(), g.version, g.architecture.c_str(), peal::to_string(g.rope_type));
    if (g.rope_type == peal::GgufRopeType::None) {
      std::printf("no rotary position encoding");
      if (g.max_alibi_bias)
        std::printf(" (ALiBi, max_alibi_bias %s)", num(*g.max_alibi_bias).c_str());
      std::printf("\n");
      return 0;
    }
    cfg = g.rope;
    if (g.context_length) context = *g.context_length;
  } else {
    peal::ModelReadOptions opt;
    opt.allow_not_modelled = true;  // the inspector lists them
    const peal::ModelPositions m =
        a.path.empty() ? peal::model_positions_from_hf(nlohmann::json::parse(kBuiltin), opt)
                       : peal::model_positions_from_hf_file(a.path, opt);
    std::printf("file                                 %s (Hugging Face config.json)\n",
                name.c_str());
    const peal::LayerPositions* shown = print_model(m, a.layer_type);
    if (!shown) return 0;
    cfg = shown->rope;
  }

  const int D = peal::rope_rotary_dim(cfg), half = D / 2;
  const double seq_len = a.seq_len                     ? *a.seq_len
                         : cfg.max_position_embeddings ? *cfg.max_position_embeddings
                         : context                     ? *context
                                                       : 0;
  std::printf("head_dim                             %d\n", cfg.head_dim);
  std::printf("rotary_dim                           %d (partial_rotary_factor %s)\n", D,
              num(cfg.partial_rotary_factor).c_str());
  std::printf("pass-through coordinates             %d\n", cfg.head_dim - D);
  std::printf("layout                               %s\n",
              cfg.layout == peal::Layout::HalfSplit
                  ? "half-split: pair i = (i, i + rotary_dim/2), HF rotate_half"
                  : "interleaved: pair i = (2i, 2i + 1), GPT-J / ggml normal");
  std::printf("rope_theta                           %s\n", num(cfg.rope_theta).c_str());
  if (cfg.max_position_embeddings)
    std::printf("max_position_embeddings              %s\n",
                num(*cfg.max_position_embeddings).c_str());
  print_scaling(cfg, seq_len);
  if (!cfg.frequency_factors.empty())
    std::printf("frequency_factors                    %zu (GGUF rope_freqs: omega_i / f_i)\n",
                cfg.frequency_factors.size());
  std::vector<int> axes;
  if (!cfg.scaling.mrope_section.empty()) {
    const auto& s = cfg.scaling.mrope_section;
    std::printf("mrope_section                        [%d, %d, %d]%s (pairs on t, h, w)\n", s[0],
                s[1], s[2], cfg.scaling.mrope_interleaved ? " interleaved" : "");
    axes = peal::mrope_pair_axes(s, cfg.scaling.mrope_interleaved, half);
  } else {
    std::printf("mrope_section                        none (1-D RoPE)\n");
  }

  peal::RopeConfig plain = cfg;  // omega_default: theta^(-2i/D), nothing else
  plain.scaling = peal::RopeScaling{};
  plain.frequency_factors.clear();
  peal::RopeConfig used = cfg;
  used.scaling.mrope_section.clear();
  const peal::RopeFrequencies def = peal::rope_frequencies(plain);
  const peal::RopeFrequencies f = peal::rope_frequencies(used, seq_len);
  std::printf("seq_len                              %s%s\n", num(seq_len).c_str(),
              a.seq_len ? " (--seq-len)" : " (default: max_position_embeddings)");
  std::printf("attention_factor                     %s (scales the rotary part of q and k)\n",
              num(f.attention_factor).c_str());

  // The trained context: original_max_position_embeddings if given, else the model's length.
  double trained = 0;
  const char* trained_from = "";
  if (cfg.scaling.original_max_position_embeddings) {
    trained = *cfg.scaling.original_max_position_embeddings;
    trained_from = "original_max_position_embeddings";
  } else if (cfg.max_position_embeddings) {
    trained = *cfg.max_position_embeddings;
    trained_from = "max_position_embeddings";
  } else if (context) {
    trained = *context;
    trained_from = "context_length";
  }
  if (trained > 0)
    std::printf("trained context                      %s (%s)\n", num(trained).c_str(),
                trained_from);

  const long double two_pi = 2 * std::acos(-1.0L);
  std::printf("\n%4s %24s %24s %16s  %s%s\n", "pair", "omega_i", "wavelength", "factor", "band",
              axes.empty() ? "" : "  axis");
  int longer = 0, first_longer = -1;
  for (int i = 0; i < half; ++i) {
    const long double w = f.inv_freq[std::size_t(i)], w0 = def.inv_freq[std::size_t(i)];
    const long double wl = two_pi / w, factor = w0 / w;
    std::printf("%4d %24.17Le %24.17Le %16.12Lf  %s", i, w, wl, factor, band(cfg, seq_len, factor));
    if (!axes.empty()) std::printf("  %c", "thw"[axes[std::size_t(i)]]);
    std::printf("\n");
    if (trained > 0 && wl > trained) {
      ++longer;
      if (first_longer < 0) first_longer = i;
    }
  }

  std::printf("\n");
  int warnings = 0;
  if (longer > 0) {
    ++warnings;
    std::printf(
        "warning: %d of %d pairs (the first: pair %d) have a wavelength longer than the "
        "trained context %s: they never complete a turn within it, so angles past it "
        "were never seen in training\n",
        longer, half, first_longer, num(trained).c_str());
  }
  const double exact = cfg.head_dim * cfg.partial_rotary_factor;
  if (exact != double(D)) {
    ++warnings;
    std::printf(
        "warning: head_dim * partial_rotary_factor = %s is not an integer: rotary_dim is "
        "its truncation %d (as HF's int())\n",
        num(exact).c_str(), D);
  }
  if (D < cfg.head_dim)
    std::printf("note: coordinates %d .. %d pass through unrotated\n", D, cfg.head_dim - 1);
  if (cfg.max_position_embeddings && seq_len > *cfg.max_position_embeddings) {
    ++warnings;
    std::printf("warning: seq_len %s exceeds max_position_embeddings %s\n", num(seq_len).c_str(),
                num(*cfg.max_position_embeddings).c_str());
  }
  std::printf("%d warning(s)\n", warnings);

  if (!a.plot.empty())
    plot(a.plot, def.inv_freq, f.inv_freq, trained,
         "wavelengths of " + name + " (" + peal::to_string(cfg.scaling.type) + ")");
  return 0;
}

// --generator / --transition: the canonical form of a matrix from a file.

std::string num4(long double x) {  // tolerances, kappa, residuals: 4 digits say enough
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4Lg", x);
  return buf;
}

std::string eigenvalue_text(const std::complex<long double>& mu) {
  return mu.imag() == 0 ? num(mu.real()) : num(mu.real()) + "±" + num(std::fabs(mu.imag())) + "i";
}

// The report's summary, one row per block, the warnings. `sources`: from_transition's.
void print_canonical(const peal::CanonicalReport& r, bool transition,
                     const std::vector<peal::TransitionSource>& sources, int padding) {
  using K = peal::CanonicalBlock::Kind;
  const char* x = transition ? "X = log M" : "X";
  std::printf("classification                       %s\n", r.classification.c_str());
  std::printf("kappa(P)                             %s (X = P J P^-1, 2-norm condition number)\n",
              num4(r.kappa).c_str());
  if (transition)
    std::printf("residual                             %s (|P e^J P^-1 - M|_F / |M|_F)\n",
                num4(r.residual).c_str());
  else
    std::printf("residual                             %s (|P J P^-1 - X|_F / |X|_F)\n",
                num4(r.residual).c_str());
  std::printf("norm                                 %s (|%s|_F)\n", num(r.norm).c_str(), x);
  std::printf("skew-symmetric                       %s (|X + X^T|_F / |X|_F = %s)%s\n",
              r.skew_symmetric ? "yes" : "no", num4(r.skew_defect).c_str(),
              r.skew_symmetric ? ": pure rotations, orthogonal P, F = G" : "");
  const auto& t = r.tolerances;
  std::printf(
      "tolerances                           cluster %s, coupling %s, rank %s, zero %s, "
      "skew %s, kappa_warning %s\n",
      num4(t.cluster).c_str(), num4(t.coupling).c_str(), num4(t.rank).c_str(), num4(t.zero).c_str(),
      num4(t.skew).c_str(), num4(t.kappa_warning).c_str());
  for (const std::string& d : r.decisions) std::printf("  decided: %s\n", d.c_str());
  if (padding)
    std::printf(
        "padding                              %d coordinate(s) added (--pad-unpaired): pad "
        "queries and keys with zeros\n",
        padding);

  const long double two_pi = 2 * std::acos(-1.0L);
  static const char* names[] = {"real", "rotation", "jordan", "rotation-jordan", "pass-through"};
  std::printf("\n%5s %-15s %6s %11s %17s %17s %17s %17s%s\n", "block", "kind", "length", "coords",
              "omega", "a|lambda", "wavelength", "decay_length", transition ? "  mu_of_M" : "");
  for (std::size_t i = 0; i < r.blocks.size(); ++i) {
    const peal::CanonicalBlock& b = r.blocks[i];
    const bool rot = b.kind == K::Rotation || b.kind == K::RotationJordan;
    const long double re = rot ? b.a : b.lambda;  // 0 for pass-through
    const std::string coords =
        "[" + std::to_string(b.first) + "," + std::to_string(b.first + b.size) + ")";
    const std::string decay = re < 0 ? num(1 / -re) : re > 0 ? "growth" : "none";
    std::printf("%5zu %-15s %6d %11s %17s %17s %17s %17s", i, names[int(b.kind)], b.length,
                coords.c_str(), rot ? num(b.omega).c_str() : "-", num(re).c_str(),
                rot ? num(two_pi / b.omega).c_str() : "-", decay.c_str());
    if (transition && i < sources.size()) {
      const peal::TransitionSource& s = sources[i];
      std::printf("  %s", eigenvalue_text(s.mu).c_str());
      if (s.chains == 2)
        std::printf(" (%s: a rotation by pi, split %s)",
                    s.padded ? "one chain and its padding copy" : "two chains",
                    num4(s.split).c_str());
    }
    std::printf("\n");
  }
  std::printf("\n");
  for (const std::string& w : r.warnings) std::printf("warning: %s\n", w.c_str());
  std::printf("%zu warning(s)\n", r.warnings.size());
}

template <class S>
void inspect_matrix_as(const Args& a, const peal::Matrix<S>& A) {
  if (a.transition) {
    peal::TransitionOptions opt;
    static_cast<peal::CanonicalOptions&>(opt) = a.tolerances;
    opt.pad_unpaired = a.pad_unpaired;
    const peal::TransitionForm<S> tf = peal::from_transition(A, opt);
    print_canonical(tf.report, true, tf.sources, tf.padding);
  } else {
    const peal::CanonicalForm<S> cf = peal::canonical_form(A, a.tolerances);
    print_canonical(cf.report, false, {}, 0);
  }
}

int inspect_matrix(const Args& a) {
  const matrix_file::MatrixFile m = matrix_file::read_matrix_file(a.matrix);
  const long d = long(m.values.rows());
  std::printf("file                                 %s (%s, %ld x %ld; decomposed as %s)\n",
              a.matrix.c_str(), m.format.c_str(), d, d, m.single ? "float" : "double");
  if (a.transition)
    std::printf(
        "transition                           M = A(1): A(n) = M^n at integer n, X = log M "
        "(peal::from_transition)\n");
  else
    std::printf(
        "generator                            X: A(tau) = exp(tau X) "
        "(peal::canonical_form)\n");
  if (m.single)
    inspect_matrix_as<float>(a, m.values.cast<float>());
  else
    inspect_matrix_as<double>(a, m.values);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  try {
    return a.matrix.empty() ? inspect(a) : inspect_matrix(a);
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    const std::string& file = a.matrix.empty() ? a.path : a.matrix;
    std::fprintf(stderr, "peal_inspect: %s: %s\n", file.empty() ? "(built-in)" : file.c_str(),
                 msg.c_str());
    if (msg.find("must be even") != std::string::npos)
      std::fprintf(stderr,
                   "peal_inspect: the partial rotary factor leaves an odd number of rotary "
                   "coordinates; peal refuses it (a pair would be split)\n");
    return 1;
  }
}
