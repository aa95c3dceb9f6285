"""peal_torch on float16 and bfloat16 tensors (attention, linear_attention, encode).

A float16 or bfloat16 call runs the float32 kernels on float32 copies of its rows and rounds
out and the gradients of q, k, v once to the tensor's dtype (python/peal_torch/__init__.py;
the arithmetic of peal's half-storage kernels, docs/gradients.md §5). Checked:

- the glue: a half call returns, in its dtype, exactly the float32 call's results on the same
  (half-rounded) inputs, rounded once; the float64 gradients (frequencies, dampings, positions,
  slopes, sinks, decays) are the float32 call's bits; every option reaches the kernels;
- accuracy, against the float64 formula on the same half-rounded inputs (the truth): each value
  within u |truth| (u = eps / 2 of the dtype, the one rounding) plus twice PyTorch's own
  float32 error and one float32 ulp of the scale (the float32 kernels' bound,
  test_peal_torch.py); and, for bfloat16 (PyTorch 1.13 has no float16 cos on the CPU), at most
  HF's eager bfloat16 attention's error (cos and sin in float32 cast to bfloat16, rotate_half,
  matmuls in bfloat16, softmax in float32 cast back: transformers' eager_attention_forward);
- a training step on bfloat16 parameters runs and moves the frequencies.
"""

import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
import peal_torch  # noqa: E402
import reference  # noqa: E402
from accuracy import F32_ULP  # noqa: E402
from test_peal_torch import F64  # noqa: E402

HALVES = [torch.float16, torch.bfloat16]
UNIT_ROUNDOFF = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}


def half_problem(dtype, nq=40, nk=48, Hq=4, Hk=2, d=32, dv=32, start=500.0):
    """q, k, v in dtype; positions near `start`; 8 rotary pairs (16 of 32 coordinates)."""
    g = torch.Generator().manual_seed(7)
    p = dict(q=torch.randn(nq, Hq, d, generator=g).to(dtype),
             k=torch.randn(nk, Hk, d, generator=g).to(dtype),
             v=torch.randn(nk, Hk, dv, generator=g).to(dtype),
             tq=torch.arange(nq, dtype=F64) + start + 0.37 * torch.rand(nq, generator=g, dtype=F64),
             tk=torch.arange(nk, dtype=F64) + start - 8 + 0.37 * torch.rand(nk, generator=g, dtype=F64),
             inv_freq=10000.0 ** (-torch.arange(0, 16, 2, dtype=F64) / 16),
             damping=torch.linspace(-0.01, 0.0, 8, dtype=F64))
    return p


ATTENTION_OPTIONS = dict(causal=True, window=30.0, softcap=6.0, scale=0.2,
                         alibi_slopes=torch.tensor([0.05, 0.02, 0.01, 0.0], dtype=F64),
                         sinks=torch.tensor([0.5, -1.0, 0.2, 0.0], dtype=F64))
INPUTS = ["q", "k", "v", "tq", "tk", "inv_freq", "damping"]


def with_grad(p, cast=None):
    """Leaves for every input (q, k, v cast to `cast` when given) and the options' tensors."""
    xs = {n: (p[n].to(cast) if cast is not None and n in ("q", "k", "v") else p[n]).detach().clone()
          .requires_grad_() for n in INPUTS}
    return xs


def call_attention(fn, xs, opts):
    o = {k: (v.detach().clone().requires_grad_() if torch.is_tensor(v) else v)
         for k, v in opts.items()}
    y = fn(xs["q"], xs["k"], xs["v"], xs["tq"], xs["tk"], xs["inv_freq"], damping=xs["damping"], **o)
    extra = [o[k] for k in ("alibi_slopes", "sinks") if k in o]
    return y, [xs[n] for n in INPUTS] + extra


def call_linear(fn, xs, opts):
    decay = opts["decay"].detach().clone().requires_grad_()
    rest = {k: v for k, v in opts.items() if k != "decay"}
    y = fn(xs["q"], xs["k"], xs["v"], xs["tq"], xs["tk"], xs["inv_freq"], damping=xs["damping"],
           decay=decay, **rest)
    return y, [xs[n] for n in INPUTS] + [decay]


