#!/usr/bin/env bash
# The servers' own work per request, counted rather than timed: each server
# runs under valgrind's callgrind, which counts the instructions it executes, while a
# native `vhost-iocost bench` client that polls its queue (4 KiB random reads, QD32, on
# the other CPU) keeps it saturated. Instruction counts do not move with this machine's
# placement and cache states, so they compare code paths that throughput cannot tell
# apart here. Counting runs from just before the client connects to just after it ends
# (start-up is not counted), per thread. Prints, per request served:
#   - this daemon on `kind = "null"` with QoS off; with QoS on alone on the device (its
#     lone-volume path: nothing to protect); and with QoS on beside a neighbour volume
#     that reads 200 times a second (the full vtime path), the model set far faster
#     than the daemon so that no budget binds;
#   - qemu-storage-daemon on null-co (its main loop);
# for the thread that serves the queue and for the whole process (the daemon's planner
# and control threads; qemu-storage-daemon's RCU and other threads), and the serving
# thread's instructions split by where they run (the daemon's own code, the QoS core,
# vm-memory, virtio-queue, vhost-user-backend, libc).
#   usage: scripts/bench-instructions.sh [RUNTIME_SECONDS]   (needs valgrind, qemu-storage-daemon)
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-3}
for tool in valgrind callgrind_control qemu-storage-daemon; do
    command -v "$tool" >/dev/null ||
        { echo "$tool is required (apt-get install valgrind qemu-system-common)"; exit 1; }
done
source scripts/lib.sh
qsd_pid=
trap 'if [ -n "$qsd_pid" ]; then kill "$qsd_pid" 2>/dev/null || true; fi; cleanup' EXIT

counting=(taskset -c 0 valgrind --tool=callgrind --instr-atstart=no --separate-threads=yes)

# counted RUN PID TENANT...: counts the instructions of process PID while a client
# drives TENANTs for $runtime s; keeps the client's JSON as $work/RUN.json.
counted() {
    local run=$1 pid=$2
    shift 2
    local tenants=()
    for t in "$@"; do tenants+=(--tenant "$t"); done
    callgrind_control -i on "$pid" >/dev/null 2>&1
    if ! taskset -c 1 "$bin" bench --json --runtime "${runtime}s" --ramp 0s "${tenants[@]}" \
        >"$work/$run.json" 2>"$work/$run.err"; then
        echo "bench failed for $run:"; cat "$work/$run.err"; exit 1
    fi
    callgrind_control -i off "$pid" >/dev/null 2>&1
}

polling="rw=randread,bs=4k,iodepth=32,poll=true"
volume() { printf '[[volume]]\nname = "%s"\nsocket = "%s.sock"\nsize = "1GiB"\n%s\n' "$1" "$1" "${2:-}"; }
for run in qos-off qos-alone qos-neighbour; do
    enable=true neighbour=
    if [ "$run" = qos-off ]; then enable=false; fi
    if [ "$run" = qos-neighbour ]; then neighbour=$(volume w 'offset = "1GiB"'); fi
    # Budgets never bind: the QoS rows count pricing and admission, not throttling.
    # valgrind does not implement seccomp, so the daemon runs unconfined.
    start_daemon "[security]
seccomp = \"off\"
[device]
kind = \"null\"
$unbinding_model
[device.qos]
enable = $enable
$(volume v)
$neighbour" "${counting[@]}" --callgrind-out-file="$work/$run.cg"
    if [ -n "$neighbour" ]; then
        counted "$run" "$daemon_pid" "socket=$work/v.sock,$polling" \
            "socket=$work/w.sock,rw=randread,bs=4k,iodepth=1,rate_iops=200"
    else
        counted "$run" "$daemon_pid" "socket=$work/v.sock,$polling"
    fi
    stop_daemon
done

rm -f "$work/q.sock"
"${counting[@]}" --callgrind-out-file="$work/qsd.cg" \
    qemu-storage-daemon --blockdev driver=null-co,node-name=n0,size=1073741824 \
    --export "type=vhost-user-blk,id=e0,node-name=n0,addr.type=unix,addr.path=$work/q.sock,writable=on,num-queues=1" \
    2>"$work/qsd.log" &
