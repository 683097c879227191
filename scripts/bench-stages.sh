#!/usr/bin/env bash
# Where a request's time goes: the daemon (QoS off) and the
# `vhost-iocost bench` client record their stage events (VHOST_IOCOST_STAGE_TRACE), and
# scripts/stage_breakdown.py cuts each round trip into the client's wake-up, the client's
# work, the kick, the daemon's parsing, its submit system calls, the device and the
# daemon's completion. 4 KiB random reads through one queue at QD1 and QD32 on a file,
# beside fio with io_uring and O_DIRECT on the same file in the same rounds, and at QD1 on
# the null device. At QD1 also with the daemon polling through the file's reads
# (poll_max = "64us"), with the worker (`cpu_affinity`) and the client pinned to the CPU
# taking the disk's interrupts (beside fio pinned there), and with a client that polls its
# queue too (the tenant's poll = true, as a guest with polled virtio-blk queues).
#
# The machine is shared and noisy: each row runs once per round, the rows in turn, and the
# table shows each row's median round by IOPS (fio's too), so that its stages stay those of
# one run. Stages are means over the round trips
# traced, so they add up to the traced cycle (the trace includes the ramp, the cycle row
# does not); the cycle model is exact at QD1 and holds at QD32 while the daemon reaps
# whole batches (the completions-per-reap row).
#   usage: scripts/bench-stages.sh [RUNTIME_SECONDS] [ROUNDS]   (needs fio)
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-4}
rounds=${2:-2}
source scripts/lib.sh

fill_file "$work/disk.img" 1G
irq=$(irq_cpu "$work/disk.img")

# row NAME QD: appends the JSON line of one run to results.jsonl; $trace names the trace
# of a daemon run (empty for fio).
row() {
    python3 - "$1" "$2" "$work/run.json" "${trace:-}" >>"$work/results.jsonl" <<'PY'
import json, subprocess, sys
name, qd, run, trace = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
r = json.load(open(run))["results"][0]
out = {"row": name, "qd": qd, "iops": r["iops"], "p50": r["lat_p50_us"],
       "cycle_us": qd / r["iops"] * 1e6}
if trace:
    out.update(json.loads(subprocess.check_output(
        ["python3", "scripts/stage_breakdown.py", trace])))
print(json.dumps(out))
PY
}

# fio_row QD [NAME]
fio_row() {
    pin_client "$bin" bench --json --runtime "${runtime}s" --ramp 1s --fio-file "$work/disk.img" \
        --tenant "socket=fio,rw=randread,bs=4k,iodepth=$1" 2>/dev/null >"$work/run.json"
    trace= row "${2:-fio}" "$1"
}

# traced_row NAME QD DEVICE_LINES [TENANT_KEYS] [VOLUME_LINES]: one daemon run, traced
# from start to stop.
traced_row() {
    trace="$work/trace.$RANDOM"
    export VHOST_IOCOST_STAGE_TRACE=$trace
    start_daemon "[device]
$3
[device.qos]
enable = false
[[volume]]
name = \"v\"
socket = \"v.sock\"
size = \"1GiB\"
${5:-}"
    pin_client "$bin" bench --json --runtime "${runtime}s" --ramp 1s \
        --tenant "socket=$work/v.sock,rw=randread,bs=4k,iodepth=$2${4:-}" 2>/dev/null >"$work/run.json"
    stop_daemon
    unset VHOST_IOCOST_STAGE_TRACE
    row "$1" "$2"
    rm -f "$trace".*
}

echo "== 4 KiB randread, one queue, runtime ${runtime}s, ${rounds} rounds, $(nproc) cores, $(uname -r)"
for round in $(seq "$rounds"); do
    for qd in 1 32; do
        fio_row "$qd"
        traced_row "vhost-iocost, QD$qd" "$qd" 'path = "disk.img"'
    done
    traced_row "vhost-iocost, QD1, poll_max 64us" 1 'path = "disk.img"
poll_max = "64us"'
    if [ -n "$irq" ]; then
        client_cpu=$irq fio_row 1 "fio, interrupt CPU"
        client_cpu=$irq traced_row "vhost-iocost, QD1, poll_max 64us, interrupt CPU" 1 'path = "disk.img"
poll_max = "64us"' "" "cpu_affinity = [$irq]"
    fi
    traced_row "vhost-iocost, QD1, poll_max 64us, polling client" 1 'path = "disk.img"
poll_max = "64us"' ",poll=true"
    traced_row "vhost-iocost, null, QD1" 1 'kind = "null"'
done

python3 - "$work/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def median_round(name, qd):
    # The median round by IOPS (the upper middle one of an even count).
    runs = sorted((r for r in rows if r["row"] == name and r["qd"] == qd), key=lambda r: r["iops"])
    return runs[len(runs) // 2]
cols = [("vhost-iocost, QD1", 1), ("vhost-iocost, QD1, poll_max 64us", 1),
        ("vhost-iocost, QD1, poll_max 64us, interrupt CPU", 1),
        ("vhost-iocost, QD1, poll_max 64us, polling client", 1),
        ("vhost-iocost, QD32", 32), ("vhost-iocost, null, QD1", 1)]
cols = [c for c in cols if any(r["row"] == c[0] for r in rows)]
picked = [median_round(*c) for c in cols]
fio = {qd: median_round("fio", qd) for qd in (1, 32)}
# The pinned daemon against fio pinned to the same CPU.
fio_of = {c[0]: (median_round("fio, interrupt CPU", 1) if "interrupt CPU" in c[0] else fio[c[1]])
          for c in cols}
print("| mean per round trip, us | " + " | ".join(c[0].removeprefix("vhost-iocost, ") for c in cols) + " |")
print("|---|" + "---|" * len(cols))
for stage in picked[0]["stages_us"]:
    print(f"| {stage} | " + " | ".join(f"{p['stages_us'][stage]:.1f}" for p in picked) + " |")
print("| sum of the stages | " + " | ".join(f"{sum(p['stages_us'].values()):.1f}" for p in picked) + " |")
print("| round trips traced / client wake-ups | " + " | ".join(
    f"{p['round_trips']} / {p['client_wake_ups']}" for p in picked) + " |")
print("| completions per reap: mean; most common (share) | " + " | ".join(
    f"{p['completions_per_reap']['mean']:.1f}; {p['completions_per_reap']['most_common']} "
    f"({p['completions_per_reap']['its_share']:.0%})" for p in picked) + " |")
print("| cycle (QD / IOPS) | " + " | ".join(f"{p['cycle_us']:.1f}" for p in picked) + " |")
# The null device has no fio to compare with.
on_file = [("null" not in c[0]) for c in cols]
def vs_fio(fmt):
    return " | ".join(fmt(p, fio_of[c[0]]) if f else "" for p, c, f in zip(picked, cols, on_file))
print("| fio's cycle, its median round of the same rounds (pinned with the pinned daemon) | " + vs_fio(lambda p, f: f"{f['cycle_us']:.1f}") + " |")
print("| IOPS / fio's | " + vs_fio(lambda p, f: f"{p['iops'] / f['iops']:.2f}") + " |")
print("| p50 latency - fio's | " + vs_fio(lambda p, f: f"{p['p50'] - f['p50']:+.1f}") + " |")
PY
