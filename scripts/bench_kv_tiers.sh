#!/usr/bin/env bash
# Benchmarks the tiered KV cache with `strata bench serve` (issue 7): the same workloads against
# `strata serve` with tiers off / L2 (RAM) / L2+L3 (RAM+disk) / L2+L3+L4 (RAM+disk+Redis), and
# after a warm restart (L2+L3: a first server fills the disk tier and is stopped with SIGTERM; a
# second one on the same directory runs the workload). The KV pool is deliberately small so the
# working set does not fit in it.
#
# Usage: scripts/bench_kv_tiers.sh MODEL.gguf OUT_DIR [extra `bench serve` multi-turn options]
# Environment: STRATA_BIN (default build/bin/strata), POOL (KV pool, default 48MiB), THREADS (2), PORT (18400), MAXLEN (1024),
#              MT_OPTS (multi-turn dataset options), RANDOM_OPTS (no-reuse workload options).
# Prints a table and writes OUT_DIR/<workload>-<config>.json (workload: multiturn | random) (bench serve --json reports).
set -euo pipefail
model=${1:?model}
out=${2:?out dir}
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${STRATA_BIN:-$root/build/bin/strata}"
pool=${POOL:-48MiB}
threads=${THREADS:-2}
port=${PORT:-18400}
maxlen=${MAXLEN:-1024}
mt_opts=${MT_OPTS:---mt-num-conversations 16 --mt-turns 6 --mt-user-len 64 --mt-output-len 16 --mt-think-time-s 2 --max-concurrency 16}
random_opts=${RANDOM_OPTS:---num-prompts 32 --random-input-len 256 --random-output-len 16 --max-concurrency 4}
mkdir -p "$out"
work="$(mktemp -d)"
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$work"' EXIT

redis_port=$((port + 50))
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --loglevel warning >/dev/null &
redis_pid=$!
for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done

serve() {  # serve NAME [flags...]: starts strata serve in the background, waits until ready
  local name=$1
  shift
  "$bin" serve -m "$model" --port "$port" -t "$threads" --kv-cache-memory "$pool" --max-model-len "$maxlen" "$@" \
    >"$work/$name.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do grep -q "strata serve: ready" "$work/$name.log" && return 0; sleep 0.1; done
  echo "server $name did not start:" >&2
  cat "$work/$name.log" >&2
  exit 1
}
stop() {
  kill -TERM "$server_pid"
  wait "$server_pid" || true
}
bench() {  # bench WORKLOAD CONFIG [dataset options...]
  local workload=$1 config=$2
  shift 2
  "$bin" bench serve --base-url "http://127.0.0.1:$port" --no-progress --json "$out/$workload-$config.json" "$@" \
    >"$out/$workload-$config.txt" 2>&1
  curl -s "http://127.0.0.1:$port/metrics" | grep -E '^strata:(prefix_cache_pool_hits_total|kv_tier_hit_tokens_total|prefix_cache_queries_total)' \
    >"$out/$workload-$config.metrics" || true
}

declare -A flags=(
  [off]=""
  [L2]="--kv-tier-ram 1GiB"
  [L2+L3]="--kv-tier-ram 1GiB --kv-tier-disk $work/disk-L2L3 --kv-tier-disk-size 4GiB"
  [L2+L3+L4]="--kv-tier-ram 1GiB --kv-tier-disk $work/disk-L2L3L4 --kv-tier-disk-size 4GiB --kv-tier-redis redis://127.0.0.1:$redis_port"
)
for config in off L2 L2+L3 L2+L3+L4; do
  # shellcheck disable=SC2086
  serve "$config" ${flags[$config]}
  # shellcheck disable=SC2086
  bench multiturn "$config" --dataset multi-turn $mt_opts --seed 1
  # shellcheck disable=SC2086
  bench random "$config" --dataset random $random_opts --seed 2
  stop
done

# Warm restart: fill the disk tier, SIGTERM (the pool and RAM tier are persisted), restart, rerun.
serve warm-fill --kv-tier-ram 1GiB --kv-tier-disk "$work/disk-warm" --kv-tier-disk-size 4GiB
# shellcheck disable=SC2086
bench multiturn warm-fill --dataset multi-turn $mt_opts --seed 1
stop
serve warm --kv-tier-ram 1GiB --kv-tier-disk "$work/disk-warm" --kv-tier-disk-size 4GiB
# shellcheck disable=SC2086
bench multiturn warm-restart --dataset multi-turn $mt_opts --seed 1
stop
kill "$redis_pid" 2>/dev/null || true

printf '%-10s %-14s %12s %12s %12s %12s %16s %16s\n' workload config "TTFT p50 ms" "TTFT p99 ms" "out tok/s" "req/s" "pool hit tok" "tier hit tok"
for f in "$out"/*.json; do
  b=$(basename "$f" .json)
  workload=${b%%-*}
  config=${b#*-}
  python3 - "$f" "$out/$b.metrics" "$workload" "$config" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
m = {}
try:
    for line in open(sys.argv[2]):
        name = line.split('{')[0].split(' ')[0]
        m[name] = float(line.rsplit(' ', 1)[1])
except FileNotFoundError:
    pass
def get(*keys):
    v = r
    for k in keys:
        v = v.get(k, {}) if isinstance(v, dict) else {}
    return v if isinstance(v, (int, float)) else float('nan')
print('%-10s %-14s %12.1f %12.1f %12.2f %12.3f %16d %16d' % (
    sys.argv[3], sys.argv[4], get('ttft_ms', 'median'), get('ttft_ms', 'p99'), get('output_throughput'),
    get('request_throughput'), m.get('strata:prefix_cache_pool_hits_total', 0), m.get('strata:kv_tier_hit_tokens_total', 0)))
EOF
done
