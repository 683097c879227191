#!/usr/bin/env bash
# Where a server's time per request goes, counted by the kernel: each server runs the
# null path (4 KiB random reads through one vhost-user queue, `vhost-iocost bench` as the
# client) while `perf stat` counts, over the whole server process, its CPU time, context
# switches and system calls (in total and the kinds these servers make). Per request:
#   - this daemon, `kind = "null"`, QoS off, on its defaults and with `poll_max = "0us"`;
#   - qemu-storage-daemon, null-co, in its main loop and in an iothread (its recommended
#     setup);
# at QD32 unpaced and at a fixed RATE requests/s (the same load for every server, so the
# work per request is compared at equal load), the paced runs also pinned. Servers alternate, round by round; the
# summary is the median of the rounds per row. Hardware counters (cycles, instructions)
# are not available in this VM; scripts/bench-instructions.sh counts instructions.
#   usage: scripts/bench-map.sh [RUNTIME_SECONDS] [ROUNDS]   (RATE=40000; needs perf,
#          qemu-storage-daemon)
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-5}
rounds=${2:-3}
rate=${RATE:-40000}
null_co=driver=null-co,node-name=n0,size=1073741824
for tool in perf qemu-storage-daemon; do
    command -v "$tool" >/dev/null || { echo "$tool is required"; exit 1; }
done
source scripts/lib.sh
server_pid=
trap 'if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi; cleanup' EXIT

events=task-clock,context-switches,raw_syscalls:sys_enter
kinds=(io_uring_enter read write ppoll epoll_wait futex recvmsg sendmsg)
for k in "${kinds[@]}"; do events+=",syscalls:sys_enter_$k"; done

# counted ROW SOCKET QD [TENANT_OPTS]: one client run while perf counts the server;
# appends the row's requests and counts as a JSON line.
counted() {
    local row=$1 socket=$2 qd=$3 opts=${4:-}
    perf stat -x, -e "$events" -p "$server_pid" -o "$work/perf.csv" &
    local perf_pid=$!
    sleep 0.2 # perf attaches to every thread of the server
    pin_client "$bin" bench --json --runtime "${runtime}s" --ramp 0s \
        --tenant "socket=$socket,rw=randread,bs=4k,iodepth=$qd$opts" 2>/dev/null >"$work/run.json"
    kill -INT "$perf_pid"
    wait "$perf_pid" || true
    python3 - "$row" "$qd${opts:+ paced}${placement:+, $placement}" "$work/run.json" "$work/perf.csv" \
        >>"$work/results.jsonl" <<'PY'
import json, sys
row, load, run, csv = sys.argv[1:5]
r = json.load(open(run))["results"][0]
counts = {}
for line in open(csv):
    f = line.strip().split(",")
    if len(f) > 2 and f[0] and f[0][0].isdigit():
        counts[f[2].split(":")[-1].replace("sys_enter_", "")] = float(f[0])
print(json.dumps({"row": row, "load": load, "ios": r["ios"], "iops": r["iops"], **counts}))
PY
}

# null_daemon [DEVICE_LINES]: this daemon on the null device, QoS off.
null_daemon() {
    start_daemon "[device]
kind = \"null\"
${1:-}
[device.qos]
enable = false
[[volume]]
name = \"v\"
socket = \"v.sock\"
size = \"1GiB\""
    server_pid=$daemon_pid
}


# both_loads ROW SOCKET: unpaced and paced, left to the scheduler; then paced with the
# server's threads and the client on one CPU, and on two (a wake-up across vCPUs costs
# the woken thread several microseconds more on this VM, so unpinned runs mix the two).
both_loads() {
    counted "$1" "$2" 32
    counted "$1" "$2" 32 ",rate_iops=$rate"
    taskset -a -p -c 1 "$server_pid" >/dev/null
    placement="one CPU" client_cpu=1 counted "$1" "$2" 32 ",rate_iops=$rate"
    taskset -a -p -c 0 "$server_pid" >/dev/null
    placement="two CPUs" client_cpu=1 counted "$1" "$2" 32 ",rate_iops=$rate"
    taskset -a -p -c 0-1 "$server_pid" >/dev/null
}

echo "== null path, 4 KiB randread, one queue, ${runtime}s runs, ${rounds} rounds, RATE=$rate, $(nproc) cores, $(uname -r)"
for round in $(seq "$rounds"); do
    null_daemon
    both_loads "vhost-iocost null" "$work/v.sock"
    stop_server
    null_daemon 'poll_max = "0us"'
    both_loads "vhost-iocost null, no poll" "$work/v.sock"
    stop_server
    qsd "$null_co"
    both_loads "qsd null-co, main loop" "$work/q.sock"
    stop_server
    qsd "$null_co" iothread
    both_loads "qsd null-co, iothread" "$work/q.sock"
    stop_server
done

python3 - "$work/results.jsonl" "${kinds[@]}" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
kinds = sys.argv[2:]
cols = ["task-clock", "context-switches", "sys_enter"] + kinds
names = ["CPU us", "ctx switches", "syscalls"] + kinds
print("per request: median of the rounds [min-max]; CPU us = the server's CPU time")
print(f"{'server':<28} {'load':<22} {'IOPS':>8}  " + "  ".join(f"{n:>18}" for n in names))
keys = list(dict.fromkeys((r["row"], r["load"]) for r in rows))
for key in keys:
    same = [x for x in rows if (x["row"], x["load"]) == key]
    cells = []
    for c in cols:
        # perf's task-clock is in ms: per request in us.
        scale = 1000.0 if c == "task-clock" else 1.0
        vals = [x.get(c, 0.0) * scale / max(x["ios"], 1) for x in same]
        cells.append(f"{statistics.median(vals):.2f} [{min(vals):.2f}-{max(vals):.2f}]")
    iops = statistics.median(x["iops"] for x in same)
    print(f"{key[0]:<28} {key[1]:<22} {iops:>8.0f}  " + "  ".join(f"{c:>18}" for c in cells))
EOF
