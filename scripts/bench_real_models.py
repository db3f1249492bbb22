#!/usr/bin/env python3
"""canvas against llama.cpp's llama-bench on the same GGUF files (models/real by default), in one run, the two
alternating for --rounds rounds: prompt tokens/s (-p 128), AR decode tokens/s (-n 64), and the time of a causal
pass of 1, 5 and 30 rows (a prompt pass of that many tokens: what a draft-and-verify cycle's verify pass costs)
in AR steps of the same engine. Medians over every measured repeat; the streaming-read roof and the decode's
fraction of it come from canvas bench in the same run.

Usage: scripts/bench_real_models.py --llama-bench PATH [--threads 2] [--rounds 3] [--json FILE] [MODEL.gguf ...]
llama-bench: built from the llama.cpp that llama-cpp-python's source carries (scripts/serve_vs_llama.sh's
header says how). Both tools time random-token prompts and decode steps themselves.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PASS_ROWS = (1, 5, 30)


def canvas_bench(binary, model, threads, n_prompt, n_gen, repeats, roofs):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([binary, "bench", "-m", str(model), "--modes", "ar", "-p", str(n_prompt), "-n", str(n_gen),
                        "-t", str(threads), "--repeats", str(repeats), "--json", f.name,
                        *([] if roofs else ["--no-roofs"])], check=True, capture_output=True)
        report = json.load(open(f.name))
    row = report["rows"][0]
    read = None
    if roofs:
        read = report["roofs"][0].get("stream_read_gbs")
    return row, read


def llama_bench(binary, model, threads, args, repeats):
    out = subprocess.run([binary, "-m", str(model), "-t", str(threads), "-r", str(repeats), "-o", "json", *args],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--binary", default=str(ROOT / "build/canvas"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3, help="repeats inside each tool's run")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    models = args.models or sorted((ROOT / "models/real").glob("*.gguf"))
    if not models:
        sys.exit("no models: run scripts/get-models.sh")
    report = []
    for model in models:
        s = {"canvas": {}, "llama.cpp": {}}

        def add(engine, key, values):
            s[engine].setdefault(key, []).extend(values)

        read_gbs = []
        for r in range(args.rounds):
            row, read = canvas_bench(args.binary, model, args.threads, 128, 64, args.repeats, roofs=(r == 0))
            if read:
                read_gbs.append(read)
            add("canvas", "prompt_tps", [row["prompt_tokens_per_s"]])
            add("canvas", "decode_tps", [row["decode_tokens_per_s"]])
            add("canvas", "decode_gbs", [row["gbs"]])
            for k in PASS_ROWS:
                row_k, _ = canvas_bench(args.binary, model, args.threads, k, 2, args.repeats, roofs=False)
                add("canvas", f"pass_{k}_ms", [k / row_k["prompt_tokens_per_s"] * 1e3])
            for t in llama_bench(args.llama_bench, model, args.threads, ["-p", "128", "-n", "64"], args.repeats):
                key = "prompt_tps" if t["n_prompt"] else "decode_tps"
                add("llama.cpp", key, t["samples_ts"])
            for t in llama_bench(args.llama_bench, model, args.threads,
                                 ["-p", ",".join(map(str, PASS_ROWS)), "-n", "0"], args.repeats):
                add("llama.cpp", f"pass_{t['n_prompt']}_ms", [t["n_prompt"] / ts * 1e3 for ts in t["samples_ts"]])
        med = {e: {k: statistics.median(v) for k, v in d.items()} for e, d in s.items()}
        c, l = med["canvas"], med["llama.cpp"]
        entry = {"model": model.name, "threads": args.threads, "rounds": args.rounds, "repeats": args.repeats,
                 "stream_read_gbs": read_gbs[0] if read_gbs else None, "medians": med}
        report.append(entry)
        ar_c, ar_l = 1e3 / c["decode_tps"], 1e3 / l["decode_tps"]
        print(f"{model.name} (-t {args.threads}; medians of {args.rounds} rounds x {args.repeats} repeats; "
              f"stream read {entry['stream_read_gbs'] or float('nan'):.1f} GB/s, canvas decode reads "
              f"{c['decode_gbs']:.1f} GB/s)")
        print(f"  prompt tokens/s (128)   canvas {c['prompt_tps']:8.1f}  llama.cpp {l['prompt_tps']:8.1f}  "
              f"ratio {c['prompt_tps'] / l['prompt_tps']:.2f}")
        print(f"  decode tokens/s (64)    canvas {c['decode_tps']:8.1f}  llama.cpp {l['decode_tps']:8.1f}  "
              f"ratio {c['decode_tps'] / l['decode_tps']:.2f}")
        for k in PASS_ROWS:
            print(f"  pass of {k:2d} rows (ms)   canvas {c[f'pass_{k}_ms']:7.2f} = {c[f'pass_{k}_ms'] / ar_c:5.2f} AR steps"
                  f"  llama.cpp {l[f'pass_{k}_ms']:7.2f} = {l[f'pass_{k}_ms'] / ar_l:5.2f} AR steps")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
