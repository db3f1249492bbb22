#!/usr/bin/python3
"""The routing check of docs/serving.md: medians over rounds of scripts/serve_bench.sh's JSON files.

  ROUNDS=5 scripts/serve_bench.sh runs/route 256 32 ar-batched auto-batched
  scripts/serve_bench.sh runs/route 32 32 diffusion-batched
  /usr/bin/python3 scripts/research/routing_table.py runs/route

Reads NAME-rK.json (or NAME.json, one round) for the fixed modes (ar-batched, diffusion-batched) and auto
(auto-batched), and prints per concurrency level the median tokens/s and p50 latency of each, auto's
throughput against the better fixed mode, and whether auto meets the target: throughput >= 0.95 x the
better fixed mode's at every level, and at the lowest level (one client) a p50 latency no more than
5% above the lower of the fixed modes' p50s. Exit status 1 when either is missed.
"""
import glob
import json
import os
import re
import statistics
import sys


def load(src, name):
    rounds = []
    for path in sorted(glob.glob(os.path.join(src, name + "*.json"))):
        if re.fullmatch(re.escape(name) + r"(-r\d+)?\.json", os.path.basename(path)):
            rounds.append(json.load(open(path)))
    by_level = {}
    for run in rounds:
        for lv in run["levels"]:
            by_level.setdefault(lv["concurrency"], []).append(lv)
    return by_level


def median(levels, key):
    return statistics.median(lv[key] for lv in levels)


def main():
    src = sys.argv[1]
    ar, diff, auto = load(src, "ar-batched"), load(src, "diffusion-batched"), load(src, "auto-batched")
    if not ar or not auto:
        sys.exit("need ar-batched and auto-batched results in " + src)
    print("| clients | AR tokens/s | diffusion tokens/s | auto tokens/s | auto / better | AR p50 ms | "
          "diffusion p50 ms | auto p50 ms | auto's modes | rounds |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    ok = True
    lowest = min(ar)
    for c in sorted(ar):
        a_tps, u_tps = median(ar[c], "tokens_per_s"), median(auto[c], "tokens_per_s")
        d_tps = median(diff[c], "tokens_per_s") if c in diff else None
        best = max(a_tps, d_tps or 0)
        ratio = u_tps / best
        ok &= ratio >= 0.95
        modes = {}
        for lv in auto[c]:
            for k, v in lv["modes"].items():
                modes[k] = modes.get(k, 0) + v
        if c == lowest:
            better_p50 = min(median(m[c], "p50_ms") for m in (ar, diff) if c in m)
            ok &= median(auto[c], "p50_ms") <= 1.05 * better_p50
        d_p50 = f"{median(diff[c], 'p50_ms'):.0f}" if c in diff else "-"
        d_txt = f"{d_tps:.1f}" if d_tps is not None else "-"
        print(f"| {c} | {a_tps:.1f} | {d_txt} | {u_tps:.1f} | {ratio:.3f} | {median(ar[c], 'p50_ms'):.1f} | "
              f"{d_p50} | {median(auto[c], 'p50_ms'):.1f} | "
              + ", ".join(f"{k} {v}" for k, v in sorted(modes.items())) + f" | {len(auto[c])} |")
    print("target met" if ok else "target missed at some level")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
