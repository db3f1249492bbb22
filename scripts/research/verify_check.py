#!/usr/bin/env python3
"""Draft-and-verify against AR on the held-out prompts of scripts/research/dg_proof.py: for each prompt, `canvas
generate --mode ar` and `--mode verify` (greedy, the same options) must give the same tokens; reports
drafted tokens kept per cycle, new tokens per forward (counting the draft passes and the verifying causal
passes: (decoder + encoder passes) after the prompt's; an overlapped cycle is one pass), and the decode time of each mode (medians over
the prompts, both modes timed in the same run, one after the other per prompt). Also rows computed per new
token and, for the lookup, datastore and tree variants, the share of cycles drafted by lookup, by the datastore
and by trees.

usage: /usr/bin/python3 scripts/research/verify_check.py [--model models/text-dg.gguf] [--prompts 24] [-n 128]
           [--draft-lengths 4,8] [--draft-steps 1]
           [--variants plain,overlap,lookup,overlap-lookup,ds,lookup-ds,overlap-ds,overlap-lookup-ds,tree,tree-ds]
           [--lookup 3] [--datastore FILE [--datastore-count C] [--datastore-length L]] [--tree 16 [--tree-depth 8]]
           [-t 2]
           [--pass-steps 1:1,3:1.17,5:1.25,9:1.67]
Exits 1 when any prompt's tokens differ.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dg_proof import held_out_prompts, run  # noqa: E402


def generate(args, prompt, extra):
    out = run([args.canvas, "generate", "-m", args.model, "-p", prompt, "-n", str(args.n), "-t", str(args.threads),
               "-s", "1", "--json"] + extra)
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--canvas", default="build/canvas")
    ap.add_argument("--model", default="models/text-dg.gguf")
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--prompt-words", type=int, default=8)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--draft-lengths", default="4,8")
    ap.add_argument("--draft-steps", type=int, default=1)
    ap.add_argument("--variants", default="plain",
                    help="plain (a draft pass and a verify pass per cycle), overlap (--overlap: one pass per cycle), "
                         "lookup and overlap-lookup (the same with --draft-lookup N; plain and overlap run with "
                         "--draft-lookup 0); a -ds suffix (ds, lookup-ds, overlap-ds, overlap-lookup-ds) adds "
                         "--draft-datastore FILE; a tree part (tree, tree-ds, overlap-tree-ds) adds --draft-tree N")
    ap.add_argument("--lookup", type=int, default=3, help="N of --draft-lookup for the lookup variants")
    ap.add_argument("--datastore", default="", help="FILE of --draft-datastore for the -ds variants (a text the "
                    "held-out prompts' chapters are not in, e.g. the training split of `canvas tokenizer split`)")
    ap.add_argument("--datastore-count", type=int, default=0, help="--draft-datastore-count (0: canvas's default)")
    ap.add_argument("--datastore-length", type=int, default=0, help="--draft-datastore-length (0: canvas's default)")
    ap.add_argument("--tree", type=int, default=16, help="N of --draft-tree for the tree variants")
    ap.add_argument("--tree-depth", type=int, default=0, help="--draft-tree-depth (0: canvas's default)")
    ap.add_argument("--pass-steps", default="",
                    help="rows:cost pairs, a pass's cost in AR steps by its row count, measured on another shape "
                         "(e.g. LLaDA-8B q4_0 on this CPU: 1:1,3:1.17,5:1.25,9:1.65): also prints plain variants' "
                         "tokens/s against AR's projected on those costs from each prompt's own pass mix")
    args = ap.parse_args()
    steps = sorted((int(a), float(b)) for a, b in (x.split(":") for x in args.pass_steps.split(",") if x))

    def pass_cost(rows):  # linear between the measured row counts, and beyond the last two
        if rows <= steps[0][0]:
            return steps[0][1]
        for (r0, c0), (r1, c1) in zip(steps, steps[1:]):
            if rows <= r1:
                return c0 + (c1 - c0) * (rows - r0) / (r1 - r0)
        (r0, c0), (r1, c1) = steps[-2], steps[-1]
        return c1 + (c1 - c0) * (rows - r1) / (r1 - r0)
    prompts, _ = held_out_prompts(args.canvas, args.prompts, args.prompt_words)
    variants = [v for v in args.variants.split(",") if v]
    if any(v == "ds" or v.endswith("-ds") for v in variants) and not args.datastore:
        ap.error("the -ds variants need --datastore FILE")
    failed = False
    for k in [int(x) for x in args.draft_lengths.split(",")]:
        stats = {v: {"same": 0, "per_forward": [], "per_causal": [], "kept": [], "ms": [], "rows": [], "lookup": [], "datastore": [],
                     "tree": [], "projected": []}
                 for v in variants}
        ar_ms = []
        for prompt in prompts:
            ar = generate(args, prompt, ["--mode", "ar"])
            ar_ms.append(ar["decode_ms"])
            for variant in variants:
                extra = ["--mode", "verify", "--draft-length", str(k), "--draft-steps", str(args.draft_steps)]
                parts = variant.split("-")
                if "overlap" in parts:
                    extra.append("--overlap")
                extra += ["--draft-lookup", str(args.lookup if "lookup" in parts else 0)]
                if "ds" in parts:
                    extra += ["--draft-datastore", args.datastore]
                    if args.datastore_count:
                        extra += ["--draft-datastore-count", str(args.datastore_count)]
                    if args.datastore_length:
                        extra += ["--draft-datastore-length", str(args.datastore_length)]
                if "tree" in parts:
                    extra += ["--draft-tree", str(args.tree)]
                    if args.tree_depth:
                        extra += ["--draft-tree-depth", str(args.tree_depth)]
                v = generate(args, prompt, extra)
                st = stats[variant]
                if v["tokens"] == ar["tokens"]:
                    st["same"] += 1
                else:
                    failed = True
                    print(f"DIFFERENT ({variant}): {prompt!r}\n  ar:     {ar['text']!r}\n  verify: {v['text']!r}")
                forwards = v["passes"] - 1  # the prompt's pass is AR's too
                st["per_forward"].append((len(v["tokens"]) - 1) / max(1, forwards))
                cycles = max(1, v["encoder_passes"])
                st["per_causal"].append((len(v["tokens"]) - 1) / cycles)
                st["kept"].append(v["accepted"] / cycles)
                st["ms"].append(v["decode_ms"])
                st["rows"].append(v["rows_computed"] / max(1, len(v["tokens"])))
                st["lookup"].append(v.get("lookup_cycles", 0) / cycles)
                st["datastore"].append(v.get("datastore_cycles", 0) / cycles)
                st["tree"].append(v.get("tree_cycles", 0) / cycles)
                if steps and not variant.startswith("overlap"):
                    # A decoder cycle: draft passes and a causal pass of k + 1 rows; a lookup, datastore or tree
                    # cycle: one causal pass of its drafts + 1 rows. AR: one step per token after the first.
                    looked = v.get("lookup_cycles", 0)
                    stored = v.get("datastore_cycles", 0)
                    trees = v.get("tree_cycles", 0)
                    decoder = v["encoder_passes"] - looked - stored - trees
                    drafted = v["drafted"] - v.get("lookup_drafted", 0) - v.get("datastore_drafted", 0) - v.get("tree_drafted", 0)
                    cost = 0.0
                    if decoder:
                        cost += (1 + args.draft_steps) * decoder * pass_cost(drafted / decoder + 1)
                    if looked:
                        cost += looked * pass_cost(v["lookup_drafted"] / looked + 1)
                    if stored:
                        cost += stored * pass_cost(v["datastore_drafted"] / stored + 1)
                    if trees:
                        cost += trees * pass_cost(v["tree_drafted"] / trees + 1)
                    # the decoder's trees (decoder cycles with --draft-tree) had a draft pass first
                    cost += v.get("decoder_tree_cycles", 0) * args.draft_steps * pass_cost(k + 1)
                    st["projected"].append((len(v["tokens"]) - 1) / max(cost, 1e-9))
        for variant in variants:
            st = stats[variant]
            print(f"{variant}: draft length {k}, draft steps {args.draft_steps}: identical to AR on "
                  f"{st['same']}/{len(prompts)} prompts; "
                  f"kept drafts per cycle {statistics.median(st['kept']):.2f}, "
                  f"new tokens per forward {statistics.median(st['per_forward']):.2f} "
                  f"(per causal pass {statistics.median(st['per_causal']):.2f}); "
                  f"rows per token {statistics.median(st['rows']):.2f}; "
                  f"cycles by lookup {statistics.median(st['lookup']):.2f}"
                  + (f", by the datastore {statistics.median(st['datastore']):.2f}" if "ds" in variant.split("-") else "")
                  + (f", by trees {statistics.median(st['tree']):.2f}" if "tree" in variant.split("-") else "")
                  + "; "
                  f"decode ms AR {statistics.median(ar_ms):.1f}, verify {statistics.median(st['ms']):.1f} "
                  f"(verify / AR {statistics.median(st['ms']) / statistics.median(ar_ms):.2f}; per prompt "
                  f"{statistics.median(a / b for a, b in zip(ar_ms, st['ms'])):.2f}x AR's speed)"
                  + (f"; on --pass-steps' costs {statistics.median(st['projected']):.2f}x AR's tokens/s"
                     if st["projected"] else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
