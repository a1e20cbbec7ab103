#!/usr/bin/env bash
# Two builds of lucent side by side, interleaved (A B A B ...), on the workloads of
# BENCHMARKS.md's table: SmolLM2 prefill and decode (`bench generate`), MiniLM
# sentences/s (`bench embed`), each at 1 and 2 threads. Prints each figure's median for
# A and B and the ratio A/B of the medians (> 1: A is faster).
#
#   scripts/bench-before-after.sh BEFORE_BINARY AFTER_BINARY [ROUNDS]
#
# e.g. build the old commit in a worktree (`git worktree add /tmp/old 793f1bc && cargo
# build --release --manifest-path /tmp/old/Cargo.toml`), then
#   scripts/bench-before-after.sh /tmp/old/target/release/lucent target/release/lucent 5
set -euo pipefail
before=${1:?usage: $0 BEFORE_BINARY AFTER_BINARY [ROUNDS]}
after=${2:?usage: $0 BEFORE_BINARY AFTER_BINARY [ROUNDS]}
rounds=${3:-5}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for r in $(seq 1 "$rounds"); do
  for side in before after; do
    bin=$before
    [ "$side" = after ] && bin=$after
    "$bin" bench generate -m smollm2 --threads-list 1,2 --repeats 1 --json >>"$out/gen-$side.jsonl"
    "$bin" bench embed --threads-list 1,2 --runs 1 --latency-samples 10 --json >>"$out/emb-$side.jsonl"
  done
  echo "round $r of $rounds done" >&2
done

python3 - "$out" <<'EOF'
import json, statistics, sys, pathlib
d = pathlib.Path(sys.argv[1])
def figures(side):
    f = {}
    for line in (d / f"gen-{side}.jsonl").read_text().splitlines():
        for run in json.loads(line)["runs"]:
            t = run["threads"]
            f.setdefault(f"smollm2 prefill tok/s, {t} thr", []).append(run["prefill_tok_s"])
            f.setdefault(f"smollm2 decode tok/s, {t} thr", []).append(run["decode_tok_s"])
    for line in (d / f"emb-{side}.jsonl").read_text().splitlines():
        v = json.loads(line)
        for run in v["threads"]:
            t = run["threads"]
            f.setdefault(f"minilm sentences/s, {t} thr", []).append(run["sentences_per_s"])
    return f
b, a = figures("before"), figures("after")
print(f"{'figure':34} {'before':>10} {'after':>10} {'after/before':>13}")
for k in b:
    mb, ma = statistics.median(b[k]), statistics.median(a[k])
    print(f"{k:34} {mb:10.1f} {ma:10.1f} {ma / mb:13.3f}")
EOF
