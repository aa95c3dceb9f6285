// The conformance suite's checks (declared in conformance_suite.hpp): the covering designs, the
// long double references and the comparisons of every kernel, compiled once for every family.
#include "conformance_suite.hpp"

namespace peal_test {
namespace conformance {
// ---- Positions ---------------------------------------------------------------------------------
const char* pos_name(PosKind k) {
  const char* n[] = {"regular", "irregular", "large"};
  return n[int(k)];
}
// Regular positions are a Positions::sequence, irregular ones a span, large ones either.
bool kind_is_sequence(PosKind k, bool large_sequence) {
  return k == PosKind::regular || (k == PosKind::large && large_sequence);
}

PositionSet sequence_set(Index n, double start, double step) {
  PositionSet p;
  p.sequence = true, p.start = start, p.step = step;
  const Positions s = Positions::sequence(start, step);
  for (Index i = 0; i < n; ++i) p.v.push_back(s[i]);
  return p;
}
/// Irregular timestamps: base + cumulative gaps, log-uniform in [1e-3, 1e3].
PositionSet irregular_set(Index n, double base, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-3, 3);
  PositionSet p;
  double t = base;
  for (Index i = 0; i < n; ++i) {
    p.v.push_back(t);
    t += std::pow(10.0, u(rng));
  }
  return p;
}
PositionSet slice(const PositionSet& p, Index b, Index n) {
  PositionSet s;
  s.v.assign(p.v.begin() + b, p.v.begin() + b + n);
  return s;
}
// Every difference of positions (and of tile midpoints) exact in double: multiples of 1/8
// below 2^48.
bool differences_exact(const PositionSet& p) {
  for (double x : p.v)
    if (!(std::abs(x) < 0x1p48 && std::floor(8 * x) == 8 * x)) return false;
  return true;
}
/// Largest spread of `w` consecutive positions (a tile of w tokens spans at most this).
LD window_spread(const PositionSet& p, Index w) {
  LD m = 0;
  const Index n = Index(p.v.size());
  for (Index i = 0; i < n; ++i) {
    LD lo = p.v[std::size_t(i)], hi = lo;
    for (Index j = i; j < std::min(n, i + w); ++j)
      lo = std::min(lo, LD(p.v[std::size_t(j)])), hi = std::max(hi, LD(p.v[std::size_t(j)]));
    m = std::max(m, hi - lo);
  }
  return m;
}

/// Counts mismatches and keeps the first one's description.
struct Mismatches {
  Index bad = 0;
  std::string first;
  void add(const std::string& what) {
    if (!bad++) first = what;
  }
};

void fill_inputs(Buffer& b, std::mt19937_64& rng, Shaper shape, bool query) {
  std::uniform_real_distribution<double> u(-1, 1);
  const Geometry& g = b.geometry();
  LVector v(g.dim);
  for (Index t = 0; t < g.tokens; ++t)
    for (Index h = 0; h < g.heads; ++h) {
      for (Index j = 0; j < g.dim; ++j) v(j) = u(rng);
      if (shape && g.dim >= 2) shape(query, int(h), int(g.heads), v);
      for (Index j = 0; j < g.dim; ++j) b.set(t, h, j, v(j));
    }
}
LVector segment(const std::vector<LD>& v, Index at, Index d) {
  LVector x(d);
  for (Index j = 0; j < d; ++j) x(j) = v[std::size_t(at + j)];
  return x;
}

// ---- encode_queries / encode_keys / shift_keys -------------------------------------------------

/// The storage an out-of-place call writes from `s` (a pair of encode_pairs, or s itself).
Storage partner(Storage s, bool full) {
  for (const StoragePair& p : encode_pairs(full))
    if (p.src == s) return p.dst;
  return s;
}

// c = 0 .. 27: tokens x heads (c % 7, c / 7), storage x placement x mixed (c % 4, c / 4, c / 8:
// every storage in place and out of place into itself; float and half also into their partner
// of encode_pairs), storage x geometry
// (c % 4, c % 5: all 20), tokens x positions (c % 7, c % 3: all 21). Long double encodings
// (full = false): float and double only.
EncodeCase encode_case(int c, bool full) {
  static const Index tokens[] = {1, 3, 7, 17, 63, 65, 257};
  static const Storage all[] = {Storage::f32, Storage::f64, Storage::f16, Storage::bf16};
  static const double deltas[] = {1.0, -7.25, 0.0, 123.5, 0.375};
  EncodeCase e{};
  e.tokens = tokens[c % 7];
  e.heads = (c / 7) % 2 ? 3 : 1;
  e.pos = PosKind(c % 3);
  e.sequence = (c / 3) % 2 == 0;
  e.src = full ? all[c % 4] : all[(c / 8) % 2];  // reduced: every 4th case, so c / 8
  e.in_place = (c / 4) % 2 == 0;
  e.dst = !e.in_place && (c / 8) % 2 == 0 ? partner(e.src, full) : e.src;
  e.src_shape = Shape(c % 5);
  e.dst_shape = Shape((c + 2) % 5);
  e.delta = deltas[(c / 2) % 5];
  return e;
}

std::string describe(const EncodeCase& e) {
  std::ostringstream os;
  os << e.tokens << " tokens x " << e.heads << " heads, " << pos_name(e.pos)
     << (kind_is_sequence(e.pos, e.sequence) ? " (sequence)" : " (span)") << ", "
     << storage_name(e.src) << " " << shape_name(e.src_shape);
  if (e.in_place)
    os << ", in place";
  else
    os << " -> " << storage_name(e.dst) << " " << shape_name(e.dst_shape);
  os << ", shift " << e.delta;
  return os.str();
}

/// Positions of an encode case: |t| <= tokens/4 (regular, step 1/2), irregular from -7.3, or
/// around 1.7e9.
PositionSet encode_positions(const EncodeCase& e, std::mt19937_64& rng) {
  const Index n = e.tokens;
  switch (e.pos) {
    case PosKind::regular:
      return sequence_set(n, -0.25 * double(n), 0.5);
    case PosKind::irregular:
      return irregular_set(n, -7.3, rng);
    case PosKind::large:
      return e.sequence ? sequence_set(n, 1.7e9 + 0.5, 1.0) : irregular_set(n, 1.7e9 + 0.3, rng);
  }
  return {};
}

/// The non-zeros of a factor, row by row (F(t), G(s) and the shift are sparse for block-diagonal
/// encodings: every product below is O(non-zeros), not O(d^2)).
struct SparseRows {
  Index rows = 0;
  std::vector<Index> start, col;
  std::vector<LD> val;
  std::vector<LD> abs_sum;  // rowsum |M|
  bool finite = true;
  LD min_abs = std::numeric_limits<LD>::infinity();  // smallest non-zero |M_jl|
  explicit SparseRows(const LMatrix& M) : rows(M.rows()) {
    start.push_back(0);
    for (Index j = 0; j < M.rows(); ++j) {
      LD sum = 0;
      for (Index l = 0; l < M.cols(); ++l) {
        const LD v = M(j, l);
        if (v == 0) continue;
        col.push_back(l), val.push_back(v);
        sum += std::abs(v);
        finite = finite && std::isfinite(v);
        min_abs = std::min(min_abs, std::abs(v));
      }
      abs_sum.push_back(sum);
      start.push_back(Index(col.size()));
    }
  }
  Index nnz(Index j) const { return start[std::size_t(j + 1)] - start[std::size_t(j)]; }
  LD dot(Index j, const LVector& x) const {
    LD y = 0;
    for (Index e = start[std::size_t(j)]; e < start[std::size_t(j + 1)]; ++e)
      y += val[std::size_t(e)] * x(col[std::size_t(e)]);
    return y;
  }
  LD abs_dot(Index j, const LVector& x) const {  // (|M| |x|)_j
    LD y = 0;
    for (Index e = start[std::size_t(j)]; e < start[std::size_t(j + 1)]; ++e)
      y += std::abs(val[std::size_t(e)]) * std::abs(x(col[std::size_t(e)]));
    return y;
  }
  LD support_sum(Index j, const LVector& x) const {  // sum_{l in row j} |x_l|
    LD y = 0;
    for (Index e = start[std::size_t(j)]; e < start[std::size_t(j + 1)]; ++e)
      y += std::abs(x(col[std::size_t(e)]));
    return y;
  }
  LVector times(const LVector& x) const {
    LVector y(rows);
    for (Index j = 0; j < rows; ++j) y(j) = dot(j, x);
    return y;
  }
  LVector abs_times(const LVector& x) const {
    LVector y(rows);
    for (Index j = 0; j < rows; ++j) y(j) = abs_dot(j, x);
    return y;
  }
};

/// The angle terms of Tol::encode for y = M x: angle_eps * rowsum_j |R| * sum_{l in row j} |x'_l|,
/// R the rotation factor the kernel applies and x' what it is applied to (Oracle::angle_factor).
struct AngleTerms {
  const SparseRows* R = nullptr;  // nullptr: no rotation, no term
  LD eps = 0;
  LD at(Index j, const LVector& xr) const {
    return R ? eps * R->abs_sum[std::size_t(j)] * R->support_sum(j, xr) : 0;
  }
};

/// y = M x and the documented per-element bound (Tol::encode), for one vector. ok = false where
/// encode is not defined to be accurate (docs/kernels-encode.md, "not clamped"): a coefficient
/// below the normal range of the arithmetic type (2^24 of headroom for the products), or a
/// result beyond a sixteenth of what the arithmetic and the storage type hold.
struct Expected {
  LVector y, tol, mag;  // mag = |M| |x|
  bool ok = true;
};
Expected expect_product(const SparseRows& M, const LVector& x, Storage dst, bool dbl, LD cond,
                        const AngleTerms& angle, const LVector& xr) {
  Expected e;
  e.y = M.times(x);
  e.mag = M.abs_times(x);
  const LD lo = std::ldexp(
      dbl ? LD(std::numeric_limits<double>::min()) : LD(std::numeric_limits<float>::min()), 24);
  const LD hi = std::min(storage_max(dst), dbl ? LD(std::numeric_limits<double>::max())
                                               : LD(std::numeric_limits<float>::max())) /
                16;
  e.ok = M.finite && M.min_abs >= lo && e.mag.allFinite() &&
         (e.mag.size() == 0 || e.mag.maxCoeff() <= hi);
  e.tol.resize(x.size());
  const LD eps_t = storage_eps(dst), floor_t = storage_floor(dst);
  for (Index j = 0; j < x.size(); ++j) {
    const LD k = LD(M.nnz(j)), a = angle.at(j, xr);
    e.tol(j) = dbl ? Tol<double>::encode(k, e.mag(j), e.y(j), eps_t, floor_t, cond, a)
                   : Tol<float>::encode(k, e.mag(j), e.y(j), eps_t, floor_t, cond, a);
  }
  return e;
}
// Conditioning of the coefficients at time t (Tol::encode): e^{rate t} from a rounded argument,
// in the real type of the encoding the kernel runs; and its angle error.
LD encode_cond(const Oracle& o, LD t, bool enc_long) {
  const LD x = o.rate * std::abs(t);
  return enc_long ? Tol<long double>::phase(x) : Tol<double>::phase(x);
}
LD angle_eps(bool enc_long) {
  return enc_long ? Tol<long double>::angle_eps() : Tol<double>::angle_eps();
}

/// Compares one stored vector with its expectation; returns false if not checked.
bool compare_vector(const Expected& e, const Buffer& out, Index t, Index h, LD pos, LD& worst,
                    Mismatches& mm, const char* what) {
  if (!e.ok) return false;
  for (Index j = 0; j < e.y.size(); ++j) {
    const LD got = out.at(t, h, j), err = std::abs(got - e.y(j));
    if (!(err <= e.tol(j))) {
      std::ostringstream os;
      os.precision(17);
      os << what << " (token " << t << " at " << double(pos) << ", head " << h << ", elem " << j
         << "): got " << double(got) << " want " << double(e.y(j)) << " tol " << double(e.tol(j))
         << " (|M||x| " << double(e.mag(j)) << ")";
      mm.add(os.str());
    }
    if (e.tol(j) > 0) worst = std::max(worst, err / e.tol(j));
  }
  return true;
}

/// A factor F(p) / G(p) with what its angle terms need (the rotation factor and its input).
struct Factor {
  SparseRows M;
  std::unique_ptr<SparseRows> inner;  // a basis change's rotation factor, else none
  AngleTerms angle;
  Factor(const Oracle& o, bool query, LD p, bool enc_long) : M(query ? o.F(p) : o.G(p)) {
    if (!o.rotations) return;
    if (o.basis) inner.reset(new SparseRows(o.inner_factor(query, p)));
    angle.R = inner ? inner.get() : &M;
    angle.eps = angle_eps(enc_long);
  }
  Factor(const Factor&) = delete;
  Factor& operator=(const Factor&) = delete;
  /// What the rotation factor is applied to: x, or |P^T||x| (|P^{-1}||x|) for a basis change.
  LVector rotated(const Oracle& o, bool query, const LVector& x) const {
    return inner ? o.basis_input(query, x) : LVector(x.cwiseAbs());
  }
};

/// shift_keys on keys encoded by the kernel at s: (a) against the shift factor applied to the
/// stored encoded keys y1 (the shift's own bound, Tol::encode with M = A(-delta)); (b) against
/// G(s + delta) x, the key encoded at s + delta, bounded by composing the two documented bounds:
/// y1 = G(s) x + e1, y2 = S y1 + e2, so |y2 - G(s + delta) x| <= |S| b1 + b2.
void check_shift(const Oracle& o, const KernelSet& ks, const EncodeCase& ec, const PositionSet& ps,
                 const std::vector<LD>& x, Buffer& y1, bool enc_long, Stats& st) {
  const Index n = ec.tokens, H = ec.heads, d = o.dim();
  const std::vector<LD> y1v = y1.values();
  Buffer* y2 = &y1;
  std::unique_ptr<Buffer> other;
  if (!ec.in_place) {  // out of place into the partner storage, the source's geometry
    other.reset(new Buffer(partner(y1.type(), ks.full()), make_geometry(ec.src_shape, n, H, d),
                           std::nan("")));
    y2 = other.get();
  }
  const auto before = y2->snapshot();
  ks.shift(y1.view(), y2->view(), ec.delta);
  CHECK(y2->changed_outside(before) == 0);
  const bool dbl1 = double_arithmetic(ec.src, y1.type());
  const bool dbl2 = double_arithmetic(y1.type(), y2->type());
  // The shift factor is applied to the encoded key itself (also for a basis change: A_J(-delta)).
  const SparseRows S(o.shift_factor(ec.delta));
  const AngleTerms sa{o.rotations ? &S : nullptr, angle_eps(enc_long)};
  const LD scond = encode_cond(o, ec.delta, enc_long);
  Mismatches mm;
  for (Index t = 0; t < n; ++t) {
    const LD s = ps.v[std::size_t(t)];
    const Factor Gs(o, false, s, enc_long);
    const SparseRows Gsd(o.G(s + LD(ec.delta)));
    if (!Gsd.finite) continue;
    for (Index h = 0; h < H; ++h) {
      const Index at = (t * H + h) * d;
      const LVector xv = segment(x, at, d), y1x = segment(y1v, at, d);
      const Expected e1 = expect_product(Gs.M, xv, y1.type(), dbl1, encode_cond(o, s, enc_long),
                                         Gs.angle, Gs.rotated(o, false, xv));
      const Expected a = expect_product(S, y1x, y2->type(), dbl2, scond, sa, y1x.cwiseAbs());
      if (!e1.ok || !a.ok) continue;
      compare_vector(a, *y2, t, h, s, st.worst_shift, mm, "shift_keys vs A(-delta) y1");
      Expected b;
      b.y = Gsd.times(xv);
      b.mag = S.abs_times(e1.mag);
      b.tol = S.abs_times(e1.tol) + a.tol;
      compare_vector(b, *y2, t, h, s, st.worst_shift, mm, "shift_keys vs G(s + delta) x");
      st.shift_checked += d;
    }
  }
  INFO("shift_keys: " << mm.first);
  CHECK(mm.bad == 0);
}

/// encode_queries and encode_keys of one case against F(t) x and G(s) x, then shift_keys.
void check_encode_case(const Oracle& o, const KernelSet& ks, const EncodeCase& ec,
                       const PositionSet& ps, bool enc_long, std::mt19937_64& rng, Stats& st) {
  const Index n = ec.tokens, H = ec.heads, d = o.dim();
  const Positions pos = ps.positions();
  const bool dbl = double_arithmetic(ec.src, ec.dst);
  INFO("encode case: " << describe(ec) << ", dim " << d);
  for (Side side : {Side::query, Side::key}) {
    const bool query = side == Side::query;
    Buffer src(ec.src, make_geometry(ec.src_shape, n, H, d), std::nan(""));
    fill_inputs(src, rng);
    const std::vector<LD> x = src.values();
    const auto src_before = src.snapshot();
    std::unique_ptr<Buffer> dst;
    Buffer* out = &src;
    if (!ec.in_place) {
      dst.reset(new Buffer(ec.dst, make_geometry(ec.dst_shape, n, H, d), std::nan("")));
      out = dst.get();
    }
    const auto out_before = out->snapshot();
    ks.encode(side, src.view(), out->view(), pos);
    if (!ec.in_place) CHECK(src.snapshot() == src_before);  // the source is read only
    CHECK(out->changed_outside(out_before) == 0);
    Mismatches mm;
    for (Index t = 0; t < n; ++t) {
      const LD p = ps.v[std::size_t(t)];
      const Factor M(o, query, p, enc_long);
      const LD cond = encode_cond(o, p, enc_long);
      for (Index h = 0; h < H; ++h) {
        const LVector xv = segment(x, (t * H + h) * d, d);
        const Expected e =
            expect_product(M.M, xv, out->type(), dbl, cond, M.angle, M.rotated(o, query, xv));
        if (compare_vector(e, *out, t, h, p, st.worst_encode, mm,
                           query ? "encode_queries" : "encode_keys"))
          st.enc_checked[int(out->type())] += d;
        else
          ++st.enc_skipped;
      }
    }
    INFO(mm.first);
    CHECK(mm.bad == 0);
    if (side == Side::key) check_shift(o, ks, ec, ps, x, *out, enc_long, st);
  }
}

// ---- scores
// --------------------------------------------------------------------------------------

/// One case of the scores covering design: the problem, and two runs of it (options variant,
// in {1, 2}, view and output layouts rotating.
ScoreCase score_case(int c, bool full) {
  static const Index sizes[11][2] = {{1, 1},    {3, 7},    {7, 3},   {17, 63}, {63, 65}, {65, 17},
                                     {257, 17}, {17, 257}, {1, 257}, {257, 3}, {65, 65}};
  const auto triples = score_triples(full);
  ScoreCase s{};
  s.nq = sizes[c % 11][0];
  s.nk = sizes[c % 11][1];
  s.Hk = (c / 2) % 2 ? 3 : 1;
  s.G = (c / 4) % 2 ? 2 : 1;
  s.pos = PosKind(c % 3);
  s.sequence = (c / 3) % 2 == 0;
  s.st = triples[std::size_t(c) % triples.size()];
  s.qs = Shape(c % 5);
  s.ks = Shape((c / 5 + 2) % 5);
  s.variant[0] = c % 5;
  s.variant[1] = (c + 2) % 5;
  s.out_layout[0] = c % 4;
  s.out_layout[1] = (c / 4 + 1) % 4;
  return s;
}

std::string describe(const ScoreCase& s) {
  std::ostringstream os;
  os << s.nq << " queries x " << s.nk << " keys, Hk " << s.Hk << ", G " << s.G << ", "
     << pos_name(s.pos) << (kind_is_sequence(s.pos, s.sequence) ? " (sequence)" : " (span)")
     << ", q " << storage_name(s.st.q) << " " << shape_name(s.qs) << ", k " << storage_name(s.st.k)
     << " " << shape_name(s.ks) << ", out " << storage_name(s.st.out);
  return os.str();
}

/// Regular: keys 0, 1, ..., queries the last nq of them (chunked prefill); irregular: queries and
/// keys share timestamps (self-attention over the overlap, so t = s occurs at the causal edge);
/// large: either around 1.7e9.
ScorePositions score_positions(const ScoreCase& c, std::mt19937_64& rng) {
  ScorePositions P;
  const bool large = c.pos == PosKind::large;
  const double base = large ? 1.7e9 : 0.0;
  if (c.pos == PosKind::regular || (large && c.sequence)) {
    P.tk = sequence_set(c.nk, base, 1.0);
    P.tq = sequence_set(c.nq, base + double(c.nk - c.nq), 1.0);
  } else {
    const Index n = std::max(c.nq, c.nk);
    const PositionSet all = irregular_set(n, large ? 1.7e9 + 0.3 : -11.7, rng);
    P.tq = slice(all, n - c.nq, c.nq);
    P.tk = slice(all, c.nq <= c.nk ? 0 : n - c.nk, c.nk);
  }
  const auto [q0, q1] = std::minmax_element(P.tq.v.begin(), P.tq.v.end());
  const auto [k0, k1] = std::minmax_element(P.tk.v.begin(), P.tk.v.end());
  P.span = std::max(LD(*q1) - LD(*k0), LD(*k1) - LD(*q0));
  return P;
}

/// Decays gamma_h = e^{-u_h r}, r = min(0.1, 20 / span), u_h in [0, 1] (u = 0: gamma = 1, the
/// edge of (0, 1]): |ln gamma| span <= 20, so gamma^(t - s) stays far inside the float range for
/// s > t too. shared: equal within each group of G query heads (folded into the keys).
std::vector<double> decays(Index Hq, Index G, bool shared, LD span) {
  static const double u[] = {1, 0, 0.5, 0.25, 0.75, 0.125};
  const double r = std::min(0.1, 20.0 / std::max(double(span), 1.0));
  std::vector<double> g;
  for (Index h = 0; h < Hq; ++h) g.push_back(std::exp(-u[(shared ? h / G : h) % 6] * r));
  return g;
}
/// The options variants: automatic tiles; causal with tiles 7 x 16; scale and ALiBi with tiles
/// 16 x 7; causal, negative scale, distinct decays per head, tiles 7 x 7; causal, ALiBi and decays
/// shared within a group, automatic tiles.
ScoreOptions score_options(int variant, Index Hq, Index G, LD span) {
  ScoreOptions o;
  switch (variant) {
    case 0:
      break;
    case 1:
      o.causal = true, o.query_tile = 7, o.key_tile = 16;
      break;
    case 2:
      o.scale = 0.125, o.alibi_slopes = peal::alibi_slopes(int(Hq));
      o.query_tile = 16, o.key_tile = 7;
      break;
    case 3:
      o.causal = true, o.scale = -0.5, o.decay = decays(Hq, G, false, span);
      o.query_tile = 7, o.key_tile = 7;
      break;
    case 4:
      o.causal = true, o.alibi_slopes = peal::alibi_slopes(int(Hq));
      o.decay = decays(Hq, G, true, span);
      break;
  }
  return o;
}
std::string describe(const ScoreOptions& o) {
  std::ostringstream os;
  os << "causal " << o.causal << ", scale " << o.scale << ", alibi " << !o.alibi_slopes.empty()
     << ", decay " << !o.decay.empty() << ", tiles " << o.query_tile << " x " << o.key_tile;
  return os.str();
}

/// [Hq, nq, nk] outputs: 0 dense, 1 padded rows from an offset, 2 column-major per head,
/// 3 heads innermost.
Geometry out_geometry(int layout, Index Hq, Index nq, Index nk) {
  switch (layout) {
    case 1:
      return {Hq, nq, nk, Strides{nq * (nk + 3) + 2, nk + 3, 1}, 1};
    case 2:
      return {Hq, nq, nk, Strides{nq * nk, 1, nq}, 0};
    case 3:
      return {Hq, nq, nk, Strides{1, Hq * nk, Hq}, 0};
    default:
      return {Hq, nq, nk, Strides{nq * nk, nk, 1}, 0};
  }
}

ScoreReference reference_scores(const Oracle& o, const Buffer& q, const Buffer& k,
                                const ScorePositions& P, Index G) {
  const Index nq = q.geometry().tokens, Hq = q.geometry().heads, d = o.dim();
  const Index nk = k.geometry().tokens, Hk = k.geometry().heads;
  ScoreReference r{Hq, nq, nk, G, {}, {}, {}, {}};
  const std::vector<LD> qv = q.values(), kv = k.values();
  std::vector<LVector> keys;
  for (Index j = 0; j < nk; ++j)
    for (Index h = 0; h < Hk; ++h) {
      keys.push_back(segment(kv, (j * Hk + h) * d, d));
      r.ksize.push_back(o.key_size(keys.back()));
    }
  std::map<LD, LD> norms;
  r.lag.resize(std::size_t(nq * nk));
  for (Index i = 0; i < nq; ++i)
    for (Index j = 0; j < nk; ++j) {
      const LD tau = LD(P.tq.v[std::size_t(i)]) - LD(P.tk.v[std::size_t(j)]);
      auto it = norms.find(tau);
      if (it == norms.end()) it = norms.emplace(tau, o.lag_norm(tau)).first;
      r.lag[std::size_t(i * nk + j)] = it->second;
    }
  r.raw.resize(std::size_t(Hq * nq * nk));
  r.qsize.resize(std::size_t(nq * Hq));
  // Factorable encodings: encoded once per vector around the common anchor c (O(n d) instead of
  // O(pairs d) long double transcendentals); else the twin's score through the lag t - s.
  LD lo = std::numeric_limits<LD>::infinity(), hi = -lo;
  for (double t : P.tq.v) lo = std::min(lo, LD(t)), hi = std::max(hi, LD(t));
  for (double t : P.tk.v) lo = std::min(lo, LD(t)), hi = std::max(hi, LD(t));
  const LD c = lo + (hi - lo) / 2;
  std::vector<LVector> kenc;
  if (o.factorable)
    for (Index j = 0; j < nk; ++j)
      for (Index h = 0; h < Hk; ++h)
        kenc.push_back(
            o.encode_at(false, LD(P.tk.v[std::size_t(j)]) - c, keys[std::size_t(j * Hk + h)]));
  for (Index h = 0; h < Hq; ++h)
    for (Index i = 0; i < nq; ++i) {
      const LVector x = segment(qv, (i * Hq + h) * d, d);
      r.qsize[std::size_t(i * Hq + h)] = o.query_size(x);
      LD* row = r.raw.data() + (h * nq + i) * nk;
      if (o.factorable) {
        const LVector qe = o.encode_at(true, LD(P.tq.v[std::size_t(i)]) - c, x);
        for (Index j = 0; j < nk; ++j) row[j] = qe.dot(kenc[std::size_t(j * Hk + h / G)]);
      } else {
        for (Index j = 0; j < nk; ++j)
          row[j] = o.score(x, P.tq.v[std::size_t(i)], keys[std::size_t(j * Hk + h / G)],
                           P.tk.v[std::size_t(j)]);
      }
    }
  return r;
}

/// Compares one output of scores() with the reference under the options, element by element,
/// with the documented bound (Tol::score).
void compare_scores(const Oracle& o, const ScoreReference& ref, const ScorePositions& P,
                    const ScoreOptions& opt, const Buffer& out, bool dbl, bool params_double,
                    Stats& st) {
  const int d = o.dim();
  const LD eps_out = storage_eps(out.type());
  // Tile half-spreads: a tile holds at most query_tile (key_tile) consecutive tokens (defaults at
  // most 256 x 512, docs/kernels-scores.md §2), and a Jordan chain in the GEMM caps them at the
  // polynomial budget.
  const Index TQ = opt.query_tile > 0 ? opt.query_tile : 256,
              TK = opt.key_tile > 0 ? opt.key_tile : 512;
  LD hq = window_spread(P.tq, TQ) / 2, hk = window_spread(P.tk, TK) / 2;
  const LD cap =
      dbl ? Tol<double>::poly_half_spread(o.degree) : Tol<float>::poly_half_spread(o.degree);
  hq = std::min(hq, cap), hk = std::min(hk, cap);
  const LD rho =
      dbl ? Tol<double>::score_rho(o.degree, hq, hk) : Tol<float>::score_rho(o.degree, hq, hk);
  const LD w = hq + hk;
  const bool exact = differences_exact(P.tq) && differences_exact(P.tk) && !params_double;
  // The documented domain (docs/kernels-scores.md §3, "Exponential budget"): the tile factors
  // use 2^16 (float) or 2^128 (double) of the range, so a score may overflow or flush to zero
  // when |q| ||A|| |k| passes 5e33 (2^896), or its size ||A|| gamma^tau falls below 2e-33
  // (2^-894); and the output type must hold it. Outside, elements are counted, not checked.
  const LD hi = std::min(dbl ? std::ldexp(1.0L, 896) : 5e33L, storage_max(out.type()) / 16);
  const LD lo = dbl ? std::ldexp(1.0L, -894) : 2e-33L;
  const LD floor_out = storage_floor(out.type());
  Mismatches mm;
  LD worst = 0;
  for (Index h = 0; h < ref.Hq; ++h) {
    const LD lng = opt.decay.empty() ? 0 : std::log(LD(opt.decay[std::size_t(h)]));
    const LD m = opt.alibi_slopes.empty() ? 0 : LD(opt.alibi_slopes[std::size_t(h)]);
    for (Index i = 0; i < ref.nq; ++i)
      for (Index j = 0; j < ref.nk; ++j) {
        const LD t = P.tq.v[std::size_t(i)], s = P.tk.v[std::size_t(j)], tau = t - s;
        const LD got = out.at(h, i, j);
        if (opt.causal && s > t) {
          if (!(std::isinf(got) && got < 0)) {
            std::ostringstream at;
            at << "masked (" << h << "," << i << "," << j << ") = " << double(got);
            mm.add(at.str());
          }
          continue;
        }
        const LD g = lng == 0 ? 1 : std::exp(lng * tau);
        const LD want =
            LD(opt.scale) * g * ref.raw[std::size_t((h * ref.nq + i) * ref.nk + j)] - m * tau;
        const LD size = g * ref.lag[std::size_t(i * ref.nk + j)];
        const LD M = std::abs(LD(opt.scale)) * size * ref.qsize[std::size_t(i * ref.Hq + h)] *
                     ref.ksize[std::size_t(j * (ref.Hq / ref.G) + h / ref.G)];
        if (!(M <= hi && size >= lo && std::abs(want) <= hi)) {
          ++st.score_skipped;
          continue;
        }
        const LD reach = std::abs(tau) + 2 * w;
        const LD lag = (o.rate + std::abs(lng)) * reach + (exact ? 0 : o.xnorm * reach);
        const LD alibi = std::abs(m) * (std::abs(tau) + w);
        const LD tol =
            dbl ? Tol<double>::score(d, rho, o.extra, M, alibi, eps_out, floor_out, want, lag)
                : Tol<float>::score(d, rho, o.extra, M, alibi, eps_out, floor_out, want, lag);
        const LD err = std::abs(got - want);
        if (!(err <= tol)) {
          std::ostringstream at;
          at << "(" << h << "," << i << "," << j << ") t " << double(t) << " s " << double(s)
             << ": got " << double(got) << " want " << double(want) << " tol " << double(tol)
             << " (|q||A||k| " << double(M) << ", rho " << double(rho) << ")";
          mm.add(at.str());
        }
        if (tol > 0 && err / tol > st.worst_scores) {
          st.worst_scores = err / tol;
          std::ostringstream os;
          os << describe(opt) << " d " << d << (dbl ? " double" : " float") << " out "
             << storage_name(out.type()) << " (" << h << "," << i << "," << j << ") tau "
             << double(tau) << " err " << double(err) << " tol " << double(tol) << " M "
             << double(M) << " rho " << double(rho) << " want " << double(want) << " alibi "
             << double(alibi) << " lag " << double(lag);
          st.worst_scores_at = os.str();
        }
        if (tol > 0) worst = std::max(worst, err / tol);
        ++st.score_checked;
      }
  }
  INFO("scores: " << describe(opt) << "; " << mm.bad << " mismatches, first " << mm.first
                  << "; worst err/tol " << double(worst));
  CHECK(mm.bad == 0);
}

ScoreInputs::ScoreInputs(const Oracle& o, const ScoreCase& c, const ScorePositions& positions,
                         Shaper shape, std::mt19937_64& rng)
    : P(positions),
      q(c.st.q, make_geometry(c.qs, c.nq, c.Hk * c.G, o.dim()), std::nan("")),
      k(c.st.k, make_geometry(c.ks, c.nk, c.Hk, o.dim()), std::nan("")) {
  fill_inputs(q, rng, shape, true);
  fill_inputs(k, rng, shape, false);
  ref = reference_scores(o, q, k, P, c.G);
}

/// scores() of one case: two runs (options variant, output layout) against the reference.
void check_scores_case(const Oracle& o, const KernelSet& ks, const ScoreCase& c,
                       const ScoreInputs& in, bool params_double, Stats& st) {
  const Index Hq = c.Hk * c.G;
  INFO("scores case: " << describe(c) << ", dim " << o.dim());
  const bool dbl = double_arithmetic(c.st.q, c.st.k);
  for (int r = 0; r < 2; ++r) {
    const ScoreOptions opt = score_options(c.variant[r], Hq, c.G, in.P.span);
    Buffer out(c.st.out, out_geometry(c.out_layout[r], Hq, c.nq, c.nk), 12345);
    const auto before = out.snapshot();
    ks.scores(in.q.view(), in.P.tq.positions(), in.k.view(), in.P.tk.positions(), out.view(), opt);
    INFO("output layout " << c.out_layout[r]);
    CHECK(out.changed_outside(before) == 0);
    compare_scores(o, in.ref, in.P, opt, out, dbl, params_double, st);
  }
}

// ---- attention
// -----------------------------------------------------------------------------------

/// The options of attention case c (a covering design over the score cases, the values drawn
/// from rng): causal (c even, or c % 7 == 3), a window (c % 3 == 0: 0.05 or 0.4 of the span,
/// or 0.5 at regular positions: only the diagonal), ALiBi (c % 4 in {1, 2}), a softcap in
/// [1, 5] (c % 5 in {2, 4}), sinks in [-2, 2] (c % 3 == 1), a negative scale (c % 6 == 5),
/// tiles (auto, 7 x 16, 16 x 7, 7 x 7 by c % 4), lse unless c % 5 == 3.
peal::AttentionOptions attention_options(int c, Index Hq, const ScoreCase& sc,
                                         const ScorePositions& P, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  peal::AttentionOptions o;
  o.causal = c % 2 == 0 || c % 7 == 3;
  if (c % 3 == 0)
    o.window = sc.pos == PosKind::regular && c % 2 == 0
                   ? 0.5
                   : std::max(1e-3, double(P.span) * (c % 2 ? 0.05 : 0.4));
  if (c % 4 == 1 || c % 4 == 2) o.alibi_slopes = peal::alibi_slopes(int(Hq));
  if (c % 5 == 2 || c % 5 == 4) o.softcap = 1 + 4 * u(rng);
  if (c % 3 == 1)
    for (Index h = 0; h < Hq; ++h) o.sinks.push_back(4 * u(rng) - 2);
  if (c % 6 == 5) o.scale = -0.75;
  static const Index tiles[4][2] = {{0, 0}, {7, 16}, {16, 7}, {7, 7}};
  o.query_tile = tiles[c % 4][0], o.key_tile = tiles[c % 4][1];
  return o;
}
std::string describe(const peal::AttentionOptions& o) {
  std::ostringstream os;
  os << "causal " << o.causal << ", window " << o.window << ", alibi " << !o.alibi_slopes.empty()
     << ", softcap " << o.softcap << ", sinks " << !o.sinks.empty() << ", scale "
     << (o.scale ? *o.scale : 0.0) << ", tiles " << o.query_tile << " x " << o.key_tile
     << ", keys_encoded " << o.keys_encoded << ", lse " << (o.lse != nullptr);
  return os.str();
}

/// What the attention reference needs besides the raw scores: per (h, i, j) the scaled score
/// and the size M of its bound (scores' reference, or the encoded keys' for keys_encoded).
struct AttentionScores {
  const std::vector<LD>* raw;  // [h][i][j]: q^T A k (or F(t) q . G(s) k stored)
  std::vector<LD> M;           // [h][i][j]: |q| ||A|| |k| of the bound (without the scale)
  LD rho = 1, extra = 0;
  bool lag = true;  // the rounded position differences enter (raw keys); not for encoded keys
};

/// attention() against softmax of the long double logits times V, row by row: the logit
/// errors of Tol::score through the softcap, ALiBi and exp (Tol::attention_logit), the softmax's
/// Lipschitz bound and the sums in C (Tol::attention_out, attention_lse). Rows with a visible
/// logit outside scores' documented domain (the rebasing headroom) are counted, not checked;
/// rows with no visible key must be exactly 0 with lse -inf (sigma_h with a sink).
void compare_attention(const Oracle& o, const AttentionScores& as, const ScoreReference& ref,
                       const ScorePositions& P, const peal::AttentionOptions& opt, const Buffer& v,
                       const Buffer& out, const std::vector<double>& lse, bool dbl,
                       bool params_double, Stats& st) {
  const int d = o.dim();
  const Index nq = ref.nq, nk = ref.nk, Hq = ref.Hq, G = ref.G, dv = v.geometry().dim;
  const LD eps_c = dbl ? Tol<double>::eps : Tol<float>::eps;
  const LD eps_out = storage_eps(out.type()), floor_out = storage_floor(out.type());
  const LD scale = opt.scale ? LD(*opt.scale) : 1 / std::sqrt(LD(d));
  const Index TQ = opt.query_tile > 0 ? opt.query_tile : 256,
              TK = opt.key_tile > 0 ? opt.key_tile : 512;
  LD hq = window_spread(P.tq, TQ) / 2, hk = window_spread(P.tk, TK) / 2;
  const LD w = hq + hk;
  // Key tiles: TK tokens each when nothing cuts them (no growth, no chain: the plan's
  // half-spread is unlimited), else at most one per key.
  const LD n_tile = LD(std::min(TK, nk));
  const LD n_tiles = o.rate == 0 && o.degree == 0 ? LD((nk + TK - 1) / TK) : LD(nk);
  const bool exact = differences_exact(P.tq) && differences_exact(P.tk) && !params_double;
  const LD hi = dbl ? std::ldexp(1.0L, 896) : 5e33L, lo = dbl ? std::ldexp(1.0L, -894) : 2e-33L;
  const std::vector<LD> vv = v.values();
  Mismatches mm;
  LD worst = 0;
  std::vector<LD> x(static_cast<std::size_t>(nk)), acc(static_cast<std::size_t>(dv)),
      vmax(static_cast<std::size_t>(dv));
  std::vector<char> vis(static_cast<std::size_t>(nk));
  for (Index h = 0; h < Hq; ++h) {
    const LD m = opt.alibi_slopes.empty() ? 0 : LD(opt.alibi_slopes[std::size_t(h)]);
    const bool sink = !opt.sinks.empty();
    const LD sigma = sink ? LD(opt.sinks[std::size_t(h)]) : 0;
    for (Index i = 0; i < nq; ++i) {
      const double ti = P.tq.v[std::size_t(i)];
      LD mx = -std::numeric_limits<LD>::infinity(), delta = 0, L = 0;
      bool any = false, domain = true;
      std::fill(vmax.begin(), vmax.end(), LD(0));
      for (Index j = 0; j < nk; ++j) {
        const double sj = P.tk.v[std::size_t(j)];
        vis[std::size_t(j)] = !((opt.causal && sj > ti) || ti - sj >= opt.window);
        if (!vis[std::size_t(j)]) continue;
        any = true;
        const std::size_t at = std::size_t((h * nq + i) * nk + j);
        const LD tau = LD(ti) - LD(sj), y = scale * (*as.raw)[at];
        const LD M = std::abs(scale) * as.M[at];
        if (!(M <= hi && ref.lag[std::size_t(i * nk + j)] >= lo && std::abs(y) <= hi))
          domain = false;
        const LD reach = std::abs(tau) + 2 * w;
        const LD lag = as.lag ? o.rate * reach + (exact ? 0 : o.xnorm * reach) : 0;
        const LD e = dbl ? Tol<double>::score(d, as.rho, as.extra, M, 0, eps_c, 0, y, lag)
                         : Tol<float>::score(d, as.rho, as.extra, M, 0, eps_c, 0, y, lag);
        LD cy = y, move = e;
        if (opt.softcap > 0) {
          const LD c = opt.softcap;
          cy = c * std::tanh(y / c);
          move = std::max(std::abs(c * std::tanh((y + e) / c) - cy),
                          std::abs(c * std::tanh((y - e) / c) - cy));
        }
        x[std::size_t(j)] = cy - m * tau;
        mx = std::max(mx, x[std::size_t(j)]);
        const LD alibi = std::abs(m) * (std::abs(tau) + 2 * w);
        L = std::max(L, std::abs(cy) + alibi);
        delta =
            std::max(delta, dbl ? Tol<double>::attention_logit(move, y, cy, opt.softcap > 0, alibi)
                                : Tol<float>::attention_logit(move, y, cy, opt.softcap > 0, alibi));
        for (Index e2 = 0; e2 < dv; ++e2)
          vmax[std::size_t(e2)] = std::max(
              vmax[std::size_t(e2)], std::abs(vv[std::size_t((j * (Hq / G) + h / G) * dv + e2)]));
      }
      const double got_lse = lse.empty() ? 0.0 : lse[std::size_t(i * Hq + h)];
      std::ostringstream at;
      at << "(i " << i << ", h " << h << ") t " << ti << ": ";
      if (!any) {  // no visible key: exactly zero, lse -inf or the sink
        ++st.att_empty;
        bool ok = true;
        for (Index e2 = 0; e2 < dv; ++e2) ok &= out.at(i, h, e2) == 0;
        if (!lse.empty()) ok &= sink ? got_lse == double(sigma) : got_lse == -HUGE_VAL;
        if (!ok) mm.add(at.str() + "no visible key, but out or lse not 0 / -inf / sigma");
        continue;
      }
      if (!domain) {
        ++st.att_skipped;
        continue;
      }
      delta += dbl ? Tol<double>::attention_exponent(L) : Tol<float>::attention_exponent(L);
      if (sink) mx = std::max(mx, sigma);
      LD l = 0;
      std::fill(acc.begin(), acc.end(), LD(0));
      for (Index j = 0; j < nk; ++j) {
        if (!vis[std::size_t(j)]) continue;
        const LD p = std::exp(x[std::size_t(j)] - mx);
        l += p;
        for (Index e2 = 0; e2 < dv; ++e2)
          acc[std::size_t(e2)] += p * vv[std::size_t((j * (Hq / G) + h / G) * dv + e2)];
      }
      if (sink) l += std::exp(sigma - mx);
      LD row_worst = 0;
      for (Index e2 = 0; e2 < dv; ++e2) {
        const LD want = acc[std::size_t(e2)] / l, got = out.at(i, h, e2);
        const LD tol =
            (dbl ? Tol<double>::attention_out(delta, n_tile, n_tiles, vmax[std::size_t(e2)])
                 : Tol<float>::attention_out(delta, n_tile, n_tiles, vmax[std::size_t(e2)])) +
            eps_out * std::abs(want) + floor_out;
        const LD err = std::abs(got - want);
        if (!(err <= tol)) {
          std::ostringstream os;
          os << at.str() << "out[" << e2 << "] got " << double(got) << " want " << double(want)
             << " tol " << double(tol) << " (logit error " << double(delta) << ")";
          mm.add(os.str());
        }
        if (tol > 0) row_worst = std::max(row_worst, err / tol);
      }
      if (!lse.empty()) {
        const LD want = mx + std::log(l);
        const LD tol = dbl ? Tol<double>::attention_lse(delta, n_tile, n_tiles, want, L)
                           : Tol<float>::attention_lse(delta, n_tile, n_tiles, want, L);
        const LD err = std::abs(LD(got_lse) - want);
        if (!(err <= tol)) {
          std::ostringstream os;
          os << at.str() << "lse got " << got_lse << " want " << double(want) << " tol "
             << double(tol);
          mm.add(os.str());
        }
        row_worst = std::max(row_worst, err / tol);
      }
      ++st.att_checked;
      if (delta <= 0.1) ++st.att_sharp;
      worst = std::max(worst, row_worst);
      if (row_worst > st.worst_attention) {
        st.worst_attention = row_worst;
        std::ostringstream os;
        os << describe(opt) << " d " << d << " dv " << dv << (dbl ? " double" : " float") << " out "
           << storage_name(out.type()) << " " << at.str() << " logit error " << double(delta)
           << " tiles " << double(n_tile) << " x " << double(n_tiles);
        st.worst_attention_at = os.str();
      }
    }
  }
  INFO("attention: " << describe(opt) << "; " << mm.bad << " mismatches, first " << mm.first
                     << "; worst err/tol " << double(worst));
  CHECK(mm.bad == 0);
}

/// attention() of one score case (case index c), on the scores' inputs and reference: one run
/// with raw keys; then keys_encoded, against the encoded keys as stored, for an encoding whose
/// G(s) is bounded (a pure rotation: no growth, no Jordan chain), or the throw for any other.
void check_attention_case(const Oracle& o, const KernelSet& ks, const ScoreCase& c, int ci,
                          const ScoreInputs& in, bool params_double, std::mt19937_64& rng,
                          Stats& st) {
  const Index Hq = c.Hk * c.G, d = o.dim();
  static const Index dvs[4] = {0, 1, -1, 5};  // dv - d (at least 1)
  const Index dv = std::max<Index>(1, d + dvs[ci % 4]);
  const StorageQuad sq = attention_quad(c.st);
  const bool dbl = double_arithmetic(c.st.q, c.st.k) || sq.v == Storage::f64;
  peal::AttentionOptions opt = attention_options(ci, Hq, c, in.P, rng);
  INFO("attention case: " << describe(c) << ", dim " << d << ", dv " << dv << ", v "
                          << storage_name(sq.v));
  Buffer v(sq.v, make_geometry(Shape((ci + 1) % 5), c.nk, c.Hk, dv), std::nan(""));
  fill_inputs(v, rng);
  std::vector<double> lse;
  if (ci % 5 != 3) lse.assign(std::size_t(c.nq * Hq), std::nan(""));
  opt.lse = lse.empty() ? nullptr : lse.data();
  AttentionScores as;
  as.raw = &in.ref.raw;
  as.extra = o.extra;
  {  // the scores' bound: rho of a chain in the GEMM over the tiles' half-spreads
    const Index TQ = opt.query_tile > 0 ? opt.query_tile : 256,
                TK = opt.key_tile > 0 ? opt.key_tile : 512;
    const LD cap =
        dbl ? Tol<double>::poly_half_spread(o.degree) : Tol<float>::poly_half_spread(o.degree);
    const LD hq = std::min(window_spread(in.P.tq, TQ) / 2, cap),
             hk = std::min(window_spread(in.P.tk, TK) / 2, cap);
    as.rho =
        dbl ? Tol<double>::score_rho(o.degree, hq, hk) : Tol<float>::score_rho(o.degree, hq, hk);
  }
  const Index nq = c.nq, nk = c.nk, Hk = c.Hk;
  as.M.resize(in.ref.raw.size());
  for (Index h = 0; h < Hq; ++h)
    for (Index i = 0; i < nq; ++i)
      for (Index j = 0; j < nk; ++j)
        as.M[std::size_t((h * nq + i) * nk + j)] = in.ref.lag[std::size_t(i * nk + j)] *
                                                   in.ref.qsize[std::size_t(i * Hq + h)] *
                                                   in.ref.ksize[std::size_t(j * Hk + h / c.G)];
  {
    Buffer out(sq.out, make_geometry(Shape((ci + 3) % 5), nq, Hq, dv), 12345);
    const auto before = out.snapshot();
    ks.attention(in.q.view(), in.P.tq.positions(), in.k.view(), in.P.tk.positions(), v.view(),
                 out.view(), opt);
    CHECK(out.changed_outside(before) == 0);
    compare_attention(o, as, in.ref, in.P, opt, v, out, lse, dbl, params_double, st);
  }
  // keys_encoded: G(s) k stored in k's type (encode_keys), against (F(t) q) . (stored key).
  opt.keys_encoded = true;
  Buffer kenc(c.st.k, in.k.geometry(), std::nan(""));
  Buffer out(sq.out, make_geometry(Shape((ci + 2) % 5), nq, Hq, dv), 12345);
  const bool pure = o.rate == 0 && o.factorable;
  if (!pure) {
    CHECK_THROWS_AS(ks.attention(in.q.view(), in.P.tq.positions(), in.k.view(), in.P.tk.positions(),
                                 v.view(), out.view(), opt),
                    peal::invalid_argument);
    ++st.att_throws;
    return;
  }
  ks.encode(Side::key, in.k.view(), kenc.view(), in.P.tk.positions());
  ks.attention(in.q.view(), in.P.tq.positions(), kenc.view(), in.P.tk.positions(), v.view(),
               out.view(), opt);
  ++st.att_encoded;
  const std::vector<LD> qv = in.q.values(), kv = kenc.values();
  std::vector<LD> raw(in.ref.raw.size());
  as.raw = &raw;
  as.rho = 1, as.lag = false;
  std::vector<LVector> keys;
  for (Index j = 0; j < nk * Hk; ++j) keys.push_back(segment(kv, j * d, d));
  for (Index h = 0; h < Hq; ++h)
    for (Index i = 0; i < nq; ++i) {
      const LVector x = segment(qv, (i * Hq + h) * d, d);
      const LVector qe = o.encode_at(true, LD(in.P.tq.v[std::size_t(i)]), x);
      const LD qs = o.query_size(x);
      for (Index j = 0; j < nk; ++j) {
        const LVector& k = keys[std::size_t(j * Hk + h / c.G)];
        raw[std::size_t((h * nq + i) * nk + j)] = qe.dot(k);
        as.M[std::size_t((h * nq + i) * nk + j)] = qs * k.norm();
      }
    }
  compare_attention(o, as, in.ref, in.P, opt, v, out, lse, dbl, params_double, st);
}

/// attention() with threads = 1 and 2, bitwise: a prefill problem large enough for two threads
/// (as check_score_threads) with every option, and a decode step (2 queries, one key head,
/// key_tile 32 over 2^13 keys: key splits merged by log-sum-exp, the split count fixed by the
/// problem).
void check_attention_threads(const Oracle& o, const KernelSet& ks, Storage type,
                             std::mt19937_64& rng) {
  const Index d = o.dim(), Hk = 4, G = 2, Hq = Hk * G, dv = d + 1;
  const Index n = Index(std::ceil(std::sqrt(double(Index(1) << 25) / double(2 * Hq * d))));
  INFO("threads: attention " << n << " x " << n << ", Hq " << Hq << ", " << storage_name(type));
  for (int decode = 0; decode < 2; ++decode) {
    const Index nq = decode ? 2 : n, nk = decode ? Index(1) << 13 : n, hk = decode ? 1 : Hk;
    const Index hq = hk * G;
    Buffer q(type, make_geometry(Shape::aligned, nq, hq, d), 0),
        k(type, make_geometry(Shape::offset, nk, hk, d), 0),
        v(type, make_geometry(Shape::padded, nk, hk, dv), 0);
    fill_inputs(q, rng);
    fill_inputs(k, rng);
    fill_inputs(v, rng);
    const PositionSet pk = sequence_set(nk, 0.0, 1.0 / 64);
    const PositionSet pq = sequence_set(nq, double(nk - nq) / 64, 1.0 / 64);
    peal::AttentionOptions opt;
    opt.causal = true;
    opt.window = double(nk) / 128;
    opt.alibi_slopes = peal::alibi_slopes(int(hq));
    opt.softcap = 3;
    for (Index h = 0; h < hq; ++h) opt.sinks.push_back(0.25 * double(h) - 1);
    if (decode) opt.key_tile = 32;
    std::vector<double> l1(std::size_t(nq * hq)), l2(l1.size());
    Buffer one(type, make_geometry(Shape::aligned, nq, hq, dv), 0), two(type, one.geometry(), 0);
    opt.threads = 1, opt.lse = l1.data();
    ks.attention(q.view(), pq.positions(), k.view(), pk.positions(), v.view(), one.view(), opt);
    opt.threads = 2, opt.lse = l2.data();
    ks.attention(q.view(), pq.positions(), k.view(), pk.positions(), v.view(), two.view(), opt);
    CAPTURE(decode);
    CHECK(one.snapshot() == two.snapshot());
    CHECK(std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(double)) == 0);
  }
  (void)Hq;
}

