"""Embedding speed from Python beside the CLI's, and two Python threads at once.

    python python/benches/bench_embed.py --lucent target/release/lucent --rounds 5

1. Throughput on benches/sentences.txt (256 sentences, batch 32) at 1 and 2 kernel
   threads: `lucent bench embed` (its median pass, model loaded) against
   `SentenceTransformer(n_threads=n).encode` in this process (median pass), in
   alternating rounds;
   the figure is the median over rounds of each.
2. The GIL: two models with a 1-thread runtime each (``n_threads=1``), two passes one
   after the other against the same two passes in two Python threads at once. Released
   GIL: about 2x on 2 cores.

Prints one JSON object; nothing is asserted (timings are noisy on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import threading
import time
from pathlib import Path

import lucent

REPO = Path(__file__).resolve().parents[2]


def timed(f) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lucent", default=str(REPO / "target" / "release" / "lucent"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--runs", type=int, default=3, help="timed passes per side per round")
    a = p.parse_args()
    texts = [l for l in (REPO / "benches" / "sentences.txt").read_text().splitlines() if l.strip()]
    # One model per thread count, each in a lucent runtime of its own (n_threads).
    models = {n: lucent.SentenceTransformer("minilm", n_threads=n) for n in (1, 2)}
    for m in models.values():
        m.encode(texts[:64])  # warm-up
    speed = {}
    for n, model in models.items():
        cli, py = [], []
        for _ in range(a.rounds):
            out = subprocess.run(
                [a.lucent, "bench", "embed", "--threads-list", str(n), "--runs", str(a.runs),
                 "--latency-samples", "1", "--json"],
                capture_output=True, text=True, check=True,
            ).stdout
            cli.append(len(texts) / json.loads(out)["threads"][0]["median_s"])
            py.append(len(texts) / statistics.median(timed(lambda: model.encode(texts)) for _ in range(a.runs)))
        c, q = statistics.median(cli), statistics.median(py)
        speed[f"threads_{n}"] = {
            "cli_sentences_per_s": round(c, 1),
            "python_sentences_per_s": round(q, 1),
            "python_vs_cli": round(q / c, 3),
            "cli_rounds": [round(x, 1) for x in cli],
            "python_rounds": [round(x, 1) for x in py],
        }
    # The GIL: two models of 1 kernel thread each (two runtimes), two passes one after
    # the other against the same two passes in two Python threads at once.
    pair = [models[1], lucent.SentenceTransformer("minilm", n_threads=1)]
    pair[1].encode(texts[:64])
    seq, par = [], []
    for _ in range(a.rounds):
        seq.append(timed(lambda: (pair[0].encode(texts), pair[1].encode(texts))))

        def both():
            ts = [threading.Thread(target=m.encode, args=(texts,)) for m in pair]
            for t in ts:
                t.start()
            for t in ts:
                t.join()

        par.append(timed(both))
    s, q = statistics.median(seq), statistics.median(par)
    result = {
        "speed": speed,
        "gil": {
            "kernel_threads_per_model": 1,
            "two_passes_one_after_the_other_s": round(s, 3),
            "two_passes_in_two_threads_s": round(q, 3),
            "speedup": round(s / q, 2),
            "sequential_rounds_s": [round(x, 3) for x in seq],
            "threaded_rounds_s": [round(x, 3) for x in par],
        },
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
