#!/usr/bin/env python3
"""Sequence-level self-distillation data for a DiffusionGemma-architecture model: continuations of prompts
from the training chapters, decoded greedily by the model's own AR mode (through its causal encoder), written
as a text corpus (one document per continuation, documents separated by an empty line) for `canvas train`
(`text_corpus = FILE`, configs/text-dg-distill.cfg).

Why: the uniform-state decoder trained on real text learns a spread-out distribution over continuations,
so the entropy-bound sampler can accept only about one token per pass. Trained on the model's greedy AR
continuations instead (a deterministic function of the prompt), it can learn to be sure of many canvas
positions at once. Only training chapters are used (`canvas tokenizer split`, the split `canvas train` holds
out), so held-out prompts stay unseen.

Prompts: the first K words (K uniform in [--min-words, --max-words]) of a random verse of a random training
chapter, optionally preceded by the verse before it (--context-share of prompts). Decoding: `canvas serve
--mode ar` with --parallel requests batched per step, temperature 0 and a repetition penalty (default 1.15:
greedy decoding of a small model alone falls into loops). Standard library only.

usage: /usr/bin/python3 scripts/research/distill_ar.py --model models/text-dg.gguf --out runs/distill/kjv-ar.txt \
           [--docs 4000] [-n 240] [--parallel 64] [--repeat-penalty 1.15] [--seed 1]
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def training_chapters(canvas):
    with tempfile.TemporaryDirectory() as tmp:
        train, held = os.path.join(tmp, "train.txt"), os.path.join(tmp, "held.txt")
        subprocess.run([canvas, "tokenizer", "split", "--corpus", "kjv", "--train", train, "--held-out", held],
                       check=True, capture_output=True)
        text = open(train, encoding="utf-8").read()
    return [c.strip().splitlines() for c in text.split("\n\n") if c.strip()]


def make_prompts(chapters, count, rng, min_words, max_words, context_share):
    prompts = []
    while len(prompts) < count:
        chapter = rng.choice(chapters)
        v = rng.randrange(len(chapter))
        words = chapter[v].split()
        k = rng.randint(min_words, max_words)
        if len(words) < k + 2:
            continue
        head = " ".join(words[:k])
        if v > 0 and rng.random() < context_share:
            head = chapter[v - 1] + "\n" + head
        prompts.append(head)
    return prompts


def start_server(canvas, model, parallel):
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    cmd = [canvas, "serve", "--port", "0", "--parallel", str(parallel), "--queue", str(4 * parallel),
           "--mode", "ar"]
    if model:
        cmd += ["-m", model]
    proc = subprocess.Popen(cmd, stderr=log, stdout=subprocess.DEVNULL)
    for _ in range(1200):
        time.sleep(0.05)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", open(log.name).read())
        if m:
            url = f"http://127.0.0.1:{m.group(1)}"
            try:
                urllib.request.urlopen(url + "/health", timeout=2)
                return proc, url
            except Exception:
                pass
        if proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit("canvas serve did not start:\n" + open(log.name).read())


def complete(url, prompt, n, repeat_penalty):
    body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0, "mode": "ar",
                       "repeat_penalty": repeat_penalty}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    for attempt in range(20):
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                return json.load(r)["choices"][0]["text"]
        except urllib.error.HTTPError as e:
            if e.code != 503:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise SystemExit("the server kept answering 503")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--canvas", default="build/canvas")
    ap.add_argument("--model", default="models/text-dg.gguf")
    ap.add_argument("--out", required=True)
    ap.add_argument("--docs", type=int, default=4000)
    ap.add_argument("-n", type=int, default=240, help="tokens per continuation")
    ap.add_argument("--parallel", type=int, default=64)
    ap.add_argument("--min-words", type=int, default=3)
    ap.add_argument("--max-words", type=int, default=14)
    ap.add_argument("--context-share", type=float, default=0.3)
    ap.add_argument("--repeat-penalty", type=float, default=1.15,
                    help="the teacher's repetition penalty (greedy AR alone falls into loops)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    rng = random.Random(a.seed)
    prompts = make_prompts(training_chapters(a.canvas), a.docs, rng, a.min_words, a.max_words, a.context_share)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    proc, url = start_server(a.canvas, a.model, a.parallel)
    done, lock, t0 = [0], threading.Lock(), time.time()
    results = [None] * len(prompts)

    def one(i):
        text = complete(url, prompts[i], a.n, a.repeat_penalty)
        # One document per continuation: no empty line inside it (corpus files split documents there).
        results[i] = re.sub(r"\n\s*\n+", "\n", prompts[i] + text).strip()
        with lock:
            done[0] += 1
            if done[0] % 100 == 0 or done[0] == len(prompts):
                el = time.time() - t0
                print(f"{done[0]}/{len(prompts)} documents, {el:.0f} s", file=sys.stderr, flush=True)

    try:
        with ThreadPoolExecutor(max_workers=a.parallel) as pool:
            list(pool.map(one, range(len(prompts))))
    finally:
        proc.terminate()
        proc.wait()
    with open(a.out, "w", encoding="utf-8") as f:
        for doc in results:
            f.write(doc + "\n\n")
    print(f"wrote {len(results)} documents to {a.out} in {time.time() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
