#!/usr/bin/env python3
"""Quality against speed for a text diffusion model: continuations of held-out prompts, generated with
several step counts, judged by an AR model's likelihood (bits per byte of the continuation given its
prompt; lower is more fluent under the judge). Standard library only; drives the canvas binary.

usage: scripts/research/text_quality.py --canvas build/canvas --model models/text-masked.gguf \
           --judge models/text-ar.gguf [--steps 64,32,16,8,4] [--prompts 20] [-n 64] [-t 2]
"""
import argparse
import json
import statistics
import subprocess


def held_out_prompts(count, length=24):
    # Verses from the end of the Bible (Revelation), which the text models' validation split holds out.
    out = subprocess.run(["bible", "-f", "Rev1:1-Rev22:21"], capture_output=True, text=True, check=True).stdout
    verses = [line.split(" ", 1)[1] for line in out.splitlines() if " " in line]
    step = max(1, len(verses) // count)
    return [v[:length] for v in verses[::step][:count]]


def run_json(cmd):
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"command failed: {' '.join(cmd)}\n{res.stderr}")
    return json.loads(res.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--canvas", default="build/canvas")
    ap.add_argument("--model", required=True, help="the diffusion model")
    ap.add_argument("--judge", required=True, help="an AR model that scores the continuations")
    ap.add_argument("--steps", default="64,32,16,8,4")
    ap.add_argument("--threshold", default="", help="also Fast-dLLM thresholds, e.g. 0.9,0.7")
    ap.add_argument("--freeze", default="",
                    help="also compute-aware decoding at the first --steps value: refresh periods, e.g. 0,8 "
                         "(0: freeze without periodic refresh)")
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--block-length", type=int, default=32)
    ap.add_argument("-t", "--threads", type=int, default=2)
    args = ap.parse_args()
    prompts = held_out_prompts(args.prompts)

    settings = [("diffusion", ["--steps", s], f"steps {s}") for s in args.steps.split(",") if s]
    settings += [("diffusion", ["--threshold", t], f"threshold {t}") for t in args.threshold.split(",") if t]
    first_steps = args.steps.split(",")[0]
    settings += [("diffusion", ["--steps", first_steps, "--freeze", "--freeze-refresh", r],
                  f"steps {first_steps}, freeze" + (f" (refresh every {r})" if r != "0" else ""))
                 for r in args.freeze.split(",") if r]
    settings.append(("ar", [], "AR (the judge itself, greedy)"))
    print(f"{len(prompts)} held-out prompts, {args.n} new bytes each, greedy (temp 0), "
          f"block length {args.block_length}; judge: {args.judge}")
    print("| decoding | passes per sample | bytes per pass | rows per sample | judge bits/byte (mean) | "
          "judge bits/byte (median) | decode ms (median) |")
    print("|---|---|---|---|---|---|---|")
    for mode, extra, label in settings:
        model = args.model if mode == "diffusion" else args.judge
        bpb, passes, rows, ms = [], [], [], []
        for p in prompts:
            gen = run_json([args.canvas, "generate", "-m", model, "-p", p, "-n", str(args.n), "--mode", mode,
                            "--block-length", str(args.block_length), "-t", str(args.threads), "--json"] + extra)
            text = gen["text"]
            passes.append(gen["passes"])
            rows.append(gen.get("rows_computed", 0))
            ms.append(gen["decode_ms"] + gen["prompt_ms"])
            if not text:
                continue
            score = run_json([args.canvas, "score", "-m", args.judge, "--context", p, "-p", text, "-t", str(args.threads)])
            bpb.append(score["bits_per_byte"])
        mean_passes = statistics.mean(passes)
        rows_text = f"{statistics.mean(rows):.0f}" if mode == "diffusion" else "-"
        print(f"| {label} | {mean_passes:.1f} | {args.n / mean_passes:.2f} | {rows_text} | "
              f"{statistics.mean(bpb):.3f} | "
              f"{statistics.median(bpb):.3f} | {statistics.median(ms):.1f} |", flush=True)


if __name__ == "__main__":
    main()
