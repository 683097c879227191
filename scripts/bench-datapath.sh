#!/usr/bin/env bash
# Data-path benchmark: 4 KiB random reads at QD1 and QD32 through the daemon (blkio client
# via `vhost-iocost bench`) versus fio with io_uring + O_DIRECT directly on the same backing
# file (`vhost-iocost bench --fio-file`, the same job run by fio and reported in the same
# form: latency is submission to completion on both sides), and the null device at QD32.
#
# The machine is shared and noisy, so daemon and fio runs alternate for ROUNDS rounds and
# every round gives its own ratio; the summary is the median of the rounds.
#   usage: scripts/bench-datapath.sh [RUNTIME_SECONDS] [ROUNDS]        (needs: fio)
#   CPUS=1 scripts/bench-datapath.sh ...   pins daemon, client and fio to the given CPU
#                                          list (`taskset -c`); default: not pinned
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-10}
rounds=${2:-3}
source scripts/lib.sh
pin=()
if [ -n "${CPUS:-}" ]; then pin=(taskset -c "$CPUS"); fi

# A fully written 1 GiB file, so reads hit allocated blocks rather than holes.
fill_file "$work/disk.img" 1G

# measure NAME QD [--fio-file FILE]: one 4 KiB randread run; appends a JSON line to results.
measure() {
    local name=$1 qd=$2
    shift 2
    "${pin[@]}" "$bin" bench --json --runtime "${runtime}s" --ramp 1s "$@" \
        --tenant "socket=$work/v.sock,rw=randread,bs=4k,iodepth=$qd" 2>/dev/null |
        python3 -c '
import json, sys
r = json.load(sys.stdin)["results"][0]
print(json.dumps({"name": sys.argv[1], "iops": r["iops"], "p50": r["lat_p50_us"], "p99": r["lat_p99_us"]}))' \
        "$name" >>"$work/results.jsonl"
}

echo "== file backend, 4 KiB randread, runtime ${runtime}s, ${rounds} rounds, $(nproc) cores, $(uname -r), CPUs ${CPUS:-not pinned}"
# QoS off: this measures the data path alone (scripts/bench-qos.sh measures QoS).
start_daemon "[device]
path = \"disk.img\"
[device.qos]
enable = false
[[volume]]
name = \"v\"
socket = \"v.sock\"
size = \"1GiB\"" "${pin[@]}"
for round in $(seq "$rounds"); do
    for qd in 1 32; do
        measure "daemon QD$qd" "$qd"
        measure "fio QD$qd" "$qd" --fio-file "$work/disk.img"
    done
done
stop_daemon

python3 - "$work/results.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("{:<12} {:>10} {:>8} {:>8}".format("run", "IOPS", "p50 us", "p99 us"))
for r in rows:
    print("{name:<12} {iops:>10.0f} {p50:>8.0f} {p99:>8.0f}".format(**r))
def pairs(qd):
    d = [r for r in rows if r["name"] == f"daemon QD{qd}"]
    f = [r for r in rows if r["name"] == f"fio QD{qd}"]
    return list(zip(d, f))
ratios = [d["iops"] / f["iops"] for d, f in pairs(32)]
gaps = [d["p50"] - f["p50"] for d, f in pairs(1)]
print("QD32 IOPS daemon/fio per round: " + " ".join(f"{x:.2f}" for x in ratios)
      + f"  median {statistics.median(ratios):.2f}  (target >= 0.90)")
print("QD1 p50 daemon - fio per round: " + " ".join(f"{x:+.0f}us" for x in gaps)
      + f"  median {statistics.median(gaps):+.0f}us  (target <= +15us)")
EOF

echo "== null device, 4 KiB randread, QD32"
start_daemon "[device]
kind = \"null\"
[device.qos]
enable = false
[[volume]]
name = \"n\"
socket = \"n.sock\"
size = \"1GiB\"" "${pin[@]}"
printf 'null   QD32  '
"${pin[@]}" "$bin" bench --runtime "${runtime}s" --ramp 1s --tenant "socket=$work/n.sock,rw=randread,bs=4k,iodepth=32" 2>/dev/null | tail -1
stop_daemon
