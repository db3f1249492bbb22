#!/usr/bin/env python3
"""Black-box probe of canvas's reliability (issue 61's repros, run as a user would): bad Host / Origin headers
and request targets, schema patterns that take long to compile while /health is timed, random type-confused
request bodies, links and FIFOs at the datastore cache path, a relative XDG_CACHE_HOME, SIGTERM while serve
loads, a folder of models with bad entries, a cost-model file canvas wrote itself, out-of-range ids in a
Hugging Face config, and a verify request to a model that cannot verify.

    python3 scripts/probe_reliability.py [--canvas build/canvas] [--seed 1] [--bodies 600]

Prints one line per probe and the totals: inputs tried, crashes (a process ended by a signal, or the server
gone), hangs (past a deadline; a /health answer over 100 ms while a schema compiles counts as one), wrong
statuses (a 5xx, or a status other than the expected one) and data lost (a file the user owns changed).
Exits 1 when any total but the first is not zero. Standard library only; every run is bounded in time.
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOTALS = {"inputs": 0, "crashes": 0, "hangs": 0, "wrong_statuses": 0, "data_lost": 0}


def tally(kind, what):
    TOTALS[kind] += 1
    print(f"  {kind}: {what}")


class Server:
    """canvas serve on a free port; ready once /health answers 200."""

    def __init__(self, canvas, args, env=None, wait_ready=True, log=None):
        self.log_path = log or tempfile.mktemp(prefix="canvas-probe-", suffix=".log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([canvas, "serve", "--port", "0"] + args, stdout=subprocess.DEVNULL,
                                     stderr=self.log, env=env)
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline and self.port is None:
            m = re.search(r"listening on http://[^:]+:(\d+)/", open(self.log_path).read())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                break
            else:
                time.sleep(0.05)
        if wait_ready and self.port:
            while time.time() < deadline:
                try:
                    if self.request("GET", "/health", timeout=2)[0] == 200:
                        return
                except OSError:
                    pass
                time.sleep(0.1)

    def request(self, method, path, body=None, headers=None, timeout=30):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = json.dumps(body) if isinstance(body, (dict, list)) else body
        h = {"Content-Type": "application/json"} if data is not None else {}
        h.update(headers or {})
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = (r.status, r.read().decode("utf-8", "replace"))
        c.close()
        return out

    def raw(self, head, timeout=10):
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(head.encode())
            data = b""
            while b"\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        m = re.match(rb"HTTP/1\.[01] (\d{3})", data)
        return int(m.group(1)) if m else 0

    def alive(self):
        return self.proc.poll() is None

    def terminate(self, seconds, what):
        """SIGTERM; a hang when the process is still there after `seconds`."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            tally("hangs", f"serve did not end within {seconds} s of SIGTERM{what}")
            self.proc.kill()

    def stop(self):
        if self.proc.poll() is None:
            self.terminate(10, "")
        if self.proc.returncode is not None and self.proc.returncode < 0 and self.proc.returncode != -signal.SIGTERM:
            tally("crashes", f"serve ended by signal {-self.proc.returncode}")
        self.log.close()

    def text(self):
        return open(self.log_path).read()


def expect(got, want, what):
    TOTALS["inputs"] += 1
    if got == want:
        return True
    tally("wrong_statuses", f"{what}: {got}, expected {want}")
    return False


def run(cmd, env=None, timeout=120, cwd=None):
    TOTALS["inputs"] += 1
    try:
        r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        tally("hangs", f"{' '.join(cmd[:4])}... past {timeout} s")
        return None
    if r.returncode < 0:
        tally("crashes", f"{' '.join(cmd[:4])}... signal {-r.returncode}")
    return r


