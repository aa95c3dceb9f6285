#!/usr/bin/env python3
"""Markdown tables from a bench_scores JSON file (--benchmark_out=F --benchmark_out_format=json).

For every paired/<encoding>/<n>/<d>/<threads> benchmark: vs_gemm (median of the paired
GEMM-time / fused-time ratios) and, for 2 threads, the fused speed-up over 1 thread.
Usage: python3 bench/paired_table.py scores.json
"""
import json
import sys
from collections import defaultdict

rows = defaultdict(dict)  # encoding -> (n, d, t) -> (vs_gemm, GFLOPS)
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    parts = b["name"].split("/")
    if parts[0] != "paired" or b.get("run_type") == "aggregate":
        continue
    enc, n, d, t = parts[1], int(parts[2]), int(parts[3]), int(parts[4])
    rows[enc][(n, d, t)] = (b["vs_gemm"], b["GFLOPS"])

shapes = sorted({k[:2] for r in rows.values() for k in r})
head = " | ".join(f"n={n}, d={d}" for n, d in shapes)
for t in (1, 2):
    print(f"\n{t} thread{'s' if t > 1 else ''}: vs_gemm" + (" (speed-up over 1 thread)" if t > 1 else ""))
    print(f"\n| encoding | {head} |\n|---|" + "---:|" * len(shapes))
    for enc, r in rows.items():
        cells = []
        for n, d in shapes:
            if (n, d, t) not in r:
                cells.append("")
                continue
            v, g = r[(n, d, t)]
            s = f"{v:.2f}"
            if t > 1 and (n, d, 1) in r:
                s += f" ({g / r[(n, d, 1)][1]:.2f}x)"
            cells.append(s)
        print(f"| {enc} | " + " | ".join(cells) + " |")
