#!/usr/bin/env python3
"""Threshold sweep of a small->large cascade through `strata gateway` — the figures of issue 17.

Writes two synthetic models of different size (`strata synth`: a small and a large preset, random
weights), starts one `strata serve` for each on 127.0.0.1, and for every threshold a
`strata gateway` whose one route is `to: {cascade: {first: small, then: large, ...}}`. The same
completions (temperature 0) go through the gateway at a fixed concurrency; per threshold it
reports the escalation rate (the `x-strata-cascade` header), mean and p99 client latency, and the
completion tokens each pool served (`strata_gateway:cascade_tokens_total`), next to two baselines:
every request on the small model, every request on the large one.

The thresholds are the quantiles of the signal itself: first every prompt is asked of the small
replica directly (logprobs on) and its signal computed as the gateway does; thresholds at the 0,
25, 50, 75 and 100 % points then give escalation rates near 0, 25, 50, 75 and 100 %.

Usage: scripts/bench_cascade.py [--requests N] [--max-tokens T] [--concurrency C]
                                [--signal mean_logprob|min_logprob|margin] [--json FILE]
Python 3 standard library only; needs build/bin/strata. Prints the CPU with the figures.
"""

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRATA = os.path.join(ROOT, "build", "bin", "strata")
WORDS = ("the a of to and in is it you that he was for on are with as his they be at one have "
         "this from or had by word but what some we can out other were all there when up use your "
         "how said an each she which do their time if will way about many then them write would "
         "like so these her long make thing see him two has look more day could go come did "
         "number sound no most people my over know water than call first who may down side been "
         "now find").split()


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} vCPUs)"
    except OSError:
        pass
    return "unknown CPU"


class Proc:
    """A child `strata` process that printed 'listening on http://127.0.0.1:PORT' and `ready`."""

    def __init__(self, args, ready, log):
        self.log = open(log, "w")
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.port = 0
        deadline = time.time() + 120
        for line in self.p.stdout:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            if ready in line or time.time() > deadline:
                break
        if not self.port:
            raise RuntimeError(f"{args[1]} did not start; see {log}")
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for _ in self.p.stdout:
            pass

    def stop(self, sig=signal.SIGTERM):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=timeout) as r:
        data = r.read()
        headers = {k.lower(): v for k, v in r.getheaders()}
    return time.perf_counter() - t0, headers, json.loads(data)


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def metric(text, name, *labels):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(l in line for l in labels):
            total += float(line.rsplit(" ", 1)[1])
    return total


def signal_of(answer, which):
    """The gateway's signal (gateway/cascade.cc) over the answer's tokens; None when it has none."""
    lps, margins = [], []
    for c in answer.get("choices", []):
        lp = c.get("logprobs") or {}
        lps += [v for v in lp.get("token_logprobs", []) if isinstance(v, (int, float))]
        for top in lp.get("top_logprobs", []) or []:
            alts = sorted((v for v in (top or {}).values()), reverse=True)
            if len(alts) >= 2:
                margins.append(alts[0] - alts[1])
    if which == "margin":
        return statistics.mean(margins) if margins else None
    if not lps:
        return None
    return statistics.mean(lps) if which == "mean_logprob" else min(lps)


def prompts(n, seed):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 24))) for _ in range(n)]


def run_load(url, bodies, concurrency):
    """Sends every body (one thread per slot); returns [(seconds, headers, answer)] in order."""
    out = [None] * len(bodies)
    nxt = [0]
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(bodies):
                return
            out[i] = post(url, bodies[i])

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.99 * (len(xs) - 1))))]