def probe_headers(canvas):
    print("headers: Host ports, Origin schemes, absolute-form targets")
    s = Server(canvas, ["-m", f"{ROOT}/models/text-masked.gguf"])
    p = s.port
    for host in ["localhost:abc", "127.0.0.1:1@evil.com", "a:0", "a:65536", "a:", "[::1]x", "user@a", "127.0.0.1:-1",
                 "127.0.0.1: 80", "127.0.0.1:80:80", ""]:
        expect(s.raw(f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n"), 400, f"Host '{host}'")
    for host in ["127.0.0.1", f"127.0.0.1:{p}", "localhost", f"[::1]:{p}"]:
        expect(s.raw(f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n"), 200, f"Host '{host}'")
    body = '{"prompt": "And", "max_tokens": 2}'
    for origin, want in [(f"ftp://127.0.0.1:{p}", 403), (f"file://127.0.0.1:{p}", 403),
                         (f"chrome-extension://127.0.0.1:{p}", 403), (f"http://evil.example:{p}", 403),
                         (f"http://127.0.0.1:{p}", 200)]:
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nOrigin: {origin}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}")
        expect(s.raw(head, timeout=60), want, f"Origin '{origin}'")
    expect(s.raw(f"GET http://127.0.0.1:{p}/health HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n\r\n"), 200, "absolute target")
    expect(s.raw(f"GET http://evil.example/health HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n\r\n"), 403,
           "absolute target of another host")
    if not s.alive():
        tally("crashes", "serve gone after the header probe")
    s.stop()


def random_pattern(rng, depth=0):
    atoms = ["a", "b", "[ab]", "[a-z]", ".", "\\d", "x"]
    if depth > 3 or rng.random() < 0.3:
        return rng.choice(atoms)
    kind = rng.randrange(4)
    if kind == 0:
        return "(?:" + "|".join(random_pattern(rng, depth + 1) for _ in range(rng.randint(2, 40))) + ")"
    if kind == 1:
        return random_pattern(rng, depth + 1) + rng.choice(["*", "+", "?", "{%d}" % rng.randint(1, 30),
                                                               "{%d,%d}" % (rng.randint(0, 5), rng.randint(5, 40))])
    return "".join(random_pattern(rng, depth + 1) for _ in range(rng.randint(2, 6)))


def probe_schemas(canvas, rng, count):
    print(f"schemas: the K = 2000 / 5000 patterns and {count} random ones, /health timed meanwhile")
    s = Server(canvas, ["-m", f"{ROOT}/models/text-masked.gguf", "--parallel", "2"])
    alt = lambda k: "(?:[ab]" + "|[ab]" * (k - 1) + ")"
    patterns = ["^" + alt(k) + "*a" + alt(k) + "{12}$" for k in (2000, 5000)]
    patterns += ["^" + random_pattern(rng) + "$" for _ in range(count)]
    statuses, worst = [], [0.0]
    done = threading.Event()

    def health():
        while not done.is_set():
            t = time.time()
            try:
                s.request("GET", "/health", timeout=5)
            except OSError:
                pass
            worst[0] = max(worst[0], time.time() - t)
            time.sleep(0.02)

    def send(pattern):
        body = {"prompt": "x", "max_tokens": 4,
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": "p", "schema": {"type": "string", "pattern": pattern}}}}
        try:
            statuses.append((pattern, s.request("POST", "/v1/completions", body, timeout=60)[0]))
        except OSError as e:
            statuses.append((pattern, str(e)))

    watcher = threading.Thread(target=health)
    watcher.start()
    for i in range(0, len(patterns), 4):
        batch = [threading.Thread(target=send, args=(p,)) for p in patterns[i:i + 4]]
        for t in batch:
            t.start()
        for t in batch:
            t.join()
    done.set()
    watcher.join()
    for pattern, status in statuses:
        TOTALS["inputs"] += 1
        if status not in (200, 400):
            tally("hangs" if isinstance(status, str) else "wrong_statuses", f"pattern {pattern[:40]!r}: {status}")
    if worst[0] > 0.1:
        tally("hangs", f"/health took {worst[0] * 1000:.0f} ms while schemas compiled")
    print(f"  /health at most {worst[0] * 1000:.1f} ms; {sum(1 for _, st in statuses if st == 400)} of "
          f"{len(statuses)} patterns refused with 400")
    if not s.alive():
        tally("crashes", "serve gone after the schema probe")
    s.stop()


def random_value(rng, depth=0):
    choices = [None, True, False, 0, -1, 1, 2 ** 62, -2 ** 63, 1.5, 1e308, float("nan"), "", "x", "\u0000",
               "a" * 5000, [], {}, [1, "a"], {"type": "json_schema"}]
    if depth < 2 and rng.random() < 0.2:
        return {k: random_value(rng, depth + 1) for k in rng.sample(FIELDS, 3)}
    return rng.choice(choices)


FIELDS = ["prompt", "messages", "input", "max_tokens", "max_output_tokens", "temperature", "top_p", "top_k", "min_p",
          "seed", "stop", "n", "stream", "stream_options", "steps", "block_length", "threshold", "entropy_bound",
          "cache", "mode", "response_format", "logit_bias", "tools", "tool_choice", "logprobs", "top_logprobs",
          "echo", "suffix", "draft_length", "overlap", "input_prefix", "input_suffix", "n_predict", "instructions",
          "reasoning", "chat_template_kwargs", "model"]


def probe_bodies(canvas, rng, count):
    print(f"bodies: {count} random type-confused bodies to the four generation endpoints")
    s = Server(canvas, ["-m", f"{ROOT}/models/text-masked.gguf", "--parallel", "2"])
    bad = 0
    for i in range(count):
        path = rng.choice(["/v1/completions", "/v1/chat/completions", "/v1/responses", "/infill"])
        body = {k: random_value(rng) for k in rng.sample(FIELDS, rng.randint(1, 6))}
        if rng.random() < 0.5:
            body["max_tokens"] = rng.randint(1, 8)
        try:
            text = json.dumps(body, allow_nan=True)
        except ValueError:
            continue
        TOTALS["inputs"] += 1
        try:
            status = s.request("POST", path, text, timeout=60)[0]
        except (OSError, http.client.HTTPException) as e:
            tally("hangs", f"{path} {text[:80]}: {e}")
            continue
        if status >= 500:
            bad += 1
            tally("wrong_statuses", f"{path} {text[:120]}: {status}")
        if not s.alive():
            tally("crashes", f"serve gone after {path} {text[:120]}")
            return
    s.stop()


def probe_files(canvas, tmp):
    print("files: a FIFO, a link and junk at the datastore cache path; a relative XDG_CACHE_HOME")
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w") as f:
        f.write("In the beginning God created the heaven and the earth.\n" * 2000)
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "xdg"))
    cmd = [canvas, "generate", "-m", f"{ROOT}/models/text-dg.gguf", "-p", "In the beginning", "-n", "8",
           "--mode", "verify", "--draft-datastore", corpus, "--quiet"]
    r = run(cmd, env)
    expect(r and r.returncode, 0, "first datastore run")
    cache_dir = os.path.join(tmp, "xdg", "canvas")
    caches = [f for f in os.listdir(cache_dir) if f.startswith("datastore-")] if os.path.isdir(cache_dir) else []
    if not caches:
        tally("wrong_statuses", "no datastore cache file written")
        return
    cache = os.path.join(cache_dir, caches[0])
    victim = os.path.join(tmp, "precious.txt")
    with open(victim, "w") as f:
        f.write("the user's own file\n")
    os.remove(cache)
    os.mkfifo(cache)
    r = run(cmd, env, timeout=60)
    expect(r and r.returncode, 0, "a FIFO at the cache path")
    os.remove(cache)
    os.symlink(victim, cache)
    r = run(cmd, env, timeout=60)
    expect(r and r.returncode, 0, "a link at the cache path")
    TOTALS["inputs"] += 1
    if open(victim).read() != "the user's own file\n":
        tally("data_lost", "the link's target was written")
    if os.path.islink(cache):
        os.remove(cache)
    with open(cache, "wb") as f:
        f.write(os.urandom(1 << 20) * 64)
    r = run(cmd, env, timeout=60)
    expect(r and r.returncode, 0, "64 MB of junk at the cache path")
    with open(cache, "r+b") as f:  # the rewritten cache, its ids damaged past the vocabulary
        f.seek(64)
        f.write(b"\xff\xff\xff\x7f" * 64)
    r = run(cmd, env, timeout=60)
    expect(r and r.returncode, 0, "ids outside the vocabulary in the cache")
    work = os.path.join(tmp, "cwd")
    os.makedirs(work)
    r = run(cmd, dict(os.environ, XDG_CACHE_HOME="relative-cache"), timeout=60, cwd=work)
    expect(r and r.returncode, 0, "a relative XDG_CACHE_HOME")
    TOTALS["inputs"] += 1
    if os.path.exists(os.path.join(work, "relative-cache")):
        tally("wrong_statuses", "a relative XDG_CACHE_HOME was written under the working directory")


def probe_sigterm_while_loading(canvas, tmp):
    print("SIGTERM while serve tokenizes a 24 MB datastore corpus")
    corpus = os.path.join(tmp, "big.txt")
    with open(corpus, "w") as f:
        i = 0
        while f.tell() < 24 << 20:
            f.write(f"In the beginning {i} God created the heaven and the earth; and the earth was without form.\n")
            i += 1
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "xdg-big"))
    s = Server(canvas, ["-m", f"{ROOT}/models/text-ar.gguf", "--draft-datastore", corpus], env=env, wait_ready=False)
    deadline = time.time() + 30
    while time.time() < deadline and "tokenizing" not in s.text():
        time.sleep(0.01)
    TOTALS["inputs"] += 1
    t = time.time()
    s.terminate(5, " while loading")
    if "ready" in s.text():
        tally("wrong_statuses", "serve said ready after SIGTERM")
    print(f"  ended in {time.time() - t:.2f} s, exit {s.proc.returncode}")
    s.stop()


