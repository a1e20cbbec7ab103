#!/usr/bin/env bash
# The reference engine of the decoder parity tests, rebuilt: llama.cpp (llama-cpp-python
# 0.3.36 from PyPI) compiled for AVX2 without AVX-512, which reproduces the golden files
# (tests/data/decoder_reference_*.json) exactly. An AVX-512 build differs from them in the
# last bits (its f16 dot products, its softmax sums), which the models' 8-bit activations
# can grow to half a logit, so layer-by-layer comparisons need this build.
#
#   scripts/parity-llama-avx2.sh                    # build once, then check both models
#   scripts/parity-llama-avx2.sh dump gemma3 1 DIR  # llama.cpp's intermediates of prompt 1
#
# `check` (the default) prints, per golden prompt, the largest difference between this
# build's first-step logits and the golden ones (0 means the build is the reference).
# `dump MODEL PROMPT DIR` writes every f32/f16 tensor llama.cpp computes for that golden
# prompt to DIR/NAME.npy (with DIR/index.json); pair it with lucent's own intermediates:
#   cargo run --release -p lucent --example trace_dump -- MODEL.gguf OURS ID ID ...
# The build takes 10-30 minutes on 2 cores the first time; the venv lives outside the
# repository: ${LUCENT_PARITY_VENV:-$HOME/.cache/lucent/venv-llama-avx2}.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${LUCENT_PARITY_VENV:-$HOME/.cache/lucent/venv-llama-avx2}"
MODELS="${LUCENT_HOME:-$HOME/.cache/lucent/models}"

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import llama_cpp, numpy" 2>/dev/null; then
    echo "building llama-cpp-python for AVX2 into $VENV (10-30 minutes the first time)..." >&2
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_BMI2=ON" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        "$VENV/bin/python" -m pip install --quiet --no-cache-dir llama-cpp-python==0.3.36 numpy
fi

# The models come through lucent's own fetch (cached).
(cd "$ROOT" && cargo build --release -p lucent-cli --quiet)
for m in smollm2 gemma3; do
    "$ROOT/target/release/lucent" fetch "$m" >/dev/null
done

exec "$VENV/bin/python" "$ROOT/scripts/llama_parity.py" "$ROOT/tests/data" "$MODELS" "${@:-check}"
