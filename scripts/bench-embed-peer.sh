#!/usr/bin/env bash
# Compare lucent's sentence-embedding throughput with sentence-transformers (PyTorch)
# on the same model files, the same 256 sentences (benches/sentences.txt), batch 32,
# at 1 and 2 threads, in one run; print sentences/s, single-sentence latency and ratios.
#
# Needs: a built `lucent` (cargo build --release -p lucent-cli) and python3 with venv.
# The venv lives outside the repo: ${LUCENT_BENCH_VENV:-$HOME/.cache/lucent/bench-venv};
# torch and sentence-transformers come from PyPI (plain `pip install`) on first use.
#
# Usage: scripts/bench-embed-peer.sh [--runs N]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=5
if [[ "${1:-}" == "--runs" ]]; then RUNS="$2"; fi
VENV="${LUCENT_BENCH_VENV:-$HOME/.cache/lucent/bench-venv}"
LUCENT="${LUCENT_BIN:-target/release/lucent}"
SENTENCES="benches/sentences.txt"

if [[ ! -x "$LUCENT" ]]; then
  echo "building lucent (cargo build --release -p lucent-cli)" >&2
  cargo build --release -p lucent-cli >&2
fi
if [[ ! -x "$VENV/bin/python" ]]; then
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import torch, sentence_transformers" 2>/dev/null; then
  echo "installing torch and sentence-transformers into $VENV (PyPI)" >&2
  "$VENV/bin/pip" install --quiet torch sentence-transformers >&2
fi

# The model folder lucent uses (fetched into the lucent cache on first use).
MODEL_DIR="$("$LUCENT" fetch minilm --json | "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["models"][0]["path"])')"

LUCENT_JSON="$(mktemp)"
PEER_JSON="$(mktemp)"
trap 'rm -f "$LUCENT_JSON" "$PEER_JSON"' EXIT

echo "lucent: bench-embed (threads 1 and 2, batch 32, $RUNS runs)" >&2
"$LUCENT" bench-embed --threads-list 1,2 --batch 32 --runs "$RUNS" --json >"$LUCENT_JSON"

echo "sentence-transformers: same sentences, same model folder" >&2
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$VENV/bin/python" - "$MODEL_DIR" "$SENTENCES" "$RUNS" >"$PEER_JSON" <<'PY'
import json, statistics, sys, time
import torch
from sentence_transformers import SentenceTransformer

model_dir, path, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
sentences = [l.rstrip("\n") for l in open(path, encoding="utf-8") if l.strip()]
model = SentenceTransformer(model_dir, device="cpu")
out = {"model": model_dir, "sentences": len(sentences), "torch": torch.__version__, "threads": []}
for n in (1, 2):
    torch.set_num_threads(n)
    with torch.inference_mode():
        model.encode(sentences[:64], batch_size=32)  # warm-up
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            model.encode(sentences, batch_size=32)
            times.append(time.perf_counter() - t0)
        lat = []
        for s in sentences[:50]:
            t0 = time.perf_counter()
            model.encode([s], batch_size=1)
            lat.append(time.perf_counter() - t0)
    med = statistics.median(times)
    out["threads"].append({
        "threads": n,
        "median_s": med,
        "sentences_per_s": len(sentences) / med,
        "latency_ms": 1000 * statistics.median(lat),
    })
print(json.dumps(out))
PY

"$VENV/bin/python" - "$LUCENT_JSON" "$PEER_JSON" <<'PY'
import json, sys
lu = json.load(open(sys.argv[1]))
st = json.load(open(sys.argv[2]))
print(f"MiniLM embeddings, {lu['sentences']} sentences, batch {lu['batch']} (median of {lu['runs']} runs)")
print(f"{'threads':>7} {'lucent s/s':>11} {'ST s/s':>9} {'ratio':>6} {'lucent ms':>10} {'ST ms':>8} {'ratio':>6}")
peer = {r["threads"]: r for r in st["threads"]}
for r in lu["threads"]:
    p = peer.get(r["threads"])
    if p is None:
        continue
    print(f"{r['threads']:>7} {r['sentences_per_s']:>11.1f} {p['sentences_per_s']:>9.1f} "
          f"{r['sentences_per_s'] / p['sentences_per_s']:>5.2f}x "
          f"{r['latency_ms']:>10.2f} {p['latency_ms']:>8.2f} {p['latency_ms'] / r['latency_ms']:>5.2f}x")
print("(ratio > 1: lucent faster; latency = one sentence alone, median of 50)")
PY
