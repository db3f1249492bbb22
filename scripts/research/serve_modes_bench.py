#!/usr/bin/env python3
"""canvas serve's throughput for diffusion and verify requests, one binary against another in one run: for each
mode and 1 and 4 clients (`--parallel` = clients), 6 completions of 32 tokens per client ("And God said",
seed 1) after one untimed request, tokens per second over the whole run, medians of 3 rounds alternating
the binaries.

usage: env -u OPENBLAS_CORETYPE /usr/bin/python3 scripts/research/serve_modes_bench.py build/canvas [OTHER_CANVAS ...]
"""
import json, subprocess, sys, threading, time, urllib.request, statistics, socket
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
def run(binary, mode, clients, per_client):
    port = free_port()
    p = subprocess.Popen([binary, "serve", "-m", "models/text-dg.gguf", "--port", str(port), "--parallel", str(clients)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1); break
        except Exception: time.sleep(0.05)
    body = json.dumps({"prompt": "And God said", "max_tokens": 32, "mode": mode, "seed": 1}).encode()
    def one():
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body, headers={"Content-Type": "application/json"})
        return json.load(urllib.request.urlopen(req, timeout=60))
    one()  # warm
    tokens = [0]
    def client():
        for _ in range(per_client):
            r = one(); tokens[0] += r["usage"]["completion_tokens"]
    t0 = time.time()
    ts = [threading.Thread(target=client) for _ in range(clients)]
    [t.start() for t in ts]; [t.join() for t in ts]
    dt = time.time() - t0
    p.terminate(); p.wait()
    return tokens[0] / dt
binaries = sys.argv[1:]
for mode in ["diffusion", "verify"]:
    for clients in [1, 4]:
        res = {b: [] for b in binaries}
        for rep in range(3):
            for b in binaries: res[b].append(run(b, mode, clients, 6))
        print(mode, clients, "  ".join(f"{b}: {statistics.median(v):.0f} tok/s" for b, v in res.items()))
