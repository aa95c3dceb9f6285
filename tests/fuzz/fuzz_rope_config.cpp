// libFuzzer target over config parsing (scripts/fuzz.sh builds and runs it; the corpus is
// replayed by the ordinary build as the ctest fuzz_corpus_replay, tests/fuzz/replay_main.cpp):
//
//   bytes -> JSON (nlohmann) -> ModelPositions (model_positions_from_hf: every distinct RoPE
//   layer built and checked) and RopeConfig (rope_config_from_hf) -> rope<float>, rope<double>
//         (mrope<float>, mrope<double> when the config has an mrope_section)
//         -> encode a few vectors at a few positions (0 .. 2^64, negative too), one vector at a
//            time (encode_query / encode_key) and as a batch (encode_queries / encode_keys).
//
// Allowed outcomes: a nlohmann::json::exception while parsing, a peal::invalid_argument
// from peal, or encodings whose every result is finite and norm-preserving (RoPE is a
// rotation: |F(t) q| = |q| up to Tol<S>::entry(2) relative; the YaRN/LongRoPE attention
// factor is not applied by encode). Anything else (another exception type, NaN, a norm
// that moves, A(0) != I, a crash, an allocation past -rss_limit_mb) abort()s.
//
// The input may carry "peal_fuzz_seq_len": a number (ignored by rope_config_from_hf) used as
// the seq_len of the presets; max_position_embeddings (if any) is tried as well.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <peal/encode.hpp>
#include <peal/models/hf_config.hpp>
#include <peal/peal.hpp>
#include <vector>

#include "../tolerances.hpp"

namespace {

[[noreturn]] void bug(const char* what, double x = 0, double y = 0) {
  std::fprintf(stderr, "fuzz_rope_config: %s (%.17g, %.17g)\n", what, x, y);
  std::abort();
}

// Positions a model, a streaming cache or a timestamp encoding can use.
const double kPositions[] = {0.0,    1.0,    2.0,    4095.0,         4096.5,         1e6,
                             0x1p31, 1.7e9,  0x1p40, 0x1p40 + 12345, -0x1p40 - 3.25, 0x1p53,
                             0x1p60, -0x1p64};

// Deterministic vector with entries in [-1, 1] (no subnormals: the norm check is relative).
template <class S>
peal::Vector<S> pattern(int n, std::uint64_t seed) {
  peal::Vector<S> v(n);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v(i) = S(double(x >> 11) * 0x1p-52 - 1.0);
  }
  return v;
}

template <class S>
long double norm_ld(const S* x, int n) {
  long double s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<long double>(x[i]) * static_cast<long double>(x[i]);
  return std::sqrt(s);
}

// y must be finite and |y| = |x| to rotation accuracy: each coordinate of a rotated pair is a
// 2-term dot product of rounded cos/sin with the pair (Tol::entry(2) relative to |x|).
template <class S>
void check_rotated(const S* x, const S* y, int n, double t) {
  for (int i = 0; i < n; ++i)
    if (!std::isfinite(static_cast<double>(y[i]))) bug("encoded coordinate is not finite", t, i);
  const long double nx = norm_ld(x, n), ny = norm_ld(y, n);
  if (!(std::fabs(ny - nx) <= peal_test::Tol<S>::entry(2) * nx))
    bug("encoding does not preserve the norm", t, double((ny - nx) / nx));
}