def case_inputs(dtype):
    """The problem in dtype and a d_out [40, 4, 32] in dtype."""
    return half_problem(dtype), torch.randn(40, 4, 32, generator=torch.Generator().manual_seed(9)).to(dtype)


def results(call, fn, p, opts, d_out, cast=None):
    xs = with_grad(p, cast)
    y, leaves = call(fn, xs, opts)
    grads = torch.autograd.grad(y, leaves, d_out.to(y.dtype))
    return y, grads


LINEAR_FORMS = [dict(form="parallel"), dict(form="chunkwise", chunk=7), dict(form="recurrent")]
CASES = [("attention", call_attention, peal_torch.attention, reference.attention, ATTENTION_OPTIONS)] + [
    (f"linear_{f['form']}", call_linear, peal_torch.linear_attention, reference.linear_attention,
     dict(decay=torch.tensor([0.97, 0.9, 0.99, 0.8], dtype=F64), **f)) for f in LINEAR_FORMS]


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_half_call_is_the_float32_call_rounded_once(dtype, case):
    _, call, fn, _, opts = case
    p, d_out = case_inputs(dtype)
    y_h, g_h = results(call, fn, p, opts, d_out)
    y_f, g_f = results(call, fn, p, opts, d_out.float(), cast=torch.float32)
    assert y_h.dtype == dtype
    assert torch.equal(y_h, y_f.to(dtype))
    for i, (a, b) in enumerate(zip(g_h, g_f)):
        if i < 3:  # q, k, v: in their dtype, rounded once
            assert a.dtype == dtype, i
            assert torch.equal(a, b.to(dtype)), i
        else:  # float64 leaves: the same bits
            assert a.dtype == F64 and torch.equal(a, b), i
        assert a.abs().max() > 0, i


