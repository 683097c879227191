#!/usr/bin/env bash
# The IOCost stacking scenario: READERS latency-sensitive tenants (QD1 4 KiB random reads,
# each paced at RATE IOPS) beside one unpaced 1 MiB QD8 sequential writer, all on one
# device. For each setup it counts the reader-seconds whose p99 is above SLO_US and the
# writer's throughput:
#
#   off       the daemon with QoS off
#   defaults  the daemon with no [device.model] and no targets (calibrated at start-up)
#   profile   (DEVICE=file) the tables `vhost-iocost profile --destructive --quick` prints
#             for the file, pasted as they are (on the emulated device `defaults` is the
#             same rule: calibration and profile share it)
#   tuned     the same calibrated model, with the readers' SLO as the read target
#             (rpct = 99, rlat = SLO_US)
#   latency   the defaults, with the readers in the latency class and the SLO as their
#             own target (class = "latency", latency_target = "p99 SLO_US")
#   latency only  the same without device-wide latency targets (rpct = wpct = 0): only
#             the readers' own targets steer vrate
#   cap       no QoS, the writer held by a static cap at the throughput `defaults` gave it
#
# ON=4s OFF=4s: the readers come and go (each issues for ON, then idles for OFF); a
#   second counts only where the reader completed reads in it. Two static caps then: one
#   at the writer's throughput under `defaults` in the seconds the readers were on (what
#   a cap must allow at most to protect them), one at its throughput over the whole run
#   (a cap giving the writer as much as `defaults` did).
#
# DEVICE=emulated (default): the daemon's emulated device (a slow SSD: 20k random reads/s,
#   200 MB/s of writes, 4 channels), its backing file in /dev/shm; the cap is the load
#   generator pacing the writer (a perfect token bucket, the best a static cap can do).
# DEVICE=file: this machine's disk through a filled file; the cap is qemu-storage-daemon
#   serving the same byte ranges of the same file, the writer behind a throttle group
#   (`limits.bps-write`, QEMU's default burst).
#
# Usage: scripts/bench-stacking.sh [SECONDS]   (READERS=4 RATE=500 SLO_US=1000 ON= OFF=)
#   RESULTS=DIR keeps in DIR, for each setup, the bench JSON (per-second series), the
#   daemon's log (with RUST_LOG=info,vhost_iocost::daemon=debug: every planner period) and
#   `ctl stats --json` at the end of the run (per volume: throttled requests, wait times).
#   CAPS="150 170" adds static caps at these MiB/s (to trace the cap's frontier).
#   SETUPS="off defaults cap" runs only these setups (default: all; `cap` needs `defaults`).
#   DEFAULTS="[device.model]..." adds these lines to the defaults' config (an A/B of a rule).
#   ROUNDS=N runs every setup N times, alternating (setup by setup, round after round), and
#   ends with each setup's medians over the rounds; each round's caps are set from that
#   round's `defaults`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

secs=${1:-12}
rounds=${ROUNDS:-1}
readers=${READERS:-4}
rate=${RATE:-500}
slo=${SLO_US:-1000}
device=${DEVICE:-emulated}
duty=""
if [ -n "${ON:-}${OFF:-}" ]; then duty=",on=${ON:?ON and OFF go together},off=${OFF:?ON and OFF go together}"; fi

case $device in
emulated)
    # The emulated device's backing file in memory: on the host's disk, writeback of the
    # writer's dirty pages stalls the daemon for a second now and then, the host disk's
    # noise leaking into the device under test.
    shm=$(mktemp -d /dev/shm/vhost-iocost-stacking.XXXXXX)
    trap 'cleanup; rm -rf "$shm"' EXIT
    device_section=$(emulated_device 1GiB | sed "s|path = \"disk.img\"|path = \"$shm/disk.img\"|") ;;
file)
    echo "filling $work/disk.img (1 GiB)"
    fill_file "$work/disk.img" 1G
    device_section='path = "disk.img"' ;;
*) echo "DEVICE must be emulated or file"; exit 1 ;;
esac

# reader_volumes EXTRA: the readers' and the writer's [[volume]] tables, EXTRA added to
# each reader's.
reader_volumes() {
    local i
    for i in $(seq 0 $((readers - 1))); do
        printf '[[volume]]\nname = "r%s"\nsocket = "r%s.sock"\noffset = "%sMiB"\nsize = "64MiB"\n%s\n' \
            "$i" "$i" $((i * 64)) "$1"
    done
    printf '[[volume]]\nname = "writer"\nsocket = "writer.sock"\noffset = "512MiB"\nsize = "512MiB"\n'
}
volumes=$(reader_volumes "")

