#!/usr/bin/env bash
# Compare lucent's sentence-embedding throughput with two peers on the same model files:
# sentence-transformers (PyTorch) and ONNX Runtime (the same checkpoint exported once to
# ONNX). Same 256 sentences (benches/sentences.txt), batch 32, at 1 and 2 threads, in one
# run, the three engines taking turns pass by pass (so a busy machine slows all alike);
# print sentences/s, single-sentence latency and lucent's ratio to the faster peer.
#
# Needs: a built `lucent` (cargo build --release -p lucent-cli) and python3 with venv.
# The venv lives outside the repo: ${LUCENT_BENCH_VENV:-$HOME/.cache/lucent/bench-venv};
# torch, sentence-transformers, onnxruntime and onnx come from PyPI (plain `pip install`)
# on first use. The ONNX export (scripts/ort_export_minilm.py) is cached beside the venv,
# in onnx/<model>-<hash of the model folder's path>/model.onnx.
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
if ! "$VENV/bin/python" -c "import torch, sentence_transformers, onnxruntime, onnx" 2>/dev/null; then
  echo "installing torch, sentence-transformers, onnxruntime and onnx into $VENV (PyPI)" >&2
  "$VENV/bin/pip" install --quiet torch sentence-transformers onnxruntime onnx >&2
fi

# The model folder lucent uses (fetched into the lucent cache on first use).
MODEL_DIR="$("$LUCENT" fetch "$MODEL" --json | "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["models"][0]["path"])')"

# The ONNX export, made once per model folder (keyed by its path) and kept beside the venv.
KEY="$(printf '%s' "$MODEL_DIR" | sha256sum | cut -c1-12)"
ONNX="$(dirname "$VENV")/onnx/$MODEL-$KEY/model.onnx"
if [[ ! -f "$ONNX" ]]; then
  echo "exporting $MODEL_DIR to ONNX once: $ONNX" >&2
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$VENV/bin/python" scripts/ort_export_minilm.py "$MODEL_DIR" "$ONNX" >&2
fi

echo "lucent, sentence-transformers and ONNX Runtime, interleaved: lucent pass, ST pass, ORT pass, lucent pass, ..." >&2
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$VENV/bin/python" - "$MODEL_DIR" "$SENTENCES" "$RUNS" "$LUCENT" "$MODEL" "$ONNX" <<'PY'
# The three engines take turns, one timed pass each, so a busy machine slows all alike.
import json, os, statistics, subprocess, sys, time
import numpy as np
import onnxruntime as ort
import torch
from sentence_transformers import SentenceTransformer
from tokenizers import Tokenizer

model_dir, path, runs, lucent, name, onnx_path = (sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4],
                                                  sys.argv[5], sys.argv[6])
sentences = [l.rstrip("\n") for l in open(path, encoding="utf-8") if l.strip()]
model = SentenceTransformer(model_dir, device="cpu")
LAT = 20

# ONNX Runtime's pipeline, the same as sentence-transformers': tokenizer.json's tokenizer with
# its fixed padding to 128 turned off (each batch is padded to its own longest instead) and
# truncation at ST's max_seq_length (sentence_bert_config.json: 256 for MiniLM, 384 for MPNet;
# tokenizer.json says 128).
max_len = json.load(open(os.path.join(model_dir, "sentence_bert_config.json")))["max_seq_length"]
tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
# The pad token from tokenizer.json's own padding section ([PAD] 0 for MiniLM, <pad> 1 for
# MPNet, whose position ids skip that id), then padding again without a fixed length.
pad = tok.padding or {"pad_id": 0, "pad_token": "[PAD]"}
tok.no_padding()
tok.enable_padding(pad_id=pad["pad_id"], pad_token=pad["pad_token"])  # no length: pad to the batch's longest
tok.enable_truncation(max_length=max_len)

def ort_session(n):
    # n intra-op threads, no inter-op parallelism, every graph optimisation.
    so = ort.SessionOptions()
    so.intra_op_num_threads = n
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])

sessions = {n: ort_session(n) for n in (1, 2)}
inputs = {i.name for i in sessions[1].get_inputs()}  # token_type_ids only for BERT-like models

def ort_encode(sess, texts, batch=32):
    # Longest first, as ST orders by text length (its np.argsort of -len), batches of 32,
    # mean pooling over attention_mask, L2 normalisation, original order restored.
    order = np.argsort([-len(t) for t in texts])
    out = None
    for i in range(0, len(texts), batch):
        idx = order[i:i + batch]
        enc = tok.encode_batch([texts[j] for j in idx])
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in inputs:
            feed["token_type_ids"] = np.array([e.type_ids for e in enc], dtype=np.int64)
        h = sess.run(["last_hidden_state"], feed)[0]
        m = mask[:, :, None].astype(np.float32)
        e = (h * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        e /= np.clip(np.linalg.norm(e, axis=1, keepdims=True), 1e-12, None)
        if out is None:
            out = np.empty((len(texts), e.shape[1]), dtype=np.float32)
        out[idx] = e
    return out

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

def ort_pass(n):
    # Timed from the raw strings: tokenisation included, as in ST's pass.
    sess = sessions[n]
    t0 = time.perf_counter()
    ort_encode(sess, sentences)
    full = time.perf_counter() - t0
    lat = []
    for s in sentences[:LAT]:
        t0 = time.perf_counter()
        ort_encode(sess, [s])
        lat.append(time.perf_counter() - t0)
    return full, 1000 * statistics.median(lat)

# Exactness, once before timing: ORT's embeddings against ST's on all the sentences.
torch.set_num_threads(1)
with torch.inference_mode():
    ref = model.encode(sentences, batch_size=32, convert_to_numpy=True, normalize_embeddings=True)
got = ort_encode(sessions[1], sentences)
cos = (ref * got).sum(axis=1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
print(f"ORT vs ST on {len(sentences)} sentences: min cosine {cos.min():.7f}, max |diff| {np.abs(ref - got).max():.2e}")

print(f"{name} embeddings, {len(sentences)} sentences, batch 32, median of {runs} interleaved runs"
      f" (torch {torch.__version__}, onnxruntime {ort.__version__})")
print(f"{'threads':>7} {'lucent s/s':>11} {'ST s/s':>9} {'ORT s/s':>9} {'lucent÷best':>12}"
      f" {'lucent ms':>10} {'ST ms':>8} {'ORT ms':>8} {'best÷lucent':>12}")
for n in (1, 2):
    torch.set_num_threads(n)
    with torch.inference_mode():
        model.encode(sentences[:64], batch_size=32)  # warm-up
    ort_encode(sessions[n], sentences[:64])  # warm-up
    lu, st, ox = [], [], []
    for _ in range(runs):
        lu.append(lucent_pass(n))
        st.append(st_pass(n))
        ox.append(ort_pass(n))
    med = lambda xs, k: statistics.median(x[k] for x in xs)
    lu_r, st_r, ox_r = (len(sentences) / med(xs, 0) for xs in (lu, st, ox))
    lu_l, st_l, ox_l = (med(xs, 1) for xs in (lu, st, ox))
    print(f"{n:>7} {lu_r:>11.1f} {st_r:>9.1f} {ox_r:>9.1f} {lu_r / max(st_r, ox_r):>11.2f}x"
          f" {lu_l:>10.2f} {st_l:>8.2f} {ox_l:>8.2f} {min(st_l, ox_l) / lu_l:>11.2f}x", flush=True)
print(f"(ratios > 1: lucent faster than the faster peer; latency = one sentence alone, median of {LAT} per run)")
PY
