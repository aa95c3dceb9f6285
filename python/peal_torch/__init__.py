"""peal_torch: peal's fused attention, linear attention and encode as PyTorch autograd functions.

The encoding is chosen at run time from three banks of blocks, laid on the coordinates of
each head in this order (the rest pass through):

- n rotation pairs on the first 2n coordinates: pair i rotates by omega_i * t and, with a
  damping a_i, scales by exp(a_i * t). a = 0 is RoPE with inv_freq = omega (HF's rotate_half
  layout, "half_split", or the GPT-J/Meta "interleaved" one), a < 0 an xPos/RetNet-like damped
  rotation;
- m real blocks on the next m coordinates: coordinate r scales by exp(lambda_r * t) (a decay
  for lambda < 0, a growth for lambda > 0);
- j Jordan blocks of size 2 on the next 2j: the pair (x0, x1) of block b has
  A(tau) = exp(mu_b tau) [[1, tau], [0, 1]], a score linear in the distance;

    score(q, t; k, s) = q^T A(t - s) k,
    A(tau) = diag(exp(a_i tau) R(omega_i tau)) (+) diag(exp(lambda_r tau))
             (+) diag(exp(mu_b tau) [[1, tau], [0, 1]]) (+) I.

coordinates= (a permutation of the head's coordinates) places the blocks anywhere in the head;
a parameter given as [heads, blocks] instead of [blocks] is per query head (RoPE-Mixed's
learned frequencies per head, RetNet's per-head rates). axes=D (attention and encode): positions
are points in R^D ([tokens, D]: image patches, video) and each parameter has one row per axis,
[D, blocks], A(p) = prod_a A_a(p_a) (peal::MultiAxis; RoPE-Mixed, axial 2-D RoPE).
Gradients are exact and deterministic, for q, k, v, every block's parameters (frequencies,
dampings, lambda, mu), the positions (learned or data-dependent timestamps), ALiBi slopes,
attention sinks and linear attention's per-head decays: the backward kernels of include/peal/attention_backward.hpp,
include/peal/linear_attention_backward.hpp and include/peal/encode_backward.hpp
(docs/gradients.md).

Tensors are token-major, as peal's: [tokens, heads, dim], or [batch, tokens, heads, dim]
with positions [tokens] (shared) or [batch, tokens]. float32, float64, float16 or bfloat16 on
the CPU. The kernels compute in float32 for float32, float16 and bfloat16 (as peal's kernels do
for those storages: include/peal/detail/storage.hpp) and in float64 for float64; a float16 or
bfloat16 call runs the float32 kernels on float32 copies of its rows (made per call and freed
after it) and rounds each result and gradient of q, k, v once to the tensor's dtype. Positions,
frequencies, dampings, slopes, sinks and their gradients are float64 inside.
"""

import math
from dataclasses import dataclass
from typing import Optional

import torch

import _peal_torch as _ext

__all__ = ["attention", "linear_attention", "encode"]

_LAYOUTS = ("half_split", "interleaved")


# The kernels' storage for each tensor dtype: float16 and bfloat16 rows go to the float32
# kernels as float32 copies. Their arithmetic is float32 either way (peal's half-storage kernels
# convert each stored value to float exactly and round each result once: the half-storage cases
# of tests/test_attention_backward_rope.cpp and tests/test_linear_attention_backward.cpp), and
# one set of kernels per storage keeps the module's compile at two (docs/gradients.md §5).
_KERNEL_DTYPES = {torch.float32: torch.float32, torch.float64: torch.float64,
                  torch.float16: torch.float32, torch.bfloat16: torch.float32}


def _kernels(x):
    """The dtype the kernels store x's rows in, and the suffix of their names in _ext."""
    try:
        kd = _KERNEL_DTYPES[x.dtype]
    except KeyError:
        raise ValueError("peal_torch: tensors must be float32, float64, float16 or bfloat16, "
                         f"got {x.dtype}") from None
    return kd, "float64" if kd == torch.float64 else "float32"


def _np(x, dtype):
    """A NumPy view of a CPU tensor (contiguous, detached) in dtype."""
    if x.device.type != "cpu":
        raise ValueError("peal_torch: tensors must be on the CPU")
    return x.detach().to(dtype).contiguous().numpy()


