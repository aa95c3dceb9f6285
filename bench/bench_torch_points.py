"""A ViT training step over 2-D points (forward + backward, the frequencies learned):
peal_torch.attention with axes=2 (RoPE-Mixed: 32 pairs with learned frequencies on both axes)
against PyTorch's autograd of the same formula written plainly (angles p . omega, rotate_half,
matmul, softmax, matmul), and against peal's 1-D RoPE call of the same shape (what the N-D path
adds: encoding q and k at the points around the 1-D kernels, and the per-axis parameter passes
of the backward; docs/gradients.md §5). Results and the command: bench/README.md, "PyTorch op".

Shape: batch 8, a 14 x 14 patch grid (n = 196) and a 32 x 32 one (n = 1024), 6 heads,
d = 64, non-causal, float32, on one and two threads. Each round runs every contender once, in
an order rotated per round; the table gives the median step time of each and the medians of
the per-round ratios.

    PYTHONPATH=python:build/python OMP_WAIT_POLICY=passive /usr/bin/python3 bench/bench_torch_points.py [rounds]
"""

import math
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python", "tests"))
sys.path.insert(0, os.path.dirname(__file__))
import peal_torch  # noqa: E402
import reference  # noqa: E402
from bench_torch_batch import timed_rounds  # noqa: E402

B, H, D = 8, 6, 64


def inputs(side, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = side * side
    q, k, v = (torch.randn(B, n, H, D, generator=g).requires_grad_() for _ in range(3))
    grid = torch.stack(torch.meshgrid(torch.arange(float(side)), torch.arange(float(side)),
                                      indexing="ij"), -1)
    p = grid.reshape(n, 2).to(torch.float64)
    omega = (torch.randn(2, D // 2, generator=g, dtype=torch.float64) * 0.5).requires_grad_()
    return q, k, v, p, omega


def peal_points(threads):
    return lambda q, k, v, p, om: peal_torch.attention(q, k, v, p, p, om, axes=2, threads=threads)


def peal_line(threads):  # the 1-D call of the same shape: positions the patches' indices
    def f(q, k, v, p, om):
        t = torch.arange(q.shape[1], dtype=torch.float64)
        return peal_torch.attention(q, k, v, t, t, om[0], threads=threads)
    return f


def plain(q, k, v, p, om):
    """RoPE-Mixed as a PyTorch model writes it: [B, n, H, d] as [B, H, n, d], angles p . omega
    in float32, rotate_half, q k^T, softmax, p v."""
    ang = p.float() @ om.float()  # [n, d/2]
    emb = torch.cat((ang, ang), -1)
    cos, sin = emb.cos(), emb.sin()
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    q = q * cos + reference.rotate_half(q) * sin
    k = k * cos + reference.rotate_half(k) * sin
    s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return torch.matmul(torch.softmax(s, -1), v).transpose(1, 2)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    print(f"torch {torch.__version__}, rounds {rounds}, batch {B}, {H} heads, d = {D}, float32")
    names = ["peal 2-D", "peal 1-D", "plain"]
    print("| n | threads | " + " | ".join(f"{x} (ms)" for x in names) +
          " | plain / peal 2-D | peal 2-D / peal 1-D |")
    print("|---" * (len(names) + 4) + "|")
    for side in (14, 32):
        for threads in (1, 2):
            torch.set_num_threads(threads)
            a = inputs(side)
            times = timed_rounds([(fn, a) for fn in (peal_points(threads), peal_line(threads), plain)],
                                 rounds)
            m = statistics.median
            ratio = lambda i, j: m([x / y for x, y in zip(times[i], times[j])])  # noqa: E731
            print(f"| {side * side} | {threads} | " + " | ".join(f"{1e3 * m(x):.1f}" for x in times) +
                  f" | {ratio(2, 0):.2f}x | {ratio(0, 1):.2f}x |", flush=True)


if __name__ == "__main__":
    main()
