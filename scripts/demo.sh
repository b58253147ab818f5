#!/usr/bin/env bash
# The README's main job: generate with the bundled default model, then start `strata serve` on it,
# send a completion request (streamed) and a model listing, and shut the server down (SIGTERM drain).
# Run after the build. Needs only curl (installed by scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${STRATA_BIN:-build/bin/strata}

echo "== strata generate (bundled default model) =="
"$BIN" generate -p "Once upon a time" -n 48 --seed 1

echo "== strata serve (bundled default model) =="
log=$(mktemp)
"$BIN" serve --port 0 > "$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
url=""
for _ in $(seq 1 200); do
  url=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$log" | head -n1 || true)
  if [ -n "$url" ] && curl -sf "$url/ready" > /dev/null 2>&1; then break; fi
  sleep 0.1
done
[ -n "$url" ] || { echo "server did not start:"; cat "$log"; exit 1; }
echo "server ready at $url"
echo "\$ curl $url/v1/models"
curl -s "$url/v1/models"; echo
echo "\$ curl $url/v1/completions -d '{\"prompt\":\"Once upon a time\",\"max_tokens\":24,\"stream\":true,\"seed\":1}'"
curl -sN "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"Once upon a time","max_tokens":24,"stream":true,"seed":1}'
echo
kill -TERM "$pid"
wait "$pid" && echo "server drained and exited 0"
