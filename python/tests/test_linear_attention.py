"""peal_torch.linear_attention against gradcheck and the plain PyTorch formula (reference.py).

The same protocol as test_peal_torch.py: float64 gradcheck of every input (q, k, v, both
position tensors, frequencies, dampings, decays), float64 values and gradients against
reference.linear_attention's autograd for every form, float32 against the float64 truth (at
most twice PyTorch's own float32 error plus one ulp of the scale), RetNet's normalisation
against torchscale's parallel and recurrent formulas (and gradcheck for the three forms), bad
input as ValueError.
"""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
import peal_torch  # noqa: E402
import reference  # noqa: E402
from accuracy import assert_float32_no_worse  # noqa: E402
from test_peal_torch import F64, positions, rnd  # noqa: E402



def problem(damped, decayed, nq=6, nk=7, Hq=4, Hk=2, d=8, dv=6):
    p = dict(q=rnd(nq, Hq, d), k=rnd(nk, Hk, d), v=rnd(nk, Hk, dv),
             tq=positions(nq, 2.0, True, True), tk=positions(nk, 0.0, True, True),
             inv_freq=torch.tensor([0.9, 0.3, 0.02], dtype=F64, requires_grad=True))
    p["damping"] = torch.tensor([-0.05, -0.01, 0.0], dtype=F64, requires_grad=True) if damped else None
    p["decay"] = torch.tensor([0.9, 0.5, 0.97, 0.99], dtype=F64, requires_grad=True) if decayed else None
    names = [n for n in ("q", "k", "v", "tq", "tk", "inv_freq", "damping", "decay") if p[n] is not None]
    return p, names


def runner(p, names, fn, layout, **fixed):
    def f(*xs):
        kw = dict(zip(names, xs))
        args = [kw.pop(n) for n in ("q", "k", "v", "tq", "tk", "inv_freq")]
        return fn(*args, layout=layout, **kw, **fixed)
    return f


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
@pytest.mark.parametrize("damped", [False, True])
@pytest.mark.parametrize("decayed", [False, True])
def test_linear_attention_gradcheck(layout, damped, decayed):
    p, names = problem(damped, decayed)
    f = runner(p, names, peal_torch.linear_attention, layout)
    assert torch.autograd.gradcheck(f, [p[n] for n in names], eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
@pytest.mark.parametrize("form", [dict(form="parallel"), dict(form="chunkwise", chunk=3),
                                  dict(form="recurrent"), dict(scale=0.3)])
def test_linear_attention_matches_reference_float64(layout, form):
    p, names = problem(damped=True, decayed=True, d=10)  # partial rotary: 6 of 10 coordinates
    tensors = [p[n] for n in names]
    ours = runner(p, names, peal_torch.linear_attention, layout, **form)(*tensors)
    ref = runner(p, names, reference.linear_attention, layout,
                 **{k: v for k, v in form.items() if k == "scale"})(*tensors)
    assert torch.allclose(ours, ref, rtol=1e-10, atol=1e-12)
    d_out = torch.randn_like(ours)
    for a, b in zip(torch.autograd.grad(ours, tensors, d_out), torch.autograd.grad(ref, tensors, d_out)):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-11 * (1 + b.abs().max()))


