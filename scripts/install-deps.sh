#!/usr/bin/env bash
# Installs every build/test dependency of Strata from Debian 12 packages. Idempotent: re-running
# it installs nothing new. Must run as root (or via sudo) on Debian 12.
set -euo pipefail

PACKAGES=(
  cmake ninja-build g++ pkg-config git ca-certificates
  clang lld libclang-rt-14-dev            # libFuzzer targets (fuzz preset)
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev
  libpcre2-dev                            # Unicode regexes of the BPE pre-tokenizers
  libssl-dev                              # SHA-256 for prefix-cache block keys
  libboost-dev                            # Boost.Asio/Beast (header-only) for strata serve
  curl                                    # the README demo talks to strata serve
  libhiredis-dev redis-server             # tiered KV cache: Redis tier (tests start a real redis-server)
  libyaml-cpp-dev                         # tiered KV cache: YAML config file
  liblz4-dev libzstd-dev libxxhash-dev    # tiered KV cache: block compression and checksums
  clang-format clang-tidy                 # .ci/run: scripts/check-style.sh (changed files)
  graphviz                                # scripts/module-graph.sh renders docs/module-graph.svg
  python3                                 # scripts/check-layers.py, check-thread-safety.py
  prometheus                              # promtool: metrics_compat_test checks the /metrics text
  chromium                                # control_ui_test opens the gateway's /ui headless
)
# kubectl (k8s_render_test runs `kubectl kustomize`): Debian's kubernetes-client unless a kubectl
# from elsewhere is on PATH already.
if ! command -v kubectl > /dev/null 2>&1; then PACKAGES+=(kubernetes-client); fi
# Node.js and npm (Debian's nodejs, npm) for the official OpenAI SDK test and the GGUF-interop test.
# Checked by command, not by package: a machine whose node comes from another packaging of Node.js
# (which bundles npm) already has both, and installing Debian's npm beside it would conflict.
if ! command -v node > /dev/null 2>&1; then PACKAGES+=(nodejs); fi
if ! command -v npm > /dev/null 2>&1; then PACKAGES+=(npm); fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} Debian packages present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "install-deps: installing ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# npm packages of the client/interop tests, locked by their package-lock.json: the official OpenAI
# Node SDK (tests/integration/openai_client), Hugging Face's GGUF parser
# (tests/integration/gguf_interop) and the Kubernetes/KEDA/prometheus-operator schemas
# (kubernetes-models, tests/k8s), installed into each test's node_modules/ (git-ignored), where the
# tests look for them. `npm ci` needs npm's registry at install time only; it runs again when the
# lockfile is newer than the installed tree (npm writes node_modules/.package-lock.json).
root="$(cd "$(dirname "$0")/.." && pwd)"
for dir in "$root/tests/integration/openai_client" "$root/tests/integration/gguf_interop" \
           "$root/tests/k8s"; do
  [ -f "$dir/package-lock.json" ] || continue
  if [ ! -f "$dir/node_modules/.package-lock.json" ] ||
     [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
done
echo "install-deps: npm test clients present ($(node --version), npm $(npm --version))"
