#!/usr/bin/env bash
# `lucent serve` against llama.cpp's `llama-server`, side by side on loopback: the same
# GGUF, threads and slots; scripts/bench_serve.py drives both, rounds interleaved, with
# 1, 4, 8 and 16 concurrent clients (each a 128-token prompt and 128 greedy tokens).
#
#   scripts/bench-serve-peer.sh [MODEL] [THREADS] [SLOTS] [ROUNDS] [MODE]
#     MODEL: a known name (default smollm2) whose GGUF is in ~/.cache/lucent/models
#     THREADS: default 2; SLOTS: default 16; ROUNDS: default 3
#     MODE: `plain` (default) or `shared-prefix`: the prompt-cache benchmark, 8 clients
#       (SLOTS default 8), each request a shared PREFIX-token system prompt (default
#       1000) + its own QUESTION-token question (default 100), MAX_TOKENS out (default
#       128), cache_prompt: true; three servers: lucent (its prompt cache on), lucent
#       --cache-ram 0 (port 8093) and llama-server. PREFIX, QUESTION, MAX_TOKENS and
#       CLIENTS come from the environment (small numbers for a smoke run).
#       LLAMA_SERVER=none leaves llama-server out.
#     PRECISION (environment): the precision of lucent's products (`lucent serve
#       --precision`: exact, bf16 or int8; default exact), e.g.
#       PRECISION=int8 scripts/bench-serve-peer.sh smollm2 2 16 3
#
# Builds llama-server first if needed (scripts/build-llama-server.sh, outside the repo)
# and `lucent` (target/release). Both servers bind 127.0.0.1 and stop by themselves:
# lucent after --exit-after, llama-server under `timeout`, both killed on exit.
# Results: printed, and as JSON in target/bench-serve-peer.json.
set -euo pipefail
MODEL="${1:-smollm2}"
THREADS="${2:-2}"
MODE="${5:-plain}"
if [ "$MODE" = shared-prefix ]; then SLOTS="${3:-8}"; else SLOTS="${3:-16}"; fi
ROUNDS="${4:-3}"
PREFIX="${PREFIX:-1000}"
QUESTION="${QUESTION:-100}"
MAX_TOKENS="${MAX_TOKENS:-128}"
CLIENTS="${CLIENTS:-8}"
LIMIT=1800 # seconds either server may live
HERE="$(cd "$(dirname "$0")/.." && pwd)"
GGUF="$(ls "$HOME/.cache/lucent/models/$MODEL"/*.gguf | head -1)"
if [ "${LLAMA_SERVER:-}" = none ]; then LLAMA=""; else LLAMA="$("$HERE/scripts/build-llama-server.sh")"; fi
(cd "$HERE" && cargo build --release -q -p lucent-cli)
LUCENT="$HERE/target/release/lucent"
DIR="$(mktemp -d /tmp/lucent-bench-serve.XXXXXX)"
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT

# Per slot: the prompt and the answer, and room (llama-server's -c is over all slots).
PER_SLOT=512
if [ "$MODE" = shared-prefix ]; then PER_SLOT=$(( (PREFIX + QUESTION + MAX_TOKENS + 255) / 256 * 256 )); fi
PRECISION="${PRECISION:-exact}"
"$LUCENT" --threads "$THREADS" serve -m "$MODEL" --port 8091 --parallel "$SLOTS" --precision "$PRECISION" \
  --ctx-size "$PER_SLOT" --max-queue 64 --exit-after "$LIMIT" 2> "$DIR/lucent.log" &
PORTS="8091"
SERVERS=(--server "lucent=http://127.0.0.1:8091")
if [ "$MODE" = shared-prefix ]; then
  "$LUCENT" --threads "$THREADS" serve -m "$MODEL" --port 8093 --parallel "$SLOTS" --cache-ram 0 --precision "$PRECISION" \
    --ctx-size "$PER_SLOT" --max-queue 64 --exit-after "$LIMIT" 2> "$DIR/lucent-nocache.log" &
  PORTS="$PORTS 8093"
  SERVERS+=(--server "lucent-no-cache=http://127.0.0.1:8093")
fi
if [ -n "$LLAMA" ]; then
  timeout "$LIMIT" "$LLAMA" -m "$GGUF" --host 127.0.0.1 --port 8092 -t "$THREADS" -tb "$THREADS" \
    -np "$SLOTS" -c $((PER_SLOT * SLOTS)) > "$DIR/llama.log" 2>&1 &
  PORTS="$PORTS 8092"
  SERVERS+=(--server "llama-server=http://127.0.0.1:8092")
fi

for port in $PORTS; do
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
    sleep 0.2
  done
  curl -sf "http://127.0.0.1:$port/health" > /dev/null || { echo "server on $port not ready (logs in $DIR)"; exit 1; }
done
echo "$MODEL ($GGUF), $THREADS threads, $SLOTS slots; $(date -u +%FT%TZ), lucent $(git -C "$HERE" rev-parse --short HEAD)"
if [ "$MODE" = shared-prefix ]; then
  echo "shared prefix: $CLIENTS clients, $PREFIX + $QUESTION prompt tokens, $MAX_TOKENS out"
  python3 "$HERE/scripts/bench_serve.py" --model "$MODEL" "${SERVERS[@]}" \
    --clients "$CLIENTS" --rounds "$ROUNDS" --shared-prefix "$PREFIX" \
    --prompt-tokens "$QUESTION" --max-tokens "$MAX_TOKENS" \
    --json "$HERE/target/bench-serve-prompt-cache.json"
  curl -s http://127.0.0.1:8091/metrics | grep '^lucent_prompt_' || true
else
  python3 "$HERE/scripts/bench_serve.py" --model "$MODEL" "${SERVERS[@]}" \
    --clients 1 4 8 16 --rounds "$ROUNDS" --json "$HERE/target/bench-serve-peer.json"
fi
