#!/usr/bin/env bash
# Compare lucent's sentence-embedding throughput with sentence-transformers (PyTorch)
# on the same model files, the same 256 sentences (benches/sentences.txt), batch 32,
# at 1 and 2 threads, in one run, the two engines taking turns pass by pass (so a busy
# machine slows both alike); print sentences/s, single-sentence latency and ratios.
#
# Needs: a built `lucent` (cargo build --release -p lucent-cli) and python3 with venv.
# The venv lives outside the repo: ${LUCENT_BENCH_VENV:-$HOME/.cache/lucent/bench-venv};
# torch and sentence-transformers come from PyPI (plain `pip install`) on first use.
#
# Usage: scripts/bench-embed-peer.sh [--runs N] [--model minilm|mpnet]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=5
MODEL=minilm
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    *) echo "usage: $0 [--runs N] [--model minilm|mpnet]" >&2; exit 2 ;;
  esac
done
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
MODEL_DIR="$("$LUCENT" fetch "$MODEL" --json | "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["models"][0]["path"])')"

echo "lucent and sentence-transformers, interleaved: lucent pass, ST pass, lucent pass, ..." >&2
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$VENV/bin/python" - "$MODEL_DIR" "$SENTENCES" "$RUNS" "$LUCENT" "$MODEL" <<'PY'
# The two engines take turns, one timed pass each, so a busy machine slows both alike.
import json, statistics, subprocess, sys, time
import torch
from sentence_transformers import SentenceTransformer

model_dir, path, runs, lucent, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
sentences = [l.rstrip("\n") for l in open(path, encoding="utf-8") if l.strip()]
model = SentenceTransformer(model_dir, device="cpu")
LAT = 20

def lucent_pass(n):
    out = subprocess.run(
        [lucent, "bench", "embed", "-m", name, "--threads-list", str(n), "--batch", "32", "--runs", "1",
         "--latency-samples", str(LAT), "--json"],
        check=True, capture_output=True, text=True).stdout
    r = json.loads(out)["threads"][0]
    return r["median_s"], r["latency_ms"]

def st_pass(n):
    torch.set_num_threads(n)
    with torch.inference_mode():
        t0 = time.perf_counter()
        model.encode(sentences, batch_size=32)
        full = time.perf_counter() - t0
        lat = []
        for s in sentences[:LAT]:
            t0 = time.perf_counter()
            model.encode([s], batch_size=1)
            lat.append(time.perf_counter() - t0)
    return full, 1000 * statistics.median(lat)

print(f"{name} embeddings, {len(sentences)} sentences, batch 32, median of {runs} interleaved runs"
      f" (torch {torch.__version__})")
print(f"{'threads':>7} {'lucent s/s':>11} {'ST s/s':>9} {'ratio':>6} {'lucent ms':>10} {'ST ms':>8} {'ratio':>6}")
for n in (1, 2):
    torch.set_num_threads(n)
    with torch.inference_mode():
        model.encode(sentences[:64], batch_size=32)  # warm-up
    lu, st = [], []
    for _ in range(runs):
        lu.append(lucent_pass(n))
        st.append(st_pass(n))
    lu_s = statistics.median(x[0] for x in lu); st_s = statistics.median(x[0] for x in st)
    lu_l = statistics.median(x[1] for x in lu); st_l = statistics.median(x[1] for x in st)
    lu_r, st_r = len(sentences) / lu_s, len(sentences) / st_s
    print(f"{n:>7} {lu_r:>11.1f} {st_r:>9.1f} {lu_r / st_r:>5.2f}x {lu_l:>10.2f} {st_l:>8.2f} {st_l / lu_l:>5.2f}x",
          flush=True)
print(f"(ratio > 1: lucent faster; latency = one sentence alone, median of {LAT} per run)")
PY
