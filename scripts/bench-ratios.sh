#!/usr/bin/env bash
# The data path's ratio targets (BENCHMARKS.md, "Data path against qemu-storage-daemon"),
# each measured in alternating pairs. Both sides' servers stay
# up, and short runs of the two alternate (A B, B A, A B…), so that both sample this
# machine's fast and slow states alike; the result is the median of the pairs' ratios.
# On this VM one server's throughput moves by 10-40 % from one minute to the next, far
# more than between two runs a few seconds apart, so best-of-rounds tables
# (scripts/bench-peers.sh) can put the two sides of a ratio in different states.
#   - file QD32: this daemon (QoS off) against fio io_uring O_DIRECT on the same file;
#   - null QD32: this daemon against qemu-storage-daemon's null-co in its main loop and
#     with an iothread (its recommended setup), with a client that sleeps until it is
#     notified and with one that polls its queue;
#   - null QD32: this daemon with QoS on (a model far faster than the daemon, so no
#     budget binds: the cost of pricing and admitting) against QoS off, both clients;
#   - scaling on the null path: a two-queue volume with `workers = 2` from two client
#     threads (QD16 each) against qemu-storage-daemon's two-queue export in one iothread
#     (an export runs in one thread in QEMU 7.2), and eight one-queue volumes from eight
#     client threads (QD16 each) against eight exports with an iothread each.
# 4 KiB random reads (the `bench` client), unpinned.
#   usage: scripts/bench-ratios.sh [PAIRS] [SECONDS]   (needs fio, qemu-storage-daemon)
#   ROWS="qos scaling" ... runs only those groups of rows (file, null, qos, scaling)
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-8}
secs=${2:-2}
source scripts/lib.sh
command -v qemu-storage-daemon >/dev/null ||
    { echo "qemu-storage-daemon is required (apt-get install qemu-system-common)"; exit 1; }
qsd_pids=()
trap 'for pid in ${qsd_pids[@]+"${qsd_pids[@]}"}; do kill "$pid" 2>/dev/null || true; done; cleanup' EXIT
rows=${ROWS:-file null qos scaling}
wants() { [[ " $rows " == *" $1 "* ]]; }

fill_file "$work/disk.img" 1G
# volume NAME [LINES]: a volume of 1 GiB (LINES may place it with `offset`).
volume() { printf '[[volume]]\nname = "%s"\nsocket = "%s.sock"\nsize = "1GiB"\n%s\n' "$1" "$1" "${2:-}"; }
start_daemon_in "$work/file" "[device]
path = \"$work/disk.img\"
[device.qos]
enable = false
$(volume v)"
for qos in false true; do
    start_daemon_in "$work/null-qos-$qos" "[device]