// ---- Threads: results bitwise independent of the thread count
// -------------------------------------

/// scores() with threads = 1 and 2 on a problem large enough for two threads (the kernel starts
/// one per ~8 MFLOP, docs/kernels-scores.md §4: here >= 4 x 2^23 flops over >= 4 units).
void check_score_threads(const Oracle& o, const KernelSet& ks, Storage type, std::mt19937_64& rng) {
  const Index d = o.dim(), Hk = 4, G = 2, Hq = Hk * G;
  const Index n = Index(std::ceil(std::sqrt(double(Index(1) << 25) / double(2 * Hq * d))));
  REQUIRE(2.0 * double(Hq) * double(n) * double(n) * double(d) >= double(Index(1) << 25));
  INFO("threads: scores " << n << " x " << n << ", Hq " << Hq << ", " << storage_name(type));
  Buffer q(type, make_geometry(Shape::aligned, n, Hq, d), 0),
      k(type, make_geometry(Shape::offset, n, Hk, d), 0);
  fill_inputs(q, rng);
  fill_inputs(k, rng);
  const PositionSet p =
      sequence_set(n, 0.0, 1.0 / 64);  // small steps: long tiles for Jordan chains
  ScoreOptions opt;
  opt.causal = true;
  opt.alibi_slopes = peal::alibi_slopes(int(Hq));
  opt.decay = decays(Hq, G, false, p.v.back());
  Buffer one(type, out_geometry(0, Hq, n, n), 0), two(type, out_geometry(0, Hq, n, n), 0);
  opt.threads = 1;
  ks.scores(q.view(), p.positions(), k.view(), p.positions(), one.view(), opt);
  opt.threads = 2;
  ks.scores(q.view(), p.positions(), k.view(), p.positions(), two.view(), opt);
  CHECK(one.snapshot() == two.snapshot());
}