def _axes(axes):
    """axes as an int in [1, peal::max_position_axes] (N-D points), or None (1-D positions)."""
    if axes is None:
        return None
    top = _ext.max_position_axes
    if isinstance(axes, bool) or not isinstance(axes, int) or not 1 <= axes <= top:
        raise ValueError(f"peal_torch: axes must be an int in [1, {top}] or None, got {axes!r}")
    return axes


def _rank(axes):
    """The dimensions of a shared parameter: [blocks], or [axes, blocks] over N-D points."""
    return 1 if axes is None else 2


def _parameters(inv_freq, damping, real_lambda, jordan_lambda, axes=None):
    """The four parameter tensors of the encoding (None: no such blocks, no damping), each
    [blocks] (shared by the heads) or [heads, blocks] (one row per query head); over N-D points
    (axes = D) [D, blocks] or [heads, D, blocks]. Returns them and the number of heads of the
    per-head ones (None: all shared)."""
    if axes is not None and jordan_lambda is not None:
        raise ValueError("peal_torch: Jordan blocks need 1-D positions (peal's kernels over N-D "
                         "points refuse them: their polynomial factors at points lose precision)")
    if inv_freq is None:
        if damping is not None:
            raise ValueError("peal_torch: a damping needs inv_freq (one per rotary pair)")
        inv_freq = torch.zeros((0,) if axes is None else (axes, 0), dtype=torch.float64)
    heads, r = set(), _rank(axes)
    wanted = ("1-D (one entry per block) or 2-D (one row per query head)" if axes is None else
              f"[{axes}, blocks] (one row per axis) or [heads, {axes}, blocks] over {axes}-D points")
    for x, name in ((inv_freq, "inv_freq"), (damping, "damping"), (real_lambda, "real_lambda"),
                    (jordan_lambda, "jordan_lambda")):
        if x is None:
            continue
        if x.dim() not in (r, r + 1) or (axes is not None and x.shape[-2] != axes):
            raise ValueError(f"peal_torch: {name} must be {wanted}, got {list(x.shape)}")
        if x.dim() == r + 1:
            heads.add(x.shape[0])
    if damping is not None and damping.shape[-1] != inv_freq.shape[-1]:
        raise ValueError("peal_torch: damping must have one entry per rotary pair, as inv_freq")
    if len(heads) > 1:
        raise ValueError(f"peal_torch: per-head parameters with different head counts {sorted(heads)}")
    return (inv_freq, damping, real_lambda, jordan_lambda), (heads.pop() if heads else None)


def _head(params, h, axes=None):
    """Head h's parameters: row h of the per-head ones, the shared ones as they are."""
    r = _rank(axes)
    return tuple(None if x is None else x[h] if x.dim() == r + 1 else x for x in params)


def _per_head_checks(heads, q, k):
    """The query and key head counts of a per-head call (one row of parameters per query head)."""
    Hq, Hk = q.shape[-2], k.shape[-2]
    if heads != Hq:
        raise ValueError(f"peal_torch: per-head parameters have {heads} rows for {Hq} query heads")
    if Hk < 1 or Hq % Hk:
        raise ValueError(f"peal_torch: {Hq} query heads are not a multiple of {Hk} key heads")
    return Hq, Hq // Hk


def _heads(x):
    """x's heads as [..., 1, dim] views. split's backward joins the heads' gradients in one
    copy; a slice per head would give each its own full-size zero gradient to add."""
    return x.split(1, dim=-2)


def _option_row(x, h):
    return None if x is None else x[h:h + 1]


def _batched(x, name):
    if x.dim() == 3:
        return x.unsqueeze(0), False
    if x.dim() == 4:
        return x, True
    raise ValueError(f"peal_torch: {name} must be [tokens, heads, dim] or [batch, tokens, heads, dim]")


def _positions(t, batch, tokens, name, axes=None):
    """t as a float64 [batch, tokens] tensor (a shared [tokens] one expanded); over N-D points,
    [batch, tokens, axes] (a shared [tokens, axes] one expanded)."""
    t = t.detach().to(torch.float64)
    if axes is None:
        if t.dim() == 1:
            t = t.unsqueeze(0).expand(batch, -1)
        if t.shape != (batch, tokens):
            raise ValueError(f"peal_torch: {name} must be [{tokens}] or [{batch}, {tokens}], "
                             f"got {list(t.shape)}")
        return t
    if t.dim() == 2:
        t = t.unsqueeze(0).expand(batch, -1, -1)
    if t.shape != (batch, tokens, axes):
        raise ValueError(f"peal_torch: {name} must be [{tokens}, {axes}] or [{batch}, {tokens}, "
                         f"{axes}] ({axes}-D points), got {list(t.shape)}")
    return t


