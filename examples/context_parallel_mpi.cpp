// Context-parallel attention over MPI: a KV cache too long for one process is cut into
// contiguous slices, one per rank; every rank runs peal::attention of the (shared) queries over
// its own slice with AttentionOptions::lse, and the partial results are merged by log-sum-exp
// with peal::merge_attention (include/peal/merge_attention.hpp; the scheme and its cost:
// docs/kernels-attention.md, "Context parallelism over MPI").
//
//   * each rank holds keys, values and the keys' ABSOLUTE positions of tokens [j0, j1); the
//     queries and their positions are known to every rank. Positions are absolute, so a slice
//     needs no re-encoding: keys encoded at insertion (G(s) k, what engines cache for RoPE)
//     stay valid on whichever rank holds them, and raw keys are encoded inside attention at
//     their own positions;
//   * each rank sends its partial out [nq, Hq, dv] and lse [nq, Hq] to rank 0 (MPI_Gather):
//     nq Hq (dv sizeof(float) + 8) bytes, whatever the length of its slice;
//   * rank 0 merges the partials in rank order (the result does not depend on which rank
//     finished first) and checks them against one peal::attention call over the whole cache.
//
// Two scenarios, with a Llama-3.1-style RoPE preset (llama3 scaling, theta 500000):
//   prefill, causal: n queries at irregular timestamps over the same n tokens as keys; the
//     causal mask is applied by each rank on the true positions, so a query earlier than every
//     key of a slice sees nothing there: that partial row has lse = -inf and weighs nothing;
//   decode: one query, grouped-query attention (8 query heads over 2 KV heads), a long cache
//     of keys encoded at insertion (keys_encoded).
//
// Run: mpirun -np 4 build/examples/example_context_parallel_mpi (add --allow-run-as-root as
// root, --oversubscribe with more ranks than cores: examples/CMakeLists.txt's ctests do). Exits
// nonzero on every rank if any merged result differs from the single-process one by more
// than the stated tolerance, or if the check would not catch a missing partial.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API only (OpenMPI's deprecated C++ bindings are not used)
#endif
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <peal/attention.hpp>
#include <peal/merge_attention.hpp>
#include <peal/presets/rope.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using peal::Index;

// A value in [-1, 1) that depends only on (stream, index) (splitmix64): any rank can make any
// token's q, k or v without the others, and rank 0 can remake the whole cache for the check.
float value_at(std::uint64_t stream, std::uint64_t i) {
  std::uint64_t z = (stream << 40) + i + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return float(double(z >> 11) * 0x1p-52 - 1.0);
}

// Tokens [j0, j1) of a [n, H, dim] tensor of stream `stream`, packed.
std::vector<float> tokens(std::uint64_t stream, Index j0, Index j1, Index H, Index dim) {
  std::vector<float> x(std::size_t((j1 - j0) * H * dim));
  for (std::size_t e = 0; e < x.size(); ++e)
    x[e] = value_at(stream, std::uint64_t(j0 * H * dim) + e);
  return x;
}

struct Scenario {
  const char* name;
  Index nq, nk, Hq, Hk, d, dv;
  std::vector<double> tq, tk;  // positions of the queries and of the keys (known to all)
  bool causal;
  bool keys_encoded;  // the cache holds G(s) k (encoded at insertion) rather than raw k
};

// Tolerances. Both results are float attention of the same data and differ only by rounding
// in a different order: one call sums the keys in its own tiles and key ranges, the other per
// slice, then rounds each partial out to float once more and merges in double. Outputs are
// compared absolutely (|out| <= max|v| = 1), lse relatively to 1 + |lse| (lse ~ ln nk plus the
// largest logit: a few units). A logit's rounding is at most ~ d u scale |q||k| ~ 64 * 6e-8 *
// (1/8) * 21 ~ 1e-5 (Higham's gamma_d), and the first-order worst case of the output over
// these key counts (tests/tolerances.hpp, Tol<float>::attention_out) is ~1e-4; but the
// roundings are of either sign and average out over the keys: the two results come out ~1e-7
// apart (a float eps; printed). 1e-5 (~84 float eps) keeps a margin of ~100 over that, as
// examples/decoder_step.cpp does, and is far below what a missing or misweighted partial
// gives (~1e-2 to 1e-1, printed as the control below).
constexpr double kTolOut = 1e-5;
constexpr double kTolLse = 1e-5;

