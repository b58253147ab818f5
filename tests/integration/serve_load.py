#!/usr/bin/env python3
"""Load test for `strata serve` (stdlib only; run by hand, not by ctest).

Starts `strata serve --port 0` (or uses --url), runs C concurrent streaming clients for D seconds,
each looping over completions, then reports: requests, 5xx count, errors, p50/p99 TTFT and ITL, and
the server's RSS at start / middle / end (from /proc, when the script started the server).

  tests/integration/serve_load.py --bin build/bin/strata --clients 64 --seconds 60
"""
import argparse, http.client, json, os, re, statistics, subprocess, sys, threading, time


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return -1
    return -1


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


def client(host, port, stop_at, stats, lock, max_tokens):
    conn = None
    while time.time() < stop_at:
        try:
            if conn is None:
                conn = http.client.HTTPConnection(host, port, timeout=120)
            body = json.dumps({"prompt": "The quick brown fox", "max_tokens": max_tokens, "stream": True,
                               "ignore_eos": True, "temperature": 0.8})
            t0 = time.perf_counter()
            conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status >= 500:
                with lock:
                    stats["5xx"] += 1
                resp.read()
                continue
            if resp.status != 200:
                with lock:
                    stats["other_status"][resp.status] = stats["other_status"].get(resp.status, 0) + 1
                resp.read()
                continue
            last = None
            ttft = None
            itls = []
            buf = b""
            done = False
            while not done:
                chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
                if not chunk:
                    break
                buf += chunk
                while b"\n\n" in buf:
                    ev, buf = buf.split(b"\n\n", 1)
                    if ev == b"data: [DONE]":
                        done = True
                        break
                    now = time.perf_counter()
                    if ttft is None:
                        ttft = now - t0
                    elif last is not None:
                        itls.append(now - last)
                    last = now
            resp.read()  # the chunked terminator, so the connection can be reused
            with lock:
                stats["requests"] += 1
                if ttft is not None:
                    stats["ttft"].append(ttft)
                stats["itl"].extend(itls)
        except Exception as e:  # noqa: BLE001 - counted and reported
            with lock:
                stats["errors"] += 1
                stats["last_error"] = repr(e)
            conn = None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin/strata")
    ap.add_argument("--url", default="", help="host:port of a running server (else one is started)")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("server_args", nargs="*")
    a = ap.parse_args()
    proc = None
    if a.url:
        host, port = a.url.split(":")
        port = int(port)
    else:
        proc = subprocess.Popen([a.bin, "serve", "--port", "0", "--max-num-seqs", str(a.clients)] + a.server_args,
                                stdout=subprocess.PIPE, text=True)
        host = "127.0.0.1"
        port = None
        for line in proc.stdout:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
            if port is not None and "strata serve: ready" in line:
                break
        if port is None:
            sys.exit("server did not start")
    stats = {"requests": 0, "5xx": 0, "errors": 0, "ttft": [], "itl": [], "other_status": {}, "last_error": ""}
    lock = threading.Lock()
    rss = [rss_kib(proc.pid)] if proc else []
    stop_at = time.time() + a.seconds
    threads = [threading.Thread(target=client, args=(host, port, stop_at, stats, lock, a.max_tokens))
               for _ in range(a.clients)]
    for t in threads:
        t.start()
    if proc:
        time.sleep(a.seconds / 2)
        rss.append(rss_kib(proc.pid))
    for t in threads:
        t.join()
    if proc:
        rss.append(rss_kib(proc.pid))
        proc.terminate()
        rc = proc.wait(timeout=60)
    ms = lambda x: f"{x * 1000:.1f} ms"
    print(f"clients {a.clients}, {a.seconds:.0f} s: {stats['requests']} requests, 5xx {stats['5xx']}, "
          f"client errors {stats['errors']} {stats['last_error']}, other statuses {stats['other_status']}")
    print(f"TTFT p50 {ms(pct(stats['ttft'], 50))} p99 {ms(pct(stats['ttft'], 99))}; "
          f"ITL p50 {ms(pct(stats['itl'], 50))} p99 {ms(pct(stats['itl'], 99))}; tokens {len(stats['itl']) + len(stats['ttft'])}")
    if proc:
        print(f"server RSS KiB start/middle/end: {rss}; exit code after SIGTERM: {rc}")
    sys.exit(0 if stats["5xx"] == 0 and (not proc or rc == 0) else 1)


if __name__ == "__main__":
    main()
