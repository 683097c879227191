#!/usr/bin/env bash
# QoS benchmarks, each comparison from one run on one machine:
#  1. null device, one volume, 4 KiB randread QD32: QoS on versus off (the cost of the
#     admission path);
#  2. noisy neighbour on a real file: a QD1 4 KiB random reader next to a 1 MiB sequential
#     writer at equal weights, solo and together, without and with QoS; then fio directly
#     on the file with the writer rate-capped at what it got with QoS (what a constant-rate
#     limiter at that bandwidth leaves the reader).
#   usage: scripts/bench-qos.sh [RUNTIME_SECONDS]      (needs: fio)
#   CPUS=1 scripts/bench-qos.sh ...   pins daemon and clients to the given CPU list
#                                     (`taskset -c`); default: not pinned
#   SECTION=2 ...                     runs only that section
#   WRITER_BS=256k WRITER_QD=8 ...    the noisy neighbour's writer (default 1M, 8)
#   PROFILE=1 ...                     section 2 profiles the disk first (`vhost-iocost
#                                     profile --quick`) and uses its model and read target
#   ROUNDS=N ...                      section 2 repeats the QoS-on solo and together runs N
#                                     times (default 1), each ratio against its own round
#   TRACE=FILE ...                    section 2 writes the planner's per-period records of
#                                     each QoS-on run together to FILE.1, FILE.2, ...
# MODEL overrides the [device.model] keys and QOS the [device.qos] keys of the file runs
# (default: the coefficients measured on the benchmark machine, in scripts/lib.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-10}
source scripts/lib.sh

pin=()
if [ -n "${CPUS:-}" ]; then pin=(taskset -c "$CPUS"); fi
bench() { "${pin[@]}" "$bin" bench --runtime "${runtime}s" --ramp 1s "$@" 2>/dev/null | tail -n +2; }

section=${SECTION:-all}
wbs=${WRITER_BS:-1M}
wqd=${WRITER_QD:-8}

if [ "$section" = all ] || [ "$section" = 1 ]; then
echo "== 1. null device, 4 KiB randread QD32, runtime ${runtime}s, CPUs ${CPUS:-not pinned}"
for enable in false true false true false true; do
    # Budgets never bind: this measures the cost of pricing and admitting every request.
    start_daemon "[device]
kind = \"null\"
$unbinding_model
[device.qos]
enable = $enable
[[volume]]
name = \"n\"
socket = \"n.sock\"
size = \"1GiB\"" "${pin[@]}"
    printf 'qos=%-5s ' "$enable"
    bench --tenant "socket=$work/n.sock,rw=randread,bs=4k,iodepth=32" | tee -a "$work/null.txt"
    stop_daemon
done
# Each "on" run against the "off" run just before it.
awk '{iops[NR] = $5} END {
    for (i = 2; i <= NR; i += 2) { r = iops[i] / iops[i - 1]; printf "%s%.3f", (i > 2 ? " " : "QoS on/off IOPS per pair: "), r }
    print "  (target >= 0.97)" }' "$work/null.txt"

fi

if [ "$section" = all ] || [ "$section" = 2 ]; then
echo "== 2. noisy neighbour on a 2 GiB file: reader randread 4k QD1, writer write $wbs QD$wqd, equal weights"
if [ -n "${PROFILE:-}" ]; then
    # The operator's workflow: profile this disk now and take its model and its suggested
    # read target. The writer is a throughput tenant: a loose write target, and vrate may
    # go as low as protecting the reader needs (min 5 rather than the suggested 60).
    "$bin" profile --path "$work/profile.img" --size 2GiB --quick --out "$work/profile.toml" 2>/dev/null >/dev/null
    model=$(sed -n '/^\[device.model\]/,/^$/p' "$work/profile.toml" | grep -v '^\[' | grep .)
    qos="$(grep -E '^(rpct|rlat) ' "$work/profile.toml")
wpct = 95.0
wlat = \"20ms\"
min = 5.0"
    echo "-- profiled: $(echo $model) | $(echo $qos)"
fi
fill_file "$work/disk.img" 2G
reader="socket=$work/reader.sock,name=reader,rw=randread,bs=4k,iodepth=1"
writer="socket=$work/writer.sock,name=writer,rw=write,bs=$wbs,iodepth=$wqd"
# settle_reader [--fio-file F]: waits until the reader's IOPS are steady (scripts/lib.sh).
settle_reader() { settle "${pin[@]}" "$bin" bench --runtime 2s "$@" --tenant "$reader"; }
# The daemon's log without colour codes.
plain_log() { sed 's/\x1b\[[0-9;]*m//g' "$work/daemon.log"; }
for enable in false true; do
    start_daemon "$(noisy_neighbour_config $enable)" env RUST_LOG=info,vhost_iocost::daemon=debug "${pin[@]}"
    rounds=1
    if [ "$enable" = true ]; then rounds=${ROUNDS:-1}; fi
    for round in $(seq "$rounds"); do
        echo "-- qos=$enable, round $round of $rounds: solo reader, solo writer, then both"
        settle_reader
        bench --tenant "$reader" | tee "$work/solo.txt"
        bench --tenant "$writer" | tail -1 | tee -a "$work/solo.txt"
        settle_reader
        trace_from=$(wc -l < "$work/daemon.log")
        bench --tenant "$reader" --tenant "$writer" | tail -2 | tee "$work/together.txt"
        # Each tenant together against its own solo run of the same round.
        cat "$work/solo.txt" "$work/together.txt" | awk -v qos="$enable" -v round="$round" '
            NR == 1 { rs = $5 } NR == 2 { ws = $6 } NR == 3 { rt = $5 } NR == 4 { wt = $6 }
            END { printf "== qos=%s round %d: reader %.0f %% of solo IOPS, writer %.0f %% of solo MiB/s\n",
                  qos, round, 100 * rt / rs, 100 * wt / ws }'
        if [ -n "${TRACE:-}" ] && [ "$enable" = true ]; then
            plain_log | tail -n +"$trace_from" | grep 'planner period' \
                | sed 's/.*planner period //' > "$TRACE.$round"
        fi
        plain_log | grep -E 'qos: vrate changed' | tail -1 || true
    done
    stop_daemon
done
# What the disk allows: fio directly on the file, the reader next to a writer held by a
# constant-rate limiter at exactly the IOPS the daemon's writer got with QoS on: what a
# token bucket at that write bandwidth would leave the reader on this disk. Every solo
# baseline and every run together starts on a settled disk (scripts/lib.sh, settle).
writer_iops=$(awk '$1 == "writer" { printf "%d", $5 }' "$work/together.txt")
echo "-- fio on the file (no daemon): solo reader, then reader + writer capped at $writer_iops IOPS"
settle_reader --fio-file "$work/disk.img"
bench --fio-file "$work/disk.img" --tenant "$reader" | tail -1
settle_reader --fio-file "$work/disk.img"
bench --fio-file "$work/disk.img" --tenant "$reader" --tenant "$writer,rate_iops=$writer_iops" | tail -2
fi
