#!/usr/bin/env python3
"""Benchmarks `strata gateway` with `strata bench serve` — the figures of the gateway issue.

Starts N fresh `strata serve` replicas of one model on 127.0.0.1 (cold caches for every run),
`strata gateway` in front with a chosen balancer policy, runs `strata bench serve` through it,
and reads the replicas' and the gateway's /metrics. Runs are interleaved (cost, baseline, cost,
...) and every figure is the median of --reps runs. Prints the CPU with the figures.

Scenarios:
  shared-prefix  G groups x Q questions on S-token system prompts: TTFT p90 and prefix hit rate,
                 cost router vs round robin (target: ratio <= 1/3, hit rate >= 80 %)
  random         random prompts without a shared prefix: max/min requests per replica (<= 1.2)
  one-prompt     one system prompt shared by every request: max replica load / mean (<= 1.5)
  kill           kill -9 of one replica during a run: failed requests that had not started
                 streaming (target 0), time to ejection (target <= 1 s), readmission
  overhead       TTFT through the gateway vs direct to the replica, one request at a time
  tracing        throughput through the gateway with tracing off vs on at 100 % sampling (an
                 in-script OTLP/HTTP sink on 127.0.0.1 takes the spans; the replicas export too
                 when `strata serve` has --otlp-endpoint); target: <= 2 % lower
  tracing-instructions
                 the same as instructions per request of the gateway and replicas under
                 valgrind's callgrind (needs valgrind): a figure the machine's noise cannot move
  tracing-side-by-side
                 both modes at once, one cluster each, sharing the CPUs: the throughput ratio
                 over the same window (--duration seconds), so outside load slows both alike

Usage: scripts/bench_gateway.py SCENARIO [--replicas N] [--reps R] [--model PATH] [--json FILE]
Python 3 standard library only; needs build/bin/strata.
"""

import argparse
import json
import os
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
STRATA = os.environ.get("STRATA_BIN") or os.path.join(ROOT, "build", "bin", "strata")
CLIENT_CPUS = ""  # --pin: the CPUs of `strata bench serve`
CALLGRIND_DIR = ""  # tracing-instructions: gateway and replicas run under callgrind, output here


def wrapped(name, args):
    """`args` as they run: under valgrind's callgrind (output CALLGRIND_DIR/NAME.cg) when set."""
    if not CALLGRIND_DIR:
        return args
    return ["valgrind", "--tool=callgrind", "--dump-instr=no", "--separate-threads=yes",
            f"--callgrind-out-file={os.path.join(CALLGRIND_DIR, name + '.cg')}"] + args


def callgrind_instructions(name):
    """(all threads, the busiest thread) instructions (Ir) of process `name` under callgrind: one
    file per thread, NAME.cg-01, NAME.cg-02, ... In a replica the busiest thread is the engine's."""
    per_thread = []
    for f in os.listdir(CALLGRIND_DIR):
        if not f.startswith(name + ".cg-"):
            continue
        with open(os.path.join(CALLGRIND_DIR, f)) as fh:
            for line in fh:
                if line.startswith(("summary:", "totals:")):
                    per_thread.append(int(line.split()[1]))
                    break
    if not per_thread:
        raise RuntimeError(f"no callgrind output for {name} in {CALLGRIND_DIR}")
    return sum(per_thread), max(per_thread)


