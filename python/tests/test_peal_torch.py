"""peal_torch against torch.autograd.gradcheck and the plain PyTorch formula (reference.py).

- gradcheck in float64 (central differences of the op itself) for every input that takes a
  gradient and every option of the attention;
- float64 values and gradients against reference.py's autograd to 1e-10 relative (both exact
  formulas in double: what is left is rounding, ~1e-14 here);
- float32 against the float64 truth: peal's error at most twice the error of the same formula
  run by PyTorch in float32 (plus one float32 ulp of the value's scale), so that float storage
  costs no more accuracy than PyTorch's own float32 path;
- a 50-step training loop whose loss equals the plain-PyTorch loop's step for step;
- bad input raises ValueError before anything runs.
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


def rnd(*shape, dtype=F64, grad=True):
    return torch.randn(*shape, dtype=dtype).requires_grad_(grad)


def positions(n, start=0.0, irregular=False, grad=False):
    t = torch.arange(n, dtype=F64) + start
    if irregular:
        t = t + 0.37 * torch.rand(n, dtype=F64)
    return t.requires_grad_(grad)


def problem(nq=6, nk=7, Hq=4, Hk=2, d=8, dv=6, pairs=3, damped=False, start=3.0):
    p = dict(q=rnd(nq, Hq, d), k=rnd(nk, Hk, d), v=rnd(nk, Hk, dv),
             tq=positions(nq, start, True, True), tk=positions(nk, 0.0, True, True),
             inv_freq=torch.tensor([0.9, 0.3, 0.1, 0.02][:pairs], dtype=F64, requires_grad=True))
    p["damping"] = (torch.tensor([-0.05, -0.01, 0.0, -0.2][:pairs], dtype=F64, requires_grad=True)
                    if damped else None)
    return p


OPTION_SETS = {
    "plain": dict(),
    "causal_window": dict(causal=True, window=4.5),
    "alibi": dict(alibi_slopes=torch.tensor([0.1, 0.2, 0.05, 0.3], dtype=F64, requires_grad=True)),
    "softcap_sinks": dict(softcap=2.5, sinks=torch.tensor([0.5, -1.0, 0.0, 0.2], dtype=F64,
                                                          requires_grad=True)),
    "everything": dict(causal=True, window=5.0, softcap=3.0, scale=0.3,
                       alibi_slopes=torch.tensor([0.1, 0.2, 0.05, 0.3], dtype=F64, requires_grad=True),
                       sinks=torch.tensor([0.5, -1.0, 0.0, 0.2], dtype=F64, requires_grad=True)),
}


def attention_args(p, opts):
    """The differentiable inputs (in attention's order) and a function of them."""
    names = ["q", "k", "v", "tq", "tk", "inv_freq"] + (["damping"] if p["damping"] is not None else [])
    tensors = [p[n] for n in names]
    extra = [o for o in ("alibi_slopes", "sinks") if o in opts]
    tensors += [opts[o] for o in extra]
    fixed = {k: v for k, v in opts.items() if k not in extra}

    def run(fn, layout):
        def f(*xs):
            kw = dict(zip(names[5:] + extra, xs[5:]))
            inv = kw.pop("inv_freq")
            return fn(*xs[:5], inv, layout=layout, **kw, **fixed)
        return f
    return tensors, run


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
@pytest.mark.parametrize("damped", [False, True])
@pytest.mark.parametrize("options", list(OPTION_SETS))
def test_attention_gradcheck(layout, damped, options):
    p = problem(damped=damped)
    tensors, run = attention_args(p, OPTION_SETS[options])
    assert torch.autograd.gradcheck(run(peal_torch.attention, layout), tensors, eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
@pytest.mark.parametrize("options", list(OPTION_SETS))
def test_attention_matches_reference_float64(layout, options):
    p = problem(damped=True, d=10, pairs=4)  # partial rotary: 8 of 10 coordinates
    tensors, run = attention_args(p, OPTION_SETS[options])
    ours = run(peal_torch.attention, layout)(*tensors)
    ref = run(reference.attention, layout)(*tensors)
    assert torch.allclose(ours, ref, rtol=1e-10, atol=1e-12)
    d_out = torch.randn_like(ours)
    g_ours = torch.autograd.grad(ours, tensors, d_out)
    g_ref = torch.autograd.grad(ref, tensors, d_out)
    for a, b in zip(g_ours, g_ref):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-11 * (1 + b.abs().max()))


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
@pytest.mark.parametrize("side", ["query", "key"])
def test_encode_gradcheck_and_reference(layout, side):
    x, t = rnd(5, 3, 10), positions(5, 2.0, True, True)
    inv, damp = torch.tensor([0.9, 0.3, 0.05], dtype=F64, requires_grad=True), rnd(3) * 0.1
    damp = damp.detach().requires_grad_()
    f = lambda x, t, inv, damp: peal_torch.encode(x, t, inv, damping=damp, layout=layout, side=side)  # noqa: E731
    assert torch.autograd.gradcheck(f, (x, t, inv, damp))
    ours = f(x, t, inv, damp)
    ref = reference.encode(x, t, inv, damp, layout, side)
    assert torch.allclose(ours, ref, rtol=1e-12, atol=1e-13)
    g = torch.randn_like(ours)
    for a, b in zip(torch.autograd.grad(ours, (x, t, inv, damp), g),
                    torch.autograd.grad(ref, (x, t, inv, damp), g)):
        assert torch.allclose(a, b, rtol=1e-11, atol=1e-12)


def test_rope_near_1e9_matches_the_exact_angles():
    # RoPE near 1.7e9. With a general inv_freq the float64 product t * inv_freq is already off by
    # up to t ulp(1) ~ 2e-7 rad, so a reference would be as wrong as what it checks. Here t is an
    # integer and inv_freq a power of two: the product is exact, the reference's cos and sin are
    # correctly rounded, and peal's exact angle reduction (docs/numerics.md) must agree to 1e-12.
    t = torch.tensor([1.7e9, 1.7e9 + 1, 1.7e9 + 17], dtype=F64)
    inv = torch.tensor([0.5, 2.0 ** -10], dtype=F64)
    x = rnd(3, 2, 4, grad=False)
    assert torch.allclose(peal_torch.encode(x, t, inv), reference.encode(x, t, inv), atol=1e-12)


def test_batched_and_shared_positions():
    p = problem()
    qb, kb, vb = rnd(2, 6, 4, 8), rnd(2, 7, 2, 8), rnd(2, 7, 2, 6)
    tq = torch.stack([positions(6, 3.0, True), positions(6, 1.0, True)]).requires_grad_()
    out = peal_torch.attention(qb, kb, vb, tq, p["tk"], p["inv_freq"], causal=True)
    for b in range(2):
        one = peal_torch.attention(qb[b], kb[b], vb[b], tq[b], p["tk"], p["inv_freq"], causal=True)
        assert torch.equal(out[b], one)
    f = lambda q, k, v, tq, tk, inv: peal_torch.attention(q, k, v, tq, tk, inv, causal=True)  # noqa: E731
    assert torch.autograd.gradcheck(f, (qb, kb, vb, tq, p["tk"], p["inv_freq"]), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("batch", [1, 3])
def test_threads_give_the_bits_of_one_thread(batch):
    # One call per batch: with 3 elements and 2 threads the elements run side by side, with 1
    # element its kernels take the threads (python/src/module.hpp, over_batch).
    p = problem(nq=20, nk=24, Hq=4, Hk=2, d=8, dv=6, damped=True)
    q, k, v = rnd(batch, 20, 4, 8), rnd(batch, 24, 2, 8), rnd(batch, 24, 2, 6)
    tq = torch.stack([positions(20, 3.0 + b, True) for b in range(batch)]).requires_grad_()
    slopes = torch.tensor([0.1, 0.2, 0.05, 0.3], dtype=F64, requires_grad=True)
    leaves = [q, k, v, tq, p["tk"], p["inv_freq"], p["damping"], slopes]
    results = []
    for threads in (1, 2, 10 ** 6):  # an absurd count: bounded as the kernels bound it
        out = peal_torch.attention(q, k, v, tq, p["tk"], p["inv_freq"], damping=p["damping"],
                                   causal=True, alibi_slopes=slopes, threads=threads)
        results.append([out] + list(torch.autograd.grad(out, leaves, torch.ones_like(out))))
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)
    y = peal_torch.encode(q, tq, p["inv_freq"], damping=p["damping"])
    assert torch.equal(y[-1], peal_torch.encode(q[-1], tq[-1], p["inv_freq"], damping=p["damping"]))


def test_empty_batch():
    p = problem(damped=True)
    q, k, v = rnd(0, 6, 4, 8), rnd(0, 7, 2, 8), rnd(0, 7, 2, 6)
    out = peal_torch.attention(q, k, v, p["tq"], p["tk"], p["inv_freq"], damping=p["damping"])
    assert out.shape == (0, 6, 4, 6)
    g = torch.autograd.grad(out.sum(), [q, p["inv_freq"], p["damping"]], allow_unused=True)
    assert g[0].shape == q.shape and torch.equal(g[1], torch.zeros(3, dtype=F64))
    y = peal_torch.linear_attention(q, k, v, p["tq"], p["tk"], p["inv_freq"], decay=torch.ones(4, dtype=F64))
    assert y.shape == (0, 6, 4, 6)


def test_lse_is_returned_and_not_differentiable():
    p = problem()
    out, lse = peal_torch.attention(p["q"], p["k"], p["v"], p["tq"], p["tk"], p["inv_freq"],
                                    return_lse=True)
    assert lse.shape == (6, 4) and not lse.requires_grad
    qe = reference.encode(p["q"], p["tq"], p["inv_freq"]).detach()
    ke = reference.encode(p["k"], p["tk"], p["inv_freq"], side="key").detach().repeat_interleave(2, 1)
    x = torch.einsum("ihd,jhd->ih j".replace(" ", ""), qe, ke) / math.sqrt(8)
    assert torch.allclose(lse, torch.logsumexp(x, dim=-1), rtol=1e-12)


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
def test_float32_as_accurate_as_pytorch_float32(layout):
    names = ["q", "k", "v", "inv_freq"]

    def draw():
        p = problem(nq=40, nk=48, Hq=4, Hk=4, d=32, dv=32, pairs=4, start=500.0)
        p["inv_freq"] = (10000.0 ** (-torch.arange(0, 16, 2, dtype=F64) / 16)).requires_grad_()
        tq, tk = p["tq"].detach(), p["tk"].detach() + 480.0

        def run(fn):
            return lambda q, k, v, inv: fn(q, k, v, tq, tk, inv, layout=layout, causal=True)
        return run(peal_torch.attention), run(reference.attention), [p[n] for n in names]
    assert_float32_no_worse(draw, names)


class TinyModel(torch.nn.Module):
    """Projections, attention with learned frequencies, an output projection."""

    def __init__(self, fn, d_model=16, heads=2, head_dim=8):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.fn, self.heads, self.head_dim = fn, heads, head_dim
        self.wq = torch.nn.Parameter(torch.randn(d_model, heads * head_dim, generator=g, dtype=F64) / 4)
        self.wk = torch.nn.Parameter(torch.randn(d_model, heads * head_dim, generator=g, dtype=F64) / 4)
        self.wv = torch.nn.Parameter(torch.randn(d_model, heads * head_dim, generator=g, dtype=F64) / 4)
        self.wo = torch.nn.Parameter(torch.randn(heads * head_dim, 1, generator=g, dtype=F64) / 4)
        self.inv_freq = torch.nn.Parameter(torch.tensor([1.0, 0.1], dtype=F64))

    def forward(self, x, t):
        n = x.shape[0]
        q = (x @ self.wq).view(n, self.heads, self.head_dim)
        k = (x @ self.wk).view(n, self.heads, self.head_dim)
        v = (x @ self.wv).view(n, self.heads, self.head_dim)
        o = self.fn(q, k, v, t, t, self.inv_freq, causal=True)
        return o.reshape(n, -1) @ self.wo


def train(fn, steps=50):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(24, 16, generator=g, dtype=F64)
    t = torch.arange(24, dtype=F64)
    y = torch.sin(0.4 * t)[:, None]  # a periodic target: the frequencies matter
    model = TinyModel(fn)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x, t) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model.inv_freq.detach()


