#!/usr/bin/env python3
"""Plots a `canvas bench --json` report: decode tokens/s against tokens fixed per pass.

Usage: /usr/bin/python3 scripts/plot_bench.py REPORT.json OUT.png

Each diffusion grid point is one marker (one colour per cache kind), labelled with its block length
and steps or threshold; each thread count's AR decode speed is a horizontal dashed line.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CACHE_COLOURS = {"none": "tab:red", "prefix": "tab:blue", "dual": "tab:green"}


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot_bench.py REPORT.json OUT.png")
    with open(sys.argv[1]) as f:
        report = json.load(f)
    rows = report["rows"]
    fig, ax = plt.subplots(figsize=(8, 5))
    seen = set()
    for row in rows:
        if row["mode"] != "diffusion" or row["decode_tokens_per_s"] is None:
            continue
        cache = row.get("cache", "?")
        label = f"diffusion, cache {cache}" if cache not in seen else None
        seen.add(cache)
        ax.scatter(row["tokens_per_pass"], row["decode_tokens_per_s"], color=CACHE_COLOURS.get(cache, "black"),
                   label=label, zorder=3)
        tag = f"B={row['block_length']}"
        tag += f" thr={row['threshold']:.2f}" if "threshold" in row else f" s={row['steps']}"
        if len({r["threads"] for r in rows}) > 1:
            tag += f" t={row['threads']}"
        ax.annotate(tag, (row["tokens_per_pass"], row["decode_tokens_per_s"]), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")
    for row in rows:
        if row["mode"] == "ar" and row["decode_tokens_per_s"] is not None:
            ax.axhline(row["decode_tokens_per_s"], linestyle="--", color="gray",
                       label=f"AR ({row['threads']} threads)")
    model = report.get("model", {})
    machine = report.get("machine", {})
    ax.set_title(f"{model.get('source', '?')} ({model.get('weight_type', '?')}, {model.get('layers', '?')} layers)"
                 f" on {machine.get('cpu', '?')}", fontsize=9)
    ax.set_xlabel("tokens fixed per pass")
    ax.set_ylabel("decode tokens/s")
    ax.set_ylim(bottom=0)
    # From 0, so that one token per pass (AR's rate) sits visibly inside the axis.
    most = max([r["tokens_per_pass"] or 1 for r in rows] + [1])
    ax.set_xlim(0, most * 1.15)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)


if __name__ == "__main__":
    main()
