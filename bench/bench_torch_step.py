"""One training step (forward + backward, frequencies learned) of peal_torch.attention against
PyTorch's autograd of the plain formula (HF rotate_half RoPE, matmul, softmax, matmul), paired
in one process (results and the command: bench/README.md, "PyTorch op").

Shape (issue 22 §4): f32, 4 heads, d = 128, one thread, RoPE with learnable inv_freq, n in
{512, 2048}, non-causal and causal. Each round runs both contenders once, in alternating
order (four times as many rounds at n = 512); the table gives the median time of each (forward and backward apart) and the median of
the per-round ratios plain / peal (> 1: peal faster), plus the peak resident memory one step adds (measured in a fresh process per contender).

    PYTHONPATH=python:build/python /usr/bin/python3 bench/bench_torch_step.py [rounds]
"""

import math
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python", "tests"))
import peal_torch  # noqa: E402
import reference  # noqa: E402

torch.set_num_threads(1)
H, D = 4, 128


def inputs(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(n, H, D, generator=g).requires_grad_() for _ in range(3))
    t = torch.arange(n, dtype=torch.float64)
    inv = (10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)).float().requires_grad_()
    return q, k, v, t, inv


def step(fn, n, causal, args):
    q, k, v, t, inv = args
    for x in (q, k, v, inv):
        x.grad = None
    t0 = time.perf_counter()
    out = fn(q, k, v, t, t, inv, causal=causal)
    t1 = time.perf_counter()
    out.backward(torch.ones_like(out))
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def plain(q, k, v, tq, tk, inv, causal):
    """HF's eager attention: [n, H, d] viewed as [H, n, d], rotate_half RoPE from cos/sin of
    t * inv_freq in float32, q k^T, a causal mask added, softmax, p v."""
    n = q.shape[0]
    q, k, v = (x.transpose(0, 1) for x in (q, k, v))
    freqs = tq.float()[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    q = q * cos + reference.rotate_half(q) * sin
    k = k * cos + reference.rotate_half(k) * sin
    s = torch.matmul(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    if causal:
        s = s + torch.full((n, n), -math.inf).triu(1)
    p = torch.softmax(s, dim=-1)
    return torch.matmul(p, v).transpose(0, 1)


def peak_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def memory(which, n, causal):
    """Peak RSS growth (MB) of one step in a fresh process: VmHWM of /proc/self/status (fresh
    at exec; ru_maxrss is not, it keeps the parent's peak on Linux)."""
    code = ("import bench_torch_step as b;"
            f"a=b.inputs({n}); r0=b.peak_kb();"
            f"b.step({'b.peal_torch.attention' if which == 'peal' else 'b.plain'}, {n}, {causal}, a);"
            "print((b.peak_kb() - r0) / 1024)")
    here = os.path.dirname(os.path.abspath(__file__))
    path = [here, os.path.join(here, "..", "python", "tests"), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return float(out.stdout.strip())


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, rounds {rounds}")
    print("| n | mask | peal fwd / bwd (ms) | plain fwd / bwd (ms) | plain / peal (step) | "
          "extra memory peal / plain (MB) |")
    print("|---|---|---|---|---|---|")
    for n in (512, 2048):
        for causal in (False, True):
            args = inputs(n)
            step(peal_torch.attention, n, causal, args)  # warm up both
            step(plain, n, causal, args)
            pf, pb, rf, rb, ratio = [], [], [], [], []
            for r in range(rounds * (4 if n < 2048 else 1)):  # the short steps: more rounds
                order = [("peal", peal_torch.attention), ("plain", plain)]
                if r % 2:
                    order.reverse()
                got = {name: step(fn, n, causal, args) for name, fn in order}
                pf.append(got["peal"][0]), pb.append(got["peal"][1])
                rf.append(got["plain"][0]), rb.append(got["plain"][1])
                ratio.append(sum(got["plain"]) / sum(got["peal"]))
            m = statistics.median
            mem_p, mem_r = memory("peal", n, causal), memory("plain", n, causal)
            print(f"| {n} | {'causal' if causal else 'none'} | {1e3 * m(pf):.1f} / {1e3 * m(pb):.1f} | "
                  f"{1e3 * m(rf):.1f} / {1e3 * m(rb):.1f} | {m(ratio):.2f}x | {mem_p:.0f} / {mem_r:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
