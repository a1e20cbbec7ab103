#!/usr/bin/env bash
# What constrained decoding (`response_format: json_schema`) costs in `lucent serve`:
# one server (the model, 8 slots, THREADS threads), scripts/bench_constrain.py
# alternating free and constrained rounds of the same greedy requests (the same tokens
# out, checked) at 1 and 8 clients; medians, the ratio constrained / free.
#
#   scripts/bench-constrain.sh [MODEL] [THREADS] [ROUNDS]
#     MODEL: a known name (default smollm2); THREADS: default 2; ROUNDS: default 5
#   CACHE_RAM=0 (default): the prompt cache off, so every request reads its prompt and
#     the generated tok/s include the prompts' time; CACHE_RAM=1GiB: the rounds repeat
#     the same prompts, so after the first they read only their last few tokens and
#     the time is nearly all decoding, where the mask's cost shows most.
#   WORDS=24 (default): words per copied document (about 3 tokens each; the answer).
#
# Builds `lucent` (target/release). The server binds 127.0.0.1:8094 and stops by
# itself (--exit-after), killed on exit. Results: printed, and as JSON in
# target/bench-constrain.json.
set -euo pipefail
MODEL="${1:-smollm2}"
THREADS="${2:-2}"
ROUNDS="${3:-5}"
LIMIT=1200 # seconds the server may live
HERE="$(cd "$(dirname "$0")/.." && pwd)"
(cd "$HERE" && cargo build --release -q -p lucent-cli)
LUCENT="$HERE/target/release/lucent"
DIR="$(mktemp -d /tmp/lucent-bench-constrain.XXXXXX)"
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
"$LUCENT" --threads "$THREADS" serve -m "$MODEL" --port 8094 --parallel 8 --ctx-size 1024 \
  --cache-ram "${CACHE_RAM:-0}" --exit-after "$LIMIT" 2> "$DIR/lucent.log" &
for _ in $(seq 1 600); do
  curl -sf http://127.0.0.1:8094/health > /dev/null && break
  sleep 0.2
done
curl -sf http://127.0.0.1:8094/health > /dev/null || { echo "server not ready (log in $DIR)"; exit 1; }
echo "$MODEL, $THREADS threads, 8 slots, --cache-ram ${CACHE_RAM:-0}, ${WORDS:-24} words; $(date -u +%FT%TZ), lucent $(git -C "$HERE" rev-parse --short HEAD)"
python3 "$HERE/scripts/bench_constrain.py" --server http://127.0.0.1:8094 --model "$MODEL" \
  --clients 1 8 --rounds "$ROUNDS" --words "${WORDS:-24}" --json "$HERE/target/bench-constrain.json"