# run NAME LABEL [WRITER_RATE_IOPS]: the load against the sockets in $work (results in
# $work/NAME.json); prints one table row.
run() {
    local tenants="" writer_rate=${3:+,rate_iops=$3}
    for i in $(seq 0 $((readers - 1))); do
        tenants+=" --tenant socket=r$i.sock,name=r$i,rw=randread,bs=4k,iodepth=1,rate_iops=$rate$duty"
    done
    (cd "$work" && "$bin" bench --runtime "${secs}s" --ramp 2s $tenants \
        --tenant "socket=writer.sock,name=writer,rw=write,bs=1M,iodepth=8$writer_rate" \
        --json) > "$work/$1.json"
    if [ -n "${RESULTS:-}" ]; then
        mkdir -p "$RESULTS" && cp "$work/$1.json" "$RESULTS/"
        if [ -f "$work/daemon.log" ]; then cp "$work/daemon.log" "$RESULTS/$1.log"; fi
    fi
    local device_stats='{}'
    if [ -S "$work/control.sock" ]; then
        device_stats=$("$bin" ctl --socket "$work/control.sock" stats --json 2>/dev/null || echo "{}")
        if [ -n "${RESULTS:-}" ]; then printf '%s\n' "$device_stats" > "$RESULTS/$1.stats.json"; fi
    fi
    python3 - "$work/$1.json" "$2" "$slo" "$device_stats" "$1" "$work/rows.jsonl" <<'EOF'
import json, statistics, sys
path, name, slo = sys.argv[1], sys.argv[2], int(sys.argv[3])
key, rows = sys.argv[5], sys.argv[6]
device = json.loads(sys.argv[4]).get("device", {})
periods = device.get("contended_periods", 0)
met = "" if not periods else f"{100 * (1 - device['contended_periods_missed'] / periods):.0f} %"

results = json.load(open(path))["results"]
missed = total = 0
worst = 0.0
readers_on = set()
for r in results:
    seconds = r["per_second"][2:]          # after the ramp
    if r["name"] == "writer":
        writer = r["mib_per_s"]
        mibs = [s["mib_per_s"] for s in seconds]
        cov = statistics.pstdev(mibs) / max(statistics.mean(mibs), 1e-9)
        writer_seconds = seconds
    else:
        # Only seconds in which the reader completed reads count (readers come and go).
        active = [s for s in seconds if s["iops"] > 0]
        readers_on.update(round(s["t_s"]) for s in active)
        missed += sum(1 for s in active if s["p99_us"] > slo)
        total += len(active)
        worst = max(worst, r["lat_p99_us"])
# The writer's throughput in the seconds the readers were on (all of them when steady).
on = [s["mib_per_s"] for s in writer_seconds if round(s["t_s"]) in readers_on]
with open(path + ".writer_when_readers_on", "w") as f:
    f.write(str(statistics.mean(on) if on else writer))
print(f"| {name} | {missed} of {total} | {worst:,.0f} | {writer:,.1f} | {cov:.3f} | {met} |")
with open(rows, "a") as f:
    met_pct = 100 * (1 - device["contended_periods_missed"] / periods) if periods else None
    f.write(json.dumps({"key": key, "label": name, "missed": missed, "total": total,
                        "worst": worst, "writer": writer, "cov": cov, "met": met_pct}) + "\n")
EOF
}

# daemon_config QOS_SECTION [VOLUMES]
daemon_config() {
    printf '[device]\n%s\n%s\n[control]\nsocket = "control.sock"\n%s\n' "$device_section" "$1" "${2:-$volumes}"
}

echo "stacking: $readers readers at $rate IOPS (QD1 4 KiB), one 1 MiB QD8 writer, ${secs}s, SLO p99 ${slo} us, device $device"
echo "| setup | reader-seconds over the SLO | worst reader p99 (µs) | writer MiB/s | writer per-second CoV | periods meeting the daemon's read target |"
echo "|---|---|---|---|---|---|"
# wanted SETUP: whether SETUPS selects SETUP.
wanted() { [ -z "${SETUPS:-}" ] || [[ " $SETUPS " == *" $1 "* ]]; }

# one_round: every selected setup once, each on a fresh daemon.
one_round() {

if wanted off; then
start_daemon "$(daemon_config '[device.qos]
enable = false')"
run off off
stop_daemon
fi
rm -f "$work/config.toml.state.json"
start_daemon "$(daemon_config "${DEFAULTS:-}")"
run defaults defaults
stop_daemon
if wanted latency; then
start_daemon "$(daemon_config '' "$(reader_volumes "class = \"latency\"
latency_target = \"p99 ${slo}us\"")")"
run latency "readers in the latency class (p99 ${slo} µs)"
stop_daemon
fi
if wanted latency-only; then
start_daemon "$(daemon_config '[device.qos]
rpct = 0.0
wpct = 0.0' "$(reader_volumes "class = \"latency\"
latency_target = \"p99 ${slo}us\"")")"
run latency-only "readers in the latency class, no device-wide target"
stop_daemon
fi
if [ "$device" = file ] && wanted profile; then
    "$bin" profile --path "$work/disk.img" --destructive --quick --out "$work/profile.toml" \
        >/dev/null 2>"$work/profile.log"
    start_daemon "$(daemon_config "$(grep -v '^#' "$work/profile.toml")")"
    run profile "profile's suggestion ($(grep '^rlat' "$work/profile.toml" | tr -d '"'))"
    stop_daemon
