#!/usr/bin/env python3
"""Markdown tables from a bench_attention JSON file (--benchmark_out=F --benchmark_out_format=json).

vs_<x> is the median of the per-iteration ratios t_x / t_peal (bench/bench_attention.cpp):
> 1 means peal is faster; for decode, vs_memcpy is peal's fraction of the memcpy bandwidth.
Usage: python3 bench/attention_table.py attention.json
"""
import json
import sys
from collections import defaultdict

groups = defaultdict(list)  # family -> [(args, counters)]
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("run_type") == "aggregate":
        continue
    parts = [p for p in b["name"].split("/") if ":" not in p and p != "manual_time"
             and p != "real_time"]
    groups[parts[0]].append((parts[1:], b))


def table(title, header, rows):
    print(f"\n{title}\n\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(r) + " |")


def f1(x):
    return "" if x is None else f"{x:.1f}"


def f2(x):
    return "" if x is None else f"{x:.2f}"


def both(b, name, unit):
    """median rate (fastest run's rate)"""
    pre = "" if name == "" else name + "_"
    if pre + unit not in b:
        return ""
    return f"{b[pre + unit]:.1f} ({b.get(pre + 'best_' + unit, float('nan')):.1f})"


G, B = "GFLOPS", "GBps"
table("prefill: useful GFLOP/s, median (fastest run); vs_x = median of t_x / t_peal "
      "(causal rows: vs_noncausal 2 = the masked half costs nothing)",
      ["case", "n", "threads", "heads", "peal", "unfused", "2 GEMMs", "vs_unfused", "vs_gemms",
       "vs_noncausal"],
      [[a[0], a[1], a[2], a[3], both(b, "", G), both(b, "unfused", G), both(b, "gemms", G),
        f2(b["vs_unfused"]), f2(b["vs_gemms"]), f2(b.get("vs_noncausal"))]
       for a, b in groups["prefill"]])
table("prefill, 2 threads vs 1 (speed-up: median of t_1thread / t_2threads)",
      ["case", "n", "2 threads GFLOP/s", "1 thread GFLOP/s", "speed-up"],
      [[a[0], a[1], both(b, "", G), both(b, "1thread", G), f2(b["vs_1thread"])]
       for a, b in groups["threads"]])
table("decode: GB/s of K + V, median (fastest run); vs_memcpy = peal's fraction of memcpy",
      ["mode", "threads", "peal", "memcpy", "read", "plain loop", "vs_memcpy", "vs_read",
       "vs_loop"],
      [[a[0], a[1], both(b, "", B), both(b, "memcpy", B), both(b, "read", B),
        both(b, "loop", B), f2(b["vs_memcpy"]), f2(b["vs_read"]), f2(b.get("vs_loop"))]
       for a, b in groups["decode"]])
table("fused scores, one head: GFLOP/s (2 n^2 d), median (fastest run)",
      ["encoding", "n", "threads", "peal", "GEMM", "unfused", "vs_gemm", "vs_unfused"],
      [[a[0], a[1], a[2], both(b, "", G), both(b, "gemm", G), both(b, "unfused", G),
        f2(b["vs_gemm"]), f2(b["vs_unfused"])] for a, b in groups["scores1h"]])
table("FMA ceiling", ["threads", "GFLOP/s"],
      [[a[1], f1(b["GFLOPS"])] for a, b in groups["peak"]])