kind = \"null\"
$unbinding_model
[device.qos]
enable = $qos
$(volume v)"
done
start_daemon_in "$work/null-2q" "[device]
kind = \"null\"
[device.qos]
enable = false
$(volume v 'num_queues = 2
workers = 2')"
start_daemon_in "$work/null-8v" "[device]
kind = \"null\"
[device.qos]
enable = false
$(for i in $(seq 0 7); do volume "v$i" "offset = \"${i}GiB\""; done)"

# qsd_up NAME ARGS...: qemu-storage-daemon with ARGS, its log in $work/NAME.log; waits
# for every socket ARGS name. (lib.sh's qsd serves one export at a time; these servers
# stay up together so that their runs can alternate.)
qsd_up() {
    local name=$1
    shift
    qemu-storage-daemon "$@" 2>"$work/$name.log" &
    qsd_pids+=($!)
    local sock
    for sock in $(printf '%s\n' "$@" | sed -n 's/.*addr.path=\([^,]*\).*/\1/p'); do
        for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
        [ -S "$sock" ] || { echo "qemu-storage-daemon $name did not start:"; cat "$work/$name.log"; exit 1; }
    done
}
null_co() { echo "driver=null-co,node-name=n$1,size=1073741824"; }
qsd_export() { echo "type=vhost-user-blk,id=e$1,node-name=n$1,addr.type=unix,addr.path=$work/$2,writable=on,num-queues=$3${4:+,iothread=$4}"; }
qsd_up main --blockdev "$(null_co 0)" --export "$(qsd_export 0 q.sock 1)"
qsd_up iothread --object iothread,id=io0 --blockdev "$(null_co 0)" --export "$(qsd_export 0 qi.sock 1 io0)"
qsd_up two-queues --object iothread,id=io0 --blockdev "$(null_co 0)" --export "$(qsd_export 0 q2.sock 2 io0)"
eight=()
for i in $(seq 0 7); do
    eight+=(--object "iothread,id=io$i" --blockdev "$(null_co "$i")" --export "$(qsd_export "$i" "q8-$i.sock" 1 "io$i")")
done
qsd_up eight "${eight[@]}"

# iops BENCH_ARGS: one run's IOPS, summed over its tenants; BENCH_ARGS is one string of `bench` arguments
# (without spaces or wildcards inside an argument).
iops() {
    local args
    read -ra args <<<"$1"
    if ! "$bin" bench --json --runtime "${secs}s" --ramp 500ms "${args[@]}" \
        >"$work/run.json" 2>"$work/run.err"; then
        echo "bench $1 failed:" >&2; cat "$work/run.err" >&2; exit 1
    fi
    python3 -c 'import json, sys; print(sum(r["iops"] for r in json.load(open(sys.argv[1]))["results"]))' \
        "$work/run.json"
}
reads() { echo "--tenant socket=$1,rw=randread,bs=4k,iodepth=32${2:-}"; }
# eight_tenants SOCKET_PREFIX: one QD16 reader on each of SOCKET_PREFIX0 .. 7.sock.
eight_tenants() {
    local i
    for i in $(seq 0 7); do printf -- '--tenant socket=%s%s.sock,rw=randread,bs=4k,iodepth=16 ' "$1" "$i"; done
}

# pair NAME A B: $pairs pairs of runs of A and B (`bench` argument strings), the first of
# each pair alternating; a line "NAME|A's IOPS|B's IOPS" per pair.
pair() {
    local i a b
    for i in $(seq "$pairs"); do
        if [ $((i % 2)) = 1 ]; then a=$(iops "$2"); b=$(iops "$3"); else b=$(iops "$3"); a=$(iops "$2"); fi
        echo "$1|$a|$b" >>"$work/pairs.txt"
    done
}

null=$work/null-qos-false/v.sock
echo "== 4 KiB randread: $pairs alternating pairs of ${secs} s runs, $(nproc) cores, $(uname -r)"
if wants file; then
    pair "file QD32: vhost-iocost / fio io_uring O_DIRECT|0.97" \
        "$(reads "$work/file/v.sock")" "--fio-file $work/disk.img $(reads "$work/file/v.sock")"
fi
if wants null; then
    pair "null QD32: vhost-iocost / qemu-storage-daemon null-co, main loop|" "$(reads "$null")" "$(reads "$work/q.sock")"
    pair "null QD32: vhost-iocost / qemu-storage-daemon null-co, iothread|1.2" "$(reads "$null")" "$(reads "$work/qi.sock")"
    pair "the same, polling client: / main loop|" "$(reads "$null" ,poll=true)" "$(reads "$work/q.sock" ,poll=true)"
    pair "the same, polling client: / iothread|" "$(reads "$null" ,poll=true)" "$(reads "$work/qi.sock" ,poll=true)"
fi
if wants qos; then
    pair "null QD32: QoS on / QoS off|0.97" "$(reads "$work/null-qos-true/v.sock")" "$(reads "$null")"
    pair "the same, polling client|0.97" "$(reads "$work/null-qos-true/v.sock" ,poll=true)" "$(reads "$null" ,poll=true)"
fi
if wants scaling; then
    pair "two-queue volume, two client threads: workers = 2 / qemu-storage-daemon, one iothread|" \
        "$(reads "$work/null-2q/v.sock" ,queues=2,queue_threads=true)" "$(reads "$work/q2.sock" ,queues=2,queue_threads=true)"
    pair "eight volumes, eight client threads: vhost-iocost / qemu-storage-daemon, an iothread each|" \
        "$(eight_tenants "$work/null-8v/v")" "$(eight_tenants "$work/q8-")"
fi

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