def pin(pid, cpus):
    """Every thread of process `pid` onto `cpus` (a taskset list)."""
    subprocess.run(["taskset", "-a", "-cp", cpus, str(pid)], check=True, capture_output=True)


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
            if ready in line:
                break
            if time.time() > deadline:
                break
        if not self.port:
            raise RuntimeError(f"{args[1]} did not start; see {log}")
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for _ in self.p.stdout:
            pass

    def kill(self, sig=signal.SIGKILL):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            self.p.wait(timeout=30)
        self.log.close()


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def metric_sum(text, name, label_filter=""):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in "{ ") and label_filter in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def metric_by(text, name, label):
    out = {}
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        m = re.search(label + r'="([^"]*)"', line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(line.rsplit(" ", 1)[1])
    return out


class Cluster:
    def __init__(self, a, policy, work, ports=None, gateway_args=(), replica_args=(),
                 quiet_polls=False):
        self.work = work
        self.replicas = []
        self.replica_args = list(replica_args)
        ports = ports or [0] * a.replicas
        for i, port in enumerate(ports):
            self.replicas.append(self.start_replica(a, port, i))
        self.urls = [f"http://127.0.0.1:{r.port}" for r in self.replicas]
        cfg = os.path.join(work, "gateway.yaml")
        with open(cfg, "w") as f:
            f.write("pools:\n  - name: general\n    replicas:\n")
            for u in self.urls:
                f.write(f"      - {u}\n")
            f.write("routes:\n  - name: default\n    to: general\n")
            f.write(f"balancer:\n  policy: {policy}\n")
            f.write(f"  default_prefill_tokens_per_s: {a.prefill_rate:.0f}\n")
            if quiet_polls:  # time-driven work once a minute: see scenario_tracing_instructions
                f.write("  metrics_interval_ms: 60000\n  kv_events_interval_ms: 60000\n"
                        "health:\n  interval_ms: 60000\n  timeout_ms: 30000\n")
            else:
                f.write("health:\n  interval_ms: 200\n  timeout_ms: 500\n"
                        "  eject_after_failures: 1\n  ejection_base_ms: 500\n"
                        "  ejection_max_ms: 2000\n")
            f.write(f"access_log: {os.environ.get('STRATA_BENCH_ACCESS_LOG', 'off')}\n")
        self.gateway = Proc(wrapped("gateway", [STRATA, "gateway", "--config", cfg, "--port", "0"] +
                                    list(gateway_args)),
                            "strata gateway: ready", os.path.join(work, "gateway.log"))
        self.url = f"http://127.0.0.1:{self.gateway.port}"
        for _ in range(200):
            try:
                get(self.url + "/ready")
                break
            except Exception:
                time.sleep(0.05)
        time.sleep(1.0)  # first metrics and KV-event polls

    def start_replica(self, a, port, i):
        return Proc(wrapped(f"replica{i}", [STRATA, "serve", "--model", a.model, "--port", str(port),
                                            "--threads", "1", "--kv-cache-memory",
                                            a.kv_cache_memory] + self.replica_args),
                    "strata serve: ready", os.path.join(self.work, f"replica{i}.log"))

    def replica_metrics(self):
        return [get(u + "/metrics") for u in self.urls]

    def stop(self, replica_signal=signal.SIGKILL):
        self.gateway.kill(signal.SIGTERM)
        for r in self.replicas:
            r.kill(replica_signal)


def measure_prefill_rate(a):
    """The model's prefill rate at one thread (`strata bench model --pp 1024`), shared out when
    there are more replicas than CPUs: what the balancer's cost model is told to expect."""
    r = subprocess.run([STRATA, "bench", "model", "-m", a.model, "--pp", "1024", "--tg", "1", "-t",
                        "1", "--reps", "3"], capture_output=True, text=True, check=True)
    m = re.search(r"pp1024\s+([0-9.]+) tok/s", r.stdout)
    rate = float(m.group(1)) if m else 2000.0
    return rate * min(1.0, (os.cpu_count() or 1) / max(1, a.replicas))


def bench(url, args, work, name):
    out = os.path.join(work, name + ".json")
    cmd = [STRATA, "bench", "serve", "--base-url", url, "--no-progress", "--json", out] + args
    if CLIENT_CPUS:
        cmd = ["taskset", "-c", CLIENT_CPUS] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True)
    if not os.path.exists(out):  # a run with failed requests still writes its report
        raise RuntimeError(f"bench serve failed ({r.returncode}): {r.stderr[-2000:]}")
    with open(out) as f:
        rep = json.load(f)
    os.remove(out)
    return rep


def prefix_hit_rate(cluster):
    q = h = 0.0
    for m in cluster.replica_metrics():
        q += metric_sum(m, "strata:prefix_cache_queries_total")
        h += metric_sum(m, "strata:prefix_cache_hits_total")
    return h / q if q else 0.0


def per_replica(cluster):
    m = get(cluster.url + "/metrics")
    counts = metric_by(m, "strata_gateway:requests_total", "replica")
    return [counts.get(u, 0.0) for u in cluster.urls]


