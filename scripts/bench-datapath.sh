#!/usr/bin/env bash
# Data-path benchmark: 4 KiB random reads at QD1 and QD32 through the daemon (blkio client
# via `vhost-iocost bench`) versus fio with io_uring + O_DIRECT directly on the same backing
# file, and the null device at QD32. Prints the numbers recorded in BENCHMARKS.md.
#   usage: scripts/bench-datapath.sh [RUNTIME_SECONDS]     (needs: fio)
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-10}
source scripts/lib.sh

# A fully written 1 GiB file, so reads hit allocated blocks rather than holes.
fill_file "$work/disk.img" 1G


fio_direct() { # $1 = iodepth
    fio --name=direct --filename="$work/disk.img" --size=1G --rw=randread --bs=4k --direct=1 \
        --ioengine=io_uring --iodepth="$1" --time_based --runtime="$runtime" --output-format=json |
    python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]["read"]
p = j["clat_ns"]["percentile"]
print("{:>10.0f} IOPS  p50={:.0f}us p99={:.0f}us".format(j["iops"], p["50.000000"] / 1000, p["99.000000"] / 1000))'
}

echo "== file backend, 4 KiB randread, runtime ${runtime}s, $(nproc) cores, $(uname -r)"
# QoS off: this measures the data path alone (scripts/bench-qos.sh measures QoS).
start_daemon "[device]
path = \"disk.img\"
[device.qos]
enable = false
[[volume]]
name = \"v\"
socket = \"v.sock\"
size = \"1GiB\""
for qd in 1 32; do
    printf 'daemon QD%-3s ' "$qd"
    "$bin" bench --runtime "${runtime}s" --ramp 1s --tenant "socket=$work/v.sock,rw=randread,bs=4k,iodepth=$qd" 2>/dev/null | tail -1
    printf 'fio    QD%-3s ' "$qd"
    fio_direct "$qd"
done
stop_daemon

echo "== null device, 4 KiB randread, QD32"
start_daemon "[device]
kind = \"null\"
[device.qos]
enable = false
[[volume]]
name = \"n\"
socket = \"n.sock\"
size = \"1GiB\""
printf 'null   QD32  '
"$bin" bench --runtime "${runtime}s" --ramp 1s --tenant "socket=$work/n.sock,rw=randread,bs=4k,iodepth=32" 2>/dev/null | tail -1
stop_daemon
