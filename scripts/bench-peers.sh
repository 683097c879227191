#!/usr/bin/env bash
# The data path against the peers a user would pick instead, side by side in one run:
# 4 KiB random reads (`vhost-iocost bench`, the blkio client) through one
# vhost-user queue at QD32 and QD1, on
#   - fio with io_uring and O_DIRECT directly on the same file (the reference),
#   - this daemon on the file and on `kind = "null"` (QoS off, and the null path with QoS
#     on),
#   - qemu-storage-daemon on the file (aio=io_uring, cache.direct=on) and on null-co;
#   - with a client that polls its queue (the tenant's poll = true) and so never sleeps:
#     the file at QD1 with poll_max = "64us", and the null paths at QD32, where what is
#     left is the servers' own work per request (and, for a server that does not poll,
#     its wake-ups on the client's kicks);
#   - at QD1, the daemon's worker (`cpu_affinity`) and the client pinned to the CPU taking
#     the disk's interrupts, with poll_max = "64us", against fio pinned there too and
#     qemu-storage-daemon placed the same way (its iothread at poll-max-ns=64000);
# the server's CPU time per request (utime + stime from /proc) on the null paths at a
# fixed 40,000 requests a second, server and client pinned to one CPU and to two; the
# daemon with its default adaptive polling and with
# `poll_max = "0us"`; and the scaling of a two-queue null volume served by one and by two
# workers, from one client thread on one queue to two client threads on two queues.
#
# The machine is shared and noisy: the rows run one after another in each of ROUNDS
# rounds, and the table shows the best round of each (highest IOPS, lowest p50).
# The workers' scaling is summarised by its median round as well.
#   usage: scripts/bench-peers.sh [RUNTIME_SECONDS] [ROUNDS]   (needs fio, qemu-storage-daemon)
#   ONLY=workers runs only the workers' rows.
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-5}
rounds=${2:-2}
rate=40000
source scripts/lib.sh
command -v qemu-storage-daemon >/dev/null ||
    { echo "qemu-storage-daemon is required (apt-get install qemu-system-common)"; exit 1; }

fill_file "$work/disk.img" 1G
irq=$(irq_cpu "$work/disk.img")
server_pid=
# lib.sh's cleanup stops the daemon; qemu-storage-daemon too.
trap 'if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi; cleanup' EXIT

# cpu_ticks PID: the process's user + system time, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# measure ROW QD SOCKET [BENCH_ARGS...]: one run; appends a JSON line with the row's
# IOPS, p50, requests and the server's CPU time over the run. $client_cpu pins the client.
measure() {
    local row=$1 qd=$2 socket=$3
    shift 3
    local before=0 after=0
    if [ -n "$server_pid" ]; then before=$(cpu_ticks "$server_pid"); fi
    pin_client "$bin" bench --json --runtime "${runtime}s" --ramp "${ramp:-1s}" "$@" \
        --tenant "socket=$socket,rw=randread,bs=4k,iodepth=$qd${tenant_opt:-}" 2>/dev/null >"$work/run.json"
    if [ -n "$server_pid" ]; then after=$(cpu_ticks "$server_pid"); fi
    python3 - "$row" "$qd" "$((after - before))" "$(getconf CLK_TCK)" "$work/run.json" \
        >>"$work/results.jsonl" <<'PY'
import json, sys
row, qd, ticks, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = json.load(open(sys.argv[5]))["results"][0]
print(json.dumps({"row": row, "qd": qd, "iops": r["iops"], "p50": r["lat_p50_us"],
                  "ios": r["ios"], "cpu_s": ticks / hz}))
PY
}

# daemon DEVICE_LINES QOS_ENABLE [VOLUME_LINES]
daemon() {
    start_daemon "[device]
$1
[device.qos]
enable = $2
[[volume]]
name = \"v\"
socket = \"v.sock\"
size = \"1GiB\"
${3:-}"
    server_pid=$daemon_pid
}


both_depths() { for qd in 32 1; do measure "$1" "$qd" "${@:2}"; done; }

# cpu_per_request ROW SOCKET: the server's CPU time per request at $rate requests/s, with
# server and client on one CPU ("same CPU") and on two ("two CPUs"): a wake-up across
# CPUs costs the woken thread several microseconds more on this VM, so unpinned runs
# land in either mode.
cpu_per_request() {
    taskset -a -p -c 1 "$server_pid" >/dev/null
    ramp=0s tenant_opt=",rate_iops=$rate" client_cpu=1 measure "$1, CPU, same CPU" 32 "$2"
    taskset -a -p -c 0 "$server_pid" >/dev/null
    ramp=0s tenant_opt=",rate_iops=$rate" client_cpu=1 measure "$1, CPU, two CPUs" 32 "$2"
    taskset -a -p -c 0-1 "$server_pid" >/dev/null
}

