#!/usr/bin/python3
"""Closed-loop load generator for canvas serve (127.0.0.1 only).

For each concurrency level C, C clients each send completion requests back to back (a new one as soon as
the previous answer arrives) until the level's request count is reached; reports per level the
throughput (completion tokens/s and requests/s over the level's wall time) and the p50 / p95 request
latency, as JSON.

  /usr/bin/python3 scripts/serve_load.py --url http://127.0.0.1:8080 --levels 1,4,16,64 \
      --requests 64 --max-tokens 32 --mode diffusion --out runs/load.json
"""
import argparse
import json
import os
import sys
import threading
import time
import urllib.parse
import urllib.request


def percentile(values, q):
    s = sorted(values)
    if not s:
        return 0.0
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def one_request(url, body, api_key):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    if api_key:
        req.add_header("Authorization", "Bearer " + api_key)
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=600) as res:
            answer = json.loads(res.read())
        return time.monotonic() - t0, answer, None
    except urllib.error.HTTPError as e:
        return time.monotonic() - t0, None, e.code
    except (ConnectionError, urllib.error.URLError) as e:
        return time.monotonic() - t0, None, type(e).__name__


def run_level(url, concurrency, requests, body, api_key, time_limit):
    lock = threading.Lock()
    issued = [0]
    latencies, tokens, passes, modes, errors = [], [], [], {}, {}
    deadline = time.monotonic() + time_limit

    def client(index):
        while True:
            with lock:
                if issued[0] >= requests or time.monotonic() > deadline:
                    return
                n = issued[0]
                issued[0] += 1
            b = dict(body, seed=n, prompt=body["prompt"])
            latency, answer, error = one_request(url, b, api_key)
            with lock:
                if error:
                    errors[error] = errors.get(error, 0) + 1
                    continue
                latencies.append(latency)
                tokens.append(answer["usage"]["completion_tokens"])
                passes.append(answer["usage"].get("forward_passes", 0))  # canvas's field (not llama-server's)
                m = answer.get("canvas", {}).get("mode", "?")
                modes[m] = modes.get(m, 0) + 1

    load_before = os.getloadavg()[0]
    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    return {
        "concurrency": concurrency,
        "requests": len(latencies),
        "errors": errors,
        "wall_s": round(wall, 3),
        "tokens_per_s": round(sum(tokens) / wall, 2) if wall > 0 else 0,
        "requests_per_s": round(len(latencies) / wall, 3) if wall > 0 else 0,
        "p50_ms": round(1000 * percentile(latencies, 0.5), 1),
        "p95_ms": round(1000 * percentile(latencies, 0.95), 1),
        "mean_tokens": round(sum(tokens) / max(1, len(tokens)), 2),
        "mean_forward_passes": round(sum(passes) / max(1, len(passes)), 2),
        "modes": modes,
        # The machine's 1-minute load average before and after the level (other work shares the cores).
        "loadavg": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--levels", default="1,4,16,64", help="comma-separated concurrency levels")
    ap.add_argument("--requests", type=int, default=64, help="requests per level (at least the concurrency)")
    ap.add_argument("--time-limit", type=float, default=300, help="seconds per level at most")
    ap.add_argument("--prompt", default="And God said")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--mode", default=None, help="auto | diffusion | ar (default: the server's)")
    ap.add_argument("--extra", default="{}", help="more request fields as JSON, e.g. '{\"threshold\": 0.9}'")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--label", default="")
    ap.add_argument("--out", default="-")
    args = ap.parse_args()
    host = urllib.parse.urlparse(args.url).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("serve_load.py: only loads a server on this machine (127.0.0.1)")
    body = {"prompt": args.prompt, "max_tokens": args.max_tokens, "temperature": 0}
    if args.mode:
        body["mode"] = args.mode
    body.update(json.loads(args.extra))
    levels = [int(x) for x in args.levels.split(",")]
    if max(levels) > 256 or args.requests > 4096:
        sys.exit("serve_load.py: at most 256 clients and 4096 requests per level")
    results = []
    for c in levels:
        r = run_level(args.url, c, max(args.requests, c), body, args.api_key, args.time_limit)
        print(f"[{args.label}] concurrency {c}: {r['tokens_per_s']} tokens/s, p50 {r['p50_ms']} ms, "
              f"p95 {r['p95_ms']} ms, {r['requests']} requests, modes {r['modes']}, errors {r['errors']}, "
              f"load {r['loadavg']}",
              file=sys.stderr)
        results.append(r)
    out = {"label": args.label, "url": args.url, "request": body, "levels": results}
    text = json.dumps(out, indent=2)
    if args.out == "-":
        print(text)
    else:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
