#!/usr/bin/env bash
# The peer side of the transcription benchmark: CTranslate2 (faster-whisper's engine) on
# the benchmark's speech, float32 and int8, 1 and 2 threads, both Whisper models.
#
#   scripts/bench-transcribe-peer.sh                        # everything, 3 rounds
#   MODELS=whisper-tiny.en CLIPS=speech30 THREADS=1 REPEATS=5 scripts/bench-transcribe-peer.sh
#   PRECISION="exact int8" scripts/bench-transcribe-peer.sh   # lucent int8 beside CT2 int8
#
# What is timed, per clip: every 30-second window at fixed 30-s steps (6 for the
# 3-minute clip), each one `Whisper.generate` from its log-mel features: the encoder, then
# greedy decoding (beam 1) with the no-timestamps prompt (tiny.en: <|startoftranscript|>
# <|notimestamps|>; base: <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>,
# the language given, not detected) until <|endoftext|>, CTranslate2's default Whisper
# rules (suppressed tokens, suppress_blank). The features are made beforehand (numpy, the
# formula of io/mel.rs with tests/data/whisper/mel_filters.npz) and not timed. The
# real-time factor is seconds of compute per second of audio. Configurations take turns
# (REPEATS rounds, each running every configuration once, after one untimed warm-up), and
# the table gives medians; the machine is shared, so read the spread too.
#
# The lucent side is `lucent bench transcribe` (the same windows, prompt and rules; its
# features are made beforehand too): with LUCENT=1 (default) each round also runs, in
# turn with CTranslate2's configurations, one `lucent bench transcribe --rounds 1` per
# model, clip and thread count (it loads the model and warms up untimed, then times one
# pass), so both engines see the same load on the shared machine. PRECISION (default
# exact; a space-separated list of exact, bf16, int8) chooses lucent's precisions
# (`--precision`, docs/precision.md): each is one more configuration of every round,
# labelled lucent-PRECISION.
#
# CTranslate2 comes from PyPI into a virtual environment outside the repository that
# later runs reuse: ${LUCENT_BENCH_VENV:-$HOME/.cache/lucent/bench-venv-ct2}. The models
# come from lucent's cache (`lucent fetch`), the speech from bench-transcribe-clips.sh.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${LUCENT_BENCH_VENV:-$HOME/.cache/lucent/bench-venv-ct2}"
MODELS="${MODELS:-whisper-tiny.en whisper-base}"
CLIPS="${CLIPS:-speech30 speech180}"
COMPUTE="${COMPUTE:-float32 int8}"
THREADS="${THREADS:-1 2}"
REPEATS="${REPEATS:-3}"
PRECISION="${PRECISION:-exact}"
AUDIO="${AUDIO:-$ROOT/target/bench-audio}"

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -c "import ctranslate2, numpy" 2>/dev/null ||
    "$VENV/bin/python" -m pip install --quiet ctranslate2==4.8.5 numpy

(cd "$ROOT" && cargo build --release -p lucent-cli --quiet)
LUCENT="$ROOT/target/release/lucent"
for m in $MODELS; do "$LUCENT" fetch "$m" >/dev/null; done
CACHE="${LUCENT_HOME:-$HOME/.cache/lucent}"

for c in $CLIPS; do
    if [ ! -f "$AUDIO/$c.wav" ]; then "$ROOT/scripts/bench-transcribe-clips.sh" "$AUDIO"; fi
done

"$VENV/bin/python" - "$CACHE" "$AUDIO" "$ROOT/tests/data/whisper/mel_filters.npz" "$REPEATS" \
    "$MODELS" "$CLIPS" "$COMPUTE" "$THREADS" "${LUCENT_SIDE:-1}" "$LUCENT" "$PRECISION" <<'PY'
import json, statistics, subprocess, sys, time, wave
import numpy as np
import ctranslate2

cache, audio_dir, npz, repeats = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
models, clips, computes, threads = (a.split() for a in sys.argv[5:9])
lucent_side, lucent_exe = sys.argv[9] == "1", sys.argv[10]
precisions = sys.argv[11].split()
N_FFT, HOP, N_FRAMES, N_SAMPLES = 400, 160, 3000, 480000

def read_wav(path):
    with wave.open(path, "rb") as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768