def _reduce_positions(g, t, axes=None):
    """The gradient of positions given as t (shared by the batch: summed). g is [batch,
    tokens] or, over N-D points, [batch, tokens * axes] (token-major)."""
    g = g.to(t.dtype)
    if axes is not None:
        g = g.reshape(g.shape[0], -1, axes)
    return g.sum(0) if t.dim() == _rank(axes) else g


def _blocks(omega, a, real, jordan, interleaved):
    """The encoding for the kernels: each parameter as a float64 NumPy array (a: zeros when
    None; real, jordan: no blocks when None)."""
    b = _ext.Blocks()
    none = torch.zeros(tuple(omega.shape[:-1]) + (0,), dtype=torch.float64)  # [0] or [D, 0]
    b.omega = _np(omega, torch.float64)
    b.a = _np(torch.zeros_like(omega) if a is None else a, torch.float64)
    b.real = _np(none if real is None else real, torch.float64)
    b.jordan = _np(torch.zeros(0, dtype=torch.float64) if jordan is None else jordan, torch.float64)
    b.interleaved = interleaved
    return b


def _parameter_gradients(g, need, params):
    """The gradients of params = (omega, a, real, jordan) from g, their float64 gradient
    [omega, a, real, jordan] (None for those not needed or absent); over N-D points, params are
    [D, blocks] and g is axis by axis, each axis's [omega, a, real] (peal's "axis[a]." layout)."""
    out, at = [], 0
    n = params[0].shape[-1]
    g = g.reshape(params[0].shape[:-1].numel(), -1)  # one row per axis (one row in 1-D)
    # The kernels' vector has n entries for a whether or not it was given (zeros: _blocks).
    sizes = (n, n) + tuple(0 if x is None else x.shape[-1] for x in params[2:])
    for x, wanted, size in zip(params, need, sizes):
        out.append(g[:, at:at + size].reshape(x.shape).to(x.dtype) if wanted and x is not None
                   else None)
        at += size
    return out


def _attention_inputs(q, k, v, tq, tk, axes=None):
    """q, k, v with a batch dimension, the positions as [batch, tokens] ([batch, tokens, axes]
    over N-D points), and whether q had one."""
    qb, batched = _batched(q, "q")
    kb, _ = _batched(k, "k")
    vb, _ = _batched(v, "v")
    if not (qb.shape[0] == kb.shape[0] == vb.shape[0]):
        raise ValueError("peal_torch: q, k and v must have the same batch size")
    B = qb.shape[0]
    return (qb, kb, vb, _positions(tq, B, qb.shape[1], "tq", axes),
            _positions(tk, B, kb.shape[1], "tk", axes), batched)


def _tensor(a):
    return None if a is None else torch.from_numpy(a)


def _unbatched(x, batched):
    return x if batched else x[0]


def _common_gradients(res, w, need, batched, dtype, tq, tk, params, axes=None):
    """dq, dk, dv (in dtype, q's), d_tq, d_tk and the gradients of params (omega, a, real,
    jordan) from the first six results of a backward over the batch (q, k, v [B, ...], the
    parameters [omega, a, real, jordan] summed over it, tq, tk [B, n]); need[5:9]: the
    parameters'."""
    dq, dk, dv = (_unbatched(_tensor(res[i]).to(dtype), batched) if wanted else None
                  for i, wanted in enumerate((w.q, w.k, w.v)))
    dtq = _reduce_positions(_tensor(res[4]), tq, axes) if w.tq else None
    dtk = _reduce_positions(_tensor(res[5]), tk, axes) if w.tk else None
    d_par = (_parameter_gradients(_tensor(res[3]), need[5:9], params) if w.parameters
             else [None] * 4)
    return (dq, dk, dv, dtq, dtk, *d_par)


@dataclass(frozen=True)
class _Settings:
    interleaved: bool
    causal: bool
    window: float
    softcap: float
    scale: Optional[float]
    threads: int
    axes: Optional[int] = None  # N-D points with this many axes (None: 1-D positions)


