#!/usr/bin/env bash
# The servers' own work per request, counted rather than timed (issue #16): each server
# runs under valgrind's callgrind, which counts the instructions it executes, while a
# native `vhost-iocost bench` client that polls its queue (4 KiB random reads, QD32, on
# the other CPU) keeps it saturated. Instruction counts do not move with this machine's
# placement and cache states, so they compare code paths that throughput cannot tell
# apart here. Prints instructions per request for
#   - this daemon on `kind = "null"`, QoS off and QoS on,
#   - qemu-storage-daemon on null-co (its main loop),
# and the daemon's instructions split by where they run (its own code, the QoS core,
# vm-memory, virtio-queue, vhost-user-backend, libc). Start-up and shutdown are counted
# too: about 0.3 % at the default runtime.
#   usage: scripts/bench-instructions.sh [RUNTIME_SECONDS]   (needs valgrind, qemu-storage-daemon)
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-3}
source scripts/lib.sh
for tool in valgrind qemu-storage-daemon; do
    command -v "$tool" >/dev/null ||
        { echo "$tool is required (apt-get install valgrind qemu-system-common)"; exit 1; }
done
qsd_pid=
trap 'if [ -n "$qsd_pid" ]; then kill "$qsd_pid" 2>/dev/null || true; fi; cleanup' EXIT

# counted NAME SOCKET: saturates the server behind SOCKET for $runtime s; keeps the run's
# JSON as $work/NAME.json.
counted() {
    taskset -c 1 "$bin" bench --json --runtime "${runtime}s" --ramp 0s \
        --tenant "socket=$2,rw=randread,bs=4k,iodepth=32,poll=true" 2>/dev/null >"$work/$1.json"
}

for qos in false true; do
    start_daemon "[device]
kind = \"null\"
[device.qos]
enable = $qos
[[volume]]
name = \"v\"
socket = \"v.sock\"
size = \"1GiB\"" taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$work/qos-$qos.cg"
    counted "qos-$qos" "$work/v.sock"
    stop_daemon
done

rm -f "$work/q.sock"
taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$work/qsd.cg" \
    qemu-storage-daemon --blockdev driver=null-co,node-name=n0,size=1073741824 \
    --export "type=vhost-user-blk,id=e0,node-name=n0,addr.type=unix,addr.path=$work/q.sock,writable=on,num-queues=1" \
    2>"$work/qsd.log" &
qsd_pid=$!
for _ in $(seq 300); do [ -S "$work/q.sock" ] && break; sleep 0.1; done
counted qsd "$work/q.sock"
kill "$qsd_pid"; wait "$qsd_pid" || true; qsd_pid=

for run in qos-false qos-true qsd; do
    callgrind_annotate --inclusive=no --auto=no --threshold=100 "$work/$run.cg" >"$work/$run.txt" 2>/dev/null
done
python3 - "$work" <<'PY'
import json, re, sys
work = sys.argv[1]

def load(run):
    """Requests served and (instructions, function) pairs from callgrind_annotate."""
    ios = json.load(open(f"{work}/{run}.json"))["results"][0]["ios"]
    funcs, total = [], None
    for line in open(f"{work}/{run}.txt"):
        m = re.match(r"\s*([\d,]+) .*?\)\s+(\S.*)$", line)
        if not m:
            continue
        n = int(m.group(1).replace(",", ""))
        if "PROGRAM TOTALS" in line:
            total = n
        else:
            funcs.append((n, m.group(2)))
    return ios, total, funcs

def component(where):
    """Where an instruction ran, from the function's name (inlined code is counted
    where it was inlined)."""
    path, _, func = where.partition(":")
    func = func.lstrip("<")
    for prefix, name in [("vhost_iocost::qos", "QoS core"), ("vhost_iocost::cost_model", "QoS core"),
                         ("vhost_iocost", "daemon"), ("vm_memory", "vm-memory"),
                         ("virtio_queue", "virtio-queue"), ("vhost_user_backend", "vhost-user-backend")]:
        if func.startswith(prefix):
            return name
    if "libc.so" in where or path.startswith("./"):
        return "libc (malloc, memcpy)"
    return "other (std, io-uring, vmm-sys-util)"

rows = {}
for run in ["qos-false", "qos-true", "qsd"]:
    rows[run] = load(run)
qsd_ios, qsd_total, _ = rows["qsd"]
per = lambda run: rows[run][1] / rows[run][0]
print("| server, null device, polling client at QD32 | requests counted | instructions per request | x qemu-storage-daemon |")
print("|---|---|---|---|")
for run, label in [("qos-false", "vhost-iocost, QoS off"), ("qos-true", "vhost-iocost, QoS on"),
                   ("qsd", "qemu-storage-daemon, null-co")]:
    print(f"| {label} | {rows[run][0]:,} | {per(run):,.0f} | {per(run) / per('qsd'):.2f} |")
print(f"\nQoS on / off, instructions per request: {per('qos-true') / per('qos-false'):.3f}")
for run, label in [("qos-false", "QoS off"), ("qos-true", "QoS on")]:
    ios, total, funcs = rows[run]
    split = {}
    for n, where in funcs:
        c = component(where)
        split[c] = split.get(c, 0) + n
    print(f"\nvhost-iocost, {label}, instructions per request by where they run:")
    print("| component | instructions | share |")
    print("|---|---|---|")
    for c, n in sorted(split.items(), key=lambda kv: -kv[1]):
        print(f"| {c} | {n / ios:,.0f} | {100 * n / total:.0f} % |")
PY
