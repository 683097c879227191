#!/usr/bin/env bash
# The data path's ratio targets (BENCHMARKS.md, "Data path against qemu-storage-daemon"),
# each measured in alternating pairs. Both sides' servers stay
# up, and short runs of the two alternate (A B, B A, A B…), so that both sample this
# machine's fast and slow states alike; the result is the median of the pairs' ratios.
# On this VM one server's throughput moves by 10-40 % from one minute to the next, far
# more than between two runs a few seconds apart, so best-of-rounds tables
# (scripts/bench-peers.sh) can put the two sides of a ratio in different states.
#   - file QD32: this daemon (QoS off) against fio io_uring O_DIRECT on the same file;
#   - null QD32: this daemon against qemu-storage-daemon's null-co in its main loop, with
#     a client that sleeps until it is notified and with one that polls its queue;
#   - null QD32: this daemon with QoS on against QoS off.
# 4 KiB random reads through one queue (the `bench` client), unpinned.
#   usage: scripts/bench-ratios.sh [PAIRS] [SECONDS]   (needs fio, qemu-storage-daemon)
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-8}
secs=${2:-2}
source scripts/lib.sh
command -v qemu-storage-daemon >/dev/null ||
    { echo "qemu-storage-daemon is required (apt-get install qemu-system-common)"; exit 1; }
qsd_pid=
trap 'if [ -n "$qsd_pid" ]; then kill "$qsd_pid" 2>/dev/null || true; fi; cleanup' EXIT

fill_file "$work/disk.img" 1G
volume='[[volume]]
name = "v"
socket = "v.sock"
size = "1GiB"'
start_daemon_in "$work/file" "[device]
path = \"$work/disk.img\"
[device.qos]
enable = false
$volume"
for qos in false true; do
    start_daemon_in "$work/null-qos-$qos" "[device]
kind = \"null\"
[device.qos]
enable = $qos
$volume"
done
qemu-storage-daemon --blockdev driver=null-co,node-name=n0,size=1073741824 \
    --export "type=vhost-user-blk,id=e0,node-name=n0,addr.type=unix,addr.path=$work/q.sock,writable=on,num-queues=1" \
    2>"$work/qsd.log" &
qsd_pid=$!
for _ in $(seq 100); do [ -S "$work/q.sock" ] && break; sleep 0.1; done
[ -S "$work/q.sock" ] || { echo "qemu-storage-daemon did not start:"; cat "$work/qsd.log"; exit 1; }

# iops BENCH_ARGS: one run's IOPS; BENCH_ARGS is one string of `bench` arguments
# (without spaces or wildcards inside an argument).
iops() {
    local args
    read -ra args <<<"$1"
    if ! "$bin" bench --json --runtime "${secs}s" --ramp 500ms "${args[@]}" \
        >"$work/run.json" 2>"$work/run.err"; then
        echo "bench $1 failed:" >&2; cat "$work/run.err" >&2; exit 1
    fi
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["results"][0]["iops"])' \
        "$work/run.json"
}
reads() { echo "--tenant socket=$1,rw=randread,bs=4k,iodepth=32${2:-}"; }

# pair NAME A B: $pairs pairs of runs of A and B (`bench` argument strings), the first of
# each pair alternating; a line "NAME|A's IOPS|B's IOPS" per pair.
pair() {
    local i a b
    for i in $(seq "$pairs"); do
        if [ $((i % 2)) = 1 ]; then a=$(iops "$2"); b=$(iops "$3"); else b=$(iops "$3"); a=$(iops "$2"); fi
        echo "$1|$a|$b" >>"$work/pairs.txt"
    done
}

echo "== 4 KiB randread, QD32, one queue: $pairs alternating pairs of ${secs} s runs, $(nproc) cores, $(uname -r)"
pair "file: vhost-iocost / fio io_uring O_DIRECT|0.95" \
    "$(reads "$work/file/v.sock")" "--fio-file $work/disk.img $(reads "$work/file/v.sock")"
pair "null: vhost-iocost / qemu-storage-daemon null-co|1.3" \
    "$(reads "$work/null-qos-false/v.sock")" "$(reads "$work/q.sock")"
pair "null, polling client: vhost-iocost / qemu-storage-daemon null-co|" \
    "$(reads "$work/null-qos-false/v.sock" ,poll=true)" "$(reads "$work/q.sock" ,poll=true)"
pair "null: QoS on / QoS off|0.97" \
    "$(reads "$work/null-qos-true/v.sock")" "$(reads "$work/null-qos-false/v.sock")"

python3 - "$work/pairs.txt" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, target, a, b = line.strip().split("|")
    rows.setdefault((name, target), []).append((float(a), float(b)))
print("| ratio | median of the pairs | range | mean IOPS, A / B | target |")
print("|---|---|---|---|---|")
for (name, target), runs in rows.items():
    ratios = sorted(a / b for a, b in runs)
    mean_a = statistics.mean(a for a, _ in runs) / 1000
    mean_b = statistics.mean(b for _, b in runs) / 1000
    print(f"| {name} | {statistics.median(ratios):.2f} | {ratios[0]:.2f}-{ratios[-1]:.2f} "
          f"| {mean_a:,.0f} k / {mean_b:,.0f} k | {'>= ' + target if target else ''} |")
PY
