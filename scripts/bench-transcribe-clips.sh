#!/usr/bin/env bash
# The speech the transcription benchmark runs on (generated, not committed):
#
#   scripts/bench-transcribe-clips.sh [DIR]     # default target/bench-audio
#
# writes DIR/speech30.wav (30 s: one Whisper window, about 80 words, ~95 tokens) and
# DIR/speech180.wav (3 min: six such paragraphs one after another), 16 kHz mono 16-bit,
# spoken by espeak-ng (en-us, 130 words a minute, about 27 s a paragraph) and converted by sox. Each paragraph is
# padded with silence or cut to exactly 30 s, so the 3-minute clip is six full windows.
# espeak-ng is not deterministic to the sample, so both engines of a benchmark run must
# read the same files (make them once per run).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$ROOT/target/bench-audio}"
mkdir -p "$DIR"
for p in espeak-ng sox; do
    command -v "$p" >/dev/null || { echo "needs $p: apt-get install espeak-ng sox" >&2; exit 1; }
done

paragraphs=(
"The harbour was quiet in the early morning. A few fishing boats rocked against the pier while gulls circled above the masts. An old man sat on a wooden crate, mending a net with slow and careful hands. He had done this work for forty years, and he could tell the weather from the colour of the water. Today, he said, the wind would turn before noon."
"Our train left the city at half past seven and climbed into the hills. Outside the window, the fields changed from green to gold, and small villages appeared between the trees. The conductor walked through the carriage checking tickets and answering questions. By nine o'clock we reached the valley, where the river ran wide and slow beneath an old stone bridge."
"The recipe is simple, but it rewards patience. Warm the oil in a heavy pan, add the onions, and let them soften for ten minutes without letting them brown. Stir in the garlic and the spices, then the tomatoes and a cup of water. Cover the pan and leave it on a low heat for half an hour, tasting now and then."
"Every spring the school holds a science fair in the main hall. Students build models of volcanoes, test which paper towels hold the most water, and measure how fast plants grow under coloured light. The judges walk from table to table with clipboards, asking each student to explain what they expected and what actually happened, which is often the most interesting part."
"The library opened a new reading room on the second floor last month. It has tall windows facing the park, long oak tables, and lamps with green glass shades. Visitors must leave their bags at the desk and keep their voices low. In the afternoons the room fills with students, retired teachers, and a few writers working quietly on their next books."
"When the storm finally arrived, the power went out across the whole town. Neighbours gathered on porches with candles and radios, listening for news. Children counted the seconds between lightning and thunder to guess how far away the storm had moved. By midnight the rain had softened to a steady drizzle, and one by one the lights came back on."
)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
parts=()
for i in "${!paragraphs[@]}"; do
    espeak-ng -v en-us -s 130 -w "$tmp/raw$i.wav" "${paragraphs[$i]}"
    # 16 kHz mono 16-bit, padded or cut to exactly 30 s.
    sox -V1 -D "$tmp/raw$i.wav" -r 16000 -b 16 -c 1 "$tmp/p$i.wav" rate -v pad 0 10 trim 0 30
    parts+=("$tmp/p$i.wav")
done
cp "${parts[0]}" "$DIR/speech30.wav"
sox "${parts[@]}" "$DIR/speech180.wav"
for f in speech30 speech180; do
    echo "$DIR/$f.wav: $(soxi -D "$DIR/$f.wav") s"
done
