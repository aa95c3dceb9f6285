// libFuzzer target over GGUF reading (include/peal/models/gguf.hpp, the file format) and its mapping
// to a RopeConfig (include/peal/models/gguf_config.hpp), run by scripts/fuzz.sh; the seed corpus
// tests/fuzz/corpus_gguf_config/ is written by tests/fuzz/gen_gguf_corpus.cpp, and is
// replayed without libFuzzer by tests/fuzz/replay_main.cpp (ctest fuzz_gguf_corpus_replay):
//
//   bytes -> gguf_metadata_from_bytes, and the same bytes through gguf_metadata_from_stream
//         and, for one input in 8 (by a hash of its bytes, so that a failure replays; the
//         file costs twice the rest), through gguf_metadata_from_file of a scratch file
//         -> rope_config_from_gguf -> rope<double>(config without M-RoPE sections, seq_len)
//         -> encode a vector at a few positions.
// Once per process (POSIX): a FIFO with no writer and a directory given to
// gguf_metadata_from_file must be refused at once (a blocked open is a libFuzzer timeout).
//
// Allowed outcomes: peal::invalid_argument from the reader or the mapping (the three readers
// must then all throw, with the same message: they are given the same source name), or a
// config that rope<double> accepts (the mapping validated it: rope() may not throw) and whose
// encodings are finite and norm-preserving. Anything else abort()s: another exception type,
// the readers disagreeing, a crash, a sanitizer report, an allocation past -rss_limit_mb.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <peal/models/gguf_config.hpp>
#include <peal/peal.hpp>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "../tolerances.hpp"
#if defined(__unix__) || defined(__APPLE__)
#include <sys/stat.h>
#include <unistd.h>
#define PEAL_FUZZ_POSIX 1
#endif

namespace {

[[noreturn]] void bug(const char* what, const std::string& detail = std::string()) {
  std::fprintf(stderr, "fuzz_gguf_config: %s %s\n", what, detail.c_str());
  std::abort();
}

struct Outcome {
  std::optional<peal::GgufConfig> config;
  std::string error;
};

template <class Read>
Outcome attempt(Read read) {
  Outcome o;
  try {
    o.config = peal::rope_config_from_gguf(read());
  } catch (const peal::invalid_argument& e) {
    o.error = e.what();
  }
  return o;
}

// The scratch file of this process for the path reader, removed at exit (the string is never
// destroyed: the exit handler runs after the destructors of function-local statics).
const std::string& scratch_path() {
  static const std::string* const path = [] {
    std::string tag = "peal_fuzz_gguf";
#ifdef PEAL_FUZZ_POSIX
    tag += "_" + std::to_string(::getpid());
#endif
    const auto* p =
        new std::string((std::filesystem::temp_directory_path() / (tag + ".gguf")).string());
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove(scratch_path(), ec);
    });
    return p;
  }();
  return *path;
}

// Whether this input also goes through a file: FNV-1a of its bytes, one in 8.
bool through_file(const std::uint8_t* data, std::size_t size) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t k = 0; k < size; ++k) h = (h ^ data[k]) * 1099511628211ull;
  return (h >> 61) == 0;
}

// gguf_metadata_from_file must refuse what is not a regular file without opening it.
void check_non_regular_paths() {
  namespace fs = std::filesystem;
  std::vector<std::string> paths = {fs::temp_directory_path().string()};
#ifdef PEAL_FUZZ_POSIX
  const std::string fifo = scratch_path() + ".fifo";
  std::error_code ec;
  fs::remove(fifo, ec);
  if (::mkfifo(fifo.c_str(), 0600) == 0) paths.push_back(fifo);
#endif
  for (const std::string& p : paths) {
    try {
      peal::gguf_metadata_from_file(p);
      bug("a path that is not a regular file was read:", p);
    } catch (const peal::invalid_argument& e) {
      if (std::string(e.what()).find("not a regular file") == std::string::npos)
        bug("a path that is not a regular file gave another error:", e.what());
    }
  }
#ifdef PEAL_FUZZ_POSIX
  fs::remove(fifo, ec);
#endif
}

