#!/usr/bin/env bash
# QoS benchmarks, each comparison from one run on one machine:
#  1. null device, one volume, 4 KiB randread QD32: QoS on versus off (the cost of the
#     admission path);
#  2. noisy neighbour on a real file: a QD1 4 KiB random reader next to a 1 MiB sequential
#     writer at equal weights, solo and together, without and with QoS.
#   usage: scripts/bench-qos.sh [RUNTIME_SECONDS]      (needs: fio)
#   CPUS=1 scripts/bench-qos.sh ...   pins daemon and clients to the given CPU list
#                                     (`taskset -c`); default: not pinned
#   SECTION=2 ...                     runs only that section
#   WRITER_BS=256k WRITER_QD=8 ...    the noisy neighbour's writer (default 1M, 8)
# MODEL overrides the [device.model] keys for the file runs (default: this machine's
# measured coefficients, see BENCHMARKS.md).
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
    # A model far faster than the daemon can go: budgets never bind, so this measures the
    # cost of pricing and admitting every request, not throttling.
    start_daemon "[device]
kind = \"null\"
[device.model]
rbps = 1000000000000
rseqiops = 100000000
rrandiops = 100000000
wbps = 1000000000000
wseqiops = 100000000
wrandiops = 100000000
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
fill_file "$work/disk.img" 2G
reader="socket=$work/reader.sock,name=reader,rw=randread,bs=4k,iodepth=1"
writer="socket=$work/writer.sock,name=writer,rw=write,bs=$wbs,iodepth=$wqd"
for enable in false true; do
    start_daemon "$(noisy_neighbour_config $enable)" "${pin[@]}"
    echo "-- qos=$enable: solo reader, solo writer, then both"
    bench --tenant "$reader"
    bench --tenant "$writer" | tail -1
    bench --tenant "$reader" --tenant "$writer" | tail -2
    grep -E 'qos: vrate changed' "$work/daemon.log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g' || true
    stop_daemon
done
fi
