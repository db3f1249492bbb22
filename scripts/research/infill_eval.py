#!/usr/bin/python3
"""Infilling quality on held-out text: hide three words in the middle of a held-out verse (Revelation, which
the shipped text models' validation split holds out), fill them, and score the fill by exact word match and
under an AR judge (canvas score with models/text-ar.gguf: bits per byte of fill + suffix given the prefix).

usage: /usr/bin/python3 scripts/research/infill_eval.py [--canvas build/canvas] [--verses 100] [--out runs/infill.jsonl]
Prints a markdown table: per method, exact word match, whole-span match, judge bits/byte, passes."""
import argparse, json, os, subprocess

PREFIX_BYTES, SUFFIX_BYTES, SPAN_WORDS = 48, 40, 3


def cases(count):
    out = subprocess.run(["bible", "-f", "Rev1:1-Rev22:21"], capture_output=True, text=True, check=True).stdout
    verses = [line.split(" ", 1)[1] for line in out.splitlines() if " " in line]
    verses = [v for v in verses if len(v.split(" ")) >= 12]
    step = max(len(verses) // count, 1)
    result = []
    for v in verses[::step][:count]:
        words = v.split(" ")
        mid = len(words) // 2 - 1
        prefix = " ".join(words[:mid]) + " "
        span = " ".join(words[mid:mid + SPAN_WORDS])
        suffix = " " + " ".join(words[mid + SPAN_WORDS:])
        while len(prefix) > PREFIX_BYTES:  # keep whole words
            prefix = prefix.split(" ", 1)[1]
        if len(suffix) > SUFFIX_BYTES:
            suffix = suffix[:SUFFIX_BYTES].rsplit(" ", 1)[0]
        result.append({"prefix": prefix, "span": span, "suffix": suffix})
    return result


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("failed: %s\n%s" % (" ".join(cmd), p.stderr))
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--canvas", default="build/canvas")
    ap.add_argument("--verses", type=int, default=100)
    ap.add_argument("--threads", default="1")
    ap.add_argument("--out", default="runs/infill.jsonl")
    args = ap.parse_args()
    cv, t = args.canvas, ["-t", args.threads]
    rows = []
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as out:
        for c in cases(args.verses):
            n = len(c["span"].encode())
            fills = {}
            r = json.loads(run([cv, "generate", "-m", "models/text-masked.gguf", "-p", c["prefix"], "--suffix",
                                c["suffix"], "-n", str(n), "--json"] + t))
            fills["masked diffusion, prefix + suffix (infill)"] = (r["fills"][0], r["passes"])
            r = json.loads(run([cv, "generate", "-m", "models/text-masked.gguf", "-p", c["prefix"], "-n", str(n),
                                "--block-length", str(n), "--json"] + t))
            fills["masked diffusion, prefix only"] = (r["text"], r["passes"])
            r = json.loads(run([cv, "generate", "-m", "models/text-ar.gguf", "-p", c["prefix"], "-n", str(n), "--json"] + t))
            fills["AR twin, prefix only"] = (r["text"], r["passes"])
            fills["original span (reference)"] = (c["span"], 0)
            for method, (fill, passes) in fills.items():
                want, got = c["span"].split(" "), fill.split(" ")
                match = sum(1 for i, w in enumerate(want) if i < len(got) and got[i] == w)
                judge = json.loads(run([cv, "score", "-m", "models/text-ar.gguf", "-p", fill + c["suffix"], "--context",
                                        c["prefix"]] + t))
                row = {"method": method, "prefix": c["prefix"], "span": c["span"], "suffix": c["suffix"], "fill": fill,
                       "words_matched": match, "words": len(want), "exact": fill == c["span"],
                       "judge_bits_per_byte": judge["bits_per_byte"], "passes": passes}
                rows.append(row)
                out.write(json.dumps(row) + "\n")
                out.flush()
    methods = list(dict.fromkeys(r["method"] for r in rows))
    print("| method | spans | words matched | whole span exact | judge bits/byte (fill + suffix) | passes |")
    print("|---|---|---|---|---|---|")
    for m in methods:
        rs = [r for r in rows if r["method"] == m]
        words = sum(r["words"] for r in rs)
        print("| %s | %d | %.1f%% | %.1f%% | %.3f | %.1f |" % (
            m, len(rs), 100.0 * sum(r["words_matched"] for r in rs) / words, 100.0 * sum(r["exact"] for r in rs) / len(rs),
            sum(r["judge_bits_per_byte"] for r in rs) / len(rs), sum(r["passes"] for r in rs) / len(rs)))


if __name__ == "__main__":
    main()