def sp_args(a, seed, groups, per_group):
    return ["--dataset", "shared-prefix", "--sp-num-groups", str(groups), "--sp-prompts-per-group",
            str(per_group), "--sp-system-prompt-len", str(a.system_prompt_len),
            "--sp-question-len", "32", "--sp-output-len", str(a.output_len), "--seed", str(seed),
            "--request-rate", str(a.rate), "--max-concurrency", str(a.concurrency)]


def scenario_shared_prefix(a, work):
    rows = {"cost": [], "round_robin": []}
    for rep in range(a.reps):
        order = ["cost", "round_robin"] if rep % 2 == 0 else ["round_robin", "cost"]
        for policy in order:
            c = Cluster(a, policy, work)
            try:
                rep_json = bench(c.url, sp_args(a, rep + 1, a.groups, a.questions), work, policy)
                rows[policy].append({"ttft_p90_ms": rep_json["ttft_ms"]["p90"],
                                     "ttft_p50_ms": rep_json["ttft_ms"]["median"],
                                     "hit_rate": prefix_hit_rate(c),
                                     "failed": rep_json.get("failed", 0)})
            finally:
                c.stop()
            print(f"  rep {rep + 1} {policy}: {rows[policy][-1]}", flush=True)
    med = {p: {k: statistics.median(r[k] for r in v) for k in v[0]} for p, v in rows.items()}
    med["ratio_ttft_p90"] = med["cost"]["ttft_p90_ms"] / max(1e-9, med["round_robin"]["ttft_p90_ms"])
    return med


def scenario_spread(a, work, groups, per_group, dataset):
    rows = []
    for rep in range(a.reps):
        c = Cluster(a, "cost", work)
        try:
            if dataset == "random":
                args = ["--dataset", "random", "--num-prompts", str(a.num_prompts),
                        "--random-input-len", "256", "--random-output-len", str(a.output_len),
                        "--seed", str(rep + 1), "--request-rate", str(a.rate),
                        "--max-concurrency", str(a.concurrency)]
            else:
                args = sp_args(a, rep + 1, groups, per_group)
            bench(c.url, args, work, dataset)
            counts = per_replica(c)
        finally:
            c.stop()
        mean = sum(counts) / len(counts)
        rows.append({"counts": counts, "max_over_min": max(counts) / max(1.0, min(counts)),
                     "max_over_mean": max(counts) / max(1e-9, mean)})
        print(f"  rep {rep + 1}: {rows[-1]}", flush=True)
    return {"runs": rows,
            "median_max_over_min": statistics.median(r["max_over_min"] for r in rows),
            "median_max_over_mean": statistics.median(r["max_over_mean"] for r in rows)}


def scenario_kill(a, work):
    rows = []
    for rep in range(a.reps):
        ports = [free_port() for _ in range(a.replicas)]
        c = Cluster(a, "cost", work, ports)
        result = {}
        try:
            args = ["--dataset", "random", "--num-prompts", "100000", "--random-input-len", "64",
                    "--random-output-len", str(a.output_len), "--seed", str(rep + 1),
                    "--request-rate", str(a.rate), "--max-concurrency", str(a.concurrency),
                    "--max-duration-s", str(a.duration)]
            out = {}
            t = threading.Thread(target=lambda: out.update(bench(c.url, args, work, "kill")))
            t.start()
            time.sleep(a.duration / 3)
            victim = c.replicas[0]
            victim.kill()
            killed = time.time()
            ejected_after = None
            pattern = f'replica_eligible{{pool="general",replica="{c.urls[0]}"}} 0'
            while time.time() - killed < 5:
                if pattern in get(c.url + "/metrics"):
                    ejected_after = time.time() - killed
                    break
                time.sleep(0.02)
            time.sleep(a.duration / 3 - (time.time() - killed))
            c.replicas[0] = c.start_replica(a, ports[0], 0)
            back = time.time()
            readmitted_after = None
            pattern_up = f'replica_eligible{{pool="general",replica="{c.urls[0]}"}} 1'
            while time.time() - back < 10:
                if pattern_up in get(c.url + "/metrics"):
                    readmitted_after = time.time() - back
                    break
                time.sleep(0.05)
            t.join()
            counts = per_replica(c)
            result = {"completed": out.get("completed"), "failed": out.get("failed"),
                      "failed_before_first_token": out.get("failed_before_first_token"),
                      "first_error": out.get("first_error"),
                      "ejected_after_s": ejected_after, "readmitted_after_s": readmitted_after,
                      "served_by_restarted_replica_total": counts[0]}
        finally:
            c.stop()
        rows.append(result)
        print(f"  rep {rep + 1}: {result}", flush=True)
    return {"runs": rows}


