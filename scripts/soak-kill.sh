#!/usr/bin/env bash
# Crash soak: two QEMU guests (TCG, `reconnect=1`) write 4 KiB and 256 KiB blocks at QD32
# with crc32c verify (`verify_backlog`: written blocks are read back and checked while the
# job runs) on two volumes of the emulated slow device, where small writes overtake large
# ones, for DURATION (default 10m). Meanwhile the daemon is killed with SIGKILL every 2-6 s
# (random) and restarted at once on the same config. Passes when both guests' fio exit 0
# with no verify error and no I/O error, and neither console shows a hung task. Logs stay in
# $WORK (target/soak-kill).
#   scripts/soak-kill.sh                 # the run recorded in BENCHMARKS.md
#   DURATION=1m scripts/soak-kill.sh     # a quick look
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${DURATION:-10m}
work=${WORK:-$PWD/target/soak-kill}
secs=$(python3 -c "import sys; v=sys.argv[1]; u={'s':1,'m':60,'h':3600}[v[-1]]; print(int(float(v[:-1])*u))" "$duration")
cargo build --release --quiet
bin=$PWD/target/release/vhost-iocost
eval "$(scripts/guest/prepare.sh target/guest-cache | grep -E '^(KERNEL|INITRD)=')"

rm -rf "$work" && mkdir -p "$work"
{
    echo "[device]"
    echo "path = \"disk.img\""
    echo "create_size = \"640MiB\""
    echo "kind = \"emulated\""
    echo "direct = false"
    echo "[device.emulated]"
    cat configs/emulated/slow-ssd.toml
    echo "channels = 4"
    echo "base_latency = \"50us\""
    for i in 0 1; do
        echo "[[volume]]"
        echo "name = \"vm$i\""
        echo "socket = \"vm$i.sock\""
        echo "offset = \"$(( i * 256 ))MiB\""
        echo "size = \"256MiB\""
        echo "num_queues = 2"
    done
} > "$work/config.toml"

start_daemon() {
    (cd "$work" && exec "$bin" run --config config.toml 2>>daemon.log) &
    daemon=$!
    for _ in $(seq 200); do
        [ -S "$work/vm1.sock" ] && grep -q "vhost-iocost running" "$work/daemon.log" && return
        sleep 0.05
    done
}
: > "$work/daemon.log"
start_daemon
guests=()
for i in 0 1; do
    scripts/guest/run-guest.sh --socket "$work/vm$i.sock" --log "$work/vm$i.console.log" \
        --kernel "$KERNEL" --initrd "$INITRD" --reconnect --timeout $(( secs + 300 )) -- \
        fio.name=soak fio.filename=/dev/vda fio.ioengine=libaio fio.direct=1 \
        fio.rw=randwrite fio.bssplit=4k/50:256k/50 fio.iodepth=32 fio.size=256M \
        fio.time_based fio.runtime=$secs fio.verify=crc32c fio.verify_backlog=256 \
        fio.verify_fatal=1 </dev/null >"$work/vm$i.out" 2>&1 &
    guests+=($!)
done
trap 'kill $daemon "${guests[@]}" 2>/dev/null || true' EXIT

# Kill and restart until fio's runtime is over.
kills=0
end=$(( SECONDS + secs ))
while [ $SECONDS -lt $end ]; do
    sleep "$(python3 -c 'import random; print(round(random.uniform(2, 6), 2))')"
    kill -9 "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
    kills=$(( kills + 1 ))
    start_daemon
done
status=0
for i in 0 1; do
    wait "${guests[$i]}" || { echo "guest vm$i: run-guest.sh failed (see $work/vm$i.console.log)"; status=1; }
    c=$work/vm$i.console.log
    rc=$(grep -o 'END-JSON rc=[0-9]*' "$c" | tail -1 | cut -d= -f2)
    errors=$(grep -cE 'verify: bad|io_u error|hung_task|blocked for more than' "$c" || true)
    ios=$(python3 - "$c" <<'PY'
import json, sys
text = open(sys.argv[1], errors="replace").read()
body = text.split("HARNESS: BEGIN-JSON", 1)[-1].split("HARNESS: END-JSON", 1)[0]
body = body[body.index("{"):]
j = json.loads(body)["jobs"][0]
print(j["write"]["total_ios"], j["read"]["total_ios"], j["error"])
PY
)
    echo "guest vm$i: fio rc=${rc:-none}; writes, verified reads, fio error: $ios; error lines: $errors"
    [ "${rc:-1}" = 0 ] && [ "$errors" = 0 ] || status=1
done
resubmitted=$(grep -c "resubmitting" "$work/daemon.log" || true)
echo "daemon: killed $kills times in $duration; $resubmitted queue recoveries resubmitted requests"
[ $status = 0 ] && echo "PASS" || echo "FAIL"
exit $status
