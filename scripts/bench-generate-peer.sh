#!/usr/bin/env bash
# Compare lucent's text generation with llama.cpp's on the same GGUF file, the same
# 128-token prompt (the very same token ids) and the same thread counts, in one run.
#
#   scripts/bench-generate-peer.sh                      # smollm2, threads 1 and 2
#   MODEL=gemma3 THREADS="1 2" REPEATS=3 scripts/bench-generate-peer.sh
#
# llama.cpp comes from PyPI as llama-cpp-python, built from source for this CPU
# (CMAKE_ARGS="-DGGML_NATIVE=ON"; 10-30 minutes on 2 cores the first time) into a
# virtual environment outside the repository that later runs reuse:
# ${LUCENT_BENCH_VENV:-$HOME/.cache/lucent/bench-venv-llama}. LLAMA_CMAKE_ARGS replaces the
# build flags. On a CPU with AMX whose kernel (or VM) does not grant AMX tile state,
# a native build crashes in `ldtilecfg` on the first evaluation; build without AMX then:
#   LLAMA_CMAKE_ARGS="-DGGML_NATIVE=ON -DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' \
#     -DCMAKE_CXX_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'" REBUILD=1 scripts/bench-generate-peer.sh
#
# Both sides: prefill = the prompt into an empty KV cache up to the first logits;
# decode = GEN greedy steps after it (end-of-generation ignored); the median of REPEATS
# runs, in tokens per second. Ratios are lucent / llama.cpp: above 1, lucent is faster.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${LUCENT_BENCH_VENV:-$HOME/.cache/lucent/bench-venv-llama}"
MODEL="${MODEL:-smollm2}"
THREADS="${THREADS:-1 2}"
REPEATS="${REPEATS:-3}"
PROMPT="${PROMPT:-128}"
GEN="${GEN:-128}"

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
if [ -n "${REBUILD:-}" ] || ! "$VENV/bin/python" -c "import llama_cpp" 2>/dev/null; then
    echo "building llama-cpp-python into $VENV (10-30 minutes the first time)..." >&2
    CMAKE_ARGS="${LLAMA_CMAKE_ARGS:--DGGML_NATIVE=ON}" "$VENV/bin/python" -m pip install --quiet \
        --force-reinstall --no-cache-dir llama-cpp-python numpy
fi
"$VENV/bin/python" -c "import numpy" 2>/dev/null || "$VENV/bin/python" -m pip install --quiet numpy

(cd "$ROOT" && cargo build --release -p lucent-cli --quiet)
LUCENT="$ROOT/target/release/lucent"

LIST="$(echo $THREADS | tr ' ' ',')"

# Smoke test: one evaluation in a child process, so a crashing build is explained.
if ! "$VENV/bin/python" - "$("$LUCENT" bench generate -m "$MODEL" --prompt-tokens 4 --json \
        --threads-list 1 --repeats 1 --gen-tokens 1 | "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["path"])')" <<'PY'
import sys
from llama_cpp import Llama
Llama(model_path=sys.argv[1], n_ctx=64, n_threads=1, verbose=False).eval([1, 2, 3])
PY
then
    echo "llama.cpp crashed on a first evaluation; if the CPU has AMX, rebuild without it (see the top of this script)" >&2
    exit 1
fi

echo "model $MODEL; prompt $PROMPT tokens; decode $GEN tokens; median of $REPEATS"
OURS="$("$LUCENT" bench generate -m "$MODEL" --prompt-tokens "$PROMPT" --gen-tokens "$GEN" \
    --threads-list "$LIST" --repeats "$REPEATS" --json)"

"$VENV/bin/python" - "$GEN" "$REPEATS" "$OURS" $THREADS <<'PY'
import json, statistics, sys, time
import numpy as np
from llama_cpp import Llama

gen, repeats, ours = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
threads = [int(t) for t in sys.argv[4:]]
path, ids = ours["path"], ours["prompt_ids"]
print(f"file {path}")
lucent = {r["threads"]: r for r in ours["runs"]}
print(f"{'threads':>7} {'':>8} {'lucent':>10} {'llama.cpp':>10} {'ratio':>7}")
for n in threads:
    llm = Llama(model_path=path, n_ctx=len(ids) + gen + 8, n_batch=512, n_threads=n,
                n_threads_batch=n, verbose=False)
    pre, dec = [], []
    for _ in range(repeats):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        pre.append(len(ids) / (time.perf_counter() - t0))
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        t1 = time.perf_counter()
        for _ in range(gen):
            llm.eval([tok])
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        dec.append(gen / (time.perf_counter() - t1))
    p, d = statistics.median(pre), statistics.median(dec)
    lp, ld = lucent[n]["prefill_tok_s"], lucent[n]["decode_tok_s"]
    print(f"{n:>7} {'prefill':>8} {lp:>10.1f} {p:>10.1f} {lp / p:>7.2f}")
    print(f"{n:>7} {'decode':>8} {ld:>10.1f} {d:>10.1f} {ld / d:>7.2f}")
    del llm
PY
