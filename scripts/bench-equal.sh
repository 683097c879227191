#!/usr/bin/env bash
# Many equal tenants: TENANTS volumes, each a QD4 4 KiB random reader of its own 64 MiB,
# all on one device, with no aggressor and no latency-class volume. For each setup, the
# tenants' IOPS together and the widest tenant's distance from their mean:
#
#   off        the daemon with QoS off
#   defaults   no [device.model] and no targets: calibrated at start-up, derived read
#              target, so `protect = "underserved"`
#   all        the same with `protect = "all"`: every volume's misses lower vrate
#   fio        (DEVICE=file) fio with TENANTS jobs at QD4 on the same byte ranges
#
# Setups run in turn, ROUNDS times (alternating, so the disk's drift hits each alike);
# the table gives each setup's median round and, beside it, its ratio to the median of
# `off`.
#
# DEVICE=file (default): this machine's disk through a filled 2 GiB file.
# DEVICE=emulated: the emulated slow SSD (20k random reads/s, 4 channels).
#
# BUSY=1: a busy loop takes one of the host's cores throughout, as another tenant of a
# shared host would; the clients then do not always get the CPU when their reads complete.
#
# Usage: scripts/bench-equal.sh [SECONDS]   (TENANTS="8 32" ROUNDS=3 BUSY=0)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

secs=${1:-10}
rounds=${ROUNDS:-3}
device=${DEVICE:-file}

case $device in
file)
    echo "filling $work/disk.img (2 GiB)"
    fill_file "$work/disk.img" 2G
    device_section='path = "disk.img"' ;;
emulated)
    device_section=$(emulated_device 2GiB) ;;
*) echo "DEVICE must be file or emulated"; exit 1 ;;
esac

# config N QOS_SECTION: N volumes of 64 MiB.
config() {
    printf '[device]\n%s\n%s\n[control]\nsocket = "control.sock"\n' "$device_section" "$2"
    for i in $(seq 0 $(($1 - 1))); do
        printf '[[volume]]\nname = "v%s"\nsocket = "v%s.sock"\noffset = "%sMiB"\nsize = "64MiB"\n' \
            "$i" "$i" $((i * 64))
    done
}

# daemon_round N QOS_SECTION: the tenants' IOPS together and the widest distance from
# their mean (%), one line.
daemon_round() {
    local tenants="" i
    start_daemon "$(config "$1" "$2")"
    for i in $(seq 0 $(($1 - 1))); do
        tenants+=" --tenant socket=v$i.sock,name=v$i,rw=randread,bs=4k,iodepth=4"
    done
    (cd "$work" && "$bin" bench --runtime "${secs}s" --ramp 2s $tenants --json) > "$work/round.json"
    stop_daemon
    python3 - "$work/round.json" <<'EOF'
import json, sys
iops = [r["iops"] for r in json.load(open(sys.argv[1]))["results"]]
mean = sum(iops) / len(iops)
print(f"{sum(iops):.0f} {100 * max(abs(x / mean - 1) for x in iops):.1f}")
EOF
}

# fio_round N: fio's N jobs at QD4 on the same ranges, the same line.
fio_round() {
    local jobs=() i
    for i in $(seq 0 $(($1 - 1))); do
        jobs+=(--name="v$i" --offset="$((i * 64))M" --size=64M)
    done
    fio --filename="$work/disk.img" --rw=randread --bs=4k --iodepth=4 --direct=1 \
        --ioengine=io_uring --time_based --runtime="$secs" --ramp_time=2 \
        --output-format=json "${jobs[@]}" > "$work/fio.json"
    python3 - "$work/fio.json" <<'EOF'
import json, sys
iops = [j["read"]["iops"] for j in json.load(open(sys.argv[1]))["jobs"]]
mean = sum(iops) / len(iops)
print(f"{sum(iops):.0f} {100 * max(abs(x / mean - 1) for x in iops):.1f}")
EOF
}

if [ "${BUSY:-0}" = 1 ]; then
    (while :; do :; done) &
    started_pids+=($!)   # the exit trap (scripts/lib.sh) stops it
fi

setups=(off defaults all)
[ "$device" = file ] && setups+=(fio)
echo "equal tenants, QD4 4 KiB random reads, ${secs}s, $rounds alternating rounds, device $device, busy loop ${BUSY:-0}, commit $(git rev-parse --short HEAD)"
echo "| tenants | setup | IOPS together (median) | against off | widest from the mean | rounds |"
echo "|---|---|---|---|---|---|"
for n in ${TENANTS:-8 32}; do
    rm -f "$work/config.toml.state.json"
    declare -A got=()
    for _ in $(seq "$rounds"); do
        for s in "${setups[@]}"; do
            case $s in
            off) line=$(daemon_round "$n" $'[device.qos]\nenable = false') ;;
            defaults) line=$(daemon_round "$n" '') ;;
            all) line=$(daemon_round "$n" $'[device.qos]\nprotect = "all"') ;;
            fio) line=$(fio_round "$n") ;;
            esac
            got[$s]+="$line;"
        done
    done
    for s in "${setups[@]}"; do
        python3 - "$n" "$s" "${got[off]}" "${got[$s]}" <<'EOF'
import statistics, sys
n, name, off, this = sys.argv[1:]
rounds = lambda t: [tuple(map(float, r.split())) for r in t.strip(";").split(";")]
base = statistics.median(x for x, _ in rounds(off))
mine = rounds(this)
med = statistics.median(x for x, _ in mine)
spread = statistics.median(y for _, y in mine)
each = ", ".join(f"{x:,.0f}" for x, _ in mine)
print(f"| {n} | {name} | {med:,.0f} | {med / base:.2f} | {spread:.1f} % | {each} |")
EOF
    done
    unset got
done
