#!/usr/bin/env bash
# Makes the Whisper reference data in tests/data/whisper/ (run once; the outputs are
# committed, and the tests read only them):
#
#   clips/*.wav, clips.json      espeak-ng speech (scripts/whisper_clips.py)
#   mel_filters.npz              from the openai-whisper==20250625 sdist, as published
#   mel_reference.safetensors    openai-whisper's log-mel of each clip
#   ct2_reference.json           CTranslate2 4.8.5's greedy ids and first-step logits
#                                (scripts/whisper_reference.py)
#
# Needs root for apt (espeak-ng, sox, ffmpeg, and Debian's CPU-only torch: PyPI's torch
# wheels pull in ~3 GB of CUDA libraries), a venv with --system-site-packages (default
# .venv-ref, git-ignored; VENV=... to choose), and the models in lucent's cache (fetched
# here with `lucent fetch`). espeak-ng is not deterministic (the same sentence comes out
# a few samples longer or shorter from run to run), so running this again changes the
# clips, and every reference with them: commit all of tests/data/whisper together.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-tests/data/whisper}
VENV=${VENV:-.venv-ref}
SDIST_SHA=37a91a3921809d9f44748ffc73c0a55c9f366c85a3ef5c2ae0cc09540432eb96

need=()
for p in espeak-ng sox ffmpeg; do command -v "$p" >/dev/null || need+=("$p"); done
/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null || need+=(python3-torch python3-numpy)
/usr/bin/python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
if ((${#need[@]})); then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}"
fi

if [[ ! -x $VENV/bin/python ]]; then
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$VENV/bin/pip" download --no-deps --no-binary :all: openai-whisper==20250625 -d "$tmp"
sdist=$tmp/openai_whisper-20250625.tar.gz
echo "$SDIST_SHA  $sdist" | sha256sum -c -
"$VENV/bin/pip" install "$sdist" ctranslate2==4.8.5 safetensors==0.8.0

cargo run --release -p lucent-cli -- fetch whisper-tiny.en whisper-base

mkdir -p "$OUT"
tar -xzf "$sdist" -C "$tmp" openai_whisper-20250625/whisper/assets/mel_filters.npz
cp "$tmp/openai_whisper-20250625/whisper/assets/mel_filters.npz" "$OUT/"
nice -n 10 "$VENV/bin/python" scripts/whisper_clips.py "$OUT"
nice -n 10 "$VENV/bin/python" scripts/whisper_reference.py "$OUT" "${LUCENT_HOME:-$HOME/.cache/lucent}"
du -sh "$OUT"
