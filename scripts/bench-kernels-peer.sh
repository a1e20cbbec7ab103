#!/usr/bin/env bash
# Compare lucent's matrix products with numpy's (OpenBLAS sgemm) on the same shapes, in
# the same run, on the same machine, at 1 and 2 threads.
#
#   scripts/bench-kernels-peer.sh            # RUNS=7 MIN_MS=40 by default
#   RUNS=9 MIN_MS=60 scripts/bench-kernels-peer.sh
#
# numpy comes from PyPI into a virtual environment outside the repository
# (${LUCENT_BENCH_VENV:-$HOME/.cache/lucent/bench-venv}). Both sides time a call the same
# way: repeat it until one run lasts MIN_MS, take RUNS runs, report the median (and the
# fastest run) of the time per call. The shapes are x (m, k) · W (n, k)ᵀ, the layout of a
# Linear layer; numpy gets `np.matmul(x, W.T, out=c)` (a transposed view, no copy).
# Ratios are lucent / numpy throughput: above 1 means lucent is faster.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${LUCENT_BENCH_VENV:-$HOME/.cache/lucent/bench-venv}"
RUNS="${RUNS:-7}"
MIN_MS="${MIN_MS:-40}"
THREADS="${THREADS:-1 2}"

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check numpy

(cd "$ROOT" && cargo build --release -p lucent-cli --quiet)
LUCENT="$ROOT/target/release/lucent"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

cat >"$WORK/peer.py" <<'PY'
"""numpy (OpenBLAS) sgemm on lucent's benchmark shapes; median and best of RUNS runs."""
import json, os, sys, time
import numpy as np

SHAPES = [(768, 384, 1536), (768, 384, 384), (768, 1536, 384),
          (1, 576, 1536), (1, 576, 576), (1, 1536, 576)]
runs, min_s = int(sys.argv[1]), float(sys.argv[2]) / 1000.0
rng = np.random.default_rng(0)
out = []
for m, k, n in SHAPES:
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32)
    c = np.empty((m, n), dtype=np.float32)
    f = lambda: np.matmul(x, w.T, out=c)
    f()
    t0, calls = time.perf_counter(), 0
    while time.perf_counter() - t0 < min_s / 4 or calls == 0:
        f(); calls += 1
    reps = max(1, int(min_s / ((time.perf_counter() - t0) / calls) + 0.999))
    samples = []
    for _ in range(max(1, runs)):
        t = time.perf_counter()
        for _ in range(reps):
            f()
        samples.append((time.perf_counter() - t) / reps)
    samples.sort()
    out.append({"mkn": [m, k, n], "median_s": samples[len(samples) // 2], "best_s": samples[0]})
json.dump({"threads": os.environ.get("OPENBLAS_NUM_THREADS"), "numpy": np.__version__,
           "results": out}, sys.stdout)
PY

for t in $THREADS; do
    OPENBLAS_NUM_THREADS="$t" "$VENV/bin/python" "$WORK/peer.py" "$RUNS" "$MIN_MS" >"$WORK/numpy-$t.json"
    "$LUCENT" bench kernels --threads "$t" --only matmul --runs "$RUNS" --min-ms "$MIN_MS" --json >"$WORK/lucent-$t.json"
done

"$VENV/bin/python" - "$WORK" $THREADS <<'PY'
import json, sys, platform
import numpy as np
work, threads = sys.argv[1], sys.argv[2:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
print(f"machine: {cpu}; numpy {np.__version__} (OpenBLAS); medians of timed runs, GFLOP/s (2·m·k·n / time)\n")
print(f"{'m×k×n':>16} {'thr':>3} {'lucent':>9} {'numpy':>9} {'ratio':>6}   {'lucent best':>11} {'numpy best':>10} {'ratio':>6}")
for t in threads:
    nres = {tuple(r["mkn"]): r for r in json.load(open(f"{work}/numpy-{t}.json"))["results"]}
    for r in json.load(open(f"{work}/lucent-{t}.json"))["results"]:
        m, k, n = r["mkn"]
        p = nres[(m, k, n)]
        fl = 2.0 * m * k * n / 1e9
        lm, nm, lb, nb = fl / r["median_s"], fl / p["median_s"], fl / r["best_s"], fl / p["best_s"]
        print(f"{f'{m}x{k}x{n}':>16} {t:>3} {lm:>9.1f} {nm:>9.1f} {lm / nm:>6.2f}   {lb:>11.1f} {nb:>10.1f} {lb / nb:>6.2f}")
PY
