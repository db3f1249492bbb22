#!/usr/bin/python3
"""Tables (markdown) and a plot of scripts/serve_bench.sh's results.

  /usr/bin/python3 scripts/plot_serving.py runs/serve-bench docs/img/serving.png
"""
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = ["diffusion-batched", "diffusion-single", "ar-batched", "ar-single", "diffusion-threshold-batched",
         "auto-threshold-batched"]


def main():
    src, png = sys.argv[1], sys.argv[2]
    runs = {}
    for path in glob.glob(os.path.join(src, "*.json")):
        data = json.load(open(path))
        runs[data["label"]] = data
    labels = [l for l in ORDER if l in runs] + sorted(l for l in runs if l not in ORDER)
    print("| configuration | clients | tokens/s | requests/s | p50 ms | p95 ms | passes/request | modes |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for label in labels:
        for lv in runs[label]["levels"]:
            modes = ", ".join(f"{k} {v}" for k, v in lv["modes"].items())
            print(f"| {label} | {lv['concurrency']} | {lv['tokens_per_s']:.1f} | {lv['requests_per_s']:.2f} | "
                  f"{lv['p50_ms']:.0f} | {lv['p95_ms']:.0f} | {lv['mean_forward_passes']:.1f} | {modes} |")
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for label in labels:
        levels = runs[label]["levels"]
        x = [lv["concurrency"] for lv in levels]
        style = "--" if "single" in label else "-"
        a.plot(x, [lv["tokens_per_s"] for lv in levels], style, marker="o", label=label)
        b.plot(x, [lv["p50_ms"] / 1000 for lv in levels], style, marker="o", label=label)
    for ax, title in ((a, "aggregate throughput (completion tokens/s)"), (b, "p50 request latency (s)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks([1, 4, 16, 64])
        ax.set_xticklabels(["1", "4", "16", "64"])
        ax.set_xlabel("concurrent clients")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    b.set_yscale("log")
    a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