/// encode_keys / encode_queries with 1 and 2 OpenMP threads (the kernel splits tokens statically
/// over omp_get_max_threads() from 2^16 elements on, docs/kernels-encode.md "Threads").
void check_encode_threads(const Oracle& o, const KernelSet& ks, std::mt19937_64& rng) {
#ifdef _OPENMP
  const Index d = o.dim(), H = 3, T = (Index(1) << 17) / (H * d) + 1;
  REQUIRE(T * H * d >= peal::detail::encode_kernels::kParallelMinElements);
  const PositionSet p = sequence_set(T, -double(T) / 512, 1.0 / 256);
  const int saved = omp_get_max_threads();
  for (Side side : {Side::query, Side::key}) {
    Buffer x(Storage::f32, make_geometry(Shape::aligned, T, H, d), 0);
    fill_inputs(x, rng);
    Buffer a(Storage::f32, x.geometry(), 0), b(Storage::f32, x.geometry(), 0);
    Buffer ha(Storage::f16, make_geometry(Shape::padded, T, H, d), 0),
        hb(Storage::f16, ha.geometry(), 0);
    omp_set_num_threads(1);
    ks.encode(side, x.view(), a.view(), p.positions());   // float -> float, out of place
    ks.encode(side, x.view(), ha.view(), p.positions());  // float -> half: gathered
    omp_set_num_threads(2);
    ks.encode(side, x.view(), b.view(), p.positions());
    ks.encode(side, x.view(), hb.view(), p.positions());
    omp_set_num_threads(saved);
    CHECK(a.snapshot() == b.snapshot());
    CHECK(ha.snapshot() == hb.snapshot());
  }
#else
  (void)o, (void)ks, (void)rng;
  WARN("built without OpenMP: the thread-count checks do not apply");
#endif
}

}  // namespace conformance
}  // namespace peal_test