template <class S>
void check_encoding(const peal::RopeEncoding<S>& rope) {
  const int d = rope.head_dim();
  if (d <= 0 || d > peal::preset_max_head_dim) bug("head_dim out of range", d);
  const long double af = rope.attention_factor_long();
  if (!std::isfinite(af) || !(af > 0)) bug("attention factor not finite and > 0", double(af));
  for (int i = 0; i < rope.rotary().size(); ++i) {
    const auto p = rope.rotary().block(i).params();
    if (!(p[0] >= peal::preset_min_frequency && p[0] <= peal::preset_max_frequency))
      bug("stored frequency outside the accepted range", double(p[0]), i);
  }
  const peal::Vector<S> q = pattern<S>(d, 1), k = pattern<S>(d, 2);
  // Large heads get the first and last few positions only, so that one input stays far below
  // libFuzzer's -timeout under ASan (the checks are O(d) per position).
  constexpr int n_all = int(sizeof(kPositions) / sizeof(kPositions[0]));
  std::vector<double> pos(std::begin(kPositions), std::end(kPositions));
  if (d > 1024) pos = {kPositions[0], kPositions[1], kPositions[8], kPositions[n_all - 1]};
  const int n = int(pos.size()), H = d > 1024 ? 1 : 2;

  // One vector at a time: A(0) = I exactly, rotations elsewhere.
  for (double t : pos) {
    peal::Vector<S> qe = q, ke = k;
    rope.encode_query(qe, t);
    rope.encode_key(ke, t);
    if (t == 0.0 && (qe != q || ke != k)) bug("encoding at t = 0 is not the identity");
    check_rotated(q.data(), qe.data(), d, t);
    check_rotated(k.data(), ke.data(), d, t);
  }

  // The batch kernels, [tokens, heads, d], one token per position.
  std::vector<S> x(std::size_t(n) * H * std::size_t(d));
  for (int r = 0; r < n * H; ++r) {
    const peal::Vector<S> v = pattern<S>(d, std::uint64_t(3 + r));
    for (int i = 0; i < d; ++i) x[std::size_t(r) * std::size_t(d) + std::size_t(i)] = v(i);
  }
  std::vector<S> yq = x, yk = x;
  peal::encode_queries(rope, peal::make_view(yq.data(), n, H, d), peal::Positions(pos));
  peal::encode_keys(rope, peal::make_view(yk.data(), n, H, d), peal::Positions(pos));
  for (int r = 0; r < n * H; ++r) {
    const std::size_t o = std::size_t(r) * std::size_t(d);
    check_rotated(x.data() + o, yq.data() + o, d, pos[std::size_t(r / H)]);
    check_rotated(x.data() + o, yk.data() + o, d, pos[std::size_t(r / H)]);
  }
}

// M-RoPE: every (t, h, w) point of kPositions' first entries mixed per axis, one vector at a
// time and as a batch: finite, norm-preserving, the identity at the origin.
template <class S>
void check_mrope(const peal::MRopeEncoding<S>& m) {
  const int d = m.head_dim();
  if (d <= 0 || d > peal::preset_max_head_dim) bug("head_dim out of range", d);
  const int n_pts = d > 1024 ? 2 : 6;
  std::vector<double> pts;
  for (int i = 0; i < n_pts; ++i)
    pts.insert(pts.end(), {kPositions[i * 2 % 14], kPositions[(i * 5 + 1) % 14], kPositions[(i * 3 + 8) % 14]});
  pts[0] = pts[1] = pts[2] = 0.0;
  const peal::Vector<S> q = pattern<S>(d, 1);
  std::vector<S> x(std::size_t(n_pts) * std::size_t(d));
  for (int i = 0; i < n_pts; ++i) {
    peal::Vector<S> e = q;
    m.encode_query(e, std::vector<double>(pts.begin() + 3 * i, pts.begin() + 3 * i + 3));
    if (i == 0 && e != q) bug("M-RoPE at the origin is not the identity");
    check_rotated(q.data(), e.data(), d, pts[std::size_t(3 * i)]);
    for (int j = 0; j < d; ++j) x[std::size_t(i * d + j)] = q(j);
  }
  std::vector<S> y = x;
  peal::encode_keys(m, peal::make_view(y.data(), n_pts, 1, d), peal::PositionsND(pts, 3));
  for (int i = 0; i < n_pts; ++i)
    check_rotated(x.data() + i * d, y.data() + i * d, d, pts[std::size_t(3 * i)]);
}

