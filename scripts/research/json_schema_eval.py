#!/usr/bin/python3
"""Schema-constrained output over data/json-schema/cases.jsonl: validity (python3-jsonschema) with and without
constraints, decoder passes and wall-clock per output, for the shipped byte-level models.

usage: /usr/bin/python3 scripts/research/json_schema_eval.py [--canvas build/canvas] [--limit N] [--out runs/json-schema.jsonl]
Prints a markdown table (per configuration: cases, valid %, mean passes, mean decode ms, mean total ms)."""
import argparse, json, os, subprocess, sys, tempfile, time
import jsonschema

CONTEXT = 128
CONFIGS = [
    # name, model, extra flags, constrained
    ("masked, diffusion + scaffold (1 token/pass)", "models/text-masked.gguf", [], True),
    ("masked, diffusion + scaffold (--threshold 0.5)", "models/text-masked.gguf", ["--threshold", "0.5"], True),
    ("masked, AR mode + mask", "models/text-masked.gguf", ["--mode", "ar"], True),
    ("ar twin, AR + mask", "models/text-ar.gguf", [], True),
    ("masked, unconstrained", "models/text-masked.gguf", [], False),
    ("ar twin, unconstrained", "models/text-ar.gguf", [], False),
]


def valid(text, schema):
    try:
        jsonschema.validate(json.loads(text), schema, cls=jsonschema.Draft202012Validator)
        return True
    except Exception:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--canvas", default="build/canvas")
    ap.add_argument("--cases", default="data/json-schema/cases.jsonl")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--threads", default="1")
    ap.add_argument("--out", default="runs/json-schema.jsonl")
    ap.add_argument("--resume", action="store_true", help="keep the rows already in --out, run the rest")
    args = ap.parse_args()
    cases = [json.loads(l) for l in open(args.cases)]
    if args.limit:
        cases = cases[:args.limit]
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    rows = [json.loads(l) for l in open(args.out)] if args.resume and os.path.exists(args.out) else []
    done = {(r["case"], r["config"]) for r in rows}
    with tempfile.TemporaryDirectory() as tmp, open(args.out, "a" if args.resume else "w") as out:
        for case in cases:
            path = os.path.join(tmp, "schema.json")
            with open(path, "w") as f:
                json.dump(case["schema"], f)
            n = CONTEXT - len(case["prompt"].encode()) - 2
            for name, model, extra, constrained in CONFIGS:
                if (case["id"], name) in done:
                    continue
                cmd = [args.canvas, "generate", "-m", model, "-p", case["prompt"], "-n", str(n), "-t", args.threads,
                       "--json"] + extra
                if constrained:
                    cmd += ["--json-schema", path]
                elif "masked" in model:
                    cmd += ["--block-length", str(n)]  # one block over the whole output
                t0 = time.time()
                p = subprocess.run(cmd, capture_output=True, text=True)
                wall = (time.time() - t0) * 1000
                if p.returncode != 0:
                    row = {"case": case["id"], "config": name, "error": p.stderr.strip()}
                else:
                    r = json.loads(p.stdout)
                    text = r["text"].strip()
                    row = {"case": case["id"], "config": name, "text": text, "valid": valid(text, case["schema"]),
                           "passes": r["passes"], "decode_ms": r["decode_ms"], "prompt_ms": r["prompt_ms"],
                           "process_ms": wall}
                rows.append(row)
                out.write(json.dumps(row) + "\n")
                out.flush()
    print("| configuration | cases | valid | passes / output | decode ms / output | prompt ms |")
    print("|---|---|---|---|---|---|")
    for name, _, _, _ in CONFIGS:
        rs = [r for r in rows if r["config"] == name]
        ok = [r for r in rs if "error" not in r]
        errors = len(rs) - len(ok)
        v = sum(r["valid"] for r in ok)
        mean = lambda k: sum(r[k] for r in ok) / max(len(ok), 1)
        print("| %s | %d%s | %.1f%% (%d) | %.1f | %.1f | %.1f |" % (
            name, len(rs), (" (%d errors)" % errors) if errors else "", 100.0 * v / max(len(rs), 1), v,
            mean("passes"), mean("decode_ms"), mean("prompt_ms")))


if __name__ == "__main__":
    main()
