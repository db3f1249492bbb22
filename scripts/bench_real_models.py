#!/usr/bin/env python3
"""canvas against llama.cpp (llama-cpp-python, compiled for this CPU) on the real checkpoints in models/real, in
one run, alternating the two engines on every repeat: prompt tokens/s (a prompt of about 128 tokens), AR decode
tokens/s (64 tokens after it) and the cost of a causal pass of 1, 5 and 30 rows after a prefix of about 64 (what a
draft-and-verify cycle costs) against one AR step. Medians over --repeats.

Usage: .venv/bin/python scripts/bench_real_models.py [--threads 2] [--repeats 5] [--json FILE] [MODEL.gguf ...]
canvas's times are those it reports itself (--json: prompt_ms, decode_ms; a k-row pass is the prompt pass of a
request whose prompt is the prefix plus k tokens minus that of the prefix alone); llama.cpp's are wall
clock around llama.cpp's eval calls (one Python call per step, ~0.1 ms of it Python).
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from llama_cpp import Llama

ROOT = Path(__file__).resolve().parent.parent
TEXT = ("In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
        "darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. And God "
        "said, Let there be light: and there was light. And God saw the light, that it was good: and God divided the "
        "light from the darkness. And God called the light Day, and the darkness he called Night. And the evening "
        "and the morning were the first day. And God said, Let there be a firmament in the midst of the waters, and "
        "let it divide the waters from the waters.")


def canvas(binary, *args):
    return subprocess.run([binary, *args], check=True, capture_output=True, text=True).stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--binary", default=str(ROOT / "build/canvas"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    models = args.models or sorted((ROOT / "models/real").glob("*.gguf"))
    if not models:
        sys.exit("no models: run scripts/get-models.sh")
    report = []
    for model in models:
        llm = Llama(model_path=str(model), n_ctx=512, n_batch=512, n_threads=args.threads,
                    n_threads_batch=args.threads, verbose=False)
        ids = json.loads(canvas(args.binary, "tokenize", "-m", str(model), "-p", TEXT, "--json"))["ids"]
        assert len(ids) >= 128, f"{model}: the text gives only {len(ids)} tokens"
        # canvas generate adds BOS where the vocabulary says so; llama.cpp is given the same ids.
        bos = [int(llm.metadata["tokenizer.ggml.bos_token_id"])] \
            if llm.metadata.get("tokenizer.ggml.add_bos_token") == "true" else []
        # Cuts of the text whose ids canvas tokenizes back to the same ids (not inside a word): a 128-token
        # prompt, and a prefix of about 64 tokens that stays a clean cut after 1, 5 and 30 more tokens.
        n_prompt = next(m for m in range(128, 0, -1) if round_trips(args.binary, model, ids[:m]))
        base = next(b for b in range(64, 0, -1)
                    if all(round_trips(args.binary, model, ids[:b + k]) for k in (0, 1, 5, 30)))
        prompt = bos + ids[:n_prompt]
        rows = {"canvas": {}, "llama.cpp": {}}

        def add(engine, key, value):
            rows[engine].setdefault(key, []).append(value)

        for r in range(args.repeats):
            # canvas: its own timings of the prompt pass and the decode steps.
            out = json.loads(canvas(args.binary, "generate", "-m", str(model), "-p",
                                    decode_prefix(args.binary, model, ids[:n_prompt]), "-n", "64", "--mode", "ar", "--temp", "0",
                                    "--json", "-t", str(args.threads)))
            add("canvas", "prompt_tps", out["prompt_tokens"] / (out["prompt_ms"] / 1e3))
            add("canvas", "decode_tps", out["new_tokens"] / (out["decode_ms"] / 1e3))
            for k in (1, 5, 30):
                alone = json.loads(canvas(args.binary, "generate", "-m", str(model), "-p",
                                         decode_prefix(args.binary, model, ids[:base]), "-n", "1", "--mode", "ar",
                                         "--json", "-t", str(args.threads)))
                more = json.loads(canvas(args.binary, "generate", "-m", str(model), "-p",
                                         decode_prefix(args.binary, model, ids[:base + k]), "-n", "1", "--mode", "ar",
                                         "--json", "-t", str(args.threads)))
                add("canvas", f"pass_{k}_ms", more["prompt_ms"] - alone["prompt_ms"])
            # llama.cpp: wall clock around its evaluation calls.
            llm.reset()
            t = time.perf_counter()
            llm.eval(prompt)  # the same ids as canvas's prompt pass (BOS included where canvas adds it)
            add("llama.cpp", "prompt_tps", len(prompt) / (time.perf_counter() - t))
            t = time.perf_counter()
            token = prompt[-1]
            for _ in range(64):
                llm.eval([token])
            add("llama.cpp", "decode_tps", 64 / (time.perf_counter() - t))
            for k in (1, 5, 30):
                llm.reset()
                llm.eval(bos + ids[:base])
                t = time.perf_counter()
                llm.eval(ids[base:base + k])
                add("llama.cpp", f"pass_{k}_ms", (time.perf_counter() - t) * 1e3)
        med = {e: {k: statistics.median(v) for k, v in d.items()} for e, d in rows.items()}
        entry = {"model": model.name, "threads": args.threads, "repeats": args.repeats, "prompt_tokens": len(prompt),
                 "pass_prefix_tokens": len(bos) + base, "medians": med}
        report.append(entry)
        c, l = med["canvas"], med["llama.cpp"]
        ar_c, ar_l = 1e3 / c["decode_tps"], 1e3 / l["decode_tps"]
        print(f"{model.name} (-t {args.threads}, medians of {args.repeats})")
        print(f"  prompt tokens/s ({len(prompt)})  canvas {c['prompt_tps']:8.1f}  llama.cpp {l['prompt_tps']:8.1f}  "
              f"ratio {c['prompt_tps'] / l['prompt_tps']:.2f}")
        print(f"  decode tokens/s (64)    canvas {c['decode_tps']:8.1f}  llama.cpp {l['decode_tps']:8.1f}  "
              f"ratio {c['decode_tps'] / l['decode_tps']:.2f}")
        for k in (1, 5, 30):
            print(f"  pass of {k:2d} rows (ms)    canvas {c[f'pass_{k}_ms']:8.2f} ({c[f'pass_{k}_ms'] / ar_c:4.2f} AR steps)"
                  f"  llama.cpp {l[f'pass_{k}_ms']:8.2f} ({l[f'pass_{k}_ms'] / ar_l:4.2f} AR steps)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


_texts = {}


def text_of(binary, model, ids):
    """The text of ids and whether canvas tokenizes it back to the same ids."""
    key = (str(model), tuple(ids))
    if key not in _texts:
        text = canvas(binary, "detokenize", "-m", str(model), "--ids", ",".join(map(str, ids)))[:-1]  # its newline
        back = json.loads(canvas(binary, "tokenize", "-m", str(model), "-p", text, "--json"))["ids"]
        _texts[key] = (text, back == list(ids))
    return _texts[key]


def round_trips(binary, model, ids):
    return text_of(binary, model, ids)[1]


def decode_prefix(binary, model, ids):
    text, ok = text_of(binary, model, ids)
    assert ok, f"{model}: the prefix does not tokenize back to its ids"
    return text


if __name__ == "__main__":
    main()
