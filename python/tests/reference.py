"""The formulas peal_torch computes, written as plain PyTorch autograd code (the tests' oracle).

RoPE exactly as HF's modeling code applies it (rotate_half on the half-split layout; the
GPT-J/Meta rotate-every-two on the interleaved one), with a damping exp(+a t) on queries and
exp(-a s) on keys; real blocks and Jordan blocks of size 2 after the rotary coordinates, each
row multiplied by F(t) = A(t)^T or G(s) = A(-s) written out from A(tau) = exp(tau X); then scores, masks, ALiBi, softcap, sinks and softmax as
include/peal/attention.hpp documents them.
"""

import math

import torch


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def encode_blocks(x, t, real_lambda=None, jordan_lambda=None, side="query"):
    """The real and Jordan-2 coordinates of x [..., n, H, m + 2j] (those after the rotary ones):

    real block lambda:       A(tau) = e^{lambda tau}, F(t) x = e^{lambda t} x, G(s) x = e^{-lambda s} x;
    Jordan block mu:         A(tau) = e^{mu tau} [[1, tau], [0, 1]], so
      F(t) (x0, x1) = A(t)^T (x0, x1) = e^{mu t} (x0, t x0 + x1),
      G(s) (x0, x1) = A(-s) (x0, x1)  = e^{-mu s} (x0 - s x1, x1).
    """
    parts, at = [], 0
    tt = t[..., :, None]
    if real_lambda is not None:
        m = real_lambda.shape[0]
        lam = real_lambda.to(x.dtype)
        e = torch.exp(tt * lam if side == "query" else -tt * lam)[..., None, :]
        parts.append(x[..., at:at + m] * e)
        at += m
    if jordan_lambda is not None:
        j = jordan_lambda.shape[0]
        mu = jordan_lambda.to(x.dtype)
        x0, x1 = x[..., at:at + 2 * j:2], x[..., at + 1:at + 2 * j:2]
        e = torch.exp(tt * mu if side == "query" else -tt * mu)[..., None, :]
        ts = tt[..., None, :]
        if side == "query":
            y0, y1 = x0, ts * x0 + x1
        else:
            y0, y1 = x0 - ts * x1, x1
        parts.append((torch.stack((y0, y1), dim=-1) * e[..., None]).flatten(-2))
        at += 2 * j
    return parts, at


def encode(x, t, inv_freq, damping=None, layout="half_split", side="query", real_lambda=None,
           jordan_lambda=None):
    """x [..., n, H, d], t [n] or [..., n]: the encoded rows (F(t) x or G(t) x)."""
    r = 2 * inv_freq.shape[0]
    t = t.to(x.dtype) if t.dtype != x.dtype else t
    freqs = t[..., :, None] * inv_freq.to(x.dtype)  # [..., n, r/2]
    if layout == "half_split":
        emb = torch.cat((freqs, freqs), dim=-1)
        rot = rotate_half
    else:
        emb = torch.repeat_interleave(freqs, 2, dim=-1)
        rot = rotate_every_two
    cos, sin = emb.cos()[..., None, :], emb.sin()[..., None, :]
    xr = x[..., :r]
    y = xr * cos + rot(xr) * sin
    if damping is not None:
        g = t[..., :, None] * damping.to(x.dtype)
        g = torch.cat((g, g), -1) if layout == "half_split" else torch.repeat_interleave(g, 2, -1)
        y = y * torch.exp(g if side == "query" else -g)[..., None, :]
    parts, used = encode_blocks(x[..., r:], t, real_lambda, jordan_lambda, side)
    return torch.cat((y, *parts, x[..., r + used:]), dim=-1)


def mask_scores(x, tau, causal, window):
    """x with -inf where a key is masked: s_j > t_i (causal), t_i - s_j >= window."""
    mask = torch.zeros_like(tau, dtype=torch.bool)
    if causal:
        mask |= tau < 0
    if window is not None:
        mask |= tau >= window
    return x.masked_fill(mask, -math.inf)


def attention(q, k, v, tq, tk, inv_freq, *, damping=None, layout="half_split", causal=False,
              window=None, alibi_slopes=None, softcap=0.0, sinks=None, scale=None,
              real_lambda=None, jordan_lambda=None):
    """Unbatched: q [nq, Hq, d], k [nk, Hk, d], v [nk, Hk, dv], tq [nq], tk [nk]."""
    nq, Hq, d = q.shape
    Hk = k.shape[1]
    qe = encode(q, tq, inv_freq, damping, layout, "query", real_lambda, jordan_lambda)
    ke = encode(k, tk, inv_freq, damping, layout, "key", real_lambda, jordan_lambda)
    ke = ke.repeat_interleave(Hq // Hk, dim=1)
    ve = v.repeat_interleave(Hq // Hk, dim=1)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    x = torch.einsum("ihd,jhd->hij", qe, ke) * scale
    if softcap:
        x = softcap * torch.tanh(x / softcap)
    tau = tq.to(q.dtype)[:, None] - tk.to(q.dtype)[None, :]
    if alibi_slopes is not None:
        x = x - alibi_slopes.to(q.dtype)[:, None, None] * tau
    x = mask_scores(x, tau, causal, window)
    if sinks is not None:
        s = sinks.to(q.dtype)[:, None, None].expand(Hq, nq, 1)
        x = torch.cat((x, s), dim=-1)
    p = torch.softmax(x, dim=-1)
    if sinks is not None:
        p = p[..., :-1]
    p = torch.nan_to_num(p, nan=0.0)  # rows with no visible key and no sink: out = 0
    return torch.einsum("hij,jhd->ihd", p, ve)


def linear_attention(q, k, v, tq, tk, inv_freq, *, damping=None, layout="half_split", decay=None,
                     scale=None, normalization="none", form=None, real_lambda=None,
                     jordan_lambda=None):
    """Unbatched, causal by position (s_j <= t_i). normalization="retnet": torchscale's
    parallel_forward (form "parallel": rows over sqrt(S_i), then over the detached
    clamp(sum |w|, 1, 5e4)) or recurrent_forward (form "recurrent": over sqrt(S_i) only), with
    S_i = sum of decay^(t_i - s_j) over the visible keys (docs/linear-attention.md §5)."""
    nq, Hq, d = q.shape
    Hk = k.shape[1]
    qe = encode(q, tq, inv_freq, damping, layout, "query", real_lambda, jordan_lambda)
    ke = encode(k, tk, inv_freq, damping, layout, "key", real_lambda,
                jordan_lambda).repeat_interleave(Hq // Hk, dim=1)
    ve = v.repeat_interleave(Hq // Hk, dim=1)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    s = torch.einsum("ihd,jhd->hij", qe, ke) * scale
    tau = tq.to(q.dtype)[:, None] - tk.to(q.dtype)[None, :]
    visible = tau >= 0
    if decay is not None:
        # gamma^tau only where visible (tau < 0 would grow; where() keeps its gradient out)
        w = torch.exp(torch.where(visible, tau, torch.zeros_like(tau))[None] *
                      torch.log(decay.to(q.dtype))[:, None, None])
        s = s * w
    s = s.masked_fill(~visible, 0.0)
    if normalization == "retnet":
        assert form in ("parallel", "recurrent"), form
        weights = w if decay is not None else torch.ones_like(tau)[None].expand(Hq, nq, -1)
        S = weights.masked_fill(~visible, 0.0).sum(-1, keepdim=True)
        s = s / S.sqrt()
        if form == "parallel":
            s = s / s.detach().abs().sum(-1, keepdim=True).clamp(1, 5e4)
    return torch.einsum("hij,jhd->ihd", s, ve)
