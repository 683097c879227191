#!/usr/bin/env bash
# The load-generator pictures of BENCHMARKS.md ("Load generator pictures"), written to
# docs/bench/ as SVG, PNG and JSON:
#  a. weighted split: configs/bench/weighted-split.toml on volumes weighted 100 and 300,
#     with a slow pinned model (4,000 random-read IOPS, vrate 100 %, as in
#     tests/integration/qos.rs) so QoS is the bottleneck: IOPS 1:3 over time;
#  b. noisy neighbour: configs/bench/noisy-neighbour.toml (a QD1 reader; a 1 MiB writer
#     arriving after 6 s for 8 s) on a 2 GiB file with the model and QoS targets of
#     scripts/bench-qos.sh, without QoS, with QoS, and with fio directly on the file.
#   usage: scripts/bench-pictures.sh            (needs: fio; about 2 minutes)
# MODEL and QOS override the noisy-neighbour [device.model] and [device.qos] keys.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
out=docs/bench
mkdir -p "$out"

# bench JOB NAME TITLE [ARGS...]: runs the job against the sockets in $work, writes
# $out/NAME.{svg,png,json} and prints the table.
bench() {
    local job=$1 name=$2 title=$3; shift 3
    "$bin" bench --job "$job" --socket-dir "$work" --plot "$out/$name" --title "$title" \
        --json "$@" > "$out/$name.json"
    if command -v jq >/dev/null; then
        printf 'tenant\tIOPS\tMiB/s\tp50us\tp99us\tp99.9us\terrors\n'
        jq -r '.results[] | [.name, (.iops|round), (.mib_per_s*10|round/10), .lat_p50_us,
            .lat_p99_us, .lat_p999_us, .errors] | @tsv' "$out/$name.json"
    fi
}

echo "== a. weighted split 100:300, model 4000 IOPS, vrate pinned at 100 %"
fill_file "$work/disk.img" 64M
start_daemon "[device]
path = \"disk.img\"
[device.model]
rbps = 200000000
rseqiops = 4000
rrandiops = 4000
wbps = 200000000
wseqiops = 4000
wrandiops = 4000
[device.qos]
min = 100.0
max = 100.0
[[volume]]
name = \"light\"
socket = \"light.sock\"
size = \"16MiB\"
weight = 100
[[volume]]
name = \"heavy\"
socket = \"heavy.sock\"
offset = \"16MiB\"
size = \"16MiB\"
weight = 300"
bench configs/bench/weighted-split.toml weighted-split "weighted split 100:300 (QoS-bound model, 4000 IOPS)"
stop_daemon

echo "== b. noisy neighbour on a 2 GiB file: reader randread 4k QD1, writer write 1M QD8 from 6 s to 14 s"
rm -f "$work/disk.img"
fill_file "$work/disk.img" 2G
for enable in false true; do
    start_daemon "$(noisy_neighbour_config $enable)"
    if [ "$enable" = true ]; then name=noisy-neighbour-qos; label="QoS on"; else name=noisy-neighbour-noqos; label="QoS off"; fi
    echo "-- qos=$enable"
    bench configs/bench/noisy-neighbour.toml "$name" "noisy neighbour, $label"
    grep -E 'qos: vrate changed' "$work/daemon.log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g' || true
    stop_daemon
done
echo "-- fio directly on the file (no daemon)"
bench configs/bench/noisy-neighbour.toml noisy-neighbour-fio "noisy neighbour, fio on the file" \
    --fio-file "$work/disk.img"
ls -l "$out"
