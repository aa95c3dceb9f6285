"""Learn 2-D RoPE frequencies (RoPE-Mixed) with peal_torch: a student recovers a teacher's.

Image patches sit at 2-D points p = (x, y) (a 10 x 10 grid, each patch jittered: positions are
real numbers). A teacher attention layer with fixed queries, keys and values encodes them with
RoPE-Mixed (Heo et al., 2024): rotation pair i turns by omega_i . p, a frequency vector per pair
(axes=2; inv_freq is [2, pairs]). A student with the same q, k, v but other starting
frequencies sees only the teacher's outputs and learns the frequency vectors by gradient
descent through peal_torch.attention over the points: the gradient with respect to inv_freq
(and, were they learned, the points) is peal's fused backward over N-D points.

Printed per pair: the wavelength 2 pi / |omega_i| (in patches) and the direction of omega_i.

Run (after building the module: cmake --build build --target _peal_torch):
    PYTHONPATH=python:build/python /usr/bin/python3 python/examples/learn_2d_frequencies.py
Exits non-zero unless every learned frequency vector is within 1 % of the teacher's.
"""

import math
import sys

import torch

import peal_torch

torch.manual_seed(0)
F64 = torch.float64
side, heads, head_dim = 10, 4, 8
n = side * side


def vec(wavelength, degrees):
    """A frequency vector: `wavelength` patches along the direction `degrees`."""
    a = math.radians(degrees)
    return [2 * math.pi / wavelength * math.cos(a), 2 * math.pi / wavelength * math.sin(a)]


# Two pairs: a wavelength of 5 patches along 30 degrees, 16 patches along 120 degrees.
teacher = torch.tensor([vec(5, 30), vec(16, 120)], dtype=F64).T  # [2 axes, 2 pairs]
grid = torch.stack(torch.meshgrid(torch.arange(side, dtype=F64), torch.arange(side, dtype=F64),
                                  indexing="ij"), -1).reshape(n, 2)
p = grid + 0.3 * torch.rand(n, 2, dtype=F64)  # jittered patch centres
q = torch.randn(n, heads, head_dim, dtype=F64)
k = torch.randn(n, heads, head_dim, dtype=F64)
v = torch.randn(n, heads, head_dim, dtype=F64)
with torch.no_grad():
    target = peal_torch.attention(q, k, v, p, p, teacher, axes=2)


def describe(omega):
    """(wavelength in patches, direction in degrees) of each pair's frequency vector."""
    w = omega.detach()
    return [(2 * math.pi / w[:, i].norm().item(), math.degrees(math.atan2(w[1, i], w[0, i])))
            for i in range(w.shape[1])]


inv_freq = torch.nn.Parameter(torch.tensor([vec(4.5, 35), vec(14, 110)], dtype=F64).T)
opt = torch.optim.Adam([inv_freq], lr=0.005)
for step in range(201):
    opt.zero_grad()
    loss = ((peal_torch.attention(q, k, v, p, p, inv_freq, axes=2) - target) ** 2).mean()
    loss.backward()
    opt.step()
    if step % 25 == 0:
        pairs = "  ".join(f"{wl:6.3f} @ {deg:7.2f} deg" for wl, deg in describe(inv_freq))
        print(f"step {step:3d}  loss {loss.item():.3e}  {pairs}")

print("teacher", [(round(wl, 3), round(deg, 2)) for wl, deg in describe(teacher)])
print("learned", [(round(wl, 3), round(deg, 2)) for wl, deg in describe(inv_freq)])
error = ((inv_freq.detach() - teacher).norm(dim=0) / teacher.norm(dim=0)).max().item()
print(f"largest relative error of a frequency vector: {error:.2e}")
sys.exit(0 if error < 0.01 else 1)
