"""Learn RoPE frequencies with peal_torch: a student recovers a teacher's wavelengths.

A teacher attention layer with fixed queries, keys and values encodes them with RoPE at two
frequencies (wavelengths 2*pi/omega of 9 and 70 positions) at irregular timestamps. A
student with the same q, k, v but other starting frequencies sees only the teacher's outputs
and learns its frequencies by gradient descent through peal_torch.attention (causal, half-split
layout): the gradient of the loss with respect to inv_freq is peal's fused backward.

Run (after building the module: cmake --build build --target _peal_torch):
    PYTHONPATH=python:build/python /usr/bin/python3 python/examples/learn_frequencies.py
Exits non-zero unless the learned wavelengths are within 1 % of the teacher's.
"""

import math
import sys

import torch

import peal_torch

torch.manual_seed(0)
F64 = torch.float64
n, heads, head_dim = 96, 4, 8

teacher = torch.tensor([2 * math.pi / 9, 2 * math.pi / 70], dtype=F64)
q = torch.randn(n, heads, head_dim, dtype=F64)
k = torch.randn(n, heads, head_dim, dtype=F64)
v = torch.randn(n, heads, head_dim, dtype=F64)
t = torch.cumsum(0.5 + torch.rand(n, dtype=F64), 0)  # irregular timestamps
with torch.no_grad():
    target = peal_torch.attention(q, k, v, t, t, teacher, causal=True)

inv_freq = torch.nn.Parameter(torch.tensor([2 * math.pi / 8, 2 * math.pi / 60], dtype=F64))
opt = torch.optim.Adam([inv_freq], lr=0.005)
for step in range(301):
    opt.zero_grad()
    loss = ((peal_torch.attention(q, k, v, t, t, inv_freq, causal=True) - target) ** 2).mean()
    loss.backward()
    opt.step()
    if step % 50 == 0:
        wl = (2 * math.pi / inv_freq.detach()).tolist()
        print(f"step {step:3d}  loss {loss.item():.3e}  wavelengths {wl[0]:7.3f} {wl[1]:7.3f}")

learned = 2 * math.pi / inv_freq.detach()
wanted = 2 * math.pi / teacher
print("teacher wavelengths", [round(x, 3) for x in wanted.tolist()])
print("learned wavelengths", [round(x, 3) for x in learned.tolist()])
sys.exit(0 if torch.allclose(learned, wanted, rtol=0.01) else 1)
