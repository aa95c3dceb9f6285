"""peal_torch with real blocks and Jordan blocks beside the rotation pairs (real_lambda,
jordan_lambda): the encoding A(tau) = rotations (+) diag(e^{lambda tau}) (+) Jordan-2 blocks
e^{mu tau} [[1, tau], [0, 1]] (+) I, chosen at run time.

- gradcheck in float64 for attention, linear attention and encode, every parameter at once;
- float64 values and gradients against reference.py, whose encode writes F(t) = A(t)^T and
  G(s) = A(-s) of each block out by hand;
- each gradient lands on its own parameter (a call that wants only mu's);
- the Jordan block with mu = 0 and two fixed components reproduces the ALiBi option;
- coordinates= places the blocks anywhere in the head (a permutation, checked against expm);
- float32 no less accurate than PyTorch's float32 run of the same formula;
- bad input raises ValueError.
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


def param(values, grad=True):
    return torch.tensor(values, dtype=F64, requires_grad=grad)


def problem(nq=6, nk=7, Hq=4, Hk=2, d=12, dv=5, start=3.0):
    """Two rotation pairs (4 coordinates), two real blocks, two Jordan blocks (4), two passed."""
    tq = (torch.arange(nq, dtype=F64) + start + 0.37 * torch.rand(nq, dtype=F64)).requires_grad_()
    tk = (torch.arange(nk, dtype=F64) + 0.37 * torch.rand(nk, dtype=F64)).requires_grad_()
    return dict(q=rnd(nq, Hq, d), k=rnd(nk, Hk, d), v=rnd(nk, Hk, dv), tq=tq, tk=tk,
                inv_freq=param([0.7, 0.05]), damping=param([-0.03, 0.0]),
                real_lambda=param([-0.2, 0.04]), jordan_lambda=param([-0.1, 0.0]))


NAMES = ["q", "k", "v", "tq", "tk", "inv_freq", "damping", "real_lambda", "jordan_lambda"]


def runner(fn, layout, **options):
    def f(q, k, v, tq, tk, inv_freq, damping, real_lambda, jordan_lambda):
        return fn(q, k, v, tq, tk, inv_freq, damping=damping, real_lambda=real_lambda,
                  jordan_lambda=jordan_lambda, layout=layout, **options)
    return f


ATTENTION_OPTIONS = {
    "plain": dict(),
    "everything": dict(causal=True, window=5.0, softcap=3.0, scale=0.3,
                       alibi_slopes=torch.tensor([0.1, 0.2, 0.05, 0.3], dtype=F64),
                       sinks=torch.tensor([0.5, -1.0, 0.0, 0.2], dtype=F64)),
}


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
@pytest.mark.parametrize("options", list(ATTENTION_OPTIONS))
def test_attention_gradcheck(layout, options):
    p = problem()
    f = runner(peal_torch.attention, layout, **ATTENTION_OPTIONS[options])
    assert torch.autograd.gradcheck(f, [p[n] for n in NAMES], eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
@pytest.mark.parametrize("options", list(ATTENTION_OPTIONS))
@pytest.mark.parametrize("damped", [True, False])
def test_attention_matches_reference_float64(layout, options, damped):
    # Undamped: the kernels still get n entries of a (zeros), and the gradients of the real and
    # Jordan blocks come after them.
    p = problem(nq=9, nk=11)
    names = NAMES if damped else [n for n in NAMES if n != "damping"]
    tensors = [p[n] for n in names]

    def run(fn):
        def f(*xs):
            kw = dict(zip(names, xs))
            kw.setdefault("damping", None)
            return runner(fn, layout, **ATTENTION_OPTIONS[options])(*[kw[n] for n in NAMES])
        return f
    ours, ref = run(peal_torch.attention)(*tensors), run(reference.attention)(*tensors)
    assert torch.allclose(ours, ref, rtol=1e-10, atol=1e-12)
    d_out = torch.randn_like(ours)
    for name, a, b in zip(names, torch.autograd.grad(ours, tensors, d_out),
                          torch.autograd.grad(ref, tensors, d_out)):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-11 * (1 + b.abs().max())), name


@pytest.mark.parametrize("form", ["parallel", "chunkwise", "recurrent"])
def test_linear_attention_gradcheck_and_reference(form):
    p = problem(Hk=4)
    decay = torch.tensor([0.9, 0.97, 0.8, 0.95], dtype=F64, requires_grad=True)
    tensors = [p[n] for n in NAMES] + [decay]

    def run(fn, **kw):
        def f(*xs):
            return runner(fn, "half_split", decay=xs[-1], **kw)(*xs[:-1])
        return f
    ours = run(peal_torch.linear_attention, form=form, chunk=3)
    assert torch.autograd.gradcheck(ours, tensors, eps=1e-6, atol=1e-7)
    y, y_ref = ours(*tensors), run(reference.linear_attention)(*tensors)
    assert torch.allclose(y, y_ref, rtol=1e-10, atol=1e-12)
    d_out = torch.randn_like(y)
    for name, a, b in zip(NAMES + ["decay"], torch.autograd.grad(y, tensors, d_out),
                          torch.autograd.grad(y_ref, tensors, d_out)):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-11 * (1 + b.abs().max())), name


@pytest.mark.parametrize("side", ["query", "key"])
def test_encode_gradcheck_and_reference(side):
    p = problem()
    x, t = p["q"], p["tq"]
    names = ["inv_freq", "damping", "real_lambda", "jordan_lambda"]
    tensors = [x, t] + [p[n] for n in names]

    def f(x, t, inv, damping, real_lambda, jordan_lambda):
        return peal_torch.encode(x, t, inv, damping=damping, real_lambda=real_lambda,
                                 jordan_lambda=jordan_lambda, side=side)
    assert torch.autograd.gradcheck(f, tensors)
    ours = f(*tensors)
    ref = reference.encode(x, t, p["inv_freq"], p["damping"], "half_split", side,
                           p["real_lambda"], p["jordan_lambda"])
    assert torch.allclose(ours, ref, rtol=1e-12, atol=1e-13)
    g = torch.randn_like(ours)
    for a, b in zip(torch.autograd.grad(ours, tensors, g), torch.autograd.grad(ref, tensors, g)):
        assert torch.allclose(a, b, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("permuted", [False, True])
def test_encodings_pair_to_the_score(permuted):
    # F(t) q . G(s) k = q^T A(t - s) k, with A(tau) built from the generator by matrix_exp; with
    # coordinates c, the generator's entry (a, b) moves to (c[a], c[b]).
    p = problem()
    q, k = p["q"].detach()[:1, :1], p["k"].detach()[:1, :1]
    t, s = torch.tensor([2.5], dtype=F64), torch.tensor([-1.25], dtype=F64)
    c = torch.randperm(12) if permuted else torch.arange(12)
    kw = dict(damping=p["damping"].detach(), real_lambda=p["real_lambda"].detach(),
              jordan_lambda=p["jordan_lambda"].detach(), layout="interleaved",
              coordinates=c if permuted else None)
    lhs = (peal_torch.encode(q, t, p["inv_freq"].detach(), side="query", **kw) *
           peal_torch.encode(k, s, p["inv_freq"].detach(), side="key", **kw)).sum()
    X = torch.zeros(12, 12, dtype=F64)
    for i, (w, a) in enumerate(zip(p["inv_freq"].detach(), kw["damping"])):
        # X = [[a, w], [-w, a]] per pair (include/peal/rotation_block.hpp)
        X[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor([[a, w], [-w, a]])
    for r, lam in enumerate(kw["real_lambda"]):
        X[4 + r, 4 + r] = lam
    for b, mu in enumerate(kw["jordan_lambda"]):
        o = 6 + 2 * b
        X[o:o + 2, o:o + 2] = torch.tensor([[mu, 1.0], [0.0, mu]])
    Xc = torch.zeros_like(X)
    Xc[c[:, None], c[None, :]] = X
    A = torch.matrix_exp((t - s) * Xc)
    rhs = q[0, 0] @ A @ k[0, 0]
    assert torch.allclose(lhs, rhs, rtol=1e-13, atol=1e-13)


def test_coordinates_gradcheck():
    p = problem()
    c = torch.randperm(12)
    for fn, kw in ((peal_torch.attention, dict(causal=True)),
                   (peal_torch.linear_attention, dict(form="chunkwise", chunk=3))):
        f = runner(fn, "half_split", coordinates=c, **kw)
        assert torch.autograd.gradcheck(f, [p[n] for n in NAMES], eps=1e-6, atol=1e-7)

    def g(x, t, lam, mu):
        return peal_torch.encode(x, t, p["inv_freq"], real_lambda=lam, jordan_lambda=mu,
                                 coordinates=c, side="key")
    assert torch.autograd.gradcheck(g, (p["q"], p["tq"], p["real_lambda"], p["jordan_lambda"]))


def test_each_gradient_lands_on_its_parameter():
    # Only mu wanted: the others are None, and mu's equals the reference's.
    p = problem()
    frozen = {n: p[n].detach() for n in NAMES}
    mu = p["jordan_lambda"]
    f = runner(peal_torch.attention, "half_split", causal=True)
    y = f(*[frozen[n] for n in NAMES[:-1]], mu)
    y_ref = runner(reference.attention, "half_split", causal=True)(*[frozen[n] for n in NAMES[:-1]], mu)
    g = torch.randn_like(y)
    (ours,), (ref,) = torch.autograd.grad(y, [mu], g), torch.autograd.grad(y_ref, [mu], g)
    assert torch.allclose(ours, ref, rtol=1e-10, atol=1e-12)
    # Only lambda, with no rotations at all: a pure decay encoding.
    lam = p["real_lambda"]
    y = peal_torch.attention(frozen["q"][..., :4], frozen["k"][..., :4], frozen["v"], frozen["tq"],
                             frozen["tk"], real_lambda=lam)
    y_ref = reference.attention(frozen["q"][..., :4], frozen["k"][..., :4], frozen["v"],
                                frozen["tq"], frozen["tk"], torch.zeros(0, dtype=F64),
                                real_lambda=lam)
    assert torch.allclose(y, y_ref, rtol=1e-10, atol=1e-12)
    g = torch.randn_like(y)
    assert torch.allclose(torch.autograd.grad(y, [lam], g)[0],
                          torch.autograd.grad(y_ref, [lam], g)[0], rtol=1e-10, atol=1e-12)


def test_jordan_block_reproduces_alibi():
    # A Jordan block with mu = 0 adds q0 k0 + tau q0 k1 + q1 k1 to a score. With q's components
    # (-m_h / scale, 0) and k's (0, 1) that is -m_h tau: ALiBi (docs/design.md §1), here against
    # the kernels' own ALiBi option with the same rotations.
    p = problem(Hk=4, d=8)
    slopes = torch.tensor([0.1, 0.25, 0.5, 1.0], dtype=F64)
    scale = 1 / math.sqrt(8)
    q, k = p["q"].detach(), p["k"].detach()
    tq, tk, inv = p["tq"].detach(), p["tk"].detach(), p["inv_freq"].detach()
    q2 = torch.cat((q, (-slopes / scale)[None, :, None].expand(q.shape[0], 4, 1),
                    torch.zeros(q.shape[0], 4, 1, dtype=F64)), -1)
    k2 = torch.cat((k, torch.zeros(k.shape[0], 4, 1, dtype=F64),
                    torch.ones(k.shape[0], 4, 1, dtype=F64)), -1)
    # The rotations on the head's first 4 coordinates, the Jordan block on the two appended
    # ones (8, 9), the head's coordinates 4..7 passed through: coordinates in the blocks' order.
    c = list(range(4)) + [8, 9] + list(range(4, 8))
    jordan = peal_torch.attention(q2, k2, p["v"].detach(), tq, tk, inv, coordinates=c,
                                  jordan_lambda=torch.zeros(1, dtype=F64), scale=scale, causal=True)
    alibi = peal_torch.attention(q, k, p["v"].detach(), tq, tk, inv, alibi_slopes=slopes,
                                 causal=True)
    assert torch.allclose(jordan, alibi, rtol=1e-12, atol=1e-13)


def test_float32_as_accurate_as_pytorch_float32():
    names = ["q", "k", "v", "inv_freq", "damping", "real_lambda", "jordan_lambda"]

    def draw():
        p = problem(nq=40, nk=48, Hq=4, Hk=4, d=32, dv=16, start=500.0)
        p["inv_freq"] = (10000.0 ** (-torch.arange(0, 8, 2, dtype=F64) / 8)).requires_grad_()
        p["damping"] = param([-1e-3, 0.0, -2e-3, 0.0])
        p["real_lambda"] = param([-4e-3, 1e-3, 0.0])
        p["jordan_lambda"] = param([-2e-3, 0.0])
        tq, tk = p["tq"].detach(), p["tk"].detach() + 480.0

        def run(fn):
            def f(q, k, v, inv, damping, real_lambda, jordan_lambda):
                return fn(q, k, v, tq.to(q.dtype), tk.to(q.dtype), inv, damping=damping,
                          real_lambda=real_lambda, jordan_lambda=jordan_lambda, causal=True)
            return f
        return run(peal_torch.attention), run(reference.attention), [p[n] for n in names]
    assert_float32_no_worse(draw, names)


def test_bad_blocks_raise():
    p = problem()
    q, k, v, tq, tk = (p[n].detach() for n in ("q", "k", "v", "tq", "tk"))
    inv = p["inv_freq"].detach()
    with pytest.raises(ValueError, match="do not fit"):  # 4 + 5 + 4 > 12
        peal_torch.attention(q, k, v, tq, tk, inv, real_lambda=torch.zeros(5, dtype=F64),
                             jordan_lambda=torch.zeros(2, dtype=F64))
    with pytest.raises(ValueError, match="do not fit"):
        peal_torch.encode(q, tq, jordan_lambda=torch.zeros(7, dtype=F64))
    with pytest.raises(ValueError, match="1-D"):
        peal_torch.attention(q, k, v, tq, tk, inv, real_lambda=torch.zeros(2, 1, 1, dtype=F64))
    for bad in ([0, 1, 2], list(range(11)) + [0], [0.0] * 12, [[0] * 12]):
        with pytest.raises(ValueError, match="coordinates"):
            peal_torch.attention(q, k, v, tq, tk, inv, coordinates=bad)
    with pytest.raises(ValueError, match="coordinates"):
        peal_torch.encode(q, tq, inv, coordinates=list(range(1, 13)))
    with pytest.raises(ValueError, match="damping needs inv_freq"):
        peal_torch.attention(q, k, v, tq, tk, damping=torch.zeros(2, dtype=F64))
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError):
            peal_torch.attention(q, k, v, tq, tk, inv, jordan_lambda=torch.tensor([0.0, bad], dtype=F64))
        with pytest.raises(ValueError):
            peal_torch.linear_attention(q, k, v, tq, tk, inv,
                                        real_lambda=torch.tensor([bad], dtype=F64))


@pytest.mark.parametrize("form", ["parallel", "recurrent"])
def test_retnet_normalization_with_blocks(form):
    # RetNet's normalisations (torchscale's formulas in reference.py) over an encoding with real
    # and Jordan blocks: values and every gradient.
    p = problem(Hk=4)
    decay = torch.tensor([0.9, 0.97, 0.8, 0.95], dtype=F64, requires_grad=True)
    tensors = [p[n] for n in NAMES] + [decay]

    def run(fn):
        def f(*xs):
            return runner(fn, "half_split", decay=xs[-1], normalization="retnet", form=form)(*xs[:-1])
        return f
    y, y_ref = run(peal_torch.linear_attention)(*tensors), run(reference.linear_attention)(*tensors)
    assert torch.allclose(y, y_ref, rtol=1e-10, atol=1e-12)
    d_out = torch.randn_like(y)
    for name, a, b in zip(NAMES + ["decay"], torch.autograd.grad(y, tensors, d_out),
                          torch.autograd.grad(y_ref, tensors, d_out)):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-11 * (1 + b.abs().max())), name


def test_retnet_chunkwise_normalization_refuses_blocks():
    # Its state bound is taken in the absolute frame, bounded only for pure rotations.
    p = problem(Hk=4)
    with pytest.raises(ValueError, match="pure rotation"):
        peal_torch.linear_attention(*[p[n].detach() for n in NAMES[:6]],
                                    real_lambda=p["real_lambda"].detach(),
                                    decay=torch.full((4,), 0.9, dtype=F64),
                                    normalization="retnet", form="chunkwise", chunk=3)


def per_head_problem():
    p = problem(Hq=4, Hk=2)
    p["inv_freq"] = (torch.tensor([[0.7, 0.05], [0.3, 0.02], [1.1, 0.2], [0.5, 0.01]], dtype=F64)
                     .requires_grad_())
    p["real_lambda"] = torch.tensor([[-0.2, 0.04], [-0.1, 0.0], [0.05, -0.3], [-0.02, 0.01]],
                                    dtype=F64, requires_grad=True)
    return p  # damping and jordan_lambda shared (1-D)


def reference_per_head(fn, p, **kw):
    """The reference formula head by head (head h's parameters, its key head h // 2)."""
    rows = []
    for h in range(4):
        g = h // 2
        extra = {n: kw[n][h:h + 1] for n in ("alibi_slopes", "sinks", "decay") if n in kw}
        rest = {n: v for n, v in kw.items() if n not in extra}
        rows.append(fn(p["q"][:, h:h + 1], p["k"][:, g:g + 1], p["v"][:, g:g + 1], p["tq"], p["tk"],
                       p["inv_freq"][h], damping=p["damping"], real_lambda=p["real_lambda"][h],
                       jordan_lambda=p["jordan_lambda"], **extra, **rest))
    return torch.cat(rows, dim=1)


@pytest.mark.parametrize("linear", [False, True])
def test_per_head_parameters_match_the_reference(linear):
    p = per_head_problem()
    tensors = [p[n] for n in NAMES]
    if linear:
        kw = dict(decay=torch.tensor([0.9, 0.97, 0.8, 0.95], dtype=F64), form="chunkwise", chunk=3)
        ours = runner(peal_torch.linear_attention, "half_split", **kw)(*tensors)
        kw.pop("form"), kw.pop("chunk")
        ref = reference_per_head(reference.linear_attention, p, **kw)
    else:
        kw = dict(ATTENTION_OPTIONS["everything"])
        ours = runner(peal_torch.attention, "half_split", **kw)(*tensors)
        ref = reference_per_head(reference.attention, p, **kw)
    assert torch.allclose(ours, ref, rtol=1e-10, atol=1e-12)
    d_out = torch.randn_like(ours)
    for name, a, b in zip(NAMES, torch.autograd.grad(ours, tensors, d_out),
                          torch.autograd.grad(ref, tensors, d_out)):
        assert a.shape == b.shape, name
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-11 * (1 + b.abs().max())), name