// rope<S>(cfg, seq_len): for a validated config and seq_len in [0, 2^53] it may only fail
// (with invalid_argument) for dynamic NTK past max_position_embeddings, whose base grows
// with seq_len, and for seq_len = 0 where dynamic and longrope need a length; every other
// type ignores seq_len, and longrope has both of its tables validated already.
template <class S>
void run(const peal::RopeConfig& cfg, double seq_len) {
  const peal::RopeType type = cfg.scaling.type;
  const bool needs_len = type == peal::RopeType::Dynamic || type == peal::RopeType::LongRope;
  const bool may_fail = (needs_len && seq_len == 0) ||
                        (type == peal::RopeType::Dynamic &&
                         !(cfg.max_position_embeddings && seq_len <= *cfg.max_position_embeddings));
  if (!cfg.scaling.mrope_section.empty()) {
    try {
      (void)peal::rope<S>(cfg, seq_len);
      bug("rope() accepted an M-RoPE configuration");
    } catch (const peal::invalid_argument&) {
    }
    std::optional<peal::MRopeEncoding<S>> m;
    try {
      m.emplace(peal::mrope<S>(cfg, seq_len));
    } catch (const peal::invalid_argument&) {
      if (!may_fail) bug("mrope() rejected a validated configuration", seq_len);
      return;
    }
    check_mrope(*m);
    return;
  }
  std::optional<peal::RopeEncoding<S>> built;
  try {
    built.emplace(peal::rope<S>(cfg, seq_len));
  } catch (const peal::invalid_argument&) {
    if (!may_fail) bug("rope() rejected a validated configuration", seq_len);
    return;
  }
  check_encoding(*built);  // must not throw at all
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(data, data + size);
    } catch (const nlohmann::json::exception&) {
      return 0;  // not JSON (parse_error), or a number out of double range (out_of_range)
    }
    // The model reader (docs/models.md): every distinct RoPE layer must build and behave.
    peal::ModelReadOptions all;
    all.allow_not_modelled = true;
    std::optional<peal::ModelPositions> model;
    try {
      model.emplace(peal::model_positions_from_hf(j, all));
      (void)peal::describe_layers(*model);
    } catch (const peal::invalid_argument&) {
    }
    if (model) {
      std::vector<const peal::LayerPositions*> distinct;
      for (const auto& L : model->layers) {
        if (L.encoding != peal::LayerEncoding::Rope && L.encoding != peal::LayerEncoding::MRope)
          continue;
        bool seen = false;
        for (const auto* d : distinct) seen = seen || peal::same_positions(*d, L);
        if (!seen && distinct.size() < 4) distinct.push_back(&L);
      }
      for (const auto* L : distinct) {
        if (L->rotary_offset + L->rope.head_dim != L->qk_head_dim)
          bug("a layer's rotary_offset + rope.head_dim differs from qk_head_dim");
        run<float>(L->rope, L->rope.max_position_embeddings.value_or(4096.0));
      }
    }
    peal::RopeConfig cfg;
    try {
      cfg = peal::rope_config_from_hf(j);
    } catch (const peal::invalid_argument&) {
      return 0;
    }
    // rope_config_from_hf answers only when every layer has that RoPE.
    if (!model) bug("rope_config_from_hf read a config the model reader refused");
    for (const auto& L : model->layers)
      if (L.encoding == peal::LayerEncoding::Rope && L.rope.head_dim != cfg.head_dim)
        bug("rope_config_from_hf returned one layer's RoPE of several");
    std::vector<double> lens;
    const auto it = j.is_object() ? j.find("peal_fuzz_seq_len") : j.end();
    lens.push_back(it != j.end() && it->is_number() ? it->get<double>() : 4096.0);
    if (cfg.max_position_embeddings) lens.push_back(*cfg.max_position_embeddings);
    for (double L : lens) {
      if (!(L >= 0 && L <= peal::preset_max_length)) {
        // Out-of-range lengths must be rejected, whatever the type.
        try {
          (void)peal::rope<double>(cfg, L);
          bug("rope() accepted seq_len outside (0, 2^53]", L);
        } catch (const peal::invalid_argument&) {
        }
        continue;
      }
      run<float>(cfg, L);
      run<double>(cfg, L);
    }
  } catch (const peal::invalid_argument& e) {
    std::fprintf(stderr, "fuzz_rope_config: unexpected peal::invalid_argument: %s\n", e.what());
    std::abort();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_rope_config: exception other than peal::invalid_argument: %s\n",
                 e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "fuzz_rope_config: unknown exception\n");
    std::abort();
  }
  return 0;
}