def _kernel(stem, axes, name):
    """The kernels' binding: stem_float32, or stem_points_float32 over N-D points."""
    return getattr(_ext, stem + ("_points_" if axes is not None else "_") + name)


def _options(cfg, slopes, sinks):
    o = _ext.Options()
    o.causal = cfg.causal
    o.window = cfg.window
    o.softcap = cfg.softcap
    o.scale = cfg.scale
    o.threads = cfg.threads
    o.alibi_slopes = None if slopes is None else _np(slopes, torch.float64)
    o.sinks = None if sinks is None else _np(sinks, torch.float64)
    return o


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, tq, tk, omega, a, real, jordan, slopes, sinks, cfg):
        kd, name = _kernels(q)
        if not q.dtype == k.dtype == v.dtype:
            raise ValueError(f"peal_torch: q, k and v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
        qb, kb, vb, ptq, ptk, batched = _attention_inputs(q, k, v, tq, tk, cfg.axes)
        blocks = _blocks(omega, a, real, jordan, cfg.interleaved)
        opt = _options(cfg, slopes, sinks)
        out, lse = _kernel("attention_forward", cfg.axes, name)(
            _np(qb, kd), _np(ptq, torch.float64), _np(kb, kd), _np(ptk, torch.float64), _np(vb, kd),
            blocks, opt)
        out, lse = torch.from_numpy(out), torch.from_numpy(lse)
        ctx.save_for_backward(q, k, v, tq, tk, omega, a, real, jordan, slopes, sinks)
        # Batched, in the kernels' dtype (a float16 or bfloat16 call keeps its float32 out: the
        # backward's D_i = dO_i . out_i without the output's rounding); read, never written.
        ctx.forward_results = (out, lse)
        ctx.cfg = cfg
        ctx.batched = batched
        out = out.to(q.dtype)
        if not batched:
            out, lse = out[0], lse[0]
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, d_out, _d_lse):
        q, k, v, tq, tk, omega, a, real, jordan, slopes, sinks = ctx.saved_tensors
        out, lse = ctx.forward_results
        cfg = ctx.cfg
        kd, name = _kernels(q)
        need = ctx.needs_input_grad
        qb, kb, vb, ptq, ptk, _ = _attention_inputs(q, k, v, tq, tk, cfg.axes)
        dob = d_out if ctx.batched else d_out.unsqueeze(0)
        blocks = _blocks(omega, a, real, jordan, cfg.interleaved)
        opt = _options(cfg, slopes, sinks)
        w = _ext.Wants()
        w.q, w.k, w.v = need[0], need[1], need[2]
        w.tq, w.tk = need[3], need[4]
        w.parameters = any(need[5:9])
        w.slopes, w.sinks = need[9], need[10]
        res = _kernel("attention_backward", cfg.axes, name)(
            _np(qb, kd), _np(ptq, torch.float64), _np(kb, kd), _np(ptk, torch.float64), _np(vb, kd),
            blocks, opt, _np(out, kd), _np(lse, torch.float64), _np(dob, kd), w)
        grads = _common_gradients(res, w, need, ctx.batched, q.dtype, tq, tk,
                                  (omega, a, real, jordan), cfg.axes)
        d_slopes = _tensor(res[6]).to(slopes.dtype) if w.slopes else None
        d_sinks = _tensor(res[7]).to(sinks.dtype) if w.sinks else None
        return (*grads, d_slopes, d_sinks, None)


@dataclass(frozen=True)
class _LinearSettings:
    interleaved: bool
    scale: Optional[float]
    form: str
    chunk: int
    threads: int
    normalization: str


def _linear_options(cfg, decay):
    o = _ext.LinearOptions()
    o.scale = cfg.scale
    o.form = cfg.form
    o.chunk = cfg.chunk
    o.threads = cfg.threads
    o.normalization = cfg.normalization
    o.decay = None if decay is None else _np(decay, torch.float64)
    return o