def scenario_overhead(a, work):
    rows = {"direct": [], "gateway": []}
    args_base = ["--dataset", "random", "--num-prompts", str(a.num_prompts), "--random-input-len",
                 "64", "--random-output-len", "8", "--max-concurrency", "1"]
    saved = a.replicas
    a.replicas = 1
    for rep in range(a.reps):
        c = Cluster(a, "cost", work)
        try:
            order = ["direct", "gateway"] if rep % 2 == 0 else ["gateway", "direct"]
            for where in order:
                url = c.urls[0] if where == "direct" else c.url
                r = bench(url, args_base + ["--seed", str(rep + 1)], work, where)
                rows[where].append({"ttft_p50_ms": r["ttft_ms"]["median"],
                                    "ttft_p99_ms": r["ttft_ms"]["p99"]})
        finally:
            c.stop()
        print(f"  rep {rep + 1}: direct {rows['direct'][-1]} gateway {rows['gateway'][-1]}",
              flush=True)
    a.replicas = saved
    med = {w: {k: statistics.median(r[k] for r in v) for k in v[0]} for w, v in rows.items()}
    med["p50_added_ms"] = med["gateway"]["ttft_p50_ms"] - med["direct"]["ttft_p50_ms"]
    med["p99_added_ms"] = med["gateway"]["ttft_p99_ms"] - med["direct"]["ttft_p99_ms"]
    return med


class OtlpSink:
    """A minimal OTLP/HTTP collector on 127.0.0.1: answers every POST /v1/traces 200 and counts
    the spans (occurrences of "spanId" at the top of each span object; no JSON parse). It shares
    the machine with what it measures, so it does as little as it can: one thread per connection
    reads the request into one reused buffer (no HTTP library, no per-request copies) and answers
    with one write (TCP_NODELAY: a reply split in two writes waited for the exporter's delayed
    ACK, ~40 ms a POST, which throttled the exporters until their queues overflowed)."""

    def __init__(self):
        import socket
        self.spans = 0
        self.requests = 0
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # stopped
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        import socket
        buf = bytearray(1 << 22)
        view = memoryview(buf)
        have = 0
        reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        try:
            while True:
                head_end = buf.find(b"\r\n\r\n", 0, have)
                if head_end < 0:
                    if have == len(buf):
                        return  # a head over 4 MiB: not an exporter
                    n = conn.recv_into(view[have:])
                    if n == 0:
                        return
                    have += n
                    continue
                m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", bytes(buf[:head_end + 2]))
                body_len = int(m.group(1)) if m else 0
                total = head_end + 4 + body_len
                if total > len(buf):  # grow (rare: bodies are a few hundred KiB)
                    view.release()
                    buf.extend(bytearray(total - len(buf)))
                    view = memoryview(buf)
                while have < total:  # the rest of the body in one call where the kernel can
                    n = conn.recv_into(view[have:total], total - have, socket.MSG_WAITALL)
                    if n == 0:
                        return
                    have += n
                spans = buf.count(b'"spanId"', head_end + 4, total)
                with self.lock:
                    self.requests += 1
                    self.spans += spans
                conn.sendall(reply)
                rest = have - total
                buf[:rest] = buf[total:have]
                have = rest
        except OSError:
            return
        finally:
            conn.close()

    def take(self):
        with self.lock:
            n, self.spans = self.spans, 0
            r, self.requests = self.requests, 0
        return n, r

    def stop(self):
        self.sock.close()


def cpu_seconds(pids):
    """utime + stime of the processes (from /proc/PID/stat), in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / tick


def thread_cpu_seconds(pids, name):
    """utime + stime of the threads called `name` (comm) of the processes, in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    if f.read().strip() != name:
                        continue
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])
    return total / tick


def engine_steps(cluster):
    """The replicas' engine steps and tokens computed so far (summed)."""
    steps = toks = 0.0
    for m in cluster.replica_metrics():
        steps += metric_sum(m, "strata:engine_steps_total")
        toks += metric_sum(m, "strata:engine_tokens_computed_total")
    return steps, toks


