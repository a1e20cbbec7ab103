"""llama.cpp's perplexity of SmolLM2 and Gemma 3 on the first characters of Moby Dick:
the reference `lucent perplexity` is held to (tests/data/perplexity_reference.json).

    ~/.cache/lucent/bench-venv-llama/bin/python scripts/perplexity_reference.py \
        [--ctx 512] [--chars 100000] [--chunks N] [--threads 2] [--out tests/data/perplexity_reference.json]

llama-cpp-python 0.3.36 gives the logits (`logits_all=True`, a context of `--ctx`);
llama-perplexity's procedure (vendor/llama.cpp/tools/perplexity/perplexity.cpp,
`perplexity()`) is done here in Python, step for step:

- the whole text is tokenised once, with BOS where the vocabulary adds it
  (`common_tokenize(ctx, text, add_special = true)`, no special-token parsing);
- n_chunk = n_tokens / n_ctx windows of n_ctx tokens, each run from an empty KV cache,
  its first token replaced by BOS (when the vocabulary adds BOS);
- only the second half of each window is scored: the logits of positions
  first = n_ctx / 2 … n_ctx − 2 predict the tokens after them (n_ctx − first − 1 tokens
  a window);
- each token's log-softmax as llama.cpp's `log_softmax`: the max in f32, Σ expf(z − max)
  in f64, log p = (z_tok − max) − log(Σ);
- sums of nll and nll² in f64; after each window the running PPL = exp(nll / count)
  (what llama-perplexity prints as `[i]x,`); at the end PPL = exp(mean nll) and its
  error sqrt((mean nll² − mean nll²) / (count − 1)) · PPL (`Final estimate: PPL = x +/- y`).

The models and the corpus come from lucent's cache ($LUCENT_HOME, default
~/.cache/lucent: models/NAME/*.gguf and corpora/moby-dick/corpus.txt, which
`lucent fetch smollm2`, `lucent fetch gemma3` and `lucent fetch moby-dick` put there).
"""

import argparse
import glob
import hashlib
import json
import math
import os
import sys

import numpy as np
import llama_cpp as L


def cache_root():
    home = os.environ.get("LUCENT_HOME")
    return home if home else os.path.expanduser("~/.cache/lucent")


def model_path(name):
    found = glob.glob(os.path.join(cache_root(), "models", name, "*.gguf"))
    if not found:
        sys.exit(f"no .gguf in {cache_root()}/models/{name}: run `lucent fetch {name}` first")
    return found[0]


def log_softmax_nll(logits, tok):
    """-log p(tok) as llama.cpp's log_softmax computes it (f32 max, f64 sum of expf)."""
    z = logits.astype(np.float32)
    max_logit = np.float32(z.max())
    sum_exp = float(np.sum(np.exp(z - max_logit).astype(np.float64)))
    return -(float(np.float32(z[tok] - max_logit)) - math.log(sum_exp))


def perplexity(name, text, n_ctx, max_chunks, threads):
    path = model_path(name)
    llm = L.Llama(model_path=path, n_ctx=n_ctx, n_batch=512, n_threads=threads,
                  n_threads_batch=threads, logits_all=True, verbose=False)
    vocab = L.llama_model_get_vocab(llm.model)
    add_bos = bool(L.llama_vocab_get_add_bos(vocab))
    bos = llm.token_bos()
    tokens = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    if len(tokens) < 2 * n_ctx:
        sys.exit(f"{name}: {len(tokens)} tokens, fewer than 2 windows of {n_ctx}")
    n_chunk = len(tokens) // n_ctx
    if max_chunks is not None:  # llama-perplexity's --chunks
        n_chunk = min(n_chunk, max_chunks)
    first = n_ctx // 2
    nll = nll2 = 0.0
    count = 0
    running = []
    for i in range(n_chunk):
        start = i * n_ctx
        window = list(tokens[start:start + n_ctx])
        if add_bos:
            window[0] = bos
        llm.reset()
        llm.eval(window)
        scores = llm.scores  # (n_ctx, V) f32
        for j in range(first, n_ctx - 1):
            v = log_softmax_nll(scores[j], tokens[start + j + 1])
            nll += v
            nll2 += v * v
        count += n_ctx - first - 1
        running.append(math.exp(nll / count))
        print(f"[{i + 1}]{running[-1]:.4f},", end="", flush=True, file=sys.stderr)
    print(file=sys.stderr)
    mean = nll / count
    var = nll2 / count - mean * mean
    ppl = math.exp(mean)
    err = math.sqrt(var / (count - 1)) * ppl
    ids = np.asarray(tokens, dtype="<u4").tobytes()
    return {
        "model": name,
        "file": os.path.basename(path),
        "add_bos": add_bos,
        "n_tokens": len(tokens),
        "token_ids_sha256": hashlib.sha256(ids).hexdigest(),
        "first_ids": list(tokens[:16]),
        "chunks": n_chunk,
        "tokens_scored": count,
        "running_ppl": running,
        "ppl": ppl,
        "ppl_err": err,
        "nll_sum": nll,
        "nll2_sum": nll2,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chars", type=int, default=100_000)
    ap.add_argument("--chunks", type=int, default=None,
                    help="score only the first N windows (llama-perplexity's --chunks)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", nargs="+", default=["smollm2", "gemma3"])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                  "data", "perplexity_reference.json"))
    args = ap.parse_args()
    corpus = os.path.join(cache_root(), "corpora", "moby-dick", "corpus.txt")
    with open(corpus, encoding="utf-8") as f:
        text = f.read()[: args.chars]
    out = {
        "meta": {
            "engine": f"llama.cpp via llama-cpp-python {L.__version__}",
            "procedure": "llama-perplexity's perplexity() (tools/perplexity/perplexity.cpp), in Python",
            "system_info": L.llama_print_system_info().decode().strip(),
            "corpus": "moby-dick",
            "chars": args.chars,
            "ctx": args.ctx,
            "chunks": args.chunks,
        },
        "models": [perplexity(m, text, args.ctx, args.chunks, args.threads) for m in args.models],
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    for m in out["models"]:
        print(f"{m['model']}: {m['n_tokens']} tokens, {m['chunks']} chunks, "
              f"PPL = {m['ppl']:.4f} +/- {m['ppl_err']:.5f}")


if __name__ == "__main__":
    main()
