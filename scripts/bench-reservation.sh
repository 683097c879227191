#!/usr/bin/env bash
# A reservation beside heavy writers, on the emulated slow device (20k random reads/s,
# 200 MB/s of writes, 4 channels; its backing file in /dev/shm) with the controller free:
# a reader reserving 6,000 reads per second (30 % of the device), or a group of two
# readers reserving it together, beside three backlogged 1 MiB QD8 writers of equal
# weight. For each setup: the readers' IOPS (mean, and the worst second after the first
# two) against the reservation, and the writers' MiB/s.
#
#   off        QoS off: the writers' queue decides
#   weights    the defaults, no reservation: the readers' weight share (25 %, 5,000)
#   volume     the defaults, `reserve = { iops = 6000 }` on the reader (QD DEPTH)
#   group      the defaults, the two readers (QD DEPTH/2 each) in a group reserving it
#
# Setups run in turn, ROUNDS times (alternating, so the host's drift hits each alike);
# each column is the median of the rounds, and the rounds' worst seconds are listed.
#
# Usage: scripts/bench-reservation.sh [SECONDS]   (DEPTH=4 ROUNDS=3)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

secs=${1:-10}
depth=${DEPTH:-4}
rounds=${ROUNDS:-3}
shm=$(mktemp -d /dev/shm/vhost-iocost-reservation.XXXXXX)
trap 'cleanup; rm -rf "$shm"' EXIT
device_section=$(emulated_device 1GiB | sed "s|path = \"disk.img\"|path = \"$shm/disk.img\"|")

vol() { printf '[[volume]]\nname = "%s"\nsocket = "%s.sock"\noffset = "%sMiB"\nsize = "64MiB"\n%s\n' "$1" "$1" "$2" "${3:-}"; }
nl=$'\n'
writers="$(vol w1 256)$nl$(vol w2 384)$nl$(vol w3 512)"

# run QOS VOLUMES READERS...: one round, printed as "mean worst writers_mib" (the
# readers' IOPS after the first 2 s, their worst second, the writers' MiB/s);
# READERS are `name:depth`.
run() {
    local qos=$1 volumes=$2
    shift 2
    start_daemon "$(printf '[device]\n%s\n%s\n[control]\nsocket = "control.sock"\n%s\n%s\n' \
        "$device_section" "$qos" "$volumes" "$writers")"
    local tenants=() r
    for r in "$@"; do
        tenants+=(--tenant "socket=${r%%:*}.sock,name=${r%%:*},rw=randread,bs=4k,iodepth=${r##*:}")
    done
    for w in w1 w2 w3; do
        tenants+=(--tenant "socket=$w.sock,name=$w,rw=write,bs=1M,iodepth=8")
    done
    (cd "$work" && "$bin" bench --runtime "${secs}s" --ramp 0s "${tenants[@]}" --json) > "$work/run.json"
    stop_daemon
    python3 - "$work/run.json" "$#" <<'EOF'
import json, sys
results = json.load(open(sys.argv[1]))["results"]
nreaders = int(sys.argv[2])
readers, writers = results[:nreaders], results[nreaders:]
seconds = min(len(r["per_second"]) for r in readers)
per_second = [sum(r["per_second"][s]["iops"] for r in readers) for s in range(seconds)]
after = per_second[2:]
print(f"{sum(after) / len(after):.0f} {min(after):.0f} {sum(w['mib_per_s'] for w in writers):.1f}")
EOF
}

labels=("QoS off" "defaults, no reservation" "defaults, a volume reserving 6,000"
        "defaults, a group of two reserving 6,000")
# round_of I: one round of setup I.
round_of() {
    case $1 in
    0) run $'[device.qos]\nenable = false' "$(vol r 0)" "r:$depth" ;;
    1) run "" "$(vol r 0)" "r:$depth" ;;
    2) run "" "$(vol r 0 'reserve = { iops = 6000 }')" "r:$depth" ;;
    3) run "" \
        "$(printf '[[group]]\nname = "g"\nreserve = { iops = 6000 }')$nl$(vol r 0 'group = "g"')$nl$(vol s 64 'group = "g"')" \
        "r:$((depth / 2))" "s:$((depth / 2))" ;;
    esac
}

got=("" "" "" "")
for _ in $(seq "$rounds"); do
    for i in 0 1 2 3; do
        got[i]+="$(round_of "$i");"
    done
done

echo "reservation of 6,000 reads/s beside three 1 MiB QD8 writers, ${secs}s, emulated slow device, $rounds alternating rounds, commit $(git rev-parse --short HEAD)"
echo "| setup | readers' IOPS after 2 s (mean) | worst second | worst second / reservation | writers MiB/s | worst seconds of the rounds |"
echo "|---|---|---|---|---|---|"
for i in 0 1 2 3; do
    python3 - "${labels[i]}" "${got[i]}" <<'EOF'
import statistics, sys
label, text = sys.argv[1:]
rounds = [tuple(map(float, r.split())) for r in text.strip(";").split(";")]
med = lambda k: statistics.median(r[k] for r in rounds)
each = ", ".join(f"{r[1]:,.0f}" for r in rounds)
print(f"| {label} | {med(0):,.0f} | {med(1):,.0f} | {100 * med(1) / 6000:.1f} % | {med(2):,.1f} | {each} |")
EOF
done
