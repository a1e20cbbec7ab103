#!/usr/bin/env bash
# Fuzz lucent's parsers with cargo-fuzz (libFuzzer); see docs/reliability.md.
#
#   scripts/fuzz.sh TARGET MINUTES [libFuzzer flags...]   run one target
#   scripts/fuzz.sh list                                  the targets
#   scripts/fuzz.sh check                                 compile every target (CI step)
#
# Needs `cargo install cargo-fuzz`. RUSTC_BOOTSTRAP=1 lets the stable toolchain take the
# -Z flags cargo-fuzz passes. Targets build without a sanitizer (lucent's parsers are
# safe Rust) but with debug assertions, so an integer overflow is a crash. New inputs go
# to fuzz/work/TARGET (not committed); the seeds in fuzz/corpus/TARGET are only read.
# A crash, timeout (-timeout, seconds per input) or out-of-memory (-rss_limit_mb) leaves
# its input in fuzz/artifacts/TARGET/; the run's log is fuzz/work/TARGET.log.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTC_BOOTSTRAP=1
# The fuzz crate is a workspace of its own: start it from the main lock file, so that
# it builds the dependency versions the test suite tests.
[ -f fuzz/Cargo.lock ] || cp Cargo.lock fuzz/Cargo.lock

case "${1:-}" in
    list) exec cargo fuzz list ;;
    check) exec cargo check --manifest-path fuzz/Cargo.toml --bins ;;
    "" | -h | --help)
        sed -n '2,14p' "$0"
        exit 2
        ;;
esac
target=$1
minutes=${2:?usage: scripts/fuzz.sh TARGET MINUTES}
shift 2
mkdir -p "fuzz/work/$target" "fuzz/artifacts/$target"
dict=()
[ -f "fuzz/dict/$target.dict" ] && dict=("-dict=fuzz/dict/$target.dict")
# Chat messages start short (libFuzzer grows inputs slowly from small seeds): allow
# conversations of a few KB from the start.
[ "$target" = chat ] && dict+=("-max_len=4096" "-len_control=0")
nice -n 10 cargo fuzz run --sanitizer none --debug-assertions "$target" \
    "fuzz/work/$target" "fuzz/corpus/$target" -- \
    -max_total_time=$((minutes * 60)) -rss_limit_mb=512 -timeout=10 \
    -print_final_stats=1 "${dict[@]}" "$@" 2>&1 | tee "fuzz/work/$target.log"
