"""peal_torch over N-D points (axes=D): positions p in R^D per token, A(p) = prod_a A_a(p_a) with
per-axis parameters [D, blocks] (peal::MultiAxis: RoPE-Mixed, axial 2-D RoPE, damped rotations
and real blocks on every axis).

Two oracles, written here:
- dense(): the generators X_a as d x d matrices (a pair [[a, w], [-w, a]] on its two
  coordinates, a real block lambda on its diagonal) and A(tau) = matrix_exp(sum_a tau_a X_a)
  for every query-key pair: independent of peal's closed forms and of the product over axes;
- mixed(): the closed form a PyTorch user writes for RoPE-Mixed (angle p . omega_i per pair,
  HF's rotate_half), with the dampings and real blocks as exponentials of p . a and p . lambda.

Checked: values and every gradient (q, k, v, the points, the frequencies, dampings, real
blocks, sinks) against dense() in float64 with every option; gradcheck; the two oracles
against each other; axes=1 against the 1-D call; per-head parameters head by head; the
translation identity of the point gradients; float32 no worse than PyTorch's float32 run of
mixed(); bad input.
"""

import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
import peal_torch  # noqa: E402
import reference  # noqa: E402
from accuracy import assert_float32_no_worse  # noqa: E402

F64 = torch.float64


def rnd(*shape, grad=True):
    return torch.randn(*shape, dtype=F64).requires_grad_(grad)


def generators(d, omega, damping, real_lambda, layout):
    """X_a [D, d, d] from omega, damping [D, n] and real_lambda [D, m] (differentiable)."""
    D, n = omega.shape
    m = 0 if real_lambda is None else real_lambda.shape[1]
    a = torch.zeros_like(omega) if damping is None else damping
    i = torch.arange(n)
    u, w = (i, i + n) if layout == "half_split" else (2 * i, 2 * i + 1)
    r = 2 * n + torch.arange(m)
    rows = torch.cat((u, w, u, w, r))
    cols = torch.cat((u, w, w, u, r))
    xs = []
    for x in range(D):
        parts = [a[x], a[x], omega[x], -omega[x]]
        if m:
            parts.append(real_lambda[x])
        vals = torch.cat(parts)
        xs.append(torch.zeros(d, d, dtype=vals.dtype).index_put((rows, cols), vals))
    return torch.stack(xs)


def dense_scores(q, k, pq, pk, X):
    """S[h, i, j] = q_i^T matrix_exp(sum_a (pq_i - pk_j)_a X_a) k_j (k's heads already q's)."""
    tau = pq[:, None, :] - pk[None, :, :]  # [nq, nk, D]
    A = torch.matrix_exp(torch.einsum("ija,abc->ijbc", tau, X))
    return torch.einsum("ihb,ijbc,jhc->hij", q, A, k)