struct Check {
  double out_err = 0, lse_err = 0, control_err = 0;
  Index empty_rows = 0;  // partial rows (over all ranks) with no visible key: lse = -inf
  bool ok = true;
};

// lse rows compared: equal infinities (a row with no key anywhere) count as exact.
double lse_diff(double a, double b) {
  if (a == b) return 0;
  return std::abs(a - b) / (1 + std::abs(b));
}

template <class Rope>
Check run(const Rope& rope, const Scenario& s, int rank, int nranks, MPI_Comm comm) {
  // ---- This rank's slice of the cache: tokens [j0, j1), keys, values, absolute positions.
  const Index j0 = s.nk * rank / nranks, j1 = s.nk * (rank + 1) / nranks, n = j1 - j0;
  std::vector<float> k = tokens(1, j0, j1, s.Hk, s.d), v = tokens(2, j0, j1, s.Hk, s.dv);
  const std::vector<double> tk(s.tk.begin() + j0, s.tk.begin() + j1);
  if (s.keys_encoded)  // at insertion, at the keys' own positions: no rank ever re-encodes
    peal::encode_keys(rope, peal::make_view(k.data(), n, s.Hk, s.d), peal::Positions(tk));
  // The queries: the same on every rank.
  const std::vector<float> q = tokens(0, 0, s.nq, s.Hq, s.d);

  // ---- Partial attention over the slice, with its log-sum-exp.
  const Index rows = s.nq * s.Hq, out_size = rows * s.dv;
  const std::size_t n_rows = std::size_t(rows), n_out = std::size_t(out_size);
  std::vector<float> out(n_out);
  std::vector<double> lse(n_rows);
  peal::AttentionOptions opt;
  opt.causal = s.causal;
  opt.keys_encoded = s.keys_encoded;
  auto call = [&](const std::vector<float>& kk, const std::vector<float>& vv,
                  const std::vector<double>& pos, Index nkeys, float* o, double* l) {
    peal::AttentionOptions op = opt;
    op.lse = l;
    peal::attention(rope, peal::make_view(q.data(), s.nq, s.Hq, s.d), peal::Positions(s.tq),
                    peal::make_view(kk.data(), nkeys, s.Hk, s.d), peal::Positions(pos),
                    peal::make_view(vv.data(), nkeys, s.Hk, s.dv),
                    peal::make_view(o, s.nq, s.Hq, s.dv), op);
  };
  call(k, v, tk, n, out.data(), lse.data());

  // ---- Gather the partials to rank 0: nq Hq dv floats and nq Hq doubles from each rank.
  std::vector<float> all_out;
  std::vector<double> all_lse;
  if (rank == 0) {
    all_out.resize(n_out * std::size_t(nranks));
    all_lse.resize(n_rows * std::size_t(nranks));
  }
  MPI_Gather(out.data(), int(out_size), MPI_FLOAT, all_out.data(), int(out_size), MPI_FLOAT, 0,
             comm);
  MPI_Gather(lse.data(), int(rows), MPI_DOUBLE, all_lse.data(), int(rows), MPI_DOUBLE, 0, comm);
  Check c;
  if (rank != 0) return c;

  // ---- Rank 0: merge in rank order.
  std::vector<peal::AttentionPartial<float>> parts;
  for (int r = 0; r < nranks; ++r) {
    parts.push_back({peal::make_view<const float>(all_out.data() + r * out_size, s.nq, s.Hq, s.dv),
                     all_lse.data() + r * rows});
    for (Index i = 0; i < rows; ++i)
      c.empty_rows +=
          all_lse[std::size_t(r * rows + i)] == -std::numeric_limits<double>::infinity();
  }
  std::vector<float> merged(n_out);
  std::vector<double> merged_lse(n_rows);
  peal::merge_attention(parts, peal::make_view(merged.data(), s.nq, s.Hq, s.dv), merged_lse.data());

  // ---- The check: one process, the whole cache (remade here; a real deployment has no such
  // copy), one attention call.
  std::vector<float> K = tokens(1, 0, s.nk, s.Hk, s.d), V = tokens(2, 0, s.nk, s.Hk, s.dv);
  if (s.keys_encoded)
    peal::encode_keys(rope, peal::make_view(K.data(), s.nk, s.Hk, s.d), peal::Positions(s.tk));
  std::vector<float> whole(n_out);
  std::vector<double> whole_lse(n_rows);
  call(K, V, s.tk, s.nk, whole.data(), whole_lse.data());
  for (Index e = 0; e < out_size; ++e)
    c.out_err =
        std::max(c.out_err, double(std::abs(merged[std::size_t(e)] - whole[std::size_t(e)])));
  for (Index i = 0; i < rows; ++i)
    c.lse_err =
        std::max(c.lse_err, lse_diff(merged_lse[std::size_t(i)], whole_lse[std::size_t(i)]));

  // What the check catches: the merge without the last rank's partial (its keys lost).
  if (nranks > 1) {
    parts.pop_back();
    peal::merge_attention(parts, peal::make_view(merged.data(), s.nq, s.Hq, s.dv));
    for (Index e = 0; e < out_size; ++e)
      c.control_err =
          std::max(c.control_err, double(std::abs(merged[std::size_t(e)] - whole[std::size_t(e)])));
  }
  // NaN-safe: a NaN error fails.
  c.ok = c.out_err <= kTolOut && c.lse_err <= kTolLse && (nranks == 1 || c.control_err > kTolOut);

  const double sent = double(rows) * (double(s.dv) * sizeof(float) + sizeof(double));
  const double slice = double(s.nk) / nranks * double(s.Hk) * double(s.d + s.dv) * sizeof(float);
  std::printf("%s: %td queries x %td keys, %td query heads over %td KV heads, head_dim %td\n",
              s.name, s.nq, s.nk, s.Hq, s.Hk, s.d);
  std::printf("  sent per rank: %.0f bytes (out + lse; its KV slice: %.0f bytes)\n", sent, slice);
  std::printf("  partial rows with no visible key (lse -inf): %td of %td\n", c.empty_rows,
              rows * nranks);
  std::printf(
      "  merged vs one process: max |out diff| %.2e (tolerance %.0e), max lse diff %.2e "
      "(tolerance %.0e (1 + |lse|))\n",
      c.out_err, kTolOut, c.lse_err, kTolLse);
  if (nranks > 1)
    std::printf("  (merged without rank %d's partial: max |out diff| %.2e)\n", nranks - 1,
                c.control_err);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm comm = MPI_COMM_WORLD;
  int rank = 0, nranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &nranks);
  int ok = 1;
  try {
    // Llama 3.1's RoPE (config.json: rope_theta 500000, rope_scaling llama3), head_dim 64.
    peal::RopeConfig rc;
    rc.head_dim = 64;
    rc.rope_theta = 500000.0;
    rc.max_position_embeddings = 131072;
    rc.scaling.type = peal::RopeType::Llama3;
    rc.scaling.factor = 8.0;
    rc.scaling.low_freq_factor = 1.0;
    rc.scaling.high_freq_factor = 4.0;
    rc.scaling.original_max_position_embeddings = 8192;
    const auto rope = peal::rope<double>(rc);

    // Prefill: n tokens at irregular times from 1000 (gaps in [0.5, 2)), queries = keys.
    Scenario prefill{"prefill, causal", 256, 256, 4, 2, 64, 64, {}, {}, true, false};
    double t = 1000;
    for (Index i = 0; i < prefill.nk; ++i) {
      t += 1.25 + 0.75 * double(value_at(3, std::uint64_t(i)));
      prefill.tk.push_back(t);
    }
    prefill.tq = prefill.tk;
    // Decode: one query at position nk over keys at 0 .. nk-1, encoded in the cache.
    Scenario decode{"decode, GQA", 1, 8192, 8, 2, 64, 64, {8192.0}, {}, true, true};
    for (Index j = 0; j < decode.nk; ++j) decode.tk.push_back(double(j));

    if (nranks > decode.nk || nranks > prefill.nk) throw std::runtime_error("more ranks than keys");
    if (rank == 0)
      std::printf("context-parallel attention over %d ranks, RoPE %s (theta %g), float\n", nranks,
                  peal::to_string(rope.type()), rc.rope_theta);
    for (const Scenario* s : {&prefill, &decode})
      if (!run(rope, *s, rank, nranks, comm).ok) ok = 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "context_parallel_mpi (rank %d): %s\n", rank, e.what());
    MPI_Abort(comm, 1);
  }
  // Every rank exits with rank 0's verdict.
  MPI_Bcast(&ok, 1, MPI_INT, 0, comm);
  if (rank == 0) std::printf("%s\n", ok ? "ok" : "FAILED: merged result off the tolerance");
  MPI_Finalize();
  return ok ? 0 : 1;
}
