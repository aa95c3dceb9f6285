// Working memory of scores() for small calls (include/peal/scores.hpp, ScoresRun and its
// Workspace): every table and buffer is sized by the rows actually present, so a call with a
// few tokens at a large dim d needs O(d) bytes per row, not the O(64 d) of tables sized for
// a full chunk of kChunkRows rows (a 1x1 call at d = 2^20 used to allocate 579 MB).
//
// Measured with a counting global operator new (this translation unit replaces it for the
// whole test program; it only counts while `counting` is set, and forwards to malloc). The
// call runs on a fresh thread, so that its thread-local arena and table cache start empty
// and their allocation is seen. Eigen's own matrices use malloc directly and are not
// counted; scores() keeps its working memory in std::vector and its arena (new[]).
//
// Also: the thread count (threads up to INT_MAX, bitwise the result of one thread).
#include <atomic>
#include <climits>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <peal/peal.hpp>
#include <peal/scores.hpp>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "kernel_catalogue.hpp"

namespace {

std::atomic<bool> counting{false};
std::atomic<long long> live{0}, peak{0};

constexpr std::size_t kHeader = 64;  // room for the size and the base, keeps 64-byte alignment

void* counted_alloc(std::size_t n, std::size_t align) {
  const std::size_t head = align > kHeader ? align : kHeader;  // a power of two
  void* raw = std::malloc(n + 2 * head);
  if (raw == nullptr) throw std::bad_alloc();
  const std::uintptr_t at = (reinterpret_cast<std::uintptr_t>(raw) + 2 * head - 1) & ~(head - 1);
  auto* p = reinterpret_cast<std::uintptr_t*>(at);
  p[-1] = n;
  p[-2] = reinterpret_cast<std::uintptr_t>(raw);
  if (counting.load(std::memory_order_relaxed)) {
    const long long now = live.fetch_add(static_cast<long long>(n)) + static_cast<long long>(n);
    long long pk = peak.load();
    while (now > pk && !peak.compare_exchange_weak(pk, now)) {
    }
  }
  return p;
}
void counted_free(void* q) noexcept {
  if (q == nullptr) return;
  auto* p = static_cast<std::uintptr_t*>(q);
  if (counting.load(std::memory_order_relaxed)) live.fetch_sub(static_cast<long long>(p[-1]));
  std::free(reinterpret_cast<void*>(p[-2]));
}

}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n, 16); }
void* operator new[](std::size_t n) { return counted_alloc(n, 16); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_alloc(n, std::size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_alloc(n, std::size_t(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n, 16);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n, 16);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_free(p); }

namespace {

using peal::Index;
using peal::Positions;
using peal::ScoreOptions;
using peal::TensorView;

/// Peak bytes allocated (beyond what was live before) while scores() runs on a new thread.
template <class T, class E>
long long peak_of_call(const E& enc, Index nq, Index nk, const ScoreOptions& opt) {
  const Index d = enc.dim();
  std::vector<T> q(std::size_t(nq * d)), k(std::size_t(nk * d));
  std::mt19937 rng(3);
  std::normal_distribution<double> N(0.0, 1.0);
  for (auto& x : q) x = T(N(rng));
  for (auto& x : k) x = T(N(rng));
  std::vector<float> out(std::size_t(nq * nk));
  long long result = 0;
  std::thread worker([&] {
    const long long before = live.load();
    peak.store(before);
    counting.store(true);
    peal::scores(enc, TensorView<const T>(q.data(), nq, 1, d), Positions::sequence(5.0),
                 TensorView<const T>(k.data(), nk, 1, d), Positions::sequence(0.0),
                 TensorView<float>(out.data(), 1, nq, nk), opt);
    counting.store(false);
    result = peak.load() - before;
  });
  worker.join();
  return result;
}

peal::Bank<peal::RotationBlock<double>> bank(int pairs, double a) {
  std::vector<peal::RotationBlock<double>> b;
  for (int i = 0; i < pairs; ++i)
    b.emplace_back(std::pow(10000.0, -2.0 * i / (2.0 * pairs)), a * (1.0 + double(i) / pairs));
  return peal::Bank<peal::RotationBlock<double>>(b);
}

}  // namespace

// Bound, in doubles per coordinate of d (d = 2 nb for nb rotation blocks; values of the
// arithmetic type C count as doubles), for a call with r = max(nq, nk) <= 64 rows:
//   the coder's parameters (w_hi, w_lo, a: 3 nb doubles)                       1.5
//   the table cache's key, which lists them (up to twice that while its vector grows) 3
//   the shared coefficient tables, query and key (d values a row, <= r rows each)     2 r
//   the relative table used to build them (<= 3 nb doubles a row, <= r rows)        1.5 r
//   the workspace: query cache, query tile, query and key coefficients, key tile, key
//   decay rows (d values a row, r rows each), its relative table (1.5 r), one cross
//   row (1.5), one composed row (1) and the scratch (4 d values)             6.5 r + 6.5
// i.e. (11 + 10 r) doubles per coordinate, plus a little that does not grow with d. Tables
// sized for kChunkRows = 64 rows would be 2 x 64 x 1.5 = 192 doubles per coordinate more.
TEST_CASE("scores: working memory of small calls is sized by the rows present",
          "[scores][memory]") {
  const int nb = 1 << 19;  // d = 2^20
  const Index d = 2 * nb;
  auto bound = [&](Index rows) { return (11 + 10 * rows) * 8 * d + (1 << 20); };
  SECTION("1 x 1, RoPE, float") {
    const long long got = peak_of_call<float>(bank(nb, 0.0), 1, 1, ScoreOptions{});
    INFO("peak " << got << " bytes, bound " << bound(1));
    CHECK(got <= bound(1));
  }
  SECTION("1 x 1, RoPE, double") {
    const long long got = peak_of_call<double>(bank(nb, 0.0), 1, 1, ScoreOptions{});
    INFO("peak " << got << " bytes, bound " << bound(1));
    CHECK(got <= bound(1));
  }
  SECTION("2 x 3, decaying rotations and a scalar decay, float") {
    ScoreOptions opt;
    opt.decay = {0.9};
    const long long got = peak_of_call<float>(bank(nb / 4, -1e-3), 2, 3, opt);
    INFO("peak " << got << " bytes, bound " << bound(3) / 4);
    CHECK(got <= bound(3) / 4);
  }
}

// attention() (include/peal/attention.hpp): no nq x nk matrix. Its working memory is the tile
// driver's (per-thread arena and tables, sized by the tiles, the same for both calls compared
// below, and by the query block, which grows with nq up to its cap of kBlockBytes = 1 MiB of
// encoded queries (detail/tiled/tile_run.hpp), with the sink's O rows beside it: dv / d MiB more, and
// m, l: 16 bytes a row), the positions copied once (t, s: 8 bytes a token), the tile plans (a
// few doubles per tile and per row of a regular tile) and, with key splits, one partial
// (m, l, O) per split and output row. Checked:
//   prefill with 8 key heads (8 units: no key splits), n = 512 -> 4096: the logits grow by
//   8 (4096^2 - 512^2) floats (530 MB as a matrix); memory by at most 2 MiB (the block, dv = d)
//   plus 16 bytes a block row plus 64 bytes per added token (8x the positions' 16);
//   decode (1 query, 8 heads of one key head: key splits), nk = 4096 -> 65536: the same 64
//   bytes per added key; the partials are 8 splits x 8 rows x (dv + 2) values either way.
TEST_CASE("attention: working memory does not grow with nq x nk", "[attention][memory]") {
  const Index d = 64;
  const auto enc = bank(int(d / 2), 0.0);
  auto peak_attention = [&](Index nq, Index nk, Index Hq, Index Hk) {
    std::vector<float> q(std::size_t(nq * Hq * d), 0.25f), k(std::size_t(nk * Hk * d), 0.5f),
        v(k.size(), 1.0f), out(q.size());
    std::vector<double> lse(static_cast<std::size_t>(nq * Hq));
    peal::AttentionOptions opt;
    opt.causal = true, opt.threads = 1, opt.lse = lse.data();
    long long result = 0;
    std::thread worker([&] {
      const long long before = live.load();
      peak.store(before);
      counting.store(true);
      peal::attention(enc, TensorView<const float>(q.data(), nq, Hq, d),
                      Positions::sequence(double(nk - nq)),
                      TensorView<const float>(k.data(), nk, Hk, d), Positions::sequence(0.0),
                      TensorView<const float>(v.data(), nk, Hk, d),
                      TensorView<float>(out.data(), nq, Hq, d), opt);
      counting.store(false);
      result = peak.load() - before;
    });
    worker.join();
    return result;
  };
  {
    const long long small = peak_attention(512, 512, 8, 8), large = peak_attention(4096, 4096, 8, 8);
    INFO("prefill: peak " << small << " bytes at n = 512, " << large << " at n = 4096");
    CHECK(large <= small + (2 << 20) + 16 * 4096 + 64 * (4096 - 512));
  }
  {
    const long long small = peak_attention(1, 4096, 8, 1), large = peak_attention(1, 65536, 8, 1);
    INFO("decode: peak " << small << " bytes at nk = 4096, " << large << " at nk = 65536");
    CHECK(large <= small + 64 * (65536 - 4096));
  }
}

// linear_attention() (include/peal/linear_attention.hpp): the chunkwise form holds one chunk's
// rows (the tile driver's working memory for a chunk, the chunk's encoded keys, values and the
// state's part of its queries) and the d x dv states; the parallel form is the tile driver
// with LinearSink (the same bound as attention above). What grows with n: the positions
// copied once (t, s: 16 bytes a token) and the tile plans. Checked: n = 512 -> 8192 (the
// pairs grow by 60 million floats per head, 250 MB as a matrix) adds at most 64 bytes a token
// in either form (a chunkwise buffer sized by all queries, 2 MB here, failed it), and for
// the parallel form its query block, capped as attention's above
// (1 MiB of encoded queries, the sink's O rows beside it: dv / d MiB more, and A: 8 bytes a
// row, 2 MiB + 16 bytes a block row in all).
TEST_CASE("linear_attention: working memory does not grow with n x n", "[linear][memory]") {
  const Index d = 64, H = 4;
  const auto enc = bank(int(d / 2), 0.0);
  auto peak_linear = [&](Index n, peal::LinearForm form) {
    std::vector<float> q(std::size_t(n * H * d), 0.25f), k(q.size(), 0.5f), v(q.size(), 1.0f),
        out(q.size());
    peal::LinearAttentionOptions opt;
    opt.form = form, opt.threads = 1, opt.decay = {0.99, 0.9, 0.5, 1.0};
    long long result = 0;
    std::thread worker([&] {
      const long long before = live.load();
      peak.store(before);
      counting.store(true);
      peal::linear_attention(enc, TensorView<const float>(q.data(), n, H, d),
                             Positions::sequence(0.0), TensorView<const float>(k.data(), n, H, d),
                             Positions::sequence(0.0), TensorView<const float>(v.data(), n, H, d),
                             TensorView<float>(out.data(), n, H, d), opt);
      counting.store(false);
      result = peak.load() - before;
    });
    worker.join();
    return result;
  };
  for (auto form : {peal::LinearForm::chunkwise, peal::LinearForm::parallel}) {
    const long long small = peak_linear(512, form), large = peak_linear(8192, form);
    INFO("form " << int(form) << ": peak " << small << " bytes at n = 512, " << large
                 << " at n = 8192");
    const long long block = form == peal::LinearForm::parallel ? (2 << 20) + 16 * 8192 : 0;
    CHECK(large <= small + block + 64 * (8192 - 512));
  }
}

// threads (ScoreOptions, AttentionOptions): any count up to INT_MAX is taken. The tile driver
// (detail/tiled/tile_run.hpp) clamps it before its products (`4 * threads` overflowed int past
// 2^29: undefined behaviour, in practice a division by zero with 4 key heads), and results are
// bitwise those of one thread whatever the count (docs/kernels-scores.md §2). With OpenMP the
// prefill problem has work for 4 threads (2 x 8 x 256 x 256 x 32 flops, > 4 x 2^23) and units
// for more; the decode problem (1 query, one key head) goes through the key splits.
TEST_CASE("scores / attention: threads up to INT_MAX give the bits of one thread",
          "[scores][attention][threads]") {
  const Index d = 32, Hq = 8, Hk = 4;
  const auto enc = bank(int(d / 2), -1e-3);
  std::mt19937 rng(11);
  std::normal_distribution<float> N(0.0f, 1.0f);
  auto fill = [&](Index n) {
    std::vector<float> x(static_cast<std::size_t>(n));
    for (auto& e : x) e = N(rng);
    return x;
  };
  const int counts[] = {2, 3, (1 << 29) - 1, 1 << 29, (1 << 29) + 1, INT_MAX - 1, INT_MAX};
  SECTION("scores, prefill") {
    const Index n = 256;
    const auto q = fill(n * Hq * d), k = fill(n * Hk * d);
    auto run = [&](int threads) {
      std::vector<float> out(std::size_t(Hq * n * n));
      ScoreOptions opt;
      opt.causal = true, opt.threads = threads, opt.query_tile = 32, opt.key_tile = 64;
      peal::scores(enc, TensorView<const float>(q.data(), n, Hq, d), Positions::sequence(0.0),
                   TensorView<const float>(k.data(), n, Hk, d), Positions::sequence(0.0),
                   TensorView<float>(out.data(), Hq, n, n), opt);
      return out;
    };
    const auto one = run(1);
    for (int t : counts) {
      CAPTURE(t);
      CHECK(run(t) == one);
    }
  }
  SECTION("attention, prefill and decode") {
    for (Index nq : {Index(256), Index(1)}) {
      const Index nk = 256, hk = nq == 1 ? 1 : Hk;
      const auto q = fill(nq * Hq * d), k = fill(nk * hk * d), v = fill(nk * hk * d);
      auto run = [&](int threads) {
        std::vector<float> out(std::size_t(nq * Hq * d));
        std::vector<double> lse(std::size_t(nq * Hq));
        peal::AttentionOptions opt;
        opt.causal = true, opt.threads = threads, opt.lse = lse.data();
        opt.query_tile = 32, opt.key_tile = 32;
        peal::attention(enc, TensorView<const float>(q.data(), nq, Hq, d),
                        Positions::sequence(double(nk - nq)),
                        TensorView<const float>(k.data(), nk, hk, d), Positions::sequence(0.0),
                        TensorView<const float>(v.data(), nk, hk, d),
                        TensorView<float>(out.data(), nq, Hq, d), opt);
        return std::make_pair(out, lse);
      };
      const auto one = run(1);
      for (int t : counts) {
        CAPTURE(nq, t);
        const auto got = run(t);
        CHECK(got.first == one.first);
        CHECK(got.second == one.second);
      }
    }
  }
}
