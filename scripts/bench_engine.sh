#!/bin/bash
# The issue-4 engine figures of docs/perf.md: for each model, single-sequence decode (bench model),
# the anchor workload at 1/8/16 concurrent sequences, the shared-prefix workload (warm, cold, off)
# and preemption with and without a RAM tier. Every configuration --reps 3; JSON per run in $OUT.
#   STRATA_BIN=build/bin/strata MODELS="/m/135m-q8_0.gguf /m/1b-q8_0.gguf" OUT=/tmp/engine scripts/bench_engine.sh
set -eu
S=${STRATA_BIN:-build/bin/strata}
OUT=${OUT:-bench-engine}
MODELS=${MODELS:?set MODELS to one or more GGUF files}
mkdir -p "$OUT"
for path in $MODELS; do
  m=$(basename "$path" .gguf)
  "$S" bench model -m "$path" --pp 128 --tg 128 -t 2 --reps 3 > "$OUT/model-$m.txt"
  for s in 16 8 1; do
    "$S" bench offline -m "$path" --num-prompts 16 --input-len 128 --output-len 64 --max-num-seqs $s -t 2 \
      --reps 3 --json > "$OUT/off-$m-s$s.json"
  done
  sp="--num-prompts 16 --input-len 32 --shared-prefix 1024 --output-len 16 --max-num-seqs 16 -t 2"
  "$S" bench offline -m "$path" $sp --warmup 1 --reps 3 --json > "$OUT/sp-$m-warm.json"
  for r in 1 2 3; do "$S" bench offline -m "$path" $sp --seed $r --json > "$OUT/sp-$m-cold$r.json"; done
  "$S" bench offline -m "$path" $sp --reps 3 --no-prefix-cache --json > "$OUT/sp-$m-off.json"
  pre="--num-prompts 16 --input-len 128 --output-len 64 --max-num-seqs 16 -t 2 --kv-cache-memory 64MiB --reps 3"
  "$S" bench offline -m "$path" $pre --json > "$OUT/pre-$m-recompute.json"
  "$S" bench offline -m "$path" $pre --kv-tier-ram 1GiB --json > "$OUT/pre-$m-ram.json"
done
echo "results in $OUT"
