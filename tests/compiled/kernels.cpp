// The bitwise check of peal's compiled mode (include/peal/compiled.hpp): this program is built
// twice, header-only (peal_header_only_kernels) and linked to peal::compiled with PEAL_COMPILED
// defined (peal_compiled_kernels), with the same flags. Each run writes the raw bytes of every
// result to the file named by argv[1]; tests/compiled/check.cmake runs both and compares the
// files byte for byte, and checks that the compiled build's object file instantiates no tile
// driver (the kernels came from the library, not from this TU).
// Coverage: every kind of kernel the library holds (encode in and out of place and into the
// arithmetic type, shift_keys, scores, attention and its keys_encoded path, linear attention,
// N-D encode and attention) on every encoding it holds, on float, and the storage-only and
// double paths on the calls that engines make (RoPE attention, M-RoPE attention).
#include <peal/peal.hpp>

#include <cstdio>
#include <random>
#include <vector>

namespace {

using peal::Index;

std::FILE* out_file = nullptr;

template <class T>
void emit(const std::vector<T>& v) {
  std::fwrite(v.data(), sizeof(T), v.size(), out_file);
}

template <class T>
std::vector<T> random_vector(Index n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = T(u(rng));
  return v;
}

std::vector<double> irregular(Index n, double t0, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> gap(0.01, 3.0);
  std::vector<double> t(static_cast<std::size_t>(n));
  double s = t0;
  for (auto& x : t) x = s += gap(rng);
  return t;
}

peal::RopeConfig llama_like(int d, double partial) {
  peal::RopeConfig c;
  c.head_dim = d;
  c.rope_theta = 500000;
  c.partial_rotary_factor = partial;
  return c;
}

// A 1-D encoding on storage T: encode (in place, out of place, into the arithmetic type C),
// shift_keys, scores, attention (causal with keys encoded, and with raw keys and a window).
template <class T, class E>
void one_d(const E& enc, Index n, Index Hq, Index Hk, std::mt19937_64& rng,
           const peal::AttentionOptions& extra = {}) {
  using C = peal::detail::arith_t<T, T>;
  const Index d = enc.dim();
  const auto tq = irregular(n, 1e5, rng), tk = tq;
  auto q = random_vector<T>(n * Hq * d, rng), k = random_vector<T>(n * Hk * d, rng);
  const auto v = random_vector<T>(n * Hk * d, rng);
  std::vector<T> qe(q.size()), out(q.size());
  std::vector<C> qc(q.size());
  peal::encode_queries(enc, peal::make_view<const T>(q.data(), n, Hq, d),
                       peal::make_view(qe.data(), n, Hq, d), peal::Positions(tq));
  peal::encode_queries(enc, peal::make_view<const T>(q.data(), n, Hq, d),
                       peal::make_view(qc.data(), n, Hq, d), peal::Positions(tq));
  emit(qe), emit(qc);
  std::vector<C> s(static_cast<std::size_t>(Hq * n * n));
  peal::ScoreOptions so;
  so.causal = true;
  peal::scores(enc, peal::make_view<const T>(q.data(), n, Hq, d), peal::Positions(tq),
               peal::make_view<const T>(k.data(), n, Hk, d), peal::Positions(tk),
               peal::make_view(s.data(), Hq, n, n), so);
  emit(s);
  peal::AttentionOptions opt = extra;
  opt.window = n / 3;
  peal::attention(enc, peal::make_view(q.data(), n, Hq, d), peal::Positions(tq),
                  peal::make_view(k.data(), n, Hk, d), peal::Positions(tk),
                  peal::make_view<const T>(v.data(), n, Hk, d), peal::make_view(out.data(), n, Hq, d),
                  opt);
  emit(out);
  if (!peal::detail::coders::is_pure_rotation<C>(enc)) return;
  peal::encode_keys(enc, peal::make_view(k.data(), n, Hk, d), peal::Positions(tk));
  peal::shift_keys(enc, peal::make_view(k.data(), n, Hk, d), 7.25);
  peal::shift_keys(enc, peal::make_view(k.data(), n, Hk, d), -7.25);
  emit(k);
  opt = extra;
  opt.causal = true;
  opt.keys_encoded = true;
  peal::attention(enc, peal::make_view<const T>(q.data(), n, Hq, d), peal::Positions(tq),
                  peal::make_view<const T>(k.data(), n, Hk, d), peal::Positions(tk),
                  peal::make_view<const T>(v.data(), n, Hk, d), peal::make_view(out.data(), n, Hq, d),
                  opt);
  emit(out);
}

// Linear attention with RetNet's per-head decays on storage T.
template <class T, class E>
void linear(const E& enc, Index n, Index H, std::mt19937_64& rng) {
  const Index d = enc.dim();
  const auto t = irregular(n, -40, rng);
  const auto q = random_vector<T>(n * H * d, rng), k = random_vector<T>(n * H * d, rng),
             v = random_vector<T>(n * H * d, rng);
  std::vector<T> out(q.size());
  peal::LinearAttentionOptions opt;
  opt.decay = peal::retnet_decays(int(H));
  peal::linear_attention(enc, peal::make_view<const T>(q.data(), n, H, d), peal::Positions(t),
                         peal::make_view<const T>(k.data(), n, H, d), peal::Positions(t),
                         peal::make_view<const T>(v.data(), n, H, d),
                         peal::make_view(out.data(), n, H, d), opt);
  emit(out);
}

// M-RoPE over 3-D points on storage T: N-D encode and causal attention (raw and encoded keys).
template <class T>
void mrope(Index n, std::mt19937_64& rng) {
  peal::RopeConfig c = llama_like(32, 1.0);
  c.rope_theta = 1e6;
  c.scaling.mrope_section = {4, 6, 6};
  const auto enc = peal::mrope<double>(c);
  const Index H = 2, d = 32;
  std::vector<double> p(static_cast<std::size_t>(3 * n));
  for (Index i = 0; i < n; ++i)
    for (int a = 0; a < 3; ++a) p[std::size_t(3 * i + a)] = double(i / (a + 1) + 5 * a);
  const peal::PositionsND P(p.data(), n, 3);
  auto q = random_vector<T>(n * H * d, rng), k = random_vector<T>(n * H * d, rng);
  const auto v = random_vector<T>(n * H * d, rng);
  std::vector<T> out(q.size());
  const auto attend = [&](bool keys_encoded) {  // causal, k raw or already encoded
    peal::AttentionOptions opt;
    opt.causal = true;
    opt.keys_encoded = keys_encoded;
    peal::attention(enc, peal::make_view<const T>(q.data(), n, H, d), P,
                    peal::make_view<const T>(k.data(), n, H, d), P,
                    peal::make_view<const T>(v.data(), n, H, d),
                    peal::make_view(out.data(), n, H, d), opt);
    emit(out);
  };
  attend(false);
  peal::encode_keys(enc, peal::make_view(k.data(), n, H, d), P);
  emit(k);
  attend(true);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output file>\n", argv[0]);
    return 2;
  }
  out_file = std::fopen(argv[1], "wb");
  if (!out_file) return 2;
  std::mt19937_64 rng(20261203);
  const auto rope = peal::rope<double>(llama_like(64, 1.0));
  peal::RopeConfig ci = llama_like(64, 0.5);  // partial rotary, interleaved (GPT-J style)
  ci.layout = peal::Layout::Interleaved;
  const auto partial = peal::rope<double>(ci);
  const auto xpos = peal::xpos<double>(64);
  const peal::PassThrough<double> none{64};
  peal::AttentionOptions alibi;
  alibi.alibi_slopes = peal::alibi_slopes(4);

  one_d<float>(rope, 77, 4, 2, rng);
  one_d<float>(partial, 40, 2, 2, rng);
  one_d<float>(xpos, 40, 2, 1, rng);
  one_d<float>(none, 50, 4, 2, rng, alibi);
  one_d<double>(rope, 33, 2, 1, rng);
  one_d<Eigen::half>(rope, 33, 2, 1, rng);
  one_d<Eigen::bfloat16>(rope, 65, 4, 2, rng);
  linear<float>(peal::retnet_rotation<double>(64), 70, 2, rng);
  linear<float>(none, 30, 2, rng);
  mrope<float>(45, rng);
  mrope<Eigen::bfloat16>(45, rng);
  return std::fclose(out_file) == 0 ? 0 : 1;
}
