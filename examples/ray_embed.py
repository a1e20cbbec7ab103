"""Embed a corpus with Ray Data, one lucent model per worker, on a local Ray cluster.

    pip install ./python "ray[data]"
    python examples/ray_embed.py benches/sentences.txt --workers 2 --out embeddings.npy

Each worker is an actor holding one ``lucent.SentenceTransformer`` (loaded once, in its
constructor); Ray Data streams batches of rows to the actors (``map_batches``) and
collects the vectors. lucent releases the GIL and uses its own threads, so give each
actor as many CPUs as it has kernel threads (``--threads``, default 1) and run one
actor per share of the machine. The result equals one process's ``encode`` bit for bit
(``python/tests/test_ray.py``; lucent's vectors can move in their last bits with the
batch only for texts of a few tokens, see ``SentenceTransformer.encode``).

The same code runs on a multi-node cluster: start Ray there (``ray start --head`` /
``ray start --address=…``), install the wheel on every node and call ``ray.init()``
without arguments; see docs/scale.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import Dict, List

import numpy as np
import ray


class Embedder:
    """A Ray Data UDF: one lucent model per actor, ``__call__`` per batch."""

    def __init__(self, model: str = "minilm", threads: int = 1, batch_size: int = 32) -> None:
        import lucent

        self.model = lucent.SentenceTransformer(model, n_threads=threads)
        self.batch_size = batch_size

    def __call__(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        texts = [str(t) for t in batch["text"]]
        batch["embedding"] = self.model.encode(texts, batch_size=self.batch_size)  # (n, d)
        return batch


def embed_corpus(
    texts: List[str], model: str = "minilm", workers: int = 2, threads: int = 1, rows_per_batch: int = 64
) -> np.ndarray:
    """Embed ``texts`` on the running Ray cluster with ``workers`` actors; an (n, d)
    float32 array in input order."""
    if __name__ != "__main__":
        # Ship this module's code to the workers (they may not have it on their path).
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ds = ray.data.from_items([{"id": i, "text": t} for i, t in enumerate(texts)])
    out = ds.map_batches(
        Embedder,
        fn_constructor_kwargs={"model": model, "threads": threads},
        batch_size=rows_per_batch,
        batch_format="numpy",
        concurrency=workers,
        num_cpus=threads,
    )
    rows = sorted(out.take_all(), key=lambda r: int(r["id"]))
    return np.stack([np.asarray(r["embedding"], dtype=np.float32) for r in rows])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("corpus", help="a text file, one text per line (blank lines skipped)")
    p.add_argument("--model", default="minilm")
    p.add_argument("--workers", type=int, default=2, help="actors, each with its own model")
    p.add_argument("--threads", type=int, default=1, help="lucent kernel threads (and CPUs) per actor")
    p.add_argument("--out", default="embeddings.npy")
    p.add_argument("--address", default=None, help="a running cluster (default: start a local one)")
    a = p.parse_args()
    texts = [l for l in open(a.corpus, encoding="utf-8").read().splitlines() if l.strip()]
    if a.address:
        ray.init(address=a.address)
    else:
        ray.init(num_cpus=a.workers * a.threads, include_dashboard=False)
    vecs = embed_corpus(texts, a.model, a.workers, a.threads)
    np.save(a.out, vecs)
    print(f"{len(texts)} texts -> {vecs.shape} embeddings in {a.out}")
    ray.shutdown()


if __name__ == "__main__":
    main()