echo "== 4 KiB randread, one queue, runtime ${runtime}s, ${rounds} rounds, $(nproc) cores, $(uname -r)"
for round in $(seq "$rounds"); do
    server_pid=
    if [ "${ONLY:-}" != workers ]; then
    both_depths "fio io_uring O_DIRECT, file" "$work/v.sock" --fio-file "$work/disk.img"
    daemon 'path = "disk.img"' false
    both_depths "vhost-iocost, file" "$work/v.sock"
    stop_server
    daemon 'path = "disk.img"
poll_max = "64us"' false
    measure "vhost-iocost, file, poll_max 64us" 1 "$work/v.sock"
    tenant_opt=",poll=true" measure "vhost-iocost, file, poll_max 64us, polling client" 1 "$work/v.sock"
    stop_server
    if [ -n "$irq" ]; then
        client_cpu=$irq measure "fio, interrupt CPU" 1 "$work/v.sock" --fio-file "$work/disk.img"
        daemon 'path = "disk.img"
poll_max = "64us"' false "cpu_affinity = [$irq]"
        client_cpu=$irq measure "vhost-iocost, file, poll_max 64us, interrupt CPU" 1 "$work/v.sock"
        stop_server
        qsd "driver=file,node-name=n0,filename=$work/disk.img,cache.direct=on,aio=io_uring" iothread 64000
        taskset -a -p -c "$irq" "$server_pid" >/dev/null
        client_cpu=$irq measure "qemu-storage-daemon, file, iothread poll-max-ns 64us, interrupt CPU" 1 "$work/q.sock"
        stop_server
    fi
    qsd "driver=file,node-name=n0,filename=$work/disk.img,cache.direct=on,aio=io_uring"
    both_depths "qemu-storage-daemon, file" "$work/q.sock"
    stop_server
    daemon 'kind = "null"' false
    both_depths "vhost-iocost, null" "$work/v.sock"
    tenant_opt=",poll=true" measure "vhost-iocost, null, polling client" 32 "$work/v.sock"
    cpu_per_request "vhost-iocost, null" "$work/v.sock"
    stop_server
    daemon 'kind = "null"
poll_max = "0us"' false
    both_depths "vhost-iocost, null, no polling" "$work/v.sock"
    cpu_per_request "vhost-iocost, null, no polling" "$work/v.sock"
    stop_server
    daemon 'kind = "null"' true
    measure "vhost-iocost, null, QoS on" 32 "$work/v.sock"
    measure "vhost-iocost, null, QoS on" 32 "$work/v.sock"
    stop_server
    daemon 'kind = "null"' false
    measure "vhost-iocost, null" 32 "$work/v.sock"
    stop_server
    fi
    for workers in 1 2; do
        daemon 'kind = "null"' false "num_queues = 2
workers = $workers"
        measure "workers $workers, 1 client thread" 16 "$work/v.sock"
        tenant_opt=",queues=2,queue_threads=true" measure "workers $workers, 2 client threads" 32 "$work/v.sock"
        stop_server
    done
    qsd "driver=null-co,node-name=n0,size=1073741824"
    both_depths "qemu-storage-daemon, null-co" "$work/q.sock"
    tenant_opt=",poll=true" measure "qemu-storage-daemon, null-co, polling client" 32 "$work/q.sock"
    cpu_per_request "qemu-storage-daemon, null-co" "$work/q.sock"
    stop_server
    qsd "driver=null-co,node-name=n0,size=1073741824" iothread
    both_depths "qemu-storage-daemon, null-co, iothread" "$work/q.sock"
    tenant_opt=",poll=true" measure "qemu-storage-daemon, null-co, iothread, polling client" 32 "$work/q.sock"
    cpu_per_request "qemu-storage-daemon, null-co, iothread" "$work/q.sock"
    stop_server
done

python3 - "$work/results.jsonl" "$rate" "$irq" "${ONLY:-}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rate, irq, only = sys.argv[2], sys.argv[3], sys.argv[4]
def best(row, qd, key, pick):
    vals = [r[key] for r in rows if r["row"] == row and r["qd"] == qd]
    return pick(vals) if vals else None