def test_training_loop_matches_plain_pytorch_step_for_step():
    ours, f_ours = train(peal_torch.attention)
    ref, f_ref = train(reference.attention)
    assert ours[-1] < 0.5 * ours[0]  # it learns
    for step, (a, b) in enumerate(zip(ours, ref)):
        assert a == pytest.approx(b, rel=1e-9), step
    assert torch.allclose(f_ours, f_ref, rtol=1e-9)
    assert not torch.equal(f_ours, torch.tensor([1.0, 0.1], dtype=F64))  # the frequencies moved


def test_bad_input_raises():
    p = problem()
    q, k, v, tq, tk, inv = p["q"], p["k"], p["v"], p["tq"], p["tk"], p["inv_freq"]
    with pytest.raises(ValueError, match="float32, float64, float16 or bfloat16"):
        peal_torch.attention(q.int(), k.int(), v.int(), tq, tk, inv)
    with pytest.raises(ValueError, match="one dtype"):
        peal_torch.attention(q.bfloat16(), k.bfloat16(), v.half(), tq, tk, inv)
    with pytest.raises(ValueError, match="one dtype"):
        peal_torch.attention(q, k.float(), v, tq, tk, inv)
    with pytest.raises(ValueError, match="dim"):
        peal_torch.attention(q, k[..., :6], v, tq, tk, inv)
    with pytest.raises(ValueError):
        peal_torch.attention(q, k, v, tq[:3], tk, inv)
    with pytest.raises(ValueError, match="rotary pairs"):
        peal_torch.attention(q, k, v, tq, tk, torch.ones(5, dtype=F64))
    with pytest.raises(ValueError):
        peal_torch.attention(q, k, v, tq, tk, torch.tensor([1.0, math.nan, 0.1], dtype=F64))
    with pytest.raises(ValueError):
        peal_torch.attention(q, k, v, tq, tk, inv, alibi_slopes=torch.ones(3, dtype=F64))
    with pytest.raises(ValueError, match="threads"):
        peal_torch.attention(q, k, v, tq, tk, inv, threads=-1)
    with pytest.raises(ValueError, match="lse must be"):  # the module's own check of lse
        o = peal_torch._ext.Options()
        x = lambda t: t.detach().unsqueeze(0).numpy()  # noqa: E731
        peal_torch._ext.attention_backward_float64(
            x(q), x(tq), x(k), x(tk), x(v), peal_torch._blocks(inv, None, None, None, False), o,
            x(q[..., :6]), torch.zeros(1, 4, 6, dtype=F64).numpy(), x(q[..., :6]), peal_torch._ext.Wants())
    with pytest.raises(ValueError, match="layout"):
        peal_torch.encode(q, tq, inv, layout="rotate_half")
    with pytest.raises(ValueError, match="side"):
        peal_torch.encode(q, tq, inv, side="value")
    t_nan = tq.detach().clone()
    t_nan[2] = math.nan
    with pytest.raises(ValueError):
        peal_torch.encode(q, t_nan, inv)
