#!/usr/bin/env bash
# Compare lucent's text generation with llama.cpp's on the same GGUF file, the same
# 128-token prompt (the very same token ids) and the same thread counts, in one run.
#
#   scripts/bench-generate-peer.sh                      # smollm2, threads 1 and 2
#   MODEL=gemma3 THREADS="1 2" REPEATS=5 scripts/bench-generate-peer.sh
#
# llama.cpp comes from PyPI as llama-cpp-python==0.3.36, built from source for this CPU
# into a virtual environment outside the repository that later runs reuse
# (scripts/bench-venv-llama.sh: its place, LLAMA_CMAKE_ARGS, REBUILD=1, why AMX is left
# out). SETUP_ONLY=1 builds the venv, lucent and fetches the model, then stops before
# measuring.
#
# Both sides: prefill = the prompt into an empty KV cache up to the first logits;
# decode = GEN greedy steps after it (end-of-generation ignored), in tokens per second.
# The machine is shared and its load comes in bursts, so the engines take turns: REPEATS
# rounds of one lucent run then one llama.cpp run, per thread count. A round's ratio is
# lucent / llama.cpp (above 1, lucent is faster); the table gives the median of each
# engine's speeds, the median ratio, and all the ratios, sorted.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${MODEL:-smollm2}"
THREADS="${THREADS:-1 2}"
REPEATS="${REPEATS:-5}"
PROMPT="${PROMPT:-128}"
GEN="${GEN:-128}"

VENV="$(bash "$ROOT/scripts/bench-venv-llama.sh")"
(cd "$ROOT" && cargo build --release -p lucent-cli --quiet)
LUCENT="$ROOT/target/release/lucent"

# Smoke test: one evaluation in a child process, so a crashing build is explained.
if ! "$VENV/bin/python" - "$("$LUCENT" bench generate -m "$MODEL" --prompt-tokens 4 --json \
        --threads-list 1 --repeats 1 --gen-tokens 1 | "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["path"])')" <<'PY'
import sys
from llama_cpp import Llama
Llama(model_path=sys.argv[1], n_ctx=64, n_threads=1, verbose=False).eval([1, 2, 3])
PY
then
    echo "llama.cpp crashed on a first evaluation; if the CPU has AMX, rebuild without it (see scripts/bench-venv-llama.sh)" >&2
    exit 1
fi

if [ -n "${SETUP_ONLY:-}" ]; then
    echo "set-up done: llama-cpp-python in $VENV, $LUCENT built, $MODEL fetched" >&2
    exit 0
fi

echo "model $MODEL; prompt $PROMPT tokens; decode $GEN tokens; $REPEATS interleaved rounds"

"$VENV/bin/python" - "$LUCENT" "$MODEL" "$PROMPT" "$GEN" "$REPEATS" $THREADS <<'PY'
import json, statistics, subprocess, sys, time
import numpy as np
from llama_cpp import Llama

lucent_bin, model = sys.argv[1], sys.argv[2]
prompt, gen, repeats = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
threads = [int(t) for t in sys.argv[6:]]


def lucent_once(n):
    """One lucent run (prefill then decode) at n threads, in its own process."""
    out = subprocess.run(
        [lucent_bin, "bench", "generate", "-m", model, "--prompt-tokens", str(prompt),
         "--gen-tokens", str(gen), "--threads-list", str(n), "--repeats", "1", "--json"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def llama_once(llm, ids):
    """One llama.cpp run of the same shape: (prefill tok/s, decode tok/s)."""
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    pre = len(ids) / (time.perf_counter() - t0)
    tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    t1 = time.perf_counter()
    for _ in range(gen):
        llm.eval([tok])
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    return pre, gen / (time.perf_counter() - t1)


first = lucent_once(threads[0])
path, ids = first["path"], first["prompt_ids"]
print(f"file {path}")
print("each round runs lucent once, then llama.cpp once; a ratio is lucent / llama.cpp "
      "within one round, and the table gives the medians (and the range of the ratios)")
print(f"{'threads':>7} {'':>8} {'lucent':>10} {'llama.cpp':>10} {'ratio':>7}  ratios")
for n in threads:
    llm = Llama(model_path=path, n_ctx=len(ids) + gen + 8, n_batch=512, n_threads=n,
                n_threads_batch=n, verbose=False)
    rounds = []
    for _ in range(repeats):
        run = lucent_once(n)["runs"][0]
        assert run["threads"] == n
        rounds.append((run["prefill_tok_s"], run["decode_tok_s"], *llama_once(llm, ids)))
    for name, a, b in (("prefill", 0, 2), ("decode", 1, 3)):
        ours = statistics.median(r[a] for r in rounds)
        theirs = statistics.median(r[b] for r in rounds)
        ratios = sorted(r[a] / r[b] for r in rounds)
        spread = " ".join(f"{x:.2f}" for x in ratios)
        print(f"{n:>7} {name:>8} {ours:>10.1f} {theirs:>10.1f} "
              f"{statistics.median(ratios):>7.2f}  {spread}")
    del llm
PY