def dense(q, k, v, pq, pk, omega, damping=None, real_lambda=None, *, layout="half_split",
          causal=False, window=None, softcap=0.0, sinks=None, scale=None):
    """Attention over points, masks by token order (query i sees key j <= nk - nq + i)."""
    nq, Hq, d = q.shape
    nk, Hk, _ = k.shape
    X = generators(d, omega, damping, real_lambda, layout)
    ke, ve = k.repeat_interleave(Hq // Hk, dim=1), v.repeat_interleave(Hq // Hk, dim=1)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    x = dense_scores(q, ke, pq, pk, X) * scale
    if softcap:
        x = softcap * torch.tanh(x / softcap)
    order = (torch.arange(nq, dtype=F64)[:, None] + (nk - nq)) - torch.arange(nk, dtype=F64)[None, :]
    x = reference.mask_scores(x, order.expand(Hq, nq, nk), causal, window)
    if sinks is not None:
        x = torch.cat((x, sinks.to(x.dtype)[:, None, None].expand(Hq, nq, 1)), dim=-1)
    p = torch.softmax(x, dim=-1)
    if sinks is not None:
        p = p[..., :-1]
    return torch.einsum("hij,jhd->ihd", p, ve)


def dense_encode(x, p, omega, damping=None, real_lambda=None, layout="half_split", side="query"):
    """F(p) x = A(p)^T x or G(p) x = A(-p) x, A from matrix_exp."""
    X = generators(x.shape[-1], omega, damping, real_lambda, layout)
    if side == "query":
        A = torch.matrix_exp(torch.einsum("ia,abc->ibc", p, X)).transpose(-1, -2)
    else:
        A = torch.matrix_exp(torch.einsum("ia,abc->ibc", -p, X))
    return torch.einsum("ibc,ihc->ihb", A, x)


def mixed(x, p, omega, damping=None, real_lambda=None, side="query"):
    """RoPE-Mixed as written in PyTorch: pair i rotated by p . omega[:, i] (rotate_half layout),
    scaled by exp(+-p . damping[:, i]); real coordinate r by exp(+-p . real_lambda[:, r])."""
    n = omega.shape[1]
    ang = p @ omega.to(x.dtype)  # [tokens, n]
    emb = torch.cat((ang, ang), -1)[:, None, :]
    xr = x[..., :2 * n]
    y = xr * emb.cos() + reference.rotate_half(xr) * emb.sin()
    sign = 1.0 if side == "query" else -1.0
    if damping is not None:
        g = p @ damping.to(x.dtype)
        y = y * torch.exp(sign * torch.cat((g, g), -1))[:, None, :]
    parts = [y]
    used = 2 * n
    if real_lambda is not None:
        m = real_lambda.shape[1]
        parts.append(x[..., used:used + m] * torch.exp(sign * (p @ real_lambda.to(x.dtype)))[:, None, :])
        used += m
    parts.append(x[..., used:])
    return torch.cat(parts, -1)


def mixed_attention(q, k, v, pq, pk, omega, damping=None, real_lambda=None, causal=False):
    qe, ke = mixed(q, pq, omega, damping, real_lambda), mixed(k, pk, omega, damping, real_lambda, "key")
    Hq, Hk = q.shape[1], k.shape[1]
    ke, ve = ke.repeat_interleave(Hq // Hk, 1), v.repeat_interleave(Hq // Hk, 1)
    x = torch.einsum("ihd,jhd->hij", qe, ke) / math.sqrt(q.shape[-1])
    nq, nk = q.shape[0], k.shape[0]
    if causal:
        order = (torch.arange(nq)[:, None] + (nk - nq)) - torch.arange(nk)[None, :]
        x = x.masked_fill(order < 0, -math.inf)
    return torch.einsum("hij,jhd->ihd", torch.softmax(x, -1), ve)


def problem(nq=5, nk=6, Hq=4, Hk=2, d=10, dv=3, D=2, n=3, m=2):
    """Points spread over a few units on each axis; 3 pairs with frequencies on every axis,
    dampings on some, 2 real blocks, d - 2n - m coordinates passed through."""
    pq = (torch.rand(nq, D, dtype=F64) * 4 + 1).requires_grad_()
    pk = (torch.rand(nk, D, dtype=F64) * 4).requires_grad_()
    omega = (torch.rand(D, n, dtype=F64) * 1.5 - 0.5).requires_grad_()
    damping = (torch.rand(D, n, dtype=F64) * 0.06 - 0.04).requires_grad_()
    real_lambda = (torch.rand(D, m, dtype=F64) * 0.3 - 0.2).requires_grad_()
    return dict(q=rnd(nq, Hq, d), k=rnd(nk, Hk, d), v=rnd(nk, Hk, dv), pq=pq, pk=pk,
                inv_freq=omega, damping=damping, real_lambda=real_lambda)


NAMES = ["q", "k", "v", "pq", "pk", "inv_freq", "damping", "real_lambda"]
OPTIONS = {
    "plain": dict(),
    "everything": dict(causal=True, window=4.0, softcap=3.0, scale=0.3,
                       sinks=torch.tensor([0.5, -1.0, 0.0, 0.2], dtype=F64)),
}


def ours(layout, **options):
    def f(q, k, v, pq, pk, inv_freq, damping, real_lambda):
        return peal_torch.attention(q, k, v, pq, pk, inv_freq, damping=damping,
                                    real_lambda=real_lambda, layout=layout, axes=pq.shape[-1],
                                    **options)
    return f


def oracle(layout, **options):
    def f(q, k, v, pq, pk, inv_freq, damping, real_lambda):
        return dense(q, k, v, pq, pk, inv_freq, damping, real_lambda, layout=layout, **options)
    return f


def assert_gradients_match(names, tensors, y, y_ref, rtol=1e-10):
    d_out = torch.randn_like(y)
    for name, a, b in zip(names, torch.autograd.grad(y, tensors, d_out, allow_unused=True),
                          torch.autograd.grad(y_ref, tensors, d_out, allow_unused=True)):
        assert (a is None) == (b is None), name
        if a is not None:
            assert a.shape == b.shape, (name, a.shape, b.shape)
            assert torch.allclose(a, b, rtol=rtol, atol=rtol * (1 + b.abs().max())), name


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
@pytest.mark.parametrize("options", list(OPTIONS))
@pytest.mark.parametrize("D", [2, 3])
def test_attention_matches_matrix_exp(layout, options, D):
    p = problem(D=D)
    tensors = [p[n] for n in NAMES]
    y = ours(layout, **OPTIONS[options])(*tensors)
    y_ref = oracle(layout, **OPTIONS[options])(*tensors)
    assert torch.allclose(y, y_ref, rtol=1e-10, atol=1e-12)
    assert_gradients_match(NAMES, tensors, y, y_ref)


def test_sink_gradient_matches_matrix_exp():
    p = problem()
    sinks = torch.tensor([0.5, -1.0, 0.0, 0.2], dtype=F64, requires_grad=True)
    tensors = [p[n] for n in NAMES] + [sinks]

    def run(fn):
        return lambda *xs: fn("half_split", causal=True, sinks=xs[-1])(*xs[:-1])
    assert_gradients_match(NAMES + ["sinks"], tensors, run(ours)(*tensors), run(oracle)(*tensors))


@pytest.mark.parametrize("options", list(OPTIONS))
def test_attention_gradcheck(options):
    p = problem(nq=4, nk=5, d=8, n=2, m=1)
    assert torch.autograd.gradcheck(ours("half_split", **OPTIONS[options]), [p[n] for n in NAMES],
                                    eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("side", ["query", "key"])
@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
def test_encode_matches_matrix_exp_and_gradcheck(side, layout):
    p = problem(D=3)
    x, t = p["q"], p["pq"]
    names = ["x", "p", "inv_freq", "damping", "real_lambda"]
    tensors = [x, t, p["inv_freq"], p["damping"], p["real_lambda"]]

    def f(x, t, omega, damping, real_lambda):
        return peal_torch.encode(x, t, omega, damping=damping, real_lambda=real_lambda,
                                 layout=layout, side=side, axes=3)

    def g(x, t, omega, damping, real_lambda):
        return dense_encode(x, t, omega, damping, real_lambda, layout, side)
    y, y_ref = f(*tensors), g(*tensors)
    assert torch.allclose(y, y_ref, rtol=1e-12, atol=1e-13)
    assert_gradients_match(names, tensors, y, y_ref, rtol=1e-11)
    assert torch.autograd.gradcheck(f, tensors)


def test_the_two_oracles_agree():
    # matrix_exp of the generators and the closed form of RoPE-Mixed: the oracles' own check.
    p = problem(D=2)
    for side in ("query", "key"):
        a = dense_encode(p["q"], p["pq"], p["inv_freq"], p["damping"], p["real_lambda"], side=side)
        b = mixed(p["q"], p["pq"], p["inv_freq"], p["damping"], p["real_lambda"], side=side)
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-13), side


def test_one_axis_is_the_1d_call():
    p = problem(D=1)
    q, k, v = p["q"], p["k"], p["v"]
    om, da, la = (p[n] for n in ("inv_freq", "damping", "real_lambda"))
    pq, pk = p["pq"], p["pk"]
    # Non-causal: over points the mask follows token order, in 1-D the positions.
    y = peal_torch.attention(q, k, v, pq, pk, om, damping=da, real_lambda=la, axes=1)
    y1 = peal_torch.attention(q, k, v, pq[:, 0], pk[:, 0], om[0], damping=da[0], real_lambda=la[0])
    assert torch.allclose(y, y1, rtol=1e-12, atol=1e-13)
    tensors = [q, k, v, pq, pk, om, da, la]
    d_out = torch.randn_like(y)
    for a, b in zip(torch.autograd.grad(y, tensors, d_out), torch.autograd.grad(y1, tensors, d_out)):
        assert torch.allclose(a, b, rtol=1e-11, atol=1e-12)


def test_batch_and_shared_points():
    B = 3
    p = problem()
    q, k, v = (torch.randn(B, *p[n].shape, dtype=F64, requires_grad=True) for n in ("q", "k", "v"))
    pq = (torch.rand(B, 5, 2, dtype=F64) * 4).requires_grad_()
    pk = p["pk"]  # [nk, D]: shared by the batch
    om = p["inv_freq"]
    y = peal_torch.attention(q, k, v, pq, pk, om, axes=2, causal=True)
    parts = [dense(q[b], k[b], v[b], pq[b], pk, om, causal=True) for b in range(B)]
    y_ref = torch.stack(parts)
    assert torch.allclose(y, y_ref, rtol=1e-10, atol=1e-12)
    assert_gradients_match(["q", "k", "v", "pq", "pk", "inv_freq"], [q, k, v, pq, pk, om], y, y_ref)


def test_per_head_parameters_head_by_head():
    # RoPE-Mixed learns frequencies per head: [Hq, D, n]; the dampings shared.
    p = problem(Hq=4, Hk=2)
    om = (torch.rand(4, 2, 3, dtype=F64) - 0.5).requires_grad_()
    q, k, v, pq, pk, da = (p[n] for n in ("q", "k", "v", "pq", "pk", "damping"))
    y = peal_torch.attention(q, k, v, pq, pk, om, damping=da, axes=2, causal=True)
    y_ref = torch.cat([dense(q[:, h:h + 1], k[:, h // 2:h // 2 + 1], v[:, h // 2:h // 2 + 1], pq, pk,
                             om[h], da, causal=True) for h in range(4)], dim=1)
    assert torch.allclose(y, y_ref, rtol=1e-10, atol=1e-12)
    assert_gradients_match(["q", "k", "v", "pq", "pk", "inv_freq", "damping"],
                           [q, k, v, pq, pk, om, da], y, y_ref)
    e = peal_torch.encode(q, pq, om, damping=da, axes=2)
    for h in range(4):
        assert torch.allclose(e[:, h:h + 1], dense_encode(q[:, h:h + 1], pq, om[h], da),
                              rtol=1e-12, atol=1e-13)


def test_point_gradients_sum_to_zero_per_axis():
    # The scores depend on p - p' only: moving every point by c changes nothing, so per axis
    # the query and key point gradients sum to zero (translation invariance).
    p = problem(nq=7, nk=9, D=3)
    y = ours("half_split", causal=True)(*[p[n] for n in NAMES])
    gq, gk = torch.autograd.grad(y, [p["pq"], p["pk"]], torch.randn_like(y))
    total = gq.sum(0) + gk.sum(0)
    assert total.abs().max() <= 1e-12 * (gq.abs().sum() + gk.abs().sum())
    assert gq.abs().max() > 1e-3  # and they are not all zero
    shift = torch.tensor([30.0, -12.5, 7.25], dtype=F64)
    y2 = ours("half_split", causal=True)(*[p[n] if n not in ("pq", "pk") else p[n] + shift
                                           for n in NAMES])
    assert torch.allclose(y, y2, rtol=1e-9, atol=1e-11)


def test_float32_as_accurate_as_pytorch_float32():
    # A ViT-sized grid: the 2-D points of a 6 x 8 patch grid, RoPE-Mixed frequencies.
    g = torch.stack(torch.meshgrid(torch.arange(6.0), torch.arange(8.0), indexing="ij"), -1)
    pts = g.reshape(-1, 2).to(F64)
    n, d = 8, 32
    names = ["q", "k", "v", "inv_freq"]

    def run(fn):
        return lambda q, k, v, om: fn(q, k, v, pts.to(q.dtype), pts.to(q.dtype), om)

    def draw():
        omega = (torch.rand(2, n, dtype=F64) * 2 - 1) * (100.0 ** (-torch.arange(n, dtype=F64) / n))
        tensors = [torch.randn(48, 4, d, dtype=F64) for _ in range(3)] + [omega]
        return (run(lambda *a: peal_torch.attention(*a, axes=2, causal=True)),
                run(lambda *a: mixed_attention(*a, causal=True)),
                [x.requires_grad_() for x in tensors])
    assert_float32_no_worse(draw, names)


def test_bad_input_raises():
    p = problem()
    q, k, v, pq, pk, om = (p[n].detach() for n in ("q", "k", "v", "pq", "pk", "inv_freq"))
    with pytest.raises(ValueError, match="Jordan blocks need 1-D positions"):
        peal_torch.attention(q, k, v, pq, pk, om, jordan_lambda=torch.zeros(2, 1, dtype=F64), axes=2)
    with pytest.raises(ValueError, match="ALiBi"):
        peal_torch.attention(q, k, v, pq, pk, om, alibi_slopes=torch.ones(4, dtype=F64), axes=2)
    with pytest.raises(ValueError, match=r"tq must be \[5, 2\]"):
        peal_torch.attention(q, k, v, pq[:, 0], pk, om, axes=2)
    with pytest.raises(ValueError, match=r"tk must be \[6, 3\]"):
        peal_torch.attention(q, k, v, torch.rand(5, 3, dtype=F64), pk, torch.rand(3, 3, dtype=F64),
                             axes=3)
    with pytest.raises(ValueError, match=r"inv_freq must be \[2, blocks\]"):
        peal_torch.attention(q, k, v, pq, pk, om[0], axes=2)
    with pytest.raises(ValueError, match=r"damping must be \[2, blocks\]"):
        peal_torch.attention(q, k, v, pq, pk, om, damping=torch.zeros(3, 3, dtype=F64), axes=2)
    with pytest.raises(ValueError, match="per-head parameters have 3 rows"):
        peal_torch.attention(q, k, v, pq, pk, torch.rand(3, 2, 3, dtype=F64), axes=2)
    for bad in (0, 17, True, 2.0):
        with pytest.raises(ValueError, match="axes must be an int"):
            peal_torch.attention(q, k, v, pq, pk, om, axes=bad)
    with pytest.raises(ValueError, match="do not fit a head"):
        peal_torch.encode(q, pq, torch.rand(2, 6, dtype=F64), axes=2)
    nan = pq.clone()
    nan[2, 1] = math.nan
    with pytest.raises(ValueError):
        peal_torch.attention(q, k, v, nan, pk, om, axes=2)
    inf = om.clone()
    inf[1, 0] = math.inf
    with pytest.raises(ValueError):
        peal_torch.encode(q, pq, inf, axes=2)
