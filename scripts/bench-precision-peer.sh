#!/usr/bin/env bash
# lucent's bf16 and int8 encoders against ONNX Runtime's, side by side in one run: lucent
# exact, lucent in each precision asked for, ONNX Runtime float32 and ONNX Runtime int8 take
# turns pass by pass on the 256 benchmark sentences (benches/sentences.txt), batch 32, at 1
# and 2 threads; medians. Also each precision's distance to its own exact mode (min and
# median cosine).
#
# The ONNX Runtime int8 peer is what sentence-transformers' export_dynamic_quantized_onnx_model
# makes: onnxruntime.quantization.quantize_dynamic(weight_type=QInt8, per_channel=True) of
# the float32 export (scripts/ort_export_minilm.py), made once and cached beside it.
#
# Needs what scripts/bench-embed-peer.sh needs (it shares its venv and ONNX export).
# Usage: [PRECISION=bf16|int8|all] scripts/bench-precision-peer.sh [--runs N] [--model minilm|mpnet]
# (PRECISION: the lucent precisions timed beside exact, comma-separated; default all = bf16,int8)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=5
MODEL=minilm
PRECISION="${PRECISION:-all}"
[[ "$PRECISION" == all ]] && PRECISION=bf16,int8
for p in ${PRECISION//,/ }; do
  case "$p" in
    bf16|int8) ;;
    *) echo "PRECISION=$PRECISION: each must be bf16 or int8 (or PRECISION=all)" >&2; exit 2 ;;
  esac
done
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    *) echo "usage: $0 [--runs N] [--model minilm|mpnet]" >&2; exit 2 ;;
  esac
done
VENV="${LUCENT_BENCH_VENV:-$HOME/.cache/lucent/bench-venv}"
LUCENT="${LUCENT_BIN:-target/release/lucent}"
if [[ ! -x "$LUCENT" ]]; then
  echo "building lucent (cargo build --release -p lucent-cli)" >&2
  cargo build --release -p lucent-cli >&2
fi
if [[ ! -x "$VENV/bin/python" ]]; then
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import torch, transformers, onnxruntime, onnx, tokenizers" 2>/dev/null; then
  echo "installing torch, sentence-transformers, onnxruntime and onnx into $VENV (PyPI)" >&2
  "$VENV/bin/pip" install --quiet torch sentence-transformers onnxruntime onnx >&2
fi
MODEL_DIR="$("$LUCENT" fetch "$MODEL" --json | "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["models"][0]["path"])')"
KEY="$(printf '%s' "$MODEL_DIR" | sha256sum | cut -c1-12)"
ONNX="$(dirname "$VENV")/onnx/$MODEL-$KEY/model.onnx"
ONNX8="$(dirname "$VENV")/onnx/$MODEL-$KEY/model_qint8_per_channel.onnx"
if [[ ! -f "$ONNX" ]]; then
  echo "exporting $MODEL_DIR to ONNX once: $ONNX" >&2
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$VENV/bin/python" scripts/ort_export_minilm.py "$MODEL_DIR" "$ONNX" >&2
fi
if [[ ! -f "$ONNX8" ]]; then
  echo "quantising the export once (quantize_dynamic, QInt8, per channel): $ONNX8" >&2
  "$VENV/bin/python" -c 'import sys; from onnxruntime.quantization import quantize_dynamic, QuantType
quantize_dynamic(sys.argv[1], sys.argv[2] + ".tmp", weight_type=QuantType.QInt8, per_channel=True)
import os; os.replace(sys.argv[2] + ".tmp", sys.argv[2])' "$ONNX" "$ONNX8" >&2
fi

"$VENV/bin/python" - "$MODEL_DIR" benches/sentences.txt "$RUNS" "$LUCENT" "$MODEL" "$ONNX" "$ONNX8" "$PRECISION" <<'PY'
import json, os, statistics, subprocess, sys, time
import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

model_dir, path, runs, lucent, name, f32_path, i8_path, precisions = sys.argv[1:9]
runs = int(runs)
precisions = precisions.split(",")
sentences = [l.rstrip("\n") for l in open(path, encoding="utf-8") if l.strip()]
max_len = json.load(open(os.path.join(model_dir, "sentence_bert_config.json")))["max_seq_length"]
tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
pad = tok.padding or {"pad_id": 0, "pad_token": "[PAD]"}
tok.no_padding()
tok.enable_padding(pad_id=pad["pad_id"], pad_token=pad["pad_token"])
tok.enable_truncation(max_length=max_len)

def session(p, n):
    so = ort.SessionOptions()
    so.intra_op_num_threads = n
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(p, so, providers=["CPUExecutionProvider"])

sessions = {(k, n): session(p, n) for k, p in (("f32", f32_path), ("int8", i8_path)) for n in (1, 2)}
inputs = {i.name for i in sessions[("f32", 1)].get_inputs()}

def ort_encode(sess, texts, batch=32):
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

def cos_stats(a, b):
    c = np.sort((a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))
    return c[0], c[len(c) // 2]

ref = ort_encode(sessions[("f32", 1)], sentences)
lo, med = cos_stats(ref, ort_encode(sessions[("int8", 1)], sentences))
print(f"ONNX Runtime int8 vs its float32 on {len(sentences)} sentences: min cosine {lo:.6f}, median {med:.6f}")
lj = json.loads(subprocess.run([lucent, "bench", "precision", "-m", name, "--threads-list", "1", "--runs", "1", "--json"],
                               check=True, capture_output=True, text=True).stdout)
for p in lj["precisions"]:
    if p["precision"] != "exact":
        print(f"lucent {p['precision']} vs its exact: min cosine {p['min_cosine']:.6f}, median {p['median_cosine']:.6f}")

def lucent_pass(n, precision):
    out = subprocess.run([lucent, "bench", "embed", "-m", name, "--threads-list", str(n), "--batch", "32",
                          "--runs", "1", "--latency-samples", "0", "--precision", precision, "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["threads"][0]["median_s"]

def ort_pass(kind, n):
    t0 = time.perf_counter()
    ort_encode(sessions[(kind, n)], sentences)
    return time.perf_counter() - t0

print(f"{name}, {len(sentences)} sentences, batch 32, sentences/s, median of {runs} interleaved rounds"
      f" (onnxruntime {ort.__version__}; bf16 products: {lj.get('bf16_path', '?')})")
head = f"{'threads':>7} {'lucent exact':>13}" + "".join(f" {'lucent ' + p:>12}" for p in precisions)
head += f" {'ORT f32':>9} {'ORT int8':>9}"
head += "".join(f" {p + '÷ORT f32':>13} {p + '÷ORT int8':>14}" for p in precisions)
print(head)
for n in (1, 2):
    for kind in ("f32", "int8"):
        ort_encode(sessions[(kind, n)], sentences[:64])  # warm-up
    t = {k: [] for k in ["exact", *precisions, "of", "oi"]}
    for _ in range(runs):
        for p in ["exact", *precisions]:
            t[p].append(lucent_pass(n, p))
        t["of"].append(ort_pass("f32", n))
        t["oi"].append(ort_pass("int8", n))
    r = {k: len(sentences) / statistics.median(v) for k, v in t.items()}
    line = f"{n:>7} {r['exact']:>13.1f}" + "".join(f" {r[p]:>12.1f}" for p in precisions)
    line += f" {r['of']:>9.1f} {r['oi']:>9.1f}"
    line += "".join(f" {r[p] / r['of']:>12.2f}x {r[p] / r['oi']:>13.2f}x" for p in precisions)
    print(line, flush=True)
PY