def serve_has_otlp():
    r = subprocess.run([STRATA, "serve", "--help"], capture_output=True, text=True)
    return "--otlp-endpoint" in r.stdout


def scenario_tracing(a, work):
    """Throughput (requests/s and output tokens/s of `strata bench serve`) through the gateway,
    tracing off vs on (100 % sampling), fresh processes for every run, order alternating."""
    sink = OtlpSink()
    replica_traces = serve_has_otlp()
    modes = a.tracing_modes.split(",")
    rows = {m: [] for m in modes}
    args_base = ["--dataset", "random", "--num-prompts", str(a.num_prompts), "--random-input-len",
                 "64", "--random-output-len", str(a.output_len), "--max-concurrency",
                 str(a.concurrency)]
    try:
        for rep in range(a.reps):
            order = modes if rep % 2 == 0 else list(reversed(modes))
            for mode in order:
                gw_args, rep_args = [], []
                if mode in ("on", "down"):  # down: a collector that refuses connections
                    url = sink.url if mode == "on" else "http://127.0.0.1:9"
                    gw_args = ["--otlp-endpoint", url, "--otlp-sample-ratio", "1"]
                    if replica_traces:
                        rep_args = ["--otlp-endpoint", url, "--otlp-sample-ratio", "1"]
                c = Cluster(a, "cost", work, gateway_args=gw_args, replica_args=rep_args)
                pids = [c.gateway.p.pid] + [x.p.pid for x in c.replicas]
                if a.pin:
                    replica_cpus, other_cpus = a.pin.split(":")
                    for x in c.replicas:
                        pin(x.p.pid, replica_cpus)
                    pin(c.gateway.p.pid, other_cpus)
                try:
                    sink.take()
                    cpu0 = cpu_seconds(pids)
                    gw0 = cpu_seconds(pids[:1])
                    ex0 = thread_cpu_seconds(pids, "strata-otlp")
                    en0 = thread_cpu_seconds(pids, "strata-engine") + thread_cpu_seconds(
                        pids, "strata-pool")
                    steps0, toks0 = engine_steps(c)
                    sink0 = time.process_time()  # this script: the sink's threads, nothing else busy
                    seed = a.seed if a.seed > 0 else rep + 1
                    r = bench(c.url, args_base + ["--seed", str(seed)], work, mode)
                    time.sleep(1.0)  # the exporters' last flush
                    cpu1 = cpu_seconds(pids)
                    gw1 = cpu_seconds(pids[:1])
                    ex1 = thread_cpu_seconds(pids, "strata-otlp")
                    en1 = thread_cpu_seconds(pids, "strata-engine") + thread_cpu_seconds(
                        pids, "strata-pool")
                    sink1 = time.process_time()
                    gm = get(c.url + "/metrics")
                    steps1, toks1 = engine_steps(c)
                    rm = c.replica_metrics()
                finally:
                    c.stop()
                spans, posts = sink.take()
                rows[mode].append({
                    "request_throughput": r["request_throughput"],
                    "output_throughput": r["output_throughput"],
                    "completed": r["completed"],
                    "median_e2el_ms": r.get("median_e2el_ms", 0.0),
                    "p99_e2el_ms": r.get("p99_e2el_ms", 0.0),
                    # CPU the gateway and replicas used per request: far less sensitive to other
                    # load on the machine than throughput.
                    "cpu_ms_per_request": 1000.0 * (cpu1 - cpu0) / max(1, r["completed"]),
                    "gateway_cpu_ms_per_request": 1000.0 * (gw1 - gw0) / max(1, r["completed"]),
                    # The OTLP exporter threads (named strata-otlp) of the gateway and replicas.
                    "export_cpu_ms_per_request": 1000.0 * (ex1 - ex0) / max(1, r["completed"]),
                    # The replicas' engine threads (strata-engine, strata-pool): the batched
                    # model work, whose cost per request follows how the batches formed.
                    "engine_cpu_ms_per_request": 1000.0 * (en1 - en0) / max(1, r["completed"]),
                    # How the replicas' batches formed: engine steps per request and the mean
                    # tokens per step (a step costs the same weights' pass whatever its size).
                    # The in-script OTLP sink (Python): CPU it takes from the same machine.
                    "sink_cpu_ms_per_request": 1000.0 * (sink1 - sink0) / max(1, r["completed"]),
                    "engine_steps_per_request": (steps1 - steps0) / max(1, r["completed"]),
                    "tokens_per_step": (toks1 - toks0) / max(1, steps1 - steps0),
                    "spans_received": spans,
                    "export_requests": posts,
                    "gateway_spans_dropped": metric_sum(
                        gm, "strata_gateway:trace_spans_dropped_total"),
                    "replica_spans_exported": sum(
                        metric_sum(m, "strata:trace_spans_exported_total") for m in rm),
                    "replica_spans_dropped": sum(
                        metric_sum(m, "strata:trace_spans_dropped_total") for m in rm),
                })
                print(f"  rep {rep + 1} {mode}: {rows[mode][-1]}", flush=True)
    finally:
        sink.stop()
    med = {m: {k: statistics.median(r[k] for r in v) for k in v[0]} for m, v in rows.items()}
    med["replicas_export"] = replica_traces
    for m in modes:
        if m == "off" or "off" not in modes:
            continue
        for k in ("request_throughput", "output_throughput"):
            med[f"{k}_cost_pct_{m}"] = 100.0 * (1 - med[m][k] / med["off"][k])
        # The same from each rep's pair of runs (adjacent in time, so a machine that drifts
        # between reps moves both): the median of the reps' ratios.
        med[f"request_throughput_paired_cost_pct_{m}"] = 100.0 * (1 - statistics.median(
            x["request_throughput"] / y["request_throughput"]
            for x, y in zip(rows[m], rows["off"])))
        med[f"cpu_per_request_cost_pct_{m}"] = 100.0 * (
            med[m]["cpu_ms_per_request"] / med["off"]["cpu_ms_per_request"] - 1)
        med[f"median_e2el_change_pct_{m}"] = 100.0 * (
            med[m]["median_e2el_ms"] / max(1e-9, med["off"]["median_e2el_ms"]) - 1)
    med["runs"] = rows
    return med


