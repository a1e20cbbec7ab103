#!/usr/bin/env bash
# Makes examples/speech.wav, the speech sample that README.md, docs/whisper.md and the
# `--help` examples of `transcribe`, `attention` and `bench transcribe` name: a few
# seconds of clear English spoken by espeak-ng, converted by sox to the form Whisper
# reads (16 kHz, mono, 16-bit PCM WAV). Run once; the output is committed (espeak-ng is
# not deterministic from run to run, so the committed file is the sample, not this
# script's next output).
#
#   scripts/make-speech-sample.sh [OUT]      OUT defaults to examples/speech.wav
#
# Needs espeak-ng and sox (Debian: apt-get install -y espeak-ng sox).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-examples/speech.wav}
TEXT=${TEXT:-"Every word can look at every other word in the sentence."}

for p in espeak-ng sox; do
  command -v "$p" >/dev/null || { echo "make-speech-sample: $p is missing (apt-get install -y espeak-ng sox)" >&2; exit 1; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# espeak-ng speaks at 22050 Hz mono 16-bit; en-us at 150 words a minute is clear.
espeak-ng -v en-us -s 150 -w "$tmp/raw.wav" "$TEXT"
# 16 kHz mono 16-bit (sox's high-quality resampler, no dither so the file is stable for
# a given input), with a quarter second of silence at each end.
sox "$tmp/raw.wav" -D -r 16000 -c 1 -b 16 -e signed-integer "$OUT" rate -v pad 0.25 0.25
bytes=$(stat -c %s "$OUT")
secs=$(soxi -D "$OUT")
echo "wrote $OUT: $secs s, $bytes bytes"
if (( bytes > 200000 )); then
  echo "make-speech-sample: $OUT is $bytes bytes; keep it under 200 KB (a shorter TEXT)" >&2
  exit 1
fi