qsd_pid=$!
for _ in $(seq 300); do [ -S "$work/q.sock" ] && break; sleep 0.1; done
counted qsd "$qsd_pid" "socket=$work/q.sock,$polling"
kill "$qsd_pid"; wait "$qsd_pid" || true; qsd_pid=

for f in "$work"/*.cg-*; do
    callgrind_annotate --inclusive=no --auto=no --threshold=100 "$f" >"$f.txt" 2>/dev/null
done
python3 - "$work" <<'PY'
import glob, json, re, sys
work = sys.argv[1]

def functions(path):
    """(instructions, function) pairs and the total from callgrind_annotate's listing."""
    funcs, total = [], 0
    for line in open(path):
        m = re.match(r"\s*([\d,]+) .*?\)\s+(\S.*)$", line)
        if not m:
            continue
        n = int(m.group(1).replace(",", ""))
        if "PROGRAM TOTALS" in line:
            total = n
        else:
            funcs.append((n, m.group(2)))
    return total, funcs

def component(where):
    """Where an instruction ran, from the function's name (inlined code is counted
    where it was inlined)."""
    path, _, func = where.partition(":")
    func = func.lstrip("<")
    for prefix, name in [("vhost_iocost::qos", "QoS core"), ("vhost_iocost::cost_model", "QoS core"),
                         ("vhost_iocost::planner", "QoS core"), ("vhost_iocost", "daemon"),
                         ("vm_memory", "vm-memory"), ("virtio_queue", "virtio-queue"),
                         ("vhost_user_backend", "vhost-user-backend")]:
        if func.startswith(prefix):
            return name
    if "libc.so" in where or path.startswith("./"):
        return "libc (malloc, memcpy)"
    return "other (std, io-uring, vmm-sys-util)"

runs = {}
for run in ["qos-off", "qos-alone", "qos-neighbour", "qsd"]:
    served = json.load(open(f"{work}/{run}.json"))["results"][0]["completed"]
    threads = [functions(f) for f in sorted(glob.glob(f"{work}/{run}.cg-*.txt"))]
    serving = max(threads, key=lambda t: t[0])
    runs[run] = (served, serving, sum(t[0] for t in threads))

labels = {"qos-off": "vhost-iocost, QoS off", "qos-alone": "vhost-iocost, QoS on, alone",
          "qos-neighbour": "vhost-iocost, QoS on, beside a neighbour",
          "qsd": "qemu-storage-daemon, null-co"}
thread = lambda run: runs[run][1][0] / runs[run][0]
process = lambda run: runs[run][2] / runs[run][0]
print("| server, null device, polling client at QD32 | requests | serving thread | × qemu-storage-daemon | whole process | × qemu-storage-daemon |")
print("|---|---|---|---|---|---|")
for run, label in labels.items():
    print(f"| {label} | {runs[run][0]:,} | {thread(run):,.0f} | {thread(run) / thread('qsd'):.2f} "
          f"| {process(run):,.0f} | {process(run) / process('qsd'):.2f} |")
for run in ["qos-alone", "qos-neighbour"]:
    print(f"\n{labels[run]} / QoS off, serving thread: {thread(run) / thread('qos-off'):.3f}; "
          f"whole process: {process(run) / process('qos-off'):.3f}")
print("\nthe daemon's serving thread, instructions per request by where they run:")
print("| component | " + " | ".join(labels[r] for r in ["qos-off", "qos-alone", "qos-neighbour"]) + " |")
print("|---|---|---|---|")
splits = {}
for run in ["qos-off", "qos-alone", "qos-neighbour"]:
    served, (total, funcs), _ = runs[run]
    for n, where in funcs:
        c = component(where)
        splits.setdefault(c, {}).setdefault(run, 0)
        splits[c][run] += n / served
for c, per in sorted(splits.items(), key=lambda kv: -kv[1].get("qos-off", 0)):
    print(f"| {c} | " + " | ".join(f"{per.get(r, 0):,.0f}" for r in ["qos-off", "qos-alone", "qos-neighbour"]) + " |")
PY
