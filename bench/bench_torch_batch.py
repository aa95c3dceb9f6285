"""A batched training step (forward + backward, frequencies learned) of peal_torch.attention on
two threads: the batch in one call (its elements side by side, python/src/module.hpp's
over_batch) against one call per element (each element's kernels on both threads: how the op
ran a batch before), against one thread, and against PyTorch's autograd of the plain formula
(bench_torch_step.py's `plain`, batched) on two threads; and bfloat16 and float16 tensors
against float32 (their float32 copies: docs/gradients.md §5). Results and the command:
bench/README.md, "PyTorch op".

Shape: batch 8, 4 heads, d = 128, causal, RoPE with learnable inv_freq, n in {256, 512}. Each
round runs every contender once, in an order rotated per round; the table gives the median
step time of each and the medians of the per-round ratios.

    PYTHONPATH=python:build/python OMP_WAIT_POLICY=passive /usr/bin/python3 bench/bench_torch_batch.py [rounds]
"""

import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python", "tests"))
sys.path.insert(0, os.path.dirname(__file__))
import peal_torch  # noqa: E402
from bench_torch_step import plain  # noqa: E402

torch.set_num_threads(2)
B, H, D = 8, 4, 128


def inputs(n, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, n, H, D, generator=g).to(dtype).requires_grad_() for _ in range(3))
    t = torch.arange(n, dtype=torch.float64)
    inv = (10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)).requires_grad_()
    return q, k, v, t, inv


def batched(threads):
    return lambda q, k, v, t, inv: peal_torch.attention(q, k, v, t, t, inv, causal=True,
                                                        threads=threads)


def per_element(q, k, v, t, inv):
    return torch.stack([peal_torch.attention(q[b], k[b], v[b], t, t, inv, causal=True, threads=2)
                        for b in range(q.shape[0])])


def plain_batched(q, k, v, t, inv):
    return torch.stack([plain(q[b], k[b], v[b], t, t, inv.float(), True) for b in range(q.shape[0])])


def step(fn, args):
    q, k, v, t, inv = args
    for x in (q, k, v, inv):
        x.grad = None
    t0 = time.perf_counter()
    out = fn(q, k, v, t, inv)
    out.backward(torch.ones_like(out))
    return time.perf_counter() - t0


def timed_rounds(contenders, rounds):
    """Step times of each (fn, args) contender: one warm-up each, then `rounds` rounds running
    every contender once, in an order rotated per round."""
    for fn, a in contenders:
        step(fn, a)
    times = [[] for _ in contenders]
    for r in range(rounds):
        order = list(range(len(contenders)))
        order = order[r % len(order):] + order[:r % len(order)]
        for i in order:
            times[i].append(step(*contenders[i]))
    return times


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    print(f"torch {torch.__version__}, torch threads {torch.get_num_threads()}, rounds {rounds}, "
          f"batch {B}, {H} heads, d = {D}, causal")
    names = ["batch, 2 threads", "per element, 2 threads", "batch, 1 thread", "plain, 2 threads",
             "bf16 batch, 2 threads", "f16 batch, 2 threads"]
    print("| n | " + " | ".join(f"{x} (ms)" for x in names) +
          " | per element / batch | 1 thread / 2 | plain / batch | bf16 / f32 | f16 / f32 |")
    print("|---" * (len(names) + 6) + "|")
    for n in (256, 512):
        f32, bf16, f16 = inputs(n), inputs(n, torch.bfloat16), inputs(n, torch.float16)
        fns = [(batched(2), f32), (per_element, f32), (batched(1), f32), (plain_batched, f32),
               (batched(2), bf16), (batched(2), f16)]
        times = timed_rounds(fns, rounds)
        m = statistics.median
        ratio = lambda i, j: m([a / b for a, b in zip(times[i], times[j])])  # noqa: E731
        print(f"| {n} | " + " | ".join(f"{1e3 * m(x):.1f}" for x in times) +
              f" | {ratio(1, 0):.2f}x | {ratio(2, 0):.2f}x | {ratio(3, 0):.2f}x | {ratio(4, 0):.2f}x | "
              f"{ratio(5, 0):.2f}x |", flush=True)


if __name__ == "__main__":
    main()