class _LinearAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, tq, tk, omega, a, real, jordan, decay, cfg):
        kd, name = _kernels(q)
        if not q.dtype == k.dtype == v.dtype:
            raise ValueError(f"peal_torch: q, k and v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
        qb, kb, vb, ptq, ptk, batched = _attention_inputs(q, k, v, tq, tk)
        blocks = _blocks(omega, a, real, jordan, cfg.interleaved)
        opt = _linear_options(cfg, decay)
        out = torch.from_numpy(getattr(_ext, "linear_forward_" + name)(
            _np(qb, kd), _np(ptq, torch.float64), _np(kb, kd), _np(ptk, torch.float64), _np(vb, kd),
            blocks, opt)).to(q.dtype)
        ctx.save_for_backward(q, k, v, tq, tk, omega, a, real, jordan, decay)
        ctx.cfg = cfg
        ctx.batched = batched
        return out if batched else out[0]

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, tq, tk, omega, a, real, jordan, decay = ctx.saved_tensors
        cfg = ctx.cfg
        kd, name = _kernels(q)
        need = ctx.needs_input_grad
        qb, kb, vb, ptq, ptk, _ = _attention_inputs(q, k, v, tq, tk)
        dob = d_out if ctx.batched else d_out.unsqueeze(0)
        blocks = _blocks(omega, a, real, jordan, cfg.interleaved)
        opt = _linear_options(cfg, decay)
        w = _ext.Wants()
        w.q, w.k, w.v = need[0], need[1], need[2]
        w.tq, w.tk = need[3], need[4]
        w.parameters = any(need[5:9])
        w.decay = need[9]
        res = getattr(_ext, "linear_backward_" + name)(
            _np(qb, kd), _np(ptq, torch.float64), _np(kb, kd), _np(ptk, torch.float64), _np(vb, kd),
            blocks, opt, _np(dob, kd), w)
        grads = _common_gradients(res, w, need, ctx.batched, q.dtype, tq, tk,
                                  (omega, a, real, jordan))
        d_decay = _tensor(res[6]).to(decay.dtype) if w.decay else None
        return (*grads, d_decay, None)


class _Encode(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, t, omega, a, real, jordan, interleaved, query, axes):
        kd, name = _kernels(x)
        xb, batched = _batched(x, "x")
        pt = _positions(t, xb.shape[0], xb.shape[1], "t", axes)
        blocks = _blocks(omega, a, real, jordan, interleaved)
        y = torch.from_numpy(_kernel("encode_forward", axes, name)(
            _np(xb, kd), _np(pt, torch.float64), blocks, query)).to(x.dtype)
        ctx.save_for_backward(x, t, omega, a, real, jordan)
        ctx.settings = (interleaved, query, batched, axes)
        return _unbatched(y, batched)

    @staticmethod
    def backward(ctx, dy):
        x, t, omega, a, real, jordan = ctx.saved_tensors
        interleaved, query, batched, axes = ctx.settings
        need = ctx.needs_input_grad
        kd, name = _kernels(x)
        xb, _ = _batched(x, "x")
        dyb = dy if batched else dy.unsqueeze(0)
        pt = _positions(t, xb.shape[0], xb.shape[1], "t", axes)
        blocks = _blocks(omega, a, real, jordan, interleaved)
        want_par = any(need[2:6])
        dx, gp, gt = _kernel("encode_backward", axes, name)(
            _np(xb, kd), _np(pt, torch.float64), blocks, query, _np(dyb, kd), need[0], want_par,
            need[1])
        dx = _unbatched(_tensor(dx).to(x.dtype), batched) if need[0] else None
        dt = _reduce_positions(_tensor(gt), t, axes) if need[1] else None
        d_par = (_parameter_gradients(_tensor(gp), need[2:6], (omega, a, real, jordan))
                 if want_par else [None] * 4)
        return (dx, dt, *d_par, None, None, None)


def _coordinates(coordinates, d):
    """coordinates as a LongTensor permutation of range(d) (None: the identity, no copy)."""
    if coordinates is None:
        return None
    c = torch.as_tensor(coordinates)
    if c.dtype.is_floating_point or c.dtype.is_complex or c.dim() != 1:
        raise ValueError("peal_torch: coordinates must be a 1-D integer sequence")
    c = c.to(torch.int64)
    if c.shape[0] != d or not torch.equal(torch.sort(c).values, torch.arange(d)):
        raise ValueError(f"peal_torch: coordinates must be a permutation of range({d}) "
                         "(the head's coordinates in the blocks' order)")
    return c


def _permuted(x, c):
    """x's last dimension in the blocks' order: x[..., c] (autograd carries the gradient back)."""
    return x if c is None else x.index_select(-1, c)


def _layout(layout):
    if layout not in _LAYOUTS:
        raise ValueError(f"peal_torch: layout must be one of {_LAYOUTS}, got {layout!r}")
    return layout == "interleaved"


def attention(q, k, v, tq, tk, inv_freq=None, *, damping=None, real_lambda=None,
              jordan_lambda=None, coordinates=None, layout="half_split", causal=False, window=None,
              alibi_slopes=None, softcap=0.0, sinks=None, scale=None, threads=0, return_lse=False,
              axes=None):
    """Softmax attention with the encoding's blocks applied to q and k (the module's doc).

    q [nq, Hq, d], k [nk, Hk, d], v [nk, Hk, dv] (Hq a multiple of Hk: grouped-query heads),
    or each with a leading batch dimension; tq [nq] and tk [nk] positions (any real numbers,
    float64 inside), or [batch, n]. The encoding's parameters, each 1-D and each may be None
    (no such blocks), or 2-D [Hq, blocks] for one row per query head (a per-head encoding, as
    peal::PerHead: one kernel call per query head, each on its key head): inv_freq (and damping,
    one per pair) on the first 2 * len(inv_freq) coordinates of each head, real_lambda on the
    next len(real_lambda), jordan_lambda (Jordan blocks of size 2) on the next
    2 * len(jordan_lambda); the rest pass through. coordinates
    (a permutation of range(d); None: the identity) places the blocks anywhere in the head:
    the blocks' coordinate c is the head's coordinate coordinates[c] (q and k are permuted
    before the kernels, a copy). Options as peal::AttentionOptions (include/peal/attention.hpp): causal (mask s_j > t_i), window (mask t_i - s_j >= window),
    alibi_slopes [Hq] (adds -m_h (t_i - s_j)), softcap c (c tanh(x / c)), sinks [Hq] (e^{sigma_h}
    joins each row's denominator), scale (default 1/sqrt(d)). threads (0: OpenMP's maximum):
    a batch of at least that many elements runs them side by side, one thread each, else each
    element's kernels take the threads; the results do not depend on it. Every tensor argument
    may require grad. Returns out [nq, Hq, dv] (and lse [nq, Hq], natural log, with return_lse).

    axes=D: the positions are points p in R^D (image patches, video frames), tq [nq, D] and
    tk [nk, D] (or [batch, n, D]), and A(p) = prod_a A_a(p_a) (peal::MultiAxis,
    include/peal/multi_axis.hpp): inv_freq, damping and real_lambda are [D, blocks] (per-head:
    [Hq, D, blocks]), pair i rotating by sum_a inv_freq[a, i] p_a (RoPE-Mixed; axial 2-D RoPE
    and M-RoPE-like sections are the frequencies zero off their axis). No Jordan blocks and no
    ALiBi slopes over points; causal and window follow token order (query i sees key j when
    j <= nk - nq + i; window in tokens), as peal's attention over points
    (include/peal/scores_nd.hpp). d_tq and d_tk are [.., n, D].
    """
    interleaved = _layout(layout)
    axes = _axes(axes)
    params, heads = _parameters(inv_freq, damping, real_lambda, jordan_lambda, axes)
    c = _coordinates(coordinates, q.shape[-1])
    cfg = _Settings(interleaved, bool(causal), math.inf if window is None else float(window),
                    float(softcap), None if scale is None else float(scale), int(threads), axes)
    q, k = _permuted(q, c), _permuted(k, c)
    if heads is None:
        out, lse = _Attention.apply(q, k, v, tq, tk, *params, alibi_slopes, sinks, cfg)
    else:  # one call per query head, on its key head (autograd sums a key head's gradients)
        Hq, G = _per_head_checks(heads, q, k)
        qs, ks, vs = _heads(q), _heads(k), _heads(v)
        parts = [_Attention.apply(qs[h], ks[h // G], vs[h // G], tq, tk, *_head(params, h, axes),
                                  _option_row(alibi_slopes, h), _option_row(sinks, h), cfg)
                 for h in range(Hq)]
        out = torch.cat([o for o, _ in parts], dim=-2)
        lse = torch.cat([x for _, x in parts], dim=-1)
    return (out, lse) if return_lse else out


def linear_attention(q, k, v, tq, tk, inv_freq=None, *, damping=None, real_lambda=None,
                     jordan_lambda=None, coordinates=None, layout="half_split", decay=None,
                     scale=None, form="automatic", chunk=0, threads=0, normalization="none"):
    """Causal linear attention (retention) with the encoding's blocks (as attention()'s):

        out_i = scale sum_{s_j <= t_i} decay_h^(t_i - s_j) (q_i^T A(t_i - s_j) k_j) v_j,

    as peal::linear_attention computes it (include/peal/linear_attention.hpp; no
    normalisation unless asked, below). Shapes as attention(); tq and tk must each be non-decreasing. decay [Hq]
    in (0, 1] (RetNet's gamma_h; None: no decay) may require grad, as may every other tensor.
    form ("automatic", "parallel", "chunkwise", "recurrent") and chunk choose how the forward
    and the backward run (the same function): the backward is O(n) for "chunkwise" and
    "recurrent" (and "automatic" past 256 keys), quadratic in bounded memory for "parallel"
    (docs/gradients.md §4). threads as in attention().

    normalization="retnet": RetNet's normalisations as microsoft/torchscale applies them in
    the form given (docs/linear-attention.md §5): each row's weights divided by
    sqrt(sum_j decay^(t_i - s_j)) over its visible keys, then, in "parallel", the row by
    clamp(sum_j |w_ij|, 1, 5e4), in "chunkwise" by torchscale's in-chunk and state bounds
    (chunk must be given); "recurrent" divides by nothing more. The form must be given
    ("automatic" raises). The backward holds the divisors torchscale detaches constant (the
    abs sums and the state bound), as torchscale's autograd does, and differentiates the
    square roots (decay, tq, tk).
    """
    interleaved = _layout(layout)
    params, heads = _parameters(inv_freq, damping, real_lambda, jordan_lambda)
    c = _coordinates(coordinates, q.shape[-1])
    cfg = _LinearSettings(interleaved, None if scale is None else float(scale), str(form), int(chunk),
                          int(threads), str(normalization))
    q, k = _permuted(q, c), _permuted(k, c)
    if heads is None:
        return _LinearAttention.apply(q, k, v, tq, tk, *params, decay, cfg)
    Hq, G = _per_head_checks(heads, q, k)  # one call per query head, as attention()
    qs, ks, vs = _heads(q), _heads(k), _heads(v)
    return torch.cat([_LinearAttention.apply(qs[h], ks[h // G], vs[h // G], tq, tk,
                                             *_head(params, h), _option_row(decay, h), cfg)
                      for h in range(Hq)], dim=-2)


def encode(x, t, inv_freq=None, *, damping=None, real_lambda=None, jordan_lambda=None,
           coordinates=None, layout="half_split", side="query", axes=None):
    """The encoded rows: F(t) x = A(t)^T x for side="query", G(t) x = A(-t) x for side="key"
    (the encoding's blocks and coordinates as attention()'s; the result in x's coordinates).

    For RoPE (no damping) both are HF's apply_rotary_pos_emb of x at positions t; with a
    damping the query side is scaled by exp(a t) and the key side by exp(-a t), so that
    encode(q, t, side="query") . encode(k, s, side="key") = q^T A(t - s) k.
    axes=D: t is [n, D] (or [batch, n, D]) points and the parameters [D, blocks], as attention().
    """
    if side not in ("query", "key"):
        raise ValueError(f"peal_torch: side must be 'query' or 'key', got {side!r}")
    interleaved = _layout(layout)
    axes = _axes(axes)
    params, heads = _parameters(inv_freq, damping, real_lambda, jordan_lambda, axes)
    c = _coordinates(coordinates, x.shape[-1])
    xp = _permuted(x, c)
    if heads is None:
        y = _Encode.apply(xp, t, *params, interleaved, side == "query", axes)
    else:
        if heads != x.shape[-2]:
            raise ValueError(f"peal_torch: per-head parameters have {heads} rows for "
                             f"{x.shape[-2]} heads")
        xs = _heads(xp)
        y = torch.cat([_Encode.apply(xs[h], t, *_head(params, h, axes), interleaved,
                                     side == "query", axes) for h in range(heads)], dim=-2)
    return y if c is None else y.index_select(-1, torch.argsort(c))