def probe_model_folder(canvas, tmp):
    print("serve -m DIR: a good model beside a truncated file, an unknown architecture and a text file")
    folder = os.path.join(tmp, "models")
    os.makedirs(folder)
    shutil.copy(f"{ROOT}/models/text-ar.gguf", os.path.join(folder, "good.gguf"))
    data = open(f"{ROOT}/models/text-ar.gguf", "rb").read()
    open(os.path.join(folder, "truncated.gguf"), "wb").write(data[:len(data) // 2])
    run([canvas, "quantize", f"{ROOT}/models/text-ar.gguf", os.path.join(folder, "alien.gguf"), "f32",
         "--set", "general.architecture=no-such-architecture"])
    open(os.path.join(folder, "notes.gguf"), "w").write("not a model\n")
    s = Server(canvas, ["-m", folder])
    TOTALS["inputs"] += 1
    if not s.alive() or s.port is None:
        tally("wrong_statuses", "serve -m DIR did not start: " + s.text()[-300:])
        return
    status, body = s.request("GET", "/v1/models")
    expect(status, 200, "/v1/models")
    ids = [m["id"] for m in json.loads(body)["data"]]
    expect(ids, ["good"], "the models served")
    s.stop()


def probe_cost_model(canvas, tmp):
    print("a cost-model file canvas wrote itself (zeros after datastore runs), loaded by serve")
    home = os.path.join(tmp, "home")
    os.makedirs(home)
    env = {k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME"}
    env["HOME"] = home
    corpus = os.path.join(tmp, "small.txt")
    open(corpus, "w").write("And God said, Let there be light: and there was light.\n" * 200)
    model = f"{ROOT}/models/text-dg.gguf"
    run([canvas, "generate", "-m", model, "-p", "And God said", "-n", "32", "--draft-datastore", corpus, "--quiet"], env)
    for _ in range(2):
        run([canvas, "generate", "-m", model, "-p", "In the beginning", "-n", "64", "--temp", "0", "--mode", "verify",
             "--quiet"], env)
    files = []
    for root, _, names in os.walk(home):
        files += [os.path.join(root, n) for n in names if n.startswith("cost-model")]
    if not files:
        print("  (no cost-model file written: nothing to load)")
        return
    s = Server(canvas, ["-m", model, "--cost-model", files[0], "--parallel", "2"], env=env)
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        s.request("POST", "/v1/completions", {"prompt": "And God said", "max_tokens": 16}, timeout=120)[0]))
        for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for status in results:
        expect(status, 200, "an auto completion with that cost model")
    for path in ["/health", "/v1/models", "/props"]:
        expect(s.request("GET", path)[0], 200, path)
    if not s.alive():
        tally("crashes", "serve gone with the cost model")
    s.stop()


def probe_hf_ids(canvas, tmp):
    print("Hugging Face configs whose token ids are past the vocabulary (config.json, generation_config.json)")
    for n, (name, edit) in enumerate([
            ("config.json", lambda c: c["text_config"].update(eos_token_id=10 ** 9)),
            ("config.json", lambda c: c["text_config"].update(bos_token_id=-5)),
            ("config.json", lambda c: c["text_config"].update(pad_token_id=2 ** 40)),
            ("generation_config.json", lambda c: c.update(eos_token_id=[1, 10 ** 9]))]):
        folder = os.path.join(tmp, f"hf{n}")
        shutil.copytree(f"{ROOT}/tests/fixtures/dg-release/published", folder)
        config = json.load(open(os.path.join(folder, name)))
        edit(config)
        json.dump(config, open(os.path.join(folder, name), "w"))
        commands = [[canvas, "generate", "-m", folder, "-p", "hi", "-n", "2"]]
        if name == "config.json":  # convert reads no ids from generation_config.json
            commands.append([canvas, "convert", "--in", folder, "--out", os.path.join(tmp, f"hf{n}.gguf")])
        for cmd in commands:
            r = run(cmd)
            if r is not None:
                expect(r.returncode, 1, f"{cmd[1]} with {name} {n}")
                TOTALS["inputs"] += 1
                if name not in r.stderr:
                    tally("wrong_statuses", f"{cmd[1]}'s error does not name {name}: {r.stderr[-200:]}")


def probe_verify_on_ar(canvas):
    print("\"mode\": \"verify\" to a model that cannot verify")
    s = Server(canvas, ["-m", f"{ROOT}/models/text-ar.gguf"])
    status, body = s.request("POST", "/v1/completions", {"prompt": "And", "max_tokens": 4, "mode": "verify"})
    expect(status, 400, "verify on an AR model")
    TOTALS["inputs"] += 1
    if "verify" not in body or "--mode diffusion" in body:
        tally("wrong_statuses", f"the error does not say verify: {body[:200]}")
    status, _ = s.request("POST", "/v1/completions", {"prompt": "And", "max_tokens": 2 ** 20})
    expect(status, 400, "max_tokens 2^20")
    s.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--canvas", default=os.path.join(ROOT, "build", "canvas"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bodies", type=int, default=600)
    ap.add_argument("--patterns", type=int, default=40)
    a = ap.parse_args()
    a.canvas = os.path.abspath(a.canvas)  # the probes run it from other folders
    rng = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="canvas-probe-")
    start = time.time()
    try:
        probe_headers(a.canvas)
        probe_schemas(a.canvas, rng, a.patterns)
        probe_bodies(a.canvas, rng, a.bodies)
        probe_files(a.canvas, tmp)
        probe_sigterm_while_loading(a.canvas, tmp)
        probe_model_folder(a.canvas, tmp)
        probe_cost_model(a.canvas, tmp)
        probe_hf_ids(a.canvas, tmp)
        probe_verify_on_ar(a.canvas)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"totals ({time.time() - start:.0f} s): " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in TOTALS.items()))
    return 1 if any(v for k, v in TOTALS.items() if k != "inputs") else 0


if __name__ == "__main__":
    sys.exit(main())
