#!/usr/bin/env bash
# `lucent serve` against llama.cpp's `llama-server`, side by side on loopback: the same
# GGUF, threads and slots; scripts/bench_serve.py drives both, rounds interleaved, with
# 1, 4, 8 and 16 concurrent clients (each a 128-token prompt and 128 greedy tokens).
#
#   scripts/bench-serve-peer.sh [MODEL] [THREADS] [SLOTS] [ROUNDS]
#     MODEL: a known name (default smollm2) whose GGUF is in ~/.cache/lucent/models
#     THREADS: default 2; SLOTS: default 16; ROUNDS: default 3
#
# Builds llama-server first if needed (scripts/build-llama-server.sh, outside the repo)
# and `lucent` (target/release). Both servers bind 127.0.0.1 and stop by themselves:
# lucent after --exit-after, llama-server under `timeout`, both killed on exit.
# Results: printed, and as JSON in target/bench-serve-peer.json.
set -euo pipefail
MODEL="${1:-smollm2}"
THREADS="${2:-2}"
SLOTS="${3:-16}"
ROUNDS="${4:-3}"
LIMIT=1800 # seconds either server may live
HERE="$(cd "$(dirname "$0")/.." && pwd)"
GGUF="$(ls "$HOME/.cache/lucent/models/$MODEL"/*.gguf | head -1)"
LLAMA="$("$HERE/scripts/build-llama-server.sh")"
(cd "$HERE" && cargo build --release -q -p lucent-cli)
LUCENT="$HERE/target/release/lucent"
DIR="$(mktemp -d /tmp/lucent-bench-serve.XXXXXX)"
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT

# Per slot: the prompt and the answer, and room (llama-server's -c is over all slots).
PER_SLOT=512
"$LUCENT" --threads "$THREADS" serve -m "$MODEL" --port 8091 --parallel "$SLOTS" \
  --ctx-size "$PER_SLOT" --max-queue 64 --exit-after "$LIMIT" 2> "$DIR/lucent.log" &
timeout "$LIMIT" "$LLAMA" -m "$GGUF" --host 127.0.0.1 --port 8092 -t "$THREADS" -tb "$THREADS" \
  -np "$SLOTS" -c $((PER_SLOT * SLOTS)) > "$DIR/llama.log" 2>&1 &

for port in 8091 8092; do
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
    sleep 0.2
  done
  curl -sf "http://127.0.0.1:$port/health" > /dev/null || { echo "server on $port not ready (logs in $DIR)"; exit 1; }
done
echo "$MODEL ($GGUF), $THREADS threads, $SLOTS slots; $(date -u +%FT%TZ), lucent $(git -C "$HERE" rev-parse --short HEAD)"
python3 "$HERE/scripts/bench_serve.py" --model "$MODEL" \
  --server "lucent=http://127.0.0.1:8091" --server "llama-server=http://127.0.0.1:8092" \
  --clients 1 4 8 16 --rounds "$ROUNDS" --json "$HERE/target/bench-serve-peer.json"