def scenario_tracing_instructions(a, work):
    """Instructions per request of the gateway and the replicas (valgrind's callgrind), tracing off
    vs on at 100 % sampling: a count that other load on the machine does not move, where
    throughput on a shared 2-vCPU host swings by more than the 2 % it is asked to resolve. Each
    mode runs twice, --num-prompts / 5 and --num-prompts requests; the difference divided by the
    difference in requests is the cost of one request (start-up and shutdown cancel). The
    gateway's polls (health, /metrics, KV events) run once a minute here: under callgrind a run
    lasts ~50x longer, and time-driven work would otherwise be counted as per-request work of
    the slower mode. The client (`strata bench serve`) and the in-script sink are not counted."""
    global CALLGRIND_DIR
    sink = OtlpSink()
    modes = a.tracing_modes.split(",")
    sizes = (max(1, a.num_prompts // 5), a.num_prompts)
    ir = {}
    try:
        for mode in modes:
            for n in sizes:
                CALLGRIND_DIR = os.path.join(work, f"cg-{mode}-{n}")
                os.makedirs(CALLGRIND_DIR, exist_ok=True)
                args = ["--otlp-endpoint", sink.url, "--otlp-sample-ratio", "1"] if mode == "on" else []
                c = Cluster(a, "cost", work, gateway_args=args, replica_args=args, quiet_polls=True)
                try:
                    sink.take()
                    r = bench(c.url, ["--dataset", "random", "--num-prompts", str(n),
                                      "--random-input-len", "64", "--random-output-len",
                                      str(a.output_len), "--max-concurrency", str(a.concurrency),
                                      "--seed", str(max(1, a.seed))], work, mode)
                    time.sleep(1.0)  # the exporters' last flush
                finally:
                    c.stop(replica_signal=signal.SIGTERM)  # callgrind writes its file at exit
                spans, _ = sink.take()
                if r["completed"] != n:
                    raise RuntimeError(f"{mode}, {n} requests: {r['completed']} completed")
                gw, _ = callgrind_instructions("gateway")
                rp = en = 0
                for i in range(a.replicas):
                    total, engine = callgrind_instructions(f"replica{i}")
                    rp += total
                    en += engine
                ir[(mode, n)] = (gw, rp, en)
                print(f"  {mode}, {n} requests: gateway {gw / 1e6:.1f} M, replicas {rp / 1e6:.1f} M "
                      f"(engine threads {en / 1e6:.1f} M) instructions, {spans} spans received",
                      flush=True)
    finally:
        CALLGRIND_DIR = ""
        sink.stop()
    # The engine threads' work per request follows how the batches formed (timing: +-1.5 %
    # between runs of one mode), and tracing adds none to it (the engine thread never builds or
    # exports spans), so the cost is also given against the same engine work in both modes:
    # `excluding_engine` (gateway + the replicas' other threads), and
    # `with_engine_of_off` (that plus the off runs' engine work: the whole, without the noise).
    out = {}
    dn = sizes[1] - sizes[0]
    for mode in modes:
        (g0, r0, e0), (g1, r1, e1) = ir[(mode, sizes[0])], ir[(mode, sizes[1])]
        out[mode] = {"gateway_instructions_per_request": (g1 - g0) / dn,
                     "replica_instructions_per_request": (r1 - r0) / dn,
                     "replica_engine_instructions_per_request": (e1 - e0) / dn,
                     "instructions_per_request": (g1 + r1 - g0 - r0) / dn,
                     "excluding_engine_instructions_per_request": (g1 + r1 - e1 - g0 - r0 + e0) / dn}
    if "off" in modes:
        for mode in modes:
            out[mode]["with_engine_of_off_instructions_per_request"] = (
                out[mode]["excluding_engine_instructions_per_request"] +
                out["off"]["replica_engine_instructions_per_request"])
    for mode in modes:
        if mode != "off" and "off" in modes:
            for k in ("gateway_instructions_per_request", "replica_instructions_per_request",
                      "instructions_per_request", "excluding_engine_instructions_per_request",
                      "with_engine_of_off_instructions_per_request"):
                out[f"{k.replace('_per_request', '')}_cost_pct_{mode}"] = 100.0 * (
                    out[mode][k] / out["off"][k] - 1)
    return out


def scenario_tracing_side_by_side(a, work):
    """Two clusters at once, one per mode (e.g. off,on; off,off measures the method's own spread),
    each with its own gateway, replica and client, sharing the machine: with --pin the replicas
    share the first CPU list and the gateways and clients the second. Load from outside (a
    neighbour on the host, frequency changes) then slows both alike, where runs one after the
    other see different moments of it. Each mode's throughput is its gateway's completed
    requests over the same window (after a warm-up); the figure is the ratio, second mode over
    first, median over --reps, with the modes' start order alternating. A cluster whose
    requests cost more CPU gets fewer of them through when the CPUs are shared, so the ratio
    reads the cost as throughput."""
    sink = OtlpSink()
    modes = a.tracing_modes.split(",")
    if len(modes) != 2:
        raise RuntimeError("tracing-side-by-side compares exactly two modes, e.g. off,on")
    warmup, window = 2.0, a.duration
    ratios = []
    try:
        for rep in range(a.reps):
            order = [0, 1] if rep % 2 == 0 else [1, 0]
            clusters = [None, None]
            clients = []
            try:
                for i in order:
                    d = os.path.join(work, f"cluster{i}")
                    os.makedirs(d, exist_ok=True)
                    args = (["--otlp-endpoint", sink.url, "--otlp-sample-ratio", "1"]
                            if modes[i] == "on" else [])
                    c = Cluster(a, "cost", d, gateway_args=args, replica_args=args)
                    clusters[i] = c
                    if a.pin:
                        replica_cpus, other_cpus = a.pin.split(":")
                        for x in c.replicas:
                            pin(x.p.pid, replica_cpus)
                        pin(c.gateway.p.pid, other_cpus)
                for i in order:
                    cmd = [STRATA, "bench", "serve", "--base-url", clusters[i].url, "--no-progress",
                           "--dataset", "random",
                           "--num-prompts", str(int(3000 * (warmup + window + 5))),
                           "--random-input-len", "64", "--random-output-len", str(a.output_len),
                           "--max-concurrency", str(a.concurrency), "--seed", str(rep + 1),
                           "--max-duration-s", str(warmup + window + 30)]
                    if CLIENT_CPUS:
                        cmd = ["taskset", "-c", CLIENT_CPUS] + cmd
                    clients.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                                    stderr=subprocess.DEVNULL))
                time.sleep(warmup)
                done0 = [metric_sum(get(c.url + "/metrics"), "strata_gateway:requests_total")
                         for c in clusters]
                t0 = time.time()
                time.sleep(window)
                done1 = [metric_sum(get(c.url + "/metrics"), "strata_gateway:requests_total")
                         for c in clusters]
                t1 = time.time()
            finally:
                for p in clients:
                    p.kill()
                    p.wait()
                for c in clusters:
                    if c:
                        c.stop()
            rates = [(y - x) / (t1 - t0) for x, y in zip(done0, done1)]
            ratios.append(rates[1] / rates[0])
            print(f"  rep {rep + 1}: {modes[0]} {rates[0]:.1f} req/s, {modes[1]} {rates[1]:.1f} req/s,"
                  f" ratio {ratios[-1]:.4f}", flush=True)
    finally:
        sink.stop()
    return {"modes": modes, "ratios": ratios, "median_ratio": statistics.median(ratios),
            f"request_throughput_cost_pct_{modes[1]}": 100.0 * (1 - statistics.median(ratios))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("scenario",
                    choices=["shared-prefix", "random", "one-prompt", "kill", "overhead", "tracing",
                             "tracing-instructions", "tracing-side-by-side"])
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--model", default=os.path.join(ROOT, "build", "models", "strata-tiny.gguf"))
    ap.add_argument("--kv-cache-memory", default="64MiB")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--questions", type=int, default=16)
    ap.add_argument("--system-prompt-len", type=int, default=1024)
    ap.add_argument("--output-len", type=int, default=16)
    ap.add_argument("--num-prompts", type=int, default=200)
    ap.add_argument("--rate", default="inf")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--json", help="write the figures here too")
    ap.add_argument("--seed", type=int, default=0,
                    help="tracing: the prompts' seed of every run (0: the rep's number, 1, 2, ...)")
    ap.add_argument("--pin", default="",
                    help="tracing: REPLICA_CPUS:OTHER_CPUS (taskset lists), e.g. 0:1 — the replicas "
                         "on the first, the gateway and the client on the second; steadier figures "
                         "on a machine of few cores, where the scheduler's placement otherwise "
                         "moves throughput by +-20 %% between runs")
    ap.add_argument("--tracing-modes", default="off,on",
                    help="tracing: modes to compare, of off, on (100 %% sampling to a sink), "
                         "down (100 %% sampling to a collector that refuses connections)")
    ap.add_argument("--prefill-rate", type=float, default=0,
                    help="balancer.default_prefill_tokens_per_s (0: measure the model)")
    a = ap.parse_args()
    global CLIENT_CPUS
    if a.pin and (a.pin.count(":") != 1 or not all(a.pin.split(":"))):
        ap.error(f"--pin: expected REPLICA_CPUS:OTHER_CPUS (taskset lists, e.g. 0:1), got {a.pin!r}")
    CLIENT_CPUS = a.pin.split(":")[1] if a.pin else ""
    if a.prefill_rate <= 0:
        a.prefill_rate = measure_prefill_rate(a)
    print(f"CPU: {cpu_name()}; model {a.model}; {a.replicas} replicas; {a.reps} reps; "
          f"prefill rate given to the balancer {a.prefill_rate:.0f} tok/s", flush=True)
    with tempfile.TemporaryDirectory(prefix="strata-bench-gw-") as work:
        if a.scenario == "shared-prefix":
            res = scenario_shared_prefix(a, work)
        elif a.scenario == "random":
            res = scenario_spread(a, work, 0, 0, "random")
        elif a.scenario == "one-prompt":
            res = scenario_spread(a, work, 1, a.num_prompts, "shared-prefix")
        elif a.scenario == "kill":
            res = scenario_kill(a, work)
        elif a.scenario == "tracing":
            res = scenario_tracing(a, work)
        elif a.scenario == "tracing-instructions":
            res = scenario_tracing_instructions(a, work)
        elif a.scenario == "tracing-side-by-side":
            res = scenario_tracing_side_by_side(a, work)
        else:
            res = scenario_overhead(a, work)
    res = {"scenario": a.scenario, "cpu": cpu_name(), "args": vars(a), "result": res}
    print(json.dumps(res, indent=2))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
