#!/usr/bin/env python3
"""Serving throughput with many LoRA adapters: a closed-loop load against one OpenAI-compatible
server that is already running (`strata serve --lora ...`, or any other server), the figure of
issue 20 ("8 distinct adapters in every batch").

C clients send N completions in total; request i uses adapter i mod A (or the base model with
--adapters 0). How a request names its adapter is the server's convention:
  --style model     "model": "<prefix><k>"                     (vLLM, strata serve)
  --style lora-id   "lora": [{"id": k, "scale": 1.0}]          (llama.cpp's llama-server)
Every request is greedy with a fixed max_tokens and ignore_eos, so each produces the same number
of tokens. Reports output tokens per second (wall time of the whole run), the median of --reps
runs, and the CPU.

Usage: scripts/bench_lora_serve.py --url http://127.0.0.1:PORT [--adapters 8] [--style model]
         [--prefix lora] [--concurrency 16] [--requests 64] [--max-tokens 64] [--reps 3]
         [--json FILE]
Python 3 standard library only.
"""

import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time
import urllib.parse


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} vCPUs)"
    except OSError:
        pass
    return "unknown CPU"


def body_for(args, i):
    body = {
        "prompt": f"Request {i}: tell a long story about the number {i * 7919 % 1000}.",
        "max_tokens": args.max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    if args.adapters > 0:
        k = i % args.adapters
        if args.style == "model":
            body["model"] = f"{args.prefix}{k}"
        else:
            body["lora"] = [{"id": j, "scale": 1.0 if j == k else 0.0} for j in range(args.adapters)]
    elif args.base_model:
        body["model"] = args.base_model
    return body


def one_run(args, url):
    lock = threading.Lock()
    state = {"next": 0, "tokens": 0, "errors": 0}

    def client():
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
        while True:
            with lock:
                i = state["next"]
                if i >= args.requests:
                    return
                state["next"] += 1
            data = json.dumps(body_for(args, i)).encode()
            try:
                conn.request("POST", "/v1/completions", data, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                out = json.loads(resp.read())
                n = out.get("usage", {}).get("completion_tokens", 0) if resp.status == 200 else 0
            except (OSError, http.client.HTTPException, ValueError):
                conn.close()
                conn = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
                n, resp = 0, None
            with lock:
                state["tokens"] += n
                if n == 0:
                    state["errors"] += 1

    t0 = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    return {"wall_s": wall, "output_tokens": state["tokens"], "errors": state["errors"],
            "output_tok_s": state["tokens"] / wall if wall > 0 else 0.0}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--adapters", type=int, default=8)
    ap.add_argument("--style", choices=["model", "lora-id"], default="model")
    ap.add_argument("--prefix", default="lora")
    ap.add_argument("--base-model", default="")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="warm-up runs (not counted)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    url = urllib.parse.urlparse(args.url)
    for _ in range(args.warmup):
        one_run(args, url)
    runs = [one_run(args, url) for _ in range(args.reps)]
    med = statistics.median(r["output_tok_s"] for r in runs)
    report = {"cpu": cpu_name(), "url": args.url, "adapters": args.adapters, "style": args.style,
              "concurrency": args.concurrency, "requests": args.requests,
              "max_tokens": args.max_tokens, "runs": runs, "median_output_tok_s": med}
    print(f"{report['cpu']}: {args.adapters} adapters ({args.style}), C={args.concurrency}, "
          f"{args.requests} x {args.max_tokens} tokens: median {med:.1f} output tok/s "
          f"(runs: {', '.join('%.1f' % r['output_tok_s'] for r in runs)}; "
          f"errors {sum(r['errors'] for r in runs)})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if all(r["errors"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