def hf_eager_bf16_attention(q, k, v, tq, tk, inv_freq, *, damping=None, causal=False, window=None,
                            alibi_slopes=None, softcap=0.0, sinks=None, scale=None):
    """transformers' bfloat16 path: cos, sin (and the damping) in float32 cast to bfloat16, the
    rotation, scores and values in bfloat16, the softmax in float32 cast back."""
    dt = q.dtype

    def enc(x, t, side):
        f = t.float()[:, None] * inv_freq.float()
        emb = torch.cat((f, f), -1)
        cos, sin = emb.cos().to(dt)[:, None, :], emb.sin().to(dt)[:, None, :]
        r = emb.shape[-1]
        y = x[..., :r] * cos + reference.rotate_half(x[..., :r]) * sin
        if damping is not None:
            g = t.float()[:, None] * damping.float()
            g = torch.cat((g, g), -1)
            y = y * torch.exp(g if side == "query" else -g).to(dt)[:, None, :]
        return torch.cat((y, x[..., r:]), -1)
    nq, Hq, d = q.shape
    G = Hq // k.shape[1]
    qe, ke = enc(q, tq, "query"), enc(k, tk, "key").repeat_interleave(G, 1)
    x = torch.einsum("ihd,jhd->hij", qe, ke) * (1 / math.sqrt(d) if scale is None else scale)
    if softcap:
        x = softcap * torch.tanh(x / softcap)
    tau = (tq[:, None] - tk[None, :]).float()
    x = x.float()
    if alibi_slopes is not None:
        x = x - alibi_slopes.float()[:, None, None] * tau
    x = reference.mask_scores(x, tau, causal, window)
    if sinks is not None:
        x = torch.cat((x, sinks.float()[:, None, None].expand(Hq, nq, 1)), -1)
    w = torch.softmax(x, -1).to(dt)
    if sinks is not None:
        w = w[..., :-1]
    return torch.einsum("hij,jhd->ihd", w, v.repeat_interleave(G, 1))


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_half_call_within_one_rounding_of_the_truth(dtype, case):
    name, call, fn, ref, opts = case
    p, d_out = case_inputs(dtype)
    ref_opts = {k: v for k, v in opts.items() if k not in ("form", "chunk")}
    y_t, g_t = results(call, ref, p, ref_opts, d_out.double(), cast=F64)  # the truth
    y_r, g_r = results(call, ref, p, ref_opts, d_out.float(), cast=torch.float32)  # PyTorch f32
    y_h, g_h = results(call, fn, p, opts, d_out)
    u = UNIT_ROUNDOFF[dtype]
    for i, (ours, theirs, truth) in enumerate(zip([y_h, *g_h], [y_r, *g_r], [y_t, *g_t])):
        rounded = i <= 3  # out, dq, dk, dv: stored in dtype
        scale = truth.abs().max()
        e_ours = (ours.double() - truth).abs()
        e_ref = (theirs.double() - truth).abs().max()
        bound = (u * truth.abs() if rounded else 0) + 2 * e_ref + F32_ULP * scale
        assert (e_ours <= bound).all(), (name, i, float(e_ours.max()), float(e_ref))
    if dtype == torch.bfloat16 and name == "attention":
        y_b, g_b = results(call, hf_eager_bf16_attention, p, opts, d_out)
        for i in range(4):  # out, dq, dk, dv
            truth = [y_t, *g_t][i]
            e_ours = ([y_h, *g_h][i].double() - truth).abs().max()
            e_hf = ([y_b, *g_b][i].double() - truth).abs().max()
            assert e_ours <= e_hf, (i, float(e_ours), float(e_hf))


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("side", ["query", "key"])
def test_half_encode(dtype, side):
    p = half_problem(dtype)
    x, t = p["q"], p["tq"]
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(5)).to(dtype)

    def run(xx, fn=peal_torch.encode):
        xx = xx.detach().clone().requires_grad_()
        inv = p["inv_freq"].clone().requires_grad_()
        damp = p["damping"].clone().requires_grad_()
        tt = t.clone().requires_grad_()
        y = fn(xx, tt, inv, damping=damp, side=side)
        return y, torch.autograd.grad(y, [xx, tt, inv, damp], dy.to(y.dtype))
    y_h, g_h = run(x)
    y_f, g_f = run(x.float())
    assert y_h.dtype == dtype and torch.equal(y_h, y_f.to(dtype))
    assert g_h[0].dtype == dtype and torch.equal(g_h[0], g_f[0].to(dtype))
    for a, b in zip(g_h[1:], g_f[1:]):
        assert torch.equal(a, b)
    y_t, g_t = run(x.double(), reference.encode)
    u = UNIT_ROUNDOFF[dtype]
    y_r, g_r = run(x.float(), reference.encode)
    for ours, theirs, truth in zip([y_h, g_h[0]], [y_r, g_r[0]], [y_t, g_t[0]]):
        e_ref = (theirs.double() - truth).abs().max()
        bound = u * truth.abs() + 2 * e_ref + F32_ULP * truth.abs().max()
        assert ((ours.double() - truth).abs() <= bound).all()


def test_bfloat16_training_step_moves_the_frequencies():
    g = torch.Generator().manual_seed(11)
    x = torch.randn(32, 16, generator=g).bfloat16()
    t = torch.arange(32, dtype=F64)
    wq, wk, wv = (torch.nn.Parameter((torch.randn(16, 32, generator=g) / 4).bfloat16()) for _ in range(3))
    inv = torch.nn.Parameter(torch.tensor([1.0, 0.3, 0.1, 0.01], dtype=F64))
    opt = torch.optim.SGD([wq, wk, wv, inv], lr=0.1)
    y = torch.sin(0.4 * t)[:, None]
    o = peal_torch.attention((x @ wq).view(32, 2, 16), (x @ wk).view(32, 2, 16),
                             (x @ wv).view(32, 2, 16), t, t, inv, causal=True)
    assert o.dtype == torch.bfloat16
    loss = ((o.reshape(32, -1).double().sum(-1, keepdim=True) - y) ** 2).mean()
    loss.backward()
    assert wq.grad.dtype == torch.bfloat16 and inv.grad.dtype == F64
    before = inv.detach().clone()
    opt.step()
    assert not torch.equal(inv.detach(), before)