void check_encoding(const peal::RopeConfig& cfg) {
  double L = cfg.max_position_embeddings.value_or(4096.0);
  std::optional<peal::RopeEncoding<double>> rope;
  try {
    rope.emplace(peal::rope<double>(cfg, L));
  } catch (const peal::invalid_argument& e) {
    bug("rope() rejected a configuration rope_config_from_gguf returned:", e.what());
  }
  const int d = rope->head_dim();
  if (d < 1 || d > peal::preset_max_head_dim) bug("head_dim out of range");
  const long double af = rope->attention_factor_long();
  if (!std::isfinite(af) || !(af > 0)) bug("attention factor not finite and > 0");
  peal::Vector<double> q(d);
  for (int i = 0; i < d; ++i) q(i) = std::sin(1.0 + i);  // entries in [-1, 1]
  long double n0 = 0;
  for (int i = 0; i < d; ++i) n0 += static_cast<long double>(q(i)) * q(i);
  const double positions[] = {0.0, 1.0, 4096.0, 1e6, 0x1p40, -0x1p53};
  for (double t : positions) {
    peal::Vector<double> e = q;
    rope->encode_query(e, t);
    if (t == 0.0 && e != q) bug("encoding at t = 0 is not the identity");
    long double n1 = 0;
    for (int i = 0; i < d; ++i) {
      if (!std::isfinite(e(i))) bug("encoded coordinate not finite");
      n1 += static_cast<long double>(e(i)) * e(i);
    }
    // |F(t) q|^2 = |q|^2 to rotation accuracy (Tol::entry(2) on the norm, twice on its square)
    if (!(std::fabs(n1 - n0) <= 2 * peal_test::Tol<double>::entry(2) * n0))
      bug("encoding does not preserve the norm");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    static const bool checked = (check_non_regular_paths(), true);
    (void)checked;
    const std::string& path = scratch_path();  // the source name of every reader
    const Outcome a = attempt([&] { return peal::gguf_metadata_from_bytes(data, size, path); });
    const Outcome b = attempt([&] {
      std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
      return peal::gguf_metadata_from_stream(in, path);
    });
    if (a.config.has_value() != b.config.has_value() || a.error != b.error)
      bug("the buffer and stream readers disagree:", a.error + " | " + b.error);
    if (a.config && a.config->metadata != b.config->metadata)
      bug("the buffer and stream readers read other values");
    if (through_file(data, size)) {
      {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
        if (!out) bug("cannot write the scratch file", path);
      }
      const Outcome f = attempt([&] { return peal::gguf_metadata_from_file(path); });
      if (a.config.has_value() != f.config.has_value() || a.error != f.error)
        bug("the buffer and file readers disagree:", a.error + " | " + f.error);
      if (a.config && a.config->metadata != f.config->metadata)
        bug("the buffer and file readers read other values");
    }
    if (!a.config) return 0;
    const peal::GgufConfig& c = *a.config;
    if (c.version != 2 && c.version != 3) bug("accepted a version other than 2 or 3");
    if (c.rope_type == peal::GgufRopeType::None) return 0;
    peal::RopeConfig r = c.rope;
    const bool mrope =
        c.rope_type == peal::GgufRopeType::MRope || c.rope_type == peal::GgufRopeType::IMRope;
    if (mrope != !r.scaling.mrope_section.empty()) bug("M-RoPE type without sections");
    if (mrope) {
      long long sum = 0;
      for (int s : r.scaling.mrope_section) sum += s;
      if (sum * 2 != c.n_rot) bug("sections do not sum to n_rot / 2");
      r.scaling.mrope_section.clear();
      r.scaling.mrope_interleaved = false;
    }
    if (peal::rope_rotary_dim(r) != c.n_rot) bug("rotary dim differs from n_rot");
    check_encoding(r);
  } catch (const peal::invalid_argument& e) {
    bug("unexpected peal::invalid_argument:", e.what());
  } catch (const std::exception& e) {
    bug("exception other than peal::invalid_argument:", e.what());
  } catch (...) {
    bug("unknown exception");
  }
  return 0;
}