def start_gateway(work, small, large, route_to, i):
    cfg = os.path.join(work, f"gateway{i}.yaml")
    with open(cfg, "w") as f:
        f.write(f"pools:\n  - name: small\n    replicas: [{small}]\n"
                f"  - name: large\n    replicas: [{large}]\n")
        f.write(f"routes:\n  - name: ask\n    to: {route_to}\n")
        f.write("health: {interval_ms: 200}\naccess_log: off\n")
    g = Proc([STRATA, "gateway", "--config", cfg, "--port", "0"], "strata gateway: ready",
             os.path.join(work, f"gateway{i}.log"))
    url = f"http://127.0.0.1:{g.port}"
    for _ in range(200):
        try:
            get(url + "/ready")
            break
        except Exception:
            time.sleep(0.05)
    time.sleep(0.5)
    return g, url


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--signal", default="mean_logprob",
                    choices=["mean_logprob", "min_logprob", "margin"])
    ap.add_argument("--small-preset", default="tiny")
    ap.add_argument("--large-preset", default="135m")
    ap.add_argument("--threads", type=int, default=1, help="compute threads per replica")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args()
    if not os.path.exists(STRATA):
        sys.exit(f"{STRATA} not found: build the strata target first")
    work = tempfile.mkdtemp(prefix="strata-bench-cascade-")
    models = {}
    for name, preset, seed in (("small", a.small_preset, 1), ("large", a.large_preset, 2)):
        path = os.path.join(work, name + ".gguf")
        r = subprocess.run([STRATA, "synth", "--preset", preset, "--seed", str(seed), "--threads",
                            "1", "--out", path], capture_output=True, text=True, check=True)
        models[name] = path
        print(f"# {name}: {r.stdout.strip()}")
    replicas = {}
    for name, path in models.items():
        replicas[name] = Proc([STRATA, "serve", "--model", path, "--served-model-name", "ask",
                               "--port", "0", "--threads", str(a.threads), "--kv-cache-memory",
                               "256MiB"],
                              "strata serve: ready", os.path.join(work, f"{name}.log"))
    urls = {n: f"http://127.0.0.1:{p.port}" for n, p in replicas.items()}
    texts = prompts(a.requests, a.seed)
    bodies = [{"model": "ask", "prompt": t, "max_tokens": a.max_tokens, "temperature": 0}
              for t in texts]
    rows = []
    try:
        # The signal of every prompt on the small model, asked directly.
        probe = run_load(urls["small"] + "/v1/completions",
                         [dict(b, logprobs=2) for b in bodies], a.concurrency)
        sig = sorted(s for s in (signal_of(ans, a.signal) for _, _, ans in probe) if s is not None)
        qs = [0.0, 0.25, 0.5, 0.75, 1.0]
        # A threshold just above the q-quantile escalates the share q of the prompts (q = 0: the
        # lowest signal itself, so nothing is below it).
        thresholds = [sig[0]] + [sig[min(len(sig) - 1, int(q * len(sig)) - 1)] + 1e-9
                                 for q in qs[1:]]
        runs = [("small only", "small", None), ("large only", "large", None)]
        runs += [(f"cascade q{int(q * 100)}", None, t) for q, t in zip(qs, thresholds)]
        for i, (label, pool, threshold) in enumerate(runs):
            route_to = pool or ("\n      cascade: {first: small, then: large, signal: "
                                f"{a.signal}, threshold: {threshold!r}}}")
            g, gurl = start_gateway(work, urls["small"], urls["large"], route_to, i)
            try:
                run_load(gurl + "/v1/completions", bodies[:2], 1)  # warm-up, not counted
                before = get(gurl + "/metrics")
                res = run_load(gurl + "/v1/completions", bodies, a.concurrency)
                m = get(gurl + "/metrics")
            finally:
                g.stop()
            lat = [s for s, _, _ in res]
            esc = sum(1 for _, h, _ in res if h.get("x-strata-cascade") == "escalated")
            tokens = {}
            for p in ("small", "large"):
                if pool:
                    tokens[p] = sum(ans.get("usage", {}).get("completion_tokens", 0)
                                    for _, _, ans in res) if p == pool else 0
                else:
                    tokens[p] = (metric(m, "strata_gateway:cascade_tokens_total", f'pool="{p}"',
                                        'kind="completion"') -
                                 metric(before, "strata_gateway:cascade_tokens_total",
                                        f'pool="{p}"', 'kind="completion"'))
            row = {"run": label, "threshold": threshold,
                   "escalation_rate": esc / len(res) if pool is None else (1.0 if pool == "large"
                                                                           else 0.0),
                   "mean_s": statistics.mean(lat), "p99_s": p99(lat),
                   "tokens_small": tokens["small"], "tokens_large": tokens["large"]}
            rows.append(row)
            print(f"# {label}: done", flush=True)
    finally:
        for p in replicas.values():
            p.stop()
    print(f"\nCPU: {cpu_name()}; {a.requests} completions, max_tokens {a.max_tokens}, "
          f"temperature 0, concurrency {a.concurrency}, {a.threads} compute thread(s) per "
          f"replica; signal {a.signal}")
    print("| run | threshold | escalation rate | mean latency (s) | p99 latency (s) | "
          "tokens from small | tokens from large |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        t = "—" if r["threshold"] is None else f"{r['threshold']:.4f}"
        print(f"| {r['run']} | {t} | {r['escalation_rate'] * 100:.0f} % | {r['mean_s']:.3f} | "
              f"{r['p99_s']:.3f} | {r['tokens_small']:.0f} | {r['tokens_large']:.0f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