fi
if wanted tuned; then
start_daemon "$(daemon_config "[device.qos]
rpct = 99.0
rlat = \"${slo}us\"")"
run tuned "tuned (p99 ${slo} µs)"
stop_daemon
fi
overall_mibs=$(python3 -c "import json; print(max(1, round([r for r in json.load(open('$work/defaults.json'))['results'] if r['name'] == 'writer'][0]['mib_per_s'])))")
cap_levels=$overall_mibs
if [ -n "$duty" ]; then
    cap_levels="$(python3 -c "print(max(1, round(float(open('$work/defaults.json.writer_when_readers_on').read()))))") $overall_mibs"
fi
auto_caps=$(wc -w <<<"$cap_levels")
wanted cap || { cap_levels=""; auto_caps=0; }
cap_levels="$cap_levels ${CAPS:-}"
nth=0
for cap_mibs in $cap_levels; do
    # The caps set from this round's defaults are keyed by their place, so that rounds
    # whose defaults gave different rates line up in the medians; CAPS by their rate.
    nth=$((nth + 1))
    key=cap$cap_mibs
    [ "$nth" -le "$auto_caps" ] && key=cap-auto$nth
if [ "$device" = emulated ]; then
    start_daemon "$(daemon_config '[device.qos]
enable = false')"
    run "$key" "cap at ${cap_mibs} MiB/s (paced writer)" "$cap_mibs"
    stop_daemon
else
    command -v qemu-storage-daemon >/dev/null || { echo "qemu-storage-daemon is required (apt-get install qemu-system-x86)"; exit 1; }
    args=(--blockdev "driver=file,node-name=disk,filename=$work/disk.img,cache.direct=on,aio=io_uring"
          --object "throttle-group,id=cap,limits.bps-write=$((cap_mibs << 20))")
    for i in $(seq 0 $((readers - 1))); do
        args+=(--blockdev "driver=raw,node-name=r$i,file=disk,offset=$((i << 26)),size=$((1 << 26))"
               --export "type=vhost-user-blk,id=e$i,node-name=r$i,writable=on,addr.type=unix,addr.path=$work/r$i.sock")
    done
    args+=(--blockdev "driver=raw,node-name=w,file=disk,offset=$((512 << 20)),size=$((512 << 20))"
           --blockdev "driver=throttle,node-name=wcap,throttle-group=cap,file=w"
           --export "type=vhost-user-blk,id=ew,node-name=wcap,writable=on,addr.type=unix,addr.path=$work/writer.sock")
    qemu-storage-daemon "${args[@]}" 2>"$work/qsd.log" &
    qsd=$!
    for _ in $(seq 100); do [ -S "$work/writer.sock" ] && break; sleep 0.1; done
    run "$key" "qemu-storage-daemon, writer capped at ${cap_mibs} MiB/s" || true
    kill $qsd; wait $qsd 2>/dev/null || true
    rm -f "$work"/*.sock
fi
done
}

rm -f "$work/rows.jsonl"
for round in $(seq "$rounds"); do
    if [ "$rounds" -gt 1 ]; then echo "| round $round of $rounds | | | | | |"; fi
    one_round
done
if [ "$rounds" -gt 1 ]; then
    echo
    echo "Medians of $rounds alternating rounds:"
    echo
    python3 - "$work/rows.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print("| setup | reader-seconds over the SLO | worst reader p99 (µs) | writer MiB/s | writer per-second CoV | periods meeting the daemon's read target |")
print("|---|---|---|---|---|---|")
for key in dict.fromkeys(r["key"] for r in rows):
    rs = [r for r in rows if r["key"] == key]
    med = lambda field: statistics.median(r[field] for r in rs)
    label = " / ".join(dict.fromkeys(r["label"] for r in rs))
    mets = [r["met"] for r in rs if r["met"] is not None]
    met = f"{statistics.median(mets):.0f} %" if mets else ""
    print(f"| {label} | {med('missed'):g} of {med('total'):g} | {med('worst'):,.0f} "
          f"| {med('writer'):,.1f} | {med('cov'):.3f} | {met} |")
EOF
fi