def test_per_head_gradcheck_and_encode():
    p = per_head_problem()
    f = runner(peal_torch.attention, "interleaved", causal=True)
    assert torch.autograd.gradcheck(f, [p[n] for n in NAMES], eps=1e-6, atol=1e-7)
    # encode: head h of the result is head h encoded with row h.
    y = peal_torch.encode(p["q"], p["tq"], p["inv_freq"], real_lambda=p["real_lambda"], side="key")
    for h in range(4):
        yh = peal_torch.encode(p["q"][:, h:h + 1], p["tq"], p["inv_freq"][h],
                               real_lambda=p["real_lambda"][h], side="key")
        assert torch.equal(y[:, h:h + 1], yh)
    # The same row for every head: the shared call's values.
    shared = peal_torch.attention(p["q"], p["k"], p["v"], p["tq"], p["tk"], p["inv_freq"][0],
                                  real_lambda=p["real_lambda"][0], causal=True)
    rows = peal_torch.attention(p["q"], p["k"], p["v"], p["tq"], p["tk"],
                                p["inv_freq"][0].expand(4, -1),
                                real_lambda=p["real_lambda"][0].expand(4, -1), causal=True)
    assert torch.allclose(shared, rows, rtol=1e-13, atol=1e-14)


def test_per_head_bad_input():
    p = per_head_problem()
    q, k, v, tq, tk = (p[n].detach() for n in ("q", "k", "v", "tq", "tk"))
    with pytest.raises(ValueError, match="rows for 4 query heads"):
        peal_torch.attention(q, k, v, tq, tk, p["inv_freq"].detach()[:3])
    with pytest.raises(ValueError, match="different head counts"):
        peal_torch.attention(q, k, v, tq, tk, p["inv_freq"].detach(),
                             real_lambda=p["real_lambda"].detach()[:2])
    with pytest.raises(ValueError, match="1-D .* or 2-D"):
        peal_torch.attention(q, k, v, tq, tk, p["inv_freq"].detach()[None])
    with pytest.raises(ValueError, match="multiple"):
        peal_torch.attention(q, k[:, :1].expand(-1, 3, -1), v[:, :1].expand(-1, 3, -1), tq, tk,
                             p["inv_freq"].detach())
    with pytest.raises(ValueError, match="rows for 4 heads"):
        peal_torch.encode(q, tq, p["inv_freq"].detach()[:2])