def workers_scaling():
    print("\ntwo-queue null volume, QD16 per client thread (IOPS; median round, best round):")
    for workers in (1, 2):
        ones = [r["iops"] for r in rows if r["row"] == f"workers {workers}, 1 client thread"]
        twos = [r["iops"] for r in rows if r["row"] == f"workers {workers}, 2 client threads"]
        ratios = [b / a for a, b in zip(ones, twos)]
        print(f"  workers = {workers}: 1 thread on 1 queue {statistics.median(ones) / 1000:,.1f} k "
              f"(best {max(ones) / 1000:,.1f} k), 2 threads on 2 queues "
              f"{statistics.median(twos) / 1000:,.1f} k (best {max(twos) / 1000:,.1f} k), "
              f"ratio within a round: median {statistics.median(ratios):.2f} "
              f"({', '.join(f'{x:.2f}' for x in ratios)})")
if only == "workers":
    workers_scaling()
    sys.exit(0)
fio = "fio io_uring O_DIRECT, file"
fio32, fio1 = best(fio, 32, "iops", max), best(fio, 1, "p50", min)
print("| path | QD32 IOPS | x fio | QD1 p50 | - fio |")
print("|---|---|---|---|---|")
for row in [fio, "vhost-iocost, file", "qemu-storage-daemon, file",
            "vhost-iocost, null", "vhost-iocost, null, no polling",
            "qemu-storage-daemon, null-co", "qemu-storage-daemon, null-co, iothread"]:
    iops, p50 = best(row, 32, "iops", max), best(row, 1, "p50", min)
    x = f"{iops / fio32:.2f}" if "file" in row else ""
    d = f"{p50 - fio1:+.1f} us" if "file" in row else ""
    print(f"| {row} | {iops / 1000:,.1f} k | {x} | {p50:.1f} us | {d} |")
d32 = best("vhost-iocost, null", 32, "iops", max)
q32 = best("qemu-storage-daemon, null-co", 32, "iops", max)
on = best("vhost-iocost, null, QoS on", 32, "iops", max)
print(f"\nnull path QD32, vhost-iocost / qemu-storage-daemon null-co: {d32 / q32:.2f}  (target >= 1.3)")
print(f"null path QD32, QoS on / off: {on / d32:.2f}  (target >= 0.97)")
print(f"file path QD1 p50 with poll_max = 64us: "
      f"{best('vhost-iocost, file, poll_max 64us', 1, 'p50', min) - fio1:+.1f} us from fio; "
      f"with a polling client too: "
      f"{best('vhost-iocost, file, poll_max 64us, polling client', 1, 'p50', min) - fio1:+.1f} us")
if irq:
    pinned = best("vhost-iocost, file, poll_max 64us, interrupt CPU", 1, "p50", min)
    fio_pinned = best("fio, interrupt CPU", 1, "p50", min)
    qsd_pinned = best("qemu-storage-daemon, file, iothread poll-max-ns 64us, interrupt CPU", 1, "p50", min)
    print(f"file path QD1 p50 with poll_max = 64us, the worker (cpu_affinity) and the client on "
          f"CPU {irq}, which takes the disk's interrupts: {pinned:.1f} us, "
          f"{pinned - fio_pinned:+.1f} us from fio on that CPU ({fio_pinned:.1f} us); "
          f"qemu-storage-daemon placed the same way: {qsd_pinned:.1f} us, {qsd_pinned - fio_pinned:+.1f} us")
dp = best("vhost-iocost, null, polling client", 32, "iops", max)
for row in ["qemu-storage-daemon, null-co", "qemu-storage-daemon, null-co, iothread"]:
    qp = best(f"{row}, polling client", 32, "iops", max)
    print(f"null path QD32, polling client: vhost-iocost {dp / 1000:,.0f} k, {row} "
          f"{qp / 1000:,.0f} k: {dp / qp:.2f}")
print(f"\nserver CPU per request at {rate} requests/s (best round; all rounds):")
for row in ["vhost-iocost, null", "vhost-iocost, null, no polling",
            "qemu-storage-daemon, null-co", "qemu-storage-daemon, null-co, iothread"]:
    for placement in ["same CPU", "two CPUs"]:
        per = [r["cpu_s"] / r["ios"] * 1e6 for r in rows
               if r["row"] == f"{row}, CPU, {placement}" and r["ios"]]
        print(f"  {row}, {placement}: {min(per):.2f} us ("
              + ", ".join(f"{x:.2f}" for x in per) + ")")
workers_scaling()
PY