def test_linear_attention_batched():
    p, _ = problem(damped=False, decayed=True)
    qb, kb, vb = rnd(2, 6, 4, 8), rnd(2, 7, 2, 8), rnd(2, 7, 2, 6)
    out = peal_torch.linear_attention(qb, kb, vb, p["tq"], p["tk"], p["inv_freq"], decay=p["decay"])
    for b in range(2):
        one = peal_torch.linear_attention(qb[b], kb[b], vb[b], p["tq"], p["tk"], p["inv_freq"],
                                          decay=p["decay"])
        assert torch.equal(out[b], one)
    f = lambda q, k, v, dec: peal_torch.linear_attention(q, k, v, p["tq"], p["tk"], p["inv_freq"], decay=dec)  # noqa: E731,E501
    assert torch.autograd.gradcheck(f, (qb, kb, vb, p["decay"]), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("form", ["parallel", "chunkwise"])
def test_linear_attention_threads_give_the_bits_of_one_thread(batch, form):
    p, _ = problem(damped=True, decayed=True)
    q, k, v = rnd(batch, 6, 4, 8), rnd(batch, 7, 2, 8), rnd(batch, 7, 2, 6)
    leaves = [q, k, v, p["tq"], p["tk"], p["inv_freq"], p["damping"], p["decay"]]
    results = []
    for threads in (1, 2):
        out = peal_torch.linear_attention(q, k, v, p["tq"], p["tk"], p["inv_freq"],
                                          damping=p["damping"], decay=p["decay"], form=form,
                                          chunk=3, threads=threads)
        results.append([out] + list(torch.autograd.grad(out, leaves, torch.ones_like(out))))
    for a, b in zip(*results):
        assert torch.equal(a, b)


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
def test_linear_attention_float32_as_accurate_as_pytorch_float32(layout):
    names = ["q", "k", "v", "inv_freq", "decay"]

    def draw():
        p, _ = problem(damped=False, decayed=True, nq=40, nk=48, Hq=4, Hk=4, d=32, dv=32)
        p["inv_freq"] = (10000.0 ** (-torch.arange(0, 16, 2, dtype=F64) / 16)).requires_grad_()
        tq, tk = p["tq"].detach() + 500.0, p["tk"].detach() + 490.0

        def run(fn):
            return lambda q, k, v, inv, dec: fn(q, k, v, tq, tk, inv, layout=layout, decay=dec)
        return run(peal_torch.linear_attention), run(reference.linear_attention), [p[n] for n in names]
    assert_float32_no_worse(draw, names)


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
@pytest.mark.parametrize("form", ["parallel", "recurrent"])
def test_retnet_normalization_matches_torchscale_float64(layout, form):
    # Unit-size q and k: the parallel form's row sums of |w| pass 1, so its detached divisor
    # (torchscale's clamp(sum |w|, 1, 5e4)) is not the constant 1.
    p, names = problem(damped=True, decayed=True)
    tensors = [p[n] for n in names]
    fixed = dict(normalization="retnet", form=form)
    ours = runner(p, names, peal_torch.linear_attention, layout, **fixed)(*tensors)
    ref = runner(p, names, reference.linear_attention, layout, **fixed)(*tensors)
    assert torch.allclose(ours, ref, rtol=1e-10, atol=1e-12)
    plain = runner(p, names, peal_torch.linear_attention, layout, form=form)(*tensors)
    assert not torch.allclose(ours, plain, rtol=1e-3)  # the option is not ignored
    d_out = torch.randn_like(ours)
    for a, b in zip(torch.autograd.grad(ours, tensors, d_out), torch.autograd.grad(ref, tensors, d_out)):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-11 * (1 + b.abs().max()))


@pytest.mark.parametrize("form", [dict(form="parallel"), dict(form="chunkwise", chunk=3),
                                  dict(form="recurrent")])
def test_retnet_normalization_gradcheck(form):
    # Small q and k: every detached divisor (the abs sums, the chunkwise state bound) is clamped
    # to 1, so the op's own central differences are its exact derivative; the square roots of
    # sum decay^(t - s) stay differentiated (decay, tq, tk). Pure rotations: chunkwise needs them.
    p, names = problem(damped=False, decayed=True)
    with torch.no_grad():
        p["q"].mul_(0.05)
        p["k"].mul_(0.05)
    f = runner(p, names, peal_torch.linear_attention, "half_split", normalization="retnet", **form)
    assert torch.autograd.gradcheck(f, [p[n] for n in names], eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("form", ["parallel", "recurrent"])
def test_retnet_normalization_float32_as_accurate_as_pytorch_float32(form):
    # The float kernels (float storage and arithmetic) of RetNet's normalisation, forward and
    # backward, against the float64 truth: as accurate as torchscale's formula in float32.
    names = ["q", "k", "v", "inv_freq", "decay"]

    def draw():
        p, _ = problem(damped=False, decayed=True, nq=40, nk=48, Hq=4, Hk=4, d=32, dv=32)
        p["inv_freq"] = (10000.0 ** (-torch.arange(0, 16, 2, dtype=F64) / 16)).requires_grad_()
        tq, tk = p["tq"].detach() + 500.0, p["tk"].detach() + 490.0

        def run(fn):
            return lambda q, k, v, inv, dec: fn(q, k, v, tq, tk, inv, decay=dec,
                                                normalization="retnet", form=form)
        return run(peal_torch.linear_attention), run(reference.linear_attention), [p[n] for n in names]
    assert_float32_no_worse(draw, names)


def test_linear_attention_bad_input():
    p, _ = problem(damped=False, decayed=False)
    args = (p["q"], p["k"], p["v"], p["tq"], p["tk"], p["inv_freq"])
    with pytest.raises(ValueError, match="non-decreasing"):
        peal_torch.linear_attention(p["q"], p["k"], p["v"], p["tq"].flip(0), p["tk"], p["inv_freq"])
    with pytest.raises(ValueError, match="form"):
        peal_torch.linear_attention(*args, form="quadratic")
    with pytest.raises(ValueError, match="normalization"):
        peal_torch.linear_attention(*args, normalization="softmax")
    with pytest.raises(ValueError, match="form"):  # RetNet's normalisation depends on the form
        peal_torch.linear_attention(*args, normalization="retnet")
    with pytest.raises(ValueError, match="chunk"):
        peal_torch.linear_attention(*args, normalization="retnet", form="chunkwise")
    with pytest.raises(ValueError):
        peal_torch.linear_attention(*args, decay=torch.tensor([0.9, 1.5, 0.5, 0.5], dtype=F64))
    with pytest.raises(ValueError):
        peal_torch.linear_attention(*args, decay=torch.tensor([0.9, 0.5], dtype=F64))