def windows(audio, filters):
    """Whisper's transcriber: log-mel of audio + 30 s of zeros, 30-s windows of content."""
    x = np.concatenate([audio, np.zeros(N_SAMPLES, np.float32)])
    x = np.pad(x, N_FFT // 2, mode="reflect")
    n = (len(x) - N_FFT) // HOP  # the last frame dropped
    frames = np.lib.stride_tricks.sliding_window_view(x, N_FFT)[::HOP][:n]
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)
    power = np.abs(np.fft.rfft(frames * hann, axis=1)) ** 2
    mel = np.log10(np.maximum(filters @ power.T, 1e-10))
    mel = (np.maximum(mel, mel.max() - 8.0) + 4.0) / 4.0
    content = len(audio) // HOP
    out = []
    for seek in range(0, content, N_FRAMES):
        w = np.zeros((filters.shape[0], N_FRAMES), np.float32)
        k = min(N_FRAMES, content - seek)
        w[:, :k] = mel[:, seek:seek + k]
        out.append(ctranslate2.StorageView.from_array(w[None]))
    return out

filters = np.load(npz)["mel_80"]
features = {c: windows(read_wav(f"{audio_dir}/{c}.wav"), filters) for c in clips}
seconds = {c: len(read_wav(f"{audio_dir}/{c}.wav")) / 16000 for c in clips}

configs, engines, prompts = [], {}, {}
for m in models:
    folder = f"{cache}/models/{m}"
    special = {t["content"]: t["id"] for t in json.load(open(f"{folder}/tokenizer.json"))["added_tokens"]}
    for ct in computes:
        for t in threads:
            e = ctranslate2.models.Whisper(folder, device="cpu", compute_type=ct, intra_threads=int(t))
            engines[(m, ct, t)] = e
            sot, nots = special["<|startoftranscript|>"], special["<|notimestamps|>"]
            prompts[m] = ([sot, special["<|en|>"], special["<|transcribe|>"], nots]
                          if e.is_multilingual else [sot, nots])
            for c in clips:
                configs.append((m, c, ct, t))

if lucent_side:
    for m in models:
        for t in threads:
            for c in clips:
                for p in precisions:
                    configs.append((m, c, f"lucent-{p}", t))

def run_lucent(cfg):
    m, c, ct, t = cfg
    out = subprocess.run([lucent_exe, "bench", "transcribe", "-m", m, f"{audio_dir}/{c}.wav",
                          "--threads-list", t, "--rounds", "1", "--json",
                          "--precision", ct.removeprefix("lucent-")],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out)["runs"][0]
    return r["seconds"], r["tokens"]

def run(cfg):
    m, c, ct, t = cfg
    if ct.startswith("lucent"):
        return run_lucent(cfg)
    e, tokens = engines[(m, ct, t)], 0
    start = time.perf_counter()
    for f in features[c]:
        r = e.generate(f, [prompts[m]], beam_size=1, max_length=448)
        tokens += len(r[0].sequences_ids[0])
    return time.perf_counter() - start, tokens

for cfg in configs:  # warm-up
    run(cfg)
times = {cfg: [] for cfg in configs}
tokens = {}
for _ in range(repeats):
    for cfg in configs:
        s, n = run(cfg)
        times[cfg].append(s)
        tokens[cfg] = n

print(f"CTranslate2 {ctranslate2.__version__}, {repeats} interleaved rounds, medians")
print(f"{'model':<16} {'clip':<10} {'compute':<12} {'threads':>7} {'seconds':>8} {'RTF':>7} {'tokens':>6}  all runs")
for cfg in configs:
    m, c, ct, t = cfg
    med = statistics.median(times[cfg])
    runs = " ".join(f"{s:.2f}" for s in sorted(times[cfg]))
    print(f"{m:<16} {c:<10} {ct:<12} {t:>7} {med:8.2f} {med / seconds[c]:7.4f} {tokens[cfg]:>6}  {runs}")
if lucent_side:
    print("\nlucent vs CTranslate2 (their median seconds over lucent's; > 1: lucent faster)")
    for cfg in configs:
        m, c, ct, t = cfg
        if not ct.startswith("lucent"):
            continue
        mine = statistics.median(times[cfg])
        vs = "  ".join(f"{p} {statistics.median(times[(m, c, p, t)]) / mine:.2f}x"
                       for p in computes)
        print(f"{m:<16} {c:<10} {ct:<12} threads {t}: {vs}")
PY
