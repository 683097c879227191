#!/usr/bin/env bash
# Runs every cargo-fuzz target for RUNS executions (default 10 M), one after the other,
# starting from the committed corpus (fuzz/corpus/<target>, left untouched), then prints
# each target's final libFuzzer line. Needs the nightly toolchain and cargo-fuzz
# (`cargo install cargo-fuzz`). A crash stops the script with the input in
# fuzz/artifacts/<target>/.
#   scripts/fuzz.sh                 # the campaign recorded in BENCHMARKS.md
#   RUNS=20000 scripts/fuzz.sh      # the CI smoke run
#   MERGE=1 scripts/fuzz.sh         # also merge what the run found into fuzz/corpus
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-10000000}
targets=${TARGETS:-"request_parse split_queue config_parse rest_bodies"}
out=${LOGS:-target/fuzz-logs}
mkdir -p "$out"
cargo +nightly fuzz build -O
for t in $targets; do
    start=$(date +%s)
    # New inputs go to the first directory only, so the committed corpus stays as it is.
    mkdir -p "$out/corpus-$t"
    if ! cargo +nightly fuzz run -O "$t" "$out/corpus-$t" "fuzz/corpus/$t" -- \
        -runs="$runs" -print_final_stats=1 >"$out/$t.log" 2>&1; then
        echo "$t: FAILED after $(($(date +%s) - start)) s; see $out/$t.log" >&2
        grep -E "panicked|ERROR|SUMMARY|Test unit written" "$out/$t.log" | head -5 >&2
        exit 1
    fi
    printf '%-14s %s  (%d s)\n' "$t" "$(grep -E '^#[0-9]+[[:space:]]+DONE' "$out/$t.log" | tail -1)" \
        $(($(date +%s) - start))
    if [ "${MERGE:-0}" = 1 ]; then
        cargo +nightly fuzz run -O "$t" "fuzz/corpus/$t" "$out/corpus-$t" -- -merge=1 \
            >>"$out/$t.log" 2>&1
    fi
done
